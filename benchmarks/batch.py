"""Benchmark batch mode: documents/s, MB/s, CPU and peak memory for one process, the process pool and Dask.

What is measured
    One JSONL corpus built from ../shared/eval (news articles of summarization-frank-cnndm-xsum and
    web pages of web-article-extraction, repeated with fresh ids up to ``--mb`` megabytes) goes
    through `run_batch` with the ``--pipeline`` (default ``qa``, with a query and a 200-token budget)
    in several ways: ``serial`` (one process), ``local`` (a process pool over the cores), ``dask``
    (a LocalCluster of 2 worker processes, one thread each, tasks of several documents as batch mode
    sizes them) and ``dask-1`` (the same cluster with one document per task, as batch mode did
    before). Each way runs in a fresh interpreter, so peak memory (``ru_maxrss``) is per run: the
    parent (reading, ordering, writing) and the largest worker. Every output is checked: one result
    per input id, in input order.

    Batch mode is about parallel speed-up, so its rates are wall-clock (``docs/s``); beside them is
    the CPU the run took in every process, from the start of `run_batch` to its end (cluster start-up
    and interpreter start excluded): this process (for Dask, also the client and the scheduler), its
    pool workers (``RUSAGE_CHILDREN`` once the pool is joined) and the Dask workers
    (``time.process_time`` on each, through ``client.run``). ``docs/CPU-s`` is documents per
    CPU-second, ``CPU x`` the CPU against the serial run's: what a way costs over one process. The
    machine may be shared: the load average is printed with the figures, and wall rates mean little
    when it is above the core count.

Why Dask was slower, and what batch mode does about it
    A Dask task costs a few milliseconds of CPU whatever it does (the client sends it, the scheduler
    places it, the worker unpacks it and reports back), about as much as compressing one short
    document. Batch mode therefore puts several documents in a task, enough for about
    ``TASK_SECONDS`` of work (``compactor.ops.batch.Chunks``), so that cost is paid once per task,
    not per document; each worker builds the pipeline once, before the first task (only its text
    travels with a task). What remains over one process is one pipeline build per worker and the
    cluster's own CPU (heartbeats, the scheduler).

Run: ``python benchmarks/batch.py`` (``--mb 5``, ``--pipeline qa``, ``--ways serial,local,dask,dask-1``).
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from evaldata import eval_dir, read_jsonl
from measure import print_environment

DASK_MISSING = 'the dask extra is not installed: pip install ".[dask]" (or ".[bench]")'


def build_corpus(path: Path, megabytes: float) -> int:
    """Write the corpus; returns its number of documents."""
    docs: list[dict[str, Any]] = []
    for row in read_jsonl(eval_dir() / "summarization-frank-cnndm-xsum" / "summ.jsonl"):
        docs.append({"text": row["document"]})
    pages = eval_dir() / "web-article-extraction"
    for row in read_jsonl(pages / "pages.jsonl"):
        html_path = pages / row["html_path"]
        opener = gzip.open if html_path.suffix == ".gz" else open
        with opener(html_path, "rt", encoding="utf-8", errors="replace") as handle:
            docs.append({"html": handle.read(), "url": row.get("url")})
    written, count = 0, 0
    with path.open("w", encoding="utf-8") as out:
        while written < megabytes * 1e6:
            for doc in docs:
                line = json.dumps({"id": f"doc{count}", **doc}, ensure_ascii=False) + "\n"
                out.write(line)
                written += len(line.encode("utf-8"))
                count += 1
                if written >= megabytes * 1e6:
                    break
    return count


def _cpu() -> tuple[float, float]:
    """CPU seconds of this process, and of the children it has waited for (a joined pool's workers)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def one_run(way: str, pipeline: str, corpus: Path, out: Path) -> dict[str, Any]:
    """Run inside a fresh interpreter (`--run`): the figures of one way."""
    from compactor.ops.batch import run_batch
    from compactor.pipeline import read_pipeline_text

    text, label = read_pipeline_text(pipeline)
    options: dict[str, Any] = {"query": "what happened?", "budget": 200}
    worker_rss = 0
    if way.startswith("dask"):
        from distributed import Client

        from compactor.ops.batch import local_cluster

        with local_cluster(2) as cluster, Client(cluster) as client:  # the cluster batch mode starts
            before = client.run(time.process_time)
            own = _cpu()[0]
            started = time.perf_counter()
            stats = run_batch(text, label, corpus, out, executor="dask", scheduler=cluster.scheduler_address,
                              chunk=1 if way == "dask-1" else None, **options)
            seconds = time.perf_counter() - started
            parent_cpu = _cpu()[0] - own
            after = client.run(time.process_time)
            worker_cpu = sum(after[w] - before.get(w, 0.0) for w in after)
            busiest = max([after[w] - before.get(w, 0.0) for w in after] + [parent_cpu])
            rss = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
            worker_rss = max(rss.values())
    else:
        own, children = _cpu()
        started = time.perf_counter()
        stats = run_batch(text, label, corpus, out, executor=way, workers=os.cpu_count() or 1,  # type: ignore[arg-type]
                          **options)
        seconds = time.perf_counter() - started
        parent_cpu, worker_cpu = _cpu()[0] - own, _cpu()[1] - children
        busiest = max(parent_cpu, worker_cpu / (os.cpu_count() or 1))  # the pool's workers share alike
        if way == "local":
            worker_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {"way": way, "docs": stats.done, "failed": stats.failed, "tasks": stats.tasks, "seconds": seconds,
            "cpu": parent_cpu + worker_cpu, "parent_cpu": parent_cpu, "worker_cpu": worker_cpu,
            "task_cpu": stats.task_cpu, "busiest_cpu": busiest, "bytes": stats.bytes_in,
            "parent_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "worker_rss_kb": worker_rss}


WAYS = ("serial", "local", "dask", "dask-1")


def _row(figures: dict[str, Any], serial_cpu: float | None) -> str:
    docs, seconds, cpu, tasks = figures["docs"], figures["seconds"], figures["cpu"], max(figures["tasks"], 1)
    ratio = f"{cpu / serial_cpu:.2f}" if serial_cpu else "-"
    megabytes = figures["bytes"] / 1e6
    parent_mb, worker_mb = figures["parent_rss_kb"] / 1024, figures["worker_rss_kb"] / 1024
    return (f"{figures['way']:<8}{docs / seconds:>9.1f}{megabytes / seconds:>7.2f}{seconds:>9.1f}"
            f"{cpu:>8.1f}{docs / cpu:>11.1f}{ratio:>7}{figures['tasks']:>7}{docs / tasks:>10.1f}"
            f"{parent_mb:>10.0f}{worker_mb:>10.0f}{figures['failed']:>7}")


def _where(results: dict[str, dict[str, Any]]) -> None:
    """Where each way's CPU went: the documents (the tasks' own CPU), the worker processes besides
    them (start of each task, Dask's event loop, heartbeats, the first task's pipeline set-up) and
    this process (reading, ordering, writing; for Dask also the client and the scheduler)."""
    print(f"\nCPU s by where it went   {'documents':>10}{'workers':>9}{'parent':>8}{'over documents':>16}")
    for way, figures in results.items():
        task_cpu = figures["task_cpu"]
        # serial runs its tasks in this process; a pool's or Dask's run in the workers
        parent = figures["parent_cpu"] - (task_cpu if way == "serial" else 0.0)
        workers = figures["worker_cpu"] - (0.0 if way == "serial" else task_cpu)
        over = 100 * (figures["cpu"] - task_cpu) / max(task_cpu, 1e-9)
        print(f"{way:<24}{task_cpu:>11.1f}{workers:>9.1f}{parent:>8.1f}{over:>15.0f}%")


def _idle_rate(figures: dict[str, Any], cores: int) -> float:
    """Documents/s the run's CPU allows on an idle machine: its CPU spread over the cores, but no
    faster than its busiest process alone."""
    return float(figures["docs"] / max(figures["cpu"] / cores, figures["busiest_cpu"], 1e-9))


def _verdict(results: dict[str, dict[str, Any]], load: float) -> None:
    """The target line (Dask on 2 local workers at least as fast as one process) and what a real
    cluster would change. On a busy machine the wall rates are the share of the cores each run got,
    so the rates its CPU allows on an idle machine are printed too."""
    if "serial" not in results or "dask" not in results:
        return
    serial, dask = results["serial"], results["dask"]
    serial_rate, dask_rate = serial["docs"] / serial["seconds"], dask["docs"] / dask["seconds"]
    verdict = "PASS" if dask_rate >= serial_rate else "FAIL"
    print(f"\n{verdict}: Dask on 2 local workers >= serial throughput: {dask_rate:.1f} vs {serial_rate:.1f} "
          f"docs/s (wall); per CPU-second {dask['docs'] / dask['cpu']:.1f} vs "
          f"{serial['docs'] / serial['cpu']:.1f}")
    cores = os.cpu_count() or 1
    if load > cores:
        idle_dask, idle_serial = _idle_rate(dask, cores), _idle_rate(serial, cores)
        print(f"the machine was busy (load average up to {load:.1f} on {cores} cores), so each run got a "
              f"share of the cores, not the cores; what their CPU allows on an idle machine: Dask "
              f"{idle_dask:.1f} vs serial {idle_serial:.1f} docs/s "
              f"({'PASS' if idle_dask >= idle_serial else 'FAIL'})")
    if "dask-1" in results and results["dask-1"]["tasks"] > dask["tasks"]:
        one = results["dask-1"]
        per_task = 1000 * ((one["cpu"] - one["task_cpu"]) - (dask["cpu"] - dask["task_cpu"])) / (
            one["tasks"] - dask["tasks"])
        per_doc = dask["docs"] / max(dask["tasks"], 1)
        print(f"why Dask was slower: a task costs the client, the scheduler and the worker about "
              f"{per_task:.1f} ms of CPU whatever it holds; one document per task took {one['cpu']:.1f} "
              f"CPU s in {one['tasks']} tasks, {per_doc:.1f} documents per task {dask['cpu']:.1f} CPU s in "
              f"{dask['tasks']}; what is left over one process is a pipeline set-up per worker and the "
              f"cluster's own upkeep")
    print(f"On a real cluster the workers are other machines' cores: every task is independent CPU work, so "
          f"throughput grows with the workers until this process (reading, ordering, writing and scheduling: "
          f"{1000 * dask['parent_cpu'] / dask['docs']:.1f} ms of CPU per document here, so about "
          f"{dask['docs'] / max(dask['parent_cpu'], 1e-9):.0f} docs/s) is the limit; each worker builds the "
          f"pipeline once, however many tasks it runs.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--mb", type=float, default=5.0, help="corpus size in megabytes")
    parser.add_argument("--pipeline", default="qa")
    parser.add_argument("--ways", default=",".join(WAYS), help=f"comma-separated, of {', '.join(WAYS)}")
    parser.add_argument("--run", nargs=3, metavar=("WAY", "CORPUS", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run:
        way, corpus, out = args.run
        print(json.dumps(one_run(way, args.pipeline, Path(corpus), Path(out))))
        return 0
    ways = [w.strip() for w in args.ways.split(",") if w.strip()]
    if unknown := sorted(set(ways) - set(WAYS)):
        parser.error(f"unknown ways: {', '.join(unknown)}")
    print_environment(["dask", "distributed"])
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.jsonl"
        count = build_corpus(corpus, args.mb)
        ids = [json.loads(line)["id"] for line in corpus.open(encoding="utf-8")]
        print(f"corpus: {count} documents, {corpus.stat().st_size / 1e6:.1f} MB; pipeline {args.pipeline}; "
              f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f}")
        print(f"{'way':<8}{'docs/s':>9}{'MB/s':>7}{'seconds':>9}{'CPU s':>8}{'docs/CPU-s':>11}{'CPU x':>7}"
              f"{'tasks':>7}{'docs/task':>10}{'parent MB':>10}{'worker MB':>10}{'failed':>7}")
        results: dict[str, dict[str, Any]] = {}
        load = os.getloadavg()[0]
        for way in ways:
            if way.startswith("dask") and (importlib.util.find_spec("dask") is None
                                           or importlib.util.find_spec("distributed") is None):
                print(f"{way:<8}skipped: {DASK_MISSING}")
                continue
            out = Path(tmp) / f"{way}.jsonl"
            done = subprocess.run([sys.executable, __file__, "--pipeline", args.pipeline, "--run", way,
                                   str(corpus), str(out)], capture_output=True, text=True, check=False)
            if done.returncode != 0:
                tail = "\n".join(done.stderr.strip().splitlines()[-15:])
                missing = way.startswith("dask") and "ModuleNotFoundError" in done.stderr
                hint = f"\n{DASK_MISSING}" if missing else ""
                print(f"{way:<8}failed (exit {done.returncode}):\n{tail}{hint}", file=sys.stderr)
                continue
            figures = json.loads(done.stdout.strip().splitlines()[-1])
            written = [json.loads(line)["id"] for line in out.open(encoding="utf-8")]
            assert written == ids, f"{way}: results are not one per input id in input order"
            results[way] = figures
            load = max(load, os.getloadavg()[0])
            print(_row(figures, results["serial"]["cpu"] if "serial" in results else None), flush=True)
        print(f"load average after: {os.getloadavg()[0]:.1f}")
        if "serial" in results:
            base = results["serial"]["seconds"]
            print("speed-up over one process (wall): " + ", ".join(
                f"{way} {base / results[way]['seconds']:.2f}x" for way in results if way != "serial"))
        _where(results)
        _verdict(results, load)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
