"""FAISS index types against brute-force numpy on deterministic synthetic vectors."""

from __future__ import annotations

import numpy as np
import pytest

from magnetsdk.index.vectors import IVFPQ_MIN_VECTORS, IndexType, VectorIndex, resolve_type

DIM = 32


def clustered(n: int, seed: int, centers: int = 40) -> np.ndarray:
    """Unit vectors around random centres: structured like real embeddings, unlike pure noise."""
    rng = np.random.default_rng(seed)
    middle = np.random.default_rng(1234).standard_normal((centers, DIM))
    x = middle[rng.integers(0, centers, n)] + 0.6 * rng.standard_normal((n, DIM))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def data():
    base = clustered(4000, seed=0)
    ids = np.arange(len(base), dtype=np.int64) * 7 + 3  # ids unrelated to positions
    queries = clustered(200, seed=1)
    return base, ids, queries


def brute_force(base, ids, queries, k, allowed=None):
    scores = queries.astype(np.float64) @ base.astype(np.float64).T  # (q, n)
    if allowed is not None:
        scores[:, ~np.isin(ids, allowed)] = -np.inf
    top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, top, axis=1), ids[top]


def recall_at(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(f) & set(t)) / len(t) for f, t in zip(found, truth, strict=True)]))


def test_exact_is_identical_to_brute_force(data):
    base, ids, queries = data
    index = VectorIndex.build(IndexType.EXACT, DIM, base, ids)
    scores, found = index.search(queries, 10)
    want_scores, want_ids = brute_force(base, ids, queries, 10)
    np.testing.assert_array_equal(found, want_ids)
    np.testing.assert_allclose(scores, want_scores, atol=1e-5)


def test_exact_filter_matches_brute_force_on_the_allowed_ids(data):
    base, ids, queries = data
    allowed = ids[ids % 3 == 0]
    index = VectorIndex.build(IndexType.EXACT, DIM, base, ids)
    _, found = index.search(queries, 10, allowed)
    np.testing.assert_array_equal(found, brute_force(base, ids, queries, 10, allowed)[1])


@pytest.mark.parametrize(("kind", "floor"), [(IndexType.HNSW, 0.95), (IndexType.IVFPQ, 0.4)])
def test_approximate_recall_at_10(data, kind, floor):
    base, ids, queries = data
    index = VectorIndex.build(kind, DIM, base, ids)
    _, found = index.search(queries, 10)
    recall = recall_at(found, brute_force(base, ids, queries, 10)[1])
    print(f"{kind.value} recall@10 = {recall:.3f}")
    assert recall >= floor
    assert set(found.ravel()) <= set(ids)


def test_removal_by_id(data):
    base, ids, queries = data
    index = VectorIndex.build(IndexType.EXACT, DIM, base, ids)
    _, before = index.search(queries[:5], 1)
    assert index.remove(before[:, 0]) == len(set(before[:, 0]))
    _, after = index.search(queries[:5], 10)
    assert not set(before[:, 0]) & set(after.ravel())
    keep = ~np.isin(ids, before[:, 0])
    np.testing.assert_array_equal(after, brute_force(base[keep], ids[keep], queries[:5], 10)[1])


def test_hnsw_says_it_cannot_remove(data):
    base, ids, _ = data
    index = VectorIndex.build(IndexType.HNSW, DIM, base[:100], ids[:100])
    assert not index.supports_remove
    with pytest.raises(NotImplementedError, match="rebuild"):
        index.remove(ids[:1])


def test_write_read_round_trip(tmp_path, data):
    base, ids, queries = data
    index = VectorIndex.build(IndexType.HNSW, DIM, base, ids)
    index.write(tmp_path / "v.faiss")
    again = VectorIndex.read(tmp_path / "v.faiss", IndexType.HNSW)
    assert again.size == len(base)
    np.testing.assert_array_equal(again.search(queries, 10)[1], index.search(queries, 10)[1])


def test_ivfpq_needs_enough_vectors_to_train(data):
    base, ids, _ = data
    with pytest.raises(ValueError, match=f"at least {IVFPQ_MIN_VECTORS}"):
        VectorIndex.build(IndexType.IVFPQ, DIM, base[:50], ids[:50])


def test_auto_chooses_by_size_and_names_bad_types():
    assert resolve_type("auto", 10) is IndexType.EXACT
    assert resolve_type("auto", 500_000) is IndexType.HNSW
    assert resolve_type("auto", 5_000_000) is IndexType.IVFPQ
    assert resolve_type("hnsw", 10) is IndexType.HNSW
    with pytest.raises(ValueError, match="exact"):
        resolve_type("flat", 10)


def test_wrong_shape_is_a_clear_error(data):
    base, ids, _ = data
    index = VectorIndex.build(IndexType.EXACT, DIM, base[:10], ids[:10])
    with pytest.raises(ValueError, match=r"\(n, 32\)"):
        index.search(np.zeros((2, 16), dtype=np.float32), 3)
