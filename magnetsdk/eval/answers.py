"""Scoring an answer layout against a reference answer: teacher-forced likelihood, no decoding."""

from __future__ import annotations

import torch

from magnetsdk.attention import AttentionMode
from magnetsdk.forward import logits_at, run_decoder


def reference_nll(
    model: torch.nn.Module,
    context_ids: list[int],
    prompt_ids: list[int],
    reference_ids: list[int],
    reuse: bool,
) -> float:
    """Mean negative log-likelihood (nats per token) of ``reference_ids`` as the answer, teacher-forced,
    under the hybrid (``reuse=True``) or causal layout. One forward pass, no cache."""
    if not reference_ids:
        raise ValueError("the reference answer is empty")
    device = next(model.parameters()).device
    ids = torch.tensor([context_ids + prompt_ids + reference_ids], device=device)  # (1, n)
    valid = torch.ones_like(ids, dtype=torch.bool)
    is_span = valid.clone()
    is_span[:, : len(context_ids)] = False
    mode = AttentionMode.HYBRID if reuse else AttentionMode.CAUSAL
    hidden = run_decoder(model, ids, valid, mode, is_span).hidden  # (1, n, d)
    start = len(context_ids) + len(prompt_ids)
    logits = logits_at(model, hidden[0, start - 1 : -1])  # (r, V): each predicts the next token
    targets = torch.tensor(reference_ids, device=device)
    return float(torch.nn.functional.cross_entropy(logits, targets))
