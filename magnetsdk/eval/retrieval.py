"""Retrieval on a BEIR folder: nDCG@10, recall@10, recall@100 and MRR@10 of exact cosine search.

A BEIR folder (Thakur et al. 2021) holds

- ``corpus.jsonl``: one document per line, ``{"_id", "title", "text"}`` (``title`` optional);
- ``queries.jsonl``: one query per line, ``{"_id", "text"}``;
- ``qrels/test.tsv`` (or ``qrels/SPLIT.tsv``): ``query-id<TAB>corpus-id<TAB>score`` under that
  header; a score above 0 marks the document relevant.

Queries are encoded with the query instruction and documents with the document instruction (a
Magnet's both default to the model's instruction, as :class:`magnetsdk.Index` does; a
sentence-transformers model uses its ``encode_query`` / ``encode_document``, i.e. its own prompts).
A document is encoded as ``title + " " + text`` when it has a title, as BEIR's dense retrievers do.
Every document is scored against every query (exact search; ties keep corpus order), and only the
queries named in the qrels are scored.

The metrics are those of trec_eval (as BEIR and MTEB report them through pytrec_eval), averaged
over queries: nDCG@k with linear gains (a document's qrels score) over the ideal ordering of the
query's judged documents, recall@k (relevant documents in the top k / relevant documents), and
MRR@k (1 / rank of the first relevant document in the top k, 0 when none). With 0/1 scores they
equal sentence-transformers' ``InformationRetrievalEvaluator``. Figures are reported x100.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from magnetsdk.eval.encoder import MagnetEncoder, SentenceEncoder, SentenceTransformerEncoder
from magnetsdk.eval.result import EvalResult, data_file, utc_now
from magnetsdk.records import jsonl_rows, read_text

CUTOFFS = {"ndcg": (10,), "recall": (10, 100), "mrr": (10,)}


@dataclass
class RetrievalSet:
    name: str
    doc_ids: list[str]
    documents: list[str]  # title + " " + text, in corpus order
    query_ids: list[str]  # the queries named in the qrels, in queries.jsonl order
    queries: list[str]
    qrels: dict[str, dict[str, float]]  # query id -> document id -> score
    files: list[Path]
    split: str = "test"
    limit: int | None = None


def _read_jsonl(path: Path, kind: str) -> list[tuple[int, dict[str, Any]]]:
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found; a BEIR folder holds corpus.jsonl, queries.jsonl and qrels/test.tsv"
        )
    rows = []
    for row in jsonl_rows(read_text(path), str(path)):
        if "_id" not in row.fields or not isinstance(row.fields.get("text"), str):
            raise ValueError(f"{path}:{row.line}: a {kind} needs an '_id' and a 'text' string")
        rows.append((row.line, row.fields))
    if not rows:
        raise ValueError(f"{path} holds no {'queries' if kind == 'query' else kind + 's'}")
    return rows


def _unique_ids(path: Path, rows: list[tuple[int, dict[str, Any]]]) -> list[str]:
    seen: dict[str, int] = {}
    for number, row in rows:
        key = str(row["_id"])
        if key in seen:
            raise ValueError(f"{path}:{number}: the id {key!r} was already used on line {seen[key]}")
        seen[key] = number
    return list(seen)


def read_qrels(path: Path) -> dict[str, dict[str, float]]:
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found; qrels are qrels/SPLIT.tsv in a BEIR folder")
    lines = [line for line in read_text(path).splitlines() if line.strip()]
    header = lines[0].split("\t") if lines else []
    if [h.strip() for h in header] != ["query-id", "corpus-id", "score"]:
        raise ValueError(f"{path}: the first line must be the header query-id<TAB>corpus-id<TAB>score")
    qrels: dict[str, dict[str, float]] = {}
    for number, line in enumerate(lines[1:], start=2):
        cells = line.split("\t")
        if len(cells) != 3:
            raise ValueError(f"{path}:{number}: {len(cells)} tab-separated columns, expected 3")
        try:
            score = float(cells[2])
        except ValueError:
            raise ValueError(f"{path}:{number}: the score {cells[2]!r} is not a number") from None
        qrels.setdefault(cells[0].strip(), {})[cells[1].strip()] = score
    if not qrels:
        raise ValueError(f"{path} holds no judgements after its header")
    return qrels


def read_beir(directory: str | Path, split: str = "test", limit: int | None = None) -> RetrievalSet:
    """Read a BEIR folder; ``limit`` keeps the first ``limit`` judged queries (all documents stay)."""
    root = Path(directory)
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a folder; give a BEIR folder")
    corpus_path, queries_path, qrels_path = (
        root / "corpus.jsonl",
        root / "queries.jsonl",
        root / "qrels" / f"{split}.tsv",
    )
    corpus = _read_jsonl(corpus_path, "document")
    doc_ids = _unique_ids(corpus_path, corpus)
    documents = []
    for _, row in corpus:
        title = str(row.get("title") or "").strip()
        documents.append(f"{title} {row['text']}" if title else row["text"])
    query_rows = _read_jsonl(queries_path, "query")
    all_query_ids = _unique_ids(queries_path, query_rows)
    qrels = read_qrels(qrels_path)
    known_docs = set(doc_ids)
    unknown_queries = sorted(set(qrels) - set(all_query_ids))
    if unknown_queries:
        raise ValueError(
            f"{qrels_path} judges {len(unknown_queries)} query id(s) missing from {queries_path}, "
            f"e.g. {unknown_queries[0]!r}"
        )
    unknown_docs = sorted({d for judged in qrels.values() for d in judged} - known_docs)
    if unknown_docs:
        raise ValueError(
            f"{qrels_path} judges {len(unknown_docs)} document id(s) missing from {corpus_path}, "
            f"e.g. {unknown_docs[0]!r}"
        )
    query_ids, queries = [], []
    for (number, row), key in zip(query_rows, all_query_ids, strict=True):
        if key not in qrels or not any(s > 0 for s in qrels[key].values()):
            continue  # unjudged, or no relevant document: trec_eval leaves it out too
        if not row["text"].strip():
            raise ValueError(f"{queries_path}:{number}: the query {key!r} has empty text")
        query_ids.append(key)
        queries.append(row["text"])
        if limit is not None and len(query_ids) >= limit:
            break
    if not query_ids:
        raise ValueError(f"{qrels_path} marks no document relevant (score > 0) for any query")
    return RetrievalSet(
        root.name,
        doc_ids,
        documents,
        query_ids,
        queries,
        {k: qrels[k] for k in query_ids},
        [corpus_path, queries_path, qrels_path],
        split,
        limit,
    )


def top_k(queries: np.ndarray, documents: np.ndarray, k: int, block: int = 256) -> np.ndarray:
    """Row indices of the ``k`` documents (n_docs, d) most similar to each query (n_q, d), best
    first; equal scores keep corpus order. Returns (n_q, min(k, n_docs))."""
    k = min(k, len(documents))
    out = np.empty((len(queries), k), dtype=np.int64)
    docs = documents.astype(np.float32)
    for start in range(0, len(queries), block):
        scores = queries[start : start + block].astype(np.float32) @ docs.T  # (b, n_docs)
        if k < scores.shape[1]:
            candidates = np.argpartition(-scores, k - 1, axis=1)[:, :k]
            # argpartition cuts ties at the boundary arbitrarily: take everything tied with the k-th.
            kth = np.take_along_axis(scores, candidates, axis=1).min(axis=1, keepdims=True)
            for row in range(len(scores)):
                chosen = np.flatnonzero(scores[row] >= kth[row])
                order = np.lexsort((chosen, -scores[row, chosen]))[:k]
                out[start + row] = chosen[order]
        else:
            out[start : start + len(scores)] = np.argsort(-scores, axis=1, kind="stable")
    return out


def _unit(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to length 1, so that a dot product is a cosine (sentence-transformers models
    need not normalize)."""
    vectors = vectors.astype(np.float32)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def query_metrics(ranked: list[str], judged: dict[str, float]) -> dict[str, float]:
    """nDCG@10, recall@10/100 and MRR@10 (fractions) of one query's ranking against its judgements."""
    relevant = {d for d, s in judged.items() if s > 0}
    figures: dict[str, float] = {}
    for k in CUTOFFS["ndcg"]:
        dcg = sum(judged.get(d, 0.0) / math.log2(rank + 2) for rank, d in enumerate(ranked[:k]))
        ideal = sorted((s for s in judged.values() if s > 0), reverse=True)[:k]
        figures[f"ndcg@{k}"] = dcg / sum(s / math.log2(rank + 2) for rank, s in enumerate(ideal))
    for k in CUTOFFS["recall"]:
        figures[f"recall@{k}"] = len(relevant.intersection(ranked[:k])) / len(relevant)
    for k in CUTOFFS["mrr"]:
        first = next((rank for rank, d in enumerate(ranked[:k]) if d in relevant), None)
        figures[f"mrr@{k}"] = 0.0 if first is None else 1.0 / (first + 1)
    return figures


