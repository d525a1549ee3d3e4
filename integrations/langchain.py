"""A Magnet and a :class:`magnetsdk.Index` as LangChain objects (``pip install magnetsdk[langchain]``).

- :class:`MagnetEmbeddings` is a ``langchain_core.embeddings.Embeddings``: ``embed_documents``
  encodes with the document instruction, ``embed_query`` with the query instruction (each defaults
  to the model's own instruction; a retrieval model usually wants a query instruction such as
  ``"Given a question, find the passages that answer it:"``).
- :class:`MagnetRetriever` is a ``langchain_core.retrievers.BaseRetriever`` over an existing
  index: ``invoke(question)`` returns the index's hits as ``Document`` objects, the chunk text as
  ``page_content`` and the document's metadata plus ``score``, ``document_id``, ``chunk_id``,
  ``start`` and ``end``. The index encodes the question with the query instruction it was built with.

Only ``langchain-core`` is needed; nothing here downloads anything or calls a service.
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field

from magnetsdk.magnet import Magnet

__all__ = ["MagnetEmbeddings", "MagnetRetriever", "hit_to_document"]


class MagnetEmbeddings(Embeddings):
    """LangChain embeddings computed by a loaded :class:`magnetsdk.Magnet` (unit vectors, as lists)."""

    def __init__(
        self,
        magnet: Magnet,
        query_instruction: str | None = None,
        document_instruction: str | None = None,
        batch_size: int = 32,
    ) -> None:
        if not isinstance(magnet, Magnet):
            raise TypeError(
                f"MagnetEmbeddings wraps a magnetsdk.Magnet, got {type(magnet).__name__}; "
                "load one with magnetsdk.Magnet.from_pretrained(...)"
            )
        self.magnet = magnet
        self.query_instruction = query_instruction
        self.document_instruction = document_instruction
        self.batch_size = batch_size

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if isinstance(texts, str):
            raise TypeError("embed_documents takes a list of texts; use embed_query for one query")
        vectors = self.magnet.encode(
            list(texts), instruction=self.document_instruction, batch_size=self.batch_size
        )
        return vectors.tolist()

    def embed_query(self, text: str) -> list[float]:
        if not isinstance(text, str):
            raise TypeError(f"embed_query takes one string, got {type(text).__name__}")
        return self.magnet.encode(text, instruction=self.query_instruction).tolist()


def hit_to_document(hit: Any) -> Document:
    """One :class:`magnetsdk.index.Hit` as a LangChain ``Document`` (id ``"<document_id>:<chunk_id>"``)."""
    metadata = {
        **hit.metadata,
        "score": hit.score,
        "document_id": hit.document_id,
        "chunk_id": hit.chunk_id,
        "start": hit.start,
        "end": hit.end,
    }
    return Document(page_content=hit.text, metadata=metadata, id=f"{hit.document_id}:{hit.chunk_id}")


class MagnetRetriever(BaseRetriever):
    """Retrieve the top ``k`` chunks of a :class:`magnetsdk.Index` (optionally metadata-filtered)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    index: Any  # a magnetsdk.Index opened with its model (Index.open(directory, magnet))
    k: int = Field(default=4, ge=1)
    filter: dict[str, Any] | None = None  # as Index.search's filter: every key equal (a list: any of)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return [hit_to_document(hit) for hit in self.index.search(query, k=self.k, filter=self.filter)]
