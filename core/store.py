"""The chunk store and knowledge base: the single source of truth for original chunk text.

Every chunk a stateful run keeps is stored under its id, so whatever a compressor kept can be traced
back to the original text (seed 000's `chunk_store`), and a session's knowledge (facts, chunk ids,
a rolling summary) survives the process. Two implementations with one interface:

* `MemoryStore`: the default for one-shot runs;
* `SQLiteStore`: one file in WAL mode, sessions addressed by id, safe to open from several processes.
  A batch is written in one transaction (`commit_batch`), so a process that dies between batches
  loses nothing and one that dies inside a batch leaves no half of it behind.

Pages are stored once per session: the same URL, or a near-duplicate text (MinHash signature with
LSH bands, `compactor.textsim`), is recognised by `known_page`.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compactor import textsim
from compactor.document import Chunk, Source
from compactor.errors import InputError

NEAR_DUPLICATE = 0.8


@dataclass(frozen=True, slots=True)
class StoredChunk:
    """A chunk's original text and where it came from."""

    id: str
    source_id: str
    index: int
    start: int
    end: int
    text: str
    tokens: int
    url: str | None = None
    title: str | None = None


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

    def known_page(self, session: str, url: str | None, sig: tuple[int, ...] | None,
                   threshold: float = NEAR_DUPLICATE) -> str | None:
        """The id of a stored source with this URL or a near-duplicate text, else None."""
        raise NotImplementedError

    def commit_batch(self, session: str, batch: Batch) -> int:
        """Write a batch atomically; returns its number (1, 2, ...)."""
        raise NotImplementedError

    def chunks(self, ids: Iterable[str]) -> dict[str, StoredChunk]:
        """Stored chunks by id (ids that are not stored are absent from the result)."""
        raise NotImplementedError

    def session_chunks(self, session: str) -> list[StoredChunk]:
        """All chunks of a session, by source arrival order and position."""
        raise NotImplementedError

    def knowledge(self, session: str, key: str, default: Any = None) -> Any:
        raise NotImplementedError

    def batches(self, session: str) -> list[dict[str, Any]]:
        raise NotImplementedError

    def record_run(self, record: Mapping[str, Any]) -> None:
        """Keep one pipeline run's figures (`compactor.monitor`)."""
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


def _stored(chunk: Chunk, source: Source | None) -> StoredChunk:
    return StoredChunk(chunk.id, chunk.source_id, chunk.index, chunk.start, chunk.end, chunk.text,
                       chunk.tokens, source.uri if source else None, source.title if source else None)


