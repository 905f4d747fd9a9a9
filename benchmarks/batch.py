"""Benchmark batch mode: documents/s, MB/s and peak memory for one process, the process pool and Dask.

What is measured
    One JSONL corpus built from ../shared/eval (news articles of summarization-frank-cnndm-xsum and
    web pages of web-article-extraction, repeated with fresh ids up to ``--mb`` megabytes) goes
    through `run_batch` with the ``--pipeline`` (default ``qa``, with a query and a 200-token budget)
    three ways: ``serial`` (one process), ``local`` (a process pool over the cores) and ``dask``
    (a LocalCluster of 2 worker processes). Each way runs in a fresh interpreter, so peak memory
    (``ru_maxrss``) is per run: the parent (reading, ordering, writing) and the largest worker.
    Every output is checked: one result per input id, in input order. Batch mode is about
    parallel speed-up, so its rates are wall-clock; the CPU seconds of each run (the child
    interpreter and the workers it waited for) are shown beside them. ``dask`` needs the ``dask``
    extra (also in ``bench``): without it that row is skipped with a note.

Run: ``python benchmarks/batch.py`` (``--mb 5``, ``--pipeline qa``).
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


def one_run(mode: str, pipeline: str, corpus: Path, out: Path) -> dict[str, Any]:
    """Run inside a fresh interpreter (`--run`): the figures of one way."""
    from compactor.ops.batch import run_batch
    from compactor.pipeline import read_pipeline_text

    text, label = read_pipeline_text(pipeline)
    worker_rss = 0
    if mode == "dask":
        from distributed import Client, LocalCluster

        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,  # None binds 8787
                               dashboard_address="127.0.0.1:0", scheduler_kwargs={"dashboard": False})
        with cluster, Client(cluster) as client:
            started = time.perf_counter()
            stats = run_batch(text, label, corpus, out, executor="dask", scheduler=cluster.scheduler_address,
                              query="what happened?", budget=200)
            seconds = time.perf_counter() - started
            rss = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
            worker_rss = max(rss.values())
    else:
        started = time.perf_counter()
        stats = run_batch(text, label, corpus, out, executor=mode, workers=os.cpu_count() or 1,  # type: ignore[arg-type]
                          query="what happened?", budget=200)
        seconds = time.perf_counter() - started
        if mode == "local":
            worker_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {"mode": mode, "docs": stats.done, "failed": stats.failed, "seconds": seconds,
            "bytes": stats.bytes_in, "parent_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            "worker_rss_kb": worker_rss}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--mb", type=float, default=5.0, help="corpus size in megabytes")
    parser.add_argument("--pipeline", default="qa")
    parser.add_argument("--run", nargs=3, metavar=("MODE", "CORPUS", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run:
        mode, corpus, out = args.run
        print(json.dumps(one_run(mode, args.pipeline, Path(corpus), Path(out))))
        return 0
    print_environment(["dask", "distributed"])
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.jsonl"
        count = build_corpus(corpus, args.mb)
        ids = [json.loads(line)["id"] for line in corpus.open(encoding="utf-8")]
        print(f"corpus: {count} documents, {corpus.stat().st_size / 1e6:.1f} MB; pipeline {args.pipeline}; "
              f"{os.cpu_count()} cores")
        print(f"{'way':<8}{'docs/s':>9}{'MB/s':>8}{'seconds':>9}{'CPU s':>8}{'parent MB':>11}"
              f"{'worker MB':>11}{'failed':>8}")
        results = {}
        for mode in ("serial", "local", "dask"):
            if mode == "dask" and (importlib.util.find_spec("dask") is None
                                   or importlib.util.find_spec("distributed") is None):
                print(f"{mode:<8}skipped: {DASK_MISSING}")
                continue
            out = Path(tmp) / f"{mode}.jsonl"
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            done = subprocess.run([sys.executable, __file__, "--pipeline", args.pipeline, "--run", mode,
                                   str(corpus), str(out)], capture_output=True, text=True, check=False)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if done.returncode != 0:
                tail = "\n".join(done.stderr.strip().splitlines()[-15:])
                hint = f"\n{DASK_MISSING}" if mode == "dask" and "ModuleNotFoundError" in done.stderr else ""
                print(f"{mode:<8}failed (exit {done.returncode}):\n{tail}{hint}", file=sys.stderr)
                continue
            figures = json.loads(done.stdout.strip().splitlines()[-1])
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            written = [json.loads(line)["id"] for line in out.open(encoding="utf-8")]
            assert written == ids, f"{mode}: results are not one per input id in input order"
            results[mode] = figures
            print(f"{mode:<8}{figures['docs'] / figures['seconds']:>9.1f}"
                  f"{figures['bytes'] / 1e6 / figures['seconds']:>8.2f}{figures['seconds']:>9.1f}{cpu:>8.1f}"
                  f"{figures['parent_rss_kb'] / 1024:>11.0f}{figures['worker_rss_kb'] / 1024:>11.0f}"
                  f"{figures['failed']:>8}")
        if "serial" in results:
            base = results["serial"]["seconds"]
            print("\nspeed-up over one process (wall): " + ", ".join(
                f"{mode} {base / results[mode]['seconds']:.2f}x"
                for mode in ("local", "dask") if mode in results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
