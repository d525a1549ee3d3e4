"""Magnet.infill: in every layout the cached path equals a full recompute at every step."""

from __future__ import annotations

import pytest
import torch

from magnetsdk.decoding import Sampling, pick_tokens
from magnetsdk.infilling import SpanProgram, decode_spans, join_filled, move_spaces_into_gaps
from magnetsdk.layout import INFILL_LAYOUTS, LayoutTokens, infill_layout

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


@pytest.mark.parametrize("layout", sorted(INFILL_LAYOUTS))
@pytest.mark.parametrize("max_new_tokens", [1, 6])
def test_cached_decoding_equals_full_recompute(magnet, max_new_tokens, layout):
    contexts = contexts_of(magnet, TEXTS)
    cached_logits, full_logits = [], []
    with torch.no_grad():
        kwargs = dict(max_new_tokens=max_new_tokens, eos_id=magnet.tokenizer.eos_token_id, layout=layout)
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
    assert all(0 < len(span) <= max_new_tokens for spans in cached for span in spans)  # never empty


@pytest.mark.parametrize("layout", ["magnet", "spm", "spm-bidirectional-span"])
def test_batch_equals_one_by_one(magnet, layout):
    together = magnet.infill(TEXTS, max_new_tokens=5, layout=layout, candidates=1)  # greedy: no sampling
    alone = [magnet.infill(t, max_new_tokens=5, layout=layout, candidates=1) for t in TEXTS]
    assert [r.spans for r in together] == [r.spans for r in alone]
    assert [r.span_ids for r in together] == [r.span_ids for r in alone]


def test_the_layout_is_the_models_setting(llama_magnet):
    text = "A dog [GAP] in the park while [GAP] play football."
    kept = llama_magnet.config.infill_layout
    try:
        for name in ("magnet", "spm"):
            llama_magnet.config.infill_layout = name
            assert llama_magnet.infill_layout is infill_layout(name)
            assert llama_magnet.infill(text, max_new_tokens=4).span_ids == (
                llama_magnet.infill(text, max_new_tokens=4, layout=name).span_ids
            )
    finally:
        llama_magnet.config.infill_layout = kept
    with pytest.raises(ValueError, match="not one of"):
        llama_magnet.infill(text, layout="sideways")


def test_public_api_shapes(llama_magnet):
    result = llama_magnet.infill("The cat [GAP] on the mat.", max_new_tokens=4)
    # The space before a gap is read as the span's leading space (it is put back if the span lacks one).
    assert result.text == "The cat" + result.spans[0] + " on the mat." and result.spans[0][:1] == " "
    two = llama_magnet.infill("A [GAP] B [GAP] C", max_new_tokens=3)
    assert two.text == "A" + two.spans[0] + " B" + two.spans[1] + " C"
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


def test_spaces_before_a_gap_move_into_the_span():
    segments, moved = move_spaces_into_gaps(["The cat  ", " on the", "mat."])
    assert segments == ["The cat", " on the", "mat."] and moved == ["  ", ""]
    text, written = join_filled(segments, [" sat", "big"], moved)
    assert text == "The cat sat on thebigmat." and written == [" sat", "big"]
    text, written = join_filled(segments, ["sat", ""], moved)
    assert text == "The cat  sat on themat." and written == ["  sat", ""]  # no space: the user's comes back


@pytest.mark.parametrize(("layout", "opens"), [("magnet", [3]), ("spm", [])])
def test_span_state_machine(layout, opens):
    tokens = LayoutTokens("m", "g", "s", "e", mask_id=1, gap_id=2, span_id=3, end_id=4)
    row = SpanProgram(2, tokens, infill_layout(layout), 3, frozenset({4, 0}))
    assert list(row.suppressed()) == [0, 4]  # an empty span cannot be closed
    assert row.advance(50) == 50
    assert list(row.suppressed()) == []
    assert row.advance(4) == 4  # END closes span 1 and is fed
    assert row.spans == [[50]] and not row.done
    # With a SPAN token, the model's choice after END is ignored: SPAN opens span 2.
    # Without one, that choice is the first token of span 2.
    assert row.advance(99) == (opens[0] if opens else 99)
    assert row.advance(60) == 60
    assert row.advance(0) is None  # EOS closes the last span: done, nothing to feed
    assert row.spans == ([[50], [60]] if opens else [[50], [99, 60]])
    assert row.done
    assert row.advance(70) is None
    capped = SpanProgram(1, tokens, infill_layout(layout), 2, frozenset({4, 0}))
    for token in (10, 11):
        capped.advance(token)
    assert capped.advance(12) is None and capped.spans == [[10, 11]]


def test_top_p_keeps_only_the_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    generator = torch.Generator().manual_seed(0)
    nucleus = Sampling(temperature=1.0, top_p=0.7)
    draws = {pick_tokens(logits, nucleus, [generator]).item() for _ in range(200)}
    assert draws == {0, 1}
    assert pick_tokens(logits, Sampling(), [None]).item() == 0
