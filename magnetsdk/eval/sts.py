"""Semantic textual similarity: Spearman x100 between embedding cosine and gold scores.

Reads three formats, detected from the first line or given explicitly:

- ``stsb``: the STS Benchmark csv, tab-separated, score in column 5, sentences in 6 and 7
  (columns after the 7th, such as source tags, are ignored; quotes are literal characters);
- ``sick``: SICK, tab-separated with a header naming ``sentence_A``, ``sentence_B`` and
  ``relatedness_score``;
- ``tsv``: ``s1<TAB>s2<TAB>score``, with an optional header line.

For an STS Benchmark file the pairs are also scored per source (column 2: MSRpar, headlines,
answers-forums, ...), as ``NAME[SOURCE].spearman`` figures and rows after the files': a split whose
sources are mixed differently from another's scores differently for that reason alone.

The score is the same statistic sentence-transformers' ``EmbeddingSimilarityEvaluator`` reports
(scipy's Spearman correlation of the gold scores and the pairwise cosine similarities), times 100.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

import numpy as np

from magnetsdk.eval.encoder import SentenceEncoder
from magnetsdk.eval.result import EvalResult, data_file, utc_now
from magnetsdk.records import read_text


class StsFormat(str, Enum):
    STSB = "stsb"
    SICK = "sick"
    TSV = "tsv"


@dataclass
class StsPairs:
    name: str
    sentences1: list[str]
    sentences2: list[str]
    scores: list[float]
    sources: list[str] = field(default_factory=list)  # stsb: each pair's source (column 2); else empty

    def __len__(self) -> int:
        return len(self.scores)


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _read_lines(path: Path) -> list[str]:
    return [line for line in read_text(path).splitlines() if line.strip()]


def detect_format(first_line: str, source: str = "file") -> StsFormat:
    columns = first_line.split("\t")
    if "sentence_A" in columns and "relatedness_score" in columns:
        return StsFormat.SICK
    if len(columns) >= 7 and _is_float(columns[4]):
        return StsFormat.STSB
    if len(columns) == 3:
        return StsFormat.TSV
    raise ValueError(
        f"cannot tell the format of {source} from its first line ({len(columns)} tab-separated columns); "
        "expected the STS Benchmark csv (score in column 5, sentences in 6 and 7), SICK (a header with "
        "sentence_A, sentence_B, relatedness_score) or s1<TAB>s2<TAB>score; pass --data-format stsb|sick|tsv"
    )


def read_sts(path: str | Path, fmt: StsFormat | str | None = None, limit: int | None = None) -> StsPairs:
    """Read sentence pairs and gold scores from ``path`` (the first ``limit`` pairs when given)."""
    source = Path(path)
    lines = _read_lines(source)
    if not lines:
        raise ValueError(f"{source} is empty; an STS file needs sentence pairs with scores")
    kind = StsFormat(fmt) if fmt is not None else detect_format(lines[0], str(source))
    first_row = 1
    if kind is StsFormat.SICK:
        header = lines[0].split("\t")
        missing = [c for c in ("sentence_A", "sentence_B", "relatedness_score") if c not in header]
        if missing:
            raise ValueError(f"{source}: the SICK header lacks {missing}; found columns {header}")
        columns = (
            header.index("sentence_A"),
            header.index("sentence_B"),
            header.index("relatedness_score"),
        )
    elif kind is StsFormat.STSB:
        columns, first_row = (5, 6, 4), 0
    else:
        columns = (0, 1, 2)
        first_row = 0 if _is_float(lines[0].split("\t")[-1]) else 1  # an optional header
    pairs = StsPairs(source.stem, [], [], [])
    for number, line in enumerate(lines[first_row:], first_row + 1):
        cells = line.split("\t")
        if len(cells) <= max(columns):
            raise ValueError(
                f"{source}:{number}: {len(cells)} tab-separated columns, the {kind.value} format needs "
                f"at least {max(columns) + 1}"
            )
        s1, s2, score = (cells[i] for i in columns)
        if not _is_float(score):
            raise ValueError(f"{source}:{number}: the score {score!r} is not a number")
        pairs.sentences1.append(s1)
        pairs.sentences2.append(s2)
        pairs.scores.append(float(score))
        if kind is StsFormat.STSB:
            pairs.sources.append(cells[1])
        if limit is not None and len(pairs) >= limit:
            break
    if len(pairs) < 2:
        raise ValueError(f"{source}: {len(pairs)} pair(s); a correlation needs at least 2")
    return pairs


def spearman(gold: list[float] | np.ndarray, predicted: list[float] | np.ndarray) -> float:
    """Spearman's rank correlation (ties get average ranks), as scipy computes it."""
    from scipy.stats import spearmanr

    return float(spearmanr(gold, predicted).statistic)


