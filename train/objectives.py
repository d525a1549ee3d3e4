"""The three MAGNET losses and the module that computes them in one training forward.

- MNTP and MSG share one decoder pass over one laid-out sequence (masked context + spans,
  one hybrid mask); LM-head logits are computed only at the positions that carry a loss.
- SSCL runs the decoder bidirectionally over the instruction-prefixed anchors, positives and hard
  negatives (one batch), pools the last token (EOS) and applies InfoNCE with cosine similarity
  over a temperature and in-batch negatives.

- Scored pairs (optional, supervised): the same bidirectional last-token embeddings of both texts;
  CoSENT orders the pairs' cosines as their gold scores.

Across processes: the token losses are divided by the token count of the *global* batch, and
the contrastive loss is computed over the embeddings gathered from all processes (gradient
flowing to the local part), so a run on N processes computes the same loss and, after DDP's
gradient averaging (undone by the ``world`` factor), the same gradient as one process with the
same global batch.

It knows nothing about data files, optimizers or checkpoints. It is longer than the ~400 lines
of the structure rule: the optional terms (KL, CoSENT, end KL, END weighting, copy unlikelihood) share the one
forward's decoder passes and its rules across processes, and read apart they would hide which
pass each takes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from magnetsdk.train.collate import EndBatch, LMBatch, ScoredBatch, ViewBatch

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


def cosent(similarities: torch.Tensor, scores: torch.Tensor, scale: float) -> torch.Tensor:
    """CoSENT (Su, 2022): every pair scored above another must have the higher cosine.

    ``log(1 + sum over (i, j) with scores[i] > scores[j] of exp(scale * (cos_j - cos_i)))``;
    ``similarities`` and ``scores`` are (n,). Only the order of the scores matters, so any scale
    of labels works; pairs with equal scores are not compared. With no two scores different the
    loss is 0 (log 1).
    """
    cos = similarities.float()
    differences = scale * (cos[None, :] - cos[:, None])  # [i, j] = scale * (cos_j - cos_i)
    ranked = scores[:, None] > scores[None, :]  # pair i is scored above pair j
    terms = differences.masked_fill(~ranked, float("-inf")).flatten()
    return torch.logsumexp(torch.cat([terms.new_zeros(1), terms]), dim=0)


@dataclass
class StepLosses:
    total: torch.Tensor  # what to back-propagate (scaled for DDP averaging)
    mntp: float | None
    sscl: float | None
    msg: float | None
    embeddings: torch.Tensor | None = None  # embed_only: the pooled views (rows of the ViewBatch)
    kl: float | None = None  # KL(adapted || base) per next-token target (kl_weight > 0)
    scored: float | None = None  # CoSENT over the scored pairs (a ScoredBatch was given)
    end_kl: float | None = None  # KL(adapted || base) after short texts (an EndBatch was given)
    copy_ul: float | None = None  # -log(1 - p) per avoided token of copying fills (copies were given)


def fused_rows_cost(lm: LMBatch, views: ViewBatch) -> tuple[int, int]:
    """(token slots of one pass over both padded to one length, of two separate passes)."""
    b_lm, n_lm = lm.input_ids.shape
    b_v, n_v = views.input_ids.shape
    return (b_lm + b_v) * max(n_lm, n_v), b_lm * n_lm + b_v * n_v


def _pad_columns(x: torch.Tensor, n: int, value) -> torch.Tensor:
    return torch.nn.functional.pad(x, (0, n - x.shape[1]), value=value)


class MagnetObjectives(torch.nn.Module):
    """Wraps the (peft) model so that one ``forward`` computes every loss of a micro-batch.

    Going through ``forward`` is what lets DDP (``accelerate launch``) synchronise gradients.

    - The LM rows (MNTP + MSG) take one decoder pass and one LM-head call over the targets of
      both objectives.
    - The views take one bidirectional pass; when padding both to one length wastes little
      (``fuse``, at most ``_FUSE_SLACK`` more token slots), LM rows and views share a single
      hybrid pass: a view row has no span token, and hybrid attention over a row without span
      tokens is bidirectional attention.
    - With ``view_grads`` (GradCache, :mod:`magnetsdk.train.gradcache`) the views of this call are
      one chunk whose embedding gradients were computed beforehand; the contrastive term is the
      surrogate ``sum(embedding * gradient)``, whose gradient is the InfoNCE gradient.
    - ``embed_only`` returns the pooled views (no loss); called under ``torch.no_grad``.
    - ``kl_weight`` > 0: the next-token rows (all span tokens, no context) also take
      ``KL(adapted || base)`` at each target, the base being the same peft model with its adapter
      switched off (one more pass, without gradients, over those rows only). The reverse direction
      is the one that punishes mass the base does not give: rare, under-trained tokens.
    - ``scored`` (a :class:`ScoredBatch`) adds ``scored_weight`` x CoSENT over those pairs' cosines
      (one bidirectional pass of its own; called with neither LM rows nor views).
    - ``span_end_weight`` counts each missing-span END target (``end_token_id``) that many times in
      the MSG mean (1: as any span token): what closes a span, against ``end_kl_weight``, which
      lowers the EOS that END's row shares after a finished text.
    - ``ends`` (an :class:`EndBatch`) adds ``end_kl_weight`` x KL(adapted || base) of the next token
      after each short text, read causally as a prompt is (a causal pass with the adapter and one
      without; called alone, as ``scored`` is). ``end_kl_without_end`` compares the two over every
      token but END (``end_token_id``), each renormalised.
    - ``copies`` (an :class:`LMBatch` of :func:`~magnetsdk.train.collate.copy_fill_example` rows)
      adds ``copy_ul_weight`` x the mean unlikelihood ``-log(1 - p)`` of the tokens where the
      model's own fills continued a copy of their context (a pass of its own, called alone).
    """

    _FUSE_SLACK = 1.15

    def __init__(
        self,
        model: torch.nn.Module,
        lm_attention: str,
        temperature: float,
        fuse: bool = True,
        kl_weight: float = 0.0,
        scored_weight: float = 0.0,
        cosent_scale: float = 20.0,
        end_kl_weight: float = 0.0,
        span_end_weight: float = 1.0,
        end_token_id: int | None = None,
        end_kl_without_end: bool = False,
        copy_ul_weight: float = 0.0,
    ) -> None:
        super().__init__()
        if (kl_weight or end_kl_weight) and not hasattr(model, "disable_adapter"):
            raise ValueError(
                "kl_weight > 0 and end_kl_weight > 0 need a peft model: the base is the model with its adapter off"
            )
        self.model = model
        self.lm_attention = AttentionMode(lm_attention)
        self.temperature = temperature
        self.fuse = fuse
        self.kl_weight = kl_weight
        self.scored_weight = scored_weight
        self.cosent_scale = cosent_scale
        self.end_kl_weight = end_kl_weight
        if span_end_weight != 1.0 and end_token_id is None:
            raise ValueError("span_end_weight != 1 needs end_token_id: the layout's END token")
        self.span_end_weight = span_end_weight
        if end_kl_without_end and end_token_id is None:
            raise ValueError("end_kl_without_end needs end_token_id: the layout's END token")
        self.end_token_id = end_token_id
        self.end_kl_without_end = end_kl_without_end
        self.copy_ul_weight = copy_ul_weight

    def forward(
        self,
        lm: LMBatch | None,
        views: ViewBatch | None,
        weights: tuple[float, float, float],
        view_grads: torch.Tensor | None = None,
        embed_only: bool = False,
        scored: ScoredBatch | None = None,
        ends: EndBatch | None = None,
        copies: LMBatch | None = None,
    ) -> StepLosses:
        w_mntp, w_sscl, w_msg = weights
        world = world_size()
        total = torch.zeros((), device=self._device())
        if scored is not None:
            loss = self._scored_loss(scored)
            return StepLosses(
                total=total + self.scored_weight * loss * world,
                mntp=None,
                sscl=None,
                msg=None,
                scored=float(loss.detach()),
            )
        if ends is not None:
            loss = self._end_kl(ends)
            return StepLosses(
                total=total + self.end_kl_weight * loss * world,
                mntp=None,
                sscl=None,
                msg=None,
                end_kl=float(global_sum(loss.detach()) / world),
            )
        if copies is not None:
            summed, found = self._copy_unlikelihood(copies)
            count = found.clamp_min(1.0)
            return StepLosses(
                total=total + self.copy_ul_weight * summed / count * world,
                mntp=None,
                sscl=None,
                msg=None,
                copy_ul=float(global_sum(summed.detach()) / count),
            )
        mntp = msg = sscl = kl = None
        use_lm = lm is not None and bool(w_mntp or w_msg) and not embed_only
        use_views = views is not None and (bool(w_sscl) or embed_only)

        lm_hidden = view_hidden = None
        if use_lm and use_views and self._fusable(lm, views, view_grads):
            n = max(lm.input_ids.shape[1], views.input_ids.shape[1])
            hidden = run_decoder(
                self.model,
                torch.cat([_pad_columns(lm.input_ids, n, 0), _pad_columns(views.input_ids, n, 0)]),
                torch.cat([_pad_columns(lm.valid, n, False), _pad_columns(views.valid, n, False)]),
                AttentionMode.HYBRID,
                torch.cat(
                    [
                        _pad_columns(lm.is_span, n, False),
                        torch.zeros_like(_pad_columns(views.valid, n, False)),
                    ]
                ),
            ).hidden  # (b + 2b' + h, n, d)
            lm_hidden, view_hidden = hidden[: lm.input_ids.shape[0]], hidden[lm.input_ids.shape[0] :]
        else:
            if use_lm:
                lm_hidden = run_decoder(
                    self.model, lm.input_ids, lm.valid, self.lm_attention, lm.is_span
                ).hidden
            if use_views:
                view_hidden = run_decoder(
                    self.model, views.input_ids, views.valid, AttentionMode.BIDIRECTIONAL
                ).hidden  # (2b + h, n, d)

        if use_lm:
            total, mntp, msg, kl = self._token_losses(lm, lm_hidden, w_mntp, w_msg, world, total)

        if use_views:
            pooled = pool(view_hidden, views.inputs, Pooling.LAST)  # (2b + h, d)
            if embed_only:
                return StepLosses(total=total, mntp=None, sscl=None, msg=None, embeddings=pooled)
            if view_grads is not None:
                # GradCache: the gradient of the global loss wrt these embeddings is known.
                total = total + w_sscl * (pooled.float() * view_grads).sum() * world
            else:
                loss = contrastive_loss(pooled, views, self.temperature)
                # Every process computes the same global loss; each back-propagates into its local part.
                total = total + w_sscl * loss * world
                sscl = float(loss.detach())

        return StepLosses(total=total, mntp=mntp, sscl=sscl, msg=msg, kl=kl)

    def _scored_loss(self, scored: ScoredBatch) -> torch.Tensor:
        """The global CoSENT loss of this process's scored pairs and every other process's."""
        views = scored.views
        hidden = run_decoder(self.model, views.input_ids, views.valid, AttentionMode.BIDIRECTIONAL).hidden
        pooled = pool(hidden, views.inputs, Pooling.LAST).float()  # (2b, d)
        b = views.anchors
        similarities = F.cosine_similarity(pooled[:b], pooled[b : 2 * b], dim=-1)  # (b,)
        return cosent(
            gather_keep_local_grad(similarities), gather_keep_local_grad(scored.scores), self.cosent_scale
        )

    def _copy_unlikelihood(self, copies: LMBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """(summed ``-log(1 - p)`` over this process's avoided tokens, their global count)."""
        hidden = run_decoder(
            self.model, copies.input_ids, copies.valid, AttentionMode.HYBRID, copies.is_span
        ).hidden
        logits = logits_at(self.model, hidden[copies.msg_rows, copies.msg_positions])  # (m, V) float32
        p = F.softmax(logits, dim=-1).gather(1, copies.msg_targets[:, None]).squeeze(1)
        # Clamped below 1 so a token the model is sure of gives a large, finite loss.
        summed = -torch.log1p(-p.clamp(max=1.0 - 1e-6)).sum()
        return summed, global_sum(torch.tensor(float(p.numel()), device=p.device))

    def _end_kl(self, ends: EndBatch) -> torch.Tensor:
        """Mean KL(adapted || base) over this process's rows of the next token after each text."""
        rows = torch.arange(len(ends.last), device=ends.last.device)
        hidden = run_decoder(self.model, ends.input_ids, ends.valid, AttentionMode.CAUSAL).hidden
        log_p = F.log_softmax(self._end_kl_columns(logits_at(self.model, hidden[rows, ends.last])), dim=-1)
        with torch.no_grad(), self.model.disable_adapter():
            base = run_decoder(self.model, ends.input_ids, ends.valid, AttentionMode.CAUSAL).hidden
            log_q = F.log_softmax(self._end_kl_columns(logits_at(self.model, base[rows, ends.last])), dim=-1)
        return (log_p.exp() * (log_p - log_q)).sum(dim=-1).mean()

    def _end_kl_columns(self, logits: torch.Tensor) -> torch.Tensor:
        """The (b, V) logits the end KL compares: all of them, or all but END's column."""
        if not self.end_kl_without_end:
            return logits
        end = self.end_token_id
        return torch.cat([logits[:, :end], logits[:, end + 1 :]], dim=-1)

    def _fusable(self, lm: LMBatch, views: ViewBatch, view_grads: torch.Tensor | None) -> bool:
        if not self.fuse or view_grads is not None or self.lm_attention is AttentionMode.CAUSAL:
            return False
        fused, separate = fused_rows_cost(lm, views)
        fusable = fused <= self._FUSE_SLACK * separate
        if world_size() > 1:
            # Every process must make the same number of decoder calls (FSDP gathers each layer's
            # shards per call): fuse only when every process can.
            device = lm.input_ids.device
            fusable = float(global_sum(torch.tensor(0.0 if fusable else 1.0, device=device))) == 0.0
        return fusable

    def _token_losses(self, lm: LMBatch, hidden, w_mntp: float, w_msg: float, world: int, total):
        """MNTP and MSG from one LM-head call over the targets of both."""
        parts = [
            (lm.mntp_rows, lm.mntp_positions, lm.mntp_targets) if w_mntp else None,
            (lm.msg_rows, lm.msg_positions, lm.msg_targets) if w_msg else None,
        ]
        present = [p for p in parts if p is not None]
        rows = torch.cat([p[0] for p in present])
        positions = torch.cat([p[1] for p in present])
        targets = torch.cat([p[2] for p in present])
        if targets.numel():
            logits = logits_at(self.model, hidden[rows, positions])  # (k, V) float32
            each = F.cross_entropy(logits, targets, reduction="none")  # (k,)
        else:
            each = hidden.sum()[None][:0] * 0.0  # keeps the graph (and DDP) happy without targets
        values: list[float | None] = [None, None]
        start = 0
        for index, (part, weight) in enumerate(zip(parts, (w_mntp, w_msg), strict=True)):
            if part is None:
                continue
            k = part[2].numel()
            if index == 1 and self.span_end_weight != 1.0:
                # Each END target counts span_end_weight times in the mean over MSG targets.
                factor = torch.where(part[2] == self.end_token_id, self.span_end_weight, 1.0)
                summed = (each[start : start + k] * factor).sum()
                k = float(factor.sum())
            else:
                summed = each[start : start + k].sum()
            start += part[2].numel()
            found = global_sum(torch.tensor(float(k), device=hidden.device))
            count = found.clamp_min(1.0)
            total = total + weight * summed / count * world
            # A global batch without targets of this objective (no MNTP example drawn) logs none.
            values[index] = float(global_sum(summed) / count) if float(found) > 0 else None
        kl = None
        if self.kl_weight and w_msg:
            msg_logits = logits[len(targets) - lm.msg_targets.numel() :] if targets.numel() else None
            summed, found = self._kl_to_base(lm, msg_logits)
            count = found.clamp_min(1.0)
            total = total + self.kl_weight * summed / count * world
            kl = float(global_sum(summed) / count) if float(found) > 0 else None
        return total, values[0], values[1], kl

    def _kl_to_base(self, lm: LMBatch, msg_logits: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """(summed KL(adapted || base) over the next-token rows' targets, their global count)."""
        plain_rows = (lm.is_span | ~lm.valid).all(dim=1)  # (b,) rows without a context token
        plain = plain_rows[lm.msg_rows]  # (m,) targets in those rows
        device = lm.input_ids.device
        # Every process makes the same decoder calls (FSDP gathers each layer per call).
        anywhere = float(global_sum(torch.tensor(float(plain.any()), device=device))) > 0
        zero = torch.zeros((), device=device)
        if not anywhere:
            return zero, global_sum(torch.tensor(0.0, device=device))
        # A process without next-token targets this step (none drawn, or no MSG target at all)
        # still runs the pass, on its first row, and adds nothing.
        mine = msg_logits is not None and bool(plain.any())
        picked = plain_rows if mine else torch.arange(len(plain_rows), device=device) == 0
        with torch.no_grad(), self.model.disable_adapter():
            base_hidden = run_decoder(
                self.model, lm.input_ids[picked], lm.valid[picked], AttentionMode.HYBRID, lm.is_span[picked]
            ).hidden
            if not mine:
                return zero + base_hidden.sum() * 0.0, global_sum(torch.tensor(0.0, device=device))
            new_row = torch.cumsum(picked.long(), 0) - 1  # row in the picked sub-batch
            base_logits = logits_at(
                self.model, base_hidden[new_row[lm.msg_rows[plain]], lm.msg_positions[plain]]
            )
        log_p = F.log_softmax(msg_logits[plain], dim=-1)  # (k, V) adapted
        log_q = F.log_softmax(base_logits, dim=-1)  # (k, V) base
        summed = (log_p.exp() * (log_p - log_q)).sum()
        return summed, global_sum(torch.tensor(float(plain.sum()), device=device))

    def _device(self) -> torch.device:
        return next(self.model.parameters()).device


def split_views(views: ViewBatch, pooled: torch.Tensor):
    """(anchors (b, d), positives (b, d), negatives (b, d) or None) of the pooled rows of ``views``."""
    b = views.anchors
    negatives = None
    if bool(views.has_negative.any()) or world_size() > 1:
        negatives = torch.zeros_like(pooled[:b])
        negatives[views.has_negative] = pooled[2 * b :]
    return pooled[:b], pooled[b : 2 * b], negatives


def contrastive_loss(pooled: torch.Tensor, views: ViewBatch, temperature: float) -> torch.Tensor:
    """The global InfoNCE loss of this process's pooled views and every other process's."""
    anchors, positives, negatives = split_views(views, pooled)
    anchors = gather_keep_local_grad(anchors)
    positives = gather_keep_local_grad(positives)
    negative_valid = None
    if negatives is not None:
        negatives = gather_keep_local_grad(negatives)
        negative_valid = gather_keep_local_grad(views.has_negative.to(torch.uint8)).bool()
    return info_nce(anchors, positives, temperature, negatives, negative_valid)
