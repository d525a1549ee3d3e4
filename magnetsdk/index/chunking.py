"""Splitting a document into token-bounded, overlapping chunks with the encoder's own tokenizer.

A chunk is a span of the original text (character offsets), so its text is exactly a slice of the
document: nothing is re-joined from decoded tokens when the tokenizer reports offsets (all fast
tokenizers do). This module knows nothing about embeddings or storage.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChunkSettings:
    """At most ``max_tokens`` text tokens per chunk; consecutive chunks share ``overlap`` tokens."""

    max_tokens: int = 256
    overlap: int = 32

    def __post_init__(self) -> None:
        if self.max_tokens < 8:
            raise ValueError(f"chunk max_tokens={self.max_tokens} is too small; use at least 8")
        if not 0 <= self.overlap < self.max_tokens:
            raise ValueError(
                f"chunk overlap={self.overlap} must be at least 0 and smaller than max_tokens={self.max_tokens}"
            )


@dataclass(frozen=True)
class Chunk:
    text: str
    start: int  # character offset of the chunk in its document
    end: int  # one past the last character


def chunk_text(text: str, tokenizer, settings: ChunkSettings) -> list[Chunk]:
    """Cut ``text`` into windows of ``max_tokens`` tokens that step by ``max_tokens - overlap``.

    A text that fits in one window is one chunk holding the whole text. Windows are placed on
    token boundaries, so a chunk never splits a token.
    """
    if not text.strip():
        return []
    try:
        encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        offsets = [tuple(o) for o in encoded["offset_mapping"]]
    except (NotImplementedError, KeyError):
        raise ValueError(
            f"chunking needs a fast tokenizer that reports character offsets; {type(tokenizer).__name__} "
            "does not. Load the model's tokenizer with use_fast=True"
        ) from None
    if len(offsets) <= settings.max_tokens:
        return [Chunk(text, 0, len(text))]
    step = settings.max_tokens - settings.overlap
    chunks = []
    for first in range(0, len(offsets), step):
        last = min(first + settings.max_tokens, len(offsets)) - 1
        start, end = offsets[first][0], offsets[last][1]
        piece = text[start:end]
        if piece.strip():
            chunks.append(Chunk(piece, start, end))
        if last == len(offsets) - 1:
            break
    return chunks


def check_fits_encoder(settings: ChunkSettings, tokenizer, max_length: int | None, instruction: str) -> None:
    """Refuse chunks longer than the encoder reads: ``max_length`` tokens hold the instruction,
    special tokens (at most 3: BOS, EOS and the space before the text) and the chunk."""
    if max_length is None:
        return
    used = len(tokenizer(instruction, add_special_tokens=False)["input_ids"]) if instruction else 0
    room = max_length - used - 3
    if settings.max_tokens > room:
        raise ValueError(
            f"chunk_tokens={settings.max_tokens} is more than the model encodes: its max_length "
            f"{max_length} leaves {room} tokens for a chunk after the {used}-token instruction, so "
            f"longer chunks would be cut silently. Use chunk_tokens (--chunk-tokens) of at most {room}"
        )
