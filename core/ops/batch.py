"""Batch mode: a pipeline over a JSONL corpus, streamed in and out, resumable, on processes or Dask.

    compactor-run pipeline.yaml corpus.jsonl --out results.jsonl                  # process pool
    compactor-run pipeline.yaml corpus.jsonl --out results.jsonl --executor dask  # local cluster
    compactor-run pipeline.yaml corpus.jsonl --out results.jsonl --executor dask --scheduler tcp://h:8786

Every input line is one document record (`compactor.formats.records`, the schema the CLI and the
Python API read too): `text`, `content` (+ `url`), `html`, `messages` (a conversation) or `segments`
(a transcript), with optional `id`, `query` and `budget`. Every output line is
`{"id", "ok", "output", "input_tokens", "output_tokens", "seconds"}` or `{"id", "ok": false,
"error"}`, written as soon as it is known, in input order. Memory is bounded by the number of
documents in flight, not by the corpus. On restart, ids already in the output are skipped (a torn
last line from a crash is cut off first), so no document is lost or written twice. Pool workers
die with the run, however it ends (`worker_init`), so a killed run leaves no process behind.

A pool or Dask task holds several documents (`Chunks`): every task costs the executor the same
whatever its work (a Dask task several milliseconds of client, scheduler and worker CPU), as much
as compressing a short document. Each worker process builds the pipeline once (`_pipeline`, keyed
by its text), and a Dask run builds it on every worker before the first task (`_Dask.warm`), so a
task carries the pipeline's text, never the pipeline.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import statistics
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO

from compactor.errors import CompactorError, InputError
from compactor.ops.progress import BatchProgress, count_records

Executor = Literal["serial", "local", "dask"]

TASK_SECONDS = 0.25  # CPU one task aims at: a Dask task's own cost (ms of CPU) is then a few percent
TASK_WALL = 2.0  # seconds one task stays under, however little CPU its documents take
MAX_CHUNK = 64  # documents per task at most, whatever their speed


@dataclass(slots=True)
class BatchStats:
    """What a batch run did. `bytes_in` is every byte read (skipped records too), `bytes_done` only
    those of the documents this run computed; `slots` is how many tasks the executor runs at once
    (a Dask cluster's worker threads), `window` how many tasks' worth of documents were let in
    flight, `tasks` how many tasks the documents went in and `task_cpu` the CPU seconds those tasks
    took, in whichever process ran them (the work, without the executor's own)."""

    read: int = 0
    skipped: int = 0
    done: int = 0
    failed: int = 0
    seconds: float = 0.0
    bytes_in: int = 0
    bytes_done: int = 0
    slots: int = 0
    window: int = 0
    tasks: int = 0
    task_cpu: float = 0.0
    interrupted: bool = False
    errors: list[str] = field(default_factory=list)


# -- documents -------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4)
def _pipeline(text: str, label: str, runs: str | None = None) -> Any:
    """The pipeline, built once per process; with `runs` (a SQLite path) every run is recorded."""
    from compactor.ops.monitor import record_runs
    from compactor.pipeline import Pipeline

    pipeline = Pipeline.from_string(text, file=label)
    if runs:
        record_runs(pipeline, runs)
    return pipeline


def run_document(pipeline: tuple[str | None, ...], record: Mapping[str, Any], line: int,
                 output_format: str | None = None, defaults: Mapping[str, Any] | None = None,
                 name: str = "<corpus>") -> dict[str, Any]:
    """Compress one record, line `line` of corpus `name` (in whichever process runs it); never raises
    for a bad document. The record's `query` and `budget` win over `defaults` (the command line's)."""
    from compactor.formats.records import Item, record_source, run_options

    doc_id = record.get("id", f"line-{line}")
    if "_error" in record:
        return {"id": doc_id, "ok": False, "error": record["_error"], "seconds": 0.0}
    started = time.perf_counter()
    where = f"{name}:{line}"
    try:
        runner = _pipeline(*pipeline)
        source = record_source(Item(record, where, f"{name}#{line}"), whole=True)
        query, budget = run_options({**(defaults or {}), **record}, where)
        context = runner.run([source], query=query, budget=budget, output_format=output_format)
        fmt = output_format or runner.spec.output["format"]
        return {"id": doc_id, "ok": True, "output": _output(context.output, fmt),
                "input_tokens": context.input_tokens, "output_tokens": context.output_tokens,
                "seconds": round(time.perf_counter() - started, 6)}
    except CompactorError as exc:
        return {"id": doc_id, "ok": False, "error": str(exc),
                "seconds": round(time.perf_counter() - started, 6)}
    except Exception as exc:  # one broken document must not stop a million others
        return {"id": doc_id, "ok": False, "error": f"{type(exc).__name__}: {exc}",
                "seconds": round(time.perf_counter() - started, 6)}


def run_documents(pipeline: tuple[str | None, ...], items: Sequence[tuple[Mapping[str, Any], int]],
                  output_format: str | None = None, defaults: Mapping[str, Any] | None = None,
                  name: str = "<corpus>") -> tuple[list[dict[str, Any]], float]:
    """One task: `run_document` for each (record, line) of `items`, results in their order, and the
    CPU seconds the task took (which sizes the next tasks, `Chunks`). A bad document is its own
    failed result, so it never costs the others in the task theirs."""
    started = time.thread_time()
    results = [run_document(pipeline, record, line, output_format, defaults, name) for record, line in items]
    return results, time.thread_time() - started


def warm_pipeline(pipeline: tuple[str | None, ...]) -> None:
    """Build the pipeline in this process now (plugins imported, tokenizer loaded), not inside the
    first task; nothing is run, so a pipeline that calls a model makes no call."""
    _pipeline(*pipeline)


@dataclass(slots=True)
class Chunks:
    """How many documents the next task holds. It starts at one and grows until a task is about
    `TASK_SECONDS` of CPU: the per-task cost is CPU, and a machine busy with other work stretches
    wall time, not CPU. The estimate is the median of recent tasks' CPU per document, so a worker's
    first task (which builds the pipeline) or one huge page does not decide it. A task also stays
    under `TASK_WALL` by its documents' own `seconds`, so documents that wait (a model call each)
    stay one per task. Near the end of a corpus of known size a task takes at most a quarter of a
    slot's share of what is left, so the last tasks are spread over every slot, not left to one.
    `fixed` pins the size."""

    slots: int = 1
    fixed: int | None = None
    limit: int = MAX_CHUNK
    cpu: deque[float] = field(default_factory=lambda: deque(maxlen=32))
    wall: deque[float] = field(default_factory=lambda: deque(maxlen=64))

    def size(self, remaining: float | None = None) -> int:
        """Documents for the next task, `remaining` the documents still to read (estimated)."""
        if self.fixed:
            return self.fixed
        if not self.cpu:
            return 1
        size = TASK_SECONDS / max(statistics.median(self.cpu), 1e-5)
        if self.wall:
            size = min(size, TASK_WALL / max(statistics.median(self.wall), 1e-5))
        if remaining is not None:
            size = min(size, remaining / (4 * self.slots))
        return max(1, min(self.limit, int(size)))

    def observe(self, results: Sequence[Mapping[str, Any]], cpu: float) -> None:
        """A finished task: its results and the CPU seconds it took."""
        if results:
            self.cpu.append(cpu / len(results))
        for result in results:
            seconds = result.get("seconds")
            if result.get("ok") and isinstance(seconds, float | int) and seconds > 0:
                self.wall.append(float(seconds))


def _output(text: str | None, fmt: str) -> Any:
    """A JSON output (`json`, `messages`) as the value it is, so a result line holds one object and
    not JSON nested in a string; any other format as its text."""
    if fmt in ("json", "messages") and text:
        return json.loads(text)
    return text


# -- reading and resuming --------------------------------------------------------------------------


def id_key(value: Any) -> str:
    """How an id is compared on resume: its JSON form, so `1` and `"1"` stay different ids."""
    return json.dumps(value, ensure_ascii=True, sort_keys=True)


def done_ids(out: Path) -> set[str]:
    """Keys (`id_key`) of the ids already written to `out`. Only a torn last line (a crash in the
    middle of a write) is cut off; anything else that is not a result line is an error, so a wrong
    `--out` (the corpus itself, another tool's file) is never truncated. Only a regular file is
    read: a FIFO or a device (/dev/null) has no earlier results, and reading it would block."""
    if not out.is_file():
        return set()
    ids: set[str] = set()
    with out.open("rb+") as handle:
        good = 0
        for number, raw in enumerate(handle, 1):
            if not raw.endswith(b"\n"):
                handle.truncate(good)  # the torn last line
                break
            try:
                record = json.loads(raw)
                if not isinstance(record, dict) or "id" not in record or "ok" not in record:
                    raise ValueError
            except ValueError:
                raise InputError(f"{out}:{number}: not a compactor result line; refusing to append to "
                                 "this file (is --out pointing at the right file?)") from None
            ids.add(id_key(record["id"]))
            good += len(raw)
    return ids


def read_corpus(path: Path, stats: BatchStats) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) per JSONL line, streamed; a record without an `id` is known by
    `line-<n>` (`run_document`). A line that is not a JSON object becomes a record whose `_error`
    says why (it is reported, not fatal), in the words of the CLI's reader."""
    from compactor.formats.records import INPUT_LIMIT_ENV, max_input_bytes, parse_line

    limit = max_input_bytes()
    try:
        handle = path.open("rb") if str(path) != "-" else sys.stdin.buffer
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    name = "<stdin>" if str(path) == "-" else str(path)
    with handle:
        # a corpus streams (it may be endless); one record is read whole, so it is bounded
        for number, raw in enumerate(iter(lambda: handle.readline(limit + 1), b""), 1):
            stats.bytes_in += len(raw)
            if len(raw) > limit:
                raise InputError(f"{name}:{number}: the record is larger than {limit:,} bytes, the most "
                                 f"compactor reads at once (set {INPUT_LIMIT_ENV} to change it)")
            if number == 1 and b"\x00" in raw[:8192]:
                raise InputError(f"{name}: looks like a binary file (NUL bytes); a corpus is JSON Lines, "
                                 "one record per line")
            if not raw.strip():
                continue
            try:
                record = parse_line(raw, name, number)
            except InputError as exc:
                record = {"id": f"line-{number}", "_error": str(exc)}
            if not isinstance(record, dict):
                record = {"id": f"line-{number}",
                          "_error": f"{name}:{number}: expected a JSON object (a record), got "
                                    f"{type(record).__name__}"}
            yield number, record


# -- executors -------------------------------------------------------------------------------------


class _Serial:
    slots = 1

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        future: Future[Any] = Future()
        future.set_result(fn(*args))
        return future

    def close(self) -> None:
        pass


# -- workers die with their parent -----------------------------------------------------------------

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
WATCH_SECONDS = 0.5  # how often a worker checks that the batch run is still there


def _parent_death_signal() -> bool:
    """Linux: the kernel sends this process SIGKILL when its parent exits (`prctl`); False where
    that is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):  # pragma: no cover - no libc prctl
        return False


def _alive(pid: int) -> bool:
    if os.name != "posix":  # pragma: no cover - os.kill(pid, 0) terminates the process on Windows
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - someone else's process now has this pid
        return True
    return True


def _orphaned(parent: int, run: int) -> bool:
    """Whether the batch run (pid `run`) is gone: this process was handed to another parent than
    `parent` (the run, or the forkserver, which exits with the run), or no process has that pid."""
    return os.getppid() != parent or not _alive(run)


def _watch(parent: int, run: int) -> None:
    """A worker's thread: ends the worker once the run is gone."""
    if os.name != "posix":  # pragma: no cover - no reparenting: wait on the parent's handle
        import multiprocessing
        from multiprocessing.connection import wait

        process = multiprocessing.parent_process()
        if process is not None:
            wait([process.sentinel])
            os._exit(1)
        return
    while not _orphaned(parent, run):
        time.sleep(WATCH_SECONDS)
    os._exit(1)  # the run is gone: nobody will write this worker's results


def worker_init(run: int, forkserver: bool = False) -> None:
    """Process-pool initializer: the worker dies with the batch run (pid `run`), so a run killed
    with SIGKILL leaves no workers behind, computing results nobody writes. Linux: a parent-death
    signal; everywhere: a thread that checks every `WATCH_SECONDS` that the parent is still there.
    With the forkserver start method the parent is the forkserver, which exits with the run."""
    parent = os.getppid() if forkserver else run
    _parent_death_signal()
    if _orphaned(parent, run):  # gone before the signal was set up: it will never come
        os._exit(1)
    import threading

    threading.Thread(target=_watch, args=(parent, run), name="compactor-parent-watch", daemon=True).start()


def _process_pool(workers: int) -> ProcessPoolExecutor:
    import multiprocessing

    forkserver = multiprocessing.get_start_method() == "forkserver"
    return ProcessPoolExecutor(max_workers=workers, initializer=worker_init,
                               initargs=(os.getpid(), forkserver))


def local_cluster(workers: int) -> Any:
    """The Dask cluster `--executor dask` starts without `--scheduler`: `workers` processes of one
    thread each. No dashboard, and the scheduler's HTTP server (which `dashboard_address=None` still
    puts on port 8787, failing when that port is taken) on a free loopback port; without the
    dashboard nobody sees the workers' profiles, whose sampling every 10 ms costs a few percent of
    their CPU, so they do not sample (a worker takes the configuration it starts with)."""
    import dask
    from distributed import LocalCluster

    with dask.config.set({"distributed.worker.profile.enabled": False}):
        return LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                            dashboard_address="127.0.0.1:0", scheduler_kwargs={"dashboard": False})


