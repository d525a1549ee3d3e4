"""How many stored fills loop, beside how many of the true spans do.

A fill loops when it repeats a run of :data:`~magnetsdk.copies.LOOP_UNITS` of its own words and
marks (:func:`magnetsdk.copies.loops`, the rule behind ``magnet eval infill``'s ``loop_rate``).
This reads the fills a ``magnet eval infill --generate N`` JSON stores, so results written before
that figure existed can be counted the same way.

    python scripts/loop_fills.py benchmarks/results/p35-2026-12-07/p35-infill-dev-all.json [MORE.json ...]
    python scripts/loop_fills.py p37-infill-dev-all.json -o p37-loops-dev-all.json  # for rule_table.py
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from magnetsdk.copies import loops
from magnetsdk.eval.infill import stored_fills
from magnetsdk.files import atomic_write_text


def counts(fills: list[dict]) -> dict[str, float]:
    """Looping fills, looping true spans, and the fills' rate, of one layout's stored fills."""
    looped = sum(loops(f["generated"]) for f in fills)
    return {
        "loops": looped,
        "gold_loops": sum(loops(f["gold"]) for f in fills),
        "fills": len(fills),
        "loop_rate": looped / len(fills),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", type=Path, help="magnet eval infill JSON with stored fills")
    parser.add_argument(
        "--output",
        "-o",
        type=Path,
        help="Also write the counts of the one result given ({'figures': {...}}), for benchmarks/rule_table.py",
    )
    args = parser.parse_args(argv)
    if args.output and len(args.results) != 1:
        parser.error("--output writes the counts of one result: give one file")
    for path in args.results:
        try:
            stored = stored_fills(path)
        except (OSError, ValueError) as error:
            parser.error(str(error))
        if args.output and len(stored) != 1:
            parser.error(f"{path} holds fills of {sorted(stored)}: --output needs one layout")
        for layout, fills in stored.items():
            found = counts(fills)
            if args.output:
                atomic_write_text(args.output, json.dumps({"figures": found, "source": path.name}, indent=1))
            print(
                f"{path.name} [{layout}]: {found['loops']} of {found['fills']} fills loop "
                f"({found['loop_rate']:.3f}); the true spans: {found['gold_loops']}"
            )


if __name__ == "__main__":
    main()
