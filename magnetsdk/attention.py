"""Attention modes and the masks that implement them.

This module owns the one piece of logic that makes a decoder an encoder, an infiller and a
generator: which token may attend to which. Training and serving both build their masks here.

It knows nothing about tokens or layouts: callers say which positions are real (``valid``) and
which are span tokens (``is_span``); everything else is context.

Three modes:

- ``causal``: the model's native path. No custom mask is built; the model receives its usual
  2D padding mask, so flash-attention and every other backend work.
- ``bidirectional``: every real token sees every real token.
- ``hybrid``: context tokens see all context tokens; span tokens see all context tokens and
  the span tokens at or before them.

A decoder accepts a custom pattern through a 4D ``attention_mask`` of shape
``(batch, 1, queries, keys)``. Backends read that tensor differently: ``sdpa`` takes a boolean
"may attend" mask, ``eager`` *adds* the mask to the scores (a boolean there is silently wrong),
so the format is chosen per backend in :func:`backend_mask`.
"""

from __future__ import annotations

import torch

from magnetsdk.modes import AttentionMode  # the names live in a torch-free leaf (config.py reads them)

__all__ = [
    "AttentionMode",
    "AttentionBackendError",
    "allowed",
    "backend_mask",
    "check_backend",
    "position_ids",
]


# Backends that accept an arbitrary 4D mask, and the format each wants.
# "bool": True where attention is allowed. "additive": 0 where allowed, the dtype's minimum elsewhere.
_MASK_FORMAT = {
    "sdpa": "bool",
    "eager": "additive",
}
_CAUSAL_ONLY_BACKENDS = ("flash_attention_2", "flash_attention_3", "flash_attention_4", "kernels")


class AttentionBackendError(ValueError):
    """The model's attention backend cannot run the requested attention mode."""


def allowed(
    mode: AttentionMode | str,
    valid: torch.Tensor,
    is_span: torch.Tensor | None = None,
    num_queries: int | None = None,
) -> torch.Tensor:
    """Which key each query may attend to, as a boolean tensor ``(b, q, n)``.

    ``valid`` (b, n) marks real tokens (False for padding, on either side). ``is_span`` (b, n)
    marks span tokens for the hybrid mode. The queries are the last ``num_queries`` positions
    (default: all ``n``), which is what a decode step with a key/value cache needs.

    For context tokens ``c`` and span tokens ``s`` (rows are queries, columns keys)::

        causal          bidirectional    hybrid (c c c s s)
        1 . . . .       1 1 1 1 1        1 1 1 . .
        1 1 . . .       1 1 1 1 1        1 1 1 . .
        1 1 1 . .       1 1 1 1 1        1 1 1 . .
        1 1 1 1 .       1 1 1 1 1        1 1 1 1 .
        1 1 1 1 1       1 1 1 1 1        1 1 1 1 1

    The hybrid mask is the causal mask OR "both tokens are context", minus context queries
    looking at span keys (which only matters if a layout placed spans before context).

    A query never ends up with an empty row: padding queries attend to themselves only, so no
    softmax sees only masked scores (which would produce NaN).
    """
    mode = AttentionMode(mode)
    b, n = valid.shape
    q = n if num_queries is None else num_queries
    device = valid.device
    query_index = torch.arange(n - q, n, device=device)  # (q,)
    key_index = torch.arange(n, device=device)  # (n,)
    causal = key_index[None, :] <= query_index[:, None]  # (q, n)
    keys_valid = valid[:, None, :]  # (b, 1, n)

    if mode is AttentionMode.CAUSAL:
        pattern = causal[None].expand(b, q, n)
    elif mode is AttentionMode.BIDIRECTIONAL:
        pattern = torch.ones(b, q, n, dtype=torch.bool, device=device)
    else:
        if is_span is None:
            raise ValueError("hybrid attention needs `is_span` to tell span tokens from context tokens")
        key_span = is_span[:, None, :]  # (b, 1, n)
        query_span = is_span[:, n - q :, None]  # (b, q, 1)
        both_context = ~query_span & ~key_span
        span_query = query_span & (~key_span | causal[None])
        pattern = both_context | span_query

    queries_valid = valid[:, n - q :, None]  # (b, q, 1)
    mask = pattern & keys_valid & queries_valid
    diagonal = key_index[None, :] == query_index[:, None]  # (q, n)
    return mask | diagonal[None]


def backend_mask(allowed_mask: torch.Tensor, attn_implementation: str, dtype: torch.dtype) -> torch.Tensor:
    """Turn a boolean ``(b, q, n)`` mask into the 4D ``(b, 1, q, n)`` tensor the backend expects."""
    fmt = _MASK_FORMAT.get(attn_implementation)
    if fmt is None:
        raise AttentionBackendError(
            f"attention backend {attn_implementation!r} cannot take a custom attention mask; "
            f"load the model with attn_implementation in {sorted(_MASK_FORMAT)} "
            "for bidirectional or hybrid attention (flash-attention serves the causal mode only)"
        )
    mask = allowed_mask[:, None, :, :]
    if fmt == "bool":
        return mask
    additive = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return additive.masked_fill_(~mask, torch.finfo(dtype).min)


def check_backend(mode: AttentionMode | str, attn_implementation: str) -> None:
    """Raise a clear error when ``mode`` cannot run on ``attn_implementation``."""
    mode = AttentionMode(mode)
    if mode is AttentionMode.CAUSAL:
        return
    if attn_implementation in _CAUSAL_ONLY_BACKENDS or attn_implementation not in _MASK_FORMAT:
        raise AttentionBackendError(
            f"{mode.value} attention needs a custom mask, which the {attn_implementation!r} backend "
            f"cannot take; load the model with attn_implementation='sdpa' (or 'eager'). "
            "Flash-attention serves the causal mode (generation) only."
        )


def position_ids(valid: torch.Tensor, past_length: torch.Tensor | int = 0) -> torch.Tensor:
    """Positions counting real tokens only, so left and right padding give the same result.

    ``past_length`` (an int or a (b,) tensor) offsets rows that continue a cached prefix.
    Padding positions get 0 (they are masked out anyway).
    """
    counted = valid.long().cumsum(-1) - 1  # (b, n)
    if isinstance(past_length, torch.Tensor):
        counted = counted + past_length[:, None]
    else:
        counted = counted + past_length
    return counted.clamp_min(0).masked_fill(~valid, 0)
