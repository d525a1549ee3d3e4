"""The greedy fills that copy their context (or loop), as negatives for copy unlikelihood training.

Reads the fills that ``magnet eval infill --generate N`` stores in its JSON (items built from text
the model trains on, never from the evaluation lines) and writes one line per fill that copies a
run of :data:`~magnetsdk.copies.COPY_WORDS` words of its left or right side:

    {"left": ..., "right": ..., "fill": ..., "avoid": [c1, c2, ...]}

``avoid`` holds the character offsets, inside ``fill``, of the words whose choice continued a copy:
in each longest run of fill words that lies inside a copied window, every word from the
``--keep``-th on (default 2: a copied two-word name stays free, the third copied word is a
negative). With ``--loops`` a fill that loops (:func:`~magnetsdk.copies.loop_offsets`: it repeats a
run of :data:`~magnetsdk.copies.LOOP_UNITS` of its own words and marks) is kept too, and every unit
that completes such a repeat is avoided as well. ``TrainConfig.copy_fills`` reads the file: the first token of each such word, given the
fill before it, is pushed down by an unlikelihood term (``copy_ul_weight``).

    magnet eval infill runs/data/infill-train-mine.jsonl --layout spm --generate 1000 \\
        --max-new-tokens 48 --batch-size 8 --model default -o runs/eval/p32-mine.json \\
        --no-repeat-ngram 0 --resample-copies 0 --no-cut-unclosed --no-whole-sentences   # the model's own, unguarded fills
    python scripts/copy_fills.py runs/eval/p32-mine.json -o runs/data/copy_fills.jsonl
    python scripts/copy_fills.py runs/eval/p32-mine.json --loops -o runs/data/copy_loop_fills.jsonl
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from magnetsdk.copies import COPY_WORDS, loop_offsets
from magnetsdk.eval.infill import stored_fills
from magnetsdk.files import atomic_write_text

WORD = re.compile(r"\w+")


def copied_words(fill: str, sides: list[str], size: int = COPY_WORDS) -> list[bool]:
    """For each word of ``fill`` (``\\w+``, lower-cased), whether it lies in a run of ``size`` fill words found in a side."""
    found = [m.group().lower() for m in WORD.finditer(fill)]
    windows: set[tuple[str, ...]] = set()
    for side in sides:
        side_words = [w.lower() for w in WORD.findall(side)]
        windows.update(tuple(side_words[i : i + size]) for i in range(len(side_words) - size + 1))
    inside = [False] * len(found)
    for i in range(len(found) - size + 1):
        if tuple(found[i : i + size]) in windows:
            inside[i : i + size] = [True] * size
    return inside


def avoided_offsets(fill: str, sides: list[str], keep: int = 2, size: int = COPY_WORDS) -> list[int]:
    """Character offsets of the fill words that continue a copy past its first ``keep`` words."""
    starts = [m.start() for m in WORD.finditer(fill)]
    inside = copied_words(fill, sides, size)
    offsets: list[int] = []
    run = 0
    for start, copied in zip(starts, inside, strict=True):
        run = run + 1 if copied else 0
        if run > keep:
            offsets.append(start)
    return offsets


def negatives(stored: dict[str, list[dict]], keep: int = 2, with_loops: bool = False) -> list[dict]:
    """The copying (and with ``with_loops`` the looping) fills of one ``magnet eval infill`` result's
    stored fills (:func:`~magnetsdk.eval.infill.stored_fills`), each with its ``avoid`` offsets."""
    out = []
    for fills in stored.values():
        for item in fills:
            sides = [item["left"], item["right"]]
            avoid = avoided_offsets(item["generated"], sides, keep)
            if with_loops:
                avoid = sorted({*avoid, *loop_offsets(item["generated"])})
            if avoid:
                out.append(
                    {"left": item["left"], "right": item["right"], "fill": item["generated"], "avoid": avoid}
                )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, nargs="+", help="magnet eval infill JSON (with --generate)")
    parser.add_argument("--output", "-o", type=Path, required=True)
    parser.add_argument("--keep", type=int, default=2, help="Copied words left free at the start of a run.")
    parser.add_argument(
        "--loops", action="store_true", help="Keep the looping fills too (their repeats avoided)."
    )
    args = parser.parse_args(argv)
    if args.keep < 0:
        parser.error(f"--keep {args.keep} must be >= 0")
    records: list[dict] = []
    for path in args.results:
        try:
            stored = stored_fills(path)
        except (OSError, ValueError) as error:
            parser.error(str(error))
        records.extend(negatives(stored, args.keep, args.loops))
    atomic_write_text(args.output, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    words = sum(len(r["avoid"]) for r in records)
    kind = "copying or looping" if args.loops else "copying"
    print(f"wrote {len(records)} {kind} fills ({words} avoided words) to {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
