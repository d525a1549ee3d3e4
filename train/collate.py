"""Turn examples into the tensors of one training step.

Language modelling (MNTP + MSG) uses *one sequence per example*, laid out exactly like
``Magnet.infill`` lays out a query (:func:`magnetsdk.layout.lay_out`)::

    BOS  t1 [M] t3 GAP t6 t7 [M] t9   SPAN t4 t5 END
    \\_____ context, MNTP-masked ____/  \\_ span block _/   one hybrid mask over the whole row

- MNTP: the output at position ``l - 1`` predicts the original token at a selected context
  position ``l`` (the model keeps its next-token head; LLM2Vec's "shifted" MNTP).
- MSG: span tokens and each END are predicted from the position before them
  (``LaidOut.target_positions``).
- An example without context is plain next-token prediction: ``BOS t1 ... tn [EOS]``, every token
  a span token, so the hybrid mask reduces to the causal mask that ``generate`` uses. EOS ends
  it only when the text ends a document (``ends_document``).

Contrastive views are the instruction-prefixed inputs of :func:`magnetsdk.encoding.prepare`, so
training encodes exactly like ``Magnet.encode``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from magnetsdk.train.masking import choose_spans, input_mask, mntp_mask

from magnetsdk.encoding import EncodeInput, pad_batch, prepare
from magnetsdk.layout import LayoutTokens, lay_out


@dataclass
class LMSettings:
    """The parts of the training config that shape a language-modelling example."""

    mntp: bool  # select and mask context tokens for MNTP
    msg: bool  # remove spans for MSG
    mntp_probability: float
    span_fraction: float
    max_spans: int
    no_context_fraction: float
    input_mask_probability: float


@dataclass
class LMExample:
    input_ids: list[int]
    is_span: list[bool]
    mntp_positions: list[int]  # the position whose output predicts each MNTP target
    mntp_targets: list[int]
    msg_positions: list[int]
    msg_targets: list[int]


def build_lm_example(
    ids: list[int],
    tokens: LayoutTokens,
    prefix: list[int],
    eos_id: int,
    vocab_size: int,
    settings: LMSettings,
    rng: np.random.Generator,
    ends_document: bool = True,
) -> LMExample:
    """One training sequence for the text ``ids`` (already within the length budget).

    ``ends_document``: a next-token example of this text ends in EOS (the document ends here).
    """
    if settings.msg and rng.random() < settings.no_context_fraction:
        return _next_token_example(ids, tokens, prefix, eos_id, settings, rng, ends_document)

    spans = choose_spans(len(ids), settings.span_fraction, settings.max_spans, rng) if settings.msg else []
    segments: list[list[int]] = []
    start = 0
    for s, e in spans:
        segments.append(ids[start:s])
        start = e
    segments.append(ids[start:])
    span_ids = [ids[s:e] for s, e in spans]

    # Absolute position of every segment token in the laid-out context.
    positions: list[int] = []
    offset = len(prefix)
    for i, segment in enumerate(segments):
        offset += 1 if i else 0  # the GAP before segment i
        positions.extend(range(offset, offset + len(segment)))
        offset += len(segment)
    flat = [t for segment in segments for t in segment]

    mntp_positions: list[int] = []
    mntp_targets: list[int] = []
    if settings.mntp:
        eligible = [i for i, p in enumerate(positions) if p >= 1]  # position 0 has no predecessor
        masked = mntp_mask(flat, settings.mntp_probability, tokens.mask_id, vocab_size, rng, eligible)
        flat = masked.ids
        mntp_positions = [positions[i] - 1 for i in masked.selected]
        mntp_targets = masked.originals
    masked_segments = []
    start = 0
    for segment in segments:
        masked_segments.append(flat[start : start + len(segment)])
        start += len(segment)

    laid = lay_out(masked_segments, tokens, spans=span_ids, prefix=prefix)
    return LMExample(
        input_ids=laid.input_ids,
        is_span=laid.is_span,
        mntp_positions=mntp_positions,
        mntp_targets=mntp_targets,
        msg_positions=laid.target_positions,
        msg_targets=laid.targets,
    )


def _next_token_example(
    ids: list[int],
    tokens: LayoutTokens,
    prefix: list[int],
    eos_id: int,
    settings: LMSettings,
    rng: np.random.Generator,
    ends_document: bool,
) -> LMExample:
    """``prefix t1 ... tn [EOS]`` as span tokens: causal next-token prediction (MEAP masks inputs)."""
    sequence = [*prefix, *ids, *([eos_id] if ends_document else [])]
    first = max(len(prefix), 1)  # the first predicted token; it needs a position before it
    inputs = input_mask(sequence, settings.input_mask_probability, tokens.mask_id, len(prefix), rng)
    return LMExample(
        input_ids=inputs,
        is_span=[True] * len(sequence),
        mntp_positions=[],
        mntp_targets=[],
        msg_positions=list(range(first - 1, len(sequence) - 1)),
        msg_targets=sequence[first:],
    )


@dataclass
class LMBatch:
    input_ids: torch.Tensor  # (b, n)
    valid: torch.Tensor  # (b, n) bool
    is_span: torch.Tensor  # (b, n) bool
    mntp_rows: torch.Tensor  # (k,) row of each MNTP target
    mntp_positions: torch.Tensor  # (k,) position whose output predicts it
    mntp_targets: torch.Tensor  # (k,)
    msg_rows: torch.Tensor  # (m,)
    msg_positions: torch.Tensor  # (m,)
    msg_targets: torch.Tensor  # (m,)

    @property
    def tokens(self) -> int:
        return int(self.valid.sum())

    def to(self, device: torch.device) -> LMBatch:
        return LMBatch(**{k: v.to(device) for k, v in self.__dict__.items()})


def collate_lm(examples: list[LMExample], pad_id: int) -> LMBatch:
    ids, valid = pad_batch([e.input_ids for e in examples], pad_id, torch.device("cpu"))
    is_span = torch.zeros_like(valid)
    for row, example in enumerate(examples):
        is_span[row, : len(example.is_span)] = torch.tensor(example.is_span, dtype=torch.bool)

    def flat(positions: str, targets: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        rows = [row for row, e in enumerate(examples) for _ in getattr(e, positions)]
        pos = [p for e in examples for p in getattr(e, positions)]
        tgt = [t for e in examples for t in getattr(e, targets)]
        as_long = lambda values: torch.tensor(values, dtype=torch.long)  # noqa: E731
        return as_long(rows), as_long(pos), as_long(tgt)

    mntp = flat("mntp_positions", "mntp_targets")
    msg = flat("msg_positions", "msg_targets")
    return LMBatch(ids, valid, is_span, *mntp, *msg)


@dataclass
class ViewBatch:
    """Anchors, their positives and the hard negatives that exist, encoded in one batch.

    Rows ``0..b-1`` are anchors, ``b..2b-1`` positives, then one row per anchor that has a hard
    negative (``has_negative`` marks which).
    """

    input_ids: torch.Tensor  # (2b + h, n)
    valid: torch.Tensor  # (2b + h, n)
    inputs: list[EncodeInput]
    anchors: int
    has_negative: torch.Tensor  # (b,) bool

    @property
    def tokens(self) -> int:
        return int(self.valid.sum())

    def to(self, device: torch.device) -> ViewBatch:
        return ViewBatch(
            self.input_ids.to(device),
            self.valid.to(device),
            self.inputs,
            self.anchors,
            self.has_negative.to(device),
        )


def collate_views(
    tokenizer,
    anchors: list[str],
    positives: list[str],
    negatives: list[str | None],
    instruction: str,
    max_length: int,
    pad_id: int,
) -> ViewBatch:
    present = [n for n in negatives if n is not None]
    inputs = prepare(tokenizer, [*anchors, *positives, *present], instruction, max_length)
    ids, valid = pad_batch([i.ids for i in inputs], pad_id, torch.device("cpu"))
    has_negative = torch.tensor([n is not None for n in negatives], dtype=torch.bool)
    return ViewBatch(ids, valid, inputs, len(anchors), has_negative)