@dataclass
class _SentenceTransformerRole:
    """A sentence-transformers model encoding queries or documents with its own prompts."""

    encoder: SentenceTransformerEncoder
    role: str  # "query" or "document"

    def encode_texts(self, texts: list[str], batch_size: int = 32, show_progress: bool = False) -> np.ndarray:
        model = self.encoder.model
        encode = model.encode_query if self.role == "query" else model.encode_document
        vectors = encode(texts, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=show_progress)
        return np.asarray(vectors, dtype=np.float32)

    def identity(self) -> dict[str, Any]:
        return self.encoder.identity()


def role_encoders(
    encoder: SentenceEncoder, query_instruction: str | None = None, document_instruction: str | None = None
) -> tuple[SentenceEncoder, SentenceEncoder, dict[str, Any]]:
    """(query encoder, document encoder, the settings they use). ``None`` instructions mean the
    model's own; a sentence-transformers model takes none (it uses its ``query``/``document`` prompts)."""
    if isinstance(encoder, SentenceTransformerEncoder):
        if query_instruction is not None or document_instruction is not None:
            raise ValueError(
                "a sentence-transformers model is encoded with its own query/document prompts; "
                "drop the query and document instructions"
            )
        prompts = encoder.model.prompts or {}
        settings = {
            **encoder.settings(),
            "query_prompt": prompts.get("query"),
            "document_prompt": prompts.get("document"),
        }
        return (
            _SentenceTransformerRole(encoder, "query"),
            _SentenceTransformerRole(encoder, "document"),
            settings,
        )
    if isinstance(encoder, MagnetEncoder):
        queries = replace(encoder, instruction=query_instruction)
        documents = replace(encoder, instruction=document_instruction)
        settings = {k: v for k, v in queries.settings().items() if k != "instruction"}
        settings["query_instruction"] = queries.settings()["instruction"]
        settings["document_instruction"] = documents.settings()["instruction"]
        return queries, documents, settings
    if query_instruction is not None or document_instruction is not None:
        raise ValueError(f"{type(encoder).__name__} takes no instructions")
    return encoder, encoder, {}


