"""Rank several fills of one text: the filled text the model finds most likely wins.

A fill decoded left to right reads the right side but commits to each token before it knows how the
sentence will meet that side. With several candidates (``Magnet.infill(candidates=N)``, and the
fills ``resample_copies=N`` samples), each whole filled text is scored by the same weights read
causally (the generator), and the fill whose text is most likely wins: :func:`fill_log_likelihood`.
The right side then votes through every one of its tokens, which is what the decode order alone
cannot give. :func:`shorter_spans` adds each fill ended early at a clause boundary, so the right
side also votes on where a fill ends.

How the fills are scored is the ranking (:data:`RANKINGS`): ``"total"`` scores the filled text from
where the fills differ to 32 tokens into the right side, the fill's own tokens included (best for a
word or phrase inside a sentence); ``"right"`` scores only those 32 tokens after the fill, among
fills that end a sentence and copy nothing: the fill that best explains what follows it wins (best
for a gap at a text's start, where a greedy fill guesses a topic the right side only implies).
``"auto"`` (the default) is ``"right"`` for a gap at a text's start and ``"total"`` otherwise:
:func:`candidate_plan`, measured in ``docs/results.md``, "Ranked fills at a text's start".
"""

from __future__ import annotations

import re
from typing import Any

import torch

from magnetsdk.copies import RANKINGS, copies_segments
from magnetsdk.decoding import Sampling, check_decoding
from magnetsdk.infilling import InfillCandidate, InfillResult, join_filled
from magnetsdk.unclosed import ends_inside_a_sentence, gap_inside_a_sentence

# How many fills ``Magnet.infill(candidates="auto")`` (the default) ranks for a text with a gap inside a
# sentence or at its start; a text whose gaps all sit between sentences or at its end gets one greedy
# fill (benchmarks/results/phrase-gaps-2026-12-07/rule.md, ranked-start-2026-12-07/rule.md).
AUTO_CANDIDATES = 8

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
    after_only: bool = False,
) -> list[float]:
    """The causal log-likelihood (natural log, summed; ``per_token``: averaged over the scored
    tokens) of where each of ``texts`` differs from the others.

    The texts are fills of one text. Each is scored from the first token where they differ to
    ``after`` tokens into the ending they all share, read after ``prefix`` and at most ``context``
    tokens before that: the part a fill changes, and how it meets the text after the gap. The
    shared beginning adds the same to every score, and the shared ending beyond ``after`` tokens
    little, so the scores rank the texts of one call; they are not comparable across calls.
    ``after_only`` scores only the ``after`` tokens of the shared ending (how well each fill
    predicts what follows it); texts that share no ending are scored as without it.
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
        if after_only and shared_end:
            start = max(len(full) - shared_end, 1)
        begin = max(0, start - context)
        window = full[begin:end]
        targets = list(range(start - begin - 1, end - begin - 1))
        sequences.append(ScoredSequence(window, targets, full[start:end]))
    scored = target_nll(model, sequences, "causal", pad_id, batch_size)
    return [-float(nll.mean() if per_token else nll.sum()) for nll in scored]


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


def gap_at_start(segments: list[str]) -> bool:
    """Whether a text (the segments around its gaps) opens with a gap that has text after it."""
    return len(segments) > 1 and not segments[0].strip() and bool("".join(segments[1:]).strip())


def candidate_plan(candidates: int | str, ranking: str, texts: list[list[str]]) -> list[tuple[int, str]]:
    """How many fills ``Magnet.infill`` ranks for each text (given as the segments around its gaps),
    and by which of :data:`RANKINGS`. ``candidates="auto"`` ranks :data:`AUTO_CANDIDATES` for a text
    with a gap inside a sentence or at its start, and keeps one fill for the others; a number is
    every text's count. ``ranking="auto"`` is ``"right"`` for a text that opens with a gap and
    ``"total"`` for the others."""
    if ranking != "auto" and ranking not in RANKINGS:
        raise ValueError(
            f"candidate_ranking={ranking!r} is not one of auto, {', '.join(RANKINGS)}: how ranked fills "
            "are scored (total: the filled text where the fills differ; right: the text after the fill)"
        )
    plan = []
    for segments in texts:
        at_start = gap_at_start(segments)
        inside = any(gap_inside_a_sentence(segments[j], segments[j + 1]) for j in range(len(segments) - 1))
        count = candidates if candidates != "auto" else AUTO_CANDIDATES if inside or at_start else 1
        plan.append((count, ranking if ranking != "auto" else "right" if at_start else "total"))
    return plan


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
    mean log-likelihood per scored token (:data:`magnetsdk.copies.RESAMPLE_RANKINGS`).
    ``ranking="right"`` ranks the decoded fills and their cuts after a sentence end by the text after
    them alone (``fill_log_likelihood(after_only=True)``), among the fills that end a sentence and
    copy no run of their text, when any does."""
    tokenizer = magnet.tokenizer
    decoded = [[tokenizer.decode(s, skip_special_tokens=True) for s in ids] for ids in options]
    if not ranked:
        text, written = join_filled(segments, decoded[0], moved)
        return InfillResult(text=text, spans=written, span_ids=options[0])
    fills: dict[str, tuple[list[str], list[list[int]]]] = {}  # filled text -> (spans, span ids)
    for spans, ids in zip(decoded, options, strict=True):
        variants = [(spans, ids)]
        for gap, span in enumerate(spans if ranking in ("total", "right") else []):
            for shorter in shorter_spans(span):
                if ranking == "right" and ends_inside_a_sentence(shorter):
                    continue
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
    if ranking == "right":  # fills that end a sentence and copy nothing, when any does
        whole = [
            t
            for t in texts
            if not any(map(ends_inside_a_sentence, fills[t][0]))
            and not copies_segments(fills[t][0], segments)
        ]
        texts = whole or texts
    scores = fill_log_likelihood(
        magnet.model,
        [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts],
        magnet.prefix,
        magnet.pad_id,
        batch_size=16,
        per_token=ranking == "per-token",
        after_only=ranking == "right",
    )
    order = sorted(range(len(texts)), key=lambda i: -scores[i])  # a stable sort: earlier wins ties
    best = texts[order[0]]
    return InfillResult(
        text=best,
        spans=fills[best][0],
        span_ids=fills[best][1],
        candidates=[InfillCandidate(fills[texts[i]][0], scores[i]) for i in order],
    )
