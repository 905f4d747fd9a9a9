"""What `--store` accepts: compactor stores are marked (application_id and
user_version), unmarked stores of earlier releases are upgraded in place (JSON-blob facts become
rows), and anything else (another application's database, a newer store, a read-only, truncated,
corrupted or non-SQLite file) is refused with one message naming the file, exit 2 from the CLI, a
`compactor.errors.StoreError` from Python, and the file's bytes unchanged."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from compactor import ContextCompacter, Pipeline
from compactor.apps.compacter import fact_from_dict, fact_to_dict
from compactor.document import Chunk, Fact, Source
from compactor.errors import InputError, StoreError
from compactor.ops.monitor import record_runs, rolling_stats
from compactor.store import APPLICATION_ID, SCHEMA_VERSION, Batch, MemoryStore, SQLiteStore, open_store
from compactor.text.language import detect_lang

from ..helpers import run_cli

RESULTS = [{"url": "https://example.org/ev", "content": "Electric cars cost 30000 dollars in 2024. "
            "The battery of the Model 3 holds 75 kWh and gives a range of 500 km on one charge."},
           {"url": "https://example.org/bus", "content": "Electric buses in Shenzhen number 16000. "
            "深圳的电动公交车数量达到一万六千辆，续航里程约为二百五十公里。"}]
QUERY = "electric car battery range price"

# The layout of the unmarked stores of earlier releases, verbatim (`runs` came with monitoring).
V1_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY, created REAL NOT NULL, meta TEXT NOT NULL DEFAULT '{}');
CREATE TABLE IF NOT EXISTS chunks (
    id TEXT PRIMARY KEY, source_id TEXT NOT NULL, idx INTEGER NOT NULL, start INTEGER NOT NULL,
    "end" INTEGER NOT NULL, text TEXT NOT NULL, tokens INTEGER NOT NULL, url TEXT, title TEXT);
CREATE INDEX IF NOT EXISTS chunks_by_source ON chunks (source_id, idx);
CREATE TABLE IF NOT EXISTS session_sources (
    session TEXT NOT NULL, source_id TEXT NOT NULL, seq INTEGER NOT NULL, url TEXT, title TEXT,
    batch INTEGER NOT NULL, signature BLOB, PRIMARY KEY (session, source_id));
CREATE INDEX IF NOT EXISTS sources_by_url ON session_sources (session, url);
CREATE TABLE IF NOT EXISTS source_bands (
    session TEXT NOT NULL, band INTEGER NOT NULL, key INTEGER NOT NULL, source_id TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS bands_by_key ON source_bands (session, band, key);
CREATE TABLE IF NOT EXISTS knowledge (
    session TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (session, key));
%s
CREATE TABLE IF NOT EXISTS batches (
    session TEXT NOT NULL, batch INTEGER NOT NULL, time REAL NOT NULL, sources INTEGER NOT NULL,
    chunks INTEGER NOT NULL, report TEXT NOT NULL, PRIMARY KEY (session, batch));
"""
V1_RUNS = """CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT, pipeline TEXT NOT NULL, time REAL NOT NULL, data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS runs_by_pipeline ON runs (pipeline, id);"""

OLD_FACTS = [
    {"id": "f-1", "text": "Electric cars cost 30000 dollars in 2024.", "chunk_ids": ["src1-0000"],
     "source_url": "https://example.org/ev", "score": 0.9, "span": ["src1", 0, 41]},
    {"id": "f-2", "text": "深圳的电动公交车数量达到一万六千辆。", "chunk_ids": ["src2-0000", "src2-0001"],
     "source_url": None, "score": 0.5},
]


