"""The training loop: from a :class:`TrainConfig` to an adapted model directory.

One function, :func:`train`, runs unchanged on one CPU, one GPU, or many processes started by
``accelerate launch`` (or ``torchrun``): accelerate sets up the process group (gloo on CPU, NCCL
on GPU), wraps the objectives module in DDP, or shards it with FSDP2 when launched with an FSDP
config (``configs/accelerate/fsdp.yaml``), and handles bf16 autocast. Each process builds its
own slice of every global batch from the step number (:class:`magnetsdk.train.data.Order`), so no
data loader state needs saving and any process count sees the same examples.

Per optimizer step: ``gradient_accumulation`` micro-batches, each one forward of
:class:`~magnetsdk.train.objectives.MagnetObjectives` (the shared MNTP + MSG pass and the SSCL
pass, or one fused pass) and one backward, or with GradCache a no-gradient pass over the views
and one forward/backward per chunk (:mod:`magnetsdk.train.gradcache`); then gradient clipping,
AdamW, the warmup-then-decay schedule, a metrics record (with the generation check every
``eval_every`` steps), and every ``save_every`` steps an atomic checkpoint. Building the run
(threads, accelerator, model, data, LoRA, optimizer, the step to start from) is
:mod:`magnetsdk.train.startup`.

It knows nothing about the command line.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from magnetsdk.train.checkpoint import (
    gather_training_state,
    list_checkpoints,
    rng_state,
    save_checkpoint,
)
from magnetsdk.train.config import TrainConfig
from magnetsdk.train.export import export_model, gather_weights
from magnetsdk.train.gradcache import cache_view_gradients, restore_rng
from magnetsdk.train.metrics import PLOT_NAME, MetricsLog, plot_losses
from magnetsdk.train.objectives import global_sum
from magnetsdk.train.startup import (  # noqa: F401 - lr_factor, load_base, seed_everything: public here too
    RunSetup,
    load_base,
    lr_factor,
    seed_everything,
    stored_base_name,
)

CONFIG_RECORD = "train_config.json"


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


class _Run(RunSetup):
    """The state of one training run in one process: the loop over the steps of a built run."""

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
        keys = ("mntp", "sscl", "msg", "kl", "scored", "end_kl", "copy_ul")
        accumulated: dict[str, list[float]] = {k: [] for k in keys}
        tokens = 0
        total = 0.0
        for micro in range(config.gradient_accumulation):
            lm, views, items = self.batches.batch(step, micro, weights)
            scored = self.batches.scored_batch(step, micro)
            ends = self.batches.end_batch(step, micro)
            copies = self.batches.copy_batch(step, micro)
            tokens += sum(b.tokens for b in (lm, views, scored, ends, copies) if b is not None)
            calls, sscl = self._calls(lm, views, weights)
            calls = [
                (*call, None, None, None) for call in calls if call[0] is not None or call[1] is not None
            ]
            # Scored pairs, the end KL and copy unlikelihood take passes of their own, the last of the micro-batch.
            if scored is not None:
                calls.append((None, None, None, None, scored, None, None))
            if ends is not None:
                calls.append((None, None, None, None, None, ends, None))
            if copies is not None:
                calls.append((None, None, None, None, None, None, copies))
            values: dict[str, float | None] = {k: None for k in keys} | {"sscl": sscl}
            for index, call in enumerate(calls):
                lm_part, view_part, grads, rng, scored_part, end_part, copy_part = call
                last = micro == config.gradient_accumulation - 1 and index == len(calls) - 1
                sync = contextlib.nullcontext() if last else self.accelerator.no_sync(self.module)
                with sync:
                    if rng is not None:
                        restore_rng(rng, self.accelerator.device)
                    with self.accelerator.autocast():
                        out = self.module(
                            lm_part,
                            view_part,
                            weights,
                            view_grads=grads,
                            scored=scored_part,
                            ends=end_part,
                            copies=copy_part,
                        )
                    for key in keys:
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
                for w, v in zip(
                    (
                        *weights,
                        config.kl_weight,
                        config.scored_weight,
                        config.end_kl_weight,
                        config.copy_ul_weight,
                    ),
                    (
                        values["mntp"],
                        values["sscl"],
                        values["msg"],
                        values["kl"],
                        values["scored"],
                        values["end_kl"],
                        values["copy_ul"],
                    ),
                    strict=True,
                )
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
        if not config.kl_weight:
            del losses["kl"]
        if not config.uses_scored:
            del losses["scored"]
        if not config.end_kl_weight:
            del losses["end_kl"]
        if not config.copy_ul_weight:
            del losses["copy_ul"]
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
            # What mixed_precision="auto" resolved to on this machine: "bf16" (autocast) or "no" (fp32).
            "mixed_precision_used": str(self.accelerator.mixed_precision),
            "global_batch": config.batch_size * self.world * config.gradient_accumulation,
            "final_losses": result.losses,
            "wall_s_last_session": round(result.wall_s, 1),
            "tokens_last_session": tokens,
            "tokens_per_s": round(result.tokens_per_s, 1),
            "data": config.data,
            "pairs": config.pairs,
            "init_adapter": self.init_adapter,  # the adapter step 0 started from (path, sha256), if any
            "config": config.to_dict(),
            "versions": {d: version(d) for d in ("magnetsdk", "torch", "transformers", "peft", "accelerate")},
        }
        export_model(
            self.trained,
            self.tokenizer,
            self.run_dir,
            base_model=stored_base_name(config),
            instruction=config.instruction,
            layout=self.layout,
            tokens_added=self.tokens_added,
            uses_sscl=config.trains_embeddings,
            lm_attention=config.lm_attention.value,
            training=training,
            full_weights=config.full_finetune,
            state_dict=weights,
            infill_layout=config.infill_layout,
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
