"""Prompt injection: techniques caught, ordinary sentences flagged, hostile LLM replies refused.

What is measured

    * techniques   every case of tests/data/injection/techniques.jsonl (a page, HTML or text, with
      an injection inside ordinary content) goes through ``compactor.compress(page,
      pipeline="generic")``; a case is caught when no part of its injected phrase reaches the
      output. Parts are the phrase's clauses of at least 12 characters (split at . ! ? : ; and their
      Chinese forms), compared on ``compactor.text.confusables.plain`` text (invisible characters
      out, look-alikes folded, case and blanks aside), so a clause that survives with its
      zero-width characters still counts as reaching the output. Reported per part: ``dev`` (the
      cases the rules were tuned on) and ``heldout`` (cases written before the rules and not used
      to tune them).
    * false positives  the share of sentences of ordinary text that `classify.injection` cuts: the
      text of each page (the HTML cleaner's output for web pages, the article for news) is cut into
      paragraphs, each paragraph scanned as one chunk (at least as big as the generic pipeline's
      96-token chunks, so weak signs add up at least as much), and a flagged paragraph's sentences
      that overlap its injected spans count as flagged. Data: ../shared/eval web-article-extraction
      (91 pages), web-readability-testpages (47 pages), summarization-frank-cnndm-xsum (250 news
      articles) and, for Chinese, CMRC 2018 passages (the first 300).
    * guard  tests/data/injection/guard_replies.jsonl: hostile LLM replies (a summary with an
      instruction in it, or only the instruction) for an ordinary input; each must be refused by
      `compactor.llm.guard.review` for instruction-like text. Honest replies: the reference
      summaries of the first 50 news articles against their article; the false-refusal rate counts
      those the instruction check refuses (and, for information, those any check refuses).

Usage: python benchmarks/injection.py [--show] [--limit N]
"""

from __future__ import annotations

import argparse
import gzip
import sys
import time
from pathlib import Path

import regex

from compactor import compress
from compactor.llm.guard import review
from compactor.plugins.classify import injected_spans, load_rules, scan
from compactor.plugins.clean.html import extract_main_text
from compactor.text.confusables import plain
from compactor.text.sentences import split_sentences
from compactor.text.tokens import get_counter

sys.path.insert(0, str(Path(__file__).resolve().parent))
from evaldata import REPO_ROOT, eval_dir, read_jsonl

DATA = REPO_ROOT / "tests" / "data" / "injection"
_CLAUSE = regex.compile(r"[.!?:;。！？：；]+")
THRESHOLD = 0.8  # classify.injection's default


def phrase_parts(phrase: str) -> list[str]:
    """The clauses of an injected phrase that must not reach the output (the whole phrase when it
    has no clause of 12 characters or more)."""
    parts = [p for p in (plain(c) for c in _CLAUSE.split(phrase)) if len(p) >= 12]
    return parts or [plain(phrase)]


def caught(case: dict, output: str) -> bool:
    """No part of the case's phrase is in the output."""
    seen = plain(output)
    return not any(part in seen for part in phrase_parts(case["phrase"]))


def techniques(show: bool) -> dict[str, tuple[int, int]]:
    """{split: (caught, total)}."""
    result: dict[str, tuple[int, int]] = {}
    for case in read_jsonl(DATA / "techniques.jsonl"):
        output = compress(case["page"], pipeline="generic")
        ok = caught(case, output)
        done, total = result.get(case["split"], (0, 0))
        result[case["split"]] = (done + ok, total + 1)
        if show and not ok:
            print(f"  MISSED {case['id']} {case['technique']}: {case['phrase'][:90]!r}")
    return result


def _html_text(folder: Path, row: dict) -> str:
    path = folder / row["html_path"]
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return extract_main_text(raw.decode("utf-8", errors="replace")).text


