"""Fill gaps in a text using both sides, in the model's :class:`magnetsdk.layout.InfillLayout`.

The context (the text with each gap replaced by one GAP token, ordered as the layout says) is run
through the model once and its keys and values are cached; the spans are then decoded one token at
a time from that cache by :func:`magnetsdk.decoding.decode`. No context token attends to a span
token in any layout, so the cached context is exactly what a full recompute would produce at every
step; ``use_cache=False`` runs that recompute and is the reference the tests compare against.

This module owns the span state machine (END closes a span, SPAN opens the next one where the
layout has it); the decode loop, sampling and seeding are :mod:`magnetsdk.decoding`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from magnetsdk.decoding import Prompt, Sampling, decode
from magnetsdk.layout import InfillLayout, LayoutTokens, infill_layout, lay_out

DEFAULT_GAP_MARKER = "[GAP]"


@dataclass
class InfillResult:
    text: str  # the input with every gap filled
    spans: list[str]  # the generated text of each gap, in order
    span_ids: list[list[int]] = field(repr=False, default_factory=list)


def split_gaps(text: str, marker: str) -> list[str]:
    if not marker:
        raise ValueError("gap marker must be a non-empty string")
    pieces = text.split(marker)
    if len(pieces) < 2:
        raise ValueError(
            f"no gap marker {marker!r} in the text; mark each gap with {marker!r} "
            "(or pass left=... and right=..., or choose another marker with gap_marker=...)"
        )
    return pieces


def move_spaces_into_gaps(segments: list[str]) -> tuple[list[str], list[str]]:
    """Take the spaces that end a segment before a gap out of it: ``"is in [GAP]"`` is read as
    ``"is in"`` followed by a span such as ``" Paris"``, because a word's leading space belongs to the
    word (that is how the tokenizer splits text, and how training cuts spans). Returns the segments
    and the spaces taken before each gap (:func:`join_filled` puts them back when a span lacks one)."""
    kept, moved = [], []
    for i, segment in enumerate(segments):
        if i == len(segments) - 1:
            kept.append(segment)
            continue
        core = segment.rstrip(" ")
        kept.append(core)
        moved.append(segment[len(core) :])
    return kept, moved


def join_filled(segments: list[str], spans: list[str], moved: list[str]) -> tuple[str, list[str]]:
    """The filled text and each span as written into it (with the moved space where it had none)."""
    written = [
        space + span if space and not span[:1].isspace() else span
        for span, space in zip(spans, moved, strict=True)
    ]
    return segments[0] + "".join(s + seg for s, seg in zip(written, segments[1:], strict=True)), written


@dataclass
class SpanProgram:
    """One text's spans: decode 1..``max_new_tokens`` tokens per gap; END (or EOS) closes a span."""

    gaps: int
    tokens: LayoutTokens
    layout: InfillLayout
    max_new_tokens: int
    stop_ids: frozenset[int]
    spans: list[list[int]] = field(default_factory=list)
    current: list[int] = field(default_factory=list)
    force: int | None = None  # the SPAN that opens the next gap, decided last step
    done: bool = False

    def history(self) -> Sequence[int]:
        return [t for span in self.spans for t in span] + self.current

    def suppressed(self) -> Sequence[int]:
        # A gap is there because something is missing: a span gets at least one token before END
        # or EOS may close it (a model that reads "sentence ." as the end of a text would otherwise
        # close every span after a full stop at once).
        return sorted(self.stop_ids) if not self.current and self.force is None else ()

    def advance(self, choice: int) -> int | None:
        if self.done:
            return None
        if self.force is not None:
            token, self.force = self.force, None
            return token
        if choice not in self.stop_ids and len(self.current) < self.max_new_tokens:
            self.current.append(choice)
            return choice
        self.spans.append(self.current)
        self.current = []
        if len(self.spans) == self.gaps:
            self.done = True
            return None
        if self.layout.span_token:
            self.force = self.tokens.span_id
        return self.tokens.end_id


def decode_spans(
    model: torch.nn.Module,
    contexts: list[list[list[int]]],
    tokens: LayoutTokens,
    prefix: list[int],
    pad_id: int,
    max_new_tokens: int = 32,
    sampling: Sampling | None = None,
    layout: InfillLayout | str = "magnet",
    use_cache: bool = True,
    eos_id: int | None = None,
    first_row: int = 0,
    step_logits: list[torch.Tensor] | None = None,
) -> list[list[list[int]]]:
    """Decode the spans of a batch of texts; ``contexts[i]`` is text ``i``'s token segments.

    Returns, per text, the token ids of each span (END excluded). A span is closed after
    ``max_new_tokens`` tokens if the model has not closed it. ``step_logits``, when given,
    collects the logits of every step (for equivalence tests).
    """
    layout = infill_layout(layout)
    prompts = []
    for segments in contexts:
        laid = lay_out(segments, tokens, spans=None, prefix=prefix, layout=layout)
        prompts.append(Prompt(laid.input_ids, laid.is_span))
    stop_ids = frozenset({tokens.end_id} | ({eos_id} if eos_id is not None else set()))
    programs = [
        SpanProgram(len(segments) - 1, tokens, layout, max_new_tokens, stop_ids) for segments in contexts
    ]
    decode(
        model,
        prompts,
        programs,
        layout.mode,
        sampling or Sampling(),
        pad_id,
        # Layout tokens other than END never belong inside a span; an EOS closes the span like END.
        banned_ids=(tokens.gap_id, tokens.span_id, tokens.mask_id),
        use_cache=use_cache,
        first_row=first_row,
        step_logits=step_logits,
    )
    return [program.spans for program in programs]
