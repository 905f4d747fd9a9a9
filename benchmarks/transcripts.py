"""Benchmark query-focused transcript compression: `compress_single_file_results` against lead and BM25.

What is measured
    *Reference-content recall*: the share of a query-focused reference summary's content words
    that the compressed transcript still contains, at fixed cl100k token budgets (every output is
    checked to be within its budget). English content words: lower-cased alphabetic words of 3+
    letters that are not stop words (compactor's English list). Chinese: the reference's Han
    character bigrams. Beside it, *inside gold*: the share of kept utterances that lie inside the
    query's gold span (QMSum's `relevant_text_span`; VCSum's annotated segment), with the share of
    all utterances inside the gold spans as the base rate a random pick would get; and *filler*: the
    share of kept utterances that carry fewer than two content words (`compactor.text.utterances`).
    Next to them: time per query.

    Data (``../shared/eval`` or ``$COMPACTOR_EVAL_DIR``):

    * ``qmsum``  meeting-transcripts-qmsum: every specific query of every meeting (AMI, ICSI,
      parliamentary committees); the transcript is all utterances of the meeting;
    * ``vcsum``  vcsum-zh-meetings (Chinese): for every annotated segment, the query is its agenda
      headline and the reference its segment summary; the transcript is the whole meeting.

    Neither set has timestamps; each utterance gets synthetic ones from its word (or character)
    count at speaking speed, so every method prints the same `[start-end] speaker: text` lines.
    Disfluency marks such as `{vocalsound}` are removed for every method.

    Methods (same lines, same budget, unit tokens):

    * ``compactor``  `compress_single_file_results(query, results, max_length=B, unit="tokens")`;
    * ``lead``       the first utterances, in order, while they fit;
    * ``bm25``       `rank_bm25.BM25Okapi` over utterances (lower-cased words; Han characters one
      token each) against the query, best first while they fit, printed in transcript order.
      (Without the `bench` extra, a built-in BM25 with the same parameters is used.)

Time: CPU per query (``time.process_time``), median; the methods take turns query by query (order
rotated), so machine load hits them alike.

Run: ``python benchmarks/transcripts.py`` (``--limit N`` queries per set).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from evaldata import eval_dir, read_jsonl
from measure import okapi_bm25, print_environment

import compactor
from compactor.text.terms import stopwords
from compactor.text.tokens import get_counter
from compactor.text.utterances import is_filler

COUNTER = get_counter("cl100k_base")
_TAG = re.compile(r"\{[a-z_]+\}")
_WORD = re.compile(r"[A-Za-z]{3,}")
_TOKEN = re.compile(r"[A-Za-z0-9]+|[\u4e00-\u9fff]")
Case = dict[str, Any]


def segments_of(utterances: Sequence[tuple[str, str]], zh: bool) -> list[dict[str, Any]]:
    """Timestamped segments: 2.5 words/s (English) or 4 characters/s (Chinese)."""
    out, clock = [], 0.0
    for index, (speaker, text) in enumerate(utterances):
        length = len(text) / 4.0 if zh else len(text.split()) / 2.5
        out.append({"index": index, "start": round(clock, 2), "end": round(clock + max(length, 0.5), 2),
                    "speaker": speaker, "text": text})
        clock += max(length, 0.5)
    return out


def qmsum_cases(limit: int | None) -> list[Case]:
    cases = []
    for meeting in read_jsonl(eval_dir() / "meeting-transcripts-qmsum" / "test.jsonl"):
        utterances, position = [], {}
        for number, u in enumerate(meeting["meeting_transcripts"]):
            text = " ".join(_TAG.sub(" ", u["content"]).split())
            if text:  # an utterance left empty by the tag removal is dropped; gold spans follow
                position[number] = len(utterances)
                utterances.append((u["speaker"], text))
        segments = segments_of(utterances, zh=False)
        for query in meeting["specific_query_list"]:
            gold = {position[n] for a, b in query.get("relevant_text_span") or []
                    for n in range(int(a), int(b) + 1) if n in position}
            cases.append({"query": query["query"], "reference": query["answer"], "segments": segments,
                          "gold": gold})
    return cases[:limit] if limit else cases


def vcsum_cases(limit: int | None) -> list[Case]:
    cases = []
    for meeting in read_jsonl(eval_dir() / "vcsum-zh-meetings" / "meetings.jsonl"):
        utterances, spans = [], []
        for seg in meeting["segments"]:
            first = len(utterances)
            utterances.extend((str(u["speaker"]), u["text"]) for u in seg["utterances"])
            spans.append(set(range(first, len(utterances))))
        segments = segments_of(utterances, zh=True)
        for seg, span in zip(meeting["segments"], spans, strict=True):
            if seg.get("agenda") and seg.get("summary"):
                cases.append({"query": seg["agenda"], "reference": seg["summary"], "segments": segments,
                              "gold": span})
    return cases[:limit] if limit else cases


# -- methods ---------------------------------------------------------------------------------------


def line(segment: dict[str, Any]) -> str:
    return f"[{segment['start']:.2f}-{segment['end']:.2f}] {segment['speaker']}: {segment['text']}"


def fit_in_order(segments: Sequence[dict[str, Any]], order: Sequence[int], budget: int) -> str:
    """Take segments in `order` while the joined lines fit, print them in transcript order."""
    kept: list[int] = []
    used = 0
    for i in order:
        cost = COUNTER.count(line(segments[i])) + 1
        if used + cost <= budget:
            kept.append(i)
            used += cost
    text = "\n".join(line(segments[i]) for i in sorted(kept))
    while kept and COUNTER.count(text) > budget:
        kept.pop()
        text = "\n".join(line(segments[i]) for i in sorted(kept))
    return text


def ours(case: Case, budget: int) -> str:
    return compactor.compress_single_file_results(case["query"], {"filename": "meeting",
                                                                  "segments": case["segments"]},
                                                  max_length=budget, unit="tokens")


def lead(case: Case, budget: int) -> str:
    return fit_in_order(case["segments"], range(len(case["segments"])), budget)


def _tokens(text: str) -> list[str]:
    return [t.lower() for t in _TOKEN.findall(text)]


def bm25(case: Case, budget: int) -> str:
    docs = [_tokens(s["text"]) for s in case["segments"]]
    query = _tokens(case["query"])
    try:
        from rank_bm25 import BM25Okapi

        scores = list(BM25Okapi(docs).get_scores(query))
    except ImportError:
        scores = okapi_bm25(docs, query)
    order = sorted(range(len(docs)), key=lambda i: -scores[i])
    return fit_in_order(case["segments"], order, budget)


METHODS: dict[str, Callable[[Case, int], str]] = {"compactor": ours, "lead": lead, "bm25": bm25}


# -- measures --------------------------------------------------------------------------------------


def content_units(text: str, zh: bool) -> set[str]:
    if zh:
        han = re.findall(r"[\u4e00-\u9fff]+", text)
        return {run[i:i + 2] for run in han for i in range(len(run) - 1)}
    stop = stopwords("en")
    return {w for w in (m.lower() for m in _WORD.findall(text)) if w not in stop}


def recall(reference: str, output: str, zh: bool) -> float | None:
    wanted = content_units(reference, zh)
    if not wanted:
        return None
    have = content_units(output, zh)
    return len(wanted & have) / len(wanted)


_STAMP = re.compile(r"^\[(\d+\.\d{2})-", re.MULTILINE)


def kept_utterances(case: Case, output: str) -> list[int]:
    """The utterances an output kept (whole or in part), found by their start timestamps."""
    starts = {f"{s['start']:.2f}": s["index"] for s in case["segments"]}
    return [starts[m] for m in _STAMP.findall(output) if m in starts]


def base_rate(cases: Sequence[Case]) -> float:
    """The share of utterances inside the gold span, over all queries: a random pick's share."""
    return statistics.mean(len(c["gold"]) / len(c["segments"]) for c in cases)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--limit", type=int, help="queries per set")
    args = parser.parse_args(argv)
    print_environment(["rank-bm25"])
    sets = {"qmsum": (qmsum_cases(args.limit), False, (256, 512, 1024)),
            "vcsum": (vcsum_cases(args.limit), True, (256, 512, 1024))}
    for name, (cases, zh, budgets) in sets.items():
        print(f"\n{name}: {len(cases)} queries, content recall of the reference summary (%), "
              f"kept utterances inside the gold span (%; base rate {100 * base_rate(cases):.0f}%), "
              "kept utterances that are filler (%)")
        print(f"{'method':<11}" + "".join(f"{f'{b} tok':>11}{'gold':>6}{'fill':>6}" for b in budgets)
              + f"{'CPU ms/q':>11}")
        names = list(METHODS)
        values: dict[tuple[str, int], list[float]] = {(m, b): [] for m in names for b in budgets}
        inside: dict[tuple[str, int], list[bool]] = {(m, b): [] for m in names for b in budgets}
        filler: dict[tuple[str, int], list[bool]] = {(m, b): [] for m in names for b in budgets}
        times: dict[str, list[float]] = {m: [] for m in names}
        turn = 0
        for budget in budgets:
            for case in cases:
                turn += 1
                for method_name in names[turn % len(names):] + names[:turn % len(names)]:
                    start = time.process_time()
                    out = METHODS[method_name](case, budget)
                    times[method_name].append(time.process_time() - start)
                    assert COUNTER.count(out) <= budget, (method_name, budget, COUNTER.count(out))
                    value = recall(case["reference"], out, zh)
                    if value is not None:
                        values[(method_name, budget)].append(value)
                    kept = kept_utterances(case, out)
                    inside[(method_name, budget)].extend(i in case["gold"] for i in kept)
                    filler[(method_name, budget)].extend(is_filler(case["segments"][i]["text"]) for i in kept)
        for method_name in names:
            cells = [(100 * statistics.mean(values[(method_name, b)]), _share(inside[(method_name, b)]),
                      _share(filler[(method_name, b)])) for b in budgets]
            print(f"{method_name:<11}" + "".join(f"{c:>11.1f}{g:>6.0f}{f:>6.0f}" for c, g, f in cells)
                  + f"{1000 * statistics.median(times[method_name]):>11.1f}")
    return 0


def _share(flags: Sequence[bool]) -> float:
    return 100 * sum(flags) / len(flags) if flags else 0.0


if __name__ == "__main__":
    raise SystemExit(main())