def datasets(limit: int) -> dict[str, list[str]]:
    """Ordinary texts per dataset."""
    root = eval_dir()
    out: dict[str, list[str]] = {}
    for name in ("web-article-extraction", "web-readability-testpages"):
        folder = root / name
        out[name] = [_html_text(folder, row) for row in list(read_jsonl(folder / "pages.jsonl"))[:limit]]
    out["news (frank cnndm+xsum)"] = [row["document"] for row in list(
        read_jsonl(root / "summarization-frank-cnndm-xsum" / "summ.jsonl"))[:limit]]
    cmrc = list(read_jsonl(root / "cmrc2018-zh-dev" / "qa.jsonl"))
    out["cmrc2018 zh passages"] = list(dict.fromkeys(
        c["text"] for row in cmrc for c in row["contexts"]))[:min(limit, 300)]
    return out


def flagged_sentences(text: str) -> tuple[int, int, list[str]]:
    """(flagged sentences, sentences, the flagged ones) of one text, paragraph by paragraph."""
    rules = load_rules()
    flagged, total, shown = 0, 0, []
    for para in regex.split(r"\n\s*\n", text):
        sentences = split_sentences(para)
        total += len(sentences)
        finding = scan(para, rules)
        if not finding or finding["score"] < THRESHOLD:
            continue
        spans = injected_spans(para, rules)
        for a, b in sentences:
            if any(s < b and a < e for s, e in spans):
                flagged += 1
                shown.append(para[a:b].strip())
    return flagged, total, shown


def false_positives(limit: int, show: bool) -> dict[str, tuple[int, int]]:
    result = {}
    for name, texts in datasets(limit).items():
        flagged = total = 0
        for text in texts:
            f, t, shown = flagged_sentences(text)
            flagged, total = flagged + f, total + t
            if show:
                for sentence in shown:
                    print(f"  FLAGGED [{name}] {sentence[:160]!r}")
        result[name] = (flagged, total)
    return result


def guard(show: bool) -> tuple[tuple[int, int], tuple[int, int, int]]:
    """((hostile refused, hostile), (honest refused for instructions, refused for any reason, honest))."""
    counter = get_counter()
    refused = total = 0
    for case in read_jsonl(DATA / "guard_replies.jsonl"):
        verdict = review(case["reply"], case["source"], max_tokens=400, counter=counter)
        ok = bool(verdict.instructions)
        refused, total = refused + ok, total + 1
        if show and not ok:
            print(f"  ACCEPTED hostile {case['id']}: {case['reply'][:100]!r}")
    news = list(read_jsonl(eval_dir() / "summarization-frank-cnndm-xsum" / "summ.jsonl"))[:50]
    for_instructions = for_any = 0
    for row in news:
        verdict = review(row["reference_summary"], row["document"], max_tokens=400, counter=counter)
        for_instructions += bool(verdict.instructions)
        for_any += not verdict.accepted
        if show and verdict.instructions:
            print(f"  REFUSED honest {row['id']}: {verdict.instructions}")
    return (refused, total), (for_instructions, for_any, len(news))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--show", action="store_true", help="print missed cases and flagged sentences")
    parser.add_argument("--limit", type=int, default=10_000, help="texts per false-positive dataset")
    args = parser.parse_args()
    started = time.perf_counter()
    print("techniques caught (generic pipeline; no part of the injected phrase in the output):")
    for split, (done, total) in techniques(args.show).items():
        print(f"  {split:8} {done}/{total}")
    print("false positives (sentences cut by classify.injection in ordinary text):")
    for name, (flagged, total) in false_positives(args.limit, args.show).items():
        print(f"  {name:28} {flagged}/{total} sentences = {flagged / max(total, 1):.2%}")
    (refused, hostile), (wrong, any_check, honest) = guard(args.show)
    print("guard:")
    print(f"  hostile replies refused        {refused}/{hostile}")
    print(f"  honest summaries refused       {wrong}/{honest} for instruction-like text "
          f"({wrong / max(honest, 1):.0%}); {any_check}/{honest} by any check")
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
