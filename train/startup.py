"""Building a training run: everything that happens before its first step.

:class:`RunSetup` does it in named steps, in this order: torch threads, the accelerator (one
process, DDP or FSDP2; bf16 autocast), the base model and its layout tokens, the data
(:class:`~magnetsdk.train.batches.Batches`), the trainable weights (LoRA, seeded right before it is
created), the optimizer and schedule, and where to start (step 0, or the newest readable
checkpoint with ``resume``). :mod:`magnetsdk.train.trainer` runs the loop on top of it.

It knows nothing about the command line, losses per step or exporting.
"""

from __future__ import annotations

import functools
import math
import os
import random
import warnings
from pathlib import Path

import numpy as np
import torch
from magnetsdk.train.adaptation import (
    copy_token_row,
    freeze_lora,
    hold_token_rows,
    initial_token_rows,
    load_initial_adapter,
    make_trainable,
    parameter_groups,
    trainable_parameters,
)
from magnetsdk.train.batches import Batches
from magnetsdk.train.checkpoint import (
    CheckpointError,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    remove_partial_checkpoints,
)
from magnetsdk.train.config import MixedPrecision, Schedule, TrainConfig
from magnetsdk.train.generation_check import GenerationCheck
from magnetsdk.train.objectives import MagnetObjectives

from magnetsdk.encoding import fit_embeddings
from magnetsdk.layout import check_layout_tokens, resolve_layout_tokens

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

    resolved = resolve(config.base_model)
    if resolved.adapter is not None:
        warnings.warn(
            f"{config.base_model} carries an adapter; training starts from its base model {resolved.name} "
            "without it (name the base alone, e.g. 'default-base', to say so)",
            stacklevel=2,
        )
    tokenizer = AutoTokenizer.from_pretrained(resolved.base)
    extra = {"attention_dropout": config.attention_dropout} if config.attention_dropout else {}
    model = AutoModelForCausalLM.from_pretrained(
        resolved.base, dtype=torch.float32, attn_implementation="sdpa", **extra
    )
    return model.to(device), tokenizer


