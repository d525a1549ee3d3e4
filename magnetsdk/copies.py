"""What counts as a fill copying its own text, for the two copy rules of ``Magnet.infill``.

- Words (``resample_copies=N``, and the copy rate ``magnet eval infill`` reports): a fill copies when
  it holds a run of :data:`COPY_WORDS` words that also occurs inside one context segment of its text.
- Loops (the loop rate ``magnet eval infill`` reports): a fill loops when it repeats a run of
  :data:`LOOP_UNITS` of its own units (words and single punctuation marks, so ``@-@-@-@`` loops too).
- Tokens (``copy_guard=N``): :func:`context_runs` maps every run of N - 1 context tokens to the
  tokens that follow it, so the decode can hold those back (``infilling.SpanProgram``).

Defaults: a greedy fill of the shipped model loops more often than not ("He was named ... for the
second time in 2012 . He was named ... for the third time ..."). So ``Magnet.infill`` by default
lets no fill repeat a run of :data:`DEFAULT_NO_REPEAT_NGRAM` of its own tokens, and since a fill
that may not repeat itself writes a run of its context more often, a fill that then copies is
resampled (:data:`DEFAULT_RESAMPLE_COPIES` fills, ranked :data:`DEFAULT_RESAMPLE_RANKING`). The three
were chosen together by measurement (docs/results.md, "Loops in fills"); each can be turned off.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# A fill copies its text when it holds a run of this many of the text's words (``magnet eval infill``
# reports the share that do; ``Magnet.infill(resample_copies=N)`` replaces them).
COPY_WORDS = 5


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def copies_text(span: str, sides: Sequence[str], n: int = COPY_WORDS) -> bool:
    """Whether ``span`` holds a run of ``n`` words that also occurs inside one of ``sides``."""
    found = words(span)
    if len(found) < n:
        return False
    grams = {tuple(found[i : i + n]) for i in range(len(found) - n + 1)}
    for side in sides:
        side_words = words(side)
        if any(tuple(side_words[i : i + n]) in grams for i in range(len(side_words) - n + 1)):
            return True
    return False


# A fill loops when it repeats a run of this many of its own units (``loop_offsets``).
LOOP_UNITS = 5

# A unit is a word or one punctuation mark: a fill looping on "@-@-@-@" or ", , ," loops in units.
_UNIT = re.compile(r"\w+|[^\w\s]")


def loop_offsets(text: str, n: int = LOOP_UNITS) -> list[int]:
    """Character offsets of the units of ``text`` that complete a repeat of an earlier run of ``n`` units.

    The first unit of a loop that does so is where the loop becomes certain; every later unit that
    continues it completes another repeated run. Empty when ``text`` does not loop.
    """
    found = list(_UNIT.finditer(text.lower()))
    units = [m.group() for m in found]
    first_start: dict[tuple[str, ...], int] = {}
    offsets = []
    for end in range(n - 1, len(units)):
        run = tuple(units[end - n + 1 : end + 1])
        start = first_start.setdefault(run, end - n + 1)
        if start < end - n + 1:
            offsets.append(found[end].start())
    return offsets


def loops(text: str, n: int = LOOP_UNITS) -> bool:
    """Whether ``text`` repeats a run of ``n`` of its own units."""
    return bool(loop_offsets(text, n))


def copies_segments(spans: Sequence[str], segments: Sequence[str]) -> bool:
    """Whether any of a text's fills holds a run of :data:`COPY_WORDS` words of its context."""
    return any(copies_text(span, segments) for span in spans)


# How ``Magnet.infill(resample_copies=N)`` ranks the fills that may replace a copy. "total": as
# ``candidates=`` ranks, each fill and its ``ranking.shorter_spans`` cuts by summed log-likelihood,
# which a short text wins (" In 1985," before a whole sentence). "per-token": the decoded fills
# alone, by mean log-likelihood per scored token (docs/results.md, "Resampling fills that copy").
RESAMPLE_RANKINGS = ("total", "per-token")
# How ``Magnet.infill(candidates=N)`` scores the fills it ranks (``magnetsdk.ranking``). "total": the
# filled text from where the fills differ; "right": the text after the fill alone, among fills that
# end a sentence and copy nothing. ``candidate_ranking="auto"`` (the default) ranks a text that opens
# with a gap by "right", the others by "total" (benchmarks/results/ranked-start-2026-12-07/rule.md).
RANKINGS = ("total", "right")

# ``Magnet.infill``'s loop guard and copy resampling (benchmarks/results/loop-guard-2026-12-07/rule-2.md).
DEFAULT_NO_REPEAT_NGRAM = 4
DEFAULT_RESAMPLE_COPIES = 8
DEFAULT_RESAMPLE_RANKING = "per-token"
# ``Magnet.infill(cut_unclosed=...)`` (benchmarks/results/sentence-cut-2026-12-07/rule.md).
DEFAULT_CUT_UNCLOSED = True
# ``Magnet.infill(whole_sentences=...)``: a gap between sentences closes only after a sentence end
# (benchmarks/results/whole-sentences-2026-12-07/rule.md).
DEFAULT_WHOLE_SENTENCES = True
# ``Magnet.infill(max_new_tokens=...)``, ``magnet infill`` and ``magnet eval infill``: a sentence-long
# fill needs about 33 tokens; at 32, half the dev fills ended inside a sentence
# (benchmarks/results/infill-budget-2026-12-07/rule.md).
DEFAULT_INFILL_TOKENS = 48


def check_resample_ranking(ranking: str) -> None:
    if ranking not in RESAMPLE_RANKINGS:
        raise ValueError(
            f"resample_ranking={ranking!r} is not one of {', '.join(RESAMPLE_RANKINGS)}: how the sampled "
            "fills that may replace a copy are ranked"
        )


def check_resample_copies(count: int) -> None:
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(
            f"resample_copies={count!r} must be an integer of at least 0: how many fills to sample "
            "for a fill that copies its text (0: off)"
        )


def context_runs(segments: Sequence[Sequence[int]], size: int) -> dict[tuple[int, ...], frozenset[int]]:
    """Each run of ``size - 1`` tokens inside one context segment -> the tokens that follow it there.

    A span that has just written such a run may not write one of those tokens next, so no span
    holds a ``size``-token run of its text's context (the copy guard)."""
    found: dict[tuple[int, ...], set[int]] = {}
    for segment in segments:
        for start in range(len(segment) - size + 1):
            found.setdefault(tuple(segment[start : start + size - 1]), set()).add(segment[start + size - 1])
    return {run: frozenset(after) for run, after in found.items()}