class _Dask:
    """Tasks of documents on a Dask cluster; a task lost with its worker is run again elsewhere."""

    def __init__(self, scheduler: str | None, workers: int) -> None:
        try:
            from distributed import Client
        except ImportError:
            raise CompactorError("--executor dask needs the `distributed` package: "
                                 "pip install 'compactor[dask]'") from None
        self.cluster = None
        if scheduler:
            self.client = Client(scheduler, timeout="30s")
        else:
            self.cluster = local_cluster(workers)
            self.client = Client(self.cluster)
        self.slots = self._threads(workers)

    def _threads(self, fallback: int) -> int:
        """How many tasks the cluster runs at once: its workers' threads (which can be more or
        fewer than this machine's cores), waiting briefly for a first worker to join."""
        try:
            self.client.wait_for_workers(1, timeout=30)
        except TimeoutError:  # no worker yet: tasks wait for one, sized as asked
            return fallback
        return max(sum(self.client.nthreads().values()), 1)

    def submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        return self.client.submit(fn, *args, pure=False, retries=3)

    def warm(self, pipeline: tuple[str | None, ...]) -> None:
        """Every worker builds the pipeline at once, side by side, before the first task: a task's
        time is then its documents' (which sizes the next tasks). Best effort: a worker that
        cannot builds it in its first task, where the error is reported per document."""
        with contextlib.suppress(Exception):  # only a head start: the tasks report what goes wrong
            self.client.run(warm_pipeline, pipeline)

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()


