"""Fill gaps in a text using both sides, in the model's :class:`magnetsdk.layout.InfillLayout`.

The context (the text with each gap replaced by one GAP token, ordered as the layout says) is run
through the model once and its keys and values are cached; the spans are then decoded one token at
a time from that cache by :func:`magnetsdk.decoding.decode`. No context token attends to a span
token in any layout, so the cached context is exactly what a full recompute would produce at every
step; ``use_cache=False`` runs that recompute and is the reference the tests compare against.

It owns the span state machine (END closes a span, SPAN opens one where the layout has it); the
decode loop, sampling and seeding are :mod:`magnetsdk.decoding`'s.

Ranking the fills of ``candidates=N`` and of the copy resampling is :mod:`magnetsdk.ranking`'s.

Copies (``Magnet.infill(resample_copies=N)``, :mod:`magnetsdk.copies`): a fill that restates a
run of :data:`~magnetsdk.copies.COPY_WORDS` words of its own text (the left side again, or the
right side early) is replaced by the likeliest of N sampled fills that do not, ranked as candidates
are. The fills that do not copy are left alone, and no token is banned inside the decode: a ban
(``copy_guard=``) makes the model respell the names it would have copied (docs/results.md, "A copy
guard, ..."). Resampling and a loop guard are on by default (why: :mod:`magnetsdk.copies`).

Line breaks (``Magnet.infill(line_breaks=...)``): by default a fill may break a line only where its
text holds a line break itself. A gap inside a line is filled within that line; without the rule a
model trained on running text, where a paragraph often ends after a full stop, opens a new
paragraph in the middle of one (docs/results.md, "Line breaks in fills").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import torch

from magnetsdk.checks import check_line_breaks
from magnetsdk.copies import DEFAULT_INFILL_TOKENS, context_runs
from magnetsdk.decoding import Prompt, Sampling, decode
from magnetsdk.layout import InfillLayout, LayoutTokens, infill_layout, lay_out

DEFAULT_GAP_MARKER = "[GAP]"


def given_guards(**guards: int | str | bool | None) -> dict[str, int | str | bool]:
    """The fill guards a caller set (``no_repeat_ngram=``, ``copy_guard=``, ...), unset ones left out.

    A front end (the CLI, ``magnet eval infill``) passes on only what its user asked for, so that
    ``Magnet.infill``'s own defaults stay the one place where an unset guard is decided.
    """
    return {name: value for name, value in guards.items() if value is not None}


def has_line_break(text: str) -> bool:
    return "\n" in text or "\r" in text


def token_ids_where(tokenizer, holds: Callable[[str], bool]) -> frozenset[int]:
    """The ids of every token, special tokens aside, whose own text ``holds`` is true of."""
    special = set(tokenizer.all_special_ids)
    ids = [i for i in range(len(tokenizer)) if i not in special]
    texts = tokenizer.batch_decode([[i] for i in ids])
    return frozenset(i for i, text in zip(ids, texts, strict=True) if holds(text))


def line_break_ids(tokenizer) -> frozenset[int]:
    """The ids of every token whose text holds a line break (``\\n`` or ``\\r``), special tokens aside."""
    return token_ids_where(tokenizer, has_line_break)


def may_break_lines(text: str, line_breaks: str) -> bool:
    """Whether the fills of ``text`` may hold a line break: ``"auto"`` when the text has one itself."""
    rule = check_line_breaks(line_breaks)
    return rule == "allow" or (rule == "auto" and has_line_break(text))


@dataclass(frozen=True)
class InfillCandidate:
    """One fill of all of a text's gaps and its score: the causal log-likelihood of the filled text
    where it differs from the other candidates, or with ``candidate_ranking="right"`` of the text
    after the fill alone (``ranking.fill_log_likelihood``)."""

    spans: list[str]
    log_likelihood: float


@dataclass
class InfillResult:
    text: str  # the input with every gap filled
    spans: list[str]  # the generated text of each gap, in order
    span_ids: list[list[int]] = field(repr=False, default_factory=list)
    # With candidates > 1: every distinct fill, most likely first (the first is the one chosen).
    candidates: list[InfillCandidate] = field(repr=False, default_factory=list)
    # With resample_copies=N: whether the decoded fill copied its text and a sampled one replaced it.
    resampled: bool = False
    cut: list[bool] = field(default_factory=list)  # with cut_unclosed: each gap cut (magnetsdk.unclosed)


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


def without_opening_space(
    result: InfillResult, segments: list[str], moved: list[str], tokenizer
) -> InfillResult:
    """``result`` with its first fill's leading whitespace dropped when the text opens with that gap
    (nothing before it, not even a space): a sampled fill may start with " A", and the filled text
    would then start with a space. Ranking reads the fill as decoded; only what is returned changes."""
    span = result.spans[0]
    if segments[0] or moved[0] or span == span.lstrip():
        return result
    spans = [span.lstrip(), *result.spans[1:]]
    ids = [tokenizer(spans[0], add_special_tokens=False)["input_ids"], *result.span_ids[1:]]
    text, written = join_filled(segments, spans, [""] * len(spans))
    return replace(result, text=text, spans=written, span_ids=ids)


@dataclass
class SpanProgram:
    """One text's spans: decode 1..``max_new_tokens`` tokens per gap; END (or EOS) closes a span."""

    gaps: int
    tokens: LayoutTokens
    layout: InfillLayout
    max_new_tokens: int
    stop_ids: frozenset[int]
    held_back: frozenset[int] = frozenset()  # tokens no span of this text may hold (line breaks)
    # The copy guard: each run of ``copy_guard - 1`` context tokens -> the tokens that follow it
    # there; a span may not pick one of those after the same run (see :func:`context_runs`).
    copy_guard: int = 0
    context_next: dict[tuple[int, ...], frozenset[int]] = field(default_factory=dict)
    # Whole sentences: a gap marked True here (one between sentences) may be closed by END or EOS
    # only right after a token in ``sentence_final`` (one that ends a sentence) that is not the span's first.
    sentence_gaps: Sequence[bool] = ()
    sentence_final: frozenset[int] = frozenset()
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
        if self.force is not None:
            return ()
        held = self.held_back if self.may_close() else self.held_back | self.stop_ids
        if self.copy_guard and len(self.current) >= self.copy_guard - 1:
            run = tuple(self.current[len(self.current) - self.copy_guard + 1 :])
            held = held | self.context_next.get(run, frozenset())
        return sorted(held)

    def may_close(self) -> bool:
        """Whether END or EOS may close the current span now."""
        if not self.current:
            return False
        gap = len(self.spans)
        whole = gap < len(self.sentence_gaps) and self.sentence_gaps[gap]
        # One sentence-final token alone (" .") is no sentence.
        return not whole or (len(self.current) > 1 and self.current[-1] in self.sentence_final)

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
    max_new_tokens: int = DEFAULT_INFILL_TOKENS,
    sampling: Sampling | None = None,
    layout: InfillLayout | str = "magnet",
    use_cache: bool = True,
    eos_id: int | None = None,
    first_row: int = 0,
    step_logits: list[torch.Tensor] | None = None,
    held_back: Sequence[frozenset[int]] | None = None,
    copy_guard: int = 0,
    pool_stops: bool = False,
    sentence_gaps: Sequence[Sequence[bool]] | None = None,
    sentence_final_ids: frozenset[int] = frozenset(),
) -> list[list[list[int]]]:
    """Decode the spans of a batch of texts; ``contexts[i]`` is text ``i``'s token segments.

    Returns, per text, the token ids of each span (END excluded). A span is closed after
    ``max_new_tokens`` tokens if the model has not closed it. ``held_back[i]``, when given, are
    tokens text ``i``'s spans may not hold (see :func:`line_break_ids`). ``copy_guard=N`` (0: off)
    keeps every span from holding a run of N tokens of its text's context; ``pool_stops`` picks END
    and EOS as one token (:func:`magnetsdk.decoding.pool_tokens`). ``sentence_gaps[i][j]`` True keeps
    text ``i``'s gap ``j`` open until its span ends on one of ``sentence_final_ids``
    (:func:`magnetsdk.unclosed.sentence_final_ids`) or reaches ``max_new_tokens``. ``step_logits`` collects each step's logits.
    """
    for name, given in (("held_back", held_back), ("sentence_gaps", sentence_gaps)):
        if given is not None and len(given) != len(contexts):
            raise ValueError(f"{name} has {len(given)} entries for {len(contexts)} texts")
    layout = infill_layout(layout)
    prompts = []
    for segments in contexts:
        laid = lay_out(segments, tokens, spans=None, prefix=prefix, layout=layout)
        prompts.append(Prompt(laid.input_ids, laid.is_span))
    stop_ids = frozenset({tokens.end_id} | ({eos_id} if eos_id is not None else set()))
    programs = [
        SpanProgram(
            len(segments) - 1,
            tokens,
            layout,
            max_new_tokens,
            stop_ids,
            held,
            copy_guard,
            context_runs(segments, copy_guard) if copy_guard else {},
            whole,
            sentence_final_ids,
        )
        for segments, held, whole in zip(
            contexts,
            held_back or [frozenset()] * len(contexts),
            sentence_gaps or [()] * len(contexts),
            strict=True,
        )
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
        pooled_ids=(tokens.end_id, eos_id) if pool_stops and eos_id is not None else (),
        use_cache=use_cache,
        first_row=first_row,
        step_logits=step_logits,
    )
    return [program.spans for program in programs]
