"""Nothing lost, nothing silently wrong: one writer at a time, FAISS files checked by ids, a
versioned store, threads, and bad input refused before anything is encoded or written.

Real FAISS, SQLite and a tiny real model; other writers are other ``Index`` objects, other
threads or a real child process.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import faiss
import numpy as np
import pytest

from magnetsdk.index import Document, Index, IndexBusyError, IndexCorruptedError
from magnetsdk.index.store import SCHEMA_VERSION

TOPICS = ["cat and mat", "dog in the park", "Paris and France", "rain on the roof", "stocks and rates"]


def corpus(n: int = 30, prefix: str = "doc") -> list[Document]:
    return [Document(f"{prefix}-{i}", f"Note {i} is about {TOPICS[i % 5]}.", {"n": i}) for i in range(n)]


@pytest.fixture(scope="module")
def built_once(tmp_path_factory, llama_magnet):
    path = tmp_path_factory.mktemp("template") / "idx"
    with Index.create(path, llama_magnet) as built:
        built.add(corpus())
        built.save()
    return path


@pytest.fixture
def path(tmp_path, built_once):
    shutil.copytree(built_once, tmp_path / "idx")
    return tmp_path / "idx"


class Counting:
    """An encoder that counts the texts it encodes (delegating to a real Magnet)."""

    def __init__(self, magnet) -> None:
        self.magnet = magnet
        self.identity = magnet.identity
        self.tokenizer = magnet.tokenizer
        self.max_length = magnet.max_length
        self.texts = 0

    def encode(self, texts, instruction=None):
        self.texts += len(texts)
        return self.magnet.encode(texts, instruction=instruction)


def faiss_and_store_ids(path) -> tuple[list[int], list[int]]:
    conn = sqlite3.connect(path / "store.sqlite")
    name = conn.execute("SELECT value FROM state WHERE key = 'faiss_file'").fetchone()[0]
    store_ids = [r[0] for r in conn.execute("SELECT chunk_id FROM chunks ORDER BY chunk_id")]
    conn.close()
    index = faiss.read_index(str(path / name))
    return sorted(faiss.vector_to_array(index.id_map).tolist()), store_ids


def open_quietly(path, encoder):
    """Open, failing on any warning (a rebuild warning means the FAISS file did not match)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return Index.open(path, encoder)


# ---------------------------------------------------------------------- one writer


def test_two_writers_in_turn_never_save_from_a_stale_copy(path, llama_magnet):
    first = Index.open(path, llama_magnet)
    second = Index.open(path, llama_magnet)  # read the FAISS file before the first one saved
    first.delete(["doc-0"])
    first.add([Document("new", "A new note about violins and music.")])
    first.save()
    first.close()
    second.delete(["doc-1"])  # takes the write lock now: catches up with the first writer's save
    second.save()
    second.close()
    in_faiss, in_store = faiss_and_store_ids(path)
    assert in_faiss == in_store
    with open_quietly(path, llama_magnet) as again:
        found = {h.document_id for h in again.search("note", k=100)}
    assert "new" in found and not {"doc-0", "doc-1"} & found and len(found) == 29


def test_a_second_writer_waits_for_the_first_then_goes_on(path, llama_magnet, monkeypatch):
    monkeypatch.setattr(Index, "busy_timeout_s", 60.0)
    first = Index.open(path, llama_magnet)
    first.delete(["doc-0"])  # the write lock is held from here until close()
    done: list[int] = []

    def second_writer() -> None:
        with warnings.catch_warnings(), Index.open(path, llama_magnet) as second:
            warnings.simplefilter("ignore")  # "waiting for another writer"
            second.delete(["doc-1"])
            second.save()
            done.append(len(second))

    thread = threading.Thread(target=second_writer)
    thread.start()
    time.sleep(0.5)
    assert not done  # still waiting
    first.save()
    first.close()
    thread.join(timeout=60)
    assert done == [28]
    with open_quietly(path, llama_magnet) as again:
        assert len(again) == 28


