"""Which of 8 ranked fills would each score pick? A study of ranking scores (issue: infilling).

Fills the first ``--limit`` items of a ``magnet eval infill`` file with ``Magnet.infill(candidates=8,
seed=0)`` (every other argument at its default) and reads, among each item's ranked candidates (the
decoded fills and their shorter cuts, ``InfillResult.candidates``), the fill each score would keep:

- ``total``: the summed log-likelihood the SDK ranks by (``candidate_ranking="total"``);
- ``whole total``: the same, among candidates that end a sentence and copy no 5-word run;
- ``right``: the summed log-likelihood of the right side's first 32 tokens after the fill, among the
  same candidates (what ``candidate_ranking="right"`` became);
- ``right, any``: the same among every candidate that copies nothing;
- the oracle: the candidate with the highest word F1 against the true span (the headroom).

It prints word F1, fills ending inside a sentence, copies and mean words for each, and stores the
candidates with their scores (``-o``); ``--read`` prints the table of a stored run again.

    .venv/bin/python scripts/rank_fills_study.py runs/data/infill-start-dev.jsonl --limit 60 \\
        -o benchmarks/results/ranked-start-2026-12-07/study-start-dev60.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from magnetsdk.copies import copies_text
from magnetsdk.eval.infill import read_infill_items, word_f1
from magnetsdk.ranking import RANK_AFTER
from magnetsdk.unclosed import ends_inside_a_sentence


def study(path: Path, limit: int) -> dict:
    from magnetsdk import Magnet
    from magnetsdk.eval.scoring import ScoredSequence, target_nll

    magnet = Magnet.from_pretrained()
    items = read_infill_items(path, limit)
    started = time.perf_counter()
    results = magnet.infill([f"{i.left}[GAP]{i.right}" for i in items], candidates=8, seed=0)
    rows = []
    for item, result in zip(items, results, strict=True):
        fills = [c.spans[0] for c in result.candidates]
        right = magnet.tokenizer(item.right, add_special_tokens=False)["input_ids"]
        sequences = []
        for fill in fills:
            full = (
                list(magnet.prefix)
                + magnet.tokenizer(item.left + fill + item.right, add_special_tokens=False)["input_ids"]
            )
            start = len(full) - len(right)
            end = min(len(full), start + RANK_AFTER)
            sequences.append(ScoredSequence(full[:end], list(range(start - 1, end - 1)), full[start:end]))
        scored = target_nll(magnet.model, sequences, "causal", magnet.pad_id, 16)
        rows.append(
            {
                "gold": item.span,
                "fills": fills,
                "total": [c.log_likelihood for c in result.candidates],
                "right": [-float(nll.sum()) for nll in scored],
                "fragment": [ends_inside_a_sentence(f) for f in fills],
                "copy": [copies_text(f, [item.left, item.right]) for f in fills],
                "f1": [word_f1(f, item.span) for f in fills],
            }
        )
    return {"data": str(path), "limit": limit, "seconds": time.perf_counter() - started, "items": rows}


def pick(row: dict, score: str, whole: bool) -> int:
    """The candidate ``score`` keeps, among those that copy nothing (and end a sentence, if ``whole``)."""
    allowed = [
        i
        for i, fill in enumerate(row["fills"])
        if fill.strip() and not row["copy"][i] and not (whole and row["fragment"][i])
    ]
    return max(allowed or range(len(row["fills"])), key=lambda i: row[score][i])


def table(stored: dict) -> list[str]:
    rows = stored["items"]
    lines = ["| pick | word F1 | ending inside a sentence | copies | mean words |", "|---|---|---|---|---|"]
    choosers = (
        ("total (the SDK's `total`)", lambda row: 0),  # the candidates come most likely first
        ("whole total", lambda row: pick(row, "total", whole=True)),
        ("right", lambda row: pick(row, "right", whole=True)),
        ("right, any", lambda row: pick(row, "right", whole=False)),
    )
    for name, choose in choosers:
        picked = [(row, choose(row)) for row in rows]
        lines.append(
            f"| {name} | {np.mean([r['f1'][p] for r, p in picked]):.4f} | "
            f"{sum(r['fragment'][p] for r, p in picked)} | {sum(r['copy'][p] for r, p in picked)} | "
            f"{np.mean([len(r['fills'][p].split()) for r, p in picked]):.1f} |"
        )
    lines.append(
        f"| oracle (best word F1 among the candidates) | {np.mean([max(r['f1']) for r in rows]):.4f} | | | |"
    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("items", type=Path, nargs="?", help="a magnet eval infill jsonl file")
    parser.add_argument("--limit", type=int, default=60)
    parser.add_argument("-o", "--output", type=Path)
    parser.add_argument("--read", type=Path, help="print the table of a stored study instead")
    args = parser.parse_args()
    if args.read:
        stored = json.loads(args.read.read_text(encoding="utf-8"))
    elif args.items:
        stored = study(args.items, args.limit)
        if args.output:
            args.output.write_text(json.dumps(stored, indent=1) + "\n", encoding="utf-8")
    else:
        parser.error("give an items file or --read STUDY.json")
    print("\n".join(table(stored)))


if __name__ == "__main__":
    main()
