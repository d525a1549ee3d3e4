"""Retrieval: documents chunked, embedded and searched (FAISS vectors + a SQLite document store).

:class:`Index` is the public entry point; the other modules each own one concept: ``documents``
(records in and out), ``chunking`` (token-bounded chunks), ``planning`` (what an add must do),
``store`` (SQLite), ``pending`` (vectors encoded but not yet saved), ``writer`` (the one-writer
file lock), ``types`` (index types, no faiss), ``vectors`` (FAISS index types), ``generations``
(FAISS files on disk), ``search`` (candidates, re-ranking, filters), ``manifest`` (what an index
was built with), ``sources`` (reading files into documents) and ``sharding`` (encoding across
processes).

``import magnetsdk`` does not import this package, and importing it does not import faiss either:
the names below load on first use (PEP 562), so ``magnetsdk.index.types`` (what the CLI's
``--type`` choices come from) and ``magnetsdk.index.errors`` stay light.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_WHERE = {
    "Index": "magnetsdk.index.index",
    "Document": "magnetsdk.index.documents",
    "Hit": "magnetsdk.index.documents",
    "AddReport": "magnetsdk.index.documents",
    "IndexType": "magnetsdk.index.types",
    "EmptyIndexError": "magnetsdk.index.errors",
    "IndexBusyError": "magnetsdk.index.errors",
    "IndexCorruptedError": "magnetsdk.index.errors",
    "IndexMismatchError": "magnetsdk.index.errors",
    "IndexNotFoundError": "magnetsdk.index.errors",
}

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

if TYPE_CHECKING:
    from magnetsdk.index.documents import AddReport, Document, Hit
    from magnetsdk.index.errors import (
        EmptyIndexError,
        IndexBusyError,
        IndexCorruptedError,
        IndexMismatchError,
        IndexNotFoundError,
    )
    from magnetsdk.index.index import Index
    from magnetsdk.index.types import IndexType


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'magnetsdk.index' has no attribute {name!r}")
    value = getattr(import_module(_WHERE[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
