"""Training data: reading text and pair files, tokenizing them, and the order examples are seen in.

- Text files: ``.txt`` (one text per non-blank line), ``.jsonl`` (one object per line, the text
  under ``text_field``), ``.csv`` / ``.tsv`` (a header row naming ``text_field``).
- Pair files (positive views for the contrastive objective): ``.jsonl`` with ``anchor`` and
  ``positive`` (and optionally ``negative``, a hard negative such as a contradiction), or ``.tsv``
  with a header row naming the same columns.
- Scored pair files (graded similarity, e.g. STS-B): ``.jsonl`` or ``.tsv`` with ``text1``,
  ``text2`` and a numeric ``score`` (any scale: only the order of the scores is used).
- Copy fills (negatives for copy unlikelihood): ``.jsonl`` written by ``scripts/copy_fills.py``.
- Documents (running text for next-token examples): one document per text, its tokens cut into
  consecutive chunks of the length budget; only the last chunk of a document ends it (EOS).
- The order: example ``p`` of the run (counting over all steps, micro-batches and processes) is
  item ``perm_e[p mod n]`` of a seeded permutation of epoch ``e = p // n``. The data position is
  therefore a function of the step alone, which makes ``--resume`` exact and lets any number of
  processes split the same global batch. :class:`BucketedOrder` then sorts the examples of a
  window of consecutive batches by length and cuts the window into batches again (in a seeded
  order), still a function of the position alone, so a batch holds rows of similar length.

It knows nothing about models, masks or layouts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from magnetsdk import records
from magnetsdk.records import DataError

TEXT_SUFFIXES = (".txt", ".jsonl", ".csv", ".tsv")
PAIR_SUFFIXES = (".jsonl", ".tsv")
PAIR_COLUMNS = ("anchor", "positive")
SCORED_COLUMNS = ("text1", "text2", "score")
MIN_TOKENS = 4  # shorter texts cannot hold a span and some context


@dataclass(frozen=True)
class Pair:
    anchor: str
    positive: str
    negative: str | None = None


def read_texts(paths: list[str], text_field: str = "text") -> list[str]:
    """All non-empty texts of ``paths``, in file order (:func:`magnetsdk.records.read_texts`)."""
    texts: list[str] = []
    for name in paths:
        texts.extend(records.read_texts(_existing(name, TEXT_SUFFIXES, "text"), text_field))
    return texts


def read_pairs(paths: list[str]) -> list[Pair]:
    """All pairs of ``paths``; a row without an anchor or positive column is an error."""
    pairs: list[Pair] = []
    for name in paths:
        for row in records.rows(_existing(name, PAIR_SUFFIXES, "pairs"), PAIR_COLUMNS):
            anchor, positive = str(row.fields["anchor"]).strip(), str(row.fields["positive"]).strip()
            negative = row.fields.get("negative")
            negative = str(negative).strip() if negative not in (None, "") else None
            if anchor and positive:
                pairs.append(Pair(anchor, positive, negative or None))
    return pairs


@dataclass(frozen=True)
class ScoredPair:
    text1: str
    text2: str
    score: float
    source: str | None = None  # where the pair comes from (an STS-B genre such as "headlines"), if given


def read_scored_pairs(paths: list[str]) -> list[ScoredPair]:
    """All scored pairs of ``paths``; a score that is not a finite number is an error naming its line."""
    pairs: list[ScoredPair] = []
    for name in paths:
        for row in records.rows(_existing(name, PAIR_SUFFIXES, "scored pairs"), SCORED_COLUMNS):
            value = row.fields["score"]
            try:
                score = float(value)
            except (TypeError, ValueError):
                score = float("nan")
            if isinstance(value, bool) or not np.isfinite(score):
                raise DataError(
                    f"{name}:{row.line}: score {value!r} is not a number; each pair needs a numeric "
                    "score (higher: more similar)"
                )
            text1, text2 = str(row.fields["text1"]).strip(), str(row.fields["text2"]).strip()
            source = row.fields.get("source")
            source = (str(source).strip() or None) if source is not None else None
            if text1 and text2:
                pairs.append(ScoredPair(text1, text2, score, source))
    return pairs


COPY_FILL_COLUMNS = ("left", "right", "fill", "avoid")


@dataclass(frozen=True)
class CopyFill:
    """A greedy fill that copied its context; ``avoid``: offsets in ``fill`` of the words to push down."""

    left: str
    right: str
    fill: str
    avoid: tuple[int, ...]


def read_copy_fills(name: str) -> list[CopyFill]:
    """The fills of a ``scripts/copy_fills.py`` file; an offset outside its fill is an error naming the line."""
    fills: list[CopyFill] = []
    for row in records.rows(_existing(name, (".jsonl",), "copy fills"), COPY_FILL_COLUMNS):
        fill, avoid = row.fields["fill"], row.fields["avoid"]
        texts = [row.fields[k] for k in ("left", "right", "fill")]
        good = all(isinstance(t, str) for t in texts) and isinstance(avoid, list) and bool(avoid)
        if not good or not all(
            isinstance(a, int) and not isinstance(a, bool) and 0 <= a < len(fill) for a in avoid
        ):
            raise DataError(
                f"{name}:{row.line}: each line needs the strings left, right, fill and avoid, a "
                "non-empty list of character offsets inside fill; write the file with scripts/copy_fills.py"
            )
        fills.append(CopyFill(row.fields["left"], row.fields["right"], fill, tuple(avoid)))
    if not fills:
        raise DataError(f"{name} holds no copy fills; write it with scripts/copy_fills.py")
    return fills


def _existing(name: str, suffixes: tuple[str, ...], kind: str) -> Path:
    path = Path(name).expanduser()
    if not path.is_file():
        raise DataError(f"{kind} file {path} not found")
    if path.suffix.lower() not in suffixes:
        raise DataError(f"{kind} file {path}: unsupported type {path.suffix!r}; use one of {list(suffixes)}")
    return path


@dataclass
class TokenizedTexts:
    """Token ids of the language-modelling examples, and what tokenizing did to the texts."""

    ids: list[list[int]]
    texts: list[str]  # the source text of each example (a split text repeats its text)
    split: int  # texts longer than the budget, cut into several examples
    dropped: int  # texts shorter than MIN_TOKENS


def tokenize_texts(tokenizer, texts: list[str], budget: int) -> TokenizedTexts:
    """Tokenize ``texts``; a text longer than ``budget`` tokens becomes consecutive pieces."""
    ids: list[list[int]] = []
    sources: list[str] = []
    split = dropped = 0
    encoded = tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
    for text, tokens in zip(texts, encoded, strict=True):
        if len(tokens) > budget:
            split += 1
        for start in range(0, len(tokens), budget):
            piece = tokens[start : start + budget]
            if len(piece) < MIN_TOKENS:
                dropped += 1
                continue
            ids.append(piece)
            sources.append(text)
    return TokenizedTexts(ids, sources, split, dropped)


class Order:
    """Which item each example position of the run reads: seeded permutations, one per epoch."""

    def __init__(self, size: int, seed: int) -> None:
        if size < 1:
            raise DataError("no examples to order")
        self.size = size
        self.seed = seed
        self._epoch = -1
        self._perm: np.ndarray | None = None

    def item(self, position: int) -> int:
        epoch = position // self.size
        if epoch != self._epoch:
            self._perm = np.random.default_rng([self.seed, epoch]).permutation(self.size)
            self._epoch = epoch
        return int(self._perm[position % self.size])

    def items(self, positions: range) -> list[int]:
        return [self.item(p) for p in positions]


def scored_draws(pairs: list[ScoredPair], power: float, files: list[str]) -> list[int]:
    """The indices of ``pairs`` that a run draws from: each once (``power`` 1), or balanced by
    their sources (:func:`source_balanced`), which every pair must then name."""
    if power == 1:
        return list(range(len(pairs)))
    unsourced = sum(p.source is None for p in pairs)
    if unsourced:
        raise DataError(
            f"scored_source_power={power} balances the scored pairs by their source, but "
            f'{unsourced} of the {len(pairs)} pairs in {files} have no "source": give each pair '
            "one (prepare_training_data.py writes the STS-B genre), or set scored_source_power=1"
        )
    return source_balanced([p.source for p in pairs], power)


def source_balanced(sources: list[str], power: float) -> list[int]:
    """Item indices in which each source's share of the draws goes as (its item count) ** ``power``.

    ``power`` 1 keeps the items' own proportions (each index once); 0 draws every source equally
    often; values between temper the larger sources. The draws are scaled so that the source with
    the most items for its share is drawn once per item; the other sources' items are cycled to
    their shares, so an :class:`Order` over the result visits each in turn.
    """
    if power < 0:
        raise ValueError(f"power={power} must be >= 0")
    members: dict[str, list[int]] = {}
    for index, source in enumerate(sources):
        members.setdefault(source, []).append(index)
    if power == 1 or len(members) < 2:
        return list(range(len(sources)))
    weights = {name: len(items) ** power for name, items in members.items()}
    total = sum(weights.values())
    # Scale so that the source with the most items per unit of weight is drawn once per item.
    scale = max(len(members[name]) / (weights[name] / total) for name in members)
    balanced: list[int] = []
    for name, items in members.items():
        count = round(scale * weights[name] / total)
        balanced.extend(items[i % len(items)] for i in range(count))
    return balanced


@dataclass(frozen=True)
class Chunk:
    """A piece of a document: its token ids and whether the document ends with it."""

    ids: list[int]
    ends_document: bool


def chunk_documents(tokenizer, documents: list[str], budget: int) -> list[Chunk]:
    """Cut each document's tokens into consecutive chunks of at most ``budget`` tokens.

    Paragraph breaks inside a document are kept as the tokenizer encodes them. A last chunk
    shorter than ``MIN_TOKENS`` is dropped and the chunk before it then ends the document.
    """
    chunks: list[Chunk] = []
    encoded = tokenizer(documents, add_special_tokens=False)["input_ids"] if documents else []
    for tokens in encoded:
        pieces = [tokens[s : s + budget] for s in range(0, len(tokens), budget)]
        pieces = [p for p in pieces if len(p) >= MIN_TOKENS]
        chunks.extend(Chunk(p, i == len(pieces) - 1) for i, p in enumerate(pieces))
    return chunks


class BucketedOrder:
    """Positions grouped into batches of similar length, still a function of the position alone.

    The positions of window ``w`` (``window`` batches of ``batch`` positions) are sorted by the
    length of the example each reads (``length(position)``), cut into batches, and the batches
    shuffled with a generator seeded by ``(seed, w)``. ``arranged(p)`` is the original position
    whose example goes to position ``p``: masks, items and kinds are still drawn from the
    original position, so bucketing changes only which examples share a batch.
    """

    def __init__(self, batch: int, window: int, seed: int, length) -> None:
        self.batch = batch
        self.window = window
        self.seed = seed
        self.length = length
        self._window = -1
        self._arranged: list[int] = []

    def arranged(self, position: int) -> int:
        if self.window <= 1:
            return position
        size = self.batch * self.window
        w = position // size
        if w != self._window:
            start = w * size
            by_length = sorted(range(start, start + size), key=lambda p: (self.length(p), p))
            batches = [by_length[i : i + self.batch] for i in range(0, size, self.batch)]
            shuffled = np.random.default_rng([self.seed, w]).permutation(len(batches))
            self._arranged = [p for b in shuffled for p in batches[b]]
            self._window = w
        return self._arranged[position % size]
