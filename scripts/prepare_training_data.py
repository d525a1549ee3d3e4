"""Build the training files of the default adapter from ``../shared/data`` (nothing is downloaded).

Writes, under ``--out`` (default ``runs/data``):

- ``text.txt``: one training text per line for MNTP and MSG: WikiText-2 valid paragraphs (headings
  dropped) after the first ``--holdout-lines`` lines, STS-B train sentences and SNLI dev premises,
  deduplicated. STS-B scores are not used.
- ``snli_pairs.jsonl``: ``{"anchor", "positive", "negative"}`` per SNLI dev premise that has an
  entailed hypothesis (the positive) and a contradicted one (the hard negative), for SSCL.

STS-B dev is never read: it is kept for model selection. The first 500 lines of WikiText-2 valid
are never trained on either: the evaluations of ``docs/results.md`` read them (plain-text
perplexity: the first 20,480 tokens, up to line 249; repetition: the first 200 prefixes, up to line
454; the infill set: up to line 279). The shared data has no other WikiText split.

    python scripts/prepare_training_data.py --shared ../shared/data --out runs/data
"""

from __future__ import annotations

import argparse
import csv
import json
from collections import defaultdict
from pathlib import Path


def wikitext_paragraphs(path: Path, min_words: int, skip_lines: int = 0) -> list[str]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines()[skip_lines:]:
        text = line.strip()
        if not text or text.startswith("="):
            continue
        if len(text.split()) >= min_words:
            out.append(text)
    return out


def stsb_sentences(path: Path) -> list[str]:
    out = []
    with open(path, encoding="utf-8", newline="") as handle:
        for row in csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE):
            if len(row) >= 7:
                out.extend([row[5].strip(), row[6].strip()])
    return out


def snli_triples(folder: Path) -> tuple[list[str], list[dict[str, str]]]:
    premises = (folder / "s1.dev").read_text(encoding="utf-8").splitlines()
    hypotheses = (folder / "s2.dev").read_text(encoding="utf-8").splitlines()
    labels = (folder / "labels.dev").read_text(encoding="utf-8").splitlines()
    if not len(premises) == len(hypotheses) == len(labels):
        raise SystemExit(f"{folder}: s1, s2 and labels differ in length")
    by_premise: dict[str, dict[str, str]] = defaultdict(dict)
    for premise, hypothesis, label in zip(premises, hypotheses, labels, strict=True):
        by_premise[premise.strip()].setdefault(label.strip(), hypothesis.strip())
    pairs = [
        {"anchor": p, "positive": h["entailment"], "negative": h["contradiction"]}
        for p, h in by_premise.items()
        if "entailment" in h and "contradiction" in h
    ]
    return list(by_premise), pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--shared", type=Path, default=Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
    )
    parser.add_argument("--out", type=Path, default=Path("runs/data"))
    parser.add_argument("--min-words", type=int, default=12, help="shortest WikiText paragraph kept")
    parser.add_argument(
        "--holdout-lines",
        type=int,
        default=500,
        help="leading lines of wiki.valid kept out of training for evaluation",
    )
    args = parser.parse_args()

    premises, pairs = snli_triples(args.shared / "snli")
    texts = (
        wikitext_paragraphs(
            args.shared / "wikitext2" / "wiki.valid.tokens", args.min_words, args.holdout_lines
        )
        + stsb_sentences(args.shared / "stsb" / "sts-train.csv")
        + premises
    )
    unique = list(dict.fromkeys(t for t in texts if t))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "text.txt").write_text("\n".join(unique) + "\n", encoding="utf-8")
    with open(args.out / "snli_pairs.jsonl", "w", encoding="utf-8") as handle:
        for pair in pairs:
            handle.write(json.dumps(pair, ensure_ascii=False) + "\n")
    print(
        f"{len(unique)} texts -> {args.out / 'text.txt'}; {len(pairs)} pairs -> {args.out / 'snli_pairs.jsonl'}"
    )


if __name__ == "__main__":
    main()
