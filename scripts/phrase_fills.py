"""How stored fills of gaps inside a sentence read: the figures whole-sentence items do not need.

A gap inside a sentence (``build_infill_set.py --phrase N``: a run of 1..N words) wants a short fill
that hands over to the right side. This reads the fills a ``magnet eval infill --generate N`` JSON
stores and counts, beside word F1 with the true span (:func:`magnetsdk.eval.infill.word_f1`), the fills
that hold a sentence-ending mark (no true span of such items does), the fills of at most
``--short`` words, the exact fills, and copies and loops as ``magnet eval infill`` counts them.

    python scripts/phrase_fills.py benchmarks/results/phrase-gaps-2026-12-07/p35-phrase-dev-c1.json
    python scripts/phrase_fills.py RESULT.json -o RESULT-phrase.json
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np

from magnetsdk.copies import loops
from magnetsdk.eval.infill import copies_context, word_f1
from magnetsdk.files import atomic_write_text

# A full stop, question or exclamation mark that ends a sentence inside a fill or at its end.
_SENTENCE_END = re.compile(r"[.!?](?=\s|$|[\"')\]])")


def counts(fills: list[dict], short: int = 8) -> dict[str, float]:
    """The figures of one layout's stored fills (each with "left", "gold", "generated", "right")."""
    generated = [f["generated"] for f in fills]
    return {
        "fills": len(fills),
        "gold_f1": float(np.mean([word_f1(f["generated"], f["gold"]) for f in fills])),
        "exact": sum(f["generated"].strip() == f["gold"].strip() for f in fills),
        "sentence_end": sum(bool(_SENTENCE_END.search(g.strip())) for g in generated),
        "gold_sentence_end": sum(bool(_SENTENCE_END.search(f["gold"].strip())) for f in fills),
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
        stored = json.loads(path.read_text(encoding="utf-8")).get("details", {}).get("infills")
        if not stored:
            parser.error(f"{path} holds no fills: run magnet eval infill with --generate N")
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