def test_the_lock_belongs_to_a_live_process_and_dies_with_it(path, llama_magnet, monkeypatch):
    monkeypatch.setattr(Index, "busy_timeout_s", 0.3)
    holder = textwrap.dedent(
        """
        import sys, time
        from pathlib import Path
        from magnetsdk.index.writer import WriterLock
        WriterLock(Path(sys.argv[1])).acquire(5)
        print("HELD", flush=True)
        time.sleep(120)
        """
    )
    child = subprocess.Popen([sys.executable, "-c", holder, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "HELD"
        with Index.open(path, llama_magnet) as index:
            assert len(index) == 30  # readers are not blocked
            with (
                warnings.catch_warnings(),
                pytest.raises(IndexBusyError, match=f"process {child.pid}"),
            ):
                warnings.simplefilter("ignore")
                index.delete(["doc-0"])
        child.kill()
        child.wait(timeout=30)
        with Index.open(path, llama_magnet) as index:  # a killed writer leaves no stale lock
            assert index.delete(["doc-0"]) == 1
            index.save()
    finally:
        if child.poll() is None:
            child.kill()
        child.stdout.close()


def test_concurrent_open_or_create_of_a_new_index(tmp_path, llama_magnet):
    target = tmp_path / "fresh"
    barrier = threading.Barrier(4)

    def create() -> str:
        barrier.wait()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            index = Index.open_or_create(target, llama_magnet)
            index.close()
        return "ok"

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(lambda _: create(), range(4))) == ["ok"] * 4


# ---------------------------------------------------------------------- FAISS checked by ids


def test_a_faiss_file_with_the_same_count_but_other_ids_is_rebuilt(path, llama_magnet):
    with Index.open(path, llama_magnet) as index:
        want = [(h.document_id, round(h.score, 5)) for h in index.search("rain", k=5)]
        name = index.stats()["faiss_file"]
    stored = faiss.read_index(str(path / name))
    vectors = stored.index.reconstruct_n(0, stored.ntotal)
    ids = faiss.vector_to_array(stored.id_map)
    other = faiss.IndexIDMap2(faiss.IndexFlatIP(stored.d))
    other.add_with_ids(vectors, ids + 1000)  # same count and dimension, other chunks
    faiss.write_index(other, str(path / name))
    with (
        pytest.warns(UserWarning, match="holds the ids of other chunks"),
        Index.open(path, llama_magnet) as index,
    ):
        assert [(h.document_id, round(h.score, 5)) for h in index.search("rain", k=5)] == want
        index.save()
    open_quietly(path, llama_magnet).close()


# ---------------------------------------------------------------------- versioned store


def test_store_schema_version_is_recorded_upgraded_and_checked(path, llama_magnet):
    conn = sqlite3.connect(path / "store.sqlite")
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.execute("PRAGMA user_version=0")  # a store from before the schema had a version
    conn.commit()
    conn.close()
    with Index.open(path, llama_magnet) as index:
        assert len(index) == 30
    conn = sqlite3.connect(path / "store.sqlite")
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")  # written by a newer magnetsdk
    conn.commit()
    conn.close()
    with pytest.raises(IndexCorruptedError, match=f"schema version {SCHEMA_VERSION + 1}.*upgrade magnetsdk"):
        Index.open(path, llama_magnet)


def test_a_manifest_with_wrong_types_is_named(path, llama_magnet):
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["chunk_tokens"] = "256"
    manifest["identity"]["dimension"] = None
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexCorruptedError, match="chunk_tokens is str") as caught:
        Index.open(path, llama_magnet)
    assert "identity.dimension" in str(caught.value)


# ---------------------------------------------------------------------- rebuild, types, bad input


def test_a_failed_rebuild_changes_nothing(path, llama_magnet):
    with Index.open(path, llama_magnet) as index:
        with pytest.raises(ValueError, match="IVF-PQ"):
            index.rebuild("ivfpq")  # 30 vectors cannot train IVF-PQ
        assert index.manifest.index_type == "exact"
        index.add([Document("later", "Added after the failed rebuild.")])
        index.save()  # before the fix: the manifest said ivfpq and every save failed
    assert json.loads((path / "manifest.json").read_text())["index_type"] == "exact"
    with Index.open(path, llama_magnet) as index:
        index.rebuild("hnsw")
        assert json.loads((path / "manifest.json").read_text())["index_type"] == "exact"  # not yet
        index.save()
    assert json.loads((path / "manifest.json").read_text())["index_type"] == "hnsw"


def test_ivfpq_on_a_small_corpus_fails_before_encoding_and_a_retry_works(tmp_path, llama_magnet):
    encoder = Counting(llama_magnet)
    with (
        Index.create(tmp_path / "small", encoder, index_type="ivfpq") as index,
        pytest.raises(ValueError, match="IVF-PQ.*at least 1000"),
    ):
        index.add(corpus())
    assert encoder.texts == 0
    # The suggested retry: the never-saved index takes the new options.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        index = Index.open_or_create(tmp_path / "small", encoder, index_type="exact")
    with index:
        index.add(corpus())
        index.save()
        assert index.stats()["index_type"] == "exact" and len(index) == 30


def test_a_string_is_not_a_list_of_documents(path, llama_magnet, monkeypatch):
    monkeypatch.setattr(Index, "busy_timeout_s", 0.1)
    with Index.open(path, llama_magnet) as index:
        for wrong in ("abc", {"text": "one document"}, Document("x", "one")):
            with pytest.raises(TypeError, match="wrap a single document in a list"):
                index.add(wrong)
        with pytest.raises(TypeError, match="not one string"):
            index.delete("doc-1")
        assert len(index) == 30 and not index.has_unsaved_changes
        with Index.open(path, llama_magnet) as other:  # bad input did not make `index` the writer
            assert other.delete(["doc-1"]) == 1
            other.save()


def test_k_far_above_the_number_of_chunks_returns_them_all(path, llama_magnet):
    with Index.open(path, llama_magnet) as index:
        hits = index.search("rain", k=2**40)  # before: faiss tried to allocate k results per query
        assert len(hits) == index.stats()["chunks"]