class MemoryStore(ChunkStore):
    """Dictionaries in this process: the default for one-shot runs."""

    def __init__(self) -> None:
        self._chunks: dict[str, StoredChunk] = {}
        self._sessions: dict[str, dict[str, Any]] = {}
        self._runs: list[dict[str, Any]] = []

    def record_run(self, record: Mapping[str, Any]) -> None:
        self._runs.append(json.loads(json.dumps(dict(record), default=str)))

    def runs(self, pipeline: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        chosen = [r for r in self._runs if pipeline is None or r.get("pipeline") == pipeline]
        return chosen[-limit:]

    def run_pipelines(self) -> list[str]:
        return sorted({str(r.get("pipeline")) for r in self._runs})

    def _session(self, session: str) -> dict[str, Any]:
        return self._sessions.setdefault(session, {"meta": {}, "sources": [], "urls": {}, "sigs": {},
                                                   "bands": {}, "knowledge": {}, "batches": []})

    def ensure_session(self, session: str, **meta: Any) -> None:
        self._session(session)["meta"].update(meta)

    def sessions(self) -> list[str]:
        return list(self._sessions)

    def sources(self, session: str) -> list[StoredSource]:
        return list(self._sessions.get(session, {}).get("sources", []))

    def known_page(self, session: str, url: str | None, sig: tuple[int, ...] | None,
                   threshold: float = NEAR_DUPLICATE) -> str | None:
        state = self._sessions.get(session)
        if state is None:
            return None
        if url and url in state["urls"]:
            return state["urls"][url]
        if sig is None:
            return None
        for key in textsim.band_keys(sig):
            for sid in state["bands"].get(key, ()):
                if textsim.similarity(sig, state["sigs"][sid]) >= threshold:
                    return sid
        return None

    def commit_batch(self, session: str, batch: Batch) -> int:
        state = self._session(session)
        number = len(state["batches"]) + 1
        by_id = {s.id: s for s in batch.sources}
        for source in batch.sources:
            if any(s.id == source.id for s in state["sources"]):
                continue
            state["sources"].append(StoredSource(source.id, len(state["sources"]), source.uri,
                                                 source.title, number))
            if source.uri:
                state["urls"][source.uri] = source.id
            sig = batch.signatures.get(source.id)
            if sig is not None:
                state["sigs"][source.id] = sig
                for key in textsim.band_keys(sig):
                    state["bands"].setdefault(key, []).append(source.id)
        for chunk in batch.chunks:
            self._chunks[chunk.id] = _stored(chunk, by_id.get(chunk.source_id))
        state["knowledge"].update(json.loads(json.dumps(dict(batch.knowledge))))
        state["batches"].append({"batch": number, "time": time.time(), "sources": len(batch.sources),
                                 "chunks": len(batch.chunks), "report": dict(batch.report)})
        return number

    def chunks(self, ids: Iterable[str]) -> dict[str, StoredChunk]:
        return {i: self._chunks[i] for i in ids if i in self._chunks}

    def session_chunks(self, session: str) -> list[StoredChunk]:
        order = {s.id: s.seq for s in self.sources(session)}
        found = [c for c in self._chunks.values() if c.source_id in order]
        return sorted(found, key=lambda c: (order[c.source_id], c.index))

    def knowledge(self, session: str, key: str, default: Any = None) -> Any:
        value = self._sessions.get(session, {}).get("knowledge", {}).get(key)
        return default if value is None else json.loads(json.dumps(value))

    def batches(self, session: str) -> list[dict[str, Any]]:
        return list(self._sessions.get(session, {}).get("batches", []))


_SCHEMA = """
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
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT, pipeline TEXT NOT NULL, time REAL NOT NULL, data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS runs_by_pipeline ON runs (pipeline, id);
CREATE TABLE IF NOT EXISTS batches (
    session TEXT NOT NULL, batch INTEGER NOT NULL, time REAL NOT NULL, sources INTEGER NOT NULL,
    chunks INTEGER NOT NULL, report TEXT NOT NULL, PRIMARY KEY (session, batch));
"""


class SQLiteStore(ChunkStore):
    """One SQLite file in WAL mode; several processes may open it at once."""

    def __init__(self, path: str | Path, *, timeout: float = 30.0) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(self.path), timeout=timeout, isolation_level=None,
                                       check_same_thread=False)
            deadline = time.monotonic() + timeout
            while True:  # several processes opening a new file at once: WAL setup waits its turn
                try:
                    self._db.execute("PRAGMA journal_mode=WAL")
                    self._db.execute("PRAGMA synchronous=NORMAL")
                    self._db.executescript(_SCHEMA)
                    break
                except sqlite3.OperationalError as exc:
                    if "locked" not in str(exc) or time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
        except (sqlite3.DatabaseError, OSError) as exc:
            raise InputError(f"{self.path}: cannot open the chunk store: {exc}") from exc
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def ensure_session(self, session: str, **meta: Any) -> None:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                row = self._db.execute("SELECT meta FROM sessions WHERE id = ?", (session,)).fetchone()
                if row is None:
                    self._db.execute("INSERT INTO sessions (id, created, meta) VALUES (?, ?, ?)",
                                     (session, time.time(), json.dumps(meta)))
                elif meta:
                    merged = {**json.loads(row[0]), **meta}
                    self._db.execute("UPDATE sessions SET meta = ? WHERE id = ?",
                                     (json.dumps(merged), session))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def sessions(self) -> list[str]:
        return [r[0] for r in self._query("SELECT id FROM sessions ORDER BY created, id")]

    def sources(self, session: str) -> list[StoredSource]:
        rows = self._query("SELECT source_id, seq, url, title, batch FROM session_sources "
                           "WHERE session = ? ORDER BY seq", (session,))
        return [StoredSource(*r) for r in rows]

    def known_page(self, session: str, url: str | None, sig: tuple[int, ...] | None,
                   threshold: float = NEAR_DUPLICATE) -> str | None:
        if url:
            row = self._query("SELECT source_id FROM session_sources WHERE session = ? AND url = ?",
                              (session, url))
            if row:
                return str(row[0][0])
        if sig is None:
            return None
        keys = textsim.band_keys(sig)
        clause = " OR ".join("(band = ? AND key = ?)" for _ in keys)
        args: list[Any] = [session] + [v for pair in keys for v in pair]
        candidates = self._query(f"SELECT DISTINCT source_id FROM source_bands WHERE session = ? "
                                 f"AND ({clause})", args)
        for (sid,) in candidates:
            row = self._query("SELECT signature FROM session_sources WHERE session = ? AND source_id = ?",
                              (session, sid))
            if row and row[0][0] and textsim.similarity(sig, textsim.unpack(row[0][0])) >= threshold:
                return str(sid)
        return None

    def commit_batch(self, session: str, batch: Batch) -> int:
        by_id = {s.id: s for s in batch.sources}
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                if db.execute("SELECT 1 FROM sessions WHERE id = ?", (session,)).fetchone() is None:
                    db.execute("INSERT INTO sessions (id, created, meta) VALUES (?, ?, '{}')",
                               (session, time.time()))
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
                         textsim.pack(sig) if sig is not None else None)).rowcount
                    if not inserted:
                        continue
                    seq += 1
                    if sig is not None:
                        db.executemany("INSERT INTO source_bands (session, band, key, source_id) "
                                       "VALUES (?, ?, ?, ?)",
                                       [(session, band, key, source.id)
                                        for band, key in textsim.band_keys(sig)])
                db.executemany(
                    'INSERT OR REPLACE INTO chunks (id, source_id, idx, start, "end", text, tokens, url, '
                    "title) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [(c.id, c.source_id, c.index, c.start, c.end, c.text, c.tokens,
                      by_id[c.source_id].uri if c.source_id in by_id else None,
                      by_id[c.source_id].title if c.source_id in by_id else None)
                     for c in batch.chunks])
                db.executemany("INSERT OR REPLACE INTO knowledge (session, key, value) VALUES (?, ?, ?)",
                               [(session, k, json.dumps(v, ensure_ascii=False))
                                for k, v in batch.knowledge.items()])
                db.execute("INSERT INTO batches (session, batch, time, sources, chunks, report) "
                           "VALUES (?, ?, ?, ?, ?, ?)",
                           (session, number, time.time(), len(batch.sources), len(batch.chunks),
                            json.dumps(dict(batch.report), ensure_ascii=False, default=str)))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return int(number)

    def chunks(self, ids: Iterable[str]) -> dict[str, StoredChunk]:
        wanted = list(dict.fromkeys(ids))
        found: dict[str, StoredChunk] = {}
        for i in range(0, len(wanted), 500):
            part = wanted[i:i + 500]
            rows = self._query('SELECT id, source_id, idx, start, "end", text, tokens, url, title '
                               f"FROM chunks WHERE id IN ({','.join('?' * len(part))})", part)
            found.update((r[0], StoredChunk(*r)) for r in rows)
        return found

    def session_chunks(self, session: str) -> list[StoredChunk]:
        rows = self._query('SELECT c.id, c.source_id, c.idx, c.start, c."end", c.text, c.tokens, c.url, '
                           "c.title FROM chunks c JOIN session_sources s ON s.source_id = c.source_id "
                           "WHERE s.session = ? ORDER BY s.seq, c.idx", (session,))
        return [StoredChunk(*r) for r in rows]

    def record_run(self, record: Mapping[str, Any]) -> None:
        with self._lock:
            self._db.execute("INSERT INTO runs (pipeline, time, data) VALUES (?, ?, ?)",
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
        rows = self._query("SELECT value FROM knowledge WHERE session = ? AND key = ?", (session, key))
        return json.loads(rows[0][0]) if rows else default

    def batches(self, session: str) -> list[dict[str, Any]]:
        rows = self._query("SELECT batch, time, sources, chunks, report FROM batches WHERE session = ? "
                           "ORDER BY batch", (session,))
        return [{"batch": b, "time": t, "sources": s, "chunks": c, "report": json.loads(r)}
                for b, t, s, c, r in rows]


def open_store(where: str | Path | ChunkStore | None) -> ChunkStore:
    """A store from a path (SQLite), an existing store, or None / ":memory:" (memory)."""
    if isinstance(where, ChunkStore):
        return where
    if where is None or str(where) == ":memory:":
        return MemoryStore()
    return SQLiteStore(where)
