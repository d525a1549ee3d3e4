"""Build a held-out retrieval set (a BEIR folder) from WikiText-2 text that training never sees.

Source: lines 1-500 of ``wiki.valid.tokens`` (``--lines``), the lines that
``scripts/prepare_training_data.py`` keeps out of training (its ``--holdout-lines 500``). A larger
``--lines`` is only held out if the training data is rebuilt with at least as many
``--holdout-lines``; the script refuses more than ``--holdout-lines`` (default 500) so the two stay
in step.

Inverse-cloze style (Lee et al. 2019): each paragraph of at least 12 words (headings dropped, as
training does) is split into sentences at `` . `` / `` ? `` / `` ! ``, and the sentences into
passages of ``--passage-sentences`` consecutive sentences (a one-sentence remainder joins the
passage before it). From the passages of 3 or more sentences, ``--queries`` are drawn (seeded);
each gives up one inner sentence (not the first or last, at least 8 words) as a query, and the
passage without that sentence becomes the query's one relevant document. Every other passage
stays in the corpus as it is, so the neighbours of the right passage (same article, same title)
are the hardest negatives. A document's title is its article's title.

Writes ``corpus.jsonl``, ``queries.jsonl``, ``qrels/test.tsv`` and ``build.json`` (source sha256,
settings, counts) under ``--out`` (default ``runs/data/retrieval-heldout``), replacing the folder
as a whole. The same source, lines and seed give the same files.

    python scripts/build_retrieval_set.py --shared ../shared/data --out runs/data/retrieval-heldout
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

MIN_PARAGRAPH_WORDS = 12  # as scripts/prepare_training_data.py
MIN_QUERY_WORDS = 8
SENTENCE_END = re.compile(r"(?<= [.!?]) +")


@dataclass
class Passage:
    doc_id: str
    title: str
    sentences: list[str]


def split_sentences(paragraph: str) -> list[str]:
    """Sentences of a tokenised WikiText paragraph; fragments under 3 words join the one before."""
    sentences: list[str] = []
    for piece in SENTENCE_END.split(paragraph.strip()):
        if sentences and len(piece.split()) < 3:
            sentences[-1] = f"{sentences[-1]} {piece}"
        elif piece:
            sentences.append(piece)
    return sentences


def passages(path: Path, lines: int, per_passage: int) -> list[Passage]:
    """The passages of the paragraphs in the first ``lines`` lines, in file order."""
    out: list[Passage] = []
    title = ""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines()[:lines], start=1):
        text = line.strip()
        if text.startswith("=") and not text.startswith("= ="):
            title = text.strip("= ").strip()  # an article heading; "= = Section = =" keeps it
            continue
        if not text or text.startswith("=") or len(text.split()) < MIN_PARAGRAPH_WORDS:
            continue
        sentences = split_sentences(text)
        groups = [sentences[i : i + per_passage] for i in range(0, len(sentences), per_passage)]
        if len(groups) > 1 and len(groups[-1]) == 1:
            groups[-2].extend(groups.pop())
        out.extend(Passage(f"w{number}-{k}", title, group) for k, group in enumerate(groups))
    return out


def build(passages_: list[Passage], queries: int, seed: int) -> tuple[list[dict], list[dict], list[tuple]]:
    """(corpus rows, query rows, qrels): ``queries`` passages drawn with ``seed`` lose a sentence."""
    rng = random.Random(seed)
    candidates = [p for p in passages_ if any(len(s.split()) >= MIN_QUERY_WORDS for s in p.sentences[1:-1])]
    chosen = {p.doc_id for p in rng.sample(candidates, min(queries, len(candidates)))}
    corpus, query_rows, qrels = [], [], []
    for passage in passages_:
        sentences = list(passage.sentences)
        if passage.doc_id in chosen:
            inner = [i for i in range(1, len(sentences) - 1) if len(sentences[i].split()) >= MIN_QUERY_WORDS]
            query = sentences.pop(rng.choice(inner))
            query_id = "q" + passage.doc_id[1:]
            query_rows.append({"_id": query_id, "text": query})
            qrels.append((query_id, passage.doc_id, 1))
        corpus.append({"_id": passage.doc_id, "title": passage.title, "text": " ".join(sentences)})
    return corpus, query_rows, qrels


def write_folder(out: Path, corpus: list[dict], queries: list[dict], qrels: list[tuple], info: dict) -> None:
    """Write the BEIR folder next to ``out`` and move it into place, replacing an older one."""
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))

    def jsonl(rows: list[dict]) -> str:
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)

    (staging / "qrels").mkdir()
    (staging / "corpus.jsonl").write_text(jsonl(corpus), encoding="utf-8")
    (staging / "queries.jsonl").write_text(jsonl(queries), encoding="utf-8")
    (staging / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{s}\n" for q, d, s in qrels), encoding="utf-8"
    )
    (staging / "build.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    staging.chmod(0o755)
    if out.exists():
        old = out.with_name(f".{out.name}-old")
        shutil.rmtree(old, ignore_errors=True)
        out.rename(old)
        staging.rename(out)
        shutil.rmtree(old)
    else:
        staging.rename(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--shared", type=Path, default=Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
    )
    parser.add_argument("--out", type=Path, default=Path("runs/data/retrieval-heldout"))
    parser.add_argument("--lines", type=int, default=500, help="use the first N lines of wiki.valid")
    parser.add_argument(
        "--holdout-lines",
        type=int,
        default=500,
        help="the --holdout-lines the training data was prepared with; --lines may not exceed it",
    )
    parser.add_argument("--passage-sentences", type=int, default=3)
    parser.add_argument("--queries", type=int, default=300, help="at most this many queries")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.lines > args.holdout_lines:
        raise SystemExit(
            f"--lines {args.lines} reaches past the {args.holdout_lines} lines held out of training; "
            "rebuild the training data with a larger --holdout-lines first and pass it here"
        )
    if args.passage_sentences < 3:
        raise SystemExit("--passage-sentences must be at least 3 (a query is an inner sentence)")
    source = args.shared / "wikitext2" / "wiki.valid.tokens"
    if not source.is_file():
        raise SystemExit(f"{source} not found; pass --shared DIR (the folder holding wikitext2/)")
    found = passages(source, args.lines, args.passage_sentences)
    corpus, queries, qrels = build(found, args.queries, args.seed)
    if not queries:
        raise SystemExit(f"no passage of {args.passage_sentences}+ sentences in the first {args.lines} lines")
    info = {
        "source": {"path": str(source), "sha256": hashlib.sha256(source.read_bytes()).hexdigest()},
        "lines": f"1-{args.lines}",
        "passage_sentences": args.passage_sentences,
        "seed": args.seed,
        "documents": len(corpus),
        "queries": len(queries),
        "articles": len({p.title for p in found}),
        "document_words_mean": round(sum(len(d["text"].split()) for d in corpus) / len(corpus), 1),
        "query_words_mean": round(sum(len(q["text"].split()) for q in queries) / len(queries), 1),
    }
    write_folder(args.out, corpus, queries, qrels, info)
    print(f"{len(queries)} queries, {len(corpus)} documents ({info['articles']} articles) -> {args.out}")


if __name__ == "__main__":
    main()
