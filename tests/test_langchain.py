"""LangChain integration with real langchain-core objects, a real Index (FAISS + SQLite), a tiny model."""

from __future__ import annotations

import numpy as np
import pytest
from langchain_core.documents import Document as LCDocument
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import InMemoryVectorStore
from magnetsdk.integrations.langchain import MagnetEmbeddings, MagnetRetriever

from magnetsdk import Index
from magnetsdk.index.documents import Document

QUERY = "Given a question, find the passages that answer it:"
DOCS = [
    Document("cats", "The cat sat on the mat and looked at the door.", {"topic": "animals"}),
    Document("paris", "Paris is the capital of France and a city of museums.", {"topic": "places"}),
    Document("rates", "Stocks rose sharply after the central bank cut rates.", {"topic": "money"}),
]


@pytest.fixture(scope="module")
def index(llama_magnet, tmp_path_factory):
    directory = tmp_path_factory.mktemp("lc") / "index"
    with Index.create(directory, llama_magnet, query_instruction=QUERY) as created:
        created.add(DOCS)
        created.save()
    opened = Index.open(directory, llama_magnet)
    yield opened
    opened.close()


def test_embeddings_apply_the_query_and_document_instructions(llama_magnet):
    embeddings = MagnetEmbeddings(llama_magnet, query_instruction=QUERY)
    assert isinstance(embeddings, Embeddings)
    texts = [d.text for d in DOCS]
    np.testing.assert_allclose(embeddings.embed_documents(texts), llama_magnet.encode(texts), atol=1e-6)
    query = "Where is the capital of France?"
    np.testing.assert_allclose(
        embeddings.embed_query(query), llama_magnet.encode(query, instruction=QUERY), atol=1e-6
    )
    assert not np.allclose(embeddings.embed_query(query), embeddings.embed_documents([query])[0], atol=1e-3)
    with pytest.raises(TypeError, match="list of texts"):
        embeddings.embed_documents("one string")
    with pytest.raises(TypeError, match="magnetsdk.Magnet"):
        MagnetEmbeddings(object())


def test_embeddings_work_in_a_langchain_vector_store(llama_magnet):
    store = InMemoryVectorStore(MagnetEmbeddings(llama_magnet, query_instruction=QUERY))
    store.add_documents([LCDocument(page_content=d.text, id=d.id) for d in DOCS])
    query = "the capital of France"
    found = store.similarity_search_with_score(query, k=3)
    expected = llama_magnet.encode([d.text for d in DOCS]) @ llama_magnet.encode(query, instruction=QUERY)
    assert [doc.id for doc, _ in found] == [DOCS[i].id for i in np.argsort(-expected)]
    np.testing.assert_allclose([score for _, score in found], np.sort(expected)[::-1], atol=1e-5)


def test_retriever_returns_index_hits_as_documents(index):
    retriever = MagnetRetriever(index=index, k=2)
    assert isinstance(retriever, BaseRetriever)
    question = "Which city is the capital of France?"
    documents = retriever.invoke(question)
    hits = index.search(question, k=2)
    assert [d.page_content for d in documents] == [h.text for h in hits]
    assert [d.id for d in documents] == [f"{h.document_id}:{h.chunk_id}" for h in hits]
    first = documents[0].metadata
    assert first["score"] == pytest.approx(hits[0].score) and first["document_id"] == hits[0].document_id
    assert first["topic"] == hits[0].metadata["topic"] and (first["start"], first["end"]) == (
        hits[0].start,
        hits[0].end,
    )
    filtered = MagnetRetriever(index=index, k=3, filter={"topic": "money"}).invoke(question)
    assert [d.metadata["document_id"] for d in filtered] == ["rates"]
