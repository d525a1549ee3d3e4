"""UBMoE stage 2: train the per-layer gates of a uni/bidirectional FFN mixture on plain text.

From a stage-1 model (``magnet train --recipe ubmoe-ffn``: FFN-only LoRA, bidirectional SSCL)
:func:`train_gates` loads the base model, installs in every layer a
:class:`~magnetsdk.experts.TwoExpertFFN` (original MLP, stage-1 MLP, a fresh gate) and trains
only the gates with causal next-token cross-entropy plus ``balance_weight`` times the Switch
load-balance loss (averaged over layers). Everything else is frozen. The result is a mixture
directory that ``Magnet.from_pretrained`` loads (:func:`magnetsdk.experts.save_mixture`).

Checkpoints, the learning-rate schedule, seeding, the data order and the metrics log are the
ones :mod:`magnetsdk.train.trainer` uses. One process; it knows nothing about the command line.
"""

from __future__ import annotations

import functools
import time
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from magnetsdk.train.checkpoint import latest_checkpoint, load_checkpoint, rng_state, save_checkpoint
from magnetsdk.train.config import Schedule, _as_list, _enum
from magnetsdk.train.data import Order, read_texts, tokenize_texts
from magnetsdk.train.metrics import MetricsLog
from magnetsdk.train.trainer import lr_factor, seed_everything

from magnetsdk.attention import AttentionMode
from magnetsdk.encoding import pad_batch
from magnetsdk.encoding import pad_id as padding_id
from magnetsdk.experts import (
    MixtureError,
    balance_loss,
    bidirectional_mlps,
    install_experts,
    mixture_modules,
    save_mixture,
)
from magnetsdk.forward import logits_at, run_decoder


