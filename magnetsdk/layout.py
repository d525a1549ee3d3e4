"""The token layouts of infilling, shared by ``Magnet.infill``, missing-span training and ``magnet eval infill``.

A text with ``g`` gaps (``g + 1`` segments) is laid out as one sequence: the *context* (the
segments with each gap replaced by one GAP token), then the *span block*, one span per gap in
order, each closed by END. How the context is ordered and read is the :class:`InfillLayout`, a
named setting stored in ``magnet_config.json``:

``magnet`` (the paper's hybrid mask: context bidirectional, spans causal and seeing all context)::

    BOS left GAP right | SPAN s1 s2 ... END        context 0..C-1, span block from C

``spm`` (suffix first, all causal: the text is rotated to start after the first gap, so the first
span continues the left side directly and has read the right side before it)::

    BOS right GAP left | s1 s2 ... END

With several gaps the suffix is every segment after the first gap, later gaps as GAP tokens:
``seg1 GAP seg2 ... GAP seg_g GAP seg0 | s1 .. END t1 .. END``. Variants: ``-span`` opens each span
with SPAN (a role token), ``spm-bidirectional`` reads the rotated context bidirectionally, ``psm``
keeps the text order but reads it causally, ``magnet-plain`` is ``magnet`` without SPAN, and
``spm-joined`` drops the GAP where the text wraps, so the left side follows the suffix as running
text (the GAP stays when the left side is empty, so a gap at the text's start still reads as one),
``spm-gap-first`` writes that GAP first instead, and ``spm-end`` writes END in its place::

    BOS right left | s1 s2 ... END            spm-joined
    BOS GAP right left | s1 s2 ... END        spm-gap-first
    BOS right END left | s1 s2 ... END        spm-end

- The context never depends on the span lengths (a caller does not know them), so its keys and
  values are computed once and reused while the spans are decoded, in every layout.
- Position ids count real tokens: the span block continues at C.
- Span ``k`` fills the ``k``-th gap in text order; the model tells spans apart by counting ENDs.
- The MASK token replaces context tokens in masked next-token prediction (training only).

The four roles are played by tokens the tokenizer already has where it can (so the tied
embedding matrix needs no resize), chosen from :data:`RESERVED_CANDIDATES`; a tokenizer with none
of the candidates gets new tokens, and then the resized embeddings must be saved with the adapter.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

# Per role, tokens tried in order. SmolLM2's vocabulary has no mask or fill-in-the-middle tokens,
# but its code/notebook markup tokens (ids 3-16) never occur in prose.
RESERVED_CANDIDATES: dict[str, tuple[str, ...]] = {
    "mask": ("<mask>", "[MASK]", "<|mask|>", "<empty_output>"),
    "gap": ("<|fim_suffix|>", "<fim_suffix>", "<issue_comment>"),
    "span": ("<|fim_middle|>", "<fim_middle>", "<issue_start>"),
    "end": ("<|fim_pad|>", "<fim_pad>", "<issue_closed>"),
}
NEW_TOKENS = {
    "mask": "<|magnet_mask|>",
    "gap": "<|magnet_gap|>",
    "span": "<|magnet_span|>",
    "end": "<|magnet_end|>",
}


@dataclass(frozen=True)
class LayoutTokens:
    """The token strings that play each role (stored with the model) and their ids."""

    mask: str
    gap: str
    span: str
    end: str
    mask_id: int
    gap_id: int
    span_id: int
    end_id: int

    def strings(self) -> dict[str, str]:
        return {k: v for k, v in asdict(self).items() if not k.endswith("_id")}

    def ids(self) -> dict[str, int]:
        """Role -> token id, in the order of :meth:`strings` (mask, gap, span, end)."""
        return {role: getattr(self, f"{role}_id") for role in self.strings()}


def resolve_layout_tokens(
    tokenizer, configured: dict[str, str] | None = None
) -> tuple[LayoutTokens, list[str]]:
    """Pick the layout tokens for ``tokenizer``.

    ``configured`` (from a saved model config) wins. Returns the tokens and the list of token
    strings that must be *added* to the tokenizer (empty when existing tokens were reused).
    """
    vocab = tokenizer.get_vocab()
    chosen: dict[str, str] = {}
    to_add: list[str] = []
    for role, candidates in RESERVED_CANDIDATES.items():
        if configured and role in configured:
            token = configured[role]
        else:
            token = next((c for c in candidates if c in vocab), NEW_TOKENS[role])
        if token not in vocab:
            to_add.append(token)
        chosen[role] = token
    if to_add:
        tokenizer.add_special_tokens(
            {"additional_special_tokens": to_add}, replace_extra_special_tokens=False
        )
        vocab = tokenizer.get_vocab()
    ids = {f"{role}_id": vocab[token] for role, token in chosen.items()}
    return LayoutTokens(**chosen, **ids), to_add


def check_layout_tokens(layout: LayoutTokens, tokenizer) -> None:
    """Each role needs a token of its own, and none may be EOS (EOS ends a text; END closes a span)."""
    ids = layout.ids()
    if len(set(ids.values())) < len(ids):
        raise ValueError(f"the layout tokens {layout.strings()} must be four different tokens")
    eos = tokenizer.eos_token_id
    for role, token_id in ids.items():
        if token_id == eos:
            raise ValueError(
                f"the {role} token {getattr(layout, role)!r} is the tokenizer's EOS; choose another "
                "(END must close a span without also ending every text)"
            )


ROTATION_GAPS = ("wrap", "none", "front", "end")


@dataclass(frozen=True)
class InfillLayout:
    """How a text with gaps becomes one sequence (see the module docstring for the pictures)."""

    name: str
    suffix_first: bool  # the text after the first gap comes first, then the text before it
    bidirectional_context: bool  # context tokens attend to all context (else everything is causal)
    span_token: bool  # each span is opened by the SPAN role token
    description: str = ""
    # Under ``suffix_first``, where the GAP that marks the rotation goes: "wrap" (where the text wraps
    # round to the text before the first gap), "none" (the left side follows the suffix directly;
    # GAP is written there only when the left side is empty, a gap at the text's start), "front"
    # (first in the context, and none where the text wraps) or "end" (END in its place, where the
    # text wraps).
    rotation_gap: str = "wrap"

    def __post_init__(self) -> None:
        if self.rotation_gap not in ROTATION_GAPS:
            raise ValueError(f"rotation_gap {self.rotation_gap!r} is not one of {ROTATION_GAPS}")

    @property
    def mode(self) -> str:
        """The :class:`magnetsdk.attention.AttentionMode` that serves this layout: ``"hybrid"`` for a
        bidirectional context, else ``"causal"`` (a string, so this module needs no torch)."""
        return "hybrid" if self.bidirectional_context else "causal"


INFILL_LAYOUTS: dict[str, InfillLayout] = {
    layout.name: layout
    for layout in (
        InfillLayout("magnet", False, True, True, "text order, bidirectional context, SPAN opens each span"),
        InfillLayout("magnet-plain", False, True, False, "text order, bidirectional context, no SPAN token"),
        InfillLayout("spm", True, False, False, "suffix first, all causal, no SPAN token"),
        InfillLayout(
            "spm-joined", True, False, False, "suffix first, all causal, no GAP before the left side", "none"
        ),
        InfillLayout(
            "spm-gap-first", True, False, False, "suffix first, all causal, the rotation's GAP first", "front"
        ),
        InfillLayout(
            "spm-end", True, False, False, "suffix first, all causal, END where the text wraps", "end"
        ),
        InfillLayout("spm-span", True, False, True, "suffix first, all causal, SPAN opens each span"),
        InfillLayout("spm-bidirectional", True, True, False, "suffix first, bidirectional context"),
        InfillLayout("spm-bidirectional-span", True, True, True, "suffix first, bidirectional context, SPAN"),
        InfillLayout("psm", False, False, False, "text order, all causal, no SPAN token"),
        InfillLayout("psm-span", False, False, True, "text order, all causal, SPAN opens each span"),
    )
}
# The layout of models saved before layouts were a setting (and the paper's).
LEGACY_INFILL_LAYOUT = "magnet"
# The layout of new models and of models that were never adapted (chosen by measurement: docs/results.md).
DEFAULT_INFILL_LAYOUT = "spm"


def infill_layout(name: str | InfillLayout) -> InfillLayout:
    """The layout called ``name``, with an error that lists the layouts."""
    if isinstance(name, InfillLayout):
        return name
    try:
        return INFILL_LAYOUTS[name]
    except KeyError:
        raise ValueError(f"infill layout {name!r} is not one of {sorted(INFILL_LAYOUTS)}") from None


def check_span_training(
    layout: InfillLayout, mntp: bool, msg: bool, msg_mask_fraction: float, context_loss: bool
) -> None:
    """The rules a layout sets for missing-span training (the collator and TrainConfig both check them)."""
    if not layout.bidirectional_context and mntp and msg and msg_mask_fraction > 0:
        raise ValueError(
            f"the {layout.name!r} layout reads its context causally, so MSG examples cannot be "
            "MNTP-masked too; set msg_mask_fraction=0 (MNTP then trains in its own examples)"
        )
    if context_loss and layout.bidirectional_context:
        raise ValueError(
            f"context_loss needs a causal layout; under {layout.name!r} a context token sees itself"
        )


@dataclass
class LaidOut:
    """One laid-out sequence; lists of equal length."""

    input_ids: list[int]
    # Tokens that attend causally: the span block, and under a causal layout the context too.
    is_span: list[bool]
    # For each span token that is a prediction target, the index of the position whose output
    # predicts it (the token before it). Used for the missing-span loss.
    target_positions: list[int]
    targets: list[int]
    context_length: int
    # Where each segment's tokens sit in the sequence (``segment_positions[i][j]``: token j of segment i).
    segment_positions: list[list[int]] = field(default_factory=list)
    # Whether each target is a span token (True) or the END that closes a span (False).
    target_is_token: list[bool] = field(default_factory=list)


def lay_out(
    segments: list[list[int]],
    tokens: LayoutTokens,
    spans: list[list[int]] | None = None,
    prefix: list[int] | None = None,
    layout: InfillLayout | str = LEGACY_INFILL_LAYOUT,
) -> LaidOut:
    """Lay out ``segments`` (the text between gaps, ``g + 1`` pieces for ``g`` gaps) and ``spans``.

    With ``spans=None`` (inference) the sequence ends where the first span begins (after SPAN in
    the ``-span`` layouts, after the context otherwise). With spans (training and scoring), each
    span is written out and closed with END, and the targets are every span token and each END.
    ``prefix`` (e.g. a BOS token) is placed before the context.
    """
    layout = infill_layout(layout)
    gaps = len(segments) - 1
    if gaps < 1 and spans is None:
        raise ValueError("a text to infill needs at least one gap (two segments)")
    if spans is not None and len(spans) != gaps:
        raise ValueError(f"{gaps} gaps need {gaps} spans, got {len(spans)}")
    order = [*range(1, gaps + 1), 0] if layout.suffix_first else list(range(gaps + 1))
    context: list[int] = list(prefix or [])
    rotation = layout.rotation_gap if layout.suffix_first else "wrap"
    # What stands where the rotated text wraps round to the text before the first gap (the marker
    # before segment 0); every other segment after the first is preceded by a GAP.
    wrap_marker = {
        "wrap": [tokens.gap_id],
        "none": [] if segments[0] else [tokens.gap_id],
        "front": [],
        "end": [tokens.end_id],
    }[rotation]
    if rotation == "front":
        context.append(tokens.gap_id)
    segment_positions: list[list[int]] = [[] for _ in segments]
    for k, index in enumerate(order):
        if k:
            context.extend(wrap_marker if index == 0 else [tokens.gap_id])
        segment_positions[index] = list(range(len(context), len(context) + len(segments[index])))
        context.extend(segments[index])
    ids = list(context)
    target_positions: list[int] = []
    targets: list[int] = []
    is_token: list[bool] = []
    opener = [tokens.span_id] if layout.span_token else []
    if spans is None:
        ids.extend(opener)
    else:
        for span in spans:
            ids.extend(opener)
            for j, token in enumerate([*span, tokens.end_id]):
                target_positions.append(len(ids) - 1)
                targets.append(token)
                is_token.append(j < len(span))
                ids.append(token)
    causal_context = not layout.bidirectional_context
    is_span = [causal_context] * len(context) + [True] * (len(ids) - len(context))
    return LaidOut(ids, is_span, target_positions, targets, len(context), segment_positions, is_token)
