"""Each index type through ``Index``, on deterministic synthetic vectors, against brute force.

The encoder here maps each document text ``"v<i>"`` to row ``i`` of a fixed matrix: the index
needs only the encoder protocol (identity, tokenizer, encode), and synthetic vectors make the
expected neighbours exact and independent of any model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from magnetsdk.index import Document, Index
from magnetsdk.testing import tiny_tokenizer

DIM = 32


@dataclass(frozen=True)
class Identity:
    model: str = "synthetic"
    adapter: str | None = None
    adapter_sha256: str | None = None
    dimension: int = DIM
    instruction: str = ""
    encode_attention: str = "bidirectional"
    pooling: str = "last"

    def to_dict(self) -> dict:
        return dict(self.__dict__)


class TableEncoder:
    """Text ``v<i>`` -> ``table[i]``; deterministic, no model."""

    identity = Identity()

    def __init__(self, table: np.ndarray) -> None:
        self.table = table
        self.tokenizer = tiny_tokenizer()

    def encode(self, texts: list[str], instruction: str | None = None) -> np.ndarray:
        return self.table[[int(t[1:]) for t in texts]]


def clustered(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(99).standard_normal((30, DIM))
    x = centres[rng.integers(0, 30, n)] + 0.7 * rng.standard_normal((n, DIM))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def table():
    return clustered(3000, seed=0)


def build(tmp_path, table, kind: str) -> Index:
    index = Index.create(tmp_path / kind, TableEncoder(table), index_type=kind)
    index.add([Document(f"d{i}", f"v{i}", {"group": i % 3}) for i in range(len(table))])
    index.save()
    return index


def truth(table: np.ndarray, queries: np.ndarray, k: int, keep: np.ndarray | None = None) -> np.ndarray:
    scores = queries.astype(np.float64) @ table.astype(np.float64).T
    if keep is not None:
        scores[:, ~keep] = -np.inf
    return np.argsort(-scores, axis=1, kind="stable")[:, :k]


def doc_rows(hits) -> list[list[int]]:
    return [[int(h.document_id[1:]) for h in row] for row in hits]


def recall(found: list[list[int]], want: np.ndarray) -> float:
    return float(np.mean([len(set(f) & set(w)) / len(w) for f, w in zip(found, want.tolist(), strict=True)]))


def test_exact_index_is_identical_to_brute_force(tmp_path, table):
    queries = clustered(50, seed=1)
    with build(tmp_path, table, "exact") as index:
        assert doc_rows(index.search_vectors(queries, 10)) == truth(table, queries, 10).tolist()
        keep = np.arange(len(table)) % 3 == 1
        filtered = index.search_vectors(queries, 10, filter={"group": 1})
        assert doc_rows(filtered) == truth(table, queries, 10, keep).tolist()


@pytest.mark.parametrize(("kind", "floor"), [("hnsw", 0.95), ("ivfpq", 0.85)])
def test_approximate_types_recall_at_10(tmp_path, table, kind, floor):
    queries = clustered(100, seed=2)
    with build(tmp_path, table, kind) as index:
        assert index.index_type.value == kind
        found = doc_rows(index.search_vectors(queries, 10))
        value = recall(found, truth(table, queries, 10))
        print(f"Index {kind} recall@10 = {value:.3f}")
        assert value >= floor
        index.delete([f"d{i}" for i in range(0, 3000, 2)])  # removal: IVF-PQ in place, HNSW by rebuild
        left = doc_rows(index.search_vectors(queries, 10))
        assert all(i % 2 == 1 for row in left for i in row)
        index.save()
