"""The three MAGNET losses and the module that computes them in one training forward.

- MNTP and MSG share one decoder pass over one laid-out sequence (masked context + spans,
  one hybrid mask); LM-head logits are computed only at the positions that carry a loss.
- SSCL runs the decoder bidirectionally over the instruction-prefixed anchors, positives and hard
  negatives (one batch), pools the last token (EOS) and applies InfoNCE with cosine similarity
  over a temperature and in-batch negatives.

Across processes: the token losses are divided by the token count of the *global* batch, and
the contrastive loss is computed over the embeddings gathered from all processes (gradient
flowing to the local part), so a run on N processes computes the same loss and, after DDP's
gradient averaging (undone by the ``world`` factor), the same gradient as one process with the
same global batch.

It knows nothing about data files, optimizers or checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from magnetsdk.train.collate import LMBatch, ViewBatch

from magnetsdk.attention import AttentionMode
from magnetsdk.config import Pooling
from magnetsdk.encoding import pool
from magnetsdk.forward import logits_at, run_decoder


def _dist():
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1 else None


def world_size() -> int:
    dist = _dist()
    return dist.get_world_size() if dist else 1


def global_sum(value: torch.Tensor) -> torch.Tensor:
    """Sum of a tensor over all processes (no gradient)."""
    dist = _dist()
    value = value.detach().clone()
    if dist:
        dist.all_reduce(value)
    return value


def gather_keep_local_grad(x: torch.Tensor) -> torch.Tensor:
    """Concatenate ``x`` (b, ...) from all processes in rank order; only the local part has a gradient."""
    dist = _dist()
    if dist is None:
        return x
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x.detach().contiguous())
    parts[dist.get_rank()] = x
    return torch.cat(parts)


def token_loss_sum(
    model: torch.nn.Module,
    hidden: torch.Tensor,
    rows: torch.Tensor,
    positions: torch.Tensor,
    targets: torch.Tensor,
) -> torch.Tensor:
    """Summed cross-entropy of ``targets`` predicted from ``hidden[rows, positions]`` (k,) -> ()."""
    if targets.numel() == 0:
        return hidden.sum() * 0.0  # keeps the graph (and DDP) happy when a batch has no targets
    logits = logits_at(model, hidden[rows, positions])  # (k, V) float32
    return F.cross_entropy(logits, targets, reduction="sum")


def info_nce(
    anchors: torch.Tensor,
    positives: torch.Tensor,
    temperature: float,
    negatives: torch.Tensor | None = None,
    negative_valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """InfoNCE: anchor ``i`` must pick positive ``i`` among all positives and hard negatives.

    ``anchors``, ``positives`` (N, d); ``negatives`` (N, d) with ``negative_valid`` (N,) marking
    the rows that exist. Similarity is cosine / ``temperature``; the loss is the mean over anchors.
    """
    a = F.normalize(anchors.float(), dim=-1)
    candidates = F.normalize(positives.float(), dim=-1)  # (N, d)
    scores = a @ candidates.T / temperature  # (N, N)
    if negatives is not None:
        negative_scores = a @ F.normalize(negatives.float(), dim=-1).T / temperature  # (N, N)
        if negative_valid is not None:
            negative_scores = negative_scores.masked_fill(~negative_valid[None, :], float("-inf"))
        scores = torch.cat([scores, negative_scores], dim=1)  # (N, 2N)
    labels = torch.arange(a.shape[0], device=a.device)
    return F.cross_entropy(scores, labels)


@dataclass
class StepLosses:
    total: torch.Tensor  # what to back-propagate (scaled for DDP averaging)
    mntp: float | None
    sscl: float | None
    msg: float | None


class MagnetObjectives(torch.nn.Module):
    """Wraps the (peft) model so that one ``forward`` computes every loss of a micro-batch.

    Going through ``forward`` is what lets DDP (``accelerate launch``) synchronise gradients.
    """

    def __init__(self, model: torch.nn.Module, lm_attention: str, temperature: float) -> None:
        super().__init__()
        self.model = model
        self.lm_attention = AttentionMode(lm_attention)
        self.temperature = temperature

    def forward(
        self, lm: LMBatch | None, views: ViewBatch | None, weights: tuple[float, float, float]
    ) -> StepLosses:
        w_mntp, w_sscl, w_msg = weights
        world = world_size()
        total = torch.zeros((), device=self._device())
        mntp = msg = sscl = None

        if lm is not None and (w_mntp or w_msg):
            hidden = run_decoder(self.model, lm.input_ids, lm.valid, self.lm_attention, lm.is_span).hidden
            for name, weight, rows, positions, targets in (
                ("mntp", w_mntp, lm.mntp_rows, lm.mntp_positions, lm.mntp_targets),
                ("msg", w_msg, lm.msg_rows, lm.msg_positions, lm.msg_targets),
            ):
                if not weight:
                    continue
                present = global_sum(torch.tensor(float(targets.numel()), device=hidden.device))
                count = present.clamp_min(1.0)
                summed = token_loss_sum(self.model, hidden, rows, positions, targets)
                total = total + weight * summed / count * world
                # A global batch without targets of this objective (e.g. no MNTP example drawn) logs none.
                value = float(global_sum(summed) / count) if float(present) > 0 else None
                if name == "mntp":
                    mntp = value
                else:
                    msg = value

        if views is not None and w_sscl:
            hidden = run_decoder(
                self.model, views.input_ids, views.valid, AttentionMode.BIDIRECTIONAL
            ).hidden  # (2b + h, n, d)
            pooled = pool(hidden, views.inputs, Pooling.LAST)  # (2b + h, d)
            b = views.anchors
            negatives = None
            if bool(views.has_negative.any()) or world > 1:
                negatives = torch.zeros_like(pooled[:b])
                negatives[views.has_negative] = pooled[2 * b :]
            anchors = gather_keep_local_grad(pooled[:b])
            positives = gather_keep_local_grad(pooled[b : 2 * b])
            negative_valid = None
            if negatives is not None:
                negatives = gather_keep_local_grad(negatives)
                negative_valid = gather_keep_local_grad(views.has_negative.to(torch.uint8)).bool()
            loss = info_nce(anchors, positives, self.temperature, negatives, negative_valid)
            # Every process computes the same global loss; each back-propagates into its local part.
            total = total + w_sscl * loss * world
            sscl = float(loss.detach())

        return StepLosses(total=total, mntp=mntp, sscl=sscl, msg=msg)

    def _device(self) -> torch.device:
        return next(self.model.parameters()).device