def stored_base_name(config: TrainConfig) -> str:
    path = Path(config.base_model).expanduser()
    return str(path.resolve()) if path.is_dir() else config.base_model


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively (AVX512-BF16 or AMX tiles)."""
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, name, lambda: False)() for name in checks)


def forget_other_precision(mixed: MixedPrecision) -> None:
    """Let a second run in one process (a notebook, the tests) train in another precision.

    accelerate keeps one process-wide state and refuses an ``Accelerator`` whose precision differs
    from the first one's. The precision state is dropped; the process group (``PartialState``) stays.
    """
    from accelerate.state import AcceleratorState

    state = AcceleratorState._shared_state
    if state and state.get("_mixed_precision") != mixed.value:
        AcceleratorState._reset_state(reset_partial_state=False)


def pick_mixed_precision(requested: MixedPrecision, use_cpu: bool, native_bf16: bool) -> MixedPrecision:
    """``auto``: bf16 autocast on a GPU and on a CPU with native bf16, fp32 on any other CPU.

    Without native bf16 a CPU emulates it, and a bf16 step runs many times slower than fp32
    (measured on an AVX2-only CPU: the default recipe's first bf16 step had not finished after 15 min,
    where its fp32 steps took about 2 min; benchmarks/bench_precision.py: bf16 at 0.047x fp32), so an
    explicit ``bf16`` there gets a warning.
    """
    if requested is MixedPrecision.AUTO:
        return MixedPrecision.BF16 if not use_cpu or native_bf16 else MixedPrecision.NO
    if requested is MixedPrecision.BF16 and use_cpu and not native_bf16:
        warnings.warn(
            "mixed_precision='bf16' on a CPU without native bf16 (no AVX512-BF16 or AMX): bf16 is "
            "emulated here and a step runs many times slower than in fp32; set mixed_precision='auto' "
            "(fp32 on this CPU) or 'no'",
            stacklevel=2,
        )
    return requested


class RunSetup:
    """Everything a training run needs before its first step, in one process.

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
        mixed = pick_mixed_precision(config.mixed_precision, use_cpu, use_cpu and cpu_has_native_bf16())
        forget_other_precision(mixed)
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
        self.layout, added = resolve_layout_tokens(
            tokenizer, {"end": config.end_token} if config.end_token else None
        )
        check_layout_tokens(self.layout, tokenizer)
        if added:
            fit_embeddings(model, tokenizer)
        self.tokens_added = bool(added)
        new_ids = {tokenizer.convert_tokens_to_ids(t) for t in added}
        # The embedding rows that train beside LoRA: added tokens always, reused ones on request.
        layout_ids = self.layout.ids()
        roles = config.train_layout_roles or list(layout_ids)
        requested = {layout_ids[role] for role in roles} if config.train_layout_tokens else set()
        # An init adapter's trained rows stay in the adapter; those this run does not train are held.
        kept = set(initial_token_rows(config))
        self.token_ids = sorted(new_ids | requested | kept)
        self.held_token_ids = sorted(kept - requested - new_ids)
        return model

    def _make_trainable(self, model) -> None:
        # Seeded here, not only at the start: building the data may have drawn from the global
        # generator (paraphrase generation does, a warm cache does not), and the LoRA
        # initialisation must be the same either way, and on every process.
        seed_everything(self.config.seed)
        self.trained = make_trainable(model.to(self.home), self.config, self.token_ids)
        self.init_adapter = (
            load_initial_adapter(self.trained, self.config) if self.config.init_adapter else None
        )
        if self.config.end_row_from_eos:  # at step 0; a resumed run's checkpoint replaces the row
            copy_token_row(self.trained, self.tokenizer.eos_token_id, self.layout.end_id)
        if self.held_token_ids:
            hold_token_rows(self.trained, self.held_token_ids)
        if self.config.freeze_lora:
            freeze_lora(self.trained)
        if self.config.freeze_lora and set(self.token_ids) <= set(self.held_token_ids):
            raise ValueError(
                "freeze_lora holds LoRA, and no token row trains beside it (an init adapter's rows are "
                "held unless named): add train_layout_tokens=true (--train-layout-tokens) to tune the layout rows"
            )
        if not trainable_parameters(self.trained):
            raise ValueError("nothing to train: the model has no trainable parameters")

    def _prepare_optimisation(self) -> None:
        config = self.config
        optimizer = torch.optim.AdamW(
            parameter_groups(
                self.trained, config.learning_rate, config.layout_token_lr, bool(self.held_token_ids)
            ),
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
            self.trained,
            config.lm_attention.value,
            config.temperature,
            fuse=config.fuse_passes,
            kl_weight=config.kl_weight,
            scored_weight=config.scored_weight if config.uses_scored else 0.0,
            cosent_scale=config.cosent_scale,
            end_kl_weight=config.end_kl_weight,
            span_end_weight=config.span_end_weight,
            end_token_id=self.layout.end_id,
            end_kl_without_end=config.end_kl_without_end,
            copy_ul_weight=config.copy_ul_weight,
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
            self._say_what_changed(saved)
            return candidate.path
        return None

    def _say_what_changed(self, saved: dict) -> None:
        """A resumed run keeps the optimiser's moments and its step but follows its own learning
        rate, weight decay and schedule (:func:`magnetsdk.train.checkpoint.keep_run_settings`); say
        which of them differ from the run that wrote the checkpoint."""
        now = self.config.to_dict()
        changed = [
            k
            for k in (
                "learning_rate",
                "layout_token_lr",
                "weight_decay",
                "schedule",
                "warmup_steps",
                "max_steps",
            )
            if saved.get(k) != now[k]
        ]
        if changed:
            self.accelerator.print(
                f"--resume: {', '.join(changed)} differ from the run that wrote the checkpoint; "
                f"from step {self.start_step + 1} the learning rate follows this run's settings"
            )
