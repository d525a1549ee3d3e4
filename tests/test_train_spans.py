"""Missing-span examples that match use: word-boundary spans, clean contexts, the run's infill layout."""

from __future__ import annotations

import numpy as np
import pytest
from magnetsdk.train.collate import LMSettings, build_lm_example
from magnetsdk.train.masking import SpanShapes, WordBoundaries, choose_word_spans, example_rng

from magnetsdk.encoding import special_prefix
from magnetsdk.layout import lay_out, resolve_layout_tokens
from magnetsdk.testing import tiny_tokenizer

TEXT = "The cat sat on the mat . A dog runs in the park . Rain fell on the roof all night ."


@pytest.fixture(scope="module")
def setup():
    tokenizer = tiny_tokenizer()
    tokens, _ = resolve_layout_tokens(tokenizer)
    boundaries = WordBoundaries.from_tokenizer(tokenizer)
    ids = tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    return tokenizer, tokens, special_prefix(tokenizer), boundaries, ids


def settings(boundaries, **overrides):
    base = dict(
        mntp=True,
        msg=True,
        mntp_probability=0.2,
        span_fraction=0.2,
        max_spans=2,
        no_context_fraction=0.0,
        input_mask_probability=0.0,
        layout="spm",
        mntp_fraction=0.0,
        msg_mask_fraction=0.0,
        span_shapes=SpanShapes(),
        boundaries=boundaries,
    )
    return LMSettings(**{**base, **overrides})


def test_word_boundaries_of_a_byte_level_tokenizer(setup):
    tokenizer, _, _, boundaries, ids = setup
    words = boundaries.word_starts(ids)
    decoded = [tokenizer.decode(ids[a:b]) for a, b in zip(words, [*words[1:], len(ids)], strict=True)]
    assert "".join(decoded) == tokenizer.decode(ids)
    assert all(piece.startswith(" ") for piece in decoded[1:])  # the leading space belongs to the word
    sentences = boundaries.sentence_starts(ids, words)
    starts = [tokenizer.decode(ids[s:]).strip()[:9] for s in sentences]
    assert starts == ["The cat s", "A dog run", "Rain fell"]


@pytest.mark.parametrize(
    ("shares", "check"),
    [
        ((1.0, 0.0, 0.0), "sentence"),
        ((0.0, 1.0, 0.0), "phrase"),
        ((0.0, 0.0, 1.0), "end"),
    ],
)
def test_span_shapes(setup, shares, check):
    tokenizer, _, _, boundaries, ids = setup
    shapes = SpanShapes(*shares, phrase_max_words=3, max_share=0.5)
    words = set(boundaries.word_starts(ids))
    sentences = boundaries.sentence_starts(ids, sorted(words))
    seen = 0
    for position in range(40):
        spans = choose_word_spans(ids, boundaries, shapes, 2, example_rng(3, position))
        assert spans == sorted(spans)
        assert sum(e - s for s, e in spans) <= 0.5 * len(ids)
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            assert start > end  # at least one context token between two spans
        for start, end in spans:
            seen += 1
            assert start in words and (end in words or end == len(ids))  # cut at word boundaries
            if start:
                assert tokenizer.decode(ids[start:end]).startswith(" ")
            if check == "sentence":
                assert start in sentences and (end in sentences or end == len(ids))
            elif check == "phrase":
                assert len(tokenizer.decode(ids[start:end]).split()) <= 3
            else:
                assert end == len(ids) and start in sentences
    assert seen >= 30  # an example may find no span that fits (the caller then cuts token spans)


def test_msg_examples_read_a_clean_context_in_the_runs_layout(setup):
    tokenizer, tokens, prefix, boundaries, ids = setup
    for position in range(30):
        rng = example_rng(0, position)
        example = build_lm_example(
            ids, tokens, prefix, tokenizer.eos_token_id, 400, settings(boundaries), rng
        )
        assert tokens.mask_id not in example.input_ids and not example.mntp_targets
        assert all(example.is_span)  # spm reads everything causally
        # Rebuild the same example from its spans and compare with the layout.
        spans = choose_word_spans(ids, boundaries, SpanShapes(), 2, _after_kind_draws(position))
        segments, start = [], 0
        for s, e in spans:
            segments.append(ids[start:s])
            start = e
        segments.append(ids[start:])
        laid = lay_out(segments, tokens, [ids[s:e] for s, e in spans], prefix, layout="spm")
        assert example.input_ids == laid.input_ids
        assert example.msg_targets == laid.targets and example.msg_targets.count(tokens.end_id) == len(spans)


def _after_kind_draws(position: int) -> np.random.Generator:
    """The example's generator after the draws that pick its kind (no_context, then nothing else)."""
    rng = example_rng(0, position)
    rng.random()
    return rng


def test_mntp_goes_into_its_own_examples(setup):
    tokenizer, tokens, prefix, boundaries, ids = setup
    kinds = {"mntp": 0, "msg": 0}
    for position in range(200):
        example = build_lm_example(
            ids,
            tokens,
            prefix,
            tokenizer.eos_token_id,
            400,
            settings(boundaries, mntp_fraction=0.3),
            example_rng(1, position),
        )
        if example.mntp_targets:
            kinds["mntp"] += 1
            assert not example.msg_targets and not any(example.is_span)  # bidirectional, no spans
        else:
            kinds["msg"] += 1
            assert example.msg_targets and tokens.mask_id not in example.input_ids
    assert kinds["mntp"] / 200 == pytest.approx(0.3, abs=0.08)


def test_context_loss_adds_the_context_tokens_as_next_token_targets(setup):
    tokenizer, tokens, prefix, boundaries, ids = setup
    plain = build_lm_example(ids, tokens, prefix, 0, 400, settings(boundaries), example_rng(2, 0))
    both = build_lm_example(
        ids, tokens, prefix, 0, 400, settings(boundaries, context_loss=True), example_rng(2, 0)
    )
    extra = len(both.msg_targets) - len(plain.msg_targets)
    assert extra > 0 and both.msg_targets[extra:] == plain.msg_targets
    for position, target in zip(both.msg_positions[:extra], both.msg_targets[:extra], strict=True):
        assert both.input_ids[position + 1] == target and target not in (tokens.gap_id, tokens.end_id)


def test_bad_span_settings(setup):
    _, _, _, boundaries, _ = setup
    with pytest.raises(ValueError, match="cannot be MNTP-masked too"):
        settings(boundaries, msg_mask_fraction=0.5)
    with pytest.raises(ValueError, match="context_loss needs a causal layout"):
        settings(boundaries, layout="magnet", msg_mask_fraction=0.0, context_loss=True)
    with pytest.raises(ValueError, match="WordBoundaries"):
        settings(None)
    with pytest.raises(ValueError, match="sum to 1"):
        SpanShapes(0.5, 0.5, 0.5)
