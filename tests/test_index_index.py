"""``magnetsdk.Index`` with a tiny real model: add, search, upsert, delete, save, reopen, bad input."""

from __future__ import annotations

import shutil
import sqlite3
import warnings

import numpy as np
import pytest

from magnetsdk.index import (
    Document,
    EmptyIndexError,
    Index,
    IndexBusyError,
    IndexCorruptedError,
    IndexMismatchError,
    IndexNotFoundError,
)
from magnetsdk.index.chunking import ChunkSettings, chunk_text
from magnetsdk.testing import tiny_magnet

TOPICS = ["cat and mat", "dog in the park", "Paris and France", "rain on the roof", "stocks and rates"]


def corpus(n: int = 30) -> list[Document]:
    return [
        Document(
            f"doc-{i}",
            f"Note {i} is about {TOPICS[i % 5]}. "
            + " ".join(f"Line {j} of note {i} mentions {TOPICS[(i + j) % 5]}." for j in range(i % 4)),
            {"topic": TOPICS[i % 5], "even": i % 2 == 0, "n": i},
        )
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def built_once(tmp_path_factory, llama_magnet):
    path = tmp_path_factory.mktemp("template") / "idx"
    with Index.create(path, llama_magnet, chunk_tokens=24, chunk_overlap=4) as built:
        built.add(corpus())
        built.save()
    return path


@pytest.fixture
def index(tmp_path, built_once, llama_magnet):
    """A fresh copy of a saved 30-document index, open (encoding it once per module keeps tests fast)."""
    shutil.copytree(built_once, tmp_path / "idx")
    built = Index.open(tmp_path / "idx", llama_magnet)
    yield built
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tests may leave changes unsaved on purpose
        built.close()


def stored_chunks(index: Index) -> tuple[np.ndarray, list[str], np.ndarray]:
    conn = sqlite3.connect(index.directory / "store.sqlite")
    rows = conn.execute("SELECT chunk_id, text, vector FROM chunks ORDER BY chunk_id").fetchall()
    conn.close()
    vectors = np.stack([np.frombuffer(r[2], dtype="<f4") for r in rows])  # (n, d)
    return np.array([r[0] for r in rows]), [r[1] for r in rows], vectors


def test_stored_vectors_are_the_models_embeddings_of_the_chunks(index, llama_magnet):
    _, texts, vectors = stored_chunks(index)
    want = llama_magnet.encode(texts, instruction=index.manifest.document_instruction)
    np.testing.assert_allclose(vectors, want, atol=1e-5)


def test_exact_search_equals_brute_force(index, llama_magnet):
    queries = ["a cat on a mat", "rain fell", "the capital of France"]
    results = index.search(queries, k=5)
    chunk_ids, _, vectors = stored_chunks(index)
    qs = llama_magnet.encode(queries, instruction=index.manifest.query_instruction)
    scores = qs.astype(np.float64) @ vectors.astype(np.float64).T  # (q, n)
    want = chunk_ids[np.argsort(-scores, axis=1, kind="stable")[:, :5]]
    assert [[h.chunk_id for h in hits] for hits in results] == want.tolist()
    np.testing.assert_allclose(
        [[h.score for h in hits] for hits in results], np.sort(scores, axis=1)[:, ::-1][:, :5], atol=1e-5
    )
    first = results[0][0]
    assert first.text == index.documents()[0].text[first.start : first.end] or first.document_id
    assert all(-1.0 <= h.score <= 1.0 + 1e-5 for hits in results for h in hits)


def test_long_documents_are_chunked(index):
    stats = index.stats()
    assert stats["chunks"] > stats["documents"] == 30


def test_single_query_returns_a_flat_list_with_text_and_metadata(index):
    hits = index.search("dog in the park", k=3)
    assert len(hits) == 3
    assert {"topic", "even", "n"} <= set(hits[0].metadata)
    assert hits[0].text


def test_metadata_filter(index):
    hits = index.search("anything", k=50, filter={"topic": "rain on the roof"})
    assert hits and {h.metadata["topic"] for h in hits} == {"rain on the roof"}
    both = index.search("anything", k=50, filter={"topic": ["cat and mat", "dog in the park"], "even": True})
    assert both and all(h.metadata["even"] and h.metadata["topic"] in TOPICS[:2] for h in both)
    assert index.search("anything", k=5, filter={"topic": "nothing like this"}) == []


def test_save_and_reopen_keeps_contents(index, llama_magnet):
    index.add(corpus(32)[30:])
    before = index.search("stocks and rates", k=5)
    index.save()
    index.close()
    with Index.open(index.directory, llama_magnet) as again:
        assert len(again) == 32
        assert [h.chunk_id for h in again.search("stocks and rates", k=5)] == [h.chunk_id for h in before]
        assert again.stats()["generation"] == 2
    assert sorted(p.name for p in index.directory.glob("*.faiss*")) == ["vectors-000002.faiss"]


def test_upsert_skips_unchanged_reindexes_changed_and_updates_metadata(index, llama_magnet):
    docs = corpus()
    docs[3] = Document("doc-3", "A completely new text about violins.", docs[3].metadata)
    docs[4] = Document("doc-4", docs[4].text, {"topic": "relabelled"})
    docs.append(Document("doc-new", "A new document about the sea shore."))
    report = index.upsert(docs)
    assert (report.added, report.updated, report.metadata_only, report.unchanged) == (1, 1, 1, 28)
    settings = ChunkSettings(index.manifest.chunk_tokens, index.manifest.chunk_overlap)
    assert report.chunks == sum(
        len(chunk_text(d.text, llama_magnet.tokenizer, settings)) for d in docs[3::27]
    )
    hits = index.search("violins", k=500, filter={"topic": docs[3].metadata["topic"]})
    texts = [h.text for h in hits if h.document_id == "doc-3"]
    assert texts and all(t in docs[3].text for t in texts)  # the old chunks are gone
    assert index.search("x", k=5, filter={"topic": "relabelled"})[0].document_id == "doc-4"


def test_delete_by_id(index):
    assert index.delete(["doc-0", "doc-5", "missing"]) == 2
    assert len(index) == 28
    hits = index.search("cat and mat", k=100)
    assert not {"doc-0", "doc-5"} & {h.document_id for h in hits}


@pytest.mark.parametrize("kind", ["hnsw", "auto"])
def test_other_types_add_delete_and_search(tmp_path, llama_magnet, kind):
    with Index.create(
        tmp_path / kind, llama_magnet, index_type=kind, chunk_tokens=16, chunk_overlap=4
    ) as index:
        index.add(corpus())
        index.delete(["doc-1"])  # HNSW cannot delete in place: rebuilt from the stored vectors
        hits = index.search("Paris and France", k=5)
        assert len(hits) == 5 and "doc-1" not in {h.document_id for h in hits}
        index.save()
        assert index.stats()["index_type_in_use"] == ("hnsw" if kind == "hnsw" else "exact")


def test_query_and_document_instructions_are_kept(tmp_path, llama_magnet):
    path = tmp_path / "instr"
    Index.create(path, llama_magnet, document_instruction="Doc:", query_instruction="Query:").close()
    with Index.open(path, llama_magnet) as index:
        assert (index.manifest.document_instruction, index.manifest.query_instruction) == ("Doc:", "Query:")


def test_unsaved_changes_are_discarded_on_close(tmp_path, llama_magnet):
    path = tmp_path / "unsaved"
    index = Index.create(path, llama_magnet)
    index.add(corpus(3))
    with pytest.warns(UserWarning, match="discards unsaved changes"):
        index.close()
    with Index.open(path, llama_magnet) as again:
        assert len(again) == 0


# ---------------------------------------------------------------------- bad input


def test_a_different_model_is_refused_with_the_differences(index):
    index.save()
    other = tiny_magnet("qwen2")
    with pytest.raises(IndexMismatchError, match="model: index has 'tiny-llama', model has 'tiny-qwen2'"):
        Index.open(index.directory, other)
    unadapted = tiny_magnet("llama", adapted=False)
    with pytest.raises(IndexMismatchError, match="pooling") as caught:
        Index.open(index.directory, unadapted)
    assert "encode_attention" in str(caught.value)


def test_empty_corpus_duplicates_and_blank_documents(index):
    with pytest.raises(ValueError, match="corpus is empty"):
        index.add([])
    with pytest.raises(ValueError, match="more than once"):
        index.add([Document("a", "one"), Document("a", "two")])
    with pytest.raises(ValueError, match="already in the index"):
        index.add([Document("doc-1", "again")])
    with pytest.raises(ValueError, match="no text"):
        index.add([Document("blank", "   ")])
    assert len(index) == 30  # nothing was half-added


def test_query_before_anything_is_indexed(tmp_path, llama_magnet):
    with (
        Index.create(tmp_path / "empty", llama_magnet) as index,
        pytest.raises(EmptyIndexError, match="no documents yet"),
    ):
        index.search("hello")


def test_missing_index_and_existing_directory(tmp_path, llama_magnet):
    with pytest.raises(IndexNotFoundError, match="magnet index PATH"):
        Index.open(tmp_path / "nowhere", llama_magnet)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="other files"):
        Index.create(tmp_path / "full", llama_magnet)


