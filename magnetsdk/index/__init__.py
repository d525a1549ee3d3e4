"""Retrieval: documents chunked, embedded and searched (FAISS vectors + a SQLite document store).

:class:`Index` is the public entry point; the other modules each own one concept: ``documents``
(records in and out), ``chunking`` (token-bounded chunks), ``planning`` (what an add must do),
``store`` (SQLite), ``vectors`` (FAISS index types), ``generations`` (FAISS files on disk),
``search`` (candidates, re-ranking, filters), ``manifest`` (what an index was built with),
``sources`` (reading files into documents) and ``sharding`` (encoding across processes).
``import magnetsdk`` does not import this package; importing it imports faiss.
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
