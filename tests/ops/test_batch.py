"""Batch mode: JSONL in and out, input order, resume after a crash or Ctrl-C, process pool and Dask."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from compactor.errors import InputError
from compactor.ops.batch import MAX_CHUNK, TASK_SECONDS, TASK_WALL, Chunks, done_ids, run_batch
from compactor.pipeline import read_pipeline_text

from ..helpers import EVAL, REPO

GENERIC = read_pipeline_text("generic")


def _corpus(tmp_path: Path, copies: int = 1, name: str = "corpus.jsonl") -> Path:
    source = EVAL / "summarization-frank-cnndm-xsum" / "summ.jsonl"
    if not source.exists():
        pytest.skip(f"evaluation data not found: {source}")
    rows = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines()[:40]]
    path = tmp_path / name
    with path.open("w", encoding="utf-8") as handle:
        for n in range(copies):
            for i, row in enumerate(rows):
                handle.write(json.dumps({"id": f"d{n}-{i}", "text": row["document"], "budget": 80}) + "\n")
    return path


def _results(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _timeless(path: Path) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "seconds"} for r in _results(path)]


def _with_bad_records(corpus: Path) -> Path:
    """The corpus with a failing record and a line that is not JSON in the middle of a task."""
    lines = corpus.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[5:5] = [json.dumps({"id": "empty", "text": "   "}) + "\n", "{not json\n"]
    corpus.write_text("".join(lines), encoding="utf-8")
    return corpus


class _Cli:
    """`compactor-run` in the background; stderr goes to a file the test can read."""

    def __init__(self, log: Path, *args: str) -> None:
        self.log = log
        with log.open("wb") as sink:
            self.process = subprocess.Popen([sys.executable, "-m", "compactor.ops.cli", *args], cwd=REPO,
                                            stdout=subprocess.DEVNULL, stderr=sink)

    def wait(self, timeout: float | None = None) -> int:
        return self.process.wait(timeout=timeout)

    @property
    def stderr(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


def _cli(tmp: Path, *args: str) -> _Cli:
    return _Cli(tmp / f"stderr-{time.monotonic_ns()}.log", *args)


def test_process_pool_streams_results_in_input_order_like_one_process(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)
    serial, pooled = tmp_path / "serial.jsonl", tmp_path / "pooled.jsonl"
    first = run_batch(*GENERIC, corpus, serial, executor="serial")
    second = run_batch(*GENERIC, corpus, pooled, executor="local", workers=2, window=3)
    assert first.done == second.done == 40 and first.failed == second.failed == 0
    a, b = _results(serial), _results(pooled)
    assert [r["id"] for r in b] == [f"d0-{i}" for i in range(40)]
    assert [(r["output"], r["output_tokens"]) for r in a] == [(r["output"], r["output_tokens"]) for r in b]
    assert all(r["ok"] and r["output_tokens"] <= 80 for r in b)


def test_resume_skips_written_ids_and_repairs_a_torn_line(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)
    full = tmp_path / "full.jsonl"
    run_batch(*GENERIC, corpus, full, executor="serial")
    lines = full.read_text(encoding="utf-8").splitlines(keepends=True)
    partial = tmp_path / "partial.jsonl"
    partial.write_text("".join(lines[:15]) + lines[15][:40], encoding="utf-8")  # died mid-write
    assert len(done_ids(partial)) == 15 and partial.read_text(encoding="utf-8") == "".join(lines[:15])
    stats = run_batch(*GENERIC, corpus, partial, executor="local", workers=2)
    assert stats.skipped == 15 and stats.done == 25
    def timeless(path: Path) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.items() if k != "seconds"} for r in _results(path)]

    assert timeless(partial) == timeless(full)  # the same documents once each, in input order


def test_documents_in_tasks_of_several_keep_order_and_their_own_errors(tmp_path: Path) -> None:
    corpus = _with_bad_records(_corpus(tmp_path))
    serial, pooled = tmp_path / "serial.jsonl", tmp_path / "pooled.jsonl"
    first = run_batch(*GENERIC, corpus, serial, executor="serial")
    second = run_batch(*GENERIC, corpus, pooled, executor="local", workers=2, chunk=4)
    assert (first.tasks, second.tasks) == (42, 11)  # 42 records, 4 to a task
    assert first.failed == second.failed == 2
    assert _timeless(pooled) == _timeless(serial)
    assert [r["id"] for r in _results(pooled)][4:8] == ["d0-4", "empty", "line-7", "d0-5"]


def test_task_size_grows_to_the_cpu_target_and_shrinks_at_the_end() -> None:
    ok = {"ok": True, "seconds": 0.01}
    chunks = Chunks(slots=2)
    assert chunks.size() == 1  # nothing measured yet
    chunks.observe([ok], 2.5)  # a worker's first task builds the pipeline
    for _ in range(4):
        chunks.observe([ok] * 4 + [{"ok": False, "error": "x", "seconds": 0.0}], 5 * TASK_SECONDS / 16)
    assert chunks.size() == 16
    assert chunks.size(remaining=40) == 5  # a quarter of each slot's share of what is left
    assert chunks.size(remaining=3) == 1
    busy = Chunks(slots=2)  # other work stretches the documents' wall time, not their CPU
    busy.observe([{"ok": True, "seconds": 4 * TASK_SECONDS / 16}], TASK_SECONDS / 16)
    assert busy.size() == 16 and TASK_WALL / (4 * TASK_SECONDS / 16) > 16
    waiting = Chunks(slots=2)  # a model call per document: little CPU, seconds of wall time
    waiting.observe([{"ok": True, "seconds": TASK_WALL * 1.5}], 0.001)
    assert waiting.size() == 1
    fast = Chunks(slots=2)
    fast.observe([{"ok": True, "seconds": 1e-6}] * 4, 1e-6)
    assert fast.size() == MAX_CHUNK
    assert Chunks(slots=2, fixed=7).size(remaining=1) == 7


def test_a_killed_run_resumes_without_losing_or_repeating_a_document(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path, copies=15)
    out = tmp_path / "out.jsonl"
    run = _cli(tmp_path, "qa", str(corpus), "--out", str(out), "--query", "who won?", "--workers", "2",
               "--quiet")
    deadline = time.time() + 60
    while time.time() < deadline and (not out.exists() or out.stat().st_size < 20_000):
        time.sleep(0.05)
    run.process.send_signal(signal.SIGKILL)
    run.wait()
    written = len(done_ids(out))
    assert 0 < written < 600
    again = _cli(tmp_path, "qa", str(corpus), "--out", str(out), "--query", "who won?", "--quiet")
    assert again.wait(timeout=300) == 0, again.stderr
    ids = [r["id"] for r in _results(out)]
    assert len(ids) == 600 and len(set(ids)) == 600


def test_ctrl_c_stops_cleanly_and_a_bad_document_is_reported_not_fatal(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path, copies=15)
    with corpus.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"id": "empty", "text": "   "}) + "\n")
    out = tmp_path / "out.jsonl"
    run = _cli(tmp_path, "qa", str(corpus), "--out", str(out), "--query", "who won?", "--workers", "2")
    deadline = time.time() + 60
    while time.time() < deadline and (not out.exists() or out.stat().st_size < 5_000):
        time.sleep(0.05)
    run.process.send_signal(signal.SIGINT)
    assert run.wait(timeout=60) == 130
    assert "interrupted; run the same command again to resume" in run.stderr
    assert all(json.loads(line)["ok"] for line in out.read_text(encoding="utf-8").splitlines())
    again = _cli(tmp_path, "qa", str(corpus), "--out", str(out), "--query", "who won?", "--quiet")
    assert again.wait(timeout=300) == 1, again.stderr  # the empty document failed
    results = _results(out)
    assert len(results) == 601 and len({r["id"] for r in results}) == 601
    [bad] = [r for r in results if not r["ok"]]
    assert bad["id"] == "empty" and "`text` is empty" in bad["error"]


def test_dask_local_cluster_survives_a_worker_killed_mid_run(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    corpus = _corpus(tmp_path, copies=10)
    out = tmp_path / "out.jsonl"
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,  # not on port 8787
                                  dashboard_address="127.0.0.1:0", scheduler_kwargs={"dashboard": False},
                                  ) as cluster, distributed.Client(cluster) as client:
        pids = client.run(os.getpid)
        run = _cli(tmp_path, "qa", str(corpus), "--out", str(out), "--query", "who won?",
                   "--executor", "dask", "--scheduler", cluster.scheduler_address, "--quiet")
        deadline = time.time() + 120
        while time.time() < deadline and (not out.exists() or out.read_text().count("\n") < 30):
            time.sleep(0.05)
        os.kill(next(iter(pids.values())), signal.SIGKILL)  # a worker dies mid-run
        assert run.wait(timeout=300) == 0, run.stderr
    ids = [r["id"] for r in _results(out)]
    assert ids == [f"d{n}-{i}" for n in range(10) for i in range(40)]


def test_bad_lines_typed_ids_and_duplicates_become_records(tmp_path: Path) -> None:
    corpus = tmp_path / "mixed.jsonl"
    corpus.write_text("\n".join([
        json.dumps({"id": 1, "text": "The first document is short."}),
        json.dumps({"id": "1", "text": "The second document has a string id."}),
        "{not json",
        "[1, 2]",
        json.dumps({"id": 1, "text": "A repeated id."}),
        json.dumps({"id": "s\ud800", "text": "A lone surrogate in the id."}),
        json.dumps({"id": "b", "text": "Budget as text.", "budget": "50"}),
    ]) + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    stats = run_batch(*GENERIC, corpus, out, executor="serial")
    results = _results(out)
    assert [r["id"] for r in results] == [1, "1", "line-3", "line-4", 1, "s\ud800", "b"]
    assert [r["ok"] for r in results] == [True, True, False, False, False, True, False]
    assert "invalid JSON line" in results[2]["error"] and "expected a JSON object" in results[3]["error"]
    assert "duplicate id (first on line 1)" in results[4]["error"]
    assert "`budget` must be a positive integer" in results[6]["error"] and stats.failed == 4
    again = run_batch(*GENERIC, corpus, out, executor="serial")
    assert again.skipped == 7 and again.done == 0 and len(_results(out)) == 7


def test_a_wrong_out_file_is_never_truncated_and_one_run_per_file(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)
    before = corpus.read_bytes()
    with pytest.raises(InputError, match="not a compactor result line"):
        run_batch(*GENERIC, corpus, corpus, executor="serial")
    assert corpus.read_bytes() == before
    out = tmp_path / "out.jsonl"
    first = _cli(tmp_path, "qa", str(_corpus(tmp_path, copies=10, name="big.jsonl")), "--out", str(out),
                 "--query", "who?", "--workers", "1", "--quiet")
    deadline = time.time() + 60
    while time.time() < deadline and (not out.exists() or out.stat().st_size == 0):
        time.sleep(0.02)
    with pytest.raises(InputError, match="another compactor-run is writing to this file"):
        run_batch(*GENERIC, corpus, out, executor="serial")
    assert first.wait(timeout=300) == 0, first.stderr


def test_a_dead_pool_worker_is_replaced_and_its_documents_run_again(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path, copies=10)
    out = tmp_path / "out.jsonl"
    run = _cli(tmp_path, "qa", str(corpus), "--out", str(out), "--query", "who?", "--workers", "2", "--quiet")
    deadline = time.time() + 60
    children: list[int] = []
    while time.time() < deadline and not (out.exists() and out.stat().st_size > 5000 and children):
        time.sleep(0.05)
        tasks = Path(f"/proc/{run.process.pid}/task/{run.process.pid}/children")
        children = [int(p) for p in tasks.read_text().split()] if tasks.exists() else []
    if not children:
        pytest.skip("cannot see the pool's worker processes (/proc children) here")
    os.kill(children[-1], signal.SIGKILL)
    assert run.wait(timeout=300) == 0, run.stderr
    ids = [r["id"] for r in _results(out)]
    assert ids == [f"d{n}-{i}" for n in range(10) for i in range(40)]


def test_json_output_is_an_object_in_each_result_line(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": i, "text": f"Document {i} says the probe flew. " * 20}) + "\n"
                              for i in range(3)), encoding="utf-8")
    out = tmp_path / "out.jsonl"
    run_batch(*GENERIC, corpus, out, executor="serial", output_format="json", budget=40)
    results = _results(out)
    assert [r["id"] for r in results] == [0, 1, 2]
    for result in results:
        output = result["output"]
        assert isinstance(output, dict), output  # an object, not JSON nested in a string
        assert output["budget"] == 40 and output["segments"][0]["text"].startswith("Document")


def test_dask_tasks_of_several_documents_match_one_process_in_order(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    corpus = _with_bad_records(_corpus(tmp_path))
    serial, out = tmp_path / "serial.jsonl", tmp_path / "dask.jsonl"
    run_batch(*GENERIC, corpus, serial, executor="serial")

    def pipelines_built() -> int:
        from compactor.ops import batch

        return int(batch._pipeline.cache_info().currsize)

    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address="127.0.0.1:0", scheduler_kwargs={"dashboard": False},
                                  ) as cluster, distributed.Client(cluster) as client:
        stats = run_batch(*GENERIC, corpus, out, executor="dask", scheduler=cluster.scheduler_address,
                          chunk=5)
        built = client.run(pipelines_built)
    assert stats.tasks == 9 and stats.done == 42 and stats.failed == 2  # 42 records, 5 to a task
    assert _timeless(out) == _timeless(serial)
    assert sorted(built.values()) == [1, 1]  # each worker built the pipeline once, for every task


def test_dask_work_is_sized_by_the_cluster_threads_not_local_cores(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    distributed = pytest.importorskip("distributed")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": i, "text": f"Document {i} is short but real text."}) + "\n"
                              for i in range(6)), encoding="utf-8")
    out = tmp_path / "out.jsonl"
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address="127.0.0.1:0", scheduler_kwargs={"dashboard": False},
                                  ) as cluster:
        monkeypatch.setattr(os, "cpu_count", lambda: 64)  # this machine's cores must not matter
        stats = run_batch(*GENERIC, corpus, out, executor="dask", scheduler=cluster.scheduler_address)
    assert (stats.slots, stats.window) == (2, 8)
    assert stats.done == 6 and [r["id"] for r in _results(out)] == list(range(6))


def test_an_empty_or_binary_corpus_is_an_input_error(tmp_path: Path) -> None:
    empty, binary = tmp_path / "empty.jsonl", tmp_path / "data.bin"
    empty.write_text("\n\n", encoding="utf-8")
    binary.write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00" * 20)
    with pytest.raises(InputError, match=f"{empty}: the corpus is empty"):
        run_batch(*GENERIC, empty, tmp_path / "a.jsonl", executor="serial")
    with pytest.raises(InputError, match=f"{binary}: looks like a binary file"):
        run_batch(*GENERIC, binary, tmp_path / "b.jsonl", executor="serial")
