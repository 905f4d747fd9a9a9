"""The LLM guard: check time against reply length, and the calibration of `min_coverage`.

Speed (CPU time, ``time.process_time``; medians of ``--runs`` interleaved runs, caches emptied before each)

    * ``all checks``  ``llm_guard.review`` of a one-line reply of 10k / 100k / 400k words with an
      allowance it fits, so every check runs (length, instructions, invented facts, coverage);
    * ``fidelity``    ``fidelity.find_invented`` alone on the same reply (the check that was
      quadratic: 400k words took 56 s before, per the issue);
    * ``capped``      ``llm_guard.review`` with the usual allowance of 1500 tokens: rejected by the
      character bound before anything else runs.

    Growth: time(400k) / time(10k) next to the word ratio (40): linear when the two are close.
    The reply is real English text (``evaldata.english_documents``) with its newlines made spaces (one
    line, the worst case the quadratic scan had), the source a 3k-word article.

Calibration (``--no-calibration`` skips it): the share of the input's weighted key content that
replies keep (``llm_guard.coverage``), and how many pass at each threshold, for

    * ``ref``     human summaries: CNN/DailyMail highlights, XSum one-sentence summaries, VCSum Chinese
      meeting-segment summaries, QMSum query-focused answers (with their query);
    * ``lead``    the input's leading sentences at the same length (those that fit, in order);
    * ``ref@4x``  the human summary with four times the allowance (a model writing short);
    * ``wrong``   another input's human summary (the next article; for meetings the next segment or
      query of the same meeting, so it shares the meeting's topic);
    * ``short``   the one word "short" ("短");  ``refusal`` "I'm sorry, but I can't help with that."

    The allowance is the human summary's token count rounded up to 50 (at least 50): "the
    requested length". The default (``DEFAULT_MIN_COVERAGE``) is marked.

Usage::

    python benchmarks/guard.py [--runs 3] [--no-calibration]
"""

from __future__ import annotations

import argparse
import ast
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from evaldata import english_documents, eval_dir, read_jsonl
from measure import cold, interleaved, median, print_environment

from compactor.llm import guard
from compactor.text.fidelity import find_invented
from compactor.text.sentences import split_sentences
from compactor.text.tokens import get_counter

COUNTER = get_counter()
SIZES = (10_000, 100_000, 400_000)
THRESHOLDS = (0.15, 0.2, 0.25, 0.3, 0.35, 0.4)


# -- speed --------------------------------------------------------------------------------------------


def _words(docs: list[str], n: int) -> str:
    words: list[str] = []
    while len(words) < n:
        for doc in docs:
            words.extend(doc.split())
            if len(words) >= n:
                break
    return " ".join(words[:n])


def speed(runs: int) -> None:
    docs = english_documents()
    source = _words(docs[1:], 3000)
    replies = {n: _words(docs, n) for n in SIZES}
    fits = {n: COUNTER.count(r) for n, r in replies.items()}  # an allowance the reply fits
    contestants: dict[str, Callable[[], Any]] = {}
    for n, reply in replies.items():
        contestants[f"all checks {n // 1000}k"] = (
            lambda r=reply, t=fits[n]: guard.review(r, source, max_tokens=t, counter=COUNTER))
        contestants[f"fidelity {n // 1000}k"] = lambda r=reply: find_invented(r, source)
        contestants[f"capped {n // 1000}k"] = (
            lambda r=reply: guard.review(r, source, max_tokens=1500, counter=COUNTER))
    verdict = guard.review(replies[SIZES[0]], source, max_tokens=1500, counter=COUNTER)
    assert not verdict.accepted and "characters" in verdict.problems[0]
    times = interleaved(contestants, runs, before=cold(()))
    print(f"\nspeed: CPU seconds, median of {runs} runs (one-line replies, source of 3k words)")
    print(f"{'reply words':>12} {'all checks':>11} {'us/word':>8} {'fidelity':>9} {'us/word':>8} "
          f"{'capped':>9}")
    for n in SIZES:
        a, f, c = (median(times[f"{k} {n // 1000}k"]) for k in ("all checks", "fidelity", "capped"))
        print(f"{n:>12,} {a:>11.3f} {a / n * 1e6:>8.2f} {f:>9.3f} {f / n * 1e6:>8.2f} {c * 1000:>7.3f}ms")
    low, high = SIZES[0], SIZES[-1]
    for kind in ("all checks", "fidelity"):
        ratio = median(times[f"{kind} {high // 1000}k"]) / median(times[f"{kind} {low // 1000}k"])
        print(f"growth {kind}: {high // 1000}k / {low // 1000}k = {ratio:.1f}x for {high // low}x the words "
              f"({'linear' if ratio <= 1.5 * high / low else 'NOT linear'})")


