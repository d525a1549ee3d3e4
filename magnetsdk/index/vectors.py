"""FAISS index types behind one small class: exact inner product, HNSW and IVF-PQ.

Vectors are unit-length float32 rows, so inner product is cosine similarity. Every type keys its
vectors by our chunk ids (int64), so deletes and lookups never depend on insertion order:

- ``exact``: ``IndexIDMap2(IndexFlatIP)``; results identical to brute-force numpy.
- ``hnsw``: ``IndexIDMap2(IndexHNSWFlat)``; a graph, fast and approximate, cannot delete in place
  (:attr:`VectorIndex.supports_remove` is False: the owner rebuilds it from stored vectors).
- ``ivfpq``: ``IndexIVFPQ``, trained on the vectors it is built from (k-means lists plus product
  quantisation, ~30x less memory than exact at d=576); approximate.
- ``auto``: chooses one of the above from the corpus size (:func:`resolve_type`).

With a GPU build of faiss (``faiss-gpu``) searches without a filter run on all visible GPUs
(exact and IVF-PQ; faiss has no GPU HNSW). This module knows nothing about documents or files
other than the one FAISS file it is asked to read or write.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np

from magnetsdk.index.types import (  # noqa: F401 - re-exported for callers of this module
    IVFPQ_MIN_VECTORS,
    IndexType,
    check_buildable,
    parse_type,
    resolve_type,
)


@dataclass(frozen=True)
class VectorSettings:
    hnsw_neighbors: int = 32  # M: graph degree
    hnsw_ef_construction: int = 80
    hnsw_ef_search: int = 128
    ivf_lists: int | None = None  # None: 2 * sqrt(n), at most n / 39
    ivf_train_per_list: int = 40  # k-means trains on a sample of this many vectors per list
    ivf_probe: int = 32
    pq_subquantizers: int | None = None  # None: the divisor of d closest to d / 8 (8 dims per byte)

    def __post_init__(self) -> None:
        for name in ("hnsw_neighbors", "hnsw_ef_construction", "hnsw_ef_search", "ivf_probe"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be at least 1")


def gpu_count() -> int:
    return faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0


def _subquantizers(dim: int) -> int:
    divisors = [m for m in range(1, dim + 1) if dim % m == 0]
    return min(divisors, key=lambda m: (abs(m - dim / 8), -m))


class VectorIndex:
    """A FAISS index of one concrete :class:`IndexType`, keyed by int64 ids."""

    def __init__(self, index: faiss.Index, kind: IndexType, settings: VectorSettings) -> None:
        self.index = index
        self.kind = kind
        self.settings = settings
        self._gpu_index: faiss.Index | None = None

    # ------------------------------------------------------------------ build / io

    @classmethod
    def build(
        cls,
        kind: IndexType,
        dim: int,
        vectors: np.ndarray,
        ids: np.ndarray,
        settings: VectorSettings | None = None,
    ) -> VectorIndex:
        """A new index of ``kind`` holding ``vectors`` (n, d) under ``ids`` (n,); IVF-PQ trains on them."""
        settings = settings or VectorSettings()
        kind = resolve_type(kind, len(vectors))
        if kind is IndexType.EXACT:
            index = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
        elif kind is IndexType.HNSW:
            graph = faiss.IndexHNSWFlat(dim, settings.hnsw_neighbors, faiss.METRIC_INNER_PRODUCT)
            graph.hnsw.efConstruction = settings.hnsw_ef_construction
            index = faiss.IndexIDMap2(graph)
        else:
            check_buildable(kind, len(vectors))
            lists = settings.ivf_lists or int(2 * math.sqrt(len(vectors)))
            lists = max(1, min(lists, len(vectors) // 39))
            m = settings.pq_subquantizers or _subquantizers(dim)
            if dim % m:
                raise ValueError(f"pq_subquantizers={m} must divide the dimension {dim}")
            index = faiss.IndexIVFPQ(faiss.IndexFlatIP(dim), dim, lists, m, 8, faiss.METRIC_INNER_PRODUCT)
            # Codebook training dominates build time on CPU; 32 points per centroid and 15 k-means
            # iterations per subquantizer cost little recall (measured in benchmarks/bench_index.py).
            index.do_polysemous_training = False
            index.pq.cp.max_points_per_centroid = 32
            index.pq.cp.niter = 15
            # A fixed-seed sample keeps training time bounded (k-means cost grows with n * lists).
            sample = min(len(vectors), max(settings.ivf_train_per_list * lists, 10_000))
            rows = (
                np.random.default_rng(0).choice(len(vectors), sample, replace=False)
                if sample < len(vectors)
                else None
            )
            index.train(_rows(vectors if rows is None else vectors[np.sort(rows)], dim))
        built = cls(index, kind, settings)
        built.add(ids, vectors)
        return built

    @classmethod
    def read(cls, path: Path, kind: IndexType, settings: VectorSettings | None = None) -> VectorIndex:
        """Load a FAISS file (faiss raises RuntimeError on a damaged file; the caller reports it)."""
        return cls(faiss.read_index(str(path)), kind, settings or VectorSettings())

    def write(self, path: Path) -> None:
        faiss.write_index(self.index, str(path))

    # ------------------------------------------------------------------ facts

    @property
    def size(self) -> int:
        return int(self.index.ntotal)

    @property
    def dimension(self) -> int:
        return int(self.index.d)

    @property
    def supports_remove(self) -> bool:
        return self.kind is not IndexType.HNSW

    def ids(self) -> np.ndarray:
        """The chunk ids this index holds (int64, in no particular order)."""
        if self.kind is IndexType.IVFPQ:
            lists = self.index.invlists
            parts = [
                faiss.rev_swig_ptr(lists.get_ids(i), lists.list_size(i)).copy()
                for i in range(self.index.nlist)
                if lists.list_size(i)
            ]
            return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)
        return faiss.vector_to_array(self.index.id_map).astype(np.int64)

    def memory_bytes(self) -> int:
        """Bytes the index occupies once serialised (close to its resident size)."""
        return int(faiss.serialize_index(self.index).nbytes)

    # ------------------------------------------------------------------ change

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        if len(ids) != len(vectors):
            raise ValueError(f"{len(ids)} ids for {len(vectors)} vectors")
        if len(ids):
            self.index.add_with_ids(_rows(vectors, self.dimension), np.ascontiguousarray(ids, dtype=np.int64))
            self._gpu_index = None

    def remove(self, ids: np.ndarray) -> int:
        if not self.supports_remove:
            raise NotImplementedError(f"a {self.kind.value} index cannot remove vectors; rebuild it")
        removed = int(self.index.remove_ids(np.ascontiguousarray(ids, dtype=np.int64))) if len(ids) else 0
        self._gpu_index = None
        return removed

    # ------------------------------------------------------------------ search

    def search(
        self, queries: np.ndarray, k: int, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top ``k`` per query: ``(scores, ids)``, each (q, k); missing results have id -1.

        ``allowed`` restricts results to those ids (a faiss ID selector, run on CPU).
        """
        queries = _rows(queries, self.dimension)
        selector = (
            faiss.IDSelectorBatch(np.ascontiguousarray(allowed, dtype=np.int64))
            if allowed is not None
            else None
        )
        if self.kind is IndexType.HNSW:
            params = faiss.SearchParametersHNSW(efSearch=max(self.settings.hnsw_ef_search, k), sel=selector)
        elif self.kind is IndexType.IVFPQ:
            params = faiss.SearchParametersIVF(nprobe=self.settings.ivf_probe, sel=selector)
        else:
            params = faiss.SearchParameters(sel=selector) if selector is not None else None
        if selector is None and self.kind is not IndexType.HNSW and gpu_count() > 0:
            return self._on_gpu().search(queries, k)  # GPU indexes take nprobe from the clone
        return self.index.search(queries, k, params=params)

    def _on_gpu(self) -> faiss.Index:
        if self._gpu_index is None:
            self._gpu_index = faiss.index_cpu_to_all_gpus(self.index)
            if self.kind is IndexType.IVFPQ:
                faiss.GpuParameterSpace().set_index_parameter(
                    self._gpu_index, "nprobe", self.settings.ivf_probe
                )
        return self._gpu_index


def _rows(vectors: np.ndarray, dim: int) -> np.ndarray:
    array = np.ascontiguousarray(vectors, dtype=np.float32)
    if array.ndim != 2 or array.shape[1] != dim:
        raise ValueError(f"expected vectors of shape (n, {dim}), got {array.shape}")
    return array


def unit_rows(vectors: np.ndarray, dim: int, count: int | None) -> np.ndarray:
    """Check an encoder's output is (count, dim) and finite; return it as float32 unit rows."""
    array = np.asarray(vectors, dtype=np.float32)
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2 or array.shape[1] != dim or (count is not None and array.shape[0] != count):
        raise ValueError(
            f"expected vectors of shape ({count if count is not None else 'n'}, {dim}), got {array.shape}"
        )
    if not np.isfinite(array).all():
        raise ValueError("the encoder returned NaN or infinite values")
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    return np.ascontiguousarray(array / np.maximum(norms, 1e-12))
