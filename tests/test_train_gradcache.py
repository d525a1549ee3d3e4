"""GradCache gives the full-batch contrastive gradient; the fused pass gives the separate passes' losses."""

from __future__ import annotations

import pytest
import torch
from magnetsdk.train.adaptation import make_trainable
from magnetsdk.train.collate import LMSettings, collate_views
from magnetsdk.train.config import TrainConfig
from magnetsdk.train.gradcache import cache_view_gradients, restore_rng, split_view_batch
from magnetsdk.train.objectives import MagnetObjectives

from magnetsdk.testing import _CORPUS, tiny_model, tiny_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")


def lora_objectives(fuse: bool = True, dropout: float = 0.0):
    torch.manual_seed(0)
    model = tiny_model()
    config = TrainConfig(data=["unused"], lora_r=4, lora_dropout=dropout)
    trained = make_trainable(model, config, [])
    # Non-zero B matrices, so every LoRA weight has a gradient to compare.
    with torch.no_grad():
        for name, p in trained.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02)
    return MagnetObjectives(trained, "hybrid", 0.05, fuse=fuse), trained


def views_batch(tokenizer, n: int = 6):
    texts = sorted(set(_CORPUS))
    anchors = texts[:n]
    positives = [texts[(i + 3) % len(texts)] + " too" for i in range(n)]
    negatives = [texts[(i + 7) % len(texts)] if i % 2 else None for i in range(n)]  # for half
    return collate_views(tokenizer, anchors, positives, negatives, "Embed:", 48, tokenizer.pad_token_id)


def gradients(model) -> dict[str, torch.Tensor]:
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return grads


@pytest.mark.parametrize("chunk", [1, 2, 4])
def test_gradcache_gradient_equals_the_full_batch_gradient(chunk):
    tokenizer = tiny_tokenizer()
    objectives, model = lora_objectives()
    views = views_batch(tokenizer)
    full = objectives(None, views, (0.0, 1.0, 0.0))
    full.total.backward()
    expected = gradients(model)
    assert expected and all(g.abs().sum() > 0 for g in expected.values())

    cached = cache_view_gradients(objectives, views, chunk, 0.05)
    assert len(cached.chunks) == -(-views.anchors // chunk)
    assert cached.loss == pytest.approx(full.sscl, rel=1e-5)
    for piece in cached.chunks:
        restore_rng(piece.rng, views.input_ids.device)
        objectives(None, piece.views, (0.0, 1.0, 0.0), view_grads=piece.grads).total.backward()
    got = gradients(model)
    assert got.keys() == expected.keys()
    for name in expected:
        # float32 sums in another order: equal to 1e-5 of the tensor's largest entry.
        scale = float(expected[name].abs().max())
        torch.testing.assert_close(got[name], expected[name], rtol=1e-4, atol=1e-5 * scale, msg=name)


def test_chunks_keep_each_anchor_with_its_positive_and_negative():
    tokenizer = tiny_tokenizer()
    views = views_batch(tokenizer)
    pieces = split_view_batch(views, 4)
    assert [p.anchors for p in pieces] == [4, 2]
    ids = [i.ids for i in views.inputs]
    b = views.anchors
    negatives = iter(ids[2 * b :])
    expected_negatives = [next(negatives) if h else None for h in views.has_negative.tolist()]
    seen = 0
    for piece in pieces:
        rows = [i.ids for i in piece.inputs]
        k = piece.anchors
        assert rows[:k] == ids[seen : seen + k] and rows[k : 2 * k] == ids[b + seen : b + seen + k]
        assert rows[2 * k :] == [n for n in expected_negatives[seen : seen + k] if n is not None]
        assert piece.input_ids.shape[1] == max(len(r) for r in rows)  # padding columns trimmed
        seen += k


def test_dropout_masks_are_replayed_in_the_gradient_pass():
    tokenizer = tiny_tokenizer()
    objectives, _ = lora_objectives(dropout=0.3)
    views = views_batch(tokenizer)
    cached = cache_view_gradients(objectives, views, 3, 0.05)
    for number, piece in enumerate(cached.chunks):
        torch.manual_seed(1000 + number)  # a generator state no chunk started from
        with torch.no_grad():
            first = objectives(None, piece.views, (0.0, 1.0, 0.0), embed_only=True).embeddings
        restore_rng(piece.rng, views.input_ids.device)
        with torch.no_grad():
            again = objectives(None, piece.views, (0.0, 1.0, 0.0), embed_only=True).embeddings
        restore_rng(piece.rng, views.input_ids.device)
        with torch.no_grad():
            replay = objectives(None, piece.views, (0.0, 1.0, 0.0), embed_only=True).embeddings
        assert not torch.allclose(first, again)  # dropout is on: a fresh pass differs ...
        torch.testing.assert_close(again, replay)  # ... and a restored generator replays it


def test_one_fused_pass_gives_the_losses_of_two_passes(lm_batch):
    tokenizer = tiny_tokenizer()
    settings = LMSettings(True, True, 0.2, 0.2, 3, 0.0, 0.0)
    lm = lm_batch(tokenizer, settings, sorted(set(_CORPUS))[:6])
    views = views_batch(tokenizer)
    calls = []
    fused, model = lora_objectives(fuse=True)
    separate = MagnetObjectives(model, "hybrid", 0.05, fuse=False)
    model.get_decoder().register_forward_hook(lambda *args: calls.append(1))
    with torch.no_grad():
        one = fused(lm, views, (1.0, 1.0, 1.0))
        assert len(calls) == 1
        two = separate(lm, views, (1.0, 1.0, 1.0))
        assert len(calls) == 3
    for key in ("mntp", "msg", "sscl"):
        assert getattr(one, key) == pytest.approx(getattr(two, key), rel=1e-4), key
