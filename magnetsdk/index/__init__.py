"""Retrieval: documents chunked, embedded and searched (FAISS vectors + a SQLite document store).

:class:`Index` is the public entry point; the other modules each own one concept: ``chunking``
(token-bounded chunks), ``store`` (SQLite), ``vectors`` (FAISS index types), ``manifest`` (what an
index directory was built with), ``sources`` (reading files into documents) and ``sharding``
(encoding across processes). faiss is imported only when an index is built or opened.
"""

from __future__ import annotations

from magnetsdk.index.documents import AddReport, Document, Hit
from magnetsdk.index.errors import (
    EmptyIndexError,
    IndexBusyError,
    IndexCorruptedError,
    IndexMismatchError,
    IndexNotFoundError,
)
from magnetsdk.index.index import Index
from magnetsdk.index.vectors import IndexType

__all__ = [
    "Index",
    "Document",
    "Hit",
    "AddReport",
    "IndexType",
    "EmptyIndexError",
    "IndexBusyError",
    "IndexCorruptedError",
    "IndexMismatchError",
    "IndexNotFoundError",
]
