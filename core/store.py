"""The chunk store and knowledge base: the single source of truth for original chunk text.

Every chunk a stateful run keeps is stored under its id, so whatever a compressor kept can be traced
back to the original text, and a session's knowledge (facts, chunk ids, a rolling summary)
survives the process. Two implementations with one interface:

* `MemoryStore`: the default for one-shot runs;
* `SQLiteStore`: one file in WAL mode, sessions addressed by id, safe to open from several processes.
  A batch is written in one transaction (`commit_batch`), so a process that dies between batches
  loses nothing and one that dies inside a batch leaves no half of it behind.

Batches of one session compose as if they ran one after another, whichever processes run them: a
batch reads the session, runs its pipeline and commits while it holds the session's lock
(`lock_session`, a row that a dead process's successor takes over), and the commit checks that the
session's version is still the one the batch read (`base`), so a writer that skipped the lock makes
the batch run again instead of overwriting what it wrote. The facts of a session are rows, one per
fact; other knowledge (the checklist, kept chunk ids, a summary) is one JSON value per key.

A SQLite store is marked (`PRAGMA application_id` = `APPLICATION_ID`, `PRAGMA user_version` =
`SCHEMA_VERSION`). Opening a file that is not a compactor store refuses it (`StoreError`) and leaves
it unchanged; an unmarked store of an earlier release is upgraded in place.

A session's pages are kept with the URL and the signature they were committed with (`Batch.signatures`,
any tuple of 64-bit integers): `page_with_url` and `page_signatures` give them back, and the component
that drops pages a session already holds (`clean.seen`) judges what counts as the same page. The store
computes nothing about the text it keeps.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import stat
import struct
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compactor.document import Chunk, Source
from compactor.errors import InputError, StoreConflict, StoreError


@dataclass(frozen=True, slots=True)
class StoredSource:
    """A page (or document) of a session, in the order it arrived."""

    id: str
    seq: int
    url: str | None
    title: str | None
    batch: int


@dataclass(slots=True)
class Batch:
    """What one `commit_batch` writes: new sources with their chunks and signatures, and knowledge."""

    sources: Sequence[Source] = ()
    chunks: Sequence[Chunk] = ()
    signatures: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    knowledge: Mapping[str, Any] = field(default_factory=dict)
    report: Mapping[str, Any] = field(default_factory=dict)


class ChunkStore:
    """Interface shared by the memory and SQLite stores."""

    def ensure_session(self, session: str, **meta: Any) -> None:
        raise NotImplementedError

    def sessions(self) -> list[str]:
        raise NotImplementedError

    def sources(self, session: str) -> list[StoredSource]:
        raise NotImplementedError

    def page_with_url(self, session: str, url: str) -> str | None:
        """The id of the session's page committed with this URL, else None."""
        raise NotImplementedError

    def page_signatures(self, session: str) -> dict[str, tuple[int, ...]]:
        """The signatures the session's pages were committed with, by source id, oldest first."""
        raise NotImplementedError

    def commit_batch(self, session: str, batch: Batch, base: int | None = None) -> int:
        """Write a batch atomically; returns its number (1, 2, ...). With `base` (the session's
        `version` the batch was computed from), raise StoreConflict instead when it changed."""
        raise NotImplementedError

    def version(self, session: str) -> int:
        """A counter every commit to the session increases (0 for a new one): what `base` compares."""
        raise NotImplementedError

    def lock_session(self, session: str,
                     wait: float | None = None) -> contextlib.AbstractContextManager[None]:
        """Hold the session against other writers (threads, processes) that take its lock, so a
        read-compute-commit cycle runs as if alone; StoreError after `wait` seconds."""
        raise NotImplementedError

    def chunks(self, ids: Iterable[str]) -> dict[str, Chunk]:
        """Stored chunks by id (ids that are not stored are absent from the result)."""
        raise NotImplementedError

    def session_chunks(self, session: str) -> list[Chunk]:
        """All chunks of a session, by source arrival order and position."""
        raise NotImplementedError

    def knowledge(self, session: str, key: str, default: Any = None) -> Any:
        raise NotImplementedError

    def batches(self, session: str) -> list[dict[str, Any]]:
        raise NotImplementedError

    def record_run(self, record: Mapping[str, Any]) -> None:
        """Keep one pipeline run's figures (`compactor.ops.monitor`)."""
        raise NotImplementedError

    def runs(self, pipeline: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """The latest recorded runs (of one pipeline), oldest first."""
        raise NotImplementedError

    def run_pipelines(self) -> list[str]:
        """Names of the pipelines with recorded runs."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the store's resources (a no-op for memory)."""

    def get(self, chunk_id: str) -> str:
        """The original text of one chunk (KeyError naming the id when it is not stored)."""
        found = self.chunks([chunk_id])
        if chunk_id not in found:
            raise KeyError(f"chunk {chunk_id!r} is not in the store")
        return found[chunk_id].text

    def __enter__(self) -> ChunkStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _stored(chunk: Chunk) -> Chunk:
    """What a store keeps of a chunk: its span, text and count (labels and scores are a run's)."""
    return Chunk(chunk.id, chunk.source_id, chunk.index, chunk.start, chunk.end, chunk.text, chunk.tokens,
                 lang=chunk.lang, units=chunk.units)


def _pack(sig: Sequence[int]) -> bytes:
    """A signature as little-endian unsigned 64-bit integers (8 bytes each), as stores have written it."""
    return struct.pack(f"<{len(sig)}Q", *sig)


def _unpack(data: bytes) -> tuple[int, ...]:
    """The inverse of `_pack`."""
    return struct.unpack(f"<{len(data) // 8}Q", data)


#: The columns `_row_chunk` reads, in its order.
_CHUNK_COLUMNS = 'id, source_id, idx, start, "end", text, tokens, lang'


def _row_chunk(row: Sequence[Any]) -> Chunk:
    """A chunk from its SQLite row (`_CHUNK_COLUMNS`): the language is the one it was stored with."""
    return Chunk(row[0], row[1], row[2], row[3], row[4], row[5], row[6], lang=row[7])


class MemoryStore(ChunkStore):
    """Dictionaries in this process: the default for one-shot runs."""

    def __init__(self) -> None:
        self._chunks: dict[str, Chunk] = {}
        self._sessions: dict[str, dict[str, Any]] = {}
        self._runs: list[dict[str, Any]] = []
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    @contextmanager
    def lock_session(self, session: str, wait: float | None = None) -> Iterator[None]:
        with self._guard:
            lock = self._locks.setdefault(session, threading.Lock())
        if not lock.acquire(timeout=LOCK_WAIT if wait is None else wait):
            raise StoreError(f"session {session!r} is busy: another thread kept it too long")
        try:
            yield
        finally:
            lock.release()

    def version(self, session: str) -> int:
        return int(self._sessions.get(session, {}).get("version", 0))

    def record_run(self, record: Mapping[str, Any]) -> None:
        self._runs.append(json.loads(json.dumps(dict(record), default=str)))

    def runs(self, pipeline: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        chosen = [r for r in self._runs if pipeline is None or r.get("pipeline") == pipeline]
        return chosen[-limit:]

    def run_pipelines(self) -> list[str]:
        return sorted({str(r.get("pipeline")) for r in self._runs})

    def _session(self, session: str) -> dict[str, Any]:
        return self._sessions.setdefault(session, {"meta": {}, "sources": [], "urls": {}, "sigs": {},
                                                   "knowledge": {}, "batches": [], "version": 0})

    def ensure_session(self, session: str, **meta: Any) -> None:
        self._session(session)["meta"].update(meta)

    def sessions(self) -> list[str]:
        return list(self._sessions)

    def sources(self, session: str) -> list[StoredSource]:
        return list(self._sessions.get(session, {}).get("sources", []))

    def page_with_url(self, session: str, url: str) -> str | None:
        found = self._sessions.get(session, {}).get("urls", {}).get(url)
        return str(found) if found is not None else None

    def page_signatures(self, session: str) -> dict[str, tuple[int, ...]]:
        return dict(self._sessions.get(session, {}).get("sigs", {}))

    def commit_batch(self, session: str, batch: Batch, base: int | None = None) -> int:
        state = self._session(session)
        if base is not None and state["version"] != base:
            raise StoreConflict(f"session {session!r} changed while the batch ran (version "
                                f"{state['version']}, the batch was computed from {base})")
        state["version"] += 1
        number = len(state["batches"]) + 1
        for source in batch.sources:
            if any(s.id == source.id for s in state["sources"]):
                continue
            state["sources"].append(StoredSource(source.id, len(state["sources"]), source.uri,
                                                 source.title, number))
            if source.uri:
                state["urls"][source.uri] = source.id
            sig = batch.signatures.get(source.id)
            if sig is not None:
                state["sigs"][source.id] = tuple(sig)
        for chunk in batch.chunks:
            self._chunks[chunk.id] = _stored(chunk)
        state["knowledge"].update(json.loads(json.dumps(dict(batch.knowledge))))
        state["batches"].append({"batch": number, "time": time.time(), "sources": len(batch.sources),
                                 "chunks": len(batch.chunks), "report": dict(batch.report)})
        return number

    def chunks(self, ids: Iterable[str]) -> dict[str, Chunk]:
        return {i: self._chunks[i] for i in ids if i in self._chunks}

    def session_chunks(self, session: str) -> list[Chunk]:
        order = {s.id: s.seq for s in self.sources(session)}
        found = [c for c in self._chunks.values() if c.source_id in order]
        return sorted(found, key=lambda c: (order[c.source_id], c.index))

    def knowledge(self, session: str, key: str, default: Any = None) -> Any:
        value = self._sessions.get(session, {}).get("knowledge", {}).get(key)
        return default if value is None else json.loads(json.dumps(value))

    def batches(self, session: str) -> list[dict[str, Any]]:
        return list(self._sessions.get(session, {}).get("batches", []))


APPLICATION_ID = 0x434D5054  # "CMPT": `PRAGMA application_id` of every compactor store
#: `PRAGMA user_version` of the layout below; 1 is the unmarked layout of earlier releases (one JSON
#: blob of facts per session), 2 the one before chunks kept their language; opening either upgrades
#: it in place.
SCHEMA_VERSION = 3
#: How long a batch waits for another process's batch on the same session (seconds).
LOCK_WAIT = 600.0
#: A session lock is taken over after this many seconds (the lock of a dead process on this host at
#: once); should its holder still be running, the version check at its commit makes it run again.
LEASE = 900.0

_SQLITE_MAGIC = b"SQLite format 3\x00"

_TABLES = (
    """CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY, created REAL NOT NULL, meta TEXT NOT NULL DEFAULT '{}',
    version INTEGER NOT NULL DEFAULT 0)""",
    """CREATE TABLE IF NOT EXISTS chunks (
    id TEXT PRIMARY KEY, source_id TEXT NOT NULL, idx INTEGER NOT NULL, start INTEGER NOT NULL,
    "end" INTEGER NOT NULL, text TEXT NOT NULL, tokens INTEGER NOT NULL, url TEXT, title TEXT,
    lang TEXT NOT NULL DEFAULT 'en')""",
    "CREATE INDEX IF NOT EXISTS chunks_by_source ON chunks (source_id, idx)",
    """CREATE TABLE IF NOT EXISTS session_sources (
    session TEXT NOT NULL, source_id TEXT NOT NULL, seq INTEGER NOT NULL, url TEXT, title TEXT,
    batch INTEGER NOT NULL, signature BLOB, PRIMARY KEY (session, source_id))""",
    "CREATE INDEX IF NOT EXISTS sources_by_url ON session_sources (session, url)",
    # the LSH band index of earlier releases: still created, so a file keeps the one layout every
    # release reads, but no longer written (the component that drops repeated pages indexes them)
    """CREATE TABLE IF NOT EXISTS source_bands (
    session TEXT NOT NULL, band INTEGER NOT NULL, key INTEGER NOT NULL, source_id TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS bands_by_key ON source_bands (session, band, key)",
    """CREATE TABLE IF NOT EXISTS knowledge (
    session TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (session, key))""",
    """CREATE TABLE IF NOT EXISTS facts (
    session TEXT NOT NULL, seq INTEGER NOT NULL, id TEXT NOT NULL, text TEXT NOT NULL,
    chunk_ids TEXT NOT NULL, source_url TEXT, score REAL NOT NULL, span_source TEXT,
    span_start INTEGER, span_end INTEGER, extra TEXT, PRIMARY KEY (session, seq))""",
    "CREATE INDEX IF NOT EXISTS facts_by_id ON facts (session, id)",
    """CREATE TABLE IF NOT EXISTS session_locks (
    session TEXT PRIMARY KEY, owner TEXT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL,
    since REAL NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT, pipeline TEXT NOT NULL, time REAL NOT NULL, data TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS runs_by_pipeline ON runs (pipeline, id)",
    """CREATE TABLE IF NOT EXISTS batches (
    session TEXT NOT NULL, batch INTEGER NOT NULL, time REAL NOT NULL, sources INTEGER NOT NULL,
    chunks INTEGER NOT NULL, report TEXT NOT NULL, PRIMARY KEY (session, batch))""",
)

# The unmarked layout of earlier releases (user_version 0, application_id 0): these tables with
# exactly these columns (`runs` came with run monitoring), these indexes, nothing else.
_V1_COLUMNS: dict[str, tuple[str, ...]] = {
    "sessions": ("id", "created", "meta"),
    "chunks": ("id", "source_id", "idx", "start", "end", "text", "tokens", "url", "title"),
    "session_sources": ("session", "source_id", "seq", "url", "title", "batch", "signature"),
    "source_bands": ("session", "band", "key", "source_id"),
    "knowledge": ("session", "key", "value"),
    "batches": ("session", "batch", "time", "sources", "chunks", "report"),
    "runs": ("id", "pipeline", "time", "data"),
}
_V1_OPTIONAL = {"runs"}
_V1_INDEXES = {"chunks_by_source", "sources_by_url", "bands_by_key", "runs_by_pipeline"}
_INTERNAL = ("sqlite_sequence", "sqlite_stat")

_FACT_KEYS = ("id", "text", "chunk_ids", "source_url", "score", "span")


@dataclass(frozen=True, slots=True)
class _Layout:
    """What an existing SQLite file holds, read without changing it."""

    application_id: int
    user_version: int
    tables: dict[str, tuple[str, ...]]
    others: tuple[tuple[str, str], ...]  # (type, name) of indexes, views and triggers


def _describe(exc: BaseException) -> str:
    """A short reason from a sqlite3 error, in words a user can act on."""
    text = str(exc)
    lowered = text.lower()
    if "readonly" in lowered or "read-only" in lowered:
        return f"is read-only ({text}); give a writable file or fix its permissions"
    if "locked" in lowered or "busy" in lowered:
        return f"is busy: another process kept it locked too long ({text})"
    if "malformed" in lowered or "not a database" in lowered or "encrypted" in lowered:
        return f"is corrupted or not a SQLite database ({text})"
    if "unable to open" in lowered:
        return f"cannot be opened ({text}); check the path and the folder's permissions"
    if "disk i/o" in lowered or "full" in lowered:
        return f"cannot be written ({text})"
    return f"failed: {text}"


def _caused_by(exc: BaseException, word: str) -> bool:
    """Whether a StoreError comes from a sqlite3 error saying `word` (locked, readonly)."""
    return isinstance(exc.__cause__, sqlite3.Error) and word in str(exc.__cause__).lower()


def _quoted(name: str) -> str:
    return name.replace('"', '""')


def _alive(pid: int) -> bool:
    """Whether a process of this host still runs (a zombie does not; unknown counts as alive)."""
    if pid == os.getpid():
        return True
    if os.name == "nt":  # os.kill would terminate it; leave such locks to the lease
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat_line.rpartition(")")[2].split()[:1] != ["Z"]


def _fact_row(session: str, seq: int, fact: Mapping[str, Any]) -> tuple[Any, ...]:
    """A fact (as `compactor.apps.compacter.fact_to_dict` writes it) as a row of the facts table."""
    if "id" not in fact or "text" not in fact:
        raise InputError(f"fact {seq} of session {session!r} has no id or text")
    span = fact.get("span")
    span = tuple(span) if isinstance(span, list | tuple) and len(span) == 3 else (None, None, None)
    extra = {k: v for k, v in fact.items() if k not in _FACT_KEYS}
    return (session, seq, str(fact["id"]), str(fact["text"]),
            json.dumps(list(fact.get("chunk_ids") or ()), ensure_ascii=False), fact.get("source_url"),
            float(fact.get("score") or 0.0), *span,
            json.dumps(extra, ensure_ascii=False, default=str) if extra else None)


def _fact_dict(row: Sequence[Any]) -> dict[str, Any]:
    """The inverse of `_fact_row` (from the id column on)."""
    fid, text, chunk_ids, url, score, span_source, span_start, span_end, extra = row
    data: dict[str, Any] = {"id": fid, "text": text, "chunk_ids": json.loads(chunk_ids),
                            "source_url": url, "score": score}
    if span_source is not None:
        data["span"] = [span_source, span_start, span_end]
    if extra:
        data.update(json.loads(extra))
    return data


class SQLiteStore(ChunkStore):
    """One SQLite file in WAL mode, marked as a compactor store; several processes may open it.

    Opening checks the file before anything is written: a compactor store of this schema is used, an
    older compactor store is upgraded in place, a new or empty file becomes a store, and anything
    else (another application's database, a newer store, a file that is not SQLite, a truncated
    one) is refused with a `StoreError` naming the file, which stays unchanged.
    """

    def __init__(self, path: str | Path, *, timeout: float = 30.0, lock_wait: float = LOCK_WAIT) -> None:
        self.path = Path(path)
        self.timeout = timeout
        self.lock_wait = lock_wait
        self._lock = threading.Lock()
        existing = self._existing = _check_file(self.path)
        try:
            if not existing:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(self.path), timeout=timeout, isolation_level=None,
                                       check_same_thread=False)
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"{self.path}: the compactor store cannot be opened: {exc}") from exc
        try:
            self._prepare()
        except BaseException:
            self._db.close()
            raise

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    # -- opening: marking, refusing, upgrading ---------------------------------------------------

    def _prepare(self) -> None:
        deadline = time.monotonic() + self.timeout
        while True:  # several processes opening a new file at once: the setup waits its turn
            try:
                with self._guard():
                    if self._existing:
                        self._verify()
                    plan = self._plan(self._inspect())
                    if plan is not None:
                        self._set_up(plan)
                    if self._db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                        self._db.execute("PRAGMA journal_mode=WAL")
                    self._db.execute("PRAGMA synchronous=NORMAL")
                return
            except StoreError as exc:
                if not _caused_by(exc, "locked") or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _verify(self) -> None:
        """Refuse a store whose pages are damaged before anything is written to it: SQLite reads
        only the pages a query needs, so a damaged page elsewhere would go unnoticed while writes
        (and the checkpoint after them) change the file. `quick_check` reads every page once
        without checking indexes against tables: about 90 ms for a 57 MB store."""
        rows = self._db.execute("PRAGMA quick_check(1)").fetchall()
        if rows and rows[0][0] != "ok":
            found = " ".join(str(rows[0][0]).replace("*** in database main ***", "").split())
            raise StoreError(f"{self.path}: the compactor store is corrupted ({found}); it was "
                             "left unchanged: restore it from a copy or give a new file")

    def _set_up(self, plan: int) -> None:
        """Create (plan 0) or upgrade (plan n) the store in one transaction, then mark it."""
        try:
            with self._write() as db:
                plan_now = self._plan(self._inspect())  # another process may have done it meanwhile
                if plan_now == 0:
                    for statement in _TABLES:
                        db.execute(statement)
                elif plan_now is not None:
                    _upgrade(db, plan_now, self.path)
                if plan_now is not None:
                    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except StoreError as exc:
            if not _caused_by(exc, "readonly"):
                raise
            what = "a new store to set up" if plan == 0 else f"a compactor store of schema {plan} to upgrade"
            raise StoreError(f"{self.path}: {what}, but the file is read-only; make it writable "
                             "and try again") from exc

    def _inspect(self) -> _Layout:
        db = self._db
        began = not db.in_transaction
        if began:
            db.execute("BEGIN")  # one consistent read, no write
        try:
            app = int(db.execute("PRAGMA application_id").fetchone()[0])
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
            objects = db.execute("SELECT type, name FROM sqlite_master").fetchall()
            tables = {name: tuple(r[1] for r in db.execute(f'PRAGMA table_info("{_quoted(name)}")'))
                      for kind, name in objects if kind == "table" and not name.startswith(_INTERNAL)}
        finally:
            if began:
                db.execute("COMMIT")
        others = tuple((kind, name) for kind, name in objects
                       if kind != "table" and not name.startswith("sqlite_autoindex_"))
        return _Layout(app, version, tables, others)

    def _plan(self, layout: _Layout) -> int | None:
        """None: a current store; 0: a new file to set up; n > 0: a store of schema n to upgrade.
        Raises StoreError for anything else."""
        if layout.application_id == APPLICATION_ID:
            if layout.user_version == SCHEMA_VERSION:
                return None
            if layout.user_version > SCHEMA_VERSION:
                raise StoreError(f"{self.path}: written by a newer compactor (store schema "
                                 f"{layout.user_version}; this version reads up to {SCHEMA_VERSION}); "
                                 "upgrade compactor or give another file")
            if layout.user_version >= 1:
                return layout.user_version
        elif layout.application_id == 0:
            if not layout.tables and not layout.others and layout.user_version == 0:
                return 0
            if layout.user_version == 0 and _is_v1(layout):
                return 1
        raise StoreError(_foreign(self.path, layout))

    # -- plumbing ------------------------------------------------------------------------------------

    @contextmanager
    def _guard(self) -> Iterator[None]:
        """sqlite3 errors as one StoreError naming the file, never a traceback."""
        try:
            yield
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: the compactor store {_describe(exc)}") from exc

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (BEGIN IMMEDIATE: the write lock first, so reads inside it are what
        the write is based on); rolled back on any exception."""
        db = self._db
        with self._guard():
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        db.execute("ROLLBACK")
                raise

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        with self._lock, self._write() as db:
            yield db

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock, self._guard():
            return self._db.execute(sql, args).fetchall()

    # -- sessions and their lock -----------------------------------------------------------------

    @contextmanager
    def lock_session(self, session: str, wait: float | None = None) -> Iterator[None]:
        token = self._acquire(session, self.lock_wait if wait is None else wait)
        try:
            yield
        except BaseException:
            self._release(session, token, quiet=True)
            raise
        self._release(session, token)

    def _acquire(self, session: str, wait: float) -> str:
        token, host, pid = uuid.uuid4().hex, socket.gethostname(), os.getpid()
        started = time.monotonic()
        delay = 0.01
        while True:
            with self._writing() as db:
                row = db.execute("SELECT owner, host, pid, since FROM session_locks WHERE session = ?",
                                 (session,)).fetchone()
                if row is None or time.time() - float(row[3]) > LEASE or (
                        row[1] == host and not _alive(int(row[2]))):
                    db.execute("INSERT OR REPLACE INTO session_locks (session, owner, host, pid, since) "
                               "VALUES (?, ?, ?, ?, ?)", (session, token, host, pid, time.time()))
                    return token
            waited = time.monotonic() - started
            if waited >= wait:
                raise StoreError(f"{self.path}: session {session!r} is busy: process {row[2]} on {row[1]} "
                                 f"has been writing to it for {time.time() - float(row[3]):.0f} s "
                                 f"(waited {waited:.0f} s)")
            time.sleep(delay)
            delay = min(delay * 2, 0.2)

    def _release(self, session: str, token: str, quiet: bool = False) -> None:
        try:
            with self._writing() as db:
                db.execute("DELETE FROM session_locks WHERE session = ? AND owner = ?", (session, token))
        except (StoreError, sqlite3.ProgrammingError):
            if not quiet:
                raise

    def version(self, session: str) -> int:
        rows = self._query("SELECT version FROM sessions WHERE id = ?", (session,))
        return int(rows[0][0]) if rows else 0

    def ensure_session(self, session: str, **meta: Any) -> None:
        with self._writing() as db:
            row = db.execute("SELECT meta FROM sessions WHERE id = ?", (session,)).fetchone()
            if row is None:
                db.execute("INSERT INTO sessions (id, created, meta) VALUES (?, ?, ?)",
                           (session, time.time(), json.dumps(meta)))
            elif meta:
                merged = {**json.loads(row[0]), **meta}
                db.execute("UPDATE sessions SET meta = ? WHERE id = ?", (json.dumps(merged), session))

    def sessions(self) -> list[str]:
        return [r[0] for r in self._query("SELECT id FROM sessions ORDER BY created, id")]

    def sources(self, session: str) -> list[StoredSource]:
        rows = self._query("SELECT source_id, seq, url, title, batch FROM session_sources "
                           "WHERE session = ? ORDER BY seq", (session,))
        return [StoredSource(*r) for r in rows]

    def page_with_url(self, session: str, url: str) -> str | None:
        row = self._query("SELECT source_id FROM session_sources WHERE session = ? AND url = ?",
                          (session, url))
        return str(row[0][0]) if row else None

    def page_signatures(self, session: str) -> dict[str, tuple[int, ...]]:
        rows = self._query("SELECT source_id, signature FROM session_sources WHERE session = ? "
                           "AND signature IS NOT NULL ORDER BY seq", (session,))
        return {str(sid): _unpack(data) for sid, data in rows}

    def commit_batch(self, session: str, batch: Batch, base: int | None = None) -> int:
        by_id = {s.id: s for s in batch.sources}
        with self._writing() as db:
            row = db.execute("SELECT version FROM sessions WHERE id = ?", (session,)).fetchone()
            if row is None:
                db.execute("INSERT INTO sessions (id, created, meta) VALUES (?, ?, '{}')",
                           (session, time.time()))
            current = int(row[0]) if row else 0
            if base is not None and current != base:
                raise StoreConflict(f"{self.path}: session {session!r} changed while the batch ran "
                                    f"(version {current}, the batch was computed from {base})")
            number = db.execute("SELECT COALESCE(MAX(batch), 0) + 1 FROM batches WHERE session = ?",
                                (session,)).fetchone()[0]
            seq = db.execute("SELECT COALESCE(MAX(seq), -1) + 1 FROM session_sources "
                             "WHERE session = ?", (session,)).fetchone()[0]
            for source in batch.sources:
                sig = batch.signatures.get(source.id)
                inserted = db.execute(
                    "INSERT OR IGNORE INTO session_sources (session, source_id, seq, url, title, batch, "
                    "signature) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (session, source.id, seq, source.uri, source.title, number,
                     _pack(sig) if sig is not None else None)).rowcount
                if not inserted:
                    continue
                seq += 1
            db.executemany(
                'INSERT OR REPLACE INTO chunks (id, source_id, idx, start, "end", text, tokens, url, '
                "title, lang) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(c.id, c.source_id, c.index, c.start, c.end, c.text, c.tokens,
                  by_id[c.source_id].uri if c.source_id in by_id else None,
                  by_id[c.source_id].title if c.source_id in by_id else None, c.lang)
                 for c in batch.chunks])
            for key, value in batch.knowledge.items():
                if key == "facts":
                    _write_facts(db, session, value)
                else:
                    db.execute("INSERT OR REPLACE INTO knowledge (session, key, value) VALUES (?, ?, ?)",
                               (session, key, json.dumps(value, ensure_ascii=False)))
            db.execute("UPDATE sessions SET version = version + 1 WHERE id = ?", (session,))
            db.execute("INSERT INTO batches (session, batch, time, sources, chunks, report) "
                       "VALUES (?, ?, ?, ?, ?, ?)",
                       (session, number, time.time(), len(batch.sources), len(batch.chunks),
                        json.dumps(dict(batch.report), ensure_ascii=False, default=str)))
        return int(number)

    def chunks(self, ids: Iterable[str]) -> dict[str, Chunk]:
        wanted = list(dict.fromkeys(ids))
        found: dict[str, Chunk] = {}
        for i in range(0, len(wanted), 500):
            part = wanted[i:i + 500]
            rows = self._query(f"SELECT {_CHUNK_COLUMNS} FROM chunks "
                               f" WHERE id IN ({','.join('?' * len(part))})", part)
            found.update((r[0], _row_chunk(r)) for r in rows)
        return found

    def session_chunks(self, session: str) -> list[Chunk]:
        columns = ", ".join(f"c.{name.strip()}" for name in _CHUNK_COLUMNS.split(","))
        rows = self._query(f"SELECT {columns} FROM chunks c "
                           "JOIN session_sources s ON s.source_id = c.source_id "
                           "WHERE s.session = ? ORDER BY s.seq, c.idx", (session,))
        return [_row_chunk(r) for r in rows]

    def record_run(self, record: Mapping[str, Any]) -> None:
        with self._writing() as db:
            db.execute("INSERT INTO runs (pipeline, time, data) VALUES (?, ?, ?)",
                       (str(record.get("pipeline")), float(record.get("time", time.time())),
                        json.dumps(dict(record), ensure_ascii=False, default=str)))

    def runs(self, pipeline: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        if pipeline is None:
            rows = self._query("SELECT data FROM runs ORDER BY id DESC LIMIT ?", (limit,))
        else:
            rows = self._query("SELECT data FROM runs WHERE pipeline = ? ORDER BY id DESC LIMIT ?",
                               (pipeline, limit))
        return [json.loads(r[0]) for r in reversed(rows)]

    def run_pipelines(self) -> list[str]:
        return [r[0] for r in self._query("SELECT DISTINCT pipeline FROM runs ORDER BY pipeline")]

    def knowledge(self, session: str, key: str, default: Any = None) -> Any:
        if key == "facts":
            rows = self._query("SELECT id, text, chunk_ids, source_url, score, span_source, span_start, "
                               "span_end, extra FROM facts WHERE session = ? ORDER BY seq", (session,))
            return [_fact_dict(r) for r in rows] if rows else default
        rows = self._query("SELECT value FROM knowledge WHERE session = ? AND key = ?", (session, key))
        return json.loads(rows[0][0]) if rows else default

    def batches(self, session: str) -> list[dict[str, Any]]:
        rows = self._query("SELECT batch, time, sources, chunks, report FROM batches WHERE session = ? "
                           "ORDER BY batch", (session,))
        return [{"batch": b, "time": t, "sources": s, "chunks": c, "report": json.loads(r)}
                for b, t, s, c, r in rows]


def _write_facts(db: sqlite3.Connection, session: str, facts: Iterable[Mapping[str, Any]]) -> None:
    """Make the session's fact rows equal `facts` (in order), writing only the rows that differ."""
    rows = [_fact_row(session, seq, fact) for seq, fact in enumerate(facts)]
    current = {r[1]: tuple(r) for r in db.execute(
        "SELECT session, seq, id, text, chunk_ids, source_url, score, span_source, span_start, span_end, "
        "extra FROM facts WHERE session = ?", (session,))}
    db.executemany("INSERT OR REPLACE INTO facts (session, seq, id, text, chunk_ids, source_url, score, "
                   "span_source, span_start, span_end, extra) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   [r for r in rows if current.get(r[1]) != r])
    db.execute("DELETE FROM facts WHERE session = ? AND seq >= ?", (session, len(rows)))


def _check_file(path: Path) -> bool:
    """Refuse, before SQLite touches it, what cannot be a compactor store: a folder, a special file,
    a file that is not SQLite, another application's database (by its application_id), a truncated
    database. True when the file exists with content."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise StoreError(f"{path}: cannot use it as a compactor store: {exc.strerror or exc}") from exc
    if stat.S_ISDIR(info.st_mode):
        raise StoreError(f"{path}: is a folder, not a compactor store file")
    if not stat.S_ISREG(info.st_mode):
        raise StoreError(f"{path}: is not a regular file, so not a compactor store")
    if info.st_size == 0:
        return False
    for attempt in range(4):  # a checkpoint writes the header (with the new size) before the pages
        try:
            with path.open("rb") as handle:
                head = handle.read(100)
                size = os.fstat(handle.fileno()).st_size
        except OSError as exc:
            raise StoreError(f"{path}: the compactor store cannot be read: {exc.strerror or exc}") from exc
        if len(head) < 100 or not head.startswith(_SQLITE_MAGIC) or _whole(head, size) or attempt == 3:
            break
        time.sleep(0.05)
    if len(head) < 100 or not head.startswith(_SQLITE_MAGIC):
        raise StoreError(f"{path}: not a SQLite database, so not a compactor store (another kind of "
                         "file, or a corrupted one); it was left unchanged")
    app = int.from_bytes(head[68:72], "big", signed=True)
    if app not in (0, APPLICATION_ID):
        raise StoreError(f"{path}: not a compactor store (a SQLite database of another application, "
                         f"application_id {app & 0xFFFFFFFF:#010x}); it was left unchanged")
    if not _whole(head, size):
        raise StoreError(f"{path}: the compactor store is truncated ({size} of {_expected(head)} bytes); "
                         "restore it from a copy or give a new file")
    return True


def _expected(head: bytes) -> int:
    """The database size a valid header states (0 when the header does not state it)."""
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    valid = head[24:28] == head[92:96]  # the size field is valid for this change counter
    return page * int.from_bytes(head[28:32], "big") if valid else 0


def _whole(head: bytes, size: int) -> bool:
    return size >= _expected(head)


def _is_v1(layout: _Layout) -> bool:
    """Whether the file holds exactly the tables (and indexes) of an unmarked earlier store."""
    names = set(layout.tables)
    if not set(_V1_COLUMNS) - _V1_OPTIONAL <= names <= set(_V1_COLUMNS):
        return False
    if any(layout.tables[name] != _V1_COLUMNS[name] for name in names):
        return False
    return all(kind == "index" and name in _V1_INDEXES for kind, name in layout.others)


def _foreign(path: Path, layout: _Layout) -> str:
    if layout.application_id not in (0, APPLICATION_ID):
        what = f"of another application, application_id {layout.application_id & 0xFFFFFFFF:#010x}"
    elif layout.tables:
        names = sorted(layout.tables)
        what = f"with table(s) {', '.join(names[:8])}{', ...' if len(names) > 8 else ''}"
    else:
        what = "with other contents"
    return (f"{path}: not a compactor store (a SQLite database {what}); it was left unchanged: "
            "give a new file or an existing compactor store")


# Chunks written before the language column: a guess from the first 2,000 characters' UTF-8 length,
# since the text rules are not the store's to run. ASCII is 1 byte a character and CJK 3, so half the
# extra bytes counts CJK characters (an accented letter adds half of one); the shares follow the
# detector's (below a tenth "en", from seven tenths "zh"), taken over characters, not letters.
_GUESS_LANG = """UPDATE chunks SET lang = (
    SELECT CASE WHEN cjk < 0.1 * chars THEN 'en' WHEN cjk >= 0.7 * chars THEN 'zh' ELSE 'mixed' END
    FROM (SELECT (length(CAST(head AS BLOB)) - length(head)) / 2.0 AS cjk,
                 max(length(replace(head, ' ', '')), 1) AS chars
          FROM (SELECT substr(chunks.text, 1, 2000) AS head)))"""


def _upgrade(db: sqlite3.Connection, version: int, path: Path) -> None:
    """Bring a store of schema `version` to SCHEMA_VERSION inside the caller's transaction."""
    if version == 1:  # unmarked: add the new tables and columns, move JSON-blob facts to rows
        db.execute("ALTER TABLE sessions ADD COLUMN version INTEGER NOT NULL DEFAULT 0")
        for statement in _TABLES:
            db.execute(statement)
        for session, value in db.execute("SELECT session, value FROM knowledge WHERE key = 'facts'"
                                         ).fetchall():
            try:
                facts = json.loads(value)
                if not isinstance(facts, list):
                    raise ValueError("not a list")
                _write_facts(db, session, facts)
            except (ValueError, TypeError, InputError) as exc:
                raise StoreError(f"{path}: cannot upgrade the facts of session {session!r} ({exc}); "
                                 "the store was left unchanged") from exc
        db.execute("DELETE FROM knowledge WHERE key = 'facts'")
        version = 2
    if version == 2:  # chunks keep the language they were written with
        db.execute("ALTER TABLE chunks ADD COLUMN lang TEXT NOT NULL DEFAULT 'en'")
        db.execute(_GUESS_LANG)
        version = 3
    if version != SCHEMA_VERSION:
        raise StoreError(f"{path}: no upgrade from store schema {version}")


def open_store(where: str | Path | ChunkStore | None) -> ChunkStore:
    """A store from a path (SQLite), an existing store, or None / ":memory:" (memory)."""
    if isinstance(where, ChunkStore):
        return where
    if where is None or str(where) == ":memory:":
        return MemoryStore()
    return SQLiteStore(where)
