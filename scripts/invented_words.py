"""How many greedy fills hold a word found nowhere in a reference text or in the item itself.

A rough proxy for misspelt or invented words ("Downthedown" for "Downtown"), read from the fills
that ``magnet eval infill --generate N`` stores in its JSON. Words are lower-cased runs of letters
of at least four; a real word the reference lacks also counts, so compare figures on the same
items rather than reading one alone.

    python scripts/invented_words.py runs/eval/p4-infill-dev-all.json [MORE.json ...]
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path


def words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", type=Path, help="magnet eval infill JSON with stored fills")
    parser.add_argument("--reference", type=Path, default=Path("../shared/data/wikitext2/wiki.valid.tokens"))
    args = parser.parse_args()
    vocabulary = set(words(args.reference.read_text(encoding="utf-8")))
    for path in args.results:
        stored = json.loads(path.read_text(encoding="utf-8"))["details"]["infills"]
        for layout, fills in stored.items():
            found = []
            for fill in fills:
                known = vocabulary | set(words(fill["left"] + fill["right"]))
                found.append(sorted({w for w in words(fill["generated"]) if len(w) >= 4 and w not in known}))
            holding = [f for f in found if f]
            print(
                f"{path.name} [{layout}]: {len(holding)} of {len(fills)} fills "
                f"({len(holding) / len(fills):.3f}) hold an unseen word; e.g. {holding[:6]}"
            )


if __name__ == "__main__":
    main()
