"""The infill token layout and the choice of layout tokens."""

from __future__ import annotations

import pytest

from magnetsdk.layout import NEW_TOKENS, InfillLayout, LayoutTokens, lay_out, resolve_layout_tokens
from magnetsdk.testing import tiny_tokenizer

TOKENS = LayoutTokens("<m>", "<g>", "<s>", "<e>", mask_id=90, gap_id=91, span_id=92, end_id=93)


def test_inference_layout_ends_with_one_span_token():
    laid = lay_out([[1, 2], [3], [4, 5]], TOKENS, prefix=[7])
    assert laid.input_ids == [7, 1, 2, 91, 3, 91, 4, 5, 92]
    assert laid.is_span == [False] * 8 + [True]
    assert laid.context_length == 8
    assert laid.targets == [] and laid.target_positions == []


def test_training_layout_targets_are_span_tokens_and_ends():
    laid = lay_out([[1, 2], [3]], TOKENS, spans=[[10, 11]])
    #          0  1  2   3   4   5   6   7
    assert laid.input_ids == [1, 2, 91, 3, 92, 10, 11, 93]
    assert laid.is_span == [False] * 4 + [True] * 4
    # The output at position p predicts the token at p + 1: SPAN -> 10, 10 -> 11, 11 -> END.
    assert laid.target_positions == [4, 5, 6]
    assert laid.targets == [10, 11, 93]
    assert [laid.input_ids[p + 1] for p in laid.target_positions] == laid.targets


def test_context_does_not_depend_on_span_lengths():
    short = lay_out([[1], [2]], TOKENS, spans=[[10]])
    long = lay_out([[1], [2]], TOKENS, spans=[[10, 11, 12, 13]])
    assert short.input_ids[: short.context_length] == long.input_ids[: long.context_length]


def test_several_spans_follow_the_gap_order():
    laid = lay_out([[1], [2], [3]], TOKENS, spans=[[10], [20, 21]])
    assert laid.input_ids[laid.context_length :] == [92, 10, 93, 92, 20, 21, 93]


def test_spm_joined_drops_only_the_gap_where_the_text_wraps():
    def ids(segments, layout, spans=None):
        return lay_out(segments, TOKENS, spans=spans, prefix=[7], layout=layout).input_ids

    # One gap: spm writes GAP between the right side and the left side; spm-joined does not.
    assert ids([[1, 2], [3, 4]], "spm", [[10]]) == [7, 3, 4, 91, 1, 2, 10, 93]
    assert ids([[1, 2], [3, 4]], "spm-joined", [[10]]) == [7, 3, 4, 1, 2, 10, 93]
    # A gap at the text's start keeps its GAP (else the span would read as continuing the right side).
    assert ids([[], [3, 4]], "spm-joined") == [7, 3, 4, 91]
    # A gap at the text's end: the context is the left side alone, as in plain continuation.
    assert ids([[1, 2], []], "spm-joined") == [7, 1, 2]
    # Later gaps of a multi-gap text keep their GAP; the segment positions still find every token.
    laid = lay_out([[1], [2], [3]], TOKENS, spans=[[10], [20]], prefix=[7], layout="spm-joined")
    assert laid.input_ids == [7, 2, 91, 3, 1, 10, 93, 20, 93]
    assert [[laid.input_ids[p] for p in positions] for positions in laid.segment_positions] == [[1], [2], [3]]


def test_spm_gap_first_writes_the_rotations_gap_before_the_context():
    def ids(segments):
        return lay_out(segments, TOKENS, prefix=[7], layout="spm-gap-first").input_ids

    assert ids([[1, 2], [3, 4]]) == [7, 91, 3, 4, 1, 2]
    assert ids([[], [3, 4]]) == [7, 91, 3, 4]
    assert ids([[1], [2], [3]]) == [7, 91, 2, 91, 3, 1]  # a later gap keeps its GAP


def test_spm_end_writes_end_where_the_text_wraps():
    laid = lay_out([[1, 2], [3, 4]], TOKENS, spans=[[10]], prefix=[7], layout="spm-end")
    assert laid.input_ids == [7, 3, 4, 93, 1, 2, 10, 93]
    assert laid.targets == [10, 93] and laid.target_positions == [
        5,
        6,
    ]  # only the span block's END is a target
    multi = lay_out([[1], [2], [3]], TOKENS, prefix=[7], layout="spm-end").input_ids
    assert multi == [7, 2, 91, 3, 93, 1]


def test_a_layout_with_an_unknown_rotation_gap_is_refused():
    with pytest.raises(ValueError, match="rotation_gap 'middle' is not one of"):
        InfillLayout("x", True, False, False, rotation_gap="middle")


def test_span_count_must_match_gaps():
    with pytest.raises(ValueError, match="2 gaps need 2 spans"):
        lay_out([[1], [2], [3]], TOKENS, spans=[[10]])


def test_reserved_tokens_are_reused_when_present():
    tokenizer = tiny_tokenizer()
    tokenizer.add_special_tokens(
        {
            "additional_special_tokens": [
                "<empty_output>",
                "<issue_comment>",
                "<issue_start>",
                "<issue_closed>",
            ]
        }
    )
    size = len(tokenizer)
    tokens, added = resolve_layout_tokens(tokenizer)
    assert added == [] and len(tokenizer) == size
    assert tokens.strings() == {
        "mask": "<empty_output>",
        "gap": "<issue_comment>",
        "span": "<issue_start>",
        "end": "<issue_closed>",
    }
    assert tokens.gap_id == tokenizer.convert_tokens_to_ids("<issue_comment>")


def test_missing_tokens_are_added_and_configured_ones_win():
    tokenizer = tiny_tokenizer()
    tokens, added = resolve_layout_tokens(tokenizer)
    assert added == list(NEW_TOKENS.values())
    assert tokenizer.convert_ids_to_tokens(tokens.end_id) == NEW_TOKENS["end"]
    # A saved config names the tokens: they are used as stored.
    again, added_again = resolve_layout_tokens(tokenizer, tokens.strings())
    assert again == tokens and added_again == []
