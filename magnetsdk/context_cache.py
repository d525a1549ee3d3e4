"""Keys and values of recent answer contexts, so that a second question over the same chunks skips
the context's forward pass (GritLM's document caching; :mod:`magnetsdk.answering` fills and reads it)."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # magnetsdk.index imports faiss; the key only reads the hits' fields
    from magnetsdk.index.documents import Hit


@dataclass
class CachedContext:
    cache: Any  # the model's key/value cache, holding exactly the context's tokens
    length: int  # C


class ContextCache:
    """Least-recently-used keys/values of recent contexts, keyed by :func:`context_key`.

    An entry costs ``2 * layers * kv_heads * head_dim * C`` numbers (about 45 kB per token for
    SmolLM2-135M in fp32), so keep ``max_entries`` small for long contexts. Entries are valid for
    one model only; a :class:`magnetsdk.Magnet` owns one.
    """

    def __init__(self, max_entries: int = 4) -> None:
        if max_entries < 0:
            raise ValueError(f"max_entries={max_entries} must be >= 0 (0 disables the cache)")
        self.max_entries = max_entries
        self._entries: OrderedDict[str, CachedContext] = OrderedDict()

    def get(self, key: str) -> CachedContext | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def put(self, key: str, entry: CachedContext) -> None:
        if self.max_entries == 0:
            return
        self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def discard(self, key: str) -> None:
        self._entries.pop(key, None)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries


def context_key(hits: list[Hit], context_ids: list[int]) -> str:
    """The cache key of a context: its chunks' ids and text hashes, in order, and its exact tokens
    (which also capture the framing and the tokenizer)."""
    digest = hashlib.sha256()
    for hit in hits:
        text_hash = hashlib.sha256(hit.text.encode("utf-8")).hexdigest()
        digest.update(f"{hit.document_id}\0{hit.chunk_id}\0{text_hash}\n".encode())
    digest.update(",".join(map(str, context_ids)).encode())
    return digest.hexdigest()
