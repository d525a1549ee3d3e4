"""Compare the greedy fills of two ``magnet eval infill --generate N`` results on the same items.

Reads the fills each JSON stores and prints, per file, the copies (a 5-word run of the item's left or
right side, as ``magnet eval infill`` counts them), how many of those fills are unclosed, and the word
F1 with the true span; then which items copy in one file and not the other. ``--first-sentence``
also scores every fill cut after its first sentence (the first ``.``, ``!`` or ``?`` that ends a
word run), a check of whether a copy sits in the fill's first sentence or in what an unclosed fill
writes after it.

    python scripts/compare_fills.py OLD.json NEW.json [--first-sentence] [-o OUT.json]
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from magnetsdk.eval.infill import copies_context, stored_fills, word_f1

SENTENCE_END = re.compile(r"\w[^.!?]*?[.!?](?=\s|$)")


def first_sentence(fill: str) -> str:
    found = SENTENCE_END.search(fill)
    return fill[: found.end()] if found else fill


def read_fills(path: Path) -> list[dict]:
    try:
        stored = stored_fills(path)
    except (OSError, ValueError) as error:
        raise SystemExit(str(error)) from None
    if len(stored) != 1:
        raise SystemExit(f"{path}: holds fills for {len(stored)} layouts ({', '.join(stored)}); expected one")
    return next(iter(stored.values()))


def summarise(fills: list[dict], cut: bool) -> dict:
    spans = [first_sentence(f["generated"]) if cut else f["generated"] for f in fills]
    copies = [copies_context(s, f["left"], f["right"]) for s, f in zip(spans, fills, strict=True)]
    return {
        "items": len(fills),
        "copies": sum(copies),
        "copy_rate": sum(copies) / len(fills),
        "copies_unclosed": sum(c and not f["closed"] for c, f in zip(copies, fills, strict=True)),
        "word_f1": sum(word_f1(s, f["gold"]) for s, f in zip(spans, fills, strict=True)) / len(fills),
        "copying_items": [i for i, c in enumerate(copies) if c],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument(
        "--first-sentence", action="store_true", help="also score fills cut after one sentence"
    )
    parser.add_argument("-o", "--output", type=Path, help="write the figures as JSON")
    args = parser.parse_args()
    old, new = read_fills(args.old), read_fills(args.new)
    if [f["gold"] for f in old] != [f["gold"] for f in new]:
        raise SystemExit(f"{args.old} and {args.new} do not hold the same items in the same order")
    report: dict = {}
    for cut in (False, True) if args.first_sentence else (False,):
        label = "first sentence" if cut else "as decoded"
        rows = {name: summarise(fills, cut) for name, fills in (("old", old), ("new", new))}
        for name, path in (("old", args.old), ("new", args.new)):
            r = rows[name]
            print(
                f"{label:>14}  {path.name}: copies {r['copies']} of {r['items']} ({r['copy_rate']:.3f}), "
                f"{r['copies_unclosed']} of them unclosed; word F1 {r['word_f1']:.4f}"
            )
        gained = sorted(set(rows["new"]["copying_items"]) - set(rows["old"]["copying_items"]))
        lost = sorted(set(rows["old"]["copying_items"]) - set(rows["new"]["copying_items"]))
        print(f"{label:>14}  copying only in {args.new.name}: {gained}; only in {args.old.name}: {lost}")
        report[label] = {**rows, "only_new": gained, "only_old": lost}
    if args.output:
        args.output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
