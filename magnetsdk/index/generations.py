"""FAISS files as numbered generations beside the store: written, read back, rebuilt, cleaned up.

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