def _executor(kind: Executor, workers: int, scheduler: str | None) -> Any:
    if kind == "serial":
        return _Serial()
    if kind == "dask":
        return _Dask(scheduler, workers)
    return _process_pool(workers)


def _slots(pool: Any, workers: int) -> int:
    """Documents the executor runs at once: a process pool's processes, a Dask cluster's threads."""
    return int(getattr(pool, "slots", workers))


def run_batch(pipeline_text: str, label: str, corpus: Path, out: Path, *, executor: Executor = "local",
              workers: int | None = None, scheduler: str | None = None, window: int | None = None,
              output_format: str | None = None, query: str | None = None, budget: int | None = None,
              runs: str | None = None, progress: TextIO | None = None, live: bool = True,
              chunk: int | None = None) -> BatchStats:
    """Run the pipeline over every record of `corpus` not yet in `out`, appending results in input
    order (`runs`: a SQLite store where every document's run is recorded, `compactor.ops.monitor`).
    At most `window` tasks' worth of documents (default 4 tasks per slot: a pool process or a Dask
    worker thread) are in flight or waiting to be written, whatever the corpus size. A task holds
    `chunk` documents (default: grown until a task is about `TASK_SECONDS` of CPU, `Chunks`; one
    document per task when serial); a task is sent once it is full or the corpus ends. A
    process-pool worker that dies is replaced and its documents run again (up to 3 times); Dask does
    the same for its workers. `progress`: where progress goes (`compactor.ops.progress`: a bar on a
    terminal, else plain lines; with `live` False only the summary line)."""
    from compactor.pipeline import Pipeline

    Pipeline.from_string(pipeline_text, file=label)  # configuration errors before any work
    workers = workers or os.cpu_count() or 1
    stats = BatchStats()
    defaults = {k: v for k, v in (("query", query), ("budget", budget)) if v is not None}
    name = "<stdin>" if str(corpus) == "-" else str(corpus)
    spec = (pipeline_text, label, runs)
    total = corpus.stat().st_size if name != "<stdin>" and corpus.is_file() else None
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a", encoding="utf-8", errors="backslashreplace") as sink:
        skip = done_ids(out)
        _lock(sink, out)  # after done_ids: closing any descriptor of the file drops a POSIX lock
        seen: dict[str, int] = {}
        started = time.perf_counter()
        pool = _executor(executor, workers, scheduler)
        if isinstance(pool, _Dask):
            pool.warm(spec)
        stats.slots = _slots(pool, workers)
        window = stats.window = window or 4 * stats.slots
        chunks = Chunks(stats.slots, fixed=1 if executor == "serial" else chunk)
        target = chunks.size()  # documents in the task being filled
        # after the executor is up (a Dask cluster takes seconds to start): rates count work only
        shown = None if progress is None else BatchProgress(progress, count_records(corpus) if live else None,
                                                           live=live)
        pending: dict[Any, tuple[int, tuple[Any, ...]]] = {}  # task -> (first position, arguments)
        ready: dict[int, dict[str, Any]] = {}
        sizes: dict[int, int] = {}  # corpus bytes of each document in flight, for MB/s
        batch: list[tuple[dict[str, Any], int]] = []  # (record, line) of the task being filled
        restarts = 0
        next_to_write = 0
        order = 0
        in_flight = 0  # documents in pending tasks
        read_bytes = 0
        finished = False

        def flush() -> None:
            nonlocal next_to_write
            while next_to_write in ready:
                result = ready.pop(next_to_write)
                sink.write(json.dumps(result, ensure_ascii=False, default=str) + "\n")
                next_to_write += 1
            sink.flush()

        def done(position: int, result: dict[str, Any]) -> None:
            ready[position] = result
            stats.done += 1
            stats.bytes_done += (size := sizes.pop(position, 0))
            if shown is not None:
                shown.done(size, bool(result.get("ok")))
            if not result.get("ok"):
                stats.failed += 1
                if len(stats.errors) < 20:
                    stats.errors.append(f"{result.get('id')}: {result.get('error')}")

        def collect(block: bool) -> None:
            nonlocal pool, restarts, in_flight
            futures = list(pending)
            if executor == "dask":
                from distributed import wait as dask_wait

                finished = dask_wait(futures, return_when="FIRST_COMPLETED").done if block else [
                    f for f in futures if f.done()]
            else:
                finished = wait(futures, return_when=FIRST_COMPLETED).done if block else [
                    f for f in futures if f.done()]
            for future in finished:
                if future not in pending:
                    continue
                try:
                    results, cpu = future.result()
                except BrokenProcessPool:
                    if restarts >= 3:
                        raise CompactorError("the process pool broke 3 times; giving up") from None
                    restarts += 1  # a worker died: a new pool runs everything that was in flight
                    pool.shutdown(wait=False, cancel_futures=True)
                    pool = _executor(executor, workers, scheduler)
                    for old, (position, args) in list(pending.items()):
                        del pending[old]
                        pending[pool.submit(run_documents, *args)] = (position, args)
                    return
                position, args = pending.pop(future)
                in_flight -= len(args[1])
                chunks.observe(results, cpu)
                stats.task_cpu += cpu
                for offset, result in enumerate(results):
                    done(position + offset, result)
            flush()

        def send() -> None:
            """The filled task to the executor; then wait while the window is full (finished
            results wait for slow ones, so that memory stays bounded)."""
            nonlocal in_flight, target
            args = (spec, list(batch), output_format, defaults, name)
            pending[pool.submit(run_documents, *args)] = (order - len(batch), args)
            stats.tasks += 1
            in_flight += len(batch)
            batch.clear()
            while pending and in_flight + len(ready) >= window * target:
                collect(block=True)
            collect(block=False)
            left = None if total is None else (total - stats.bytes_in) * stats.read / max(stats.bytes_in, 1)
            target = chunks.size(left)

        try:
            for number, record in read_corpus(corpus, stats):
                stats.read += 1
                size, read_bytes = stats.bytes_in - read_bytes, stats.bytes_in
                doc_id = record.get("id", f"line-{number}")
                key = id_key(doc_id)
                if key in skip:
                    stats.skipped += 1
                    if shown is not None:
                        shown.skip()
                    continue
                if key in seen:
                    record = {"id": doc_id, "_error": f"{name}:{number}: duplicate id (first on line "
                                                      f"{seen[key]}); ids must be unique to resume"}
                seen.setdefault(key, number)
                batch.append((record, number))
                sizes[order] = size
                order += 1
                if len(batch) >= target:
                    send()
            if batch:
                send()
            while pending:
                collect(block=True)
            if not stats.read:
                raise InputError(f"{name}: the corpus is empty: no records (one JSON object per line)")
            finished = True
        except KeyboardInterrupt:
            stats.interrupted = finished = True
            for future in pending:
                future.cancel()
        finally:
            flush()
            if isinstance(pool, ProcessPoolExecutor):
                pool.shutdown(wait=not stats.interrupted, cancel_futures=True)
            else:
                pool.close()
            if shown is not None:  # the summary line only for a run that did not fail
                shown.close(stats.interrupted, summary=finished)
    stats.seconds = time.perf_counter() - started
    return stats


def _lock(sink: TextIO, out: Path) -> None:
    """One run per output file: a second run on the same --out stops at once."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return
    if not out.is_file():  # a FIFO or a device: whoever reads it sees one stream, nothing to guard
        return
    try:
        # a POSIX record lock: unlike flock, pool workers forked later do not inherit it, so a
        # killed run's orphaned workers cannot keep the file locked
        fcntl.lockf(sink.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        raise InputError(f"{out}: another compactor-run is writing to this file") from None
