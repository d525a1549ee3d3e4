"""Which weights train: LoRA through peft (the default) or the full model.

With LoRA every linear projection of the decoder gets a low-rank adapter (peft's
``"all-linear"``, which leaves the LM head alone). When the layout tokens had to be *added* to
the tokenizer, their rows of the (tied) embedding matrix are random and must train too: peft's
``trainable_token_indices`` trains and saves just those rows, tied to the LM head. SmolLM2 reuses
reserved tokens, so nothing is added there.

It knows nothing about data or losses.
"""

from __future__ import annotations

import torch
from magnetsdk.train.config import TrainConfig


def make_trainable(model: torch.nn.Module, config: TrainConfig, new_token_ids: list[int]) -> torch.nn.Module:
    """Return the model to train: a peft model with LoRA adapters, or ``model`` itself (full)."""
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
            trainable_token_indices=sorted(new_token_ids) or None,
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
