"""Four processes on one session of one SQLite store compose exactly as the same batches run one
after another: every fact kept, each page new to exactly one process, and the
checklist, kept chunk ids and rolling summary what a sequential run in the same order leaves."""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from compactor import ContextCompacter, SQLiteStore
from compactor.apps.compacter import fact_to_dict
from compactor.store import MemoryStore

from ..helpers import EVAL, REPO

QA = EVAL / "hotpotqa-distractor-sample" / "qa.jsonl"
pytestmark = pytest.mark.skipif(not QA.is_file(), reason="eval data not found")
STRATEGIES = ("fact_centric", "chunk_filtering", "summarization")
PROCESSES = 4


def _question() -> dict[str, Any]:
    """A HotpotQA question whose ten paragraphs all give each strategy something in every batch."""
    return json.loads(QA.read_text(encoding="utf-8").splitlines()[1])


QUERY = _question()["question"] if QA.is_file() else ""


def _texts() -> list[dict[str, str]]:
    return [{"url": "https://en.wikipedia.org/wiki/" + c["title"].replace(" ", "_"), "content": c["text"]}
            for c in _question()["contexts"][:9]]


def _batches() -> list[list[dict[str, str]]]:
    """Process k gets pages 2k..2k+2: each shares its last page with the next process."""
    texts = _texts()
    return [texts[2 * k:2 * k + 3] for k in range(PROCESSES)]


def _state(compacter: ContextCompacter) -> dict[str, Any]:
    """Everything a session holds that a later batch or the caller sees."""
    store, session = compacter.store, compacter.session
    return {
        "facts": [fact_to_dict(f) for f in compacter.facts],
        "checklist": store.knowledge(session, "checklist"),
        "checklist_budget": store.knowledge(session, "checklist_budget"),
        "kept_chunk_ids": compacter.chunk_ids,
        "chunk_scores": store.knowledge(session, "chunk_scores"),
        "summary": compacter.summary,
        "sources": [s.url for s in store.sources(session)],
        "session_chunks": [c.id for c in store.session_chunks(session)],
        "new_pages": [b["report"]["new_pages"] for b in store.batches(session)],
    }


def _sequential(order: list[int], strategy: str, store: Any) -> dict[str, Any]:
    """The batches of `order` run one after another in this process."""
    batches = _batches()
    compacter = ContextCompacter(strategy, store=store, session="s", query=QUERY)
    for k in order:
        compacter.process_search_results(batches[k])
    return _state(compacter)


def _growth(order: list[int]) -> list[tuple[int, int, int]]:
    """Facts, kept chunks and summary length after each batch of a sequential run: each batch
    changes each, so a lost batch shows."""
    batches = _batches()
    compacters = [ContextCompacter(s, store=MemoryStore(), session="s", query=QUERY) for s in STRATEGIES]
    sizes = []
    for k in order:
        for compacter in compacters:
            compacter.process_search_results(batches[k])
        sizes.append((len(compacters[0].facts), len(compacters[1].chunk_ids), len(compacters[2].summary)))
    return sizes


def _worker(db: str, k: int, barrier: Any, results: Any) -> None:
    """One process: wait for the others, then one batch into each strategy's session."""
    batches = _batches()
    compacters = {s: ContextCompacter(s, store=db, session=f"s-{s}", query=QUERY) for s in STRATEGIES}
    barrier.wait()
    reports = {s: c.process_search_results(batches[k]) for s, c in compacters.items()}
    results.put((k, {s: (r["batch"], r["new_pages"]) for s, r in reports.items()}))


def test_four_spawned_processes_compose_as_a_sequential_run_for_every_strategy(tmp_path: Path) -> None:
    db = tmp_path / "shared.sqlite"
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(PROCESSES), ctx.Queue()
    workers = [ctx.Process(target=_worker, args=(str(db), k, barrier, results)) for k in range(PROCESSES)]
    for worker in workers:
        worker.start()
    reports = dict(results.get(timeout=300) for _ in workers)
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    unique = {p["url"] for batch in _batches() for p in batch}
    for strategy in STRATEGIES:
        order = sorted(range(PROCESSES), key=lambda k: reports[k][strategy][0])
        assert [reports[k][strategy][0] for k in order] == [1, 2, 3, 4]
        # a page two processes were given is new to exactly one of them
        assert sum(reports[k][strategy][1] for k in order) == len(unique)
        concurrent = _state(ContextCompacter(strategy, store=db, session=f"s-{strategy}"))
        expected = _sequential(order, strategy, tmp_path / f"sequential-{strategy}.sqlite")
        assert concurrent == expected, strategy
        assert sorted(concurrent["sources"]) == sorted(unique)
        assert expected == _sequential(order, strategy, MemoryStore())  # the stores agree too
    grows = _growth(order)
    # facts and kept chunks grow with every batch, so a lost batch shows; the rolling summary is
    # bounded (it may shrink), and `concurrent == expected` above compares it whole
    assert all(a[0] < b[0] and a[1] < b[1] for a, b in itertools.pairwise(grows)), grows
    with SQLiteStore(db) as store:
        assert store._query("SELECT COUNT(*) FROM session_locks") == [(0,)]  # every lock released