def pearson(gold: list[float] | np.ndarray, predicted: list[float] | np.ndarray) -> float:
    from scipy.stats import pearsonr

    return float(pearsonr(gold, predicted).statistic)


def correlations(gold, predicted) -> tuple[float, float]:
    """(Spearman x100, Pearson x100) of ``predicted`` against ``gold``."""
    return 100 * spearman(gold, predicted), 100 * pearson(gold, predicted)


def pair_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity of each row of ``a`` (n, d) with the same row of ``b``; returns (n,)."""
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    norms = np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)
    return (a * b).sum(axis=1) / norms


def pair_similarities(
    encoder: SentenceEncoder, pairs: StsPairs, batch_size: int = 32, show_progress: bool = False
) -> np.ndarray:
    """The cosine of each pair (n,), embedding each distinct sentence once."""
    texts = list(dict.fromkeys(pairs.sentences1 + pairs.sentences2))
    row = {t: i for i, t in enumerate(texts)}
    vectors = encoder.encode_texts(texts, batch_size=batch_size, show_progress=show_progress)
    first = vectors[[row[t] for t in pairs.sentences1]]  # (n, d)
    second = vectors[[row[t] for t in pairs.sentences2]]  # (n, d)
    return pair_cosines(first, second)


def score_pairs(
    encoder: SentenceEncoder, pairs: StsPairs, batch_size: int = 32, show_progress: bool = False
) -> dict[str, float]:
    """Spearman and Pearson x100 of the pairs' cosines against their gold scores."""
    rho, r = correlations(pairs.scores, pair_similarities(encoder, pairs, batch_size, show_progress))
    return {"spearman": rho, "pearson": r}


def by_source(
    pairs: StsPairs, cosines: np.ndarray, min_pairs: int = 3
) -> dict[str, tuple[int, float, float]]:
    """``{source: (pairs, Spearman x100, Pearson x100)}`` for each source with ``min_pairs`` or more pairs whose
    gold scores differ (a correlation over one score is undefined); empty without sources."""
    found: dict[str, tuple[int, float, float]] = {}
    gold = np.asarray(pairs.scores)
    for source in dict.fromkeys(pairs.sources):
        rows = [i for i, s in enumerate(pairs.sources) if s == source]
        if len(rows) >= min_pairs and len(set(gold[rows])) > 1:
            found[source] = (len(rows), *correlations(gold[rows], cosines[rows]))
    return found


def evaluate_sts(
    encoder: SentenceEncoder,
    paths: list[str | Path],
    fmt: StsFormat | str | None = None,
    limit: int | None = None,
    batch_size: int = 32,
    show_progress: bool = True,
) -> EvalResult:
    """One row per file and, with several files, their average."""
    if not paths:
        raise ValueError("sts needs at least one data file")
    started, start = utc_now(), time.perf_counter()
    rows, figures, source_rows = [], {}, []
    for path in paths:
        pairs = read_sts(path, fmt, limit)
        cosines = pair_similarities(encoder, pairs, batch_size, show_progress)
        rho, r = correlations(pairs.scores, cosines)
        rows.append([pairs.name, len(pairs), rho, r])
        figures[f"{pairs.name}.spearman"] = rho
        figures[f"{pairs.name}.pearson"] = r
        sources = by_source(pairs, cosines)
        for source, (count, rho_s, r_s) in sources.items() if len(sources) > 1 else ():
            figures[f"{pairs.name}[{source}].spearman"] = rho_s
            source_rows.append([f"{pairs.name}[{source}]", count, rho_s, r_s])
    if len(rows) > 1:
        average = float(np.mean([r[2] for r in rows]))
        figures["avg.spearman"] = average
        rows.append(["avg", sum(r[1] for r in rows), average, float(np.mean([r[3] for r in rows]))])
    rows.extend(source_rows)
    settings = {"format": None if fmt is None else StsFormat(fmt).value, "limit": limit}
    settings.update(encoder.settings() if hasattr(encoder, "settings") else {})
    return EvalResult(
        task="sts",
        figures=figures,
        headers=["data", "pairs", "spearman x100", "pearson x100"],
        rows=rows,
        settings=settings,
        model=encoder.identity(),
        data=[data_file(p) for p in paths],
        started=started,
        seconds=time.perf_counter() - start,
    )