# -- calibration --------------------------------------------------------------------------------------


def _budget(text: str) -> int:
    return max(50, math.ceil(COUNTER.count(text) / 50) * 50)


def _lead(text: str, budget: int) -> str:
    """The first sentences that fit `budget` tokens, in order (one too long for what is left is
    passed over: XSum pages open with a long share-button line)."""
    out: list[str] = []
    used = 0
    for start, end in split_sentences(text):
        sentence = text[start:end].strip()
        cost = COUNTER.count(sentence) + 1
        if sentence and used + cost <= budget:
            out.append(sentence)
            used += cost
        if budget - used < 10:
            break
    return " ".join(out)


def _cases() -> list[tuple[str, str, str, str, int, str | None]]:
    """(set, kind, reply, source, allowance, query)."""
    cases = []
    root = eval_dir()
    rows = list(read_jsonl(root / "summarization-frank-cnndm-xsum" / "summ.jsonl"))
    for name in ("cnndm", "xsum"):
        news = [r for r in rows if r["dataset"] == name]
        for i, row in enumerate(news):
            doc, ref = row["document"], row["reference_summary"]
            b = _budget(ref)
            for kind, reply, allowance in (
                    ("ref", ref, b), ("lead", _lead(doc, b), b), ("ref@4x", ref, 4 * b),
                    ("wrong", news[(i + 7) % len(news)]["reference_summary"], b), ("short", "short", b),
                    ("refusal", "I'm sorry, but I can't help with that.", b)):
                cases.append((name, kind, reply, doc, allowance, None))
    for meeting in read_jsonl(root / "vcsum-zh-meetings" / "meetings.jsonl"):
        segments = [s for s in meeting["segments"] if s["summary"]]
        for j, s in enumerate(segments):
            doc = "\n".join(u["text"] for u in s["utterances"])
            b = _budget(s["summary"])
            other = segments[(j + 1) % len(segments)]["summary"] if len(segments) > 1 else "今天天气很好。"
            for kind, reply, allowance in (
                    ("ref", s["summary"], b), ("lead", _lead(doc, b), b), ("ref@4x", s["summary"], 4 * b),
                    ("wrong", other, b), ("short", "短", b), ("refusal", "抱歉，我无法帮助完成这个请求。", b),
            ):
                cases.append(("vcsum-zh", kind, reply, doc, allowance, None))
    for meeting in read_jsonl(root / "meeting-transcripts-qmsum" / "test.jsonl"):
        turns = meeting["meeting_transcripts"]
        queries = meeting["specific_query_list"]
        for k, q in enumerate(queries):
            spans = q["relevant_text_span"]
            spans = ast.literal_eval(spans) if isinstance(spans, str) else spans
            doc = "\n".join(f"{t['speaker']}: {t['content']}"
                            for a, z in spans for t in turns[int(a):int(z) + 1])
            b = _budget(q["answer"])
            for kind, reply, allowance in (
                    ("ref", q["answer"], b), ("lead", _lead(doc, b), b), ("ref@4x", q["answer"], 4 * b),
                    ("wrong", queries[(k + 1) % len(queries)]["answer"], b), ("short", "short", b)):
                cases.append(("qmsum+query", kind, reply, doc, allowance, q["query"]))
    return cases


def calibration() -> None:
    shares: dict[tuple[str, str], list[float]] = {}
    for name, kind, reply, source, allowance, query in _cases():
        kept = guard.coverage(reply, source, max_tokens=allowance, query=query)
        shares.setdefault((name, kind), []).append(kept.share)
    print(f"\ncalibration: share of weighted key content kept; pass rate at each min_coverage "
          f"(default {guard.DEFAULT_MIN_COVERAGE} marked *)")
    heads = " ".join(f"{t:.2f}{'*' if t == guard.DEFAULT_MIN_COVERAGE else ' '}" for t in THRESHOLDS)
    print(f"{'set':12} {'reply':8} {'n':>4} {'p10':>5} {'p25':>5} {'med':>5}   pass at {heads}")
    for (name, kind), values in shares.items():
        values.sort()

        def q(p: float, v: list[float] = values) -> float:
            return v[min(len(v) - 1, int(p * len(v)))]

        rates = " ".join(f"{sum(x >= t for x in values) / len(values):5.2f}" for t in THRESHOLDS)
        print(f"{name:12} {kind:8} {len(values):>4} {q(.1):5.2f} {q(.25):5.2f} {q(.5):5.2f}"
              f"           {rates}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-calibration", action="store_true")
    args = parser.parse_args()
    print_environment()
    speed(args.runs)
    if not args.no_calibration:
        calibration()


if __name__ == "__main__":
    main()
