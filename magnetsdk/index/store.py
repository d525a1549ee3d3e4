"""The SQLite document store of an index: documents, their chunks (with vectors) and a state table.

SQLite runs in WAL mode, so searches in other processes read the last committed state while a
writer works. Changes accumulate in one write transaction that :meth:`Store.commit` ends; the
``state`` table names the FAISS file that matches the committed rows, written in that same
transaction, so the documents and the pointer to their vectors change together or not at all.
Chunk vectors are stored here too (float32 bytes): FAISS files are derived data that can always be
rebuilt from the store (after a delete in an HNSW graph, a change of index type, or a lost file).

The schema has a version (SQLite's ``user_version``, :data:`SCHEMA_VERSION`); :func:`_upgrade`
is the one place that brings an older store up to it, and a newer one is refused. One connection
may be used from several threads (the owning :class:`~magnetsdk.index.Index` serialises calls).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from magnetsdk.index.errors import IndexBusyError, IndexCorruptedError

STORE_NAME = "store.sqlite"
# 0: stores written before the schema had a version (the same tables); 1: versioned.
SCHEMA_VERSION = 1


def connect_wal(path: Path, busy_timeout_s: float) -> sqlite3.Connection:
    """An autocommit connection to ``path`` in WAL mode, waiting up to ``busy_timeout_s`` for other processes.

    Switching a new database file to WAL takes its lock without SQLite's busy handler: when two
    processes open the same new file at once, one gets "database is locked" at once. It is retried
    here until the timeout, like every other locked statement.
    """
    conn = sqlite3.connect(path, isolation_level=None, timeout=busy_timeout_s, check_same_thread=False)
    deadline = time.monotonic() + busy_timeout_s
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return conn
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                conn.close()
                raise
            time.sleep(0.01)


_SCHEMA = """
CREATE TABLE IF NOT EXISTS documents (
    doc_id TEXT PRIMARY KEY,
    text TEXT NOT NULL,
    metadata TEXT NOT NULL,          -- JSON object
    content_hash TEXT NOT NULL       -- SHA-256 of text
);
CREATE TABLE IF NOT EXISTS chunks (
    chunk_id INTEGER PRIMARY KEY,    -- the id of the chunk's vector in FAISS
    doc_id TEXT NOT NULL REFERENCES documents(doc_id) ON DELETE CASCADE,
    position INTEGER NOT NULL,       -- 0, 1, ... within the document
    start INTEGER NOT NULL,          -- character span in the document
    end INTEGER NOT NULL,
    text TEXT NOT NULL,
    vector BLOB NOT NULL             -- float32, little-endian
);
CREATE INDEX IF NOT EXISTS chunks_by_document ON chunks(doc_id);
CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


@dataclass(frozen=True)
class ChunkRow:
    chunk_id: int
    doc_id: str
    start: int
    end: int
    text: str
    metadata: str  # the document's metadata, JSON


