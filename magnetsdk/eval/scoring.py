"""Negative log-likelihood of chosen target tokens under one attention mode.

The infill and lm tasks both reduce to "run the decoder over these ids, read the LM head only at
these positions, return -log p(target)". Sequences are length-sorted and right-padded into
batches; padding never changes a real token's result because the mask and the position ids count
real tokens only (see :mod:`magnetsdk.attention`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from magnetsdk.attention import AttentionMode
from magnetsdk.encoding import pad_batch
from magnetsdk.forward import logits_at, run_decoder


@dataclass
class ScoredSequence:
    input_ids: list[int]
    target_positions: list[int]  # the position whose output predicts each target
    targets: list[int]
    is_span: list[bool] | None = None  # for the hybrid mode

    def __post_init__(self) -> None:
        if len(self.target_positions) != len(self.targets):
            raise ValueError("target_positions and targets must have the same length")
        if any(not 0 <= p < len(self.input_ids) for p in self.target_positions):
            raise ValueError("a target position lies outside the sequence")


def target_nll(
    model: torch.nn.Module,
    sequences: list[ScoredSequence],
    mode: AttentionMode | str,
    pad_id: int,
    batch_size: int = 8,
    show_progress: bool = False,
    desc: str = "score",
) -> list[np.ndarray]:
    """Per sequence, the float64 array of ``-log p(target)`` for each of its targets."""
    mode = AttentionMode(mode)
    device = next(model.parameters()).device
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i].input_ids), reverse=True)
    out: list[np.ndarray] = [np.zeros(0)] * len(sequences)
    starts = range(0, len(order), batch_size)
    if show_progress:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc=desc, unit="batch")
    with torch.inference_mode():
        for start in starts:
            index = order[start : start + batch_size]
            batch = [sequences[i] for i in index]
            ids, valid = pad_batch([s.input_ids for s in batch], pad_id, device)  # (b, n)
            is_span = None
            if mode is AttentionMode.HYBRID:
                is_span = torch.zeros_like(valid)
                for row, s in enumerate(batch):
                    if s.is_span is None:
                        raise ValueError("hybrid scoring needs is_span for every sequence")
                    is_span[row, : len(s.is_span)] = torch.tensor(s.is_span, device=device)
            hidden = run_decoder(model, ids, valid, mode, is_span).hidden  # (b, n, d)
            for row, (i, s) in enumerate(zip(index, batch, strict=True)):
                if not s.targets:
                    out[i] = np.zeros(0)
                    continue
                positions = torch.tensor(s.target_positions, device=device)
                logits = logits_at(model, hidden[row, positions])  # (t, V)
                targets = torch.tensor(s.targets, device=device)
                nll = torch.nn.functional.cross_entropy(logits, targets, reduction="none")  # (t,)
                out[i] = nll.double().cpu().numpy()
    return out


def perplexity(nll: list[np.ndarray]) -> float:
    """Token-level perplexity over all targets of all sequences: exp(total NLL / total tokens)."""
    total = sum(float(x.sum()) for x in nll)
    count = sum(x.size for x in nll)
    if count == 0:
        raise ValueError("no tokens were scored, so there is no perplexity")
    return float(np.exp(total / count))