def test_four_compactor_run_processes_keep_every_fact(tmp_path: Path) -> None:
    """The issue's reproduction: four `compactor-run deep-search --session s --store x.sqlite` at once."""
    db = tmp_path / "x.sqlite"
    files = []
    for k, batch in enumerate(_batches()):
        path = tmp_path / f"results-{k}.jsonl"
        path.write_text("".join(json.dumps(p) + "\n" for p in batch), encoding="utf-8")
        files.append(path)
    procs = [subprocess.Popen([sys.executable, "-m", "compactor.ops.cli", "deep-search", str(path), "--query",
                               QUERY, "--session", "s", "--store", str(db), "--format", "json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
             for path in files]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0] * PROCESSES, [e for _, e in outputs]
    numbers, new = {}, {}
    for k, (_, err) in enumerate(outputs):
        line = next(x for x in err.splitlines() if "session s (fact_centric): batch" in x)
        numbers[k] = int(line.split("batch ")[1].split(",")[0])
        new[k] = int(line.split(", ")[1].split(" new")[0])
    order = sorted(numbers, key=numbers.get)  # type: ignore[arg-type]
    assert sorted(numbers.values()) == [1, 2, 3, 4]
    concurrent = _state(ContextCompacter("fact_centric", store=db, session="s"))
    expected = _sequential(order, "fact_centric", tmp_path / "sequential.sqlite")
    assert concurrent["facts"] == expected["facts"] and len(expected["facts"]) > PROCESSES
    assert concurrent == expected
    assert [new[k] for k in order] == expected["new_pages"]


def test_a_lock_left_by_a_killed_process_is_taken_over(tmp_path: Path) -> None:
    db = tmp_path / "k.sqlite"
    script = textwrap.dedent(f"""
        import os
        from compactor import SQLiteStore
        store = SQLiteStore({str(db)!r})
        with store.lock_session("s"):
            print("locked", flush=True)
            os._exit(9)  # dies holding the lock, as kill -9 would leave it
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=REPO)
    assert done.returncode == 9 and "locked" in done.stdout, done.stderr
    with SQLiteStore(db) as store:
        assert store._query("SELECT pid FROM session_locks")[0][0] != os.getpid()
        with store.lock_session("s", wait=5):  # the holder is dead: no wait for its lease
            assert store._query("SELECT pid FROM session_locks") == [(os.getpid(),)]
        assert store._query("SELECT COUNT(*) FROM session_locks") == [(0,)]


def test_a_live_holder_makes_others_wait_then_a_clear_error(tmp_path: Path) -> None:
    from compactor.errors import StoreError

    db = tmp_path / "w.sqlite"
    first, second = SQLiteStore(db), SQLiteStore(db)
    with first.lock_session("s"):
        with pytest.raises(StoreError, match=r"w\.sqlite: session 's' is busy: process \d+ .* \(waited"), \
                second.lock_session("s", wait=0.3):
            pass
        with second.lock_session("other", wait=0.3):  # another session is not held
            pass
    with second.lock_session("s", wait=0.3):  # released
        pass
    first.close()
    second.close()


def test_a_writer_that_skips_the_lock_makes_the_batch_run_again(tmp_path: Path) -> None:
    """The version check: a commit computed from a state that changed meanwhile is refused, and
    ContextCompacter computes the batch again instead of overwriting the other writer's facts."""
    from compactor.errors import StoreConflict
    from compactor.store import Batch

    batches = _batches()
    compacter = ContextCompacter("fact_centric", store=tmp_path / "v.sqlite", session="s", query=QUERY)
    compacter.process_search_results(batches[0])
    store = compacter.store
    base = store.version("s")
    store.commit_batch("s", Batch(report={"kind": "other"}), base=base)
    with pytest.raises(StoreConflict, match="changed while the batch ran"):
        store.commit_batch("s", Batch(report={"kind": "stale"}), base=base)
    runs = []
    original = compacter.pipeline.run

    def sneaky(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        if not runs:  # a writer without the lock commits while the first attempt runs
            ContextCompacter("fact_centric", store=SQLiteStore(tmp_path / "v.sqlite"), session="s",
                             query=QUERY)._batch(list(map(_source, batches[2])), QUERY,
                                                 compacter.pipeline.spec.budget)
        runs.append(1)
        return result

    compacter.pipeline.run = sneaky  # type: ignore[method-assign]
    before = {f.id for f in compacter.facts}
    report = compacter.process_search_results(batches[1])
    assert len(runs) == 2 and report["batch"] == 4
    expected = _sequential([0, 2, 1], "fact_centric", MemoryStore())
    assert [fact_to_dict(f) for f in compacter.facts] == expected["facts"]
    assert before < {f.id for f in compacter.facts}


def _source(item: dict[str, str]) -> Any:
    from compactor.apps.compacter import to_source

    return to_source(item, 0)
