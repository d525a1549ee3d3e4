"""The training loop: from a :class:`TrainConfig` to an adapted model directory.

One function, :func:`train`, runs unchanged on one CPU, one GPU, or many processes started by
``accelerate launch`` (or ``torchrun``): accelerate sets up the process group (gloo on CPU, NCCL
on GPU), wraps the objectives module in DDP, or shards it with FSDP2 when launched with an FSDP
config (``configs/accelerate/fsdp.yaml``), and handles bf16 autocast. Each process builds its
own slice of every global batch from the step number (:class:`magnetsdk.train.data.Order`), so no
data loader state needs saving and any process count sees the same examples.

Per optimizer step: ``gradient_accumulation`` micro-batches, each one forward of
:class:`~magnetsdk.train.objectives.MagnetObjectives` (the shared MNTP + MSG pass and the SSCL
pass) and one backward; then gradient clipping, AdamW, the warmup-then-decay schedule, a metrics
record, and every ``save_every`` steps an atomic checkpoint.

It knows nothing about the command line.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import random
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from magnetsdk.train.adaptation import make_trainable, trainable_parameters
from magnetsdk.train.batches import Batches
from magnetsdk.train.checkpoint import (
    CheckpointError,
    gather_training_state,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    remove_partial_checkpoints,
    rng_state,
    save_checkpoint,
)
from magnetsdk.train.config import MixedPrecision, Schedule, TrainConfig
from magnetsdk.train.export import export_model, gather_weights
from magnetsdk.train.generation_check import GenerationCheck
from magnetsdk.train.gradcache import cache_view_gradients, restore_rng
from magnetsdk.train.metrics import PLOT_NAME, MetricsLog, plot_losses
from magnetsdk.train.objectives import MagnetObjectives, global_sum

from magnetsdk.layout import resolve_layout_tokens

CONFIG_RECORD = "train_config.json"
# Settings that decide which examples a step sees; a resumed run must keep them.
_RESUME_FIXED = (
    "seed",
    "batch_size",
    "contrastive_batch_size",
    "gradient_accumulation",
    "bucket_batches",
    "recipe",
    "max_length",
    "base_model",
    "documents",
)


class NonFiniteLossError(RuntimeError):
    """A loss or gradient became NaN/inf; the message names the step, the batch and the last checkpoint."""


@dataclass
class TrainResult:
    output_dir: Path
    steps: int
    losses: dict[str, float | None]  # the last step's losses
    tokens_per_s: float
    wall_s: float
    metrics_path: Path
    main_process: bool = True  # False on the other processes of a distributed run


def lr_factor(step: int, warmup: int, total: int, schedule: Schedule) -> float:
    """Linear warmup over ``warmup`` steps, then linear or cosine decay to 0 at ``total`` (or constant)."""
    if warmup and step < warmup:
        return (step + 1) / warmup
    if schedule is Schedule.CONSTANT:
        return 1.0
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    if schedule is Schedule.COSINE:
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    return 1.0 - progress


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def load_base(config: TrainConfig, device: torch.device):
    """Load the base model (fp32 master weights, sdpa attention) and its tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from magnetsdk.loading import resolve

    resolved = resolve(None if config.base_model == "default" else config.base_model)
    if resolved.adapter is not None and config.base_model != "default":
        warnings.warn(
            f"{config.base_model} carries an adapter; training starts from its base model {resolved.name} "
            "without it",
            stacklevel=2,
        )
    tokenizer = AutoTokenizer.from_pretrained(resolved.base)
    extra = {"attention_dropout": config.attention_dropout} if config.attention_dropout else {}
    model = AutoModelForCausalLM.from_pretrained(
        resolved.base, dtype=torch.float32, attn_implementation="sdpa", **extra
    )
    return model.to(device), tokenizer


def _stored_base_name(config: TrainConfig) -> str:
    path = Path(config.base_model).expanduser()
    return str(path.resolve()) if path.is_dir() else config.base_model


