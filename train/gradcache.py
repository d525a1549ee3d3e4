"""GradCache for the contrastive objective: many in-batch negatives without holding every graph.

InfoNCE couples every anchor to every candidate, so its gradient needs all embeddings at once;
the decoder graphs that produced them do not have to coexist (Gao et al. 2021, "Scaling Deep
Contrastive Learning Batch Size under Memory Limited Setup"):

1. embed every view of the micro-batch without gradients, chunk by chunk, keeping each chunk's
   random-generator state (dropout must draw the same masks in step 3);
2. compute the (global) InfoNCE loss from those embeddings as leaves and back-propagate it to
   them: ``d loss / d embedding`` for every local view;
3. for each chunk, restore its generator state, embed it again *with* gradients and
   back-propagate the surrogate ``sum(embedding * cached gradient)``, whose gradient with respect
   to the weights is the chunk's share of the InfoNCE gradient.

The weight gradient equals the full-batch one (``tests/test_train_gradcache.py``); the price is
one extra forward pass over the views, and memory holds one chunk's graph instead of the batch's.

It knows nothing about data files, optimizers or the training loop's bookkeeping.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from magnetsdk.train.collate import ViewBatch
from magnetsdk.train.objectives import contrastive_loss


@dataclass
class ViewChunk:
    views: ViewBatch  # anchors, positives and negatives of a slice of anchors
    rng: dict[str, torch.Tensor]  # the generator states before its first pass
    grads: torch.Tensor | None = None  # (rows, d) d loss / d embedding, once computed


@dataclass
class CachedViews:
    chunks: list[ViewChunk]
    loss: float  # the global InfoNCE loss of the whole micro-batch


def split_view_batch(views: ViewBatch, chunk: int) -> list[ViewBatch]:
    """Cut ``views`` into batches of ``chunk`` anchors, each with its positives and negatives.

    Padding columns no row of a chunk needs are trimmed.
    """
    b = views.anchors
    negative_row = torch.cumsum(views.has_negative.long(), 0) - 1  # (b,) row among the negatives
    pieces = []
    for start in range(0, b, chunk):
        end = min(b, start + chunk)
        anchors = list(range(start, end))
        has = views.has_negative[start:end]
        negatives = [2 * b + int(negative_row[i]) for i in anchors if bool(views.has_negative[i])]
        rows = anchors + [b + i for i in anchors] + negatives
        width = max(len(views.inputs[r].ids) for r in rows)
        index = torch.tensor(rows, device=views.input_ids.device)
        pieces.append(
            ViewBatch(
                views.input_ids[index, :width],
                views.valid[index, :width],
                [views.inputs[r] for r in rows],
                end - start,
                has,
            )
        )
    return pieces


def _rng_state(device: torch.device) -> dict[str, torch.Tensor]:
    state = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def restore_rng(state: dict[str, torch.Tensor], device: torch.device) -> None:
    torch.set_rng_state(state["cpu"])
    if "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def cache_view_gradients(module, views: ViewBatch, chunk: int, temperature: float) -> CachedViews:
    """Steps 1 and 2: every chunk's embeddings (no gradients) and the loss gradient wrt them.

    ``module`` is the (possibly DDP/FSDP-wrapped) :class:`MagnetObjectives`; its ``embed_only``
    forward pools the views.
    """
    device = views.input_ids.device
    chunks: list[ViewChunk] = []
    embedded: list[torch.Tensor] = []
    with torch.no_grad():
        for piece in split_view_batch(views, chunk):
            state = _rng_state(device)
            out = module(None, piece, (0.0, 1.0, 0.0), embed_only=True)
            chunks.append(ViewChunk(piece, state))
            embedded.append(out.embeddings.float())
    # Reassemble the rows in the order of `views` (anchors, positives, negatives) as leaves.
    anchors = torch.cat([e[: c.views.anchors] for e, c in zip(embedded, chunks, strict=True)])
    positives = torch.cat(
        [e[c.views.anchors : 2 * c.views.anchors] for e, c in zip(embedded, chunks, strict=True)]
    )
    negatives = [e[2 * c.views.anchors :] for e, c in zip(embedded, chunks, strict=True)]
    leaves = torch.cat([anchors, positives, *negatives]).requires_grad_(True)  # (2b + h, d)
    with torch.enable_grad():
        loss = contrastive_loss(leaves, views, temperature)
        (grad,) = torch.autograd.grad(loss, leaves)
    b = views.anchors
    first, first_negative = 0, 2 * b
    for c in chunks:
        rows, count = c.views.anchors, int(c.views.has_negative.sum())
        c.grads = torch.cat(
            [
                grad[first : first + rows],
                grad[b + first : b + first + rows],
                grad[first_negative : first_negative + count],
            ]
        )
        first, first_negative = first + rows, first_negative + count
    return CachedViews(chunks, float(loss.detach()))