def evaluate_retrieval(
    encoder: SentenceEncoder,
    data: RetrievalSet,
    query_instruction: str | None = None,
    document_instruction: str | None = None,
    batch_size: int = 32,
    show_progress: bool = True,
) -> EvalResult:
    """Score the judged queries of a BEIR folder (read by :func:`read_beir`) against its whole corpus."""
    started, start = utc_now(), time.perf_counter()
    query_encoder, document_encoder, settings = role_encoders(
        encoder, query_instruction, document_instruction
    )
    doc_vectors = document_encoder.encode_texts(data.documents, batch_size, show_progress)  # (n_docs, d)
    query_vectors = query_encoder.encode_texts(data.queries, batch_size, show_progress)  # (n_q, d)
    ranking = top_k(_unit(query_vectors), _unit(doc_vectors), max(max(v) for v in CUTOFFS.values()))
    per_query = [
        query_metrics([data.doc_ids[i] for i in row], data.qrels[key])
        for key, row in zip(data.query_ids, ranking, strict=True)
    ]
    names = list(per_query[0])
    figures: dict[str, Any] = {name: 100 * float(np.mean([q[name] for q in per_query])) for name in names}
    figures.update(queries=len(data.query_ids), documents=len(data.doc_ids))
    first_hits = [
        next((r + 1 for r, i in enumerate(row) if data.qrels[key].get(data.doc_ids[i], 0) > 0), None)
        for key, row in zip(data.query_ids, ranking, strict=True)
    ]
    return EvalResult(
        task="retrieval",
        figures=figures,
        headers=["data", "queries", "documents", *(f"{n} x100" for n in names)],
        rows=[[data.name, len(data.query_ids), len(data.doc_ids), *(figures[n] for n in names)]],
        settings={"split": data.split, "limit": data.limit, "batch_size": batch_size, **settings},
        model=encoder.identity(),
        data=[data_file(p) for p in data.files],
        started=started,
        seconds=time.perf_counter() - start,
        # Per query, the rank of its first relevant document within the top 100 (None: not there).
        details={"first_relevant_rank": dict(zip(data.query_ids, first_hits, strict=True))},
    )
