"""The index types an index can be built with, and how ``auto`` picks one; no faiss import.

The CLI offers these choices in ``--help`` without loading faiss (see :mod:`magnetsdk.index`,
whose public names load lazily); :mod:`magnetsdk.index.vectors` builds the FAISS index for each.
"""

from __future__ import annotations

from enum import Enum


class IndexType(str, Enum):
    EXACT = "exact"
    HNSW = "hnsw"
    IVFPQ = "ivfpq"
    AUTO = "auto"


# ``auto`` boundaries, from benchmarks/bench_index.py (docs/results.md, "Retrieval"; d=576, one CPU
# thread): exact search costs ~30 ms per query at 100k vectors and ~250 ms at 1M, so above 100k a
# graph (HNSW, sub-millisecond, full vectors plus graph in memory) pays off; above 2M vectors
# memory dominates and IVF-PQ (~80 bytes per vector, candidates re-ranked exactly) takes over.
AUTO_EXACT_BELOW = 100_000
AUTO_HNSW_BELOW = 2_000_000
IVFPQ_MIN_VECTORS = 1_000  # k-means lists and 256-centroid codebooks need enough training points


def parse_type(value: IndexType | str) -> IndexType:
    try:
        return IndexType(value)
    except ValueError:
        raise ValueError(f"index type {value!r} is not one of {[t.value for t in IndexType]}") from None


def resolve_type(requested: IndexType | str, count: int) -> IndexType:
    """The concrete type for ``count`` vectors (``auto`` picks by size; others are returned as is)."""
    kind = parse_type(requested)
    if kind is not IndexType.AUTO:
        return kind
    if count < AUTO_EXACT_BELOW:
        return IndexType.EXACT
    return IndexType.HNSW if count < AUTO_HNSW_BELOW else IndexType.IVFPQ


def check_buildable(requested: IndexType | str, count: int) -> None:
    """Raise ``ValueError`` when an index of ``requested`` type cannot be built from ``count`` vectors."""
    if resolve_type(requested, count) is IndexType.IVFPQ and count < IVFPQ_MIN_VECTORS:
        raise ValueError(
            f"an IVF-PQ index is trained on the vectors it starts with and needs at least "
            f"{IVFPQ_MIN_VECTORS}; there would be {count}. Use index type 'exact' or 'auto' "
            "for a corpus this small"
        )


INDEX_TYPE_NAMES = [t.value for t in IndexType]
