"""Fill gaps in a text using both sides, in the model's :class:`magnetsdk.layout.InfillLayout`.

The context (the text with each gap replaced by one GAP token, ordered as the layout says) is run
through the model once and its keys and values are cached; the spans are then decoded one token at
a time from that cache by :func:`magnetsdk.decoding.decode`. No context token attends to a span
token in any layout, so the cached context is exactly what a full recompute would produce at every
step; ``use_cache=False`` runs that recompute and is the reference the tests compare against.

It owns the span state machine (END closes a span, SPAN opens one where the layout has it); the
decode loop, sampling and seeding are :mod:`magnetsdk.decoding`'s.

Ranking (``Magnet.infill(candidates=N)``): a fill decoded left to right reads the right side but
commits to each token before it knows how the sentence will meet that side. With several
candidates, each whole filled text is scored by the same weights read causally (the generator), and
the fill whose text is most likely wins: :func:`fill_log_likelihood`. The right side then votes
through every one of its tokens, which is what the decode order alone cannot give.

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

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from magnetsdk.checks import check_line_breaks
from magnetsdk.copies import DEFAULT_INFILL_TOKENS, context_runs, copies_segments
from magnetsdk.decoding import Prompt, Sampling, check_decoding, decode
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


def line_break_ids(tokenizer) -> frozenset[int]:
    """The ids of every token whose text holds a line break (``\\n`` or ``\\r``), special tokens aside."""
    special = set(tokenizer.all_special_ids)
    ids = [i for i in range(len(tokenizer)) if i not in special]
    texts = tokenizer.batch_decode([[i] for i in ids])
    return frozenset(i for i, text in zip(ids, texts, strict=True) if has_line_break(text))


def may_break_lines(text: str, line_breaks: str) -> bool:
    """Whether the fills of ``text`` may hold a line break: ``"auto"`` when the text has one itself."""
    rule = check_line_breaks(line_breaks)
    return rule == "allow" or (rule == "auto" and has_line_break(text))


@dataclass(frozen=True)
class InfillCandidate:
    """One fill of all of a text's gaps and its score: the causal log-likelihood of the filled text
    where it differs from the other candidates (:func:`fill_log_likelihood`)."""

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


# Ranking reads RANK_CONTEXT tokens before the candidates' first difference, RANK_AFTER of the shared text after.
RANK_CONTEXT = 64
RANK_AFTER = 32


def fill_log_likelihood(
    model: torch.nn.Module,
    texts: list[list[int]],
    prefix: list[int],
    pad_id: int,
    context: int = RANK_CONTEXT,
    after: int = RANK_AFTER,
    batch_size: int = 8,
    per_token: bool = False,
) -> list[float]:
    """The causal log-likelihood (natural log, summed; ``per_token``: averaged over the scored
    tokens) of where each of ``texts`` differs from the others.

    The texts are fills of one text. Each is scored from the first token where they differ to
    ``after`` tokens into the ending they all share, read after ``prefix`` and at most ``context``
    tokens before that: the part a fill changes, and how it meets the text after the gap. The
    shared beginning adds the same to every score, and the shared ending beyond ``after`` tokens
    little, so the scores rank the texts of one call; they are not comparable across calls.
    """
    from magnetsdk.eval.scoring import ScoredSequence, target_nll

    shortest = min(len(ids) for ids in texts)
    first = next((i for i in range(shortest) if len({ids[i] for ids in texts}) > 1), shortest)
    shared_end = next(
        (i for i in range(shortest - first) if len({ids[len(ids) - 1 - i] for ids in texts}) > 1),
        shortest - first,
    )
    sequences = []
    for ids in texts:
        full = list(prefix) + list(ids)
        start = max(len(prefix) + first, 1)  # with no prefix, the first token has no prediction
        end = len(full) - max(0, shared_end - after)
        begin = max(0, start - context)
        window = full[begin:end]
        targets = list(range(start - begin - 1, end - begin - 1))
        sequences.append(ScoredSequence(window, targets, full[start:end]))
    scored = target_nll(model, sequences, "causal", pad_id, batch_size)
    return [-float(nll.mean() if per_token else nll.sum()) for nll in scored]


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


def candidate_sampling(
    candidates: int, temperature: float, top_p: float, sampling: Sampling
) -> Sampling | None:
    """How ``Magnet.infill`` samples its extra candidates, or ``None`` when there is nothing to rank."""
    if isinstance(candidates, bool) or not isinstance(candidates, int) or candidates < 1:
        raise ValueError(
            f'candidates={candidates!r} must be "auto" or an integer of at least 1 (1: one fill, no ranking)'
        )
    if candidates == 1:
        return None
    return sample_settings(temperature, top_p, sampling, "or candidates=1")


def sample_settings(temperature: float, top_p: float, sampling: Sampling, instead: str) -> Sampling:
    """``sampling`` with the candidates' temperature and top-p: how ``Magnet.infill`` samples the
    fills it ranks or resamples. ``instead`` ends the error that a temperature of 0 raises."""
    check_decoding(1, temperature, top_p)
    if temperature == 0:
        raise ValueError(
            "candidate_temperature=0 would make every sampled fill the greedy one; "
            f"give a temperature above 0 (e.g. 0.8) {instead}"
        )
    return Sampling(temperature, top_p, sampling.repetition_penalty, sampling.seed, sampling.no_repeat_ngram)


# A span's final punctuation, and the marks after which a shorter span may end (a clause boundary).
CLOSING_PUNCTUATION = ".,;:!?"


def shorter_spans(span: str) -> list[str]:
    """``span`` ended early at each clause boundary (after punctuation followed by a space), and each
    of those and ``span`` itself without its final punctuation: the other ways the span could meet
    the text after it. A model trained on whole-sentence spans ends most spans with a full stop, also
    before a right side that goes on with ", the capital of France."."""
    cuts = [
        span[: i + 1] for i in range(len(span) - 1) if span[i] in CLOSING_PUNCTUATION and span[i + 1] == " "
    ]
    found: list[str] = []
    for cut in [*cuts, span]:
        for option in (cut, cut.rstrip().rstrip(CLOSING_PUNCTUATION)):
            if option.strip() and option != span and option not in found:
                found.append(option)
    return found


def best_fill(
    magnet: Any,
    segments: list[str],
    options: list[list[list[int]]],
    moved: list[str],
    ranked: bool,
    without_copies: bool = False,
    ranking: str = "total",
) -> InfillResult | None:
    """One text's result: its only fill, or the most likely of its candidates.

    ``options`` holds each decoded candidate's span ids. Ranked, the candidates are the decoded
    fills and, for each, every :func:`shorter_spans` variant of one gap at a time; the filled texts
    are scored by :func:`fill_log_likelihood` and the first of the best wins. ``candidates`` lists
    the fills that were ranked, most likely first. ``without_copies`` ranks only the fills that do
    not copy their text (:func:`copies_segments`) and returns ``None`` when every one does.
    ``ranking="per-token"`` ranks the decoded fills alone, without their shorter variants, by their
    mean log-likelihood per scored token (:data:`magnetsdk.copies.RESAMPLE_RANKINGS`)."""
    tokenizer = magnet.tokenizer
    decoded = [[tokenizer.decode(s, skip_special_tokens=True) for s in ids] for ids in options]
    if not ranked:
        text, written = join_filled(segments, decoded[0], moved)
        return InfillResult(text=text, spans=written, span_ids=options[0])
    fills: dict[str, tuple[list[str], list[list[int]]]] = {}  # filled text -> (spans, span ids)
    for spans, ids in zip(decoded, options, strict=True):
        variants = [(spans, ids)]
        for gap, span in enumerate(spans if ranking == "total" else []):
            for shorter in shorter_spans(span):
                cut = [*spans[:gap], shorter, *spans[gap + 1 :]]
                cut_ids = [
                    *ids[:gap],
                    tokenizer(shorter, add_special_tokens=False)["input_ids"],
                    *ids[gap + 1 :],
                ]
                variants.append((cut, cut_ids))
        for spans_v, ids_v in variants:
            text, written = join_filled(segments, spans_v, moved)
            fills.setdefault(text, (written, ids_v))  # the same text twice is scored once
    if without_copies:
        fills = {text: fill for text, fill in fills.items() if not copies_segments(fill[0], segments)}
        if not fills:
            return None
    # A gap is there because a word is missing: a fill of punctuation alone (" ,") can read as the
    # likeliest text, so it is ranked only when no candidate holds a letter or digit.
    worded = [text for text, (spans, _) in fills.items() if all(re.search(r"\w", s) for s in spans)]
    texts = worded or list(fills)
    scores = fill_log_likelihood(
        magnet.model,
        [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts],
        magnet.prefix,
        magnet.pad_id,
        batch_size=16,
        per_token=ranking == "per-token",
    )
    order = sorted(range(len(texts)), key=lambda i: -scores[i])  # a stable sort: earlier wins ties
    best = texts[order[0]]
    return InfillResult(
        text=best,
        spans=fills[best][0],
        span_ids=fills[best][1],
        candidates=[InfillCandidate(fills[texts[i]][0], scores[i]) for i in order],
    )


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
        held = self.held_back if self.current else self.held_back | self.stop_ids
        if self.copy_guard and len(self.current) >= self.copy_guard - 1:
            run = tuple(self.current[len(self.current) - self.copy_guard + 1 :])
            held = held | self.context_next.get(run, frozenset())
        return sorted(held)

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
) -> list[list[list[int]]]:
    """Decode the spans of a batch of texts; ``contexts[i]`` is text ``i``'s token segments.

    Returns, per text, the token ids of each span (END excluded). A span is closed after
    ``max_new_tokens`` tokens if the model has not closed it. ``held_back[i]``, when given, are
    tokens text ``i``'s spans may not hold (see :func:`line_break_ids`). ``copy_guard=N`` (0: off)
    keeps every span from holding a run of N tokens of its text's context; ``pool_stops`` picks END
    and EOS as one token (:func:`magnetsdk.decoding.pool_tokens`). ``step_logits`` collects each step's logits.
    """
    if held_back is not None and len(held_back) != len(contexts):
        raise ValueError(f"held_back has {len(held_back)} entries for {len(contexts)} texts")
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
        )
        for segments, held in zip(contexts, held_back or [frozenset()] * len(contexts), strict=True)
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
