"""Write the adapted model directory that ``Magnet.from_pretrained(dir)`` loads.

Contents: the peft adapter (``adapter_model.safetensors`` + ``adapter_config.json``), or the
full weights when fully fine-tuned; ``magnet_config.json`` (base model, instruction, encoding
attention and pooling, layout tokens, and ``training``: how it was trained); and the tokenizer
when training added layout tokens to it (the loader then reads the tokenizer from here).

The directory is written by :func:`magnetsdk.model_dir.write_model_directory` *beside* the run's
other files (checkpoints, metrics, the training config): files are staged in a temporary directory
and moved into place one by one, ``magnet_config.json`` last; only files an earlier export wrote
(listed in ``magnet_files.json``) are replaced, nothing else in the run directory is touched.
The sentence-transformers files (``MagnetModule``: the adapter is merged at load) come with it.
A model sharded by FSDP is exported from its whole weights, gathered by :func:`gather_weights` on
every process first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from magnetsdk.attention import AttentionMode
from magnetsdk.config import MagnetConfig, Pooling
from magnetsdk.layout import DEFAULT_INFILL_LAYOUT, LayoutTokens
from magnetsdk.model_dir import Manifest, weights_sha256, write_model_directory
from magnetsdk.st_layout import CUSTOM, write_custom_files


def encoding_settings(uses_sscl: bool, lm_attention: str) -> tuple[AttentionMode, Pooling]:
    """How a model trained this way should encode: the mode and pooling it was trained for.

    SSCL (and CoSENT over scored pairs) trains bidirectional last-token (EOS) embeddings. Without either, a model whose context was
    trained bidirectionally (MNTP, MSG) is read by mean pooling; a causal-only model (MEAP) keeps
    causal mean pooling, as an unadapted model does.
    """
    if uses_sscl:
        return AttentionMode.BIDIRECTIONAL, Pooling.LAST
    if lm_attention == "causal":
        return AttentionMode.CAUSAL, Pooling.MEAN
    return AttentionMode.BIDIRECTIONAL, Pooling.MEAN


def gather_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """All weights of an FSDP-sharded ``model``, whole, on the main process's CPU (others: empty).

    A collective: every process must call it. The same call accelerate's ``get_state_dict`` makes
    for FSDP2, on the (peft) model itself so the names are the ones ``save_pretrained`` expects.
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    weights = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    # Tied weights (embedding and LM head) come back as two copies; share one again so that
    # save_pretrained writes them once, as it does for an unsharded model.
    first: dict[int, str] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        source = first.setdefault(id(parameter), name)
        if weights and source != name:
            weights[name] = weights[source]
    return weights


def export_model(
    model: torch.nn.Module,
    tokenizer,
    out_dir: Path,
    base_model: str,
    instruction: str,
    layout: LayoutTokens,
    tokens_added: bool,
    uses_sscl: bool,
    lm_attention: str,
    training: dict[str, Any],
    full_weights: bool,
    state_dict: dict[str, torch.Tensor] | None = None,
    infill_layout: str = DEFAULT_INFILL_LAYOUT,
) -> Path:
    """Write the model directory; ``state_dict`` (from :func:`gather_weights`) replaces the model's own."""
    out_dir = Path(out_dir)
    mode, pooling = encoding_settings(uses_sscl, lm_attention)
    config = MagnetConfig(
        base_model=base_model,
        instruction=instruction,
        encode_attention=mode,
        pooling=pooling,
        layout_tokens=layout.strings(),
        infill_layout=infill_layout,
        adapted=True,
        training=training,
    )

    def stage(tmp: Path) -> Manifest:
        model.save_pretrained(tmp, safe_serialization=True, state_dict=state_dict)
        # peft writes a boilerplate model card; the run's README.md (if any) is the user's.
        (tmp / "README.md").unlink(missing_ok=True)
        if tokens_added or full_weights:
            tokenizer.save_pretrained(tmp)
        config.save(tmp)
        write_custom_files(tmp, prompts=None, default_prompt_name=None)
        return Manifest(
            kind="model" if full_weights else "adapter",
            weights_sha256=weights_sha256(tmp) if full_weights else None,
            sentence_transformers=CUSTOM,
            sentence_transformers_reason="training's export is read through magnetsdk (adapter merged at load)",
        )

    return write_model_directory(out_dir, stage, whole=False)
