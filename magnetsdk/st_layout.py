"""The sentence-transformers files of a model directory, as plain JSON (no sentence-transformers import).

Two layouts; :mod:`magnetsdk.model_dir` picks one per directory and records which, and why:

- ``stock`` (:func:`write_stock_files`): ``Transformer`` + ``Pooling(lasttoken, include_prompt=True)``
  + an optional ``Dense`` (the principal-component shift) + ``Normalize``; the instruction is the
  default prompt. With :func:`append_eos` (the tokenizer appends the EOS the encoder pools) and
  :func:`mark_bidirectional` (``"is_causal": false``), ``SentenceTransformer(dir)`` needs no flag
  and vLLM serves the directory. :func:`restore_post_processor` undoes the tokenizer change for
  magnetsdk itself.
- ``magnetsdk`` (:func:`write_custom_files`): ``MagnetModule`` + ``Normalize``, for what stock
  modules cannot express (:func:`stock_obstacle` says what).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from magnetsdk.config import MagnetConfig, Pooling
from magnetsdk.files import atomic_write_text
from magnetsdk.modes import AttentionMode

STOCK = "stock"
CUSTOM = "magnetsdk"
# Frozen: saved model directories name these classes. The ``sentence_transformers.models.*`` paths
# are the ones sentence-transformers 2.x to 6.x import and vLLM recognises in ``modules.json``.
MAGNET_MODULE = "magnetsdk.integrations.sentence_transformers.MagnetModule"
ST_TRANSFORMER = "sentence_transformers.models.Transformer"
ST_POOLING = "sentence_transformers.models.Pooling"
ST_DENSE = "sentence_transformers.models.Dense"
ST_NORMALIZE = "sentence_transformers.models.Normalize"
SHIFT_WEIGHTS = "model.safetensors"  # in the Dense folder: ``linear.weight`` (d, d), ``linear.bias`` (d,)


def stock_obstacle(config: MagnetConfig, tokenizer) -> str | None:
    """Why the stock sentence-transformers modules cannot encode like ``config``, or None when they can."""
    if config.mixture:
        return "a UBMoE expert mixture runs two FFN experts per layer, which a stock Transformer cannot load"
    if config.echo:
        return "echo embeddings give each text twice and pool the second copy, which stock modules cannot"
    if config.pooling is Pooling.MEAN:
        return (
            "mean pooling over the text tokens only (instruction and EOS excluded) is not a stock "
            "Pooling mode (include_prompt=False still averages the EOS)"
        )
    if config.encode_attention not in (AttentionMode.CAUSAL, AttentionMode.BIDIRECTIONAL):
        return f"{config.encode_attention.value} attention has no stock equivalent"
    if tokenizer.eos_token_id is None:
        return "the tokenizer has no EOS token for last-token pooling"
    return None


def instruction_prompt(instruction: str) -> str:
    """The sentence-transformers prompt that encodes like ``instruction``: it is prepended to the text."""
    return f"{instruction.rstrip()} " if instruction.strip() else ""


def write_stock_files(
    directory: Path,
    config: MagnetConfig,
    dimension: int,
    shift: Any | None,
    prompts: dict[str, str] | None,
    default_prompt_name: str | None,
) -> None:
    """The stock pipeline: Transformer, last-token Pooling, the shift as a Dense layer, Normalize.

    Prompts keep the meaning they have for :class:`MagnetModule`: an empty prompt is the model's
    instruction and a named prompt replaces it (one space before the text). The model's instruction
    is stored as the prompt ``"instruction"`` and is the default, so ``encode(x)`` equals
    ``Magnet.encode(x)``.
    """
    modules = [{"idx": 0, "name": "0", "path": "", "type": ST_TRANSFORMER}]
    _write_json(
        directory / "sentence_bert_config.json",
        {
            "max_seq_length": config.max_length,
            "do_lower_case": False,
            "transformer_task": "feature-extraction",
            # Text only: a chat template in the tokenizer must not turn texts into chat messages.
            "modality_config": {"text": {"method": "forward", "method_output_name": "last_hidden_state"}},
            "module_output_name": "token_embeddings",
        },
    )
    # The pre-6.0 key set: sentence-transformers 6 converts it, and vLLM reads only this one.
    pooling = {f"pooling_mode_{m}": False for m in ("cls_token", "mean_tokens", "max_tokens")}
    pooling |= {"pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False}
    pooling |= {"word_embedding_dimension": dimension, "pooling_mode_lasttoken": True, "include_prompt": True}
    _write_json(directory / "1_Pooling" / "config.json", pooling)
    modules.append({"idx": 1, "name": "1", "path": "1_Pooling", "type": ST_POOLING})
    if shift is not None:
        _write_shift_dense(directory / "2_Dense", shift, dimension)
        modules.append({"idx": 2, "name": "2", "path": "2_Dense", "type": ST_DENSE})
    index = len(modules)
    _write_json(directory / f"{index}_Normalize" / "config.json", {})
    modules.append({"idx": index, "name": str(index), "path": f"{index}_Normalize", "type": ST_NORMALIZE})
    own = instruction_prompt(config.instruction)
    named = {
        name: (instruction_prompt(text) if text.strip() else own)
        for name, text in checked_prompts(prompts, default_prompt_name).items()
    }
    _write_settings(directory, {"instruction": own, **named}, default_prompt_name or "instruction")
    _write_json(directory / "modules.json", modules)


def write_custom_files(
    directory: Path, prompts: dict[str, str] | None, default_prompt_name: str | None
) -> None:
    """``MagnetModule`` (which reads ``magnet_config.json``) and ``Normalize``."""
    _write_json(directory / "1_Normalize" / "config.json", {})
    _write_settings(directory, checked_prompts(prompts, default_prompt_name), default_prompt_name)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": MAGNET_MODULE},
        {"idx": 1, "name": "1", "path": "1_Normalize", "type": ST_NORMALIZE},
    ]
    _write_json(directory / "modules.json", modules)


def checked_prompts(prompts: dict[str, str] | None, default_prompt_name: str | None) -> dict[str, str]:
    prompts = {"query": "", "document": "", **(prompts or {})}
    for name, text in prompts.items():
        if not isinstance(text, str):
            raise TypeError(f"prompts[{name!r}] is {type(text).__name__}, expected str")
    allowed = {*prompts, "instruction"}
    if default_prompt_name is not None and default_prompt_name not in allowed:
        raise ValueError(f"default_prompt_name={default_prompt_name!r} is not one of {sorted(allowed)}")
    return prompts


def _write_settings(directory: Path, prompts: dict[str, str], default_prompt_name: str | None) -> None:
    from magnetsdk import __version__

    settings = {
        "model_type": "SentenceTransformer",
        "__version__": {"magnetsdk": __version__},
        "prompts": prompts,
        "default_prompt_name": default_prompt_name,
        "similarity_fn_name": "cosine",
    }
    _write_json(directory / "config_sentence_transformers.json", settings)


def _write_shift_dense(folder: Path, shift: Any, dimension: int) -> None:
    """The principal-component shift as a linear layer: ``e + w v`` (I, w v) or ``e - (e.v) v`` (I - v v^T, 0)."""
    import numpy as np
    from safetensors.numpy import save_file

    v = shift.component.astype(np.float32)  # (d,)
    if shift.mode.value == "shift":
        weight, bias = np.eye(dimension, dtype=np.float32), (shift.weight * v).astype(np.float32)
    else:
        weight, bias = np.eye(dimension, dtype=np.float32) - np.outer(v, v), np.zeros(dimension, np.float32)
    folder.mkdir(parents=True, exist_ok=True)
    save_file({"linear.weight": weight, "linear.bias": bias}, str(folder / SHIFT_WEIGHTS))
    config = {
        "in_features": dimension,
        "out_features": dimension,
        "bias": True,
        "activation_function": "torch.nn.modules.linear.Identity",
    }
    _write_json(folder / "config.json", config)


def _write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2) + "\n")


# ---------------------------------------------------------------------------- stock-loader adjustments


def append_eos(directory: Path, tokenizer) -> tuple[bool, dict[str, Any] | None]:
    """Make the saved ``tokenizer.json`` append EOS (as the encoder does): (done, original post-processor).

    Not done, the file left as it was, when the result would not tokenize a text exactly as
    :func:`magnetsdk.encoding.prepare` does (``prefix + text + [EOS]``).
    """
    from tokenizers import Tokenizer

    from magnetsdk.encoding import special_prefix

    path = directory / "tokenizer.json"
    if not path.is_file():
        return False, None
    data = json.loads(path.read_text(encoding="utf-8"))
    original = data.get("post_processor")
    eos = tokenizer.eos_token
    append = {"SpecialToken": {"id": eos, "type_id": 0}}
    special = {eos: {"id": eos, "ids": [tokenizer.eos_token_id], "tokens": [eos]}}
    if original is not None and original.get("type") == "TemplateProcessing":
        changed = json.loads(json.dumps(original))
        changed["single"] = [*changed["single"], append]
        changed["pair"] = [*changed["pair"], {"SpecialToken": {"id": eos, "type_id": 1}}]
        changed["special_tokens"] = {**changed.get("special_tokens", {}), **special}
    else:
        template = {
            "type": "TemplateProcessing",
            "single": [{"Sequence": {"id": "A", "type_id": 0}}, append],
            "pair": [
                {"Sequence": {"id": "A", "type_id": 0}},
                {"Sequence": {"id": "B", "type_id": 1}},
                append,
            ],
            "special_tokens": special,
        }
        changed = template if original is None else {"type": "Sequence", "processors": [original, template]}
    data["post_processor"] = changed
    saved = Tokenizer.from_str(json.dumps(data))
    probe = "The cat sat."
    expected = special_prefix(tokenizer) + tokenizer(probe, add_special_tokens=False)["input_ids"]
    if saved.encode(probe).ids != [*expected, tokenizer.eos_token_id]:
        return False, None
    atomic_write_text(path, json.dumps(data, ensure_ascii=False, indent=2) + "\n")
    return True, original


def restore_post_processor(tokenizer, original: dict[str, Any] | None) -> None:
    """Give a tokenizer loaded from a stock directory back the post-processor magnetsdk saved it with."""
    from tokenizers import Tokenizer

    backend = tokenizer.backend_tokenizer
    data = json.loads(backend.to_str())
    data["post_processor"] = original
    backend.post_processor = Tokenizer.from_str(json.dumps(data)).post_processor


def mark_bidirectional(directory: Path) -> None:
    """``"is_causal": false`` in ``config.json``: transformers' (and vLLM's) own path is then bidirectional."""
    path = directory / "config.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["is_causal"] = False
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
