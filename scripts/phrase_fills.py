"""How stored fills of gaps inside a sentence read: the figures whole-sentence items do not need.

A gap inside a sentence (``build_infill_set.py --phrase N``: a run of 1..N words) wants a short fill
that hands over to the right side. This reads the fills a ``magnet eval infill --generate N`` JSON
stores and counts, beside word F1 with the true span (:func:`magnetsdk.eval.infill.word_f1`), the fills
that hold a sentence end (:func:`magnetsdk.unclosed.sentence_ends`, the rule that cuts unclosed
fills: a title, an initial or "e.g." does not end one; no true span of such items holds one), the fills of at most
``--short`` words, the exact fills, and copies and loops as ``magnet eval infill`` counts them.

    python scripts/phrase_fills.py benchmarks/results/phrase-gaps-2026-12-07/p35-phrase-dev-c1.json
    python scripts/phrase_fills.py RESULT.json -o RESULT-phrase.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from magnetsdk.copies import loops
from magnetsdk.eval.infill import copies_context, stored_fills, word_f1
from magnetsdk.files import atomic_write_text
from magnetsdk.unclosed import sentence_ends


def counts(fills: list[dict], short: int = 8) -> dict[str, float]:
    """The figures of one layout's stored fills (each with "left", "gold", "generated", "right")."""
    generated = [f["generated"] for f in fills]
    return {
        "fills": len(fills),
        "gold_f1": float(np.mean([word_f1(f["generated"], f["gold"]) for f in fills])),
        "exact": sum(f["generated"].strip() == f["gold"].strip() for f in fills),
        "sentence_end": sum(bool(sentence_ends(g.strip())) for g in generated),
        "gold_sentence_end": sum(bool(sentence_ends(f["gold"].strip())) for f in fills),
        "short": sum(len(g.split()) <= short for g in generated),
        "mean_words": float(np.mean([len(g.split()) for g in generated])),
        "copies": sum(copies_context(f["generated"], f["left"], f["right"]) for f in fills),
        "loops": sum(loops(g) for g in generated),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", type=Path, help="magnet eval infill JSON with stored fills")
    parser.add_argument(
        "--short", type=int, default=8, help="A fill of at most this many words counts as short."
    )
    parser.add_argument("--output", "-o", type=Path, help="Also write the figures of the one result given.")
    args = parser.parse_args(argv)
    if args.output and len(args.results) != 1:
        parser.error("--output writes the figures of one result: give one file")
    for path in args.results:
        try:
            stored = stored_fills(path)
        except (OSError, ValueError) as error:
            parser.error(str(error))
        for layout, fills in stored.items():
            found = counts(fills, args.short)
            if args.output:
                atomic_write_text(args.output, json.dumps({"figures": found, "source": path.name}, indent=1))
            print(
                f"{path.name} [{layout}]: word F1 {found['gold_f1']:.4f}, exact {found['exact']}, "
                f"a sentence end in {found['sentence_end']} of {found['fills']} (true spans "
                f"{found['gold_sentence_end']}), <= {args.short} words {found['short']}, mean "
                f"{found['mean_words']:.1f} words, copies {found['copies']}, loops {found['loops']}"
            )


if __name__ == "__main__":
    main()
