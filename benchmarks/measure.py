"""Shared measuring helpers: environment line, cold per-text caches, CPU-time medians over interleaved runs.

The machine is shared and noisy, so every benchmark measures the same way:

* CPU time of this process (``time.process_time``: all threads, not other processes' load), never wall time;
* contestants run interleaved in one process, round by round (the order rotates each round), so a
  slow patch of the machine hits all of them alike;
* medians of several runs;
* memory, where a benchmark reports it, is tracemalloc's peak over one extra untimed call
  (``peak_memory``): what the call allocates through Python's and numpy's allocators, over what
  existed before it (the input), without the interpreter and the libraries already loaded;
* before every timed run the caches compactor keeps per text are emptied: every ``functools`` cache
  of a ``compactor*`` module (module-level functions and methods of module-level classes) is cleared,
  then an untimed warm-up on a few unrelated words re-loads what a long-lived process keeps anyway
  (token encodings, compiled rule tables, sentence models, resolved pipelines). A timed run is
  therefore a user compressing new text in a process that has compressed something before.
"""

from __future__ import annotations

import gc
import importlib.metadata
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
BASE_PACKAGES = ("compactor", "tiktoken", "regex", "numpy")


# --------------------------------------------------------------------------------------------
# Environment
# --------------------------------------------------------------------------------------------


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def _commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(REPO_ROOT), "describe", "--always", "--dirty"],
                             capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return "?"
    return out.stdout.strip() or "?"


def environment(extra: Iterable[str] = ()) -> str:
    """One line: command, python, package versions, CPU count and model, commit of the checkout."""
    packages = dict.fromkeys([*BASE_PACKAGES, *extra])
    versions = ", ".join(f"{name} {_version(name)}" for name in packages)
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    script = sys.argv[0]
    if script and os.path.exists(script):
        script = os.path.relpath(script)
    command = " ".join([script, *sys.argv[1:]])
    return (f"command: python {command}\n"
            f"environment: python {platform.python_version()} ({platform.python_implementation()}), "
            f"{versions}; {os.cpu_count()} CPUs ({cpu}); {platform.system()} {platform.release()}; "
            f"commit {_commit()}")


def print_environment(extra: Iterable[str] = ()) -> None:
    """Print `environment()`; every benchmark starts with it."""
    print(environment(extra), flush=True)


# --------------------------------------------------------------------------------------------
# Caches
# --------------------------------------------------------------------------------------------


def compactor_caches() -> list[Callable[..., Any]]:
    """Every functools cache (anything with `cache_clear` and `cache_info`: functools' wrappers and
    cache objects shaped like them) in the loaded compactor modules. A class defining those methods
    is not a cache, its instances are."""
    found: dict[int, Callable[..., Any]] = {}

    def visit(value: Any) -> None:
        if isinstance(value, type):
            return
        clear = getattr(value, "cache_clear", None)
        if callable(clear) and hasattr(value, "cache_info"):
            found.setdefault(id(value), value)

    for name, module in list(sys.modules.items()):
        if not name.startswith("compactor") or module is None:
            continue
        for value in list(vars(module).values()):
            visit(value)
            if isinstance(value, type) and value.__module__ == name:
                for member in vars(value).values():
                    visit(getattr(member, "__func__", member))
    return list(found.values())


def clear_caches() -> int:
    """Empty every compactor functools cache; returns how many there were."""
    caches = compactor_caches()
    for cache in caches:
        cache.cache_clear()  # type: ignore[attr-defined]
    return len(caches)


WARM_TEXTS = ("Setup run. The pump restarted at noon after the valve was replaced.",
              "预热运行。阀门更换后，水泵在中午重新启动。")


def warm_up(pipelines: Iterable[str] = ("qa", "generic")) -> None:
    """Untimed: pay once what a long-lived process pays once (encodings, tables, resolved pipelines)."""
    import compactor

    for name in pipelines:
        for text in WARM_TEXTS:
            compactor.compress(text, query="when did the pump restart?", budget=8, pipeline=name)


def cold(pipelines: Iterable[str] = ("qa", "generic"),
         warm: Callable[[], Any] | None = None) -> Callable[[], None]:
    """A `before` hook for `interleaved`: clear compactor's caches, then the small untimed warm-up
    (the pipelines named, and `warm`, e.g. each contestant on a few words of other text)."""
    names = tuple(pipelines)

    def before() -> None:
        clear_caches()
        warm_up(names)
        if warm is not None:
            warm()

    return before


# --------------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------------


def cpu_time(fn: Callable[[], Any]) -> tuple[float, Any]:
    """CPU seconds of one call (after a gc pass, so earlier garbage is not charged to it), and its result."""
    gc.collect()
    started = time.process_time()
    result = fn()
    return time.process_time() - started, result


def interleaved(contestants: Mapping[str, Callable[[], Any]], runs: int = 5, *,
                before: Callable[[], None] | None = None, cap_seconds: float | None = None,
                on_result: Callable[[str, Any], None] | None = None,
                min_runs: int = 1) -> dict[str, list[float]]:
    """CPU seconds per run of each contestant, run round-robin (order rotated every round).

    `before` runs untimed before every timed call (e.g. `cold()`); `on_result(name, result)` sees
    each call's result (e.g. to collect step reports). With `cap_seconds`, rounds stop early once
    another round would take the total past the cap (the first `min_runs` rounds always run, so a
    median is never of fewer), so a very slow engine still finishes; the caller prints how many runs
    each median is of.
    """
    names = list(contestants)
    times: dict[str, list[float]] = {name: [] for name in names}
    spent = 0.0
    for round_index in range(runs):
        shift = round_index % len(names)
        round_seconds = 0.0
        for name in names[shift:] + names[:shift]:
            if before is not None:
                before()
            seconds, result = cpu_time(contestants[name])
            times[name].append(seconds)
            round_seconds += seconds
            if on_result is not None:
                on_result(name, result)
        spent += round_seconds
        if cap_seconds is not None and round_index + 1 >= min_runs and spent + round_seconds > cap_seconds:
            break
    return times


def peak_memory(fn: Callable[[], Any], before: Callable[[], None] | None = None) -> int:
    """Bytes: tracemalloc's peak during one untimed call of `fn` (after `before`, e.g. `cold()`).

    It counts what the call allocates through Python's allocators and numpy's (numpy reports its
    buffers to tracemalloc), result included, over what was live when it started; allocations made
    straight with the C library by extension code (e.g. inside tiktoken) are not seen. Tracing slows
    the call down about threefold, which is why it is an extra call and not a timed one.
    """
    if before is not None:
        before()
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def ms(seconds: float) -> str:
    """Milliseconds with sensible precision."""
    value = seconds * 1000
    return f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 100 else f"{value:.0f}"


def okapi_bm25(docs: Sequence[Sequence[str]], query: Sequence[str], k1: float = 1.5,
               b: float = 0.75) -> list[float]:
    """Okapi BM25 of each document for the query: the simple baseline a user would write (used
    where rank_bm25, from the bench extra, is not wanted)."""
    n = len(docs)
    avg = sum(map(len, docs)) / max(1, n)
    df = Counter(t for d in docs for t in set(d))
    idf = {t: math.log((n - df[t] + 0.5) / (df[t] + 0.5) + 1) for t in set(query)}
    scores = []
    for d in docs:
        tf = Counter(d)
        scores.append(sum(idf[t] * tf[t] * (k1 + 1) / (tf[t] + k1 * (1 - b + b * len(d) / avg))
                          for t in set(query) if t in tf))
    return scores
