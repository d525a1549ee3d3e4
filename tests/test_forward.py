"""The shared forward under each attention mode, against the model's own forward."""

from __future__ import annotations

import pytest
import torch

from magnetsdk.attention import AttentionMode, allowed, backend_mask, position_ids
from magnetsdk.forward import decoder_body, logits_at, run_decoder
from magnetsdk.testing import ARCHITECTURES, tiny_model

ARCHS = sorted(ARCHITECTURES)
MODES = list(AttentionMode)


def random_ids(b: int, n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(5, 300, (b, n), generator=torch.Generator().manual_seed(seed))


def span_marks(b: int, n: int, context: int) -> torch.Tensor:
    is_span = torch.zeros(b, n, dtype=torch.bool)
    is_span[:, context:] = True
    return is_span


@pytest.mark.parametrize("arch", ARCHS)
def test_causal_mode_equals_native_forward(arch):
    model = tiny_model(arch)
    ids = random_ids(2, 11)
    valid = torch.ones_like(ids, dtype=torch.bool)
    with torch.no_grad():
        native = model(input_ids=ids).logits
        ours = logits_at(model, run_decoder(model, ids, valid, "causal").hidden)
    torch.testing.assert_close(ours, native, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("backend", ["sdpa", "eager"])
def test_built_causal_mask_equals_native_forward(arch, backend):
    """The mask builder's causal pattern, fed as a 4D mask, reproduces the native causal path."""
    model = tiny_model(arch, attn_implementation=backend)
    ids = random_ids(2, 9)
    valid = torch.ones_like(ids, dtype=torch.bool)
    mask = backend_mask(allowed("causal", valid), backend, model.dtype)
    with torch.no_grad():
        native = model(input_ids=ids).logits
        hidden = decoder_body(model)(input_ids=ids, attention_mask=mask, position_ids=position_ids(valid))
        ours = logits_at(model, hidden.last_hidden_state)
    torch.testing.assert_close(ours, native, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("mode", MODES)
def test_sdpa_equals_eager(arch, mode):
    sdpa = tiny_model(arch, attn_implementation="sdpa", seed=3)
    eager = tiny_model(arch, attn_implementation="eager", seed=3)
    ids = random_ids(3, 10, seed=1)
    valid = torch.ones_like(ids, dtype=torch.bool)
    valid[1, 7:] = False  # one padded row
    is_span = span_marks(3, 10, context=6)
    with torch.no_grad():
        a = run_decoder(sdpa, ids, valid, mode, is_span).hidden
        b = run_decoder(eager, ids, valid, mode, is_span).hidden
    torch.testing.assert_close(a[valid], b[valid], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("mode", MODES)
def test_left_and_right_padding_give_the_same_result(arch, mode):
    model = tiny_model(arch)
    lengths = [9, 5]
    contexts = [6, 3]
    width = max(lengths)
    seqs = [random_ids(1, n, seed=i)[0] for i, n in enumerate(lengths)]
    results = {}
    for side in ("left", "right"):
        ids = torch.zeros(2, width, dtype=torch.long)
        valid = torch.zeros(2, width, dtype=torch.bool)
        is_span = torch.zeros(2, width, dtype=torch.bool)
        for row, (seq, context) in enumerate(zip(seqs, contexts, strict=True)):
            cols = slice(width - len(seq), width) if side == "left" else slice(0, len(seq))
            ids[row, cols] = seq
            valid[row, cols] = True
            is_span[row, cols] = torch.arange(len(seq)) >= context
        with torch.no_grad():
            hidden = run_decoder(model, ids, valid, mode, is_span).hidden
        results[side] = [hidden[row][valid[row]] for row in range(2)]
        # And each row alone, unpadded, gives the same states.
        for row, (seq, context) in enumerate(zip(seqs, contexts, strict=True)):
            alone_valid = torch.ones(1, len(seq), dtype=torch.bool)
            alone_span = (torch.arange(len(seq)) >= context)[None]
            with torch.no_grad():
                alone = run_decoder(model, seq[None], alone_valid, mode, alone_span).hidden[0]
            torch.testing.assert_close(results[side][row], alone, atol=1e-5, rtol=1e-5)
    for row in range(2):
        torch.testing.assert_close(results["left"][row], results["right"][row], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ARCHS)
def test_modes_differ_where_they_should(arch):
    """Changing the last context token moves the first token's state only when context is bidirectional,
    and changing a span token never moves a context token's state."""
    model = tiny_model(arch)
    ids = random_ids(1, 8)
    valid = torch.ones_like(ids, dtype=torch.bool)
    is_span = span_marks(1, 8, context=5)
    later_context = ids.clone()
    later_context[0, 4] = (ids[0, 4] + 1) % 300
    later_span = ids.clone()
    later_span[0, 7] = (ids[0, 7] + 1) % 300

    def first_state(mode, tokens):
        with torch.no_grad():
            return run_decoder(model, tokens, valid, mode, is_span).hidden

    for mode, moves in [("causal", False), ("bidirectional", True), ("hybrid", True)]:
        changed = not torch.allclose(first_state(mode, ids)[0, 0], first_state(mode, later_context)[0, 0])
        assert changed == moves, mode
    base, moved = first_state("hybrid", ids), first_state("hybrid", later_span)
    torch.testing.assert_close(base[0, :5], moved[0, :5])  # context untouched by span tokens
    assert not torch.allclose(
        first_state("bidirectional", ids)[0, 0], first_state("bidirectional", later_span)[0, 0]
    )
