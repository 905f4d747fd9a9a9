"""Benchmark the search-result strategies of `ContextCompacter` on multi-hop QA items.

What is measured
    Every HotpotQA (distractor) and MuSiQue dev item of ``../shared/eval`` (or
    ``$COMPACTOR_EVAL_DIR``) is fed to a fresh session as search results, as
    ``../shared/bench/search_check.py`` does: each paragraph is one page
    ``(https://en.wikipedia.org/wiki/<title>, "<title>\\n<text>")``, the first half of the pages is
    one batch and the second half another, both with the question as the query. Per strategy
    (`fact_centric`, `chunk_filtering`, `summarization`):

    * *checklist*: `get_checklist_context()` as text (facts joined by newlines for fact_centric);
    * *report*: `reconstruct_report_context()` with no arguments;
    * for each, *answer retention* (a gold answer, lower-cased with whitespace collapsed, is a
      substring of the text, as search_check.py measures) and its size in cl100k tokens, absolute
      (median over items) and as a share of the item's input (mean over items, as search_check.py);
    * *CPU time per 20-page batch*: `process_search_results` on one batch of 20 pages (a MuSiQue
      item's 20 paragraphs, or two HotpotQA items' 10 each), `time.process_time`, median over the
      batches; the strategies run interleaved (the order rotates per batch) in one process, every
      functools cache in compactor modules is cleared before each run, and building the session
      (pipeline, store) is not timed. A bare tiktoken encode of the same pages is the floor.

    The baseline is what a user would write in twenty lines: Okapi BM25 (k1 1.5, b 0.75;
    `rank_bm25.BM25Okapi` when the `bench` extra is installed, else the same formula in this file)
    over the sentences of all pages (split after . ! ? and at newlines; lower-cased words as
    tokens) against the question, best sentences first while they fit, to the token count of the
    item's fact_centric checklist (and of its report).

Run: ``python benchmarks/search.py`` (``--limit N`` items per set, ``--timing N`` 20-page batches
per set).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from evaldata import eval_dir, read_jsonl
from measure import okapi_bm25

from compactor import ContextCompacter
from compactor.text.tokens import get_counter

COUNTER = get_counter("cl100k_base")
STRATEGIES = ("fact_centric", "chunk_filtering", "summarization")
SETS = {"hotpotqa": "hotpotqa-distractor-sample", "musique": "musique-sample"}
Page = tuple[str, str]
Item = dict[str, Any]


def norm(text: str) -> str:
    return " ".join(text.lower().split())


def keeps(text: str, item: Item) -> bool:
    """The answer-retention test of search_check.py."""
    have = norm(text)
    return any(norm(a) in have for a in item["answers"])


def pages_of(item: Item) -> list[Page]:
    return [(f"https://en.wikipedia.org/wiki/{c['title'].replace(' ', '_')}", f"{c['title']}\n{c['text']}")
            for c in item["contexts"]]


def clear_caches() -> int:
    """`cache_clear()` on every functools cache of compactor's modules (and their classes): what a
    user compressing new text starts from. Returns how many caches were cleared."""
    cleared = 0
    for name, module in list(sys.modules.items()):
        if not name.startswith("compactor") or module is None:
            continue
        for value in list(vars(module).values()):
            targets = [value, *vars(value).values()] if isinstance(value, type) else [value]
            for target in targets:
                target = getattr(target, "__func__", target)
                if callable(getattr(target, "cache_clear", None)) and hasattr(target, "cache_info"):
                    target.cache_clear()
                    cleared += 1
    return cleared


def checklist_text(compacter: ContextCompacter) -> str:
    context = compacter.get_checklist_context()
    return context if isinstance(context, str) else "\n".join(f.text for f in context)


# -- the baseline --------------------------------------------------------------------------------------

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"\w+")


def bm25_sentences(pages: Sequence[Page], query: str, budget: int) -> str:
    """The best BM25 sentences of the pages, best first while they fit `budget` tokens."""
    sentences = [s.strip() for _, text in pages for s in _SENTENCE_END.split(text) if s.strip()]
    docs = [_WORD.findall(s.lower()) for s in sentences]
    words = _WORD.findall(query.lower())
    try:
        from rank_bm25 import BM25Okapi

        scores = list(BM25Okapi(docs).get_scores(words))
    except ImportError:
        scores = okapi_bm25(docs, words)
    kept: list[str] = []
    used = 0
    for i in sorted(range(len(sentences)), key=lambda i: -scores[i]):
        cost = COUNTER.count(sentences[i]) + (1 if kept else 0)
        if used + cost <= budget:
            kept.append(sentences[i])
            used += cost
    return "\n".join(kept)


# -- runs ----------------------------------------------------------------------------------------------


def run_item(item: Item, strategy: str) -> dict[str, Any]:
    pages = pages_of(item)
    half = len(pages) // 2
    compacter = ContextCompacter(strategy)
    for batch in (pages[:half], pages[half:]):
        compacter.process_search_results(batch, item["question"])
    checklist = checklist_text(compacter)
    report = compacter.reconstruct_report_context()
    source = sum(COUNTER.count(text) for _, text in pages)
    return {"input": source, "checklist": checklist, "report": report,
            "checklist_tokens": COUNTER.count(checklist), "report_tokens": COUNTER.count(report)}


def timed_batches(items: Sequence[Item], count: int) -> list[tuple[list[Page], str]]:
    """Batches of 20 pages: an item's pages, topped up with the next items' (query: the first's)."""
    out: list[tuple[list[Page], str]] = []
    at = 0
    while len(out) < count and at < len(items):
        pages, query = [], items[at]["question"]
        while len(pages) < 20 and at < len(items):
            pages.extend(pages_of(items[at]))
            at += 1
        if len(pages) >= 20:
            out.append((pages[:20], query))
    return out


def cpu_times(batches: Sequence[tuple[list[Page], str]]) -> dict[str, list[float]]:
    """Seconds of CPU per batch and strategy (interleaved, caches cleared), and a tiktoken encode."""
    times: dict[str, list[float]] = {s: [] for s in (*STRATEGIES, "tiktoken encode")}
    for n, (pages, query) in enumerate(batches):
        for strategy in STRATEGIES[n % 3:] + STRATEGIES[:n % 3]:
            clear_caches()  # then build the session: loading the tokenizer and rule tables is not timed
            compacter = ContextCompacter(strategy)
            start = time.process_time()
            compacter.process_search_results(pages, query)
            times[strategy].append(time.process_time() - start)
        text = "\n\n".join(t for _, t in pages)
        start = time.process_time()
        COUNTER.encoding.encode_ordinary(text)
        times["tiktoken encode"].append(time.process_time() - start)
    return times


def environment() -> str:
    def version(name: str) -> str:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    packages = ", ".join(f"{p} {version(p)}" for p in ("compactor", "tiktoken", "regex", "rank_bm25"))
    return (f"python {platform.python_version()} on {platform.system()} {platform.machine()}, "
            f"{os.cpu_count()} CPUs; {packages}")


def pct(values: Sequence[float]) -> float:
    return 100 * statistics.mean(values) if values else 0.0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--limit", type=int, help="items per set (default: all)")
    parser.add_argument("--timing", type=int, default=10, help="20-page batches timed per set")
    args = parser.parse_args(argv)
    print(environment())
    print(f"functools caches cleared per timed run: {clear_caches()}")
    for name, folder in SETS.items():
        items = list(read_jsonl(eval_dir() / folder / "qa.jsonl"))
        items = items[: args.limit] if args.limit else items
        rows: dict[str, list[dict[str, Any]]] = {s: [] for s in STRATEGIES}
        for n, item in enumerate(items):  # interleaved: the strategies take turns going first
            for strategy in STRATEGIES[n % 3:] + STRATEGIES[:n % 3]:
                clear_caches()
                rows[strategy].append(run_item(item, strategy))
        times = cpu_times(timed_batches(items, args.timing))
        inputs = [r["input"] for r in rows["fact_centric"]]
        pages = statistics.median(len(i["contexts"]) for i in items)
        print(f"\n{name}: {len(items)} items, {pages:.0f} pages in 2 batches, input median "
              f"{statistics.median(inputs):.0f} tokens; answer kept (%), tokens (median) and % of input "
              f"(mean); CPU ms per 20-page batch (median of {len(times['fact_centric'])})")
        head = (f"{'method':<34}{'checklist':>10}{'tokens':>8}{'%in':>7}{'report':>9}{'tokens':>8}"
                f"{'%in':>7}{'ms/batch':>10}")
        print(head)
        print("-" * len(head))
        for strategy in STRATEGIES:
            r = rows[strategy]
            print(f"{strategy:<34}"
                  f"{pct([keeps(x['checklist'], i) for x, i in zip(r, items, strict=True)]):>10.1f}"
                  f"{statistics.median(x['checklist_tokens'] for x in r):>8.0f}"
                  f"{pct([x['checklist_tokens'] / x['input'] for x in r]):>7.1f}"
                  f"{pct([keeps(x['report'], i) for x, i in zip(r, items, strict=True)]):>9.1f}"
                  f"{statistics.median(x['report_tokens'] for x in r):>8.0f}"
                  f"{pct([x['report_tokens'] / x['input'] for x in r]):>7.1f}"
                  f"{1000 * statistics.median(times[strategy]):>10.1f}")
        baselines: list[tuple[str, Callable[[dict[str, Any]], int]]] = [
            ("bm25 sentences @ A checklist size", lambda x: x["checklist_tokens"]),
            ("bm25 sentences @ A report size", lambda x: x["report_tokens"]),
        ]
        for label, size in baselines:
            outs = [bm25_sentences(pages_of(i), i["question"], size(x))
                    for i, x in zip(items, rows["fact_centric"], strict=True)]
            tokens = [COUNTER.count(o) for o in outs]
            share = pct([t / x["input"] for t, x in zip(tokens, rows["fact_centric"], strict=True)])
            cells = (f"{pct([keeps(o, i) for o, i in zip(outs, items, strict=True)]):>10.1f}"
                     f"{statistics.median(tokens):>8.0f}{share:>7.1f}")
            print(f"{label:<34}{cells}")
        everything = pct([keeps("\n".join(t for _, t in pages_of(i)), i) for i in items])
        print(f"{'all pages (the input)':<34}{everything:>10.1f}{statistics.median(inputs):>8.0f}"
              f"{100.0:>7.1f}{'':>24}{1000 * statistics.median(times['tiktoken encode']):>10.1f}"
              "  (tiktoken encode)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