class Store:
    """One connection to ``store.sqlite``; callers serialise its use across threads."""

    def __init__(self, path: Path, create: bool = False, busy_timeout_s: float = 10.0) -> None:
        if not create and not path.is_file():
            raise IndexCorruptedError(
                f"{path} is missing: the index's documents are gone; rebuild the index from its sources"
            )
        self.path = path
        self.closed = False
        try:
            self.conn = connect_wal(path, busy_timeout_s)
            self.conn.execute("PRAGMA synchronous=FULL")
            self.conn.execute("PRAGMA foreign_keys=ON")
            if create:
                self.conn.executescript(_SCHEMA)
                self.conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            self.conn.execute("SELECT count(*) FROM state").fetchone()
            version = self.conn.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.DatabaseError as error:
            raise IndexCorruptedError(
                f"{path} is not a readable index store ({error}); restore it or rebuild the index"
            ) from None
        if version > SCHEMA_VERSION:
            self.conn.close()
            raise IndexCorruptedError(
                f"{path} has schema version {version}; this magnetsdk reads up to {SCHEMA_VERSION}: "
                "upgrade magnetsdk to open this index"
            )
        if version < SCHEMA_VERSION:
            _upgrade(self.conn, version)

    # ------------------------------------------------------------------ transactions

    @property
    def in_transaction(self) -> bool:
        return not self.closed and self.conn.in_transaction

    def begin(self) -> None:
        """Start the write transaction (once); fails clearly if another process holds the write lock."""
        if self.conn.in_transaction:
            return
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as error:
            if "locked" in str(error) or "busy" in str(error):
                raise IndexBusyError(
                    f"another process is writing to {self.path.parent}; wait for it to finish and retry"
                ) from None
            raise

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """Inside the write transaction: undo everything done in the block if it raises."""
        self.begin()
        self.conn.execute("SAVEPOINT block")
        try:
            yield
        except BaseException:
            self.conn.execute("ROLLBACK TO block")
            self.conn.execute("RELEASE block")
            raise
        self.conn.execute("RELEASE block")

    def commit(self) -> None:
        if self.conn.in_transaction:
            self.conn.execute("COMMIT")

    def rollback(self) -> None:
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")

    def close(self) -> None:
        if not self.closed:
            self.rollback()
            self.conn.close()
            self.closed = True

    # ------------------------------------------------------------------ state

    def get_state(self, key: str, default: str = "") -> str:
        row = self.conn.execute("SELECT value FROM state WHERE key = ?", (key,)).fetchone()
        return row[0] if row else default

    def set_state(self, **values: str) -> None:
        self.begin()
        self.conn.executemany(
            "INSERT INTO state(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            list(values.items()),
        )

    # ------------------------------------------------------------------ documents

    def document_count(self) -> int:
        return self.conn.execute("SELECT count(*) FROM documents").fetchone()[0]

    def chunk_count(self, doc_ids: list[str] | None = None) -> int:
        """Stored chunks, all of them or those of ``doc_ids``."""
        if doc_ids is None:
            return self.conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        count = 0
        for start in range(0, len(doc_ids), 500):
            part = doc_ids[start : start + 500]
            count += self.conn.execute(
                f"SELECT count(*) FROM chunks WHERE doc_id IN ({','.join('?' * len(part))})", part
            ).fetchone()[0]
        return count

    def chunk_ids(self) -> np.ndarray:
        """Every stored chunk id, ascending (int64)."""
        rows = self.conn.execute("SELECT chunk_id FROM chunks ORDER BY chunk_id").fetchall()
        return np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))

    def document_sources(self) -> dict[str, str | None]:
        """``doc_id -> metadata["path"]`` (None when a document has no path) for every document."""
        rows = self.conn.execute("SELECT doc_id, json_extract(metadata, '$.path') FROM documents")
        return {doc_id: path if isinstance(path, str) else None for doc_id, path in rows}

    def fingerprints(self, doc_ids: list[str]) -> dict[str, tuple[str, str]]:
        """``doc_id -> (content_hash, metadata JSON)`` for those of ``doc_ids`` that are stored."""
        found: dict[str, tuple[str, str]] = {}
        for start in range(0, len(doc_ids), 500):
            part = doc_ids[start : start + 500]
            rows = self.conn.execute(
                f"SELECT doc_id, content_hash, metadata FROM documents WHERE doc_id IN ({','.join('?' * len(part))})",
                part,
            )
            found.update({doc_id: (digest, meta) for doc_id, digest, meta in rows})
        return found

    def put_document(self, doc_id: str, text: str, metadata: str, content_hash: str) -> None:
        self.begin()
        self.conn.execute(
            "INSERT INTO documents(doc_id, text, metadata, content_hash) VALUES (?, ?, ?, ?)",
            (doc_id, text, metadata, content_hash),
        )

    def set_metadata(self, doc_id: str, metadata: str) -> None:
        self.begin()
        self.conn.execute("UPDATE documents SET metadata = ? WHERE doc_id = ?", (metadata, doc_id))

    def delete_documents(self, doc_ids: list[str]) -> np.ndarray:
        """Delete documents (and, by cascade, their chunks); return the removed chunk ids."""
        self.begin()
        removed: list[int] = []
        for start in range(0, len(doc_ids), 500):
            part = doc_ids[start : start + 500]
            marks = ",".join("?" * len(part))
            removed += [
                r[0]
                for r in self.conn.execute(f"SELECT chunk_id FROM chunks WHERE doc_id IN ({marks})", part)
            ]
            self.conn.execute(f"DELETE FROM documents WHERE doc_id IN ({marks})", part)
        return np.asarray(removed, dtype=np.int64)

    def next_chunk_id(self) -> int:
        return self.conn.execute("SELECT coalesce(max(chunk_id), -1) + 1 FROM chunks").fetchone()[0]

    def put_chunks(self, rows: list[tuple[int, str, int, int, int, str, np.ndarray]]) -> None:
        """Rows of ``(chunk_id, doc_id, position, start, end, text, vector)``."""
        self.begin()
        self.conn.executemany(
            "INSERT INTO chunks(chunk_id, doc_id, position, start, end, text, vector) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(*row[:6], np.asarray(row[6], dtype="<f4").tobytes()) for row in rows],
        )

    # ------------------------------------------------------------------ reading

    def chunk_rows(self, chunk_ids: list[int]) -> dict[int, ChunkRow]:
        found: dict[int, ChunkRow] = {}
        for start in range(0, len(chunk_ids), 500):
            part = chunk_ids[start : start + 500]
            rows = self.conn.execute(
                "SELECT c.chunk_id, c.doc_id, c.start, c.end, c.text, d.metadata FROM chunks c "
                f"JOIN documents d ON d.doc_id = c.doc_id WHERE c.chunk_id IN ({','.join('?' * len(part))})",
                part,
            )
            found.update({row[0]: ChunkRow(*row) for row in rows})
        return found

    def vectors(
        self, dim: int, chunk_ids: np.ndarray | None = None, batch: int = 50_000
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Stored vectors as ``(ids (n,), vectors (n, d))`` batches, all of them or those of ``chunk_ids``."""
        if chunk_ids is None:
            cursor = self.conn.execute("SELECT chunk_id, vector FROM chunks ORDER BY chunk_id")
            while rows := cursor.fetchmany(batch):
                yield _unpack(rows, dim)
            return
        ids = [int(i) for i in chunk_ids]
        for start in range(0, len(ids), 500):
            part = ids[start : start + 500]
            rows = self.conn.execute(
                f"SELECT chunk_id, vector FROM chunks WHERE chunk_id IN ({','.join('?' * len(part))}) ORDER BY chunk_id",
                part,
            ).fetchall()
            if rows:
                yield _unpack(rows, dim)

    def filter_chunk_ids(self, where: dict[str, Any]) -> np.ndarray:
        """Chunk ids whose document metadata has, for every key, the value given (a list: any of them)."""
        clauses, params = [], []
        for key, wanted in where.items():
            if not isinstance(key, str) or not key or '"' in key:
                raise ValueError(f"filter key {key!r} must be a non-empty string without double quotes")
            values = list(wanted) if isinstance(wanted, (list, tuple, set)) else [wanted]
            for value in values:
                if not isinstance(value, (str, int, float, bool)) and value is not None:
                    raise ValueError(
                        f"filter value {value!r} for {key!r} must be a string, number, bool or None"
                    )
            clauses.append(f"json_extract(d.metadata, ?) IN ({','.join('?' * len(values))})")
            params += [f'$."{key}"', *values]
        sql = "SELECT c.chunk_id FROM chunks c JOIN documents d ON d.doc_id = c.doc_id"
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        return np.asarray([r[0] for r in self.conn.execute(sql, params)], dtype=np.int64)

    def documents(self) -> Iterator[tuple[str, str, str, str]]:
        """All ``(doc_id, text, metadata JSON, content_hash)``, by id."""
        yield from self.conn.execute(
            "SELECT doc_id, text, metadata, content_hash FROM documents ORDER BY doc_id"
        )


def _upgrade(conn: sqlite3.Connection, version: int) -> None:
    """Bring a store from schema ``version`` up to :data:`SCHEMA_VERSION`, in one transaction."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        # 0 -> 1: the tables are unchanged; the version is recorded from now on.
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _unpack(rows: list[tuple[int, bytes]], dim: int) -> tuple[np.ndarray, np.ndarray]:
    ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    vectors = np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4").reshape(len(rows), dim)  # (n, d)
    return ids, vectors.astype(np.float32)
