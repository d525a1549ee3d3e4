"""Answering a search: FAISS candidates, exact re-ranking, metadata filters, ids turned into hits.

Two paths use the exact vectors kept in the store rather than FAISS alone: a filter that leaves
few chunks is answered by scanning those chunks' vectors (faster than a filtered graph or IVF
search, and it never misses), and IVF-PQ candidates are re-scored exactly, because
product-quantised scores are only approximate.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from magnetsdk.index.documents import Hit
from magnetsdk.index.store import Store
from magnetsdk.index.vectors import IndexType, VectorIndex

# IVF-PQ gives this many times k candidates, re-ranked exactly with their stored vectors.
RERANK_FACTOR = 4
# A filter that leaves at most this many chunks is answered by an exact scan of their vectors.
FILTER_SCAN_LIMIT = 20_000


def search_chunks(
    store: Store, vectors: VectorIndex, queries: np.ndarray, k: int, where: dict[str, Any] | None
) -> list[list[Hit]]:
    """Top-``k`` hits for each unit query row of ``queries`` (q, d), best first."""
    if where:
        allowed = store.filter_chunk_ids(where)
        if len(allowed) == 0:
            return [[] for _ in range(len(queries))]
        if len(allowed) <= FILTER_SCAN_LIMIT:
            scores, ids = scan(store, queries, allowed, k)
        else:
            scores, ids = _candidates(store, vectors, queries, k, allowed)
    else:
        scores, ids = _candidates(store, vectors, queries, k, None)
    rows = store.chunk_rows(sorted({int(i) for i in ids.ravel() if i >= 0}))
    results = []
    for score_row, id_row in zip(scores, ids, strict=True):
        hits = []
        for score, chunk_id in zip(score_row, id_row, strict=True):
            row = rows.get(int(chunk_id))
            if row is not None:  # -1 (fewer than k results) or deleted since the FAISS file was read
                metadata = json.loads(row.metadata)
                hits.append(
                    Hit(float(score), row.doc_id, row.chunk_id, row.text, metadata, row.start, row.end)
                )
        results.append(hits)
    return results


def scan(store: Store, queries: np.ndarray, allowed: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` over the stored vectors of the ``allowed`` chunk ids: ``(scores, ids)``, (q, <=k)."""
    parts = list(store.vectors(int(queries.shape[1]), allowed))
    ids = np.concatenate([p[0] for p in parts])
    scores = queries @ np.concatenate([p[1] for p in parts]).T  # (q, n)
    top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, top, axis=1), ids[top]


def _candidates(
    store: Store, vectors: VectorIndex, queries: np.ndarray, k: int, allowed: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    if vectors.kind is not IndexType.IVFPQ:
        return vectors.search(queries, k, allowed)
    _, candidates = vectors.search(queries, RERANK_FACTOR * k, allowed)
    scores = np.full((len(queries), k), -np.inf, dtype=np.float32)
    ids = np.full((len(queries), k), -1, dtype=np.int64)
    for row, found in enumerate(candidates):
        found = found[found >= 0]
        if len(found):
            best_scores, best_ids = scan(store, queries[row : row + 1], found, k)
            scores[row, : best_ids.shape[1]], ids[row, : best_ids.shape[1]] = best_scores[0], best_ids[0]
    return scores, ids
