"""Run monitoring: every pipeline run recorded, rolling figures, anomalies.

`RunRecorder` is an ordinary plugin with one wrapper of the run-level hook: it sees each finished or
failed run and writes one record to the store: time, tokens in and out, ratio, loss level and
retention (from the run's `LossReport`, e.g. `validate.loss`), whether a fallback answered,
success (with the error and the failing step).
`rolling_stats` summarises the last 100 runs per pipeline (with the mean retention of the runs a
`validate.loss` step measured) and flags runs several times slower than their pipeline's median, or
much lossier; `prometheus_text` writes the same figures for scraping. The command line records every
pipeline it runs with `--store` (or `--session`): plain, conversation and search-session pipelines,
and each document of a batch.

    compactor-run qa notes.txt --query "..." --store runs.sqlite        # recorded
    compactor-run conversation history.json --budget 4000 --store runs.sqlite
    compactor-run deep-search results.jsonl --query "..." --store runs.sqlite
    compactor-run --stats --store runs.sqlite --metrics-file metrics.prom
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from compactor.document import Context
from compactor.hookspecs import hookimpl
from compactor.run import Run
from compactor.state import CompactionPlan, LossReport
from compactor.store import ChunkStore, open_store

if TYPE_CHECKING:
    from compactor.pipeline import Pipeline

WINDOW = 100
#: A run this many times slower than its pipeline's median is flagged.
SLOW = 3.0
#: Loss levels from `validate.loss`, best first; a run two levels worse than the median is flagged.
LEVELS = ("minimal", "acceptable", "moderate", "severe")


def record_runs(pipeline: Pipeline, store: Any) -> RunRecorder:
    """Record every run of `pipeline` (time, tokens, ratio, loss, fallback, success) into `store` (a
    path or a `ChunkStore`): a `RunRecorder` registered as its observer. The engine knows nothing of
    it; ops (the command line, batches) attach it."""
    recorder = RunRecorder(open_store(store), pipeline.spec.name or "<inline>")
    pipeline.observe(recorder, name=f"compactor.ops.monitor.{id(store)}")
    return recorder


class RunRecorder:
    """Records each run of the pipeline it is registered with into a store: an ordinary plugin with
    one wrapper of the run-level hook (`compactor_run`), which sees the whole run, failed or not."""

    def __init__(self, store: ChunkStore, pipeline: str) -> None:
        self.store = store
        self.pipeline = pipeline

    @hookimpl(wrapper=True)
    def compactor_run(self, pipeline: Any, run: Run) -> Generator[None, Any, Any]:
        started = time.perf_counter()
        try:
            context = yield
        except BaseException as exc:
            self.finish(started, None, error=f"{type(exc).__name__}: {exc}", failed_step=run.failed_step)
            raise
        self.finish(started, context)
        return context

    def finish(self, started: float, context: Context | None, error: str | None = None,
               failed_step: str | None = None) -> None:
        """Write the record of the run that began at `started` (perf_counter) and ended with
        `context` (None when it failed before producing one, in `failed_step` if in a step)."""
        record: dict[str, Any] = {"pipeline": self.pipeline, "time": time.time(),
                                  "seconds": round(time.perf_counter() - started, 6),
                                  "success": error is None, "error": error, "failed_step": failed_step,
                                  "tokens_in": None, "tokens_out": None, "ratio": None, "loss_level": None,
                                  "retention": None, "fallback": False}
        if context is not None:
            tokens_in = int(context.input_tokens or 0)
            tokens_out = context.output_tokens
            found = context.state.get(CompactionPlan)
            if found is not None and found.plans:
                # a compacted history costs what its messages cost in a request (as its input was
                # counted and its budget applies), not the tokens of the JSON text it is written as
                tokens_out = sum(p.tokens for p in found.plans.values())
            loss = context.state.get(LossReport)
            record.update(
                tokens_in=tokens_in, tokens_out=tokens_out,
                ratio=round(tokens_out / tokens_in, 4) if tokens_out is not None and tokens_in else None,
                loss_level=loss.level if loss is not None else None,
                retention=loss.get("retention") if loss is not None else None,
                fallback=any(r.stage == "fallback" and not r.skipped and not r.details.get("declined")
                             and r.details.get("llm_accepted", 1) for r in context.reports))
        self.store.record_run(record)


def anomalies(runs: Sequence[Mapping[str, Any]]) -> list[tuple[Mapping[str, Any], str]]:
    """Runs of one pipeline that stand out: several times slower than the median, two loss levels
    worse than the median, or failed."""
    seconds = [float(r["seconds"]) for r in runs if r.get("success")]
    median = statistics.median(seconds) if seconds else 0.0
    ranks = [LEVELS.index(r["loss_level"]) for r in runs if r.get("loss_level") in LEVELS]
    typical = statistics.median(ranks) if ranks else None
    found = []
    for run in runs:
        if not run.get("success"):
            found.append((run, f"failed: {run.get('error')}"))
        elif median > 0 and float(run["seconds"]) > SLOW * median and float(run["seconds"]) > 0.01:
            found.append((run, f"{float(run['seconds']) / median:.1f}x slower than the median"))
        elif typical is not None and run.get("loss_level") in LEVELS and \
                LEVELS.index(run["loss_level"]) >= typical + 2:
            found.append((run, f"loss level {run['loss_level']} (median {LEVELS[int(typical)]})"))
    return found


def rolling_stats(store: ChunkStore, window: int = WINDOW) -> dict[str, dict[str, Any]]:
    """Per pipeline, over its last `window` runs: count, median and p95 seconds, mean ratio, mean
    retention (validate.loss's quality figure, over the runs that have one), success and fallback
    rates, loss levels, anomalies."""
    pipelines = store.run_pipelines()
    out: dict[str, dict[str, Any]] = {}
    for name in pipelines:
        runs = store.runs(name, window)
        seconds = sorted(float(r["seconds"]) for r in runs)
        ratios = [float(r["ratio"]) for r in runs if r.get("ratio") is not None]
        retentions = [float(r["retention"]) for r in runs if r.get("retention") is not None]
        levels: dict[str, int] = {}
        for r in runs:
            if r.get("loss_level"):
                levels[r["loss_level"]] = levels.get(r["loss_level"], 0) + 1
        out[name] = {
            "runs": len(runs),
            "median_seconds": statistics.median(seconds) if seconds else 0.0,
            "p95_seconds": seconds[math.ceil(0.95 * (len(seconds) - 1))] if seconds else 0.0,
            "mean_ratio": statistics.mean(ratios) if ratios else None,
            "mean_retention": statistics.mean(retentions) if retentions else None,
            "success_rate": sum(bool(r.get("success")) for r in runs) / len(runs) if runs else 0.0,
            "fallback_rate": sum(bool(r.get("fallback")) for r in runs) / len(runs) if runs else 0.0,
            "loss_levels": levels,
            "anomalies": [{"time": r.get("time"), "reason": why} for r, why in anomalies(runs)],
        }
    return out


def stats_text(stats: Mapping[str, Mapping[str, Any]]) -> str:
    """The rolling figures as a table, anomalies listed under their pipeline."""
    if not stats:
        return "no runs recorded yet (runs are recorded when a store is given: --store PATH)"
    lines = [f"{'pipeline':<18}{'runs':>6}{'median s':>10}{'p95 s':>9}{'ratio':>8}{'retention':>11}"
             f"{'success':>9}{'fallback':>10}{'anomalies':>11}"]
    for name, s in stats.items():
        ratio = f"{s['mean_ratio']:.3f}" if s["mean_ratio"] is not None else "-"
        retention = f"{s['mean_retention']:.3f}" if s.get("mean_retention") is not None else "-"
        lines.append(f"{name:<18}{s['runs']:>6}{s['median_seconds']:>10.4f}{s['p95_seconds']:>9.4f}"
                     f"{ratio:>8}{retention:>11}{s['success_rate']:>9.0%}{s['fallback_rate']:>10.0%}"
                     f"{len(s['anomalies']):>11}")
        for anomaly in s["anomalies"][:10]:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(anomaly["time"] or 0))
            lines.append(f"  ! {when}  {anomaly['reason']}")
    return "\n".join(lines)


def prometheus_text(stats: Mapping[str, Mapping[str, Any]]) -> str:
    """The rolling figures in the Prometheus text exposition format."""
    metrics = [  # name, help, value
        ("compactor_runs", "Runs in the rolling window.", lambda s: s["runs"]),
        ("compactor_run_seconds_median", "Median run time in seconds.", lambda s: s["median_seconds"]),
        ("compactor_run_seconds_p95", "95th percentile run time in seconds.", lambda s: s["p95_seconds"]),
        ("compactor_compression_ratio_mean", "Mean tokens out / tokens in.", lambda s: s["mean_ratio"]),
        ("compactor_retention_mean", "Mean validate.loss retention of the runs that have one.",
         lambda s: s.get("mean_retention")),
        ("compactor_success_ratio", "Share of runs that succeeded.", lambda s: s["success_rate"]),
        ("compactor_fallback_ratio", "Share of runs a fallback answered.", lambda s: s["fallback_rate"]),
        ("compactor_anomalies", "Anomalous runs in the window.", lambda s: len(s["anomalies"])),
    ]
    lines = []
    for name, help_text, value in metrics:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} gauge")
        for pipeline, s in stats.items():
            v = value(s)
            if v is not None:
                label = pipeline.replace("\\", "\\\\").replace('"', '\\"')
                lines.append(f'{name}{{pipeline="{label}"}} {float(v):.6g}')
    return "\n".join(lines) + "\n"
