"""Which tokens each objective hides: MNTP masks, MSG spans, MEAP input masks.

Every choice is drawn from a ``numpy.random.Generator`` the caller seeds per example (from the
run seed and the example's position in the run), so a batch is the same however many
processes build it and after a ``--resume``.

It knows nothing about layouts or tensors: it works on lists of token ids and indices.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Of the MNTP-selected tokens: 80% become the mask token, 10% a random token, 10% stay unchanged.
MASK_SHARE = 0.8
RANDOM_SHARE = 0.1


def example_rng(seed: int, position: int) -> np.random.Generator:
    """The generator of the example at ``position`` of the run."""
    return np.random.default_rng([seed, position, 0x5EED])


@dataclass
class MaskedTokens:
    ids: list[int]  # the input with the selected tokens replaced
    selected: list[int]  # indices of the selected tokens (the loss positions), ascending
    originals: list[int]  # the original token at each selected index


def mntp_mask(
    ids: list[int],
    probability: float,
    mask_id: int,
    vocab_size: int,
    rng: np.random.Generator,
    eligible: list[int] | None = None,
) -> MaskedTokens:
    """Select ``round(probability * n)`` of the eligible tokens (at least one when ``probability > 0``).

    Of the selected tokens 80% become ``mask_id``, 10% a uniformly random token of the vocabulary
    and 10% stay as they are (BERT's recipe, used by LLM2Vec and MAGNET for MNTP).
    """
    candidates = list(range(len(ids))) if eligible is None else list(eligible)
    count = round(probability * len(candidates))
    if probability > 0 and candidates:
        count = max(count, 1)
    if count == 0:
        return MaskedTokens(list(ids), [], [])
    selected = sorted(int(i) for i in rng.choice(candidates, size=count, replace=False))
    out = list(ids)
    draws = rng.random(count)
    for index, draw in zip(selected, draws, strict=True):
        if draw < MASK_SHARE:
            out[index] = mask_id
        elif draw < MASK_SHARE + RANDOM_SHARE:
            out[index] = int(rng.integers(vocab_size))
    return MaskedTokens(out, selected, [ids[i] for i in selected])


def input_mask(
    ids: list[int], probability: float, mask_id: int, start: int, rng: np.random.Generator
) -> list[int]:
    """MEAP: each token from ``start`` on becomes ``mask_id`` with ``probability`` (targets unchanged)."""
    if probability <= 0:
        return list(ids)
    draws = rng.random(len(ids))
    return [mask_id if i >= start and draws[i] < probability else t for i, t in enumerate(ids)]


def choose_spans(
    length: int, fraction: float, max_spans: int, rng: np.random.Generator
) -> list[tuple[int, int]]:
    """Non-overlapping ``[start, end)`` spans covering about ``fraction`` of ``length`` tokens.

    Between 1 and ``max_spans`` spans, separated by at least one context token, and at least one
    context token overall, so every span has a GAP between context pieces.
    """
    if length < 2:
        raise ValueError(f"a text of {length} token(s) cannot hold a span and context")
    total = min(max(1, round(fraction * length)), length - 1)
    most = min(max_spans, total, (length - total) + 1)  # k spans need k - 1 separating tokens
    k = int(rng.integers(1, most + 1))
    # Split `total` into k positive span lengths.
    cuts = sorted(int(c) for c in rng.choice(np.arange(1, total), size=k - 1, replace=False)) if k > 1 else []
    lengths = [b - a for a, b in zip([0, *cuts], [*cuts, total], strict=True)]
    # Split the context into k + 1 gaps; the k - 1 inner gaps get at least one token.
    context = length - total
    gaps = [0] + [1] * (k - 1) + [0]
    for _ in range(context - (k - 1)):
        gaps[int(rng.integers(k + 1))] += 1
    spans = []
    position = 0
    for i, span_length in enumerate(lengths):
        position += gaps[i]
        spans.append((position, position + span_length))
        position += span_length
    return spans
