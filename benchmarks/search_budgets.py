"""Every search strategy of `ContextCompacter` at a session budget, on the items search_check.py uses.

The first 60 HotpotQA (distractor) and MuSiQue dev items of ``../shared/eval`` (or
``$COMPACTOR_EVAL_DIR``), each fed to a fresh session as two batches of search results with the
question as the query, as ``../shared/bench/search_check.py`` does. Per budget (none: the pipeline's
own; then 300 and 1000 tokens) and strategy: the checklist text's tokens as a share of the input
(mean), how many checklists are over the budget, and how many items keep a gold answer in the
checklist text and in the default report context.

Run: ``python benchmarks/search_budgets.py``
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from evaldata import eval_dir, read_jsonl

from compactor import ContextCompacter
from compactor.text.tokens import get_counter

STRATEGIES = ("fact_centric", "chunk_filtering", "summarization")


def norm(text: str) -> str:
    return " ".join(text.lower().split())


def main() -> None:
    sets = ("hotpotqa-distractor-sample", "musique-sample")
    items = list(itertools.islice(itertools.chain.from_iterable(
        read_jsonl(eval_dir() / name / "qa.jsonl") for name in sets), 60))
    counter = get_counter("cl100k_base")
    print(f"{len(items)} items, two batches each")
    for budget in (None, 300, 1000):
        for strategy in STRATEGIES:
            in_checklist = in_report = over = 0
            shares = []
            for item in items:
                results = [(f"https://en.wikipedia.org/wiki/{c['title'].replace(' ', '_')}",
                            f"{c['title']}\n{c['text']}") for c in item["contexts"]]
                compacter = ContextCompacter(strategy, query=item["question"], budget=budget)
                half = len(results) // 2
                compacter.process_search_results(results[:half])
                compacter.process_search_results(results[half:])
                text = compacter.checklist_text()
                tokens = counter.count(text)
                over += budget is not None and tokens > budget
                shares.append(tokens / sum(counter.count(page) for _, page in results))
                answers = [norm(a) for a in item["answers"]]
                in_checklist += any(a in norm(text) for a in answers)
                in_report += any(a in norm(compacter.reconstruct_report_context()) for a in answers)
            n = len(items)
            share = 100 * sum(shares) / n
            print(f"budget {budget or 'default'} {strategy}: checklist {share:.1f}% of input, over budget "
                  f"{over}/{n}; answer in checklist {in_checklist}/{n}, in report {in_report}/{n}",
                  flush=True)


if __name__ == "__main__":
    main()