def _v1_store(path: Path, runs: bool = True, facts: Any = OLD_FACTS) -> Path:
    """A store as earlier releases wrote it: unmarked, the facts one JSON blob per session."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.executescript(V1_SCHEMA % (V1_RUNS if runs else ""))
    db.execute("INSERT INTO sessions VALUES ('old', 1.0, '{}')")
    db.execute("INSERT INTO chunks VALUES ('src1-0000', 'src1', 0, 0, 41, ?, 12, "
               "'https://example.org/ev', NULL)", (RESULTS[0]["content"][:41],))
    db.execute("INSERT INTO session_sources VALUES ('old', 'src1', 0, 'https://example.org/ev', NULL, 1, "
               "NULL)")
    db.execute("INSERT INTO knowledge VALUES ('old', 'facts', ?)", (json.dumps(facts, ensure_ascii=False),))
    db.execute("INSERT INTO knowledge VALUES ('old', 'strategy', '\"fact_centric\"')")
    db.execute("INSERT INTO knowledge VALUES ('old', 'checklist', '[\"f-1\"]')")
    db.execute("INSERT INTO batches VALUES ('old', 1, 1.0, 1, 1, '{}')")
    if runs:
        db.execute("INSERT INTO runs (pipeline, time, data) VALUES ('qa', 1.0, ?)",
                   (json.dumps({"pipeline": "qa", "time": 1.0, "seconds": 0.5, "success": True}),))
    db.close()
    return path


def _results(tmp_path: Path) -> Path:
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in RESULTS), encoding="utf-8")
    return path


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def _marks(path: Path) -> tuple[int, int, str]:
    db = sqlite3.connect(path)
    try:
        return tuple(db.execute(f"PRAGMA {name}").fetchone()[0]  # type: ignore[return-value]
                     for name in ("application_id", "user_version", "journal_mode"))
    finally:
        db.close()


def _refused(tmp_path: Path, target: Path, *needles: str) -> None:
    """The CLI and the Python API refuse `target`, with one message naming it, touching nothing."""
    results = _results(tmp_path)
    before = _snapshot(target.parent)
    done = run_cli("deep-search", str(results), "--query", QUERY, "--session", "s", "--store", str(target))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"compactor-run: error: {target}: "), done.stderr
    for needle in needles:
        assert needle in lines[0]
    assert "Traceback" not in done.stderr and done.stdout == ""
    with pytest.raises(StoreError, match=str(target).replace("\\", "\\\\")) as caught:
        ContextCompacter("fact_centric", store=target, session="s")
    assert isinstance(caught.value, InputError) and caught.value.exit_code == 2
    assert _snapshot(target.parent) == before  # the same files, byte for byte: no WAL, no tables


# -- marking ------------------------------------------------------------------------------------------


def test_a_new_store_is_marked_and_an_empty_file_becomes_one(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "new.sqlite") as store:
        store.commit_batch("s", Batch(report={"kind": "test"}))
    assert _marks(tmp_path / "new.sqlite") == (APPLICATION_ID, SCHEMA_VERSION, "wal")
    (tmp_path / "empty.sqlite").touch()  # e.g. from mktemp
    SQLiteStore(tmp_path / "empty.sqlite").close()
    assert _marks(tmp_path / "empty.sqlite")[:2] == (APPLICATION_ID, SCHEMA_VERSION)
    with SQLiteStore(tmp_path / "new.sqlite") as store:  # reopened: used as it is
        assert [b["report"] for b in store.batches("s")] == [{"kind": "test"}]


# -- refusing ----------------------------------------------------------------------------------------


def test_an_application_database_is_refused_untouched(tmp_path: Path) -> None:
    app = tmp_path / "app" / "app.db"
    app.parent.mkdir()
    db = sqlite3.connect(app)
    db.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    db.execute("INSERT INTO users VALUES (1, 'ada')")
    db.commit()
    db.close()
    _refused(tmp_path, app, "not a compactor store", "table(s) users", "left unchanged")


def test_a_database_with_another_chunks_table_is_refused_untouched(tmp_path: Path) -> None:
    other = tmp_path / "other" / "chunks.db"
    other.parent.mkdir()
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE chunks (id INTEGER PRIMARY KEY, body TEXT, embedding BLOB)")
    db.execute("INSERT INTO chunks VALUES (1, 'text', x'00')")
    db.commit()
    db.close()
    _refused(tmp_path, other, "not a compactor store", "table(s) chunks")


def test_a_database_in_wal_mode_and_one_marked_by_another_application_are_refused(tmp_path: Path) -> None:
    wal = tmp_path / "wal" / "wal.db"
    wal.parent.mkdir()
    db = sqlite3.connect(wal, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE notes (body TEXT)")
    db.close()
    _refused(tmp_path, wal, "table(s) notes")
    marked = tmp_path / "gpkg" / "map.gpkg"
    marked.parent.mkdir()
    db = sqlite3.connect(marked)
    db.execute("PRAGMA application_id = 1196444487")  # GeoPackage
    db.execute("CREATE TABLE features (id INTEGER)")
    db.commit()
    db.close()
    _refused(tmp_path, marked, "another application", "0x47504b47")


def test_an_old_layout_with_a_table_of_its_own_is_refused(tmp_path: Path) -> None:
    (tmp_path / "mixed").mkdir()
    mixed = _v1_store(tmp_path / "mixed" / "mixed.sqlite")
    db = sqlite3.connect(mixed)
    db.execute("CREATE TABLE invoices (id INTEGER)")
    db.commit()
    db.close()
    _refused(tmp_path, mixed, "invoices")


def test_a_store_of_a_newer_compactor_is_refused(tmp_path: Path) -> None:
    newer = tmp_path / "newer" / "n.sqlite"
    newer.parent.mkdir()
    SQLiteStore(newer).close()
    db = sqlite3.connect(newer)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.commit()
    db.close()
    _refused(tmp_path, newer, "newer compactor", f"schema {SCHEMA_VERSION + 1}")


@pytest.mark.parametrize("kind", ["text", "random", "html", "header"])
def test_a_file_that_is_not_sqlite_is_refused_untouched(tmp_path: Path, kind: str) -> None:
    target = tmp_path / kind / "notes.sqlite"
    target.parent.mkdir()
    data = {"text": "not a database\n" * 50, "html": "<html><body>页面</body></html>"}
    if kind == "random":
        target.write_bytes(os.urandom(6000))
    elif kind == "header":
        target.write_bytes(b"SQLite format 3\x00" + os.urandom(20))  # cut inside the header
    else:
        target.write_text(data[kind], encoding="utf-8")
    _refused(tmp_path, target, "not a SQLite database")


def _real_store(path: Path) -> Path:
    compacter = ContextCompacter("fact_centric", store=path, session="s", query=QUERY)
    record_runs(compacter.pipeline, compacter.store)  # as the CLI does: the run goes to --stats
    compacter.process_search_results([(r["url"], r["content"] * 40) for r in RESULTS])
    compacter.store.close()
    return path


def test_a_truncated_store_is_refused_untouched(tmp_path: Path) -> None:
    whole = _real_store(tmp_path / "whole.sqlite").read_bytes()
    target = tmp_path / "cut" / "cut.sqlite"
    target.parent.mkdir()
    target.write_bytes(whole[:len(whole) // 2])
    _refused(tmp_path, target, "truncated")


def test_a_corrupted_store_gives_one_message_not_a_traceback(tmp_path: Path) -> None:
    store = _real_store(tmp_path / "bad.sqlite")
    data = bytearray(store.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    data[page:] = os.urandom(len(data) - page)  # every page but the first overwritten
    store.write_bytes(bytes(data))
    results = _results(tmp_path)
    for args in (["deep-search", str(results), "--query", QUERY, "--session", "s", "--store", str(store)],
                 ["--stats", "--store", str(store)], ["--expand", "x-0001", "--store", str(store)]):
        done = run_cli(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.count("\n") == 1 and f"{store}: the compactor store is corrupted" in done.stderr
        assert "Traceback" not in done.stderr and "internal error" not in done.stderr


def test_a_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="is a folder"):
        open_store(tmp_path)
    done = run_cli("--stats", "--store", str(tmp_path))
    assert done.returncode == 2 and "is a folder" in done.stderr


def _without_write_permission() -> list[str] | None:
    """A command prefix under which a 0444 file cannot be written: none needed for a normal user;
    root without CAP_DAC_OVERRIDE (setpriv); None when neither is possible."""
    if os.name != "posix" or os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    probe = subprocess.run([setpriv, "--bounding-set=-dac_override,-dac_read_search", "true"],
                           capture_output=True)
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search"] if probe.returncode == 0 else None


def test_a_read_only_store_gives_one_message_and_still_reads(tmp_path: Path) -> None:
    prefix = _without_write_permission()
    if prefix is None:
        pytest.skip("running as root without setpriv: a read-only file stays writable")
    import sys

    store = _real_store(tmp_path / "ro.sqlite")
    old = _v1_store(tmp_path / "old.sqlite")
    results = _results(tmp_path)
    for path in (store, old):
        path.chmod(0o444)
    before = {p: p.read_bytes() for p in (store, old)}
    cli = [*prefix, sys.executable, "-m", "compactor.ops.cli"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*cli, *args], capture_output=True, text=True, timeout=120)

    write = run("deep-search", str(results), "--query", QUERY, "--session", "s", "--store", str(store))
    assert write.returncode == 2 and write.stderr.count("\n") == 1, write.stderr
    assert f"{store}: the compactor store is read-only" in write.stderr and "Traceback" not in write.stderr
    reads = run("--stats", "--store", str(store))  # reading a read-only store works
    assert reads.returncode == 0 and "deep-search" in reads.stdout, reads.stderr
    upgrade = run("--stats", "--store", str(old))
    assert upgrade.returncode == 2 and upgrade.stderr.count("\n") == 1
    assert f"{old}: a compactor store of schema 1 to upgrade, but the file is read-only" in upgrade.stderr
    assert {p: p.read_bytes() for p in (store, old)} == before


def test_batch_mode_refuses_a_foreign_store_before_any_document(tmp_path: Path) -> None:
    app = tmp_path / "app.db"
    db = sqlite3.connect(app)
    db.execute("CREATE TABLE users (id INTEGER)")
    db.commit()
    db.close()
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"id": "a", "text": "one document about batteries"}\n')
    done = run_cli("generic", str(corpus), "--out", str(tmp_path / "out.jsonl"), "--store", str(app))
    assert done.returncode == 2 and "not a compactor store" in done.stderr
    assert not (tmp_path / "out.jsonl").exists()


def test_the_run_monitor_refuses_a_foreign_store(tmp_path: Path) -> None:
    app = tmp_path / "app.db"
    db = sqlite3.connect(app)
    db.execute("CREATE TABLE users (id INTEGER)")
    db.commit()
    db.close()
    pipeline = Pipeline.from_yaml("generic")
    with pytest.raises(StoreError, match="not a compactor store"):
        record_runs(pipeline, app)
    done = run_cli("--stats", "--store", str(app))
    assert done.returncode == 2 and "not a compactor store" in done.stderr


# -- upgrading ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("runs", [True, False], ids=["with-runs", "before-monitoring"])
def test_an_old_store_is_upgraded_in_place(tmp_path: Path, runs: bool) -> None:
    old = _v1_store(tmp_path / "old.sqlite", runs=runs)
    compacter = ContextCompacter("fact_centric", store=old, session="old", query=QUERY)
    assert [fact_to_dict(f) for f in compacter.facts] == OLD_FACTS  # spans included
    assert compacter.facts[0].span == ("src1", 0, 41) and compacter.facts[1].span is None
    assert [f.id for f in compacter.checklist] == ["f-1"]
    assert compacter.store.get("src1-0000") == RESULTS[0]["content"][:41]
    assert _marks(old) == (APPLICATION_ID, SCHEMA_VERSION, "wal")
    store = compacter.store
    assert isinstance(store, SQLiteStore)
    assert store._query("SELECT COUNT(*) FROM knowledge WHERE key = 'facts'") == [(0,)]
    assert store._query("SELECT id FROM facts WHERE session = 'old' ORDER BY seq") == [("f-1",), ("f-2",)]
    assert len(store.runs("qa")) == (1 if runs else 0)
    assert rolling_stats(store).get("qa", {}).get("runs", 0) == (1 if runs else 0)
    report = compacter.process_search_results([(r["url"], r["content"]) for r in RESULTS])
    assert report["batch"] == 2 and report["new_pages"] == 1  # the EV page was already in the session
    assert [f.id for f in compacter.facts][:2] == ["f-1", "f-2"]
    again = ContextCompacter("fact_centric", store=old, session="old")  # reopened: no second upgrade
    assert [fact_to_dict(f) for f in again.facts] == [fact_to_dict(f) for f in compacter.facts]


def test_a_failed_upgrade_leaves_the_old_store_as_it_was(tmp_path: Path) -> None:
    old = _v1_store(tmp_path / "broken.sqlite", facts={"not": "a list"})
    db = sqlite3.connect(old)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    before = old.read_bytes()
    with pytest.raises(StoreError, match="cannot upgrade the facts of session 'old'"):
        SQLiteStore(old)
    assert old.read_bytes() == before
    assert _marks(old)[:2] == (0, 0)


def test_processes_opening_an_old_store_at_once_upgrade_it_once(tmp_path: Path) -> None:
    old = _v1_store(tmp_path / "shared.sqlite")
    errors: list[BaseException] = []

    def open_it() -> None:
        try:
            SQLiteStore(old).close()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with SQLiteStore(old) as store:
        assert store._query("SELECT id FROM facts ORDER BY seq") == [("f-1",), ("f-2",)]


# -- facts as rows -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_facts_round_trip_through_the_store_with_spans(tmp_path: Path, kind: str) -> None:
    store = MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "f.sqlite")
    facts = [Fact("f-a", "Batteries cost 139 dollars per kWh.", ("s-0000", "s-0001"), "https://a", 0.75,
                  ("s", 10, 45)),
             Fact("f-b", "电池价格下降了百分之十四。", ("t-0002",), None, 0.5),
             Fact("f-c", "Duplicate ids stay two rows.", ("u-0000",), None, 0.25, ("u", 0, 28))]
    data = [fact_to_dict(f) for f in facts] + [{**fact_to_dict(facts[2]), "origin": "llm"}]
    store.commit_batch("s", Batch(knowledge={"facts": data}))
    back = store.knowledge("s", "facts")
    assert back == data
    assert [fact_from_dict(d) for d in back[:3]] == facts
    store.commit_batch("s", Batch(knowledge={"facts": data[:1]}))  # a smaller knowledge base
    assert store.knowledge("s", "facts") == data[:1]
    assert store.knowledge("other", "facts", []) == []


LANG_TEXTS = {
    "en": "Battery prices fell by a fifth in 2024, and the range of new cars went up again.",
    "zh": "二〇二四年电池价格下降了五分之一，新车的续航里程再次提高。",
    "mixed": "The report says 电池价格下降了五分之一 and 新车的续航里程再次提高 in most markets this year.",
    "accented": "Le café coûte trois euros à Paris, et le thé un peu moins cher.",
}


def test_chunks_keep_their_language_and_a_schema_2_store_is_upgraded(tmp_path: Path) -> None:
    """Chunks come back with the language they were written with; a store written before the
    column existed gets one guessed from the text's UTF-8 length, which matches the detector on
    plain English, plain Chinese and mixed text."""
    path = tmp_path / "s.sqlite"
    store = SQLiteStore(path)
    whole = "".join(LANG_TEXTS.values())
    chunks = [Chunk(f"src-{i}", "src", i, 0, len(text), text, 10, lang=detect_lang(text))
              for i, text in enumerate(LANG_TEXTS.values())]
    store.commit_batch("s", Batch(sources=[Source("src", "text", whole, whole)], chunks=chunks))
    assert {c.id: c.lang for c in store.session_chunks("s")} == {c.id: c.lang for c in chunks}
    assert [c.lang for c in chunks] == ["en", "zh", "mixed", "en"]
    store.close()
    db = sqlite3.connect(path, isolation_level=None)  # the layout of schema 2: no language column
    db.execute("ALTER TABLE chunks DROP COLUMN lang")
    db.execute("PRAGMA user_version = 2")
    db.close()
    upgraded = SQLiteStore(path)
    assert _marks(path) == (APPLICATION_ID, SCHEMA_VERSION, "wal")
    assert {c.id: c.lang for c in upgraded.chunks([c.id for c in chunks]).values()} == {
        c.id: c.lang for c in chunks}
    assert [c.text for c in upgraded.session_chunks("s")] == list(LANG_TEXTS.values())
