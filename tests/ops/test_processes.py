"""Processes: a batch run killed with SIGKILL takes its pool workers with it, at
any point, and the next run resumes with every id exactly once; `--executor dask` does not need
port 8787. The `processes` fixture (tests/conftest.py) finds what a test started by its marker."""

from __future__ import annotations

import json
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from compactor.ops.batch import done_ids, run_batch
from compactor.pipeline import read_pipeline_text

from ..helpers import EVAL, REPO

pytestmark = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux /proc")

# compactor-run with a way to start its workers: "signal" (the default: fork, parent-death signal
# and the watch thread), "watch" (fork, no parent-death signal: the thread alone), "forkserver"
WRAPPER = """
import multiprocessing, sys
import compactor.ops.batch as batch
way = sys.argv.pop(1)
if way == "watch":
    batch._parent_death_signal = lambda: False
elif way == "forkserver":
    multiprocessing.set_start_method("forkserver")
from compactor.ops.cli import main
sys.argv[0] = "compactor-run"
raise SystemExit(main())
"""


def _corpus(tmp_path: Path, copies: int) -> tuple[Path, list[str]]:
    source = EVAL / "summarization-frank-cnndm-xsum" / "summ.jsonl"
    if not source.exists():
        pytest.skip(f"evaluation data not found: {source}")
    rows = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines()[:40]]
    path = tmp_path / "corpus.jsonl"
    ids = [f"d{n}-{i}" for n in range(copies) for i in range(len(rows))]
    with path.open("w", encoding="utf-8") as handle:
        for doc_id in ids:
            row = rows[int(doc_id.split("-")[1])]
            handle.write(json.dumps({"id": doc_id, "text": row["document"], "budget": 80}) + "\n")
    return path, ids


def _start(tmp_path: Path, corpus: Path, out: Path, way: str = "signal") -> subprocess.Popen[bytes]:
    log = (tmp_path / f"stderr-{time.monotonic_ns()}.log").open("wb")
    with log:
        return subprocess.Popen([sys.executable, "-c", WRAPPER, way, "qa", str(corpus), "--out", str(out),
                                 "--query", "who won?", "--workers", "2", "--quiet"],
                                cwd=REPO, stdout=subprocess.DEVNULL, stderr=log)


def _descendants(pid: int) -> set[int]:
    found, todo = set(), [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = {int(c) for c in (task / "children").read_text().split()}
            except OSError:
                continue
            todo.extend(children - found)
            found |= children
    return found


def _results(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("way", ["signal", "watch", "forkserver"])
def test_a_killed_batch_run_takes_its_workers_with_it(tmp_path: Path, processes: Any, way: str) -> None:
    corpus, _ = _corpus(tmp_path, copies=15)
    out = tmp_path / "out.jsonl"
    run = _start(tmp_path, corpus, out, way)
    workers: set[int] = set()
    deadline = time.time() + 90
    while time.time() < deadline and not (out.exists() and out.stat().st_size > 2000 and len(workers) >= 2):
        time.sleep(0.05)
        workers = {p.pid for p in processes.running()} & _descendants(run.pid)
    assert run.poll() is None, "the run ended before it could be killed"
    assert len(workers) >= 2, f"no pool workers seen: {processes.running()}"
    run.send_signal(signal.SIGKILL)
    run.wait()
    assert processes.wait_gone(10) == []
    deadline = time.time() + 10
    while time.time() < deadline and any(map(_running, workers)):
        time.sleep(0.05)
    assert [(pid, _running(pid)) for pid in workers if _running(pid)] == []
    assert 0 < len(done_ids(out)) < 600


def _running(pid: int) -> str:
    """The state of a process that has not exited ("" when gone or a zombie)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return ""
    return "" if state in ("Z", "X") else state


@pytest.mark.parametrize("seed", range(5))
def test_killed_at_random_points_then_resumed_every_id_once_and_no_process_left(
        tmp_path: Path, processes: Any, seed: int) -> None:
    """Fault injection: SIGKILL after a random delay (start-up, mid-run or after the end), twice,
    then a run to the end; every kill leaves no process, and the output holds every id once, in
    input order."""
    rng = random.Random(seed)
    corpus, ids = _corpus(tmp_path, copies=3)
    out = tmp_path / "out.jsonl"
    for _ in range(2):
        run = _start(tmp_path, corpus, out)
        time.sleep(rng.uniform(0.0, 4.0))
        run.send_signal(signal.SIGKILL)
        run.wait()
        assert processes.wait_gone(10) == []
        written = [r["id"] for r in _results(out)] if out.exists() else []
        assert written == ids[:len(written)]  # a prefix of the input, nothing twice
        print(f"seed {seed}: killed with {len(written)} of {len(ids)} written")
    last = _start(tmp_path, corpus, out)
    assert last.wait(timeout=300) == 0
    assert processes.wait_gone(10) == []
    results = _results(out)
    assert [r["id"] for r in results] == ids and all(r["ok"] for r in results)


def test_dask_local_cluster_runs_when_port_8787_is_taken(tmp_path: Path) -> None:
    """`dashboard_address=None` still put the scheduler's HTTP server on 8787: with the port taken
    distributed warned and moved (an error under -W error, as here); now it is a free port. The
    cluster has no dashboard, so its workers do not sample profiles either."""
    pytest.importorskip("distributed")
    from compactor.ops.batch import _Dask

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": i, "text": f"Document {i} says the pump restarted at "
                                          f"{i} o'clock after the valve was replaced."}) + "\n"
                              for i in range(3)), encoding="utf-8")
    holder = socket.socket()
    try:
        holder.bind(("127.0.0.1", 8787))
        holder.listen()
    except OSError:
        pass  # taken already: all the same for this test
    try:
        executor = _Dask(None, 1)
        try:
            assert executor.cluster is not None
            http = executor.cluster.scheduler.http_server
            assert http.port != 8787 and http.address == "127.0.0.1"

            def profiling() -> bool:
                import dask

                return bool(dask.config.get("distributed.worker.profile.enabled"))

            assert list(executor.client.run(profiling).values()) == [False]  # nobody would see it
        finally:
            executor.close()
        out = tmp_path / "out.jsonl"
        stats = run_batch(*read_pipeline_text("generic"), corpus, out, executor="dask", workers=1)
    finally:
        holder.close()
    assert stats.done == 3 and stats.failed == 0
    assert [r["id"] for r in _results(out)] == [0, 1, 2]


def test_a_worker_whose_run_is_already_gone_exits_at_once() -> None:
    """The race the parent-death signal leaves: a worker set up after its run died must not stay."""
    code = ("import sys\n"
            "from compactor.ops.batch import worker_init\n"
            "worker_init(int(sys.argv[1]))\n"
            "print('still here')\n")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a run that has died: the worker's parent is some other process
    done = subprocess.run([sys.executable, "-c", code, str(gone.pid)], capture_output=True, text=True,
                          timeout=60, cwd=REPO)
    assert (done.returncode, done.stdout, done.stderr) == (1, "", "")
