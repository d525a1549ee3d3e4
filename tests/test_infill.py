"""Magnet.infill: the cached path equals a full hybrid recompute at every step."""

from __future__ import annotations

import pytest
import torch

from magnetsdk.infilling import _advance, _Row, decode_spans, pick_tokens
from magnetsdk.layout import LayoutTokens

TEXTS = [
    "The cat [GAP] on the mat.",
    "A dog [GAP] in the park while [GAP] play football near the river.",
    "[GAP] is the capital of France.",
    "Water boils at [GAP]",
]


def contexts_of(magnet, texts):
    return [
        [magnet.tokenizer(p, add_special_tokens=False)["input_ids"] for p in t.split("[GAP]")] for t in texts
    ]


@pytest.mark.parametrize("max_new_tokens", [1, 6])
def test_cached_decoding_equals_full_recompute(magnet, max_new_tokens):
    contexts = contexts_of(magnet, TEXTS)
    cached_logits, full_logits = [], []
    with torch.no_grad():
        kwargs = dict(max_new_tokens=max_new_tokens, eos_id=magnet.tokenizer.eos_token_id)
        cached = decode_spans(
            magnet.model,
            contexts,
            magnet.layout,
            magnet._prefix,
            magnet._pad_id,
            use_cache=True,
            step_logits=cached_logits,
            **kwargs,
        )
        full = decode_spans(
            magnet.model,
            contexts,
            magnet.layout,
            magnet._prefix,
            magnet._pad_id,
            use_cache=False,
            step_logits=full_logits,
            **kwargs,
        )
    assert cached == full
    assert len(cached_logits) == len(full_logits) > max_new_tokens
    for a, b in zip(cached_logits, full_logits, strict=True):
        finite = torch.isfinite(b)
        torch.testing.assert_close(a[finite], b[finite], atol=1e-4, rtol=1e-4)
    # Each text gets one span per gap, each at most max_new_tokens long.
    assert [len(spans) for spans in cached] == [1, 2, 1, 1]
    assert all(0 < len(span) <= max_new_tokens for spans in cached for span in spans)


def test_batch_equals_one_by_one(magnet):
    together = magnet.infill(TEXTS, max_new_tokens=5)
    alone = [magnet.infill(t, max_new_tokens=5) for t in TEXTS]
    assert [r.spans for r in together] == [r.spans for r in alone]
    assert [r.span_ids for r in together] == [r.span_ids for r in alone]


def test_public_api_shapes(llama_magnet):
    result = llama_magnet.infill("The cat [GAP] on the mat.", max_new_tokens=4)
    assert result.text == "The cat " + result.spans[0] + " on the mat."
    two = llama_magnet.infill("A [GAP] B [GAP] C", max_new_tokens=3)
    assert two.text == "A " + two.spans[0] + " B " + two.spans[1] + " C"
    sides = llama_magnet.infill(left="The cat ", right=" on the mat.", max_new_tokens=4)
    assert sides.spans == result.spans
    custom = llama_magnet.infill("The cat <blank> on the mat.", gap_marker="<blank>", max_new_tokens=4)
    assert custom.spans == result.spans
    assert (
        llama_magnet.infill("The cat [GAP] on the mat.", max_new_tokens=4, use_cache=False).spans
        == result.spans
    )


def test_sampling_is_reproducible_with_a_seed(llama_magnet):
    a = llama_magnet.infill("The cat [GAP] on the mat.", temperature=1.0, top_p=0.9, seed=7, max_new_tokens=6)
    b = llama_magnet.infill("The cat [GAP] on the mat.", temperature=1.0, top_p=0.9, seed=7, max_new_tokens=6)
    assert a.span_ids == b.span_ids


def test_layout_tokens_other_than_end_never_appear_in_spans(llama_magnet):
    results = llama_magnet.infill(TEXTS * 2, temperature=1.5, seed=1, max_new_tokens=8)
    banned = {llama_magnet.layout.gap_id, llama_magnet.layout.span_id, llama_magnet.layout.mask_id}
    assert all(not banned & set(span) for r in results for span in r.span_ids)


def test_bad_input(llama_magnet):
    with pytest.raises(ValueError, match=r"no gap marker '\[GAP\]'"):
        llama_magnet.infill("no gap here")
    with pytest.raises(ValueError, match="either text or left/right"):
        llama_magnet.infill("a [GAP]", left="x")
    with pytest.raises(ValueError, match="needs a text"):
        llama_magnet.infill()
    with pytest.raises(ValueError, match="max_new_tokens"):
        llama_magnet.infill("a [GAP]", max_new_tokens=0)
    with pytest.raises(ValueError, match="temperature"):
        llama_magnet.infill("a [GAP]", temperature=-1)
    with pytest.raises(ValueError, match="top_p"):
        llama_magnet.infill("a [GAP]", top_p=0)


def test_span_state_machine():
    tokens = LayoutTokens("m", "g", "s", "e", mask_id=1, gap_id=2, span_id=3, end_id=4)
    row = _Row(gaps=2)
    stop = {4, 0}
    assert _advance(row, 50, tokens, 3, stop) == 50
    assert _advance(row, 4, tokens, 3, stop) == 4  # END closes span 1 and is fed
    assert row.spans == [[50]] and not row.done
    assert (
        _advance(row, 99, tokens, 3, stop) == 3
    )  # the model's choice after END is ignored: SPAN opens span 2
    assert _advance(row, 60, tokens, 3, stop) == 60
    assert _advance(row, 0, tokens, 3, stop) is None  # EOS closes the last span: done, nothing to feed
    assert row.spans == [[50], [60]] and row.done
    assert _advance(row, 70, tokens, 3, stop) is None
    capped = _Row(gaps=1)
    for token in (10, 11):
        _advance(capped, token, tokens, 2, stop)
    assert _advance(capped, 12, tokens, 2, stop) is None and capped.spans == [[10, 11]]


def test_top_p_keeps_only_the_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    generator = torch.Generator().manual_seed(0)
    draws = {pick_tokens(logits, 1.0, 0.7, generator).item() for _ in range(200)}
    assert draws == {0, 1}
    assert pick_tokens(logits, 0.0, 0.7, None).item() == 0
