"""One stop event in fills (``pool_stops``): END and EOS both close a span, so they may be picked as one."""

from __future__ import annotations

import math

import pytest
import torch

from magnetsdk.decoding import Prompt, Sampling, decode, pool_tokens
from magnetsdk.infilling import decode_spans


def test_pooled_tokens_are_picked_as_one_with_their_summed_probability():
    logits = torch.log(torch.tensor([[0.3, 0.3, 0.4], [0.1, 0.1, 0.8]]))
    assert logits[0].argmax() == 2  # each stop half alone loses to the word
    pool_tokens(logits, torch.tensor([0, 1]))
    probs = torch.softmax(logits, dim=-1)
    assert logits[0].argmax() == 0  # together they win
    assert probs[0].tolist() == pytest.approx([0.6, 0.0, 0.4])
    assert probs[1].tolist() == pytest.approx([0.2, 0.0, 0.8])  # a word that beats the sum still wins


def test_pooling_one_token_or_none_changes_nothing():
    logits = torch.randn(2, 5)
    for pooled in (torch.tensor([], dtype=torch.long), torch.tensor([3])):
        same = logits.clone()
        pool_tokens(same, pooled)
        assert torch.equal(same, logits)


def test_a_banned_token_may_not_be_pooled(llama_magnet):
    prompt = Prompt([1, 2, 3], [False] * 3)

    class Once:
        done = False

        def history(self):
            return []

        def suppressed(self):
            return []

        def advance(self, choice):
            self.done = True

    with pytest.raises(ValueError, match="overlap banned_ids"):
        decode(
            llama_magnet.model, [prompt], [Once()], "causal", Sampling(), 0, banned_ids=[5], pooled_ids=[5, 6]
        )


def contexts_of(magnet, texts):
    return [
        [magnet.tokenizer(p, add_special_tokens=False)["input_ids"] for p in t.split("[GAP]")] for t in texts
    ]


def test_pooled_fills_see_end_with_eos_added_and_cache_equals_recompute(magnet):
    contexts = contexts_of(magnet, ["The cat [GAP] on the mat.", "[GAP] is the capital of France."])
    eos = magnet.tokenizer.eos_token_id
    end = magnet.layout.end_id
    args = (magnet.model, contexts, magnet.layout, magnet._prefix, magnet._pad_id)
    common = dict(max_new_tokens=12, eos_id=eos, layout="spm")
    plain_steps: list[torch.Tensor] = []
    pooled_steps: list[torch.Tensor] = []
    with torch.no_grad():
        decode_spans(*args, step_logits=plain_steps, **common)
        pooled = decode_spans(*args, step_logits=pooled_steps, pool_stops=True, **common)
        recomputed = decode_spans(*args, pool_stops=True, use_cache=False, **common)
    assert pooled == recomputed
    # Step 0: both runs fed the same prompt and a span's first token may not stop it (both held).
    assert torch.equal(plain_steps[0], pooled_steps[0])
    # Step 1 (every row fed the same first token): END carries both stops, EOS none.
    first, second = plain_steps[1], pooled_steps[1]
    assert torch.isinf(second[:, eos]).all()
    expected = torch.logsumexp(first[:, [end, eos]], dim=-1)
    assert torch.allclose(second[:, end], expected, atol=1e-5)
    others = [i for i in range(first.shape[1]) if i not in (end, eos)]
    assert torch.equal(first[:, others], second[:, others])
    assert all(math.isfinite(v) for v in second[:, end].tolist())


def test_infill_checks_pool_stops_by_name(llama_magnet):
    with pytest.raises(ValueError, match="pool_stops=1 must be True or False"):
        llama_magnet.infill("The cat [GAP] on the mat.", pool_stops=1)
    result = llama_magnet.infill("The cat [GAP] on the mat.", max_new_tokens=8, pool_stops=True)
    assert result.text.startswith("The cat ") and result.text.endswith(" on the mat.")
