"""Token-bounded chunks with overlap, cut with the model's tokenizer."""

from __future__ import annotations

import pytest

from magnetsdk.index.chunking import ChunkSettings, chunk_text
from magnetsdk.testing import tiny_tokenizer

TEXT = " ".join(
    f"Sentence {i} says the cat sat on the mat while rain fell on the roof all night." for i in range(30)
)


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


def tokens(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_short_text_is_one_chunk(tokenizer):
    [chunk] = chunk_text("The cat sat.", tokenizer, ChunkSettings(max_tokens=64, overlap=8))
    assert (chunk.text, chunk.start, chunk.end) == ("The cat sat.", 0, 12)


def test_chunks_are_bounded_overlap_and_cover_the_text(tokenizer):
    settings = ChunkSettings(max_tokens=40, overlap=10)
    chunks = chunk_text(TEXT, tokenizer, settings)
    assert len(chunks) > 5
    for chunk in chunks:
        assert chunk.text == TEXT[chunk.start : chunk.end]
        assert len(tokens(tokenizer, chunk.text)) <= settings.max_tokens + 1  # +1: a merge at a cut edge
    assert chunks[0].start == 0 and chunks[-1].end == len(TEXT)
    for before, after in zip(chunks, chunks[1:], strict=False):
        assert after.start < before.end  # consecutive chunks overlap
        shared = TEXT[after.start : before.end]
        assert 5 <= len(tokens(tokenizer, shared)) <= settings.overlap + 1


def test_no_overlap_tiles_the_text(tokenizer):
    chunks = chunk_text(TEXT, tokenizer, ChunkSettings(max_tokens=32, overlap=0))
    for before, after in zip(chunks, chunks[1:], strict=False):
        assert after.start == before.end


def test_blank_text_has_no_chunks(tokenizer):
    assert chunk_text("  \n ", tokenizer, ChunkSettings()) == []


@pytest.mark.parametrize(("max_tokens", "overlap"), [(4, 0), (32, 32), (32, -1)])
def test_bad_settings_say_what_is_wrong(max_tokens, overlap):
    with pytest.raises(ValueError, match="max_tokens|overlap"):
        ChunkSettings(max_tokens=max_tokens, overlap=overlap)
