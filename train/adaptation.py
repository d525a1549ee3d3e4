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
    model: torch.nn.Module, learning_rate: float, token_lr: float | None, kept_rows: bool = False
) -> list[dict[str, object]]:
    """The optimiser's groups: every trainable weight at ``learning_rate``, except that the token
    rows peft trains beside LoRA (``trainable_token_indices``) take ``token_lr`` when it is set.

    ``kept_rows``: some of those rows are held where they start (:func:`hold_token_rows`); the rows
    then form their own group without weight decay, which would move a row that takes no gradient.
    """
    trainable = trainable_parameters(model)
    if token_lr is None and not kept_rows:
        return [{"params": list(trainable.values()), "lr": learning_rate}]
    rows = [p for name, p in trainable.items() if "trainable_tokens" in name]
    if not rows:
        raise ValueError(
            "layout_token_lr is set, but no token rows train beside LoRA (the layout reuses tokens the "
            "base already has): add train_layout_tokens=true (--train-layout-tokens), or drop layout_token_lr"
        )
    rest = [p for name, p in trainable.items() if "trainable_tokens" not in name]
    row_group: dict[str, object] = {"params": rows, "lr": learning_rate if token_lr is None else token_lr}
    if kept_rows:
        row_group["weight_decay"] = 0.0
    return ([{"params": rest, "lr": learning_rate}] if rest else []) + [row_group]


def freeze_lora(trained: torch.nn.Module) -> None:
    """Stop every trainable weight but the token rows (``TrainConfig.freeze_lora``): LoRA stays as
    it was loaded, and only the embedding rows beside it learn (a layout token tuned as a prompt)."""
    for name, parameter in trainable_parameters(trained).items():
        if "trainable_tokens" not in name:
            parameter.requires_grad_(False)


def hold_token_rows(trained: torch.nn.Module, token_ids: list[int]) -> None:
    """Hold the rows of ``token_ids`` (trained beside LoRA) where they start: their gradient is
    zeroed, so Adam never moves them. The rows peft trains form one tensor, so a row cannot sit in
    a parameter group of its own; an init adapter's trained row that this run does not train is
    held this way while other rows train."""
    held: set[int] = set()
    for module in trained.modules():
        if not hasattr(module, "trainable_tokens_delta") or "default" not in module.token_indices:
            continue
        parameter = module.trainable_tokens_delta["default"]
        if id(parameter) in held:  # the tied LM head shares the embedding's rows
            continue
        held.add(id(parameter))
        order = list(module.token_indices["default"])
        positions = torch.tensor([order.index(t) for t in token_ids])

        def zero_rows(grad: torch.Tensor, positions: torch.Tensor = positions) -> torch.Tensor:
            grad = grad.clone()
            grad[positions] = 0
            return grad

        parameter.register_hook(zero_rows)


def initial_token_rows(config: TrainConfig) -> list[int]:
    """The token rows ``config.init_adapter`` trained beside its LoRA (its
    ``trainable_token_indices``); [] without an init adapter or rows. A run keeps them: they are
    part of the adapter, whether or not this run trains them further."""
    from magnetsdk.loading import ADAPTER_CONFIG, resolve

    if not config.init_adapter or config.full_finetune:
        return []
    directory = resolve(config.init_adapter).adapter
    if directory is None or not (directory / ADAPTER_CONFIG).is_file():
        return []  # load_initial_adapter says what is wrong
    return list(json.loads((directory / ADAPTER_CONFIG).read_text()).get("trainable_token_indices") or [])


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
    }
    # The adapter's token rows (added or reused layout tokens) load into this run's; a row this run
    # trains and the adapter did not starts from the base's.
    theirs = list(saved.get("trainable_token_indices") or [])
    ours = list(lora.trainable_token_indices or [])
    if set(theirs) - set(ours):
        raise ValueError(
            f"init_adapter={source!r} trained the rows of tokens {sorted(set(theirs) - set(ours))}, which "
            "this model does not train: train with the tokenizer and layout tokens of the adapter's run"
        )
    if config.end_row_from_eos and theirs:
        raise ValueError(
            f"init_adapter={source!r} holds trained layout-token rows, and end_row_from_eos would "
            "overwrite END's with EOS's row at step 0: drop end_row_from_eos to continue from the "
            "adapter's END row"
        )
    differ = [(name, theirs, ours, fix) for name, (theirs, ours, fix) in wanted.items() if theirs != ours]
    if differ:
        raise ValueError(
            f"init_adapter={source!r} does not fit this run's LoRA: "
            + "; ".join(f"{name} {theirs} (this run: {ours}): {fix}" for name, theirs, ours, fix in differ)
        )
    data = (directory / ADAPTER_WEIGHTS).read_bytes()  # read once: the weights and their hash
    weights = load(data)
    current = get_peft_model_state_dict(trained)  # what saving this model would write
    if theirs != ours:  # the adapter's rows go to their places among this run's (base) rows
        for name, rows in current.items():
            if "trainable_tokens" in name:
                merged = rows.clone()
                if name in weights:
                    for position, token in enumerate(theirs):
                        merged[ours.index(token)] = weights[name][position]
                weights[name] = merged
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
