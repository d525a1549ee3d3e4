"""The records that go into and come out of an index: documents, search hits, add reports."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Document:
    """A text to index, its id (unique within the index) and JSON-serialisable metadata."""

    id: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ValueError(f"document id {self.id!r} must be a non-empty string")
        if not isinstance(self.text, str):
            raise TypeError(f"document {self.id!r}: text is {type(self.text).__name__}, expected str")
        if not isinstance(self.metadata, dict):
            raise TypeError(
                f"document {self.id!r}: metadata must be a dict, got {type(self.metadata).__name__}"
            )
        try:
            json.dumps(self.metadata)
        except (TypeError, ValueError) as error:
            raise ValueError(f"document {self.id!r}: metadata is not JSON-serialisable ({error})") from None

    @property
    def content_hash(self) -> str:
        """SHA-256 of the text: a document whose hash is unchanged is not re-encoded."""
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    def metadata_json(self) -> str:
        return json.dumps(self.metadata, sort_keys=True, ensure_ascii=False)

    @classmethod
    def coerce(cls, item: Document | str | dict[str, Any]) -> Document:
        """Accept a Document, a plain string (id = hash of the text) or a dict with text/id/metadata."""
        if isinstance(item, Document):
            return item
        if isinstance(item, str):
            return cls(id=hashlib.sha256(item.encode("utf-8")).hexdigest()[:16], text=item)
        if isinstance(item, dict):
            unknown = sorted(set(item) - {"id", "text", "metadata"})
            if unknown or "text" not in item:
                raise ValueError(
                    f"a document dict needs 'text' and may have 'id' and 'metadata'; got keys {sorted(item)}"
                )
            text = item["text"]
            doc_id = item.get("id")
            if doc_id is None and isinstance(text, str):
                doc_id = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
            return cls(id=str(doc_id), text=text, metadata=dict(item.get("metadata") or {}))
        raise TypeError(f"a document is a Document, str or dict, not {type(item).__name__}")


@dataclass(frozen=True)
class Hit:
    """One search result: the matching chunk, its score and the document it came from."""

    score: float  # inner product of unit vectors: cosine similarity
    document_id: str
    chunk_id: int
    text: str  # the chunk's text
    metadata: dict[str, Any]
    start: int  # the chunk's character span in the document
    end: int

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class AddReport:
    """What an add or upsert did, and where the time went."""

    added: int = 0
    updated: int = 0  # re-encoded because the text changed
    unchanged: int = 0  # same content hash: skipped
    metadata_only: int = 0  # same text, new metadata: stored without re-encoding
    removed: int = 0  # deleted because their source is gone (magnet index's pruning)
    chunks: int = 0  # chunks encoded
    encode_seconds: float = 0.0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)
