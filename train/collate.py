"""Turn examples into the tensors of one training step.

Language modelling uses *one sequence per example*, laid out exactly like ``Magnet.infill`` lays
out a query (:func:`magnetsdk.layout.lay_out`, in the run's :class:`magnetsdk.layout.InfillLayout`).
An example is one of three kinds, drawn per example:

- *next-token*: no context, ``BOS t1 ... tn EOS``, every token a span token, so the hybrid mask
  reduces to the causal mask that ``generate`` uses (``no_context_fraction`` of the examples);
- *MNTP*: the whole text as a bidirectional context with tokens masked; the output at position
  ``l - 1`` predicts the original token at ``l`` (LLM2Vec's "shifted" MNTP; ``mntp_fraction`` of
  the rest when both MNTP and MSG train);
- *MSG*: spans cut out of the text (at word boundaries: sentences, phrases, a gap at the end), the
  context left clean (``msg_mask_fraction`` of them also MNTP-masked, the paper's combined
  example), span tokens and each END predicted from the position before them; under a causal
  layout the context tokens can carry a loss too (``context_loss``)::

    magnet:  BOS t1 t2 GAP t6 t7 t8 t9   SPAN t3 t4 t5 END     context bidirectional, spans causal
    spm:     BOS t6 t7 t8 t9 GAP t1 t2   t3 t4 t5 END          all causal

A next-token example ends in EOS only when its text ends a document (``ends_document``), so the
model does not learn to stop after every sentence.

Contrastive views are the instruction-prefixed inputs of :func:`magnetsdk.encoding.prepare`, so
training encodes exactly like ``Magnet.encode``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from magnetsdk.train.masking import (
    SpanShapes,
    WordBoundaries,
    choose_spans,
    choose_word_spans,
    input_mask,
    mntp_mask,
)

from magnetsdk.encoding import EncodeInput, pad_batch, prepare
from magnetsdk.layout import (
    LEGACY_INFILL_LAYOUT,
    InfillLayout,
    LayoutTokens,
    check_span_training,
    infill_layout,
    lay_out,
)


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
    layout: InfillLayout | str = LEGACY_INFILL_LAYOUT
    # Of the examples with context, when MNTP and MSG both train: the share that are MNTP examples.
    mntp_fraction: float = 0.0
    # Of the MSG examples: the share whose context is also MNTP-masked (1.0: every one, the paper's way).
    msg_mask_fraction: float = 1.0
    # Word-boundary spans (None: token spans of about ``span_fraction``, the older recipe).
    span_shapes: SpanShapes | None = None
    boundaries: WordBoundaries | None = None
    context_loss: bool = False  # causal layouts: the context tokens are next-token targets too

    def __post_init__(self) -> None:
        self.layout = infill_layout(self.layout)
        if self.span_shapes is not None and self.boundaries is None:
            raise ValueError("word-boundary spans need the tokenizer's WordBoundaries")
        check_span_training(self.layout, self.mntp, self.msg, self.msg_mask_fraction, self.context_loss)


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
    mntp_only = not settings.msg or (
        settings.mntp and settings.mntp_fraction > 0 and rng.random() < settings.mntp_fraction
    )
    if mntp_only:
        return _context_example(ids, [], tokens, prefix, vocab_size, settings, rng, masked=True)
    share = settings.msg_mask_fraction
    masked = settings.mntp and share > 0 and (share >= 1 or rng.random() < share)
    spans: list[tuple[int, int]] = []
    if settings.span_shapes is not None:
        spans = choose_word_spans(ids, settings.boundaries, settings.span_shapes, settings.max_spans, rng)
    if not spans:
        spans = choose_spans(len(ids), settings.span_fraction, settings.max_spans, rng)
    return _context_example(ids, spans, tokens, prefix, vocab_size, settings, rng, masked)


def _context_example(
    ids: list[int],
    spans: list[tuple[int, int]],
    tokens: LayoutTokens,
    prefix: list[int],
    vocab_size: int,
    settings: LMSettings,
    rng: np.random.Generator,
    masked: bool,
) -> LMExample:
    """``ids`` with ``spans`` cut out (none: an MNTP example), laid out; MNTP-masked when ``masked``."""
    segments: list[list[int]] = []
    start = 0
    for s, e in spans:
        segments.append(ids[start:s])
        start = e
    segments.append(ids[start:])
    span_ids = [ids[s:e] for s, e in spans]
    # An MNTP example (no spans) always reads its context bidirectionally, whatever the run's layout.
    layout = settings.layout if spans else infill_layout(LEGACY_INFILL_LAYOUT)
    laid = lay_out(segments, tokens, spans=span_ids, prefix=prefix, layout=layout)
    input_ids = list(laid.input_ids)
    positions = [p for segment in laid.segment_positions for p in segment]  # context tokens, text order
    mntp_positions: list[int] = []
    mntp_targets: list[int] = []
    if masked:
        flat = [input_ids[p] for p in positions]
        eligible = [i for i, p in enumerate(positions) if p >= 1]  # position 0 has no predecessor
        chosen = mntp_mask(flat, settings.mntp_probability, tokens.mask_id, vocab_size, rng, eligible)
        for i, p in enumerate(positions):
            input_ids[p] = chosen.ids[i]
        mntp_positions = [positions[i] - 1 for i in chosen.selected]
        mntp_targets = chosen.originals
    msg_positions, msg_targets = list(laid.target_positions), list(laid.targets)
    if settings.context_loss and spans:
        context = sorted(p for p in positions if p >= 1)
        msg_positions = [p - 1 for p in context] + msg_positions
        msg_targets = [input_ids[p] for p in context] + msg_targets
    return LMExample(
        input_ids=input_ids,
        is_span=laid.is_span,
        mntp_positions=mntp_positions,
        mntp_targets=mntp_targets,
        msg_positions=msg_positions,
        msg_targets=msg_targets,
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


def copy_fill_example(
    left: list[int],
    right: list[int],
    fill: list[int],
    avoid: list[int],
    tokens: LayoutTokens,
    prefix: list[int],
    layout: InfillLayout | str,
) -> LMExample:
    """A fill that copied its context, laid out as the model read it when it wrote the fill.

    ``avoid``: indices of the fill tokens to push down (copy unlikelihood); they are the example's
    targets (``msg_positions`` / ``msg_targets``), taken as negatives by the objective, not as
    tokens to learn. The END after the fill is no target.
    """
    laid = lay_out([left, right], tokens, spans=[fill], prefix=prefix, layout=layout)
    chosen = sorted(set(avoid))
    if not chosen or chosen[0] < 0 or chosen[-1] >= len(fill):
        raise ValueError(f"avoided token indices {chosen} must lie inside the fill's {len(fill)} tokens")
    return LMExample(
        input_ids=laid.input_ids,
        is_span=laid.is_span,
        mntp_positions=[],
        mntp_targets=[],
        msg_positions=[laid.target_positions[i] for i in chosen],
        msg_targets=[fill[i] for i in chosen],
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


@dataclass
class ScoredBatch:
    """Scored pairs encoded as a :class:`ViewBatch` (rows ``0..b-1`` first texts, ``b..2b-1`` second), and their scores."""

    views: ViewBatch
    scores: torch.Tensor  # (b,) float32

    @property
    def tokens(self) -> int:
        return self.views.tokens

    def to(self, device: torch.device) -> ScoredBatch:
        return ScoredBatch(self.views.to(device), self.scores.to(device))


def collate_scored(tokenizer, pairs: list, instruction: str, max_length: int, pad_id: int) -> ScoredBatch:
    """The :class:`ScoredBatch` of ``pairs`` (:class:`~magnetsdk.train.data.ScoredPair`), instruction-prefixed as the encoder does."""
    views = collate_views(
        tokenizer,
        [p.text1 for p in pairs],
        [p.text2 for p in pairs],
        [None] * len(pairs),
        instruction,
        max_length,
        pad_id,
    )
    return ScoredBatch(views, torch.tensor([p.score for p in pairs], dtype=torch.float32))


@dataclass
class EndBatch:
    """Short texts, each read causally after the special prefix, right-padded: the rows of the end KL.

    The loss is taken at ``last``, each row's final real token, where the next token would follow
    the whole text.
    """

    input_ids: torch.Tensor  # (b, n)
    valid: torch.Tensor  # (b, n) bool
    last: torch.Tensor  # (b,) index of each row's last real token

    @property
    def tokens(self) -> int:
        return int(self.valid.sum())

    def to(self, device: torch.device) -> EndBatch:
        return EndBatch(self.input_ids.to(device), self.valid.to(device), self.last.to(device))


def collate_ends(texts: list[list[int]], prefix: list[int], pad_id: int) -> EndBatch:
    """The :class:`EndBatch` of tokenized ``texts``, each after ``prefix`` (the model's special prefix)."""
    rows = [list(prefix) + list(ids) for ids in texts]
    n = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), n), pad_id, dtype=torch.long)
    valid = torch.zeros((len(rows), n), dtype=torch.bool)
    for i, row in enumerate(rows):
        input_ids[i, : len(row)] = torch.tensor(row)
        valid[i, : len(row)] = True
    return EndBatch(input_ids, valid, torch.tensor([len(r) - 1 for r in rows]))
