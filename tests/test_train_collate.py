"""Training sequences use the serving layout; MNTP targets are shifted; one pass serves MNTP and MSG."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from magnetsdk.train.collate import LMSettings, build_lm_example, collate_views
from magnetsdk.train.masking import example_rng
from magnetsdk.train.objectives import MagnetObjectives

from magnetsdk.attention import AttentionMode, allowed, backend_mask, position_ids
from magnetsdk.encoding import prepare, special_prefix
from magnetsdk.layout import lay_out, resolve_layout_tokens
from magnetsdk.testing import tiny_model, tiny_tokenizer


@pytest.fixture(scope="module")
def setup():
    torch.set_num_threads(1)
    tokenizer = tiny_tokenizer()
    tokens, _ = resolve_layout_tokens(tokenizer)
    return tokenizer, tokens, special_prefix(tokenizer)


def settings(**overrides):
    base = dict(
        mntp=True,
        msg=True,
        mntp_probability=0.2,
        span_fraction=0.2,
        max_spans=3,
        no_context_fraction=0.0,
        input_mask_probability=0.0,
    )
    return LMSettings(**{**base, **overrides})


def text_ids(tokenizer):
    return tokenizer(
        "The quick brown fox jumps over the lazy dog while the cat sat on the mat.", add_special_tokens=False
    )["input_ids"]


def test_mntp_targets_are_predicted_from_the_previous_position(setup):
    tokenizer, tokens, prefix = setup
    ids = text_ids(tokenizer)
    masked_inputs = 0
    for position in range(50):
        example = build_lm_example(
            ids, tokens, prefix, tokenizer.eos_token_id, 320, settings(msg=False), example_rng(0, position)
        )
        assert example.input_ids[: len(prefix)] == prefix
        assert len(example.mntp_targets) == round(0.2 * len(ids))
        for predictor, target in zip(example.mntp_positions, example.mntp_targets, strict=True):
            l = predictor + 1  # noqa: E741 - the paper's name for the masked position
            assert target == ids[l - len(prefix)]  # the original token at l
            masked_inputs += example.input_ids[l] == tokens.mask_id
    assert masked_inputs / (50 * round(0.2 * len(ids))) == pytest.approx(0.8, abs=0.1)


def test_training_sequence_is_the_infill_layout(setup):
    tokenizer, tokens, prefix = setup
    ids = text_ids(tokenizer)
    example = build_lm_example(
        ids, tokens, prefix, tokenizer.eos_token_id, 320, settings(mntp=False), example_rng(0, 1)
    )
    # Rebuild the same sequence with the serving layout from the removed spans.
    n_spans = example.input_ids.count(tokens.span_id)
    assert n_spans >= 1 and example.input_ids.count(tokens.gap_id) == n_spans
    context_end = example.is_span.index(True)
    context = example.input_ids[len(prefix) : context_end]
    segments, current = [], []
    for t in context:
        if t == tokens.gap_id:
            segments.append(current)
            current = []
        else:
            current.append(t)
    segments.append(current)
    block = example.input_ids[context_end:]
    spans, current = [], []
    for t in block[1:]:
        if t == tokens.end_id:
            spans.append(current)
            current = []
        elif t != tokens.span_id:
            current.append(t)
    reference = lay_out(segments, tokens, spans=spans, prefix=prefix)
    assert reference.input_ids == example.input_ids
    assert reference.target_positions == example.msg_positions
    assert reference.targets == example.msg_targets
    # Context plus spans are the text again, in order.
    rebuilt = segments[0] + [t for s, seg in zip(spans, segments[1:], strict=True) for t in s + seg]
    assert rebuilt == ids


def test_no_context_examples_are_plain_next_token_prediction(setup):
    tokenizer, tokens, prefix = setup
    ids = text_ids(tokenizer)
    example = build_lm_example(
        ids, tokens, prefix, tokenizer.eos_token_id, 320, settings(no_context_fraction=1.0), example_rng(0, 0)
    )
    assert example.input_ids == [*prefix, *ids, tokenizer.eos_token_id]
    assert all(example.is_span)  # the hybrid mask of an all-span row is the causal mask
    assert example.mntp_targets == []
    assert [example.input_ids[p + 1] for p in example.msg_positions] == example.msg_targets
    valid = torch.ones(1, len(example.input_ids), dtype=torch.bool)
    hybrid = allowed("hybrid", valid, torch.tensor([example.is_span]))
    assert torch.equal(hybrid, allowed("causal", valid))


def reference_token_loss(model, batch, mode):
    """The slow path: the full model call with a 4D mask and full-vocabulary logits everywhere."""
    mask = backend_mask(allowed(mode, batch.valid, batch.is_span), "sdpa", model.dtype)
    logits = model(
        input_ids=batch.input_ids, attention_mask=mask, position_ids=position_ids(batch.valid)
    ).logits
    mntp = F.cross_entropy(logits[batch.mntp_rows, batch.mntp_positions], batch.mntp_targets)
    msg = F.cross_entropy(logits[batch.msg_rows, batch.msg_positions], batch.msg_targets)
    return float(mntp), float(msg)


def test_one_decoder_pass_gives_both_token_losses(setup, lm_batch):
    tokenizer, _, _ = setup
    model = tiny_model()
    texts = ["The cat sat on the mat and looked at the door.", "Paris is the capital of France and a city."]
    batch = lm_batch(tokenizer, settings(), texts)
    assert batch.mntp_targets.numel() > 0 and batch.msg_targets.numel() > 0
    calls = []
    model.get_decoder().register_forward_hook(lambda *args: calls.append(1))
    head_rows = []
    model.get_output_embeddings().register_forward_hook(lambda m, inp, out: head_rows.append(inp[0].shape[0]))
    objectives = MagnetObjectives(model, "hybrid", temperature=0.05)
    with torch.no_grad():
        out = objectives(batch, None, (1.0, 0.0, 1.0))
    assert len(calls) == 1  # MNTP and MSG share one decoder pass
    # The LM head ran only on the loss positions, not on every token.
    assert sum(head_rows) == batch.mntp_targets.numel() + batch.msg_targets.numel()
    assert sum(head_rows) < batch.tokens
    with torch.no_grad():
        mntp, msg = reference_token_loss(model, batch, AttentionMode.HYBRID)
    assert out.mntp == pytest.approx(mntp, rel=1e-5)
    assert out.msg == pytest.approx(msg, rel=1e-5)


def test_contrastive_views_encode_exactly_like_serving(setup):
    tokenizer, _, _ = setup
    views = collate_views(
        tokenizer, ["a cat", "a dog"], ["the cat", "the dog"], [None, "no dog"], "Embed:", 32, 1
    )
    expected = prepare(tokenizer, ["a cat", "a dog", "the cat", "the dog", "no dog"], "Embed:", 32)
    assert [i.ids for i in views.inputs] == [e.ids for e in expected]
    assert views.anchors == 2 and views.has_negative.tolist() == [False, True]
    assert views.input_ids.shape[0] == 5
