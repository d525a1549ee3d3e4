"""InfoNCE on hand-made vectors, hard negatives, and the cross-process gather helpers in one process."""

from __future__ import annotations

import math

import pytest
import torch
from magnetsdk.train.objectives import gather_keep_local_grad, info_nce, token_loss_sum

from magnetsdk.testing import tiny_model


def test_info_nce_by_hand():
    # Two anchors; cosines with the positives are chosen by hand.
    anchors = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    positives = torch.tensor(
        [[1.0, 0.0], [1.0, 1.0]]
    )  # cos(a0,p0)=1, cos(a0,p1)=1/sqrt2; cos(a1,p0)=0, cos(a1,p1)=1/sqrt2
    t = 0.5
    c = 1 / math.sqrt(2)
    loss0 = -math.log(math.exp(1 / t) / (math.exp(1 / t) + math.exp(c / t)))
    loss1 = -math.log(math.exp(c / t) / (math.exp(0 / t) + math.exp(c / t)))
    assert float(info_nce(anchors, positives, t)) == pytest.approx((loss0 + loss1) / 2, rel=1e-6)


def test_hard_negatives_join_the_denominator_only_where_present():
    anchors = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    positives = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    negatives = torch.tensor([[0.0, 0.0], [0.6, 0.8]])  # row 0 is a placeholder (no negative)
    present = torch.tensor([False, True])
    t = 1.0
    with_negative = float(info_nce(anchors, positives, t, negatives, present))
    # By hand: anchor 0 sees p0 (cos 1), p1 (0), n1 (0.6); anchor 1 sees p0 (0), p1 (1), n1 (0.8).
    loss0 = -math.log(math.e / (math.e + 1 + math.exp(0.6)))
    loss1 = -math.log(math.e / (1 + math.e + math.exp(0.8)))
    assert with_negative == pytest.approx((loss0 + loss1) / 2, rel=1e-6)
    # An absent negative changes nothing.
    none_present = float(info_nce(anchors, positives, t, negatives, torch.tensor([False, False])))
    assert none_present == pytest.approx(float(info_nce(anchors, positives, t)), rel=1e-6)


def test_info_nce_is_low_for_matching_views_and_scale_invariant():
    torch.manual_seed(0)
    x = torch.randn(8, 16)
    assert float(info_nce(x, 3 * x, 0.05)) < 1e-3
    assert float(info_nce(x, torch.randn(8, 16), 0.05)) > 1.0


def test_single_process_gather_is_the_identity():
    x = torch.randn(3, 4, requires_grad=True)
    assert gather_keep_local_grad(x) is x


def test_token_loss_reads_the_head_at_the_given_positions_only():
    model = tiny_model()
    hidden = torch.randn(2, 5, 64)
    rows, positions, targets = torch.tensor([0, 1]), torch.tensor([3, 0]), torch.tensor([7, 9])
    with torch.no_grad():
        summed = token_loss_sum(model, hidden, rows, positions, targets)
        logits = model.get_output_embeddings()(hidden)  # (2, 5, V): every position
        expected = torch.nn.functional.cross_entropy(logits[rows, positions], targets, reduction="sum")
    assert float(summed) == pytest.approx(float(expected), rel=1e-6)
    assert float(token_loss_sum(model, hidden, rows[:0], positions[:0], targets[:0])) == 0.0
