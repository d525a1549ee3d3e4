"""Inverse-cloze positives for SSCL (Lee et al. 2019): a sentence against the rest of its paragraph.

:class:`ICTViews` turns running text into query-to-passage pairs without labels: every sentence
of a paragraph of 3+ sentences is a query once per epoch, and its positive is the passage around
it with the sentence itself removed (the nearest sentences before and after, alternating, within a
word budget that fits the contrastive view length), so the model learns to match a sentence to
the context it came from, which is what retrieval asks of it. One-sentence texts (SNLI premises,
STS-B sentences) give no pairs.

:class:`MixedViews` mixes such pairs into another positive source at a given share of the SSCL
examples (``TrainConfig.ict_share``), with each source repeated a whole number of times per
epoch so that the share holds exactly and every item of both is seen.

Like :mod:`magnetsdk.train.views` it knows nothing about tokens or tensors; it has the same
interface (``size``, ``views(items)``).
"""

from __future__ import annotations

import re

from magnetsdk.train.config import PositiveSource, TrainConfig
from magnetsdk.train.data import DataError
from magnetsdk.train.views import PositiveViews, Views

# A sentence ends at . ! or ? (WikiText writes " . "), maybe closed by a quote or bracket, before
# the capital letter, digit, opening quote or WikiText <unk> that starts the next one.
SENTENCE_END = re.compile(r"(?<=[.!?])(?:\s*[\"')\]])?\s+(?=[\"'(\[]?[A-Z0-9<])")
MIN_QUERY_WORDS = 5
MIN_SENTENCES = 3  # a query and at least two sentences of context


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text``; fragments under 3 words join the sentence before them."""
    sentences: list[str] = []
    start = 0
    pieces = []
    for match in SENTENCE_END.finditer(text):
        pieces.append(text[start : match.end()].strip())
        start = match.end()
    pieces.append(text[start:].strip())
    for piece in pieces:
        if sentences and len(piece.split()) < 3:
            sentences[-1] = f"{sentences[-1]} {piece}"
        elif piece:
            sentences.append(piece)
    return sentences


def context_around(sentences: list[str], index: int, max_words: int) -> str:
    """The sentences nearest to ``sentences[index]`` (before, after, before, ...), without it, in
    order, until ``max_words``; at least one sentence."""
    chosen: list[int] = []
    words = 0
    before, after = index - 1, index + 1
    while before >= 0 or after < len(sentences):
        for candidate in (before, after):
            if 0 <= candidate < len(sentences) and candidate not in chosen:
                length = len(sentences[candidate].split())
                if chosen and words + length > max_words:
                    return " ".join(sentences[i] for i in sorted(chosen))
                chosen.append(candidate)
                words += length
        before, after = before - 1, after + 1
    return " ".join(sentences[i] for i in sorted(chosen))


class ICTViews:
    name = "ict"

    def __init__(self, texts: list[str], max_words: int = 40) -> None:
        if max_words < 1:
            raise ValueError(f"max_words={max_words} must be at least 1")
        self.max_words = max_words
        self.paragraphs: list[list[str]] = []
        self.queries: list[tuple[int, int]] = []  # (paragraph, sentence) per item
        for text in dict.fromkeys(texts):
            sentences = split_sentences(text)
            if len(sentences) < MIN_SENTENCES:
                continue
            number = len(self.paragraphs)
            self.paragraphs.append(sentences)
            self.queries.extend(
                (number, i) for i, s in enumerate(sentences) if len(s.split()) >= MIN_QUERY_WORDS
            )
        if not self.queries:
            raise DataError(
                f"none of the {len(texts)} training texts has {MIN_SENTENCES} or more sentences, so "
                "inverse-cloze positives have nothing to work on; give paragraphs (--data) or choose "
                "other --positives"
            )

    @classmethod
    def for_view_length(cls, texts: list[str], tokens: int) -> ICTViews:
        """Passages sized for views of ``tokens`` tokens: about 4 tokens per 3 words, less ~12 for
        the instruction prefix and EOS."""
        return cls(texts, max_words=max(8, (tokens - 12) * 3 // 4))

    @property
    def size(self) -> int:
        return len(self.queries)

    def views(self, items: list[int]) -> Views:
        anchors, positives = [], []
        for item in items:
            paragraph, index = self.queries[item]
            sentences = self.paragraphs[paragraph]
            anchors.append(sentences[index])
            positives.append(context_around(sentences, index, self.max_words))
        return anchors, positives, [None] * len(items)


def repeats_for_share(
    primary: int, extra: int, share: float, most: int = 64, tolerance: float = 0.005
) -> tuple[int, int]:
    """Whole repeats (r_primary, r_extra) of two sources of ``primary`` and ``extra`` items whose
    mixture gives ``extra`` a share within ``tolerance`` of ``share`` with the fewest items (else
    the closest share)."""
    candidates = []
    for r_primary in range(1, most + 1):
        for r_extra in range(1, most + 1):
            total = r_primary * primary + r_extra * extra
            error = abs(r_extra * extra / total - share)
            candidates.append(
                (error > tolerance, error if error > tolerance else 0.0, total, r_primary, r_extra)
            )
    best = min(candidates)
    return best[3], best[4]


class MixedViews:
    """``primary`` and ``extra`` in one index space: items ``[0, r_p * n_p)`` read ``primary``
    (modulo its size), the rest read ``extra``; ``share`` is the fraction of ``extra`` items."""

    def __init__(self, primary: PositiveViews, extra: PositiveViews, share: float) -> None:
        if not 0.0 < share < 1.0:
            raise ValueError(f"share={share} must be strictly between 0 and 1")
        self.primary, self.extra = primary, extra
        self.name = f"{primary.name}+{extra.name}"
        self.repeats = repeats_for_share(primary.size, extra.size, share)
        self.share = self.repeats[1] * extra.size / self._total  # the share actually used

    @property
    def _total(self) -> int:
        return self.repeats[0] * self.primary.size + self.repeats[1] * self.extra.size

    @property
    def size(self) -> int:
        return self._total

    def views(self, items: list[int]) -> Views:
        cut = self.repeats[0] * self.primary.size
        anchors, positives, negatives = [], [], []
        for item in items:  # one at a time, to keep the items' order in the batch
            if item < cut:
                a, p, n = self.primary.views([item % self.primary.size])
            else:
                a, p, n = self.extra.views([(item - cut) % self.extra.size])
            anchors += a
            positives += p
            negatives += n
        return anchors, positives, negatives


def mix_in_ict(primary: PositiveViews, texts: list[str], config: TrainConfig) -> PositiveViews:
    """``primary`` with inverse-cloze pairs from ``texts`` making up ``config.ict_share`` of the
    SSCL examples (``primary`` itself when the share is 0)."""
    if not config.ict_share:
        return primary
    if config.positives is PositiveSource.ICT or config.ict_share == 1:
        raise ValueError(
            f"ict_share={config.ict_share} mixes inverse-cloze pairs into another source; for "
            "inverse-cloze positives alone use positives='ict' with ict_share=0"
        )
    extra = ICTViews.for_view_length(texts, config.sscl_max_length)
    return MixedViews(primary, extra, config.ict_share)
