"""``Index``: documents chunked, embedded by one model, searched by meaning.

An index is one directory::

    manifest.json           model identity, instructions, index type, chunking (fixed at creation)
    store.sqlite            documents, chunks, their vectors, and which FAISS file matches them
    vectors-000003.faiss    the FAISS index of the committed chunks
    pending.sqlite          vectors encoded since the last save (see magnetsdk.index.pending)
    write.lock              held by the one writer (see magnetsdk.index.writer)

Saving is atomic. :meth:`Index.save` writes the FAISS file under a new generation name (temporary
file, fsync, rename), then commits the SQLite transaction that holds every change since the last
save *and* the new file name. A process killed before that commit leaves the previous
generation's file and rows untouched (SQLite rolls the open transaction back); one killed after it
has saved. Old generations are deleted only after the commit.

One writer at a time: the first change an ``Index`` makes takes the directory's OS file lock and
keeps it until :meth:`Index.close`; on taking it, an index reloads the FAISS file if another writer
saved since it was read, so it never saves from a stale copy. Readers take no lock and pick up
other writers' saves on their next search. One ``Index`` may be shared by threads: calls are
serialised by its locks, and the encoder is called without holding them (a ``Magnet`` has its own).

The index needs an encoder (see :class:`Encoder`), not a :class:`magnetsdk.Magnet` in particular.

This file is longer than the ~400 lines other modules keep to because it is the one public class
and every public method states its contract and takes the locks; the concepts it calls live in
their own modules (planning, store, pending, writer, generations, search, manifest).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
import warnings
from collections.abc import Iterable
from enum import Enum
from pathlib import Path
from typing import Any, Protocol, overload

import numpy as np

from magnetsdk.index.chunking import ChunkSettings, check_fits_encoder
from magnetsdk.index.documents import AddReport, Document, Hit
from magnetsdk.index.errors import EmptyIndexError, IndexCorruptedError
from magnetsdk.index.generations import LiveVectors, remove_stale
from magnetsdk.index.manifest import MANIFEST_NAME, Manifest, new_manifest
from magnetsdk.index.pending import PendingVectors, encode_missing
from magnetsdk.index.planning import Plan, check_not_one_document, make_plan
from magnetsdk.index.search import search_chunks
from magnetsdk.index.store import STORE_NAME, Store
from magnetsdk.index.types import IndexType, check_buildable, parse_type, resolve_type
from magnetsdk.index.vectors import VectorIndex, VectorSettings, unit_rows
from magnetsdk.index.writer import WriterLock


class Encoder(Protocol):
    """What an index needs from a model (:class:`magnetsdk.Magnet` is one).

    An encoder may also have ``max_length`` (the most tokens it reads per text, instruction
    included): chunks longer than that are refused instead of being cut at encode time.
    """

    @property
    def identity(self) -> Any: ...  # has .to_dict() with model, adapter_sha256, dimension, ...

    @property
    def tokenizer(self) -> Any: ...  # a Hugging Face fast tokenizer, for chunking

    def encode(self, texts: list[str], instruction: str | None = None) -> np.ndarray: ...  # (n, d)


class Index:
    """Build with :meth:`create`, reopen with :meth:`open`; change, then :meth:`save`."""

    # How long a writer waits for another writer (of this or another process) before IndexBusyError.
    busy_timeout_s: float = 10.0

    def __init__(self, directory: Path, encoder: Encoder | None, manifest: Manifest, store: Store) -> None:
        self.directory = directory
        self.encoder = encoder
        self.manifest = manifest
        self._store = store
        try:
            self._settings = VectorSettings(**manifest.vector_settings)
        except (TypeError, ValueError) as error:
            store.close()
            raise IndexCorruptedError(
                f"{directory / MANIFEST_NAME} has invalid vector_settings ({error}); rebuild the index"
            ) from None
        self._chunking = ChunkSettings(manifest.chunk_tokens, manifest.chunk_overlap)
        self._lock = threading.RLock()  # the store connection and the FAISS index
        self._write_lock = threading.RLock()  # one change at a time, held while encoding
        self._writer = WriterLock(directory)
        self._pending = PendingVectors(directory, self.busy_timeout_s)
        self._live = LiveVectors(directory, store, manifest.dimension, self._settings)
        self._manifest_dirty = False  # rebuild() changed the index type; save() writes the manifest
        self._removed = 0  # documents deleted since the last save
        self._live.load(manifest.index_type)

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
            raise _exists_error(directory)
        manifest = new_manifest(
            encoder,
            index_type,
            chunk_tokens,
            chunk_overlap,
            document_instruction,
            query_instruction,
            dict((vector_settings or VectorSettings()).__dict__),
        )
        # Build the directory beside its destination and rename it into place: a directory with a
        # manifest is always a complete, openable index.
        directory.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.creating-", dir=directory.parent))
        try:
            Store(staging / STORE_NAME, create=True).close()
            manifest.save(staging)
            try:
                if directory.exists():
                    directory.rmdir()
                os.replace(staging, directory)
            except OSError:
                if (directory / MANIFEST_NAME).is_file():  # another process created it meanwhile
                    raise _exists_error(directory) from None
                raise
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
        index keeps the type, chunking and instructions it was created with. An index that was
        never saved into (no documents, generation 0, e.g. after a run that failed or was killed)
        takes the options given instead.
        """
        directory = Path(directory).expanduser()
        if not (directory / MANIFEST_NAME).is_file():
            try:
                return cls.create(directory, encoder, **create_options)
            except FileExistsError:
                if not (directory / MANIFEST_NAME).is_file():
                    raise  # other files, not an index created by a concurrent run
        index = cls.open(directory, encoder)
        if create_options and index._never_saved():
            index.lock_for_writing()
            if index._never_saved():
                _new_manifest(encoder, create_options).save(directory)
                index.close()
                return cls.open(directory, encoder)
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
        """Close the store and give up the write lock; unsaved changes are discarded (with a warning)."""
        with self._write_lock, self._lock:
            if self.has_unsaved_changes:
                warnings.warn(
                    f"closing {self.directory} discards unsaved changes; call save() to keep them",
                    stacklevel=2,
                )
            self._store.close()
            self._pending.close()
            self._writer.release()

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ facts

    @property
    def has_unsaved_changes(self) -> bool:
        return self._store.in_transaction or self._live.dirty or self._manifest_dirty

    @property
    def index_type(self) -> IndexType | None:
        """The concrete FAISS type in use (None while the index is empty)."""
        return self._live.index.kind if self._live.index is not None else None

    def __len__(self) -> int:
        with self._lock:
            return self._store.document_count()

    def stats(self) -> dict[str, Any]:
        with self._lock:
            files = [p for p in self.directory.iterdir() if p.is_file()]
            state = self._store.get_state
            return {
                "directory": str(self.directory),
                "documents": self._store.document_count(),
                "chunks": self._store.chunk_count(),
                "documents_removed_last_save": int(state("documents_removed_last_save", "0")),
                "documents_removed_total": int(state("documents_removed_total", "0")),
                "index_type": self.manifest.index_type,
                "index_type_in_use": self.index_type.value if self.index_type else None,
                "faiss_file": state("faiss_file") or None,
                "generation": int(state("generation", "0")),
                "vector_bytes": self._live.index.memory_bytes() if self._live.index is not None else 0,
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
        with self._lock:
            rows = list(self._store.documents())
        return [Document(d, text, json.loads(meta)) for d, text, meta, _ in rows]

    def document_sources(self) -> dict[str, str | None]:
        """``document id -> metadata["path"]`` (None without one), e.g. to find documents whose file is gone."""
        with self._lock:
            return self._store.document_sources()

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

    def lock_for_writing(self) -> None:
        """Become this index's one writer now (every change does it itself; see the module docstring).

        Waits up to :attr:`busy_timeout_s` for another writer, then raises :class:`IndexBusyError`.
        """
        with self._write_lock:
            if self._writer.held:
                return
            self._writer.acquire(self.busy_timeout_s)
            with self._lock:
                if self._live.behind:  # another writer saved since this index read its FAISS file
                    self._live.load(self.manifest.index_type)

    def plan(self, documents: Iterable[Document | str | dict[str, Any]], upsert: bool = True) -> Plan:
        """What adding ``documents`` would do, and the chunk texts to encode (nothing is changed).

        Raises before anything is encoded when the result could not be stored (e.g. an IVF-PQ
        index that would hold too few vectors to train on).
        """
        tokenizer = self._require_encoder().tokenizer
        check_fits_encoder(
            self._chunking,
            tokenizer,
            getattr(self.encoder, "max_length", None),
            self.manifest.document_instruction,
        )
        with self._lock:
            plan = make_plan(documents, self._store, tokenizer, self._chunking, upsert)
            after = (
                self._store.chunk_count()
                - self._store.chunk_count([d.id for d in plan.changed])
                + len(plan.chunks)
            )
            kind = resolve_type(self.manifest.index_type, after)
            if self._live.index is None or kind is not self._live.index.kind:
                check_buildable(self.manifest.index_type, after)  # the FAISS index will be (re)built
        return plan

    def encode_chunks(self, texts: list[str], batch_size: int = 32, progress: bool = False) -> np.ndarray:
        """Embed chunk texts with the document instruction: float32 (n, d), unit rows, input order.

        Each batch is committed to ``pending.sqlite`` as soon as it is encoded, and texts found there
        are not encoded again: a run killed while encoding loses nothing it had encoded.
        """
        from tqdm.auto import tqdm

        encoder = self._require_encoder()
        dim = self.manifest.dimension

        def encode(batch: list[str]) -> np.ndarray:
            vectors = encoder.encode(batch, instruction=self.manifest.document_instruction)
            return unit_rows(vectors, dim, len(batch))

        with tqdm(total=len(texts), desc="encode", unit="chunk", disable=not progress) as bar:
            instruction = self.manifest.document_instruction
            return encode_missing(texts, instruction, encode, self._pending, dim, batch_size, bar.update)

    def apply(self, plan: Plan, vectors: np.ndarray) -> None:
        """Store a plan whose chunk texts were encoded into ``vectors`` (n, d), in plan order."""
        vectors = unit_rows(vectors, self.manifest.dimension, len(plan.chunks))
        if plan.is_empty:
            return
        with self._write_lock:
            self.lock_for_writing()
            with self._lock:
                self._apply(plan, vectors)

    def delete(self, ids: Iterable[str]) -> int:
        """Delete documents by id; returns how many were stored. Unknown ids are ignored."""
        if isinstance(ids, str):
            raise TypeError("ids must be a list of document ids, not one string: index.delete([id])")
        ids = list(ids)
        with self._write_lock:
            self.lock_for_writing()
            with self._lock:
                stored = len(self._store.fingerprints(ids))
                if not stored:
                    return 0
                removed = self._store.delete_documents(ids)
                self._live.update(removed, np.zeros(0, dtype=np.int64), None, self.manifest.index_type)
                self._removed += stored
                return stored

    def rebuild(self, index_type: IndexType | str | None = None) -> None:
        """Rebuild the FAISS index from the stored vectors, optionally as another type.

        Nothing changes when the new index cannot be built (e.g. IVF-PQ on too few vectors); the
        new type is written to the manifest by :meth:`save`, after the commit.
        """
        kind = parse_type(index_type if index_type is not None else self.manifest.index_type).value
        with self._write_lock:
            self.lock_for_writing()
            with self._lock:
                self._live.rebuild(kind)  # raises before anything changed if it cannot be built
                self._live.dirty = True
                if kind != self.manifest.index_type:
                    self.manifest.index_type = kind
                    self._manifest_dirty = True

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
        value: equal to any of them), e.g. ``{"lang": "en", "year": [2023, 2024]}``. ``k`` above
        the number of chunks returns them all.
        """
        single = isinstance(query, str)
        queries = [query] if single else list(query)
        for i, text in enumerate(queries):
            if not isinstance(text, str):
                raise TypeError(f"query {i} is {type(text).__name__}, expected str")
        with self._lock:
            self._catch_up()
            self._require_vectors()
        vectors = (  # outside the index's lock: the encoder takes its own
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
        queries = unit_rows(queries, self.manifest.dimension, None)
        with self._lock:
            self._catch_up()
            vectors = self._require_vectors()
            return search_chunks(self._store, vectors, queries, min(k, vectors.size), filter)

    # ------------------------------------------------------------------ save

    def save(self) -> None:
        """Make every change since the last save durable, atomically (see the module docstring)."""
        with self._write_lock, self._lock:
            if not self.has_unsaved_changes:
                return
            self.lock_for_writing()
            self._live.refresh_type(self.manifest.index_type)
            self._store.begin()
            name = self._live.stage()
            total = int(self._store.get_state("documents_removed_total", "0")) + self._removed
            self._store.set_state(
                documents_removed_last_save=str(self._removed), documents_removed_total=str(total)
            )
            self._store.commit()  # the atomic switch: rows and the FAISS file name together
            self._live.committed()
            self._removed = 0
            if self._manifest_dirty:
                self.manifest.save(self.directory)
                self._manifest_dirty = False
            remove_stale(self.directory, keep=name)
            self._pending.clear()  # every pending vector is in the store now (or belonged to no plan)

    # ------------------------------------------------------------------ internals

    def _require_encoder(self) -> Encoder:
        if self.encoder is None:
            raise ValueError(
                f"the index at {self.directory} was opened without a model; pass one to Index.open"
            )
        return self.encoder

    def _require_vectors(self) -> VectorIndex:
        if self._live.index is None or self._live.index.size == 0:
            raise EmptyIndexError(
                f"the index at {self.directory} holds no documents yet; add documents first "
                f"(Index.add, or `magnet index PATH --out {self.directory}`)"
            )
        return self._live.index

    def _never_saved(self) -> bool:
        with self._lock:
            return self._store.document_count() == 0 and self._store.get_state("generation", "0") == "0"

    def _catch_up(self) -> None:
        """A reader picks up what another writer saved since it read the FAISS file."""
        if not self._writer.held and not self.has_unsaved_changes and self._live.behind:
            self._live.load(self.manifest.index_type)

    def _apply(self, plan: Plan, vectors: np.ndarray) -> None:
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
                self._live.update(removed, ids, vectors, self.manifest.index_type)
        except BaseException:
            self._live.rebuild(self.manifest.index_type)  # it may be half-changed: rebuild it
            raise

    def _add(self, documents, upsert: bool, batch_size: int, progress: bool) -> AddReport:
        started = time.perf_counter()
        check_not_one_document(documents)  # before taking the write lock
        with self._write_lock:
            self.lock_for_writing()  # before planning: no other writer changes the store meanwhile
            plan = self.plan(documents, upsert=upsert)
            encode_started = time.perf_counter()
            vectors = self.encode_chunks(plan.texts, batch_size=batch_size, progress=progress)
            encode_seconds = time.perf_counter() - encode_started
            self.apply(plan, vectors)
        return report_for(plan, encode_seconds, time.perf_counter() - started)


def report_for(plan: Plan, encode_seconds: float, seconds: float, removed: int = 0) -> AddReport:
    return AddReport(
        added=len(plan.new),
        updated=len(plan.changed),
        unchanged=plan.unchanged,
        metadata_only=len(plan.metadata_only),
        removed=removed,
        chunks=len(plan.chunks),
        encode_seconds=encode_seconds,
        seconds=seconds,
    )


def _new_manifest(encoder: Encoder, options: dict[str, Any]) -> Manifest:
    """The manifest :meth:`Index.create` would write with ``options``."""
    options = dict(options)
    settings = options.pop("vector_settings", None) or VectorSettings()
    return new_manifest(encoder, **options, vector_settings=dict(settings.__dict__))


def _exists_error(directory: Path) -> FileExistsError:
    what = "an index" if (directory / MANIFEST_NAME).is_file() else "other files"
    return FileExistsError(
        f"{directory} already holds {what}; open an existing index with Index.open(), or "
        "choose a new or empty directory"
    )


def _plain(value: Any) -> Any:
    """A create() option as the manifest stores it (enum -> its value, settings -> a dict)."""
    if isinstance(value, Enum):
        return value.value
    return dict(value.__dict__) if isinstance(value, VectorSettings) else value
