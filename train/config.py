"""``TrainConfig``: every setting of a training run, typed and validated in one place.

Values come from four layers, later ones winning: the field defaults, the recipe preset
(:mod:`magnetsdk.train.recipes`; fields left at ``None`` are filled from it), a TOML or YAML
file, and command-line flags. The resolved config is written into the run directory and into the
exported model's ``magnet_config.json`` (``training``), so a model records how it was made.

This module knows nothing about models or tensors, and importing it does not import torch (the
``magnet`` command builds its flags from these fields at start-up).

This file is longer than the ~400 lines other modules keep to because every field of a run and
the check that names its bad values belong together: split, a field's rule would live away from
its declaration.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any

import tomllib
from magnetsdk.train.recipes import RECIPES, recipe_defaults

from magnetsdk.layout import RESERVED_CANDIDATES


class LMAttention(str, Enum):
    """The attention mode of the language-modelling pass (MNTP + MSG)."""

    HYBRID = "hybrid"  # context bidirectional, spans causal (MAGNET)
    BIDIRECTIONAL = "bidirectional"  # every token sees every token (LLM2Vec)
    CAUSAL = "causal"  # the model's native mask (MEAP)


class PositiveSource(str, Enum):
    """Where the positive view of an SSCL anchor comes from (see :mod:`magnetsdk.train.views`)."""

    AUTO = "auto"  # the best measured source available: pairs when pair files are given, else paraphrase
    PAIRS = "pairs"  # given (anchor, positive[, negative]) pairs
    PARAPHRASE = "paraphrase"  # generated once by an instruct model and cached on disk
    DROPOUT = "dropout"  # the same text, a second pass with different dropout (SimCSE)
    ICT = "ict"  # a sentence of a text against the rest of it (inverse cloze, train/ict.py)


class Schedule(str, Enum):
    LINEAR = "linear"
    COSINE = "cosine"
    CONSTANT = "constant"


class MixedPrecision(str, Enum):
    AUTO = "auto"  # bf16 autocast on GPU and on a CPU with native bf16 (AVX512-BF16, AMX), else fp32
    NO = "no"
    BF16 = "bf16"


def _enum(cls: type[Enum], value: Any, name: str) -> Any:
    try:
        return cls(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not one of {[m.value for m in cls]}") from None


@dataclass
class TrainConfig:
    # --- what to train on
    # A name or directory Magnet.from_pretrained accepts; training starts from its base weights.
    # "default-base" is the embedded base alone ("default" would name base + shipped adapter).
    base_model: str = "default-base"
    # Start from the LoRA weights of an exported adapter (its directory, or a name that carries
    # one: "default" is the shipped adapter) instead of a fresh LoRA. Its base model must be
    # base_model and its rank, alpha and target modules this run's; the optimizer and the step
    # count start fresh (a checkpoint found by --resume wins over it).
    init_adapter: str | None = None
    data: list[str] = field(default_factory=list)  # .txt / .jsonl / .csv / .tsv text files
    pairs: list[str] = field(default_factory=list)  # .jsonl / .tsv positive pairs
    # Running text for the next-token examples: one document per text (a .txt line, a .jsonl
    # record), chunked to max_length; only a document's last chunk ends in EOS. Without documents
    # the next-token examples come from `data` and never end in EOS (a text is not known to end
    # a document, and EOS after every one-sentence text teaches the model to stop early).
    documents: list[str] = field(default_factory=list)
    text_field: str = "text"  # the column of .jsonl / .csv text files
    output_dir: str = "runs/magnet"
    recipe: str = "magnet"

    # --- objectives (None: the recipe decides)
    mntp_weight: float | None = None
    sscl_weight: float | None = None
    msg_weight: float | None = None
    lm_attention: LMAttention | None = None
    no_context_fraction: float | None = None  # MSG examples that are plain next-token prediction
    input_mask_probability: float | None = None  # MEAP: inputs of next-token examples masked
    # Next-token examples (no context) also take kl_weight * KL(adapted || base) per predicted token:
    # the base's distribution, tail included, is kept where the adapted model has nothing to learn
    # from the data (rare tokens sampled, the base's knowledge). LoRA only: the base is the adapter
    # switched off. 0: off.
    kl_weight: float = 0.0
    # Ends of short texts: each micro-batch also takes end_kl_weight * KL(adapted || base) of the next
    # token after the last token of end_kl_batch_size texts of `data` (those of at most
    # end_kl_max_tokens tokens: one-sentence texts). The base continues a lone sentence (EOS ~0.04
    # after one); missing-span END targets teach the adapter to close it, and the reused END token
    # shares EOS's row. LoRA only. 0: off.
    end_kl_weight: float = 0.0
    # The end KL over every token but END (END's column dropped from both distributions, each
    # renormalised): the term then has no say on END's probability or its output row, which
    # span_end_weight and the missing-span targets set. Phase 17 (docs/phases.md): with the layout
    # rows at their own rate, the full KL lowered END after spans as well as EOS after lone texts.
    end_kl_without_end: bool = False
    end_kl_batch_size: int = 16
    end_kl_max_tokens: int = 48
    # Each missing-span END target counts span_end_weight times in the MSG mean (1: as any span
    # token). END closes a fill; a span of ~30 tokens has one, and end_kl_weight pulls the same
    # output row (EOS's) down after a finished text, so greedy fills can stop closing without it.
    span_end_weight: float = 1.0
    # Copy unlikelihood: each micro-batch also reads copy_ul_batch_size greedy fills of copy_fills
    # (JSON lines {left, right, fill, avoid}: scripts/copy_fills.py, fills of the model being
    # trained that copied their context) in the run's layout, and takes copy_ul_weight x the mean
    # of -log(1 - p) over the first token of each avoided word (a word that continued a copy),
    # given the fill before it. What the model wrote is made less likely only where it copied; no
    # token of a fill is trained as a target. 0: off.
    copy_fills: str | None = None
    copy_ul_weight: float = 0.0
    copy_ul_batch_size: int = 4
    mntp_first_fraction: float | None = None  # steps training MNTP alone before the rest (LLM2Vec)
    positives: PositiveSource | None = None
    ict_share: float = 0.0  # SSCL examples that are inverse-cloze pairs from --data, mixed into positives
    mntp_probability: float = 0.2  # context tokens selected for MNTP (80/10/10 of them)
    span_fraction: float = 0.15  # share of a text's tokens removed as token spans (span_unit 'token')
    max_spans: int = 3

    # --- missing-span examples (see magnetsdk.train.collate; None: the recipe decides)
    infill_layout: str | None = None  # a name in magnetsdk.layout.INFILL_LAYOUTS, stored with the model
    mntp_fraction: float | None = None  # of the examples with context: MNTP examples (the rest MSG)
    msg_mask_fraction: float | None = None  # of MSG examples: context also MNTP-masked (the paper's way)
    span_unit: str | None = None  # 'word': sentences / phrases / end gaps at word boundaries; 'token'
    span_sentence_share: float = 0.6  # word spans: whole sentences
    span_phrase_share: float = 0.3  # word spans: phrases of 1..phrase_max_words words
    span_end_share: float = 0.1  # word spans: a gap running to the end of the text
    phrase_max_words: int = 6
    max_span_share: float = 0.5  # word spans take at most this share of a text's tokens
    context_loss: bool | None = None  # causal layouts: the context tokens are next-token targets too
    temperature: float = 0.05  # InfoNCE: cosine similarity / temperature
    hard_negatives: bool = True  # a pair's `negative` (e.g. an SNLI contradiction) joins the candidates
    # Scored pairs (.jsonl / .tsv: text1, text2, score; e.g. STS-B train): a supervised CoSENT term
    # that orders the pairs' cosines as their scores (train/objectives.py, cosent).
    scored_pairs: list[str] = field(default_factory=list)
    scored_weight: float = 1.0
    scored_batch_size: int = 32  # scored pairs per process per micro-batch
    # How the scored pairs' sources ("source" of each pair) share the draws: a source's share goes
    # as (its pair count) ** this power. 1: the files' own proportions; 0: every source equally.
    scored_source_power: float = 1.0
    cosent_scale: float = 20.0  # cosine differences are multiplied by this before the log-sum-exp
    # SSCL anchors per micro-batch and process (None: batch_size). Larger batches give more
    # in-batch negatives; with contrastive_chunk_size the gradient pass runs in chunks (GradCache).
    contrastive_batch_size: int | None = None
    # GradCache: embed all views without gradients, then recompute chunks of this many anchors
    # (with their positives and negatives) with gradients. None: one pass with gradients.
    contrastive_chunk_size: int | None = None
    instruction: str | None = None  # None: magnetsdk's default instruction (what Magnet.encode uses)
    attention_dropout: float | None = None  # None: 0.1 with dropout positives, else 0.0
    paraphrase_model: str | None = None  # None: the base model
    paraphrase_cache: str | None = None  # None: <output_dir>/paraphrases.jsonl

    # --- sequences and batches
    max_length: int = 128  # tokens per language-modelling sequence (longer texts are split)
    sscl_max_length: int = 64  # tokens per contrastive view (longer texts are truncated)
    batch_size: int = 8  # examples per process per micro-batch
    gradient_accumulation: int = 1
    # Language-modelling examples of this many consecutive batches are sorted by length before
    # being cut into batches, so a batch holds rows of similar length and little padding. 1: off.
    bucket_batches: int = 16
    # One decoder pass for the LM rows and the contrastive views when padding them to one length
    # costs little (the views are bidirectional, i.e. hybrid rows without span tokens).
    fuse_passes: bool = True

    # --- optimisation
    max_steps: int = 1000
    learning_rate: float = 2e-4
    weight_decay: float = 0.0
    warmup_steps: int = 50
    schedule: Schedule = Schedule.LINEAR
    max_grad_norm: float = 1.0
    full_finetune: bool = False
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    # Train the embedding rows (tied to the LM head) of the layout tokens even when they are reused
    # reserved tokens. SmolLM2's reserved tokens share one row, close to EOS's (cosine 0.99): without
    # this, mask, gap, span and end look alike as inputs, and every END target also raises EOS
    # (docs/phases.md, "The layout tokens share one embedding"). Added tokens always train. LoRA only.
    train_layout_tokens: bool = False
    # Which layout roles' rows train under train_layout_tokens (mask, gap, span, end); empty: all
    # four. ["end"] lets END part from EOS while GAP and SPAN keep the rows the infill was learnt
    # with (phase 23, docs/phases.md: all four at 3e-3 cost a little of the right side's help).
    train_layout_roles: list[str] = field(default_factory=list)
    # Learning rate of the token rows that train beside LoRA (the layout rows under
    # train_layout_tokens, and added tokens); None: learning_rate. Rows move slowly at LoRA's rate:
    # 50 steps at 1e-4 left END at cosine 0.991 from EOS (phase 13, docs/phases.md).
    layout_token_lr: float | None = None
    # Hold LoRA as init_adapter left it (fresh: no change to the base) and train only the token rows
    # beside it (train_layout_tokens): a layout token tuned as a one-token prompt, which changes
    # nothing the token does not appear in (encoding, generation) but its tied output logit.
    freeze_lora: bool = False
    # The token that plays END (closes each span), by its string; None: the first of
    # magnetsdk.layout.RESERVED_CANDIDATES["end"] the tokenizer has (SmolLM2: <issue_closed>, whose
    # row is at cosine 0.991 from EOS's, so in spans the adapter closes with EOS, not END). A token
    # the tokenizer lacks is added. Stored with the model; it may differ from an init_adapter's.
    end_token: str | None = None
    # END's row starts as a copy of EOS's (LoRA with END's row trained: train_layout_tokens, or an
    # added END). A fill then closes where the init adapter closed it with EOS, from step 0, and the
    # row parts from EOS's as it trains; without it a fresh END must be learnt (phase 21,
    # docs/results.md: 50 steps closed no fill). Applied at step 0; a resumed run keeps its row.
    end_row_from_eos: bool = False
    lora_target_modules: list[str] | str | None = None  # None: the recipe's ("all-linear" mostly)
    gradient_checkpointing: bool = False
    mixed_precision: MixedPrecision = MixedPrecision.AUTO
    seed: int = 0
    device: str = "auto"  # auto, cpu or cuda (one process); accelerate launch sets it per process
    # torch intra-op threads per process (None: this machine's cores shared among the processes
    # started on it, i.e. 2 on a 2-core CPU). On a CPU shared with other jobs use 1: oversubscribed
    # threads made a SmolLM2 step 10x slower in benchmarks/bench_train.py.
    threads: int | None = None

    # --- bookkeeping
    save_every: int = 100
    keep_checkpoints: int = 2
    log_every: int = 1
    progress: bool = True
    # Every eval_every steps (0: never) the main process continues the eval_prefixes (held-out
    # text, one per line) with nucleus sampling and logs the natural continuation length and the
    # equal-length rep-4 into metrics.jsonl (see magnetsdk.train.generation_check).
    eval_every: int = 0
    eval_prefixes: str | None = None
    eval_new_tokens: int = 64

    def __post_init__(self) -> None:
        if self.recipe not in RECIPES:
            raise ValueError(f"recipe={self.recipe!r} is not one of {sorted(RECIPES)}")
        for name, value in recipe_defaults(self.recipe).items():
            if getattr(self, name) is None:
                setattr(self, name, value)
        if self.instruction is None:
            from magnetsdk.config import DEFAULT_INSTRUCTION  # imported here: it pulls in torch

            self.instruction = DEFAULT_INSTRUCTION
        self.data = [str(p) for p in _as_list(self.data)]
        self.pairs = [str(p) for p in _as_list(self.pairs)]
        self.documents = [str(p) for p in _as_list(self.documents)]
        self.scored_pairs = [str(p) for p in _as_list(self.scored_pairs)]
        self.train_layout_roles = [str(r) for r in _as_list(self.train_layout_roles)]
        if self.contrastive_batch_size is None:
            self.contrastive_batch_size = self.batch_size
        self.lm_attention = _enum(LMAttention, self.lm_attention, "lm_attention")
        self.positives = _enum(PositiveSource, self.positives, "positives")
        if self.positives is PositiveSource.AUTO:
            # Measured on STS-B dev (docs/results.md, scripts/compare_positive_sources.sh):
            # pairs 39.1 > paraphrase 38.4 >> dropout 19.4, same anchors and steps.
            self.positives = PositiveSource.PAIRS if self.pairs else PositiveSource.PARAPHRASE
        if self.attention_dropout is None:
            self.attention_dropout = 0.1 if self.positives is PositiveSource.DROPOUT else 0.0
        if self.span_unit not in ("word", "token"):
            raise ValueError(f"span_unit={self.span_unit!r} is not one of ['word', 'token']")
        self.schedule = _enum(Schedule, self.schedule, "schedule")
        self.mixed_precision = _enum(MixedPrecision, self.mixed_precision, "mixed_precision")
        self._validate()

    def _validate(self) -> None:
        if not self.data and not self.pairs and not self.scored_pairs:
            raise ValueError(
                "no training data: pass text files with data=[...] (--data), pairs=[...] and/or scored_pairs=[...]"
            )
        if self.contrastive_chunk_size is not None and self.contrastive_chunk_size < 1:
            raise ValueError(
                f"contrastive_chunk_size={self.contrastive_chunk_size} must be at least 1 (or unset: no chunking)"
            )
        if self.eval_every < 0:
            raise ValueError(f"eval_every={self.eval_every} must be >= 0 (0: no periodic eval)")
        if self.eval_every and not self.eval_prefixes:
            raise ValueError(
                "eval_every > 0 needs eval_prefixes: a file of held-out text, one prefix per line"
            )
        if self.positives is PositiveSource.PAIRS and not self.pairs and self.sscl_weight:
            raise ValueError("positives='pairs' needs pair files (--pairs); or use positives='dropout'")
        weights = {
            "mntp_weight": self.mntp_weight,
            "sscl_weight": self.sscl_weight,
            "msg_weight": self.msg_weight,
        }
        for name, value in weights.items():
            if value < 0:
                raise ValueError(f"{name}={value} must be >= 0")
        if not any(weights.values()) and not self.uses_scored:
            raise ValueError(
                "all objective weights are 0; set at least one of "
                + ", ".join(weights)
                + " (or give scored_pairs)"
            )
        self._check_scored()
        self._check_kl()
        self._check_end_kl()
        self._check_copy_ul()
        self._check_init_adapter()
        for name in (
            "no_context_fraction",
            "input_mask_probability",
            "mntp_first_fraction",
            "mntp_probability",
            "span_fraction",
            "ict_share",
            "attention_dropout",
            "lora_dropout",
            "mntp_fraction",
            "msg_mask_fraction",
        ):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name}={value} must be between 0 and 1")
        if not 0.0 < self.span_fraction < 1.0:
            raise ValueError(f"span_fraction={self.span_fraction} must be strictly between 0 and 1")
        if self.lm_attention is LMAttention.BIDIRECTIONAL and self.msg_weight:
            raise ValueError(
                "lm_attention='bidirectional' lets spans see the tokens they must predict; use 'hybrid' "
                "for MSG, or set msg_weight=0"
            )
        if self.lm_attention is LMAttention.CAUSAL and self.mntp_weight:
            raise ValueError(
                "MNTP needs a bidirectional context (lm_attention 'hybrid' or 'bidirectional'); "
                "under 'causal' set mntp_weight=0 (the meap recipe)"
            )
        self.lm_settings_check()
        if self.mntp_first_fraction and not self.mntp_weight:
            raise ValueError(
                "mntp_first_fraction > 0 needs mntp_weight > 0 (the first stage trains MNTP alone)"
            )
        positive_ints = (
            "max_spans",
            "max_length",
            "sscl_max_length",
            "batch_size",
            "contrastive_batch_size",
            "gradient_accumulation",
            "bucket_batches",
            "eval_new_tokens",
            "max_steps",
            "save_every",
            "log_every",
            "lora_r",
            "lora_alpha",
            "keep_checkpoints",
        )
        for name in positive_ints:
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be at least 1")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads={self.threads} must be at least 1 (or unset for torch's default)")
        if self.max_length < 16:
            raise ValueError(f"max_length={self.max_length} is too small; use at least 16 tokens")
        if self.sscl_max_length < 8:
            raise ValueError(f"sscl_max_length={self.sscl_max_length} is too small; use at least 8 tokens")
        if self.temperature <= 0:
            raise ValueError(f"temperature={self.temperature} must be > 0")
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate={self.learning_rate} must be > 0")
        if self.warmup_steps < 0 or self.weight_decay < 0 or self.max_grad_norm < 0:
            raise ValueError("warmup_steps, weight_decay and max_grad_norm must be >= 0")
        if (
            self.sscl_weight
            and self.contrastive_batch_size < 2
            and self.positives is not PositiveSource.PAIRS
        ):
            raise ValueError("SSCL needs in-batch negatives: batch_size must be at least 2")

    def _check_scored(self) -> None:
        if self.scored_weight < 0:
            raise ValueError(f"scored_weight={self.scored_weight} must be >= 0 (0: scored pairs unused)")
        if self.cosent_scale <= 0:
            raise ValueError(f"cosent_scale={self.cosent_scale} must be > 0")
        if self.scored_source_power < 0:
            raise ValueError(
                f"scored_source_power={self.scored_source_power} must be >= 0 (1: the files' own "
                "proportions of sources, 0: every source drawn equally often)"
            )
        if self.scored_pairs and self.scored_batch_size < 2:
            raise ValueError(
                f"scored_batch_size={self.scored_batch_size}: CoSENT compares pairs with each other; use at least 2"
            )

    def _check_init_adapter(self) -> None:
        if self.layout_token_lr is not None and self.layout_token_lr < 0:
            raise ValueError(
                f"layout_token_lr={self.layout_token_lr} must be >= 0 (leave it unset to use "
                "learning_rate; 0 keeps the rows as they start, such as an init adapter's trained rows)"
            )
        if self.layout_token_lr is not None and self.full_finetune:
            raise ValueError(
                "layout_token_lr sets the rate of token rows that train beside LoRA; a full fine-tune "
                "trains every row at learning_rate: drop layout_token_lr, or set full_finetune=false"
            )
        if self.freeze_lora and self.full_finetune:
            raise ValueError(
                "freeze_lora holds LoRA and trains the token rows beside it; a full fine-tune has neither: "
                "drop freeze_lora, or set full_finetune=false"
            )
        if self.end_row_from_eos and self.full_finetune:
            raise ValueError(
                "end_row_from_eos copies EOS's row into END's row that trains beside LoRA; a full "
                "fine-tune has no such row: drop end_row_from_eos, or set full_finetune=false"
            )
        unknown = sorted(set(self.train_layout_roles) - set(RESERVED_CANDIDATES))
        if unknown:
            raise ValueError(
                f"train_layout_roles={self.train_layout_roles}: {unknown} is not a layout role; "
                f"use some of {list(RESERVED_CANDIDATES)}"
            )
        if self.train_layout_roles and not self.train_layout_tokens:
            raise ValueError(
                f"train_layout_roles={self.train_layout_roles} picks which layout rows train, but "
                "train_layout_tokens is off: add train_layout_tokens=true (--train-layout-tokens)"
            )
        if self.train_layout_tokens and self.full_finetune:
            raise ValueError(
                "train_layout_tokens trains the layout tokens' rows beside LoRA; a full fine-tune trains "
                "every row already: drop train_layout_tokens, or set full_finetune=false"
            )
        if self.init_adapter and self.full_finetune:
            raise ValueError(
                f"init_adapter={self.init_adapter!r} starts LoRA from an adapter's weights; a full fine-tune "
                "has no adapter: drop init_adapter, or set full_finetune=false"
            )

    def _check_kl(self) -> None:
        if self.kl_weight < 0:
            raise ValueError(f"kl_weight={self.kl_weight} must be >= 0 (0: off)")
        if not self.kl_weight:
            return
        if self.full_finetune:
            raise ValueError(
                "kl_weight > 0 compares with the base model, i.e. the model with its LoRA adapter "
                "switched off; a full fine-tune has none: set kl_weight=0 or train LoRA"
            )
        if not (self.msg_weight and self.no_context_fraction):
            raise ValueError(
                "kl_weight > 0 acts on the next-token examples, and this config has none: "
                "set msg_weight > 0 and no_context_fraction > 0, or kl_weight=0"
            )

    def _check_end_kl(self) -> None:
        if self.end_token is not None and not self.end_token.strip():
            raise ValueError(
                f"end_token={self.end_token!r} is blank: name the token that closes each span "
                "(for SmolLM2, e.g. '<|endoftext|>'), or leave it unset for the default"
            )
        if self.span_end_weight <= 0:
            raise ValueError(
                f"span_end_weight={self.span_end_weight} must be > 0 (1: END counts as any span token)"
            )
        if self.end_kl_weight < 0:
            raise ValueError(f"end_kl_weight={self.end_kl_weight} must be >= 0 (0: off)")
        if not self.end_kl_weight:
            if self.end_kl_without_end:
                raise ValueError(
                    "end_kl_without_end shapes the end KL, and end_kl_weight is 0 (off): set "
                    "end_kl_weight > 0 (--end-kl-weight), or drop end_kl_without_end"
                )
            return
        if self.full_finetune:
            raise ValueError(
                "end_kl_weight > 0 compares with the base model, i.e. the model with its LoRA adapter "
                "switched off; a full fine-tune has none: set end_kl_weight=0 or train LoRA"
            )
        if not self.data:
            raise ValueError(
                "end_kl_weight > 0 reads the ends of the texts of data=[...] (--data), and none is "
                "given: add short texts (one sentence per line), or set end_kl_weight=0"
            )
        if self.end_kl_batch_size < 1:
            raise ValueError(f"end_kl_batch_size={self.end_kl_batch_size} must be >= 1")
        if self.end_kl_max_tokens < 2:
            raise ValueError(f"end_kl_max_tokens={self.end_kl_max_tokens} must be >= 2")

    def _check_copy_ul(self) -> None:
        if self.copy_ul_weight < 0:
            raise ValueError(f"copy_ul_weight={self.copy_ul_weight} must be >= 0 (0: off)")
        if bool(self.copy_ul_weight) != bool(self.copy_fills):
            raise ValueError(
                "copy unlikelihood needs both copy_fills (--copy-fills, a file of "
                "scripts/copy_fills.py) and copy_ul_weight > 0 (--copy-ul-weight); "
                f"got copy_fills={self.copy_fills!r}, copy_ul_weight={self.copy_ul_weight}"
            )
        if self.copy_ul_weight and not self.msg_weight:
            raise ValueError(
                "copy_ul_weight > 0 reads fills in the missing-span layout, and msg_weight is 0: "
                "set msg_weight > 0, or copy_ul_weight=0"
            )
        if self.copy_ul_batch_size < 1:
            raise ValueError(f"copy_ul_batch_size={self.copy_ul_batch_size} must be >= 1")

    def lm_settings_check(self) -> None:
        """The span settings' checks (layout name, shares, the layout's rules), before any data is read."""
        from magnetsdk.train.masking import SpanShapes

        from magnetsdk.layout import check_span_training, infill_layout

        layout = infill_layout(self.infill_layout)
        SpanShapes(
            self.span_sentence_share,
            self.span_phrase_share,
            self.span_end_share,
            self.phrase_max_words,
            self.max_span_share,
        )
        check_span_training(
            layout,
            bool(self.mntp_weight),
            bool(self.msg_weight),
            self.msg_mask_fraction,
            bool(self.context_loss),
        )
        causal_layout = not layout.bidirectional_context
        if (
            causal_layout
            and self.msg_weight
            and self.mntp_weight
            and self.lm_attention is not LMAttention.HYBRID
        ):
            raise ValueError("MNTP beside a causal infill layout needs lm_attention='hybrid'")

    # ------------------------------------------------------------------ views

    @property
    def uses_sscl(self) -> bool:
        return bool(self.sscl_weight)

    @property
    def uses_scored(self) -> bool:
        return bool(self.scored_pairs and self.scored_weight)

    @property
    def trains_embeddings(self) -> bool:
        """SSCL or CoSENT trains the encoder's bidirectional last-token embeddings."""
        return self.uses_sscl or self.uses_scored

    @property
    def uses_lm(self) -> bool:
        return bool(self.mntp_weight or self.msg_weight)

    def weights_at(self, step: int) -> tuple[float, float, float]:
        """(MNTP, SSCL, MSG) weights at optimizer step ``step`` (0-based), staged or not."""
        if self.mntp_first_fraction and step < int(self.mntp_first_fraction * self.max_steps):
            return self.mntp_weight, 0.0, 0.0
        if self.mntp_first_fraction:
            return 0.0, self.sscl_weight, self.msg_weight
        return self.mntp_weight, self.sscl_weight, self.msg_weight

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for key, value in data.items():
            if isinstance(value, Enum):
                data[key] = value.value
        return data

    # ------------------------------------------------------------------ loading

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "config") -> TrainConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{source}: unknown keys {unknown}; known keys are {sorted(known)}")
        return cls(**data)

    @classmethod
    def load(
        cls, path: str | os.PathLike | None = None, overrides: dict[str, Any] | None = None
    ) -> TrainConfig:
        """Read a TOML (or, with pyyaml installed, YAML) file, apply ``overrides`` (None values skipped)."""
        data = read_config_file(Path(path)) if path is not None else {}
        data.update({k: v for k, v in (overrides or {}).items() if v is not None})
        return cls.from_dict(data, source=str(path) if path is not None else "config")


def read_config_file(path: Path) -> dict[str, Any]:
    """The key/value table of a ``.toml``, ``.yaml`` or ``.yml`` config file."""
    if not path.is_file():
        raise FileNotFoundError(f"config file {path} not found")
    suffix = path.suffix.lower()
    text = path.read_text(encoding="utf-8")
    if suffix == ".toml":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            raise ValueError(f"{path} is not valid TOML: {error}") from None
    elif suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise ValueError(f"{path}: reading YAML needs pyyaml (pip install pyyaml); or use TOML") from None
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as error:
            raise ValueError(f"{path} is not valid YAML: {error}") from None
    else:
        raise ValueError(f"config file {path} must end in .toml, .yaml or .yml")
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a table of settings, got {type(data).__name__}")
    return data


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, (str, os.PathLike)):
        return [value]
    return list(value)
