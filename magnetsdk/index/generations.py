"""The FAISS index of an index directory: in memory (:class:`LiveVectors`) and as numbered
generation files beside the store, written, read back, rebuilt and cleaned up.

A generation's file is written under a temporary name, fsynced and renamed to
``vectors-NNNNNN.faiss``; the store's ``state`` table names the generation that matches its
committed rows and the SHA-256 of the file's sorted id list (the commit itself is
:meth:`magnetsdk.index.Index.save`'s job). A file that is missing, unreadable or out of step with
the store (another count, dimension, or id list: the same count of different chunks is caught
too) is never trusted: the index is rebuilt from the vectors kept in the store.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from pathlib import Path

import numpy as np

from magnetsdk.index.store import Store
from magnetsdk.index.vectors import IndexType, VectorIndex, VectorSettings, resolve_type


def ids_checksum(ids: np.ndarray) -> str:
    """SHA-256 of an id list, sorted (the order FAISS keeps ids in does not matter)."""
    return hashlib.sha256(np.sort(np.asarray(ids, dtype="<i8")).tobytes()).hexdigest()


def file_name(generation: int) -> str:
    return f"vectors-{generation:06d}.faiss"


def write_generation(directory: Path, vectors: VectorIndex, generation: int) -> str:
    """Write ``vectors`` as ``generation`` (temporary file, fsync, rename); return the file name."""
    name = file_name(generation)
    staging = directory / f".{name}.tmp"
    vectors.write(staging)
    _fsync(staging)
    os.replace(staging, directory / name)
    _fsync(directory)
    return name


def remove_stale(directory: Path, keep: str) -> None:
    """Delete every generation file (and temporary file) except ``keep``."""
    for stale in directory.glob("*vectors-*.faiss*"):
        if stale.name != keep:
            stale.unlink(missing_ok=True)


def read_committed(
    directory: Path, store: Store, dim: int, settings: VectorSettings
) -> tuple[VectorIndex | None, str | None]:
    """The FAISS index the store's committed state names: ``(index, None)``, or ``(None, problem)``
    when the file is missing, damaged or does not hold exactly the stored chunks."""
    name = store.get_state("faiss_file")
    count = store.chunk_count()
    if not name:
        return None, "is not recorded in the store"
    path = directory / name
    kind = IndexType(store.get_state("index_type_in_use") or IndexType.EXACT)
    try:
        loaded = VectorIndex.read(path, kind, settings)
    except RuntimeError as error:
        return (
            None,
            f"{path} is missing"
            if not path.exists()
            else f"{path} cannot be read ({str(error).splitlines()[0]})",
        )
    if loaded.size != count or loaded.dimension != dim:
        return (
            None,
            f"{path} holds {loaded.size} vectors of dimension {loaded.dimension} for {count} stored chunks of {dim}",
        )
    in_file = ids_checksum(loaded.ids())
    recorded = store.get_state("faiss_ids_sha256")
    if in_file != ids_checksum(store.chunk_ids()) or (recorded and recorded != in_file):
        return None, f"{path} holds the ids of other chunks than the {count} stored ones"
    return loaded, None


def build_from_store(
    store: Store, dim: int, requested: IndexType | str, settings: VectorSettings
) -> VectorIndex | None:
    """A new FAISS index of every stored vector (None when the store holds no chunks)."""
    parts = list(store.vectors(dim))
    if not parts:
        return None
    ids = np.concatenate([p[0] for p in parts])
    vectors = np.concatenate([p[1] for p in parts])  # (n, d)
    return VectorIndex.build(resolve_type(requested, len(ids)), dim, vectors, ids, settings)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LiveVectors:
    """The FAISS index an open :class:`~magnetsdk.index.Index` searches, and the committed
    generation it was read from; changed in memory, written as a new generation by :meth:`stage`."""

    def __init__(self, directory: Path, store: Store, dim: int, settings: VectorSettings) -> None:
        self.directory = directory
        self.store = store
        self.dim = dim
        self.settings = settings
        self.index: VectorIndex | None = None
        self.dirty = False  # differs from the committed file
        self.generation = 0  # the committed generation this was read from
        self._staged: int | None = None

    @property
    def behind(self) -> bool:
        """Whether another writer committed a generation since this one was read."""
        return int(self.store.get_state("generation", "0")) != self.generation

    def load(self, requested: IndexType | str) -> None:
        """Read the committed FAISS file, or rebuild from the stored vectors when it is missing,
        damaged or out of step with the store (a warning says so)."""
        self.generation = int(self.store.get_state("generation", "0"))
        self.index = None
        self.dirty = False
        if self.store.chunk_count() == 0:
            return
        self.index, problem = read_committed(self.directory, self.store, self.dim, self.settings)
        if self.index is None:
            warnings.warn(f"the FAISS file {problem}; rebuilding it from the stored vectors", stacklevel=4)
            self.rebuild(requested)
            self.dirty = True

    def rebuild(self, requested: IndexType | str) -> None:
        """A new index of every stored vector (None when there are none); raises if it cannot be built."""
        self.index = build_from_store(self.store, self.dim, requested, self.settings)

    def update(
        self, removed: np.ndarray, ids: np.ndarray, vectors: np.ndarray | None, requested: IndexType | str
    ) -> None:
        if self.index is None or (len(removed) and not self.index.supports_remove):
            self.rebuild(requested)  # HNSW cannot delete: rebuild from the store
        else:
            if len(removed):
                self.index.remove(removed)
            if vectors is not None:
                self.index.add(ids, vectors)
        self.dirty = True

    def refresh_type(self, requested: IndexType | str) -> None:
        """Under ``auto``, switch type when the corpus has grown (or shrunk) past a boundary."""
        if (
            self.index is not None
            and resolve_type(requested, self.store.chunk_count()) is not self.index.kind
        ):
            self.rebuild(requested)
            self.dirty = True

    def stage(self) -> str:
        """Inside the store's open transaction: write a new generation file if anything changed and
        record it (name, type, id checksum); return the file name the committed state names."""
        if not self.dirty:
            return self.store.get_state("faiss_file")
        generation = int(self.store.get_state("generation", "0")) + 1
        name = write_generation(self.directory, self.index, generation) if self.index is not None else ""
        self.store.set_state(
            faiss_file=name,
            generation=str(generation),
            index_type_in_use=self.index.kind.value if self.index is not None else "",
            faiss_ids_sha256=ids_checksum(self.index.ids()) if self.index is not None else "",
        )
        self._staged = generation
        return name

    def committed(self) -> None:
        """The store committed what :meth:`stage` recorded."""
        if self._staged is not None:
            self.generation, self._staged = self._staged, None
        self.dirty = False
