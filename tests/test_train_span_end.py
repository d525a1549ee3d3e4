"""span_end_weight: each missing-span END target counts that many times in the MSG mean."""

from __future__ import annotations

import pytest
import torch
from magnetsdk.train.collate import LMSettings
from magnetsdk.train.config import TrainConfig
from magnetsdk.train.objectives import MagnetObjectives

from magnetsdk.layout import resolve_layout_tokens
from magnetsdk.testing import _CORPUS, tiny_model, tiny_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

MSG_ONLY = (0.0, 0.0, 1.0)


def span_rows(tokenizer, lm_batch):
    settings = LMSettings(
        True, True, 0.2, 0.2, 3, 0.5, 0.0, layout="spm", mntp_fraction=0.0, msg_mask_fraction=0.0
    )
    return lm_batch(tokenizer, settings, sorted(set(_CORPUS))[:8], seed=5)


def test_each_end_target_counts_span_end_weight_times_in_the_msg_mean(lm_batch):
    tokenizer = tiny_tokenizer()
    end_id = resolve_layout_tokens(tokenizer)[0].end_id
    lm = span_rows(tokenizer, lm_batch)
    ends = int((lm.msg_targets == end_id).sum())
    others = lm.msg_targets.numel() - ends
    assert ends > 0 and others > 0, "the batch needs END targets and span tokens"
    torch.manual_seed(0)
    model = tiny_model()

    def msg(weight: float) -> float:
        term = MagnetObjectives(model, "hybrid", 0.05, span_end_weight=weight, end_token_id=end_id)
        with torch.no_grad():
            return term(lm, None, MSG_ONLY).msg

    # msg(w) = (S + w E) / (others + w ends), S and E the summed losses of span tokens and ENDs:
    # two weights give S and E; a third must follow from them.
    m1, m3 = msg(1.0), msg(3.0)
    a = torch.tensor([[1.0, 1.0], [1.0, 3.0]])
    b = torch.tensor([m1 * (others + ends), m3 * (others + 3 * ends)])
    spans, end_sum = torch.linalg.solve(a, b).tolist()
    assert spans > 0 and end_sum > 0
    assert msg(8.0) == pytest.approx((spans + 8 * end_sum) / (others + 8 * ends), rel=1e-4)
    assert m3 != pytest.approx(m1, rel=1e-3)  # the END targets' loss differs from the mean


def test_the_default_weight_leaves_the_msg_mean_alone(lm_batch):
    tokenizer = tiny_tokenizer()
    lm = span_rows(tokenizer, lm_batch)
    torch.manual_seed(0)
    model = tiny_model()
    with torch.no_grad():
        plain = MagnetObjectives(model, "hybrid", 0.05)(lm, None, MSG_ONLY).msg
        own = MagnetObjectives(model, "hybrid", 0.05, span_end_weight=1.0, end_token_id=3)(
            lm, None, MSG_ONLY
        ).msg
    assert own == pytest.approx(plain, rel=1e-6)


def test_the_weight_must_be_positive_and_needs_the_end_token():
    with pytest.raises(ValueError, match="span_end_weight=0.0 must be > 0"):
        TrainConfig(data=["x"], span_end_weight=0.0)
    with pytest.raises(ValueError, match="needs end_token_id"):
        MagnetObjectives(tiny_model(), "hybrid", 0.05, span_end_weight=2.0)
