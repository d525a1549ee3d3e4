"""Truth tables of the attention modes and the backend formats of the masks."""

from __future__ import annotations

import pytest
import torch

from magnetsdk.attention import (
    AttentionBackendError,
    AttentionMode,
    allowed,
    backend_mask,
    check_backend,
    position_ids,
)


def table(rows: list[str]) -> torch.Tensor:
    return torch.tensor([[c == "1" for c in row] for row in rows])


def test_causal_truth_table():
    valid = torch.ones(1, 4, dtype=torch.bool)
    expected = table(["1000", "1100", "1110", "1111"])
    assert torch.equal(allowed("causal", valid)[0], expected)


def test_bidirectional_truth_table_with_right_padding():
    valid = torch.tensor([[True, True, True, False]])
    # Real queries see the three real keys; the padding query sees only itself.
    expected = table(["1110", "1110", "1110", "0001"])
    assert torch.equal(allowed("bidirectional", valid)[0], expected)


def test_hybrid_truth_table():
    valid = torch.ones(1, 5, dtype=torch.bool)
    is_span = torch.tensor([[False, False, False, True, True]])
    expected = table(["11100", "11100", "11100", "11110", "11111"])
    assert torch.equal(allowed("hybrid", valid, is_span)[0], expected)


def test_hybrid_with_left_padding_and_spans_before_context():
    # Span keys are never visible to context queries, wherever the layout puts them.
    valid = torch.tensor([[False, True, True, True, True]])
    is_span = torch.tensor([[False, True, False, False, True]])
    expected = table(
        [
            "10000",  # padding: itself only
            "01110",  # span: context keys (any position) and itself
            "00110",  # context: context only
            "00110",
            "01111",  # span: all context, the earlier span, itself
        ]
    )
    assert torch.equal(allowed("hybrid", valid, is_span)[0], expected)


def test_hybrid_needs_span_marks():
    with pytest.raises(ValueError, match="is_span"):
        allowed("hybrid", torch.ones(1, 3, dtype=torch.bool))


@pytest.mark.parametrize("mode", list(AttentionMode))
def test_no_row_is_ever_empty(mode):
    torch.manual_seed(0)
    valid = torch.rand(6, 9) > 0.5
    is_span = torch.rand(6, 9) > 0.5
    mask = allowed(mode, valid, is_span)
    assert mask.any(dim=-1).all()


def test_decode_rows_are_the_last_rows_of_the_full_mask():
    valid = torch.tensor([[False, True, True, True, True, True]])
    is_span = torch.tensor([[False, False, False, True, True, True]])
    full = allowed("hybrid", valid, is_span)
    assert torch.equal(allowed("hybrid", valid, is_span, num_queries=2), full[:, -2:])


def test_backend_formats():
    mask = allowed("bidirectional", torch.tensor([[True, True, False]]))
    sdpa = backend_mask(mask, "sdpa", torch.float32)
    assert sdpa.dtype == torch.bool and sdpa.shape == (1, 1, 3, 3)
    eager = backend_mask(mask, "eager", torch.bfloat16)
    assert eager.dtype == torch.bfloat16
    assert (eager[0, 0][mask[0]] == 0).all()
    assert (eager[0, 0][~mask[0]] == torch.finfo(torch.bfloat16).min).all()


@pytest.mark.parametrize("backend", ["flash_attention_2", "flash_attention_3", "flex_attention"])
def test_non_causal_modes_refuse_backends_without_custom_masks(backend):
    check_backend("causal", backend)  # the causal path needs no custom mask
    with pytest.raises(AttentionBackendError, match="attn_implementation='sdpa'"):
        check_backend("bidirectional", backend)
    with pytest.raises(AttentionBackendError, match="flash"):
        backend_mask(torch.ones(1, 2, 2, dtype=torch.bool), backend, torch.float32)


def test_position_ids_ignore_padding():
    valid = torch.tensor([[False, False, True, True, True], [True, True, True, False, False]])
    assert position_ids(valid).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 0, 0]]
    assert position_ids(valid, past_length=torch.tensor([3, 1])).tolist() == [
        [0, 0, 3, 4, 5],
        [1, 2, 3, 0, 0],
    ]