def test_chunks_longer_than_the_encoder_reads_are_refused(tmp_path, llama_magnet):
    instruction = len(llama_magnet.tokenizer(llama_magnet.config.instruction)["input_ids"])
    room = llama_magnet.max_length - instruction - 3
    with pytest.raises(ValueError, match=f"chunk_tokens=600 is more than the model encodes.*at most {room}"):
        Index.create(tmp_path / "long", llama_magnet, chunk_tokens=600)
    assert not (tmp_path / "long").exists()
    Index.create(tmp_path / "fits", llama_magnet, chunk_tokens=room).close()
    # What "fits" means is what encode() reads: a chunk of `room` tokens is not truncated.
    text = " ".join(["cat"] * 2000)
    ids = llama_magnet.tokenizer(text, add_special_tokens=False)["input_ids"][:room]
    chunk = llama_magnet.tokenizer.decode(ids)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # encode warns when it truncates
        llama_magnet.encode([chunk])


# ---------------------------------------------------------------------- threads


def test_one_index_shared_by_threads(path, llama_magnet):
    with Index.open(path, llama_magnet) as index:
        want = [h.chunk_id for h in index.search("Paris", k=3)]
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(lambda _: [h.chunk_id for h in index.search("Paris", k=3)], range(8)))
            answers = list(
                pool.map(lambda q: llama_magnet.answer(q, index, k=2, max_new_tokens=2), ["cats?"] * 4)
            )
            writes = list(
                pool.map(lambda i: index.add([Document(f"t{i}", f"Thread {i} wrote this.")]).added, range(4))
            )
        assert results == [want] * 8
        assert len({a.text for a in answers}) == 1 and writes == [1, 1, 1, 1]
        index.save()
        assert len(index) == 34


# ---------------------------------------------------------------------- durable encoding

KILLED = textwrap.dedent(
    """
    import sys, time
    from magnetsdk.index import Document, Index
    from magnetsdk.testing import tiny_magnet

    directory, docs = sys.argv[1], int(sys.argv[2])
    magnet = tiny_magnet("llama")
    original, calls = magnet.encode, [0]

    def encode(texts, **options):
        calls[0] += 1
        if calls[0] == 4:  # three batches are encoded (and committed); stop in the fourth
            print("REACHED", flush=True)
            time.sleep(120)
        return original(texts, **options)

    magnet.encode = encode
    index = Index.open_or_create(directory, magnet)
    index.upsert([Document(f"doc-{i}", f"Note {i} is about {i % 5}.") for i in range(docs)], batch_size=4)
    index.save()
    """
)


def test_a_kill_while_encoding_keeps_the_encoded_chunks(tmp_path, llama_magnet):
    directory = tmp_path / "killed"
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED, str(directory), "30"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline().strip() == "REACHED"
        child.kill()
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
        child.stdout.close()
    encoder = Counting(llama_magnet)
    documents = [Document(f"doc-{i}", f"Note {i} is about {i % 5}.") for i in range(30)]
    with Index.open_or_create(directory, encoder) as index:
        report = index.upsert(documents, batch_size=4)
        index.save()
        assert report.added == 30 and encoder.texts == 30 - 3 * 4  # only what was missing
        conn = sqlite3.connect(directory / "store.sqlite")
        rows = conn.execute("SELECT text, vector FROM chunks ORDER BY chunk_id").fetchall()
        conn.close()
        stored = np.stack([np.frombuffer(r[1], dtype="<f4") for r in rows])
        want = llama_magnet.encode([r[0] for r in rows], instruction=index.manifest.document_instruction)
        np.testing.assert_allclose(stored, want, atol=1e-5)
    pending = sqlite3.connect(directory / "pending.sqlite")
    assert pending.execute("SELECT count(*) FROM vectors").fetchone()[0] == 0  # emptied by the save
    pending.close()


def _put_after(barrier, directory: str, rank: int, errors) -> None:
    from magnetsdk.index.pending import PendingVectors

    pending = PendingVectors(Path(directory))
    barrier.wait()  # both processes open the new file at the same moment
    try:
        pending.put([f"{rank}-{i}" for i in range(3)], np.full((3, 4), rank, dtype=np.float32))
    except Exception as error:  # reported to the test, which names it
        errors.put(repr(error))
    finally:
        pending.close()


def test_two_processes_start_the_same_pending_file_at_once(tmp_path):
    # The ranks of a sharded run commit their first batches to one new pending.sqlite together;
    # switching a new file to WAL fails at once with "database is locked" unless it is retried.
    import multiprocessing

    context = multiprocessing.get_context("fork")
    errors = context.Queue()
    for attempt in range(20):  # without the retry, about 4 in 10 attempts failed
        directory = tmp_path / str(attempt)
        directory.mkdir()
        barrier = context.Barrier(2)
        ranks = [
            context.Process(target=_put_after, args=(barrier, str(directory), r, errors)) for r in range(2)
        ]
        for process in ranks:
            process.start()
        for process in ranks:
            process.join(timeout=60)
        assert [p.exitcode for p in ranks] == [0, 0]
        assert errors.empty(), errors.get()
        conn = sqlite3.connect(directory / "pending.sqlite")
        assert conn.execute("SELECT count(*) FROM vectors").fetchone()[0] == 6
        conn.close()