def test_lost_faiss_file_is_rebuilt_from_the_store(index, llama_magnet):
    index.save()
    want = [h.chunk_id for h in index.search("rain", k=5)]
    index.close()
    for faiss_file in index.directory.glob("vectors-*.faiss"):
        faiss_file.write_bytes(b"garbage")
    with pytest.warns(UserWarning, match="rebuilding it from the stored vectors"):
        again = Index.open(index.directory, llama_magnet)
    assert [h.chunk_id for h in again.search("rain", k=5)] == want
    again.save()  # writes a good file again
    again.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Index.open(index.directory, llama_magnet).close()


def test_a_second_writer_is_told_the_index_is_busy(index, llama_magnet, monkeypatch):
    monkeypatch.setattr(Index, "busy_timeout_s", 0.2)
    index.delete(["doc-0"])  # holds the write transaction until save()
    with Index.open(index.directory, llama_magnet) as other:
        assert len(other) == 30  # readers see the last saved state meanwhile
        with (
            pytest.warns(UserWarning, match="waiting up to 0.2s for another writer"),
            pytest.raises(IndexBusyError, match=r"another writer \(this process\) is writing"),
        ):
            other.delete(["doc-1"])
    index.save()
    with Index.open(index.directory, llama_magnet) as other:
        assert len(other) == 29


def test_corrupted_store_and_manifest_are_named(index, llama_magnet):
    index.save()
    index.close()
    for side in ("store.sqlite-wal", "store.sqlite-shm"):
        (index.directory / side).unlink(missing_ok=True)
    (index.directory / "store.sqlite").rename(index.directory / "moved.sqlite")
    with pytest.raises(IndexCorruptedError, match="store.sqlite is missing"):
        Index.open(index.directory, llama_magnet)
    (index.directory / "store.sqlite").write_bytes(b"not a database" * 100)
    with pytest.raises(IndexCorruptedError, match="store.sqlite"):
        Index.open(index.directory, llama_magnet)
    (index.directory / "manifest.json").write_text("{broken")
    with pytest.raises(IndexCorruptedError, match="manifest.json"):
        Index.open(index.directory, llama_magnet)
