"""Masking statistics: MNTP selects 20% and splits them 80/10/10; spans; MEAP input masks."""

from __future__ import annotations

import numpy as np
import pytest
from magnetsdk.train.masking import choose_spans, example_rng, input_mask, mntp_mask

MASK = 999


def test_mntp_selects_a_fifth_and_splits_80_10_10():
    ids = list(range(100, 200))  # 100 distinct tokens, none equal to MASK
    selected = masked = unchanged = randomised = 0
    for position in range(400):
        out = mntp_mask(ids, 0.2, MASK, vocab_size=50_000, rng=example_rng(0, position))
        assert len(out.selected) == 20  # exactly round(0.2 * 100)
        assert out.originals == [ids[i] for i in out.selected]
        # Only selected tokens may change.
        changed = {i for i, (a, b) in enumerate(zip(ids, out.ids, strict=True)) if a != b}
        assert changed <= set(out.selected)
        for i in out.selected:
            selected += 1
            if out.ids[i] == MASK:
                masked += 1
            elif out.ids[i] == ids[i]:
                unchanged += 1
            else:
                randomised += 1
    # 8000 selections: the shares are within ~4 standard errors of 80/10/10.
    assert masked / selected == pytest.approx(0.8, abs=0.02)
    assert unchanged / selected == pytest.approx(0.1, abs=0.015)
    assert randomised / selected == pytest.approx(0.1, abs=0.015)


def test_mntp_respects_eligible_positions_and_is_reproducible():
    ids = list(range(10))
    out = mntp_mask(ids, 0.5, MASK, 100, example_rng(3, 7), eligible=[2, 3, 4, 5])
    assert set(out.selected) <= {2, 3, 4, 5} and len(out.selected) == 2
    again = mntp_mask(ids, 0.5, MASK, 100, example_rng(3, 7), eligible=[2, 3, 4, 5])
    assert again == out
    assert mntp_mask(ids, 0.0, MASK, 100, example_rng(0, 0)).selected == []
    # A short text still gets one MNTP target.
    assert len(mntp_mask([5, 6], 0.2, MASK, 100, example_rng(0, 0)).selected) == 1


@pytest.mark.parametrize("length", [2, 3, 5, 17, 64])
def test_spans_are_disjoint_separated_and_leave_context(length):
    for position in range(200):
        spans = choose_spans(length, 0.15, 3, example_rng(1, position))
        assert 1 <= len(spans) <= 3
        covered = sum(e - s for s, e in spans)
        assert covered == min(max(1, round(0.15 * length)), length - 1)
        assert all(0 <= s < e <= length for s, e in spans)
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            assert start > end  # at least one context token between spans
        assert length - covered >= 1


def test_spans_reject_a_one_token_text():
    with pytest.raises(ValueError, match="cannot hold a span"):
        choose_spans(1, 0.15, 3, example_rng(0, 0))


def test_meap_input_mask_rate_and_protected_prefix():
    ids = list(range(1000))
    out = input_mask(ids, 0.15, MASK, start=1, rng=np.random.default_rng(0))
    assert out[0] == 0  # the prefix (BOS) is never masked
    rate = sum(t == MASK for t in out) / 999
    assert rate == pytest.approx(0.15, abs=0.035)
    assert input_mask(ids, 0.0, MASK, 1, np.random.default_rng(0)) == ids
