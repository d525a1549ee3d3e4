"""Positive views for the contrastive objective (SSCL): where the second text of a pair comes from.

Three sources, one interface (``size`` items; ``views(items)`` gives anchors, positives and
optional hard negatives):

- :class:`PairViews`: pairs given in the data (paraphrase or entailment pairs; a contradiction
  in the ``negative`` column becomes a hard negative).
- :class:`ParaphraseViews`: a paraphrase of each text, generated once by an instruct model (the
  base model by default) and cached on disk as JSON lines, so later runs reuse it.
- :class:`DropoutViews`: the text itself; the two passes differ only by dropout (SimCSE).

It knows nothing about tokens or tensors.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from magnetsdk.train.data import Pair

from magnetsdk.config import atomic_write_text

Views = tuple[list[str], list[str], list[str | None]]

PARAPHRASE_PROMPT = "Rewrite the following sentence in different words, keeping its meaning:\n{text}"


class PositiveViews(Protocol):
    name: str

    @property
    def size(self) -> int: ...

    def views(self, items: list[int]) -> Views: ...


class PairViews:
    name = "pairs"

    def __init__(self, pairs: list[Pair]) -> None:
        self.pairs = pairs

    @property
    def size(self) -> int:
        return len(self.pairs)

    def views(self, items: list[int]) -> Views:
        chosen = [self.pairs[i] for i in items]
        return [p.anchor for p in chosen], [p.positive for p in chosen], [p.negative for p in chosen]


class DropoutViews:
    name = "dropout"

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts

    @property
    def size(self) -> int:
        return len(self.texts)

    def views(self, items: list[int]) -> Views:
        chosen = [self.texts[i] for i in items]
        return chosen, list(chosen), [None] * len(chosen)


class ParaphraseViews:
    name = "paraphrase"

    def __init__(self, texts: list[str], paraphrases: dict[str, str]) -> None:
        missing = [t for t in texts if t not in paraphrases]
        if missing:
            raise ValueError(f"{len(missing)} texts have no paraphrase, e.g. {missing[0][:80]!r}")
        self.texts = texts
        self.paraphrases = paraphrases

    @property
    def size(self) -> int:
        return len(self.texts)

    def views(self, items: list[int]) -> Views:
        chosen = [self.texts[i] for i in items]
        return chosen, [self.paraphrases[t] for t in chosen], [None] * len(chosen)


def load_paraphrase_cache(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    cache: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            cache[row["text"]] = row["paraphrase"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise ValueError(
                f"{path}, line {number}: not a {{'text', 'paraphrase'}} record; delete the cache to regenerate it"
            ) from None
    return cache


def cached_paraphrases(
    texts: list[str],
    cache_path: Path,
    generate: Callable[[list[str]], list[str]],
    batch_size: int = 16,
    progress: bool = False,
) -> dict[str, str]:
    """Paraphrases of ``texts``: read from ``cache_path``, generating (and caching) only missing ones.

    ``generate`` maps prompts to completions (e.g. ``Magnet.generate`` with ``chat=True``). The
    cache is rewritten atomically after every batch, so an interrupted run keeps its work. A
    completion that is empty after cleaning falls back to the text itself (a dropout view).
    """
    cache = load_paraphrase_cache(cache_path)
    todo = [t for t in dict.fromkeys(texts) if t not in cache]
    starts = range(0, len(todo), batch_size)
    if progress and todo:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc="paraphrase", unit="batch")
    for start in starts:
        chunk = todo[start : start + batch_size]
        outputs = generate([PARAPHRASE_PROMPT.format(text=t) for t in chunk])
        for text, output in zip(chunk, outputs, strict=True):
            cache[text] = _clean(output) or text
        atomic_write_text(
            cache_path,
            "".join(
                json.dumps({"text": t, "paraphrase": p}, ensure_ascii=False) + "\n" for t, p in cache.items()
            ),
        )
    return cache


def _clean(output: str) -> str:
    """The first non-empty line of a completion, without quotes."""
    for line in output.strip().splitlines():
        line = line.strip().strip('"').strip()
        if line:
            return line
    return ""
