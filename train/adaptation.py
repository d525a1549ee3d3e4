"""Which weights train: LoRA through peft (the default) or the full model.

With LoRA every linear projection of the decoder gets a low-rank adapter (peft's
``"all-linear"``, which leaves the LM head alone). When the layout tokens had to be *added* to
the tokenizer, their rows of the (tied) embedding matrix are random and must train too: peft's
``trainable_token_indices`` trains and saves just those rows, tied to the LM head. SmolLM2 reuses
reserved tokens, so nothing is added there.

A run may start from an exported adapter's LoRA weights instead of a fresh LoRA
(:func:`load_initial_adapter`, ``TrainConfig.init_adapter``): a continued run that needs no
checkpoint, e.g. on a machine whose ``runs/`` is gone.

It knows nothing about data or losses.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from magnetsdk.train.config import TrainConfig


def make_trainable(model: torch.nn.Module, config: TrainConfig, token_ids: list[int]) -> torch.nn.Module:
    """Return the model to train: a peft model with LoRA adapters, or ``model`` itself (full).

    ``token_ids``: the embedding rows that train beside LoRA (added layout tokens, and the reused
    ones under ``train_layout_tokens``).
    """
    if config.full_finetune:
        for parameter in model.parameters():
            parameter.requires_grad_(True)
        trained = model
    else:
        from peft import LoraConfig, get_peft_model

        lora = LoraConfig(
            r=config.lora_r,
            lora_alpha=config.lora_alpha,
            lora_dropout=config.lora_dropout,
            target_modules=config.lora_target_modules,
            # peft wraps the tied LM head too, so the new rows train in both places.
            trainable_token_indices=sorted(token_ids) or None,
            task_type="CAUSAL_LM",
        )
        trained = get_peft_model(model, lora)
    if config.gradient_checkpointing:
        # Non-reentrant checkpointing works with frozen inputs (LoRA) and with DDP.
        trained.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        trained.config.use_cache = False
    trained.train()
    return trained


def trainable_parameters(model: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    return {name: p for name, p in model.named_parameters() if p.requires_grad}


def parameter_groups(
    model: torch.nn.Module, learning_rate: float, token_lr: float | None
) -> list[dict[str, object]]:
    """The optimiser's groups: every trainable weight at ``learning_rate``, except that the token
    rows peft trains beside LoRA (``trainable_token_indices``) take ``token_lr`` when it is set."""
    trainable = trainable_parameters(model)
    if token_lr is None:
        return [{"params": list(trainable.values()), "lr": learning_rate}]
    rows = [p for name, p in trainable.items() if "trainable_tokens" in name]
    if not rows:
        raise ValueError(
            "layout_token_lr is set, but no token rows train beside LoRA (the layout reuses tokens the "
            "base already has): add train_layout_tokens=true (--train-layout-tokens), or drop layout_token_lr"
        )
    rest = [p for name, p in trainable.items() if "trainable_tokens" not in name]
    return [{"params": rest, "lr": learning_rate}, {"params": rows, "lr": token_lr}]


def load_initial_adapter(trained: torch.nn.Module, config: TrainConfig) -> dict[str, str]:
    """Copy the LoRA weights of ``config.init_adapter`` into ``trained`` (a fresh peft model).

    The adapter must sit on this run's base model and have its rank, alpha and target modules;
    anything else is an error that says which setting differs. Returns what the model card
    records: the adapter's directory and the hash of its weights.
    """
    from peft.utils import get_peft_model_state_dict, set_peft_model_state_dict
    from safetensors.torch import load

    from magnetsdk.loading import ADAPTER_CONFIG, ADAPTER_WEIGHTS, resolve

    source = config.init_adapter
    resolved = resolve(source)
    directory = resolved.adapter
    if directory is None or not (directory / ADAPTER_WEIGHTS).is_file():
        raise ValueError(
            f"init_adapter={source!r} holds no LoRA adapter ({ADAPTER_WEIGHTS}); name an exported "
            "adapter directory (a run's output_dir) or a model that carries one, such as 'default'"
        )
    base = resolve(config.base_model)
    if Path(resolved.base).resolve() != Path(base.base).resolve():
        raise ValueError(
            f"init_adapter={source!r} was trained on {resolved.base}, but this run's base_model "
            f"{config.base_model!r} is {base.base}; set base_model to the adapter's base"
        )
    saved = json.loads((directory / ADAPTER_CONFIG).read_text())
    lora = trained.peft_config["default"]
    # Each compared setting: (the adapter's, this run's, what to change when they differ).
    wanted = {
        "r": (saved.get("r"), config.lora_r, "set lora_r"),
        "lora_alpha": (saved.get("lora_alpha"), config.lora_alpha, "set lora_alpha"),
        "target_modules": (
            sorted(saved.get("target_modules") or []),
            sorted(lora.target_modules or []),
            "set lora_target_modules",
        ),
        # The rows of layout tokens added to the tokenizer: they follow the base's tokenizer and
        # the layout tokens, so the same base and magnetsdk version add the same ones.
        "trainable_token_indices": (
            saved.get("trainable_token_indices"),
            lora.trainable_token_indices,
            "train with the tokenizer and layout tokens of the adapter's run",
        ),
    }
    # An adapter that kept the base's rows of reused layout tokens may start a run that trains
    # them (train_layout_tokens): those rows start from the base's.
    rows_start_from_base = bool(config.train_layout_tokens and saved.get("trainable_token_indices") is None)
    if config.end_row_from_eos and saved.get("trainable_token_indices") is not None:
        raise ValueError(
            f"init_adapter={source!r} holds trained layout-token rows, and end_row_from_eos would "
            "overwrite END's with EOS's row at step 0: drop end_row_from_eos to continue from the "
            "adapter's END row"
        )
    if rows_start_from_base:
        del wanted["trainable_token_indices"]
    differ = [(name, theirs, ours, fix) for name, (theirs, ours, fix) in wanted.items() if theirs != ours]
    if differ:
        raise ValueError(
            f"init_adapter={source!r} does not fit this run's LoRA: "
            + "; ".join(f"{name} {theirs} (this run: {ours}): {fix}" for name, theirs, ours, fix in differ)
        )
    data = (directory / ADAPTER_WEIGHTS).read_bytes()  # read once: the weights and their hash
    weights = load(data)
    current = get_peft_model_state_dict(trained)  # what saving this model would write
    if rows_start_from_base:  # the token rows keep their fresh (base) values
        weights = {**{k: v for k, v in current.items() if "trainable_tokens" in k}, **weights}
    expected = set(current)
    missing, extra = sorted(expected - set(weights)), sorted(set(weights) - expected)
    if missing or extra:
        raise ValueError(
            f"init_adapter={source!r}: its weights do not fit this model (missing: {missing[:3]}, "
            f"not in this model: {extra[:3]}); start from an adapter trained on this base"
        )
    set_peft_model_state_dict(trained, weights)
    return {"path": str(directory), "sha256": hashlib.sha256(data).hexdigest()}


def copy_token_row(trained: torch.nn.Module, source_id: int, target_id: int) -> None:
    """Set the trained row of token ``target_id`` (input embedding and tied LM head) to the base's
    row of ``source_id``. ``target_id`` must be one of the rows peft trains beside LoRA."""
    layers = [
        m for m in trained.modules() if hasattr(m, "trainable_tokens_delta") and "default" in m.token_indices
    ]
    if not layers or target_id not in layers[0].token_indices["default"]:
        raise ValueError(
            f"token {target_id}'s row does not train in this run, so it cannot start from token "
            f"{source_id}'s: train the layout rows (train_layout_tokens=true, --train-layout-tokens)"
        )
    with torch.no_grad():
        for layer in layers:
            position = layer.token_indices["default"].index(target_id)
            layer.trainable_tokens_delta["default"][position] = layer.base_layer.weight[source_id]
