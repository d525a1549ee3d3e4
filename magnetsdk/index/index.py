"""``Index``: documents chunked, embedded by one model, searched by meaning.

An index is one directory::

    manifest.json           model identity, instructions, index type, chunking (fixed at creation)
    store.sqlite            documents, chunks, their vectors, and which FAISS file matches them
    vectors-000003.faiss    the FAISS index of the committed chunks

Saving is atomic. :meth:`Index.save` writes the FAISS file under a new generation name (temporary
file, fsync, rename), then commits the SQLite transaction that holds every change since the last
save *and* the new file name. A process killed before that commit leaves the previous
generation's file and rows untouched (SQLite rolls the open transaction back); one killed after it
has saved. Old generations are deleted only after the commit.

The index needs an encoder (see :class:`Encoder`), not a :class:`magnetsdk.Magnet` in particular.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterable
from enum import Enum
from pathlib import Path
from typing import Any, Protocol, overload

import numpy as np

from magnetsdk.index.chunking import ChunkSettings
from magnetsdk.index.documents import AddReport, Document, Hit
from magnetsdk.index.errors import EmptyIndexError
from magnetsdk.index.generations import build_from_store, read_committed, remove_stale, write_generation
from magnetsdk.index.manifest import MANIFEST_NAME, Manifest
from magnetsdk.index.planning import Plan, make_plan
from magnetsdk.index.search import search_chunks
from magnetsdk.index.store import STORE_NAME, Store
from magnetsdk.index.vectors import (
    IndexType,
    VectorIndex,
    VectorSettings,
    parse_type,
    resolve_type,
    unit_rows,
)


class Encoder(Protocol):
    """What an index needs from a model (:class:`magnetsdk.Magnet` is one)."""

    @property
    def identity(self) -> Any: ...  # has .to_dict() with model, adapter_sha256, dimension, ...

    @property
    def tokenizer(self) -> Any: ...  # a Hugging Face fast tokenizer, for chunking

    def encode(self, texts: list[str], instruction: str | None = None) -> np.ndarray: ...  # (n, d)


class Index:
    """Build with :meth:`create`, reopen with :meth:`open`; change, then :meth:`save`."""

    # How long a write waits for another process's write transaction before IndexBusyError.
    busy_timeout_s: float = 10.0

    def __init__(self, directory: Path, encoder: Encoder | None, manifest: Manifest, store: Store) -> None:
        self.directory = directory
        self.encoder = encoder
        self.manifest = manifest
        self._store = store
        self._settings = VectorSettings(**manifest.vector_settings)
        self._chunking = ChunkSettings(manifest.chunk_tokens, manifest.chunk_overlap)
        self._vectors: VectorIndex | None = None
        self._vectors_dirty = False  # the in-memory FAISS index differs from the committed file
        self._load_vectors()

    # ------------------------------------------------------------------ create / open

    @classmethod
    def create(
        cls,
        directory: str | os.PathLike,
        encoder: Encoder,
        index_type: IndexType | str = IndexType.EXACT,
        chunk_tokens: int = 256,
        chunk_overlap: int = 32,
        document_instruction: str | None = None,
        query_instruction: str | None = None,
        vector_settings: VectorSettings | None = None,
    ) -> Index:
        """A new, empty index in ``directory`` (which must not exist or be empty).

        Instructions default to the model's own; documents and queries may use different ones
        (the manifest keeps both, so later additions and searches use the same).
        """
        directory = Path(directory).expanduser()
        if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
            what = "an index" if (directory / MANIFEST_NAME).is_file() else "other files"
            raise FileExistsError(
                f"{directory} already holds {what}; open an existing index with Index.open(), or "
                "choose a new or empty directory"
            )
        identity = encoder.identity.to_dict()
        settings = vector_settings or VectorSettings()
        manifest = Manifest(
            identity=identity,
            document_instruction=identity["instruction"]
            if document_instruction is None
            else document_instruction,
            query_instruction=identity["instruction"] if query_instruction is None else query_instruction,
            index_type=parse_type(index_type).value,
            chunk_tokens=ChunkSettings(chunk_tokens, chunk_overlap).max_tokens,
            chunk_overlap=chunk_overlap,
            vector_settings=dict(settings.__dict__),
        )
        # Build the directory beside its destination and rename it into place: a directory with a
        # manifest is always a complete, openable index.
        directory.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.creating-", dir=directory.parent))
        try:
            Store(staging / STORE_NAME, create=True).close()
            manifest.save(staging)
            if directory.exists():
                directory.rmdir()
            os.replace(staging, directory)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return cls(
            directory, encoder, manifest, Store(directory / STORE_NAME, busy_timeout_s=cls.busy_timeout_s)
        )

    @classmethod
    def open(cls, directory: str | os.PathLike, encoder: Encoder | None) -> Index:
        """Open an index; raises :class:`IndexMismatchError` if ``encoder`` is not the model it was built with.

        ``encoder=None`` opens it for :meth:`stats`, :meth:`documents` and :meth:`search_vectors` only.
        """
        directory = Path(directory).expanduser()
        manifest = Manifest.load(directory)
        if encoder is not None:
            manifest.check_identity(encoder.identity.to_dict(), directory)
        return cls(
            directory, encoder, manifest, Store(directory / STORE_NAME, busy_timeout_s=cls.busy_timeout_s)
        )

    @classmethod
    def open_or_create(cls, directory: str | os.PathLike, encoder: Encoder, **create_options: Any) -> Index:
        """Open the index in ``directory``, or create it with ``create_options`` (see :meth:`create`).

        Options that differ from an existing index's manifest are ignored with a warning: an
        index keeps the type, chunking and instructions it was created with.
        """
        directory = Path(directory).expanduser()
        if not (directory / MANIFEST_NAME).is_file():
            return cls.create(directory, encoder, **create_options)
        index = cls.open(directory, encoder)
        ignored = [
            f"{key}={_plain(value)!r} (the index has {getattr(index.manifest, key)!r})"
            for key, value in create_options.items()
            if value is not None and _plain(value) != getattr(index.manifest, key)
        ]
        if ignored:
            warnings.warn(
                f"{directory} already exists, so these options for a new index are ignored: "
                + ", ".join(ignored),
                stacklevel=2,
            )
        return index

    def close(self) -> None:
        """Close the store; unsaved changes are discarded (with a warning)."""
        if self.has_unsaved_changes:
            warnings.warn(
                f"closing {self.directory} discards unsaved changes; call save() to keep them", stacklevel=2
            )
        self._store.close()

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ facts

    @property
    def has_unsaved_changes(self) -> bool:
        return self._store.in_transaction or self._vectors_dirty

    @property
    def index_type(self) -> IndexType | None:
        """The concrete FAISS type in use (None while the index is empty)."""
        return self._vectors.kind if self._vectors is not None else None

    def __len__(self) -> int:
        return self._store.document_count()

    def stats(self) -> dict[str, Any]:
        files = [p for p in self.directory.iterdir() if p.is_file()]
        faiss_file = self._store.get_state("faiss_file")
        return {
            "directory": str(self.directory),
            "documents": self._store.document_count(),
            "chunks": self._store.chunk_count(),
            "index_type": self.manifest.index_type,
            "index_type_in_use": self.index_type.value if self.index_type else None,
            "faiss_file": faiss_file or None,
            "generation": int(self._store.get_state("generation", "0")),
            "vector_bytes": self._vectors.memory_bytes() if self._vectors is not None else 0,
            "disk_bytes": sum(p.stat().st_size for p in files),
            "model": self.manifest.identity.get("model"),
            "adapter_sha256": self.manifest.identity.get("adapter_sha256"),
            "dimension": self.manifest.dimension,
            "document_instruction": self.manifest.document_instruction,
            "query_instruction": self.manifest.query_instruction,
            "chunk_tokens": self.manifest.chunk_tokens,
            "chunk_overlap": self.manifest.chunk_overlap,
            "unsaved_changes": self.has_unsaved_changes,
        }

    def documents(self) -> list[Document]:

        return [Document(d, text, json.loads(meta)) for d, text, meta, _ in self._store.documents()]

    # ------------------------------------------------------------------ add / delete

    def add(
        self,
        documents: Iterable[Document | str | dict[str, Any]],
        batch_size: int = 32,
        progress: bool = False,
    ) -> AddReport:
        """Chunk, encode and add new documents; an id that is already stored is an error."""
        return self._add(documents, upsert=False, batch_size=batch_size, progress=progress)

    def upsert(
        self,
        documents: Iterable[Document | str | dict[str, Any]],
        batch_size: int = 32,
        progress: bool = False,
    ) -> AddReport:
        """Add new documents, re-index those whose text changed, skip unchanged ones."""
        return self._add(documents, upsert=True, batch_size=batch_size, progress=progress)

    def plan(self, documents: Iterable[Document | str | dict[str, Any]], upsert: bool = True) -> Plan:
        """What adding ``documents`` would do, and the chunk texts to encode (nothing is changed)."""
        return make_plan(documents, self._store, self._require_encoder().tokenizer, self._chunking, upsert)

    def encode_chunks(self, texts: list[str], batch_size: int = 32, progress: bool = False) -> np.ndarray:
        """Embed chunk texts with the document instruction: float32 (n, d), unit rows, input order."""
        from tqdm.auto import tqdm

        dim = self.manifest.dimension
        out = np.zeros((len(texts), dim), dtype=np.float32)
        order = sorted(
            range(len(texts)), key=lambda i: len(texts[i]), reverse=True
        )  # similar lengths batch well
        with tqdm(total=len(texts), desc="encode", unit="chunk", disable=not progress) as bar:
            for start in range(0, len(order), batch_size):
                rows = order[start : start + batch_size]
                vectors = self._require_encoder().encode(
                    [texts[i] for i in rows], instruction=self.manifest.document_instruction
                )
                out[rows] = unit_rows(vectors, dim, len(rows))
                bar.update(len(rows))
        return out

    def apply(self, plan: Plan, vectors: np.ndarray) -> None:
        """Store a plan whose chunk texts were encoded into ``vectors`` (n, d), in plan order."""
        vectors = unit_rows(vectors, self.manifest.dimension, len(plan.chunks))
        if plan.is_empty:
            return
        try:
            with self._store.savepoint():
                removed = self._store.delete_documents([d.id for d in plan.changed])
                for doc in plan.new + plan.changed:
                    self._store.put_document(doc.id, doc.text, doc.metadata_json(), doc.content_hash)
                for doc in plan.metadata_only:
                    self._store.set_metadata(doc.id, doc.metadata_json())
                first = self._store.next_chunk_id()
                ids = np.arange(first, first + len(plan.chunks), dtype=np.int64)
                self._store.put_chunks(
                    [
                        (int(i), doc.id, position, chunk.start, chunk.end, chunk.text, vector)
                        for i, (doc, position, chunk), vector in zip(ids, plan.chunks, vectors, strict=True)
                    ]
                )
                self._update_vectors(removed, ids, vectors)
        except BaseException:
            self._load_vectors(from_store_only=True)  # the FAISS index may be half-changed: rebuild it
            raise

    def delete(self, ids: Iterable[str]) -> int:
        """Delete documents by id; returns how many were stored. Unknown ids are ignored."""
        ids = list(ids)
        stored = len(self._store.fingerprints(ids))
        if not stored:
            return 0
        removed = self._store.delete_documents(ids)
        self._update_vectors(removed, np.zeros(0, dtype=np.int64), None)
        return stored

    def rebuild(self, index_type: IndexType | str | None = None) -> None:
        """Rebuild the FAISS index from the stored vectors (optionally as another type; saved on save())."""
        if index_type is not None:
            self.manifest.index_type = parse_type(index_type).value
            self.manifest.save(self.directory)
        self._load_vectors(from_store_only=True)
        self._vectors_dirty = True

    # ------------------------------------------------------------------ search

    @overload
    def search(self, query: str, k: int = 10, filter: dict[str, Any] | None = None) -> list[Hit]: ...
    @overload
    def search(
        self, query: list[str], k: int = 10, filter: dict[str, Any] | None = None
    ) -> list[list[Hit]]: ...

    def search(
        self, query: str | list[str], k: int = 10, filter: dict[str, Any] | None = None
    ) -> list[Hit] | list[list[Hit]]:
        """Top-``k`` chunks for a query (a list of queries: one list of hits each), best first.

        ``filter`` keeps documents whose metadata has every given key equal to its value (a list
        value: equal to any of them), e.g. ``{"lang": "en", "year": [2023, 2024]}``.
        """
        single = isinstance(query, str)
        queries = [query] if single else list(query)
        self._require_vectors()
        vectors = (
            self._require_encoder().encode(queries, instruction=self.manifest.query_instruction)
            if queries
            else None
        )
        hits = self.search_vectors(vectors, k, filter) if queries else []
        return hits[0] if single else hits

    def search_vectors(
        self, queries: np.ndarray, k: int = 10, filter: dict[str, Any] | None = None
    ) -> list[list[Hit]]:
        """Top-``k`` hits for each query vector (q, d)."""
        if k < 1:
            raise ValueError(f"k={k} must be at least 1")
        vectors = self._require_vectors()
        queries = unit_rows(queries, self.manifest.dimension, None)
        return search_chunks(self._store, vectors, queries, k, filter)

    # ------------------------------------------------------------------ save

    def save(self) -> None:
        """Make every change since the last save durable, atomically (see the module docstring)."""
        if not self.has_unsaved_changes:
            return
        self._refresh_type()
        self._store.begin()
        name = self._store.get_state("faiss_file")
        if self._vectors_dirty:
            generation = int(self._store.get_state("generation", "0")) + 1
            name = (
                write_generation(self.directory, self._vectors, generation)
                if self._vectors is not None
                else ""
            )
            self._store.set_state(
                faiss_file=name,
                generation=str(generation),
                index_type_in_use=self._vectors.kind.value if self._vectors is not None else "",
            )
        self._store.commit()  # the atomic switch: rows and the FAISS file name together
        self._vectors_dirty = False
        remove_stale(self.directory, keep=name)

    # ------------------------------------------------------------------ internals

    def _require_encoder(self) -> Encoder:
        if self.encoder is None:
            raise ValueError(
                f"the index at {self.directory} was opened without a model; pass one to Index.open"
            )
        return self.encoder

    def _require_vectors(self) -> VectorIndex:
        if self._vectors is None or self._vectors.size == 0:
            raise EmptyIndexError(
                f"the index at {self.directory} holds no documents yet; add documents first "
                f"(Index.add, or `magnet index PATH --out {self.directory}`)"
            )
        return self._vectors

    def _update_vectors(self, removed: np.ndarray, ids: np.ndarray, vectors: np.ndarray | None) -> None:
        if self._vectors is None or (len(removed) and not self._vectors.supports_remove):
            self._load_vectors(from_store_only=True)  # HNSW cannot delete: rebuild from the store
        else:
            if len(removed):
                self._vectors.remove(removed)
            if vectors is not None:
                self._vectors.add(ids, vectors)
        self._vectors_dirty = True

    def _refresh_type(self) -> None:
        """Under ``auto``, switch type when the corpus has grown (or shrunk) past a boundary."""
        count = self._store.chunk_count()
        if (
            self._vectors is not None
            and resolve_type(self.manifest.index_type, count) is not self._vectors.kind
        ):
            self._load_vectors(from_store_only=True)
            self._vectors_dirty = True

    def _load_vectors(self, from_store_only: bool = False) -> None:
        """Read the committed FAISS file, or rebuild from the stored vectors when it is missing,
        damaged or out of step with the store (a warning says so)."""
        dim = self.manifest.dimension
        self._vectors = None
        if self._store.chunk_count() == 0:
            return
        if not from_store_only:
            self._vectors, problem = read_committed(self.directory, self._store, dim, self._settings)
            if self._vectors is not None:
                return
            warnings.warn(f"the FAISS file {problem}; rebuilding it from the stored vectors", stacklevel=3)
            self._vectors_dirty = True
        self._vectors = build_from_store(self._store, dim, self.manifest.index_type, self._settings)

    def _add(self, documents, upsert: bool, batch_size: int, progress: bool) -> AddReport:
        started = time.perf_counter()
        plan = self.plan(documents, upsert=upsert)
        encode_started = time.perf_counter()
        vectors = self.encode_chunks(plan.texts, batch_size=batch_size, progress=progress)
        encode_seconds = time.perf_counter() - encode_started
        self.apply(plan, vectors)
        return report_for(plan, encode_seconds, time.perf_counter() - started)


def report_for(plan: Plan, encode_seconds: float, seconds: float) -> AddReport:
    return AddReport(
        added=len(plan.new),
        updated=len(plan.changed),
        unchanged=plan.unchanged,
        metadata_only=len(plan.metadata_only),
        chunks=len(plan.chunks),
        encode_seconds=encode_seconds,
        seconds=seconds,
    )


def _plain(value: Any) -> Any:
    """A create() option as the manifest stores it (enum -> its value, settings -> a dict)."""
    if isinstance(value, Enum):
        return value.value
    return dict(value.__dict__) if isinstance(value, VectorSettings) else value