class _Run:
    """The state of one training run in one process.

    Built in named steps, in this order: threads, accelerator, base model and layout tokens,
    data, trainable weights (seeded right before LoRA is created, so its initialisation does not
    depend on what consumed the global generator earlier, e.g. paraphrase generation), optimizer
    and schedule, then where to start (a checkpoint or step 0).
    """

    def __init__(self, config: TrainConfig, model, tokenizer, resume: bool) -> None:
        self.config = config
        self._set_threads()
        self._start_accelerator()
        seed_everything(config.seed)  # the same new embedding rows on every process
        model = self._load_model(model, tokenizer)
        self.batches = Batches(config, self.tokenizer, self.layout, model, self.accelerator)
        self._make_trainable(model)
        self._prepare_optimisation()
        self._find_start(resume)
        self.check = (
            GenerationCheck.from_file(
                config.eval_prefixes, self.tokenizer, config.eval_new_tokens, config.seed
            )
            if config.eval_every
            else None
        )

    def _set_threads(self) -> None:
        """``threads``, or (unset) the machine's cores shared among this machine's processes.

        An explicit ``OMP_NUM_THREADS`` (torchrun sets 1 per process) is left alone.
        """
        threads = self.config.threads
        if threads is None and "OMP_NUM_THREADS" not in os.environ:
            local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
            threads = max(1, (os.cpu_count() or 1) // max(1, local))
        if threads:
            torch.set_num_threads(threads)

    def _start_accelerator(self) -> None:
        from accelerate import Accelerator
        from accelerate.utils import DistributedType

        config = self.config
        use_cpu = config.device == "cpu" or not torch.cuda.is_available()
        mixed = config.mixed_precision
        if mixed is MixedPrecision.AUTO:
            mixed = MixedPrecision.NO if use_cpu else MixedPrecision.BF16
        self.accelerator = Accelerator(cpu=use_cpu, mixed_precision=mixed.value)
        self.rank = self.accelerator.process_index
        self.world = self.accelerator.num_processes
        self.main = self.accelerator.is_main_process
        self.run_dir = Path(config.output_dir)
        self.sharded = self.accelerator.distributed_type == DistributedType.FSDP
        if self.sharded and not self.accelerator.is_fsdp2:
            # FSDP1 flattens a unit's weights into one tensor, all frozen or all trainable unless
            # use_orig_params; FSDP2 shards each parameter on its own (a DTensor under its usual
            # name), so LoRA's frozen and trainable weights mix freely and peft's names still hold.
            raise ValueError(
                "FSDP version 1 is not supported; set fsdp_version: 2 in the accelerate config "
                "(see configs/accelerate/fsdp.yaml)"
            )
        # Under FSDP the model is built on the CPU; only each process's shard moves to its device.
        self.home = torch.device("cpu") if self.sharded else self.accelerator.device

    def _load_model(self, model, tokenizer):
        """The base model and tokenizer, with the layout tokens (added to the embeddings if new)."""
        config = self.config
        if model is None:
            model, tokenizer = load_base(config, self.home)
        elif tokenizer is None:
            raise ValueError("pass the tokenizer together with an in-memory model")
        if tokenizer.eos_token_id is None:
            raise ValueError(
                "the base model's tokenizer has no EOS token; training appends EOS to every contrastive "
                "view (last-token pooling) and to the last chunk of every document. Set "
                "tokenizer.eos_token (e.g. to its end-of-text token) or choose a base model that has one"
            )
        self.tokenizer = tokenizer
        self.layout, added = resolve_layout_tokens(tokenizer, None)
        rows = model.get_input_embeddings().weight.shape[0]
        if added and len(tokenizer) > rows:
            model.resize_token_embeddings(len(tokenizer))
        self.tokens_added = bool(added)
        self.new_ids = [tokenizer.convert_tokens_to_ids(t) for t in added]
        return model

    def _make_trainable(self, model) -> None:
        # Seeded here, not only at the start: building the data may have drawn from the global
        # generator (paraphrase generation does, a warm cache does not), and the LoRA
        # initialisation must be the same either way, and on every process.
        seed_everything(self.config.seed)
        self.trained = make_trainable(model.to(self.home), self.config, self.new_ids)
        if not trainable_parameters(self.trained):
            raise ValueError("nothing to train: the model has no trainable parameters")

    def _prepare_optimisation(self) -> None:
        config = self.config
        optimizer = torch.optim.AdamW(
            trainable_parameters(self.trained).values(),
            lr=config.learning_rate,
            weight_decay=config.weight_decay,
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer,
            functools.partial(
                lr_factor, warmup=config.warmup_steps, total=config.max_steps, schedule=config.schedule
            ),
        )
        objectives = MagnetObjectives(
            self.trained, config.lm_attention.value, config.temperature, fuse=config.fuse_passes
        )
        # FSDP's auto-wrap gives each class in `_no_split_modules` of the module it wraps its own
        # shard unit; hand the decoder's layer classes up from the model inside.
        objectives._no_split_modules = getattr(self.trained, "_no_split_modules", None)
        # Prepared together: under FSDP accelerate shards the weights in place and points the
        # optimizer at the shards; under DDP neither changes.
        self.module, self.optimizer = self.accelerator.prepare(objectives, optimizer)
        self.parameters = trainable_parameters(self.trained)  # the shards, under FSDP

    def _find_start(self, resume: bool) -> None:
        """Step 0, or with ``resume`` the newest checkpoint that loads (older ones if it does not)."""
        config = self.config
        self.start_step = 0
        self.last_checkpoint: Path | None = None
        existing = latest_checkpoint(self.run_dir)
        if existing is not None and not resume:
            raise FileExistsError(
                f"{self.run_dir} already holds checkpoints (latest: step {existing.step}); pass --resume to "
                "continue that run, or choose another --output-dir"
            )
        if resume:
            if self.main:
                removed = remove_partial_checkpoints(self.run_dir)
                if removed:
                    self.accelerator.print(
                        f"--resume: removed {removed} unfinished checkpoint(s) of a killed run"
                    )
            self.accelerator.wait_for_everyone()
            loaded = self._load_latest()
            if loaded is None:
                reason = "does not exist" if not self.run_dir.exists() else "holds no complete checkpoint"
                self.accelerator.print(f"--resume: {self.run_dir} {reason}; starting a new run from step 0")
        if self.start_step == 0:
            seed_everything(config.seed + self.rank)  # dropout differs per process, as in any DDP run

    def _load_latest(self) -> Path | None:
        for candidate in reversed(list_checkpoints(self.run_dir)):
            try:
                state = load_checkpoint(
                    candidate, self.parameters, self.optimizer, self.scheduler, self.rank, model=self.trained
                )
            except CheckpointError as error:
                warnings.warn(f"--resume: skipping {candidate.path}: {error}", stacklevel=3)
                continue
            saved, now = state["config"], self.config.to_dict()
            changed = [k for k in _RESUME_FIXED if k in saved and saved[k] != now.get(k)]
            if changed:
                raise ValueError(
                    f"cannot resume {candidate.path}: {changed} differ from the run that wrote it; "
                    "resume with the same settings"
                )
            self.start_step = candidate.step
            self.last_checkpoint = candidate.path
            return candidate.path
        return None

    # ------------------------------------------------------------------ loop

    def run(self) -> TrainResult:
        config = self.config
        accelerator = self.accelerator
        if self.main:
            from magnetsdk.config import atomic_write_text

            self.run_dir.mkdir(parents=True, exist_ok=True)
            import json

            atomic_write_text(self.run_dir / CONFIG_RECORD, json.dumps(config.to_dict(), indent=2) + "\n")
        log = (
            MetricsLog(self.run_dir, resume_step=self.start_step if self.last_checkpoint else None)
            if self.main
            else None
        )
        from tqdm.auto import tqdm

        bar = tqdm(
            total=config.max_steps,
            initial=self.start_step,
            desc=config.recipe,
            unit="step",
            disable=not (self.main and config.progress),
            dynamic_ncols=True,
        )
        started = time.perf_counter()
        total_tokens = 0
        losses: dict[str, float | None] = {}
        try:
            for step in range(self.start_step, config.max_steps):
                losses, tokens, seconds = self._step(step)
                total_tokens += tokens
                record = {
                    "step": step + 1,
                    **losses,
                    "lr": self.scheduler.get_last_lr()[0],
                    "tokens": tokens,
                    "tokens_per_s": tokens / seconds,
                    "elapsed_s": time.perf_counter() - started,
                }
                checked = self.check is not None and (step + 1) % config.eval_every == 0
                if checked:
                    record.update(self._generation_check())
                due = (step + 1) % config.log_every == 0 or step + 1 == config.max_steps
                if log is not None and (due or checked):
                    log.log(record)
                bar.set_postfix(
                    {k: f"{v:.3f}" for k, v in losses.items() if v is not None}
                    | {"tok/s": f"{tokens / seconds:.0f}"}
                )
                bar.update(1)
                if (step + 1) % config.save_every == 0 or step + 1 == config.max_steps:
                    self._checkpoint(step + 1)
        finally:
            bar.close()
            if log is not None:
                log.close()
        wall = time.perf_counter() - started
        steps_run = config.max_steps - self.start_step
        result = TrainResult(
            output_dir=self.run_dir,
            steps=config.max_steps,
            losses=losses,
            tokens_per_s=total_tokens / wall if wall > 0 else 0.0,
            wall_s=wall,
            metrics_path=self.run_dir / "metrics.jsonl",
            main_process=self.main,
        )
        # Under FSDP, gather the whole model (every process takes part) for the main one to export.
        weights = gather_weights(self.trained) if self.sharded else None
        if self.main:
            plot_losses(result.metrics_path, self.run_dir / PLOT_NAME)
            self._export(result, steps_run, total_tokens, weights)
        accelerator.wait_for_everyone()
        return result

    def _step(self, step: int) -> tuple[dict[str, float | None], int, float]:
        config = self.config
        started = time.perf_counter()
        weights = config.weights_at(step)
        accumulated: dict[str, list[float]] = {"mntp": [], "sscl": [], "msg": []}
        tokens = 0
        total = 0.0
        for micro in range(config.gradient_accumulation):
            lm, views, items = self.batches.batch(step, micro, weights)
            tokens += (lm.tokens if lm is not None else 0) + (views.tokens if views is not None else 0)
            calls, sscl = self._calls(lm, views, weights)
            values: dict[str, float | None] = {"mntp": None, "sscl": sscl, "msg": None}
            for index, (lm_part, view_part, grads, rng) in enumerate(calls):
                last = micro == config.gradient_accumulation - 1 and index == len(calls) - 1
                sync = contextlib.nullcontext() if last else self.accelerator.no_sync(self.module)
                with sync:
                    if rng is not None:
                        restore_rng(rng, self.accelerator.device)
                    with self.accelerator.autocast():
                        out = self.module(lm_part, view_part, weights, view_grads=grads)
                    for key in ("mntp", "msg", "sscl"):
                        if getattr(out, key) is not None:
                            values[key] = getattr(out, key)
                    bad = global_sum(
                        torch.tensor(0.0 if torch.isfinite(out.total) else 1.0, device=out.total.device)
                    )
                    if bad > 0 or any(v is not None and not math.isfinite(v) for v in values.values()):
                        self._fail(step, micro, items, values, "loss")
                    self.accelerator.backward(out.total / config.gradient_accumulation)
            for key, value in values.items():
                if value is not None:
                    accumulated[key].append(value)
            total += sum(
                w * v
                for w, v in zip(weights, (values["mntp"], values["sscl"], values["msg"]), strict=True)
                if v is not None
            )
        if config.max_grad_norm:
            norm = self.accelerator.clip_grad_norm_(list(self.parameters.values()), config.max_grad_norm)
            if norm is not None and not math.isfinite(float(norm)):
                self._fail(
                    step, config.gradient_accumulation - 1, items, {"grad_norm": float(norm)}, "gradient"
                )
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        losses: dict[str, float | None] = {
            k: (sum(v) / len(v) if v else None) for k, v in accumulated.items()
        }
        losses["loss"] = total / config.gradient_accumulation
        tokens = int(global_sum(torch.tensor(tokens, device=self.accelerator.device)))
        return losses, tokens, time.perf_counter() - started

    def _generation_check(self) -> dict[str, Any]:
        """The main process's generation figures (:mod:`magnetsdk.train.generation_check`)."""
        figures: dict[str, Any] = {}
        if self.sharded:
            return figures  # every process holds a shard only; generation would need all of them
        if self.main:
            figures = self.check(self.trained, self.tokenizer, self.config.base_model)
        self.accelerator.wait_for_everyone()
        return figures

    def _calls(self, lm, views, weights):
        """The forward/backward calls of one micro-batch: (LM rows, views, view gradients, RNG state).

        One call normally; with GradCache (``contrastive_chunk_size`` below the contrastive batch)
        first a no-gradient pass over all views gives their loss gradients, then one call per
        chunk, the LM rows going with the first. Returns the calls and the SSCL loss if known.
        """
        chunk = self.config.contrastive_chunk_size
        if views is None or not weights[1] or chunk is None or chunk >= views.anchors:
            return [(lm, views, None, None)], None
        with self.accelerator.autocast():
            cached = cache_view_gradients(self.module, views, chunk, self.config.temperature)
        calls = [(None, c.views, c.grads, c.rng) for c in cached.chunks]
        if lm is not None:
            calls.insert(0, (lm, None, None, None))
        return calls, cached.loss

    def _fail(
        self, step: int, micro: int, items: dict[str, list[int]], values: dict[str, Any], what: str
    ) -> None:
        where = self.last_checkpoint or "none (no checkpoint was written yet)"
        shown = ", ".join(f"{k}={v}" for k, v in values.items() if v is not None)
        raise NonFiniteLossError(
            f"non-finite {what} at step {step + 1} (micro-batch {micro}, process {self.rank}; "
            f"example indices {items}): {shown}. Training stopped; the last good checkpoint is {where}. "
            "Lower --learning-rate or inspect those examples, then --resume"
        )

    def _checkpoint(self, step: int) -> None:
        states = [rng_state()]
        if self.world > 1:
            import torch.distributed as dist

            states = [None] * self.world
            dist.all_gather_object(states, rng_state())
        trainable, optimizer = gather_training_state(self.trained, self.optimizer)
        if self.main:
            self.last_checkpoint = save_checkpoint(
                self.run_dir,
                step,
                trainable,
                optimizer,
                self.scheduler,
                states,
                self.config.to_dict(),
                self.config.keep_checkpoints,
            )
        self.accelerator.wait_for_everyone()
        if not self.main:
            found = [c for c in list_checkpoints(self.run_dir) if c.step == step]
            self.last_checkpoint = found[0].path if found else self.last_checkpoint

    def _export(
        self, result: TrainResult, steps_run: int, tokens: int, weights: dict[str, torch.Tensor] | None
    ) -> None:
        import importlib.metadata

        def version(dist: str) -> str | None:
            try:
                return importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                return None

        config = self.config
        training = {
            "recipe": config.recipe,
            "steps": config.max_steps,
            "processes": self.world,
            "engine": self.accelerator.distributed_type.value,  # NO, MULTI_CPU/MULTI_GPU (DDP) or FSDP
            "global_batch": config.batch_size * self.world * config.gradient_accumulation,
            "final_losses": result.losses,
            "wall_s_last_session": round(result.wall_s, 1),
            "tokens_last_session": tokens,
            "tokens_per_s": round(result.tokens_per_s, 1),
            "data": config.data,
            "pairs": config.pairs,
            "config": config.to_dict(),
            "versions": {d: version(d) for d in ("magnetsdk", "torch", "transformers", "peft", "accelerate")},
        }
        export_model(
            self.trained,
            self.tokenizer,
            self.run_dir,
            base_model=_stored_base_name(config),
            instruction=config.instruction,
            layout=self.layout,
            tokens_added=self.tokens_added,
            uses_sscl=config.uses_sscl,
            lm_attention=config.lm_attention.value,
            training=training,
            full_weights=config.full_finetune,
            state_dict=weights,
        )


def train(
    config: TrainConfig, model: torch.nn.Module | None = None, tokenizer=None, resume: bool = False
) -> TrainResult:
    """Train per ``config`` and write the adapted model into ``config.output_dir``.

    ``model``/``tokenizer`` may be passed in memory (tests, notebooks); otherwise
    ``config.base_model`` is loaded. ``resume=True`` continues from the latest checkpoint.
    """
    threads = torch.get_num_threads()
    try:
        return _Run(config, model, tokenizer, resume).run()
    finally:
        torch.set_num_threads(threads)  # a library call leaves the process as it found it
