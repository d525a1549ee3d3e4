"""Vectors encoded but not yet saved: ``pending.sqlite``, committed batch by batch as chunks are encoded.

Encoding is the slow part of indexing, and the index's own store holds every change in one write
transaction until ``save()`` (so that a save is atomic). A run killed before that commit would
otherwise lose every chunk it had encoded; instead, each encoded batch is committed here at once,
keyed by the SHA-256 of the document instruction and the chunk text, and the next run encodes only
the texts it does not find. The model is fixed for an index by its manifest.
After a successful save the table is emptied (its vectors are in the store now).

Several processes of a sharded run may write here at the same time; SQLite serialises them.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable
from pathlib import Path

import numpy as np

from magnetsdk.index.store import connect_wal

PENDING_NAME = "pending.sqlite"


def text_key(instruction: str, text: str) -> str:
    return hashlib.sha256(f"{instruction}\x00{text}".encode()).hexdigest()


class PendingVectors:
    """The pending-vector table of one index directory, opened on first use."""

    def __init__(self, directory: Path, busy_timeout_s: float = 10.0) -> None:
        self.path = directory / PENDING_NAME
        self._timeout = busy_timeout_s
        self._conn: sqlite3.Connection | None = None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = connect_wal(self.path, self._timeout)
            # The write lock first, then the schema: a plain CREATE starts as a reader and fails at
            # once, without waiting, when another rank has created the table in the meantime.
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, vector BLOB NOT NULL)")
            conn.execute("COMMIT")
            self._conn = conn
        return self._conn

    def get(self, keys: list[str], dim: int) -> dict[str, np.ndarray]:
        """The stored vectors of those ``keys`` that are here (rows of the wrong size are ignored)."""
        if not keys or not self.path.exists():
            return {}
        conn = self._connection()
        found: dict[str, np.ndarray] = {}
        for start in range(0, len(keys), 500):
            part = keys[start : start + 500]
            rows = conn.execute(
                f"SELECT key, vector FROM vectors WHERE key IN ({','.join('?' * len(part))})", part
            )
            for key, blob in rows:
                if len(blob) == 4 * dim:
                    found[key] = np.frombuffer(blob, dtype="<f4").astype(np.float32)
        return found

    def put(self, keys: list[str], vectors: np.ndarray) -> None:
        """Commit ``vectors`` (n, d) under ``keys`` now: they survive a kill from here on."""
        conn = self._connection()
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT OR REPLACE INTO vectors(key, vector) VALUES (?, ?)",
            [(k, np.asarray(v, dtype="<f4").tobytes()) for k, v in zip(keys, vectors, strict=True)],
        )
        conn.execute("COMMIT")

    def clear(self) -> None:
        if self.path.exists():
            self._connection().execute("DELETE FROM vectors")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def encode_missing(
    texts: list[str],
    instruction: str,
    encode: Callable[[list[str]], np.ndarray],
    pending: PendingVectors,
    dim: int,
    batch_size: int,
    on_batch: Callable[[int], None] | None = None,
) -> np.ndarray:
    """Vectors (n, d) for ``texts`` under ``instruction``: those already pending are reused, the rest are encoded in
    batches of ``batch_size`` (longest first: similar lengths batch well) and committed to
    ``pending`` batch by batch. ``encode`` returns finite (b, d) rows for b texts."""
    out = np.zeros((len(texts), dim), dtype=np.float32)
    keys = [text_key(instruction, t) for t in texts]
    known = pending.get(sorted(set(keys)), dim)
    todo = [i for i, key in enumerate(keys) if key not in known]
    for i, key in enumerate(keys):
        if key in known:
            out[i] = known[key]
    if on_batch is not None and len(texts) > len(todo):
        on_batch(len(texts) - len(todo))
    # One encode per distinct text; duplicates take the same vector.
    first: dict[str, int] = {}
    for i in todo:
        first.setdefault(keys[i], i)
    order = sorted(first.values(), key=lambda i: len(texts[i]), reverse=True)
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        vectors = encode([texts[i] for i in rows])  # (b, d)
        pending.put([keys[i] for i in rows], vectors)
        for row, vector in zip(rows, vectors, strict=True):
            known[keys[row]] = vector
        if on_batch is not None:
            on_batch(len(rows))
    if on_batch is not None and len(todo) > len(order):
        on_batch(len(todo) - len(order))  # repeated texts, encoded once
    for i in todo:
        out[i] = known[keys[i]]
    return out
