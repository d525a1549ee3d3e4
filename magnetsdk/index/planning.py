"""Deciding what an add must do before anything is encoded: which documents are new, changed
(different content hash), changed only in metadata, or unchanged, and the chunks to encode.

A plan is deterministic for a given store state and document list, so every process of a sharded
run computes the same plan and encodes its own slice of :attr:`Plan.texts`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from magnetsdk.index.chunking import Chunk, ChunkSettings, chunk_text
from magnetsdk.index.documents import Document
from magnetsdk.index.store import Store


@dataclass
class Plan:
    new: list[Document] = field(default_factory=list)
    changed: list[Document] = field(default_factory=list)  # stored with another content hash
    metadata_only: list[Document] = field(default_factory=list)
    unchanged: int = 0
    # (document, position within it, chunk) for every document to encode, in order.
    chunks: list[tuple[Document, int, Chunk]] = field(default_factory=list)

    @property
    def texts(self) -> list[str]:
        return [chunk.text for _, _, chunk in self.chunks]

    @property
    def is_empty(self) -> bool:
        return not (self.new or self.changed or self.metadata_only)


def check_not_one_document(documents: Any) -> None:
    """A string (or one Document or dict) where a list of documents belongs is an error, not a
    list of one-character documents."""
    if isinstance(documents, (str, bytes, dict, Document)):
        raise TypeError(
            f"documents must be a list (or other iterable) of documents, not one {type(documents).__name__}; "
            "wrap a single document in a list: index.add([text])"
        )


def make_plan(
    documents: Iterable[Document | str | dict[str, Any]],
    store: Store,
    tokenizer,
    settings: ChunkSettings,
    upsert: bool,
) -> Plan:
    """Sort ``documents`` into a :class:`Plan`; raise on duplicates, empty texts, or (unless ``upsert``)
    ids that are already stored."""
    check_not_one_document(documents)
    docs = [Document.coerce(d) for d in documents]
    if not docs:
        raise ValueError("no documents given: the corpus is empty")
    duplicates = [doc_id for doc_id, n in Counter(d.id for d in docs).items() if n > 1]
    if duplicates:
        raise ValueError(
            f"{len(duplicates)} document ids occur more than once in this batch (e.g. {duplicates[:3]}); "
            "ids must be unique: give each document its own id"
        )
    stored = store.fingerprints([d.id for d in docs])
    if stored and not upsert:
        raise ValueError(
            f"{len(stored)} documents are already in the index (e.g. {sorted(stored)[:3]}); use "
            "upsert() to re-index changed documents and skip unchanged ones, or delete() them first"
        )
    plan = Plan()
    for doc in docs:
        if doc.id not in stored:
            plan.new.append(doc)
            continue
        digest, metadata = stored[doc.id]
        if digest != doc.content_hash:
            plan.changed.append(doc)
        elif metadata != doc.metadata_json():
            plan.metadata_only.append(doc)
        else:
            plan.unchanged += 1
    for doc in plan.new + plan.changed:
        pieces = chunk_text(doc.text, tokenizer, settings)
        if not pieces:
            raise ValueError(
                f"document {doc.id!r} has no text (empty or whitespace only); drop it or give it text"
            )
        plan.chunks += [(doc, position, piece) for position, piece in enumerate(pieces)]
    return plan
