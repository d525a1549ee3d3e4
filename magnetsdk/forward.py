"""The one forward function that training and serving share.

It runs a Hugging Face decoder body under an attention mode (see :mod:`magnetsdk.attention`)
and returns hidden states; the LM head is applied separately and only where logits are needed
(the head of a 49k-word vocabulary costs about a fifth of a small model's FLOPs).

It knows nothing about text, instructions or layouts: it takes token ids, which of them are real
and which are span tokens. Any decoder whose forward accepts ``attention_mask`` (2D or 4D),
``position_ids`` and ``cache`` (transformers >= 5.24) works; nothing is subclassed or patched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from magnetsdk.attention import AttentionMode, allowed, backend_mask, check_backend, position_ids


@dataclass
class DecoderOutput:
    hidden: torch.Tensor  # (b, q, d) final-norm hidden states of the new tokens
    cache: Any | None  # the model's key/value cache when use_cache=True


def attn_implementation(model: torch.nn.Module) -> str:
    return getattr(model.config, "_attn_implementation", None) or "eager"


def decoder_body(model: torch.nn.Module) -> torch.nn.Module:
    """The transformer stack without the LM head (works through peft wrappers too)."""
    return model.get_decoder()


def lm_head(model: torch.nn.Module) -> torch.nn.Module:
    return model.get_output_embeddings()


def run_decoder(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    valid: torch.Tensor,
    mode: AttentionMode | str,
    is_span: torch.Tensor | None = None,
    past_key_values: Any | None = None,
    past_valid: torch.Tensor | None = None,
    past_is_span: torch.Tensor | None = None,
    use_cache: bool = False,
) -> DecoderOutput:
    """Run the decoder over ``input_ids`` (b, q) under ``mode``.

    With a cache, ``past_valid`` / ``past_is_span`` (b, p) describe the cached tokens so the mask
    and positions of the new tokens account for them.
    """
    mode = AttentionMode(mode)
    impl = attn_implementation(model)
    check_backend(mode, impl)
    if is_span is None:
        is_span = torch.zeros_like(valid)
    if past_valid is not None:
        full_valid = torch.cat([past_valid, valid], dim=1)  # (b, p + q)
        full_span = torch.cat(
            [past_is_span if past_is_span is not None else torch.zeros_like(past_valid), is_span], dim=1
        )
    else:
        full_valid, full_span = valid, is_span
    q = input_ids.shape[1]
    positions = position_ids(full_valid)[:, -q:]  # (b, q)

    if mode is AttentionMode.CAUSAL:
        # The native path: the model builds its own causal mask from a 2D padding mask.
        mask = full_valid.long()
    else:
        pattern = allowed(mode, full_valid, full_span, num_queries=q)  # (b, q, p + q)
        mask = backend_mask(pattern, impl, model.dtype)

    out = decoder_body(model)(
        input_ids=input_ids,
        attention_mask=mask,
        position_ids=positions,
        cache=past_key_values,
        use_cache=use_cache,
    )
    return DecoderOutput(hidden=out.last_hidden_state, cache=out.cache if use_cache else None)


def logits_at(model: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """LM-head logits for the given hidden states only (any leading shape), in float32."""
    return lm_head(model)(hidden).float()
