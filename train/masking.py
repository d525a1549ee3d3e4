"""Which tokens each objective hides: MNTP masks, MSG spans, MEAP input masks.

Every choice is drawn from a ``numpy.random.Generator`` the caller seeds per example (from the
run seed and the example's position in the run), so a batch is the same however many
processes build it and after a ``--resume``.

It knows nothing about layouts or tensors: it works on lists of token ids and indices.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Of the MNTP-selected tokens: 80% become the mask token, 10% a random token, 10% stay unchanged.
MASK_SHARE = 0.8
RANDOM_SHARE = 0.1


def example_rng(seed: int, position: int) -> np.random.Generator:
    """The generator of the example at ``position`` of the run."""
    return np.random.default_rng([seed, position, 0x5EED])


@dataclass
class MaskedTokens:
    ids: list[int]  # the input with the selected tokens replaced
    selected: list[int]  # indices of the selected tokens (the loss positions), ascending
    originals: list[int]  # the original token at each selected index


def mntp_mask(
    ids: list[int],
    probability: float,
    mask_id: int,
    vocab_size: int,
    rng: np.random.Generator,
    eligible: list[int] | None = None,
) -> MaskedTokens:
    """Select ``round(probability * n)`` of the eligible tokens (at least one when ``probability > 0``).

    Of the selected tokens 80% become ``mask_id``, 10% a uniformly random token of the vocabulary
    and 10% stay as they are (BERT's recipe, used by LLM2Vec and MAGNET for MNTP).
    """
    candidates = list(range(len(ids))) if eligible is None else list(eligible)
    count = round(probability * len(candidates))
    if probability > 0 and candidates:
        count = max(count, 1)
    if count == 0:
        return MaskedTokens(list(ids), [], [])
    selected = sorted(int(i) for i in rng.choice(candidates, size=count, replace=False))
    out = list(ids)
    draws = rng.random(count)
    for index, draw in zip(selected, draws, strict=True):
        if draw < MASK_SHARE:
            out[index] = mask_id
        elif draw < MASK_SHARE + RANDOM_SHARE:
            out[index] = int(rng.integers(vocab_size))
    return MaskedTokens(out, selected, [ids[i] for i in selected])


def input_mask(
    ids: list[int], probability: float, mask_id: int, start: int, rng: np.random.Generator
) -> list[int]:
    """MEAP: each token from ``start`` on becomes ``mask_id`` with ``probability`` (targets unchanged)."""
    if probability <= 0:
        return list(ids)
    draws = rng.random(len(ids))
    return [mask_id if i >= start and draws[i] < probability else t for i, t in enumerate(ids)]


def choose_spans(
    length: int, fraction: float, max_spans: int, rng: np.random.Generator
) -> list[tuple[int, int]]:
    """Non-overlapping ``[start, end)`` spans covering about ``fraction`` of ``length`` tokens.

    Between 1 and ``max_spans`` spans, separated by at least one context token, and at least one
    context token overall, so every span has a GAP between context pieces.
    """
    if length < 2:
        raise ValueError(f"a text of {length} token(s) cannot hold a span and context")
    total = min(max(1, round(fraction * length)), length - 1)
    most = min(max_spans, total, (length - total) + 1)  # k spans need k - 1 separating tokens
    k = int(rng.integers(1, most + 1))
    # Split `total` into k positive span lengths.
    cuts = sorted(int(c) for c in rng.choice(np.arange(1, total), size=k - 1, replace=False)) if k > 1 else []
    lengths = [b - a for a, b in zip([0, *cuts], [*cuts, total], strict=True)]
    # Split the context into k + 1 gaps; the k - 1 inner gaps get at least one token.
    context = length - total
    gaps = [0] + [1] * (k - 1) + [0]
    for _ in range(context - (k - 1)):
        gaps[int(rng.integers(k + 1))] += 1
    spans = []
    position = 0
    for i, span_length in enumerate(lengths):
        position += gaps[i]
        spans.append((position, position + span_length))
        position += span_length
    return spans


@dataclass(frozen=True)
class WordBoundaries:
    """Per vocabulary id: whether the token starts a word (its text begins with a space) and whether
    it ends a sentence (its text ends with ``.``, ``!`` or ``?``). Built once per tokenizer."""

    starts_word: np.ndarray  # (V,) bool
    ends_sentence: np.ndarray  # (V,) bool

    @classmethod
    def from_tokenizer(cls, tokenizer) -> WordBoundaries:
        size = len(tokenizer)
        texts = tokenizer.batch_decode([[i] for i in range(size)], clean_up_tokenization_spaces=False)
        starts = np.array([t[:1].isspace() for t in texts], dtype=bool)
        ends = np.array([t.rstrip()[-1:] in (".", "!", "?") for t in texts], dtype=bool)
        return cls(starts, ends)

    def word_starts(self, ids: list[int]) -> list[int]:
        """Indices of the tokens that start a word (index 0 always does)."""
        return [i for i, t in enumerate(ids) if i == 0 or (t < len(self.starts_word) and self.starts_word[t])]

    def sentence_starts(self, ids: list[int], word_starts: list[int]) -> list[int]:
        """Word starts that follow a sentence end, and index 0."""
        return [0] + [
            i
            for i in word_starts
            if i > 0 and ids[i - 1] < len(self.ends_sentence) and self.ends_sentence[ids[i - 1]]
        ]


@dataclass(frozen=True)
class SpanShapes:
    """What a missing span looks like: shares of whole sentences, short phrases and gaps that run to
    the end of the text (they sum to 1), and how much of a text spans may take."""

    sentence: float = 0.6
    phrase: float = 0.3
    end: float = 0.1
    phrase_max_words: int = 6
    max_share: float = 0.5  # of a text's tokens, at most this share is removed into spans

    def __post_init__(self) -> None:
        shares = (self.sentence, self.phrase, self.end)
        if any(s < 0 for s in shares) or abs(sum(shares) - 1.0) > 1e-6:
            raise ValueError(
                f"span shares sentence={self.sentence}, phrase={self.phrase}, end={self.end} must be >= 0 "
                "and sum to 1"
            )
        if self.phrase_max_words < 1:
            raise ValueError(f"phrase_max_words={self.phrase_max_words} must be at least 1")
        if not 0.0 < self.max_share < 1.0:
            raise ValueError(f"max_share={self.max_share} must be strictly between 0 and 1")


def choose_word_spans(
    ids: list[int],
    boundaries: WordBoundaries,
    shapes: SpanShapes,
    max_spans: int,
    rng: np.random.Generator,
) -> list[tuple[int, int]]:
    """Non-overlapping ``[start, end)`` spans cut at word boundaries, so each span starts with the
    token that carries its leading space: between 1 and ``max_spans`` spans, each a whole sentence,
    a phrase of 1..``phrase_max_words`` words or a gap that runs to the end of the text (drawn by
    ``shapes``), separated by at least one context token and leaving at least half... of the text
    (``max_share``) as context. Empty when no span fits (the caller falls back to token spans)."""
    n = len(ids)
    words = boundaries.word_starts(ids)
    sentences = boundaries.sentence_starts(ids, words)
    budget = int(shapes.max_share * n)
    wanted = int(rng.integers(1, max_spans + 1))
    shares = np.array([shapes.sentence, shapes.phrase, shapes.end])
    spans: list[tuple[int, int]] = []
    used = 0
    for _ in range(4 * wanted):
        if len(spans) == wanted:
            break
        kind = int(rng.choice(3, p=shares))
        if kind == 0 and len(sentences) < 2:
            kind = 1  # one sentence: a phrase of it instead
        if kind == 0:
            j = int(rng.integers(len(sentences)))
            start, end = sentences[j], sentences[j + 1] if j + 1 < len(sentences) else n
        elif kind == 1:
            j = int(rng.integers(len(words)))
            count = int(rng.integers(1, shapes.phrase_max_words + 1))
            start, end = words[j], words[j + count] if j + count < len(words) else n
        else:
            later = [s for s in sentences if s > 0] or [w for w in words if w > 0]
            if not later:
                continue
            start, end = later[int(rng.integers(len(later)))], n
        if end - start > budget - used:
            continue
        if any(not (end < a or start > b) for a, b in spans):  # overlapping or touching another span
            continue
        spans.append((start, end))
        used += end - start
    return sorted(spans)
