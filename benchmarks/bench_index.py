"""Retrieval benchmark: indexing throughput, and search latency / recall / memory per FAISS type.

1. Indexing: ``Index.upsert`` over paragraphs of wikitext-2 (validation split) with a real model
   (``--model``, default: the embedded default model) and with a tiny random model (shows the
   non-encoding overhead: chunking, SQLite, FAISS). Reports documents/s, chunks/s and the share
   of the time spent encoding.
2. Search: synthetic unit vectors of dimension 576 (the default model's), with a two-level
   cluster structure (topics -> subtopics -> noise) so neighbours are not uniformly random. For
   each size and type: build time, index memory (serialised bytes), single-query latency p50/p95
   and recall@10 against exact search. IVF-PQ is also reported with an exact re-rank of its top
   ``4k`` candidates (what ``Index.search`` does, reading the candidates' vectors from SQLite; here
   from memory).

    python benchmarks/bench_index.py                                  # full run (slow: 1M vectors)
    python benchmarks/bench_index.py --sizes 100000 --hnsw-max 100000 --docs 100
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
WIKITEXT = Path("/work/shared/data/wikitext2/wiki.valid.tokens")
DIM = 576


# ---------------------------------------------------------------------- data


def synthetic(n: int, seed: int, dim: int = DIM) -> np.ndarray:
    """Unit vectors: 256 topic centres, 64 subtopics each, then isotropic noise (float32, (n, d))."""
    structure = np.random.default_rng(7)
    topics = structure.standard_normal((256, dim)).astype(np.float32)
    subtopics = (topics[:, None, :] + 0.7 * structure.standard_normal((256, 64, dim))).astype(np.float32)
    subtopics = subtopics.reshape(-1, dim)
    rng = np.random.default_rng(seed)
    out = np.empty((n, dim), dtype=np.float32)
    for start in range(0, n, 100_000):
        m = min(100_000, n - start)
        x = subtopics[rng.integers(0, len(subtopics), m)] + 0.9 * rng.standard_normal(
            (m, dim), dtype=np.float32
        )
        out[start : start + m] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def paragraphs(count: int) -> list[str]:
    """Non-heading paragraphs of wikitext-2 validation with at least 40 words, in file order."""
    lines = [line.strip() for line in WIKITEXT.read_text(encoding="utf-8").splitlines()]
    picked = [line for line in lines if line and not line.startswith("=") and len(line.split()) >= 40]
    return picked[:count]


# ---------------------------------------------------------------------- indexing


def bench_indexing(magnet, label: str, texts: list[str], batch_size: int) -> dict:
    import tempfile

    from magnetsdk.index import Document, Index

    docs = [Document(f"p{i}", text) for i, text in enumerate(texts)]
    with tempfile.TemporaryDirectory() as tmp, Index.create(Path(tmp) / "idx", magnet) as index:
        report = index.upsert(docs, batch_size=batch_size)
        started = time.perf_counter()
        index.save()
        save_seconds = time.perf_counter() - started
        again = index.upsert(docs, batch_size=batch_size)  # all unchanged: the resume path
    total = report.seconds + save_seconds
    return {
        "model": label,
        "documents": len(docs),
        "chunks": report.chunks,
        "seconds": round(total, 3),
        "documents_per_s": round(len(docs) / total, 2),
        "chunks_per_s": round(report.chunks / total, 2),
        "encode_share": round(report.encode_seconds / total, 4),
        "resume_seconds": round(again.seconds, 3),
    }


# ---------------------------------------------------------------------- search


def latency(search, queries: np.ndarray) -> tuple[float, float]:
    times = []
    for q in queries:
        started = time.perf_counter()
        search(q[None, :])
        times.append(time.perf_counter() - started)
    ms = np.array(times) * 1000
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 95))


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(f) & set(t)) / truth.shape[1] for f, t in zip(found, truth, strict=True)]))


def bench_search(n: int, kinds: list[str], queries: int, hnsw_max: int, k: int = 10) -> list[dict]:
    from magnetsdk.index.vectors import IndexType, VectorIndex

    base = synthetic(n, seed=1)
    ids = np.arange(n, dtype=np.int64)
    qs = synthetic(queries, seed=2)
    rows = []
    truth = None
    for kind in kinds:
        if kind == "hnsw" and n > hnsw_max:
            rows.append(
                {
                    "vectors": n,
                    "type": kind,
                    "skipped": f"HNSW build above {hnsw_max} vectors not run (--hnsw-max)",
                }
            )
            print(f"{n:>9} {kind:<14} skipped (--hnsw-max {hnsw_max})", flush=True)
            continue
        started = time.perf_counter()
        index = VectorIndex.build(IndexType(kind), DIM, base, ids)
        build_s = time.perf_counter() - started
        _, found = index.search(qs, k)
        if kind == "exact":
            truth = found
        p50, p95 = latency(lambda q, index=index: index.search(q, k), qs)
        row = {
            "vectors": n, "type": kind, "build_s": round(build_s, 1), "memory_mb": round(index.memory_bytes() / 2**20, 1),
            "p50_ms": round(p50, 3), "p95_ms": round(p95, 3), "recall_at_10": round(recall(found, truth), 4),
        }  # fmt: skip
        rows.append(row)
        print(_line(row), flush=True)
        if kind == "ivfpq":

            def reranked(q, index=index):
                _, candidates = index.search(q, 4 * k)
                keep = candidates[candidates >= 0].reshape(len(q), -1)
                scores = np.einsum("qd,qcd->qc", q, base[keep])
                return np.take_along_axis(keep, np.argsort(-scores, axis=1)[:, :k], axis=1)

            p50, p95 = latency(reranked, qs)
            row = {**row, "type": "ivfpq+rerank", "p50_ms": round(p50, 3), "p95_ms": round(p95, 3),
                   "recall_at_10": round(recall(reranked(qs), truth), 4)}  # fmt: skip
            rows.append(row)
            print(_line(row), flush=True)
        del index
    return rows


def _line(row: dict) -> str:
    return (
        f"{row['vectors']:>9} {row['type']:<14} build {row['build_s']:>7.1f}s  mem {row['memory_mb']:>8.1f} MB  "
        f"p50 {row['p50_ms']:>8.3f} ms  p95 {row['p95_ms']:>8.3f} ms  recall@10 {row['recall_at_10']:.3f}"
    )


def markdown(results: dict) -> str:
    """The results as markdown tables (what docs/results.md shows)."""
    lines = []
    if results.get("indexing"):
        lines += ["| model | documents | chunks | seconds | documents/s | chunks/s | share encoding | re-run (all unchanged) |",
                  "|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for r in results["indexing"]:
            lines.append(
                f"| {r['model']} | {r['documents']} | {r['chunks']} | {r['seconds']:.1f} | {r['documents_per_s']:.2f} | "
                f"{r['chunks_per_s']:.2f} | {r['encode_share']:.1%} | {r['resume_seconds']:.3f} s |"
            )
        lines.append("")
    lines += [
        "| vectors | type | build (s) | memory (MB) | p50 (ms) | p95 (ms) | recall@10 |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results["search"]:
        if "skipped" in r:
            lines.append(f"| {r['vectors']:,} | {r['type']} | not run: {r['skipped']} | | | | |")
            continue
        lines.append(
            f"| {r['vectors']:,} | {r['type']} | {r['build_s']:.1f} | {r['memory_mb']:.1f} | {r['p50_ms']:.2f} | "
            f"{r['p95_ms']:.2f} | {r['recall_at_10']:.3f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--types", nargs="+", default=["exact", "hnsw", "ivfpq"])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--hnsw-max", type=int, default=1_000_000, help="skip HNSW above this many vectors")
    parser.add_argument("--docs", type=int, default=200, help="wikitext paragraphs for the indexing run")
    parser.add_argument("--model", default=None, help="real model for indexing [default: the embedded one]")
    parser.add_argument("--skip-indexing", action="store_true")
    parser.add_argument(
        "--threads", type=int, default=1, help="faiss OpenMP threads (1: stable single-query latency)"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "index.json")
    parser.add_argument(
        "--update", action="store_true", help="merge into --out: replace its rows of the same size and type"
    )
    parser.add_argument("--render", action="store_true", help="print --out as markdown tables and exit")
    args = parser.parse_args()
    if args.render:
        print(markdown(json.loads(args.out.read_text())))
        return

    import faiss
    import torch

    faiss.omp_set_num_threads(args.threads)

    results: dict = {
        "machine": {"platform": platform.platform(), "cpu_threads": torch.get_num_threads(),
                    "faiss": faiss.__version__, "faiss_threads": faiss.omp_get_max_threads(),
                    "load_average_at_start": round(os.getloadavg()[0], 2)},
        "search_data": "synthetic unit vectors, d=576, 256 topics x 64 subtopics + noise; queries from the same "
        "distribution; recall@10 against exact search; single-query latency",
    }  # fmt: skip
    if not args.skip_indexing:
        from magnetsdk import Magnet
        from magnetsdk.testing import tiny_magnet

        texts = paragraphs(args.docs)
        tiny = bench_indexing(
            tiny_magnet("llama"), "tiny random llama (d=64, 2 layers)", texts * 10, batch_size=32
        )
        print(tiny, flush=True)
        magnet = Magnet.from_pretrained(args.model)
        real = bench_indexing(
            magnet, magnet.name + (" + adapter" if magnet.identity.adapter else ""), texts, 16
        )
        print(real, flush=True)
        results["indexing"] = [real, tiny]
        results["indexing_data"] = (
            "wikitext-2 validation paragraphs of >= 40 words; chunk_tokens=256, overlap=32"
        )
    results["search"] = [
        row for n in args.sizes for row in bench_search(n, args.types, args.queries, args.hnsw_max)
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(markdown(results))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
