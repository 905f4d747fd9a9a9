"""Research reports: does every topic keep its section, and its answer, under a token budget?

Ten HotpotQA (distractor) dev questions are ten research topics of one `ResearchSession`; each
question's ten paragraphs are its search results (`https://en.wikipedia.org/wiki/<title>`). After
`end_of_research`, `session.report(budget=B)` (rules, no LLM) is measured at each budget:

* sections: topics whose section holds at least one finding;
* answer: topics whose gold answer (whole words, case-insensitive) is in their own section;
* footnotes: cited footnotes without a definition (must be 0), and tokens against the budget.

Questions answered "yes"/"no" are left out (the answer is not a string of the pages). The items make
groups of ten in file order; `--groups` picks which (the first half of the groups for tuning, the
rest for checking). Beside it, today's baseline: the shipped `topics` pipeline on the same pages with
each page's question as its topic.

    python benchmarks/research_report.py [--budgets 3000,1500] [--groups 0,1,2,3]
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from evaldata import eval_dir, read_jsonl

import compactor
from compactor.apps.research import ResearchSession
from compactor.apps.research_report import unresolved_footnotes
from compactor.text.tokens import get_counter

GROUP = 10


def items() -> list[dict[str, Any]]:
    rows = read_jsonl(eval_dir() / "hotpotqa-distractor-sample" / "qa.jsonl")
    return [r for r in rows if r["answers"][0].strip().lower() not in ("yes", "no")]


def pages(row: dict[str, Any]) -> list[dict[str, str]]:
    return [{"url": "https://en.wikipedia.org/wiki/" + c["title"].replace(" ", "_"), "title": c["title"],
             "content": c["text"]} for c in row["contexts"]]


def has_answer(text: str, answers: list[str]) -> bool:
    flat = " ".join(text.split()).lower()
    return any(re.search(r"(?<!\w)" + re.escape(" ".join(a.split()).lower()) + r"(?!\w)", flat)
               for a in answers)


def session_for(group: list[dict[str, Any]]) -> ResearchSession:
    session = ResearchSession([{"role": "user", "content": "Answer these questions."}],
                              topic=group[0]["question"])
    for position, row in enumerate(group):
        session.record_search_results(pages(row))
        if position + 1 < len(group):
            session.change_topic(group[position + 1]["question"], "next question")
    session.end_of_research()
    return session


def section_of(text: str, heading: str) -> str:
    """The text under `### heading` up to the next heading (for the baseline's `## topic`)."""
    lines = text.split("\n")
    start = next((i for i, line in enumerate(lines) if line.lstrip("#").strip() == heading.strip()
                  and line.startswith("#")), None)
    if start is None:
        return ""
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("#")), len(lines))
    return "\n".join(lines[start + 1:end])


def measure(group: list[dict[str, Any]], budgets: list[int]) -> dict[int, dict[str, Any]]:
    counter = get_counter()
    session = session_for(group)
    out: dict[int, dict[str, Any]] = {}
    for budget in budgets:
        report = session.report(budget=budget)
        sections = report.sections
        baseline = compactor.compress([{**p, "topic": r["question"]} for r in group for p in pages(r)],
                                      pipeline="topics", budget=budget)
        base_sections = [section_of(baseline, " ".join(r["question"].split())) for r in group]
        out[budget] = {
            "sections": sum(bool(s.strip()) for s in sections),
            "answer": sum(has_answer(s, r["answers"]) for s, r in zip(sections, group, strict=True)),
            "unresolved": len(unresolved_footnotes(report)),
            "tokens": counter.count(report),
            "base_sections": sum(bool(s.strip()) for s in base_sections),
            "base_answer": sum(has_answer(s, r["answers"])
                               for s, r in zip(base_sections, group, strict=True)),
            "base_unresolved": len(unresolved_footnotes(baseline)),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--budgets", default="3000,1500")
    parser.add_argument("--groups", default=None, help="comma-separated group numbers (default: all)")
    args = parser.parse_args()
    budgets = [int(b) for b in args.budgets.split(",")]
    rows = items()
    groups = [rows[i:i + GROUP] for i in range(0, len(rows) - GROUP + 1, GROUP)]
    chosen = [int(g) for g in args.groups.split(",")] if args.groups else list(range(len(groups)))
    print("group budget | sections answer unresolved tokens | baseline(topics): sections answer unresolved")
    totals: dict[int, list[int]] = {b: [0, 0, 0] for b in budgets}
    started = time.perf_counter()
    for g in chosen:
        for budget, m in measure(groups[g], budgets).items():
            totals[budget][0] += m["answer"]
            totals[budget][1] += m["base_answer"]
            totals[budget][2] += m["sections"] == GROUP and m["answer"] >= 8 and m["unresolved"] == 0
            print(f"{g:5d} {budget:6d} | {m['sections']:2d}/10 {m['answer']:2d}/10 {m['unresolved']:3d} "
                  f"{m['tokens']:5d} | {m['base_sections']:2d}/10 {m['base_answer']:2d}/10 "
                  f"{m['base_unresolved']:3d}")
    for budget, (answer, base, met) in totals.items():
        print(f"budget {budget}: answer in own section {answer}/{GROUP * len(chosen)} "
              f"(baseline {base}); groups meeting the target {met}/{len(chosen)}")
    print(f"{time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