@dataclass
class UBMoEConfig:
    bi_model: str  # the stage-1 directory (magnet train --recipe ubmoe-ffn)
    data: list[str] = field(default_factory=list)  # plain text files (.txt / .jsonl / .csv / .tsv)
    output_dir: str = "runs/ubmoe"
    text_field: str = "text"
    max_length: int = 128  # tokens per training sequence (longer texts are split)
    batch_size: int = 8
    max_steps: int = 100
    learning_rate: float = 1e-3
    warmup_steps: int = 10
    schedule: Schedule = Schedule.COSINE
    balance_weight: float = 0.01  # the Switch Transformer default
    seed: int = 0
    threads: int | None = None  # torch intra-op threads (1 on a shared CPU)
    device: str = "auto"
    save_every: int = 50
    keep_checkpoints: int = 2
    log_every: int = 1

    def __post_init__(self) -> None:
        self.data = [str(p) for p in _as_list(self.data)]
        self.schedule = _enum(Schedule, self.schedule, "schedule")
        if not self.data:
            raise ValueError("no training text: pass plain text files with data=[...] (--data)")
        if not (Path(self.bi_model) / "adapter_config.json").is_file():
            raise MixtureError(
                f"bi_model={self.bi_model!r} is not a stage-1 adapter directory (no adapter_config.json); "
                "train one with `magnet train --recipe ubmoe-ffn --output-dir DIR` and pass DIR"
            )
        for name in ("max_steps", "batch_size", "save_every", "keep_checkpoints", "log_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be at least 1")
        if self.max_length < 8:
            raise ValueError(f"max_length={self.max_length} is too small; use at least 8 tokens")
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate={self.learning_rate} must be > 0")
        if self.balance_weight < 0 or self.warmup_steps < 0:
            raise ValueError("balance_weight and warmup_steps must be >= 0")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads={self.threads} must be at least 1 (or unset for torch's default)")

    def to_dict(self) -> dict[str, Any]:
        return {k: (v.value if isinstance(v, Enum) else v) for k, v in asdict(self).items()}


@dataclass
class UBMoEResult:
    output_dir: Path
    steps: int
    first_losses: dict[str, float]  # the first step run: cross-entropy, balance, total
    losses: dict[str, float]  # the last step
    bidirectional_share: list[float]  # per layer, the mean gate probability of expert 1 (last step)
    wall_s: float


def load_mixture_for_training(config: UBMoEConfig, device: torch.device):
    """The base model of the stage-1 directory with fresh (zero) gates installed, and its tokenizer."""
    from magnetsdk.loading import load_model_and_tokenizer, resolve

    resolved = resolve(config.bi_model)
    model, tokenizer = load_model_and_tokenizer(resolved, device, torch.float32, "sdpa", apply_adapter=False)
    seed_everything(config.seed)
    install_experts(model, bidirectional_mlps(model, Path(config.bi_model)))
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(".gate." in name)
    return model, tokenizer, resolved


def lm_loss(model: torch.nn.Module, ids: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Mean causal next-token cross-entropy over the real tokens of ``ids`` (b, n)."""
    hidden = run_decoder(model, ids, valid, AttentionMode.CAUSAL).hidden  # (b, n, d)
    keep = valid[:, 1:].bool()  # a target needs a real token before and at it
    logits = logits_at(model, hidden[:, :-1][keep])  # (k, V)
    return F.cross_entropy(logits, ids[:, 1:][keep])


def mixture_losses(
    model: torch.nn.Module, ids: torch.Tensor, valid: torch.Tensor, balance_weight: float
) -> tuple[torch.Tensor, torch.Tensor, list[float]]:
    """(cross-entropy, mean balance loss over layers, per-layer share of expert 1) for one batch."""
    modules = mixture_modules(model)
    for module in modules:
        module.record = True
    try:
        ce = lm_loss(model, ids, valid)
        balances = [balance_loss(m.probs, valid) for m in modules]
        shares = [float(m.probs.detach()[..., 1][valid.bool()].mean()) for m in modules]
    finally:
        for module in modules:
            module.record = False
            module.probs = None
    return ce, torch.stack(balances).mean(), shares


def train_gates(config: UBMoEConfig, resume: bool = False) -> UBMoEResult:
    """Train the gates per ``config`` and write the mixture directory to ``config.output_dir``."""
    from magnetsdk.loading import pick_device

    if config.threads:
        torch.set_num_threads(config.threads)
    device = pick_device(config.device)
    model, tokenizer, resolved = load_mixture_for_training(config, device)
    model.eval()  # frozen layers stay deterministic (no dropout); the gates still get gradients
    run_dir = Path(config.output_dir)
    existing = latest_checkpoint(run_dir)
    if existing is not None and not resume:
        raise FileExistsError(
            f"{run_dir} already holds checkpoints (latest: step {existing.step}); pass --resume to "
            "continue that run, or choose another --output-dir"
        )

    tokenized = tokenize_texts(tokenizer, read_texts(config.data, config.text_field), config.max_length)
    if not tokenized.ids:
        raise ValueError(f"{config.data}: no text of at least a few tokens to train on")
    order = Order(len(tokenized.ids), config.seed)
    pad_id = padding_id(tokenizer)

    gates = {name: p for name, p in model.named_parameters() if p.requires_grad}
    optimizer = torch.optim.AdamW(gates.values(), lr=config.learning_rate, weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        functools.partial(
            lr_factor, warmup=config.warmup_steps, total=config.max_steps, schedule=config.schedule
        ),
    )
    start = 0
    if resume and existing is not None:
        load_checkpoint(existing, gates, optimizer, scheduler, rank=0)
        start = existing.step
    run_dir.mkdir(parents=True, exist_ok=True)
    log = MetricsLog(run_dir, resume_step=start if start else None, tensorboard=False)
    started = time.perf_counter()
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    shares: list[float] = []
    try:
        for step in range(start, config.max_steps):
            positions = range(step * config.batch_size, (step + 1) * config.batch_size)
            rows = [tokenized.ids[i] for i in order.items(positions)]
            ids, valid = pad_batch(rows, pad_id, device)  # (b, n)
            ce, balance, shares = mixture_losses(model, ids, valid, config.balance_weight)
            total = ce + config.balance_weight * balance
            if not torch.isfinite(total):
                raise FloatingPointError(f"non-finite loss at step {step + 1}; lower --learning-rate")
            total.backward()
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            last = {"ce": ce.item(), "balance": balance.item(), "loss": total.item()}
            first = first or dict(last)
            if (step + 1) % config.log_every == 0 or step + 1 == config.max_steps:
                log.log(
                    {
                        "step": step + 1,
                        **last,
                        "bidirectional_share": sum(shares) / len(shares),
                        "lr": scheduler.get_last_lr()[0],
                        "elapsed_s": time.perf_counter() - started,
                    }
                )
            if (step + 1) % config.save_every == 0 or step + 1 == config.max_steps:
                save_checkpoint(
                    run_dir,
                    step + 1,
                    gates,
                    optimizer,
                    scheduler,
                    [rng_state()],
                    config.to_dict(),
                    config.keep_checkpoints,
                )
    finally:
        log.close()
    wall = time.perf_counter() - started
    training = {
        "steps": config.max_steps,
        "first_losses": first,
        "final_losses": last,
        "bidirectional_share": [round(s, 4) for s in shares],
        "wall_s_last_session": round(wall, 1),
        "config": config.to_dict(),
    }
    save_mixture(model, tokenizer, run_dir, Path(config.bi_model), training)
    return UBMoEResult(run_dir, config.max_steps, first, last, shares, wall)
