"""How many fills hold a word found nowhere else (unseen), and how many respell an item's word.

Two proxies, read from the fills that ``magnet eval infill --generate N`` stores in its JSON. Words
are lower-cased runs of letters of at least four.

- **Unseen**: a word of the fill that neither the reference text nor the item holds. A rough proxy
  for misspelt or invented words ("Downthedown" for "Downtown"); a real word the reference lacks
  ("solstice") counts too, so compare figures on the same items rather than reading one alone.
- **Respelt**: an unseen word that is close to a word of the item (the same first three letters
  and a ``difflib`` similarity of at least :data:`RESPELT_SIMILARITY`): the failure a ban on
  copying provokes, a name of the context spelt another way to get round the ban ("Downdown",
  "Downthedown" for the item's "Downtown").
  A rare real word unrelated to the item does not count, nor does another form of an item's word
  ("beaches" beside "beach").

    python scripts/invented_words.py runs/eval/p4-infill-dev-all.json [MORE.json ...]
    python scripts/invented_words.py p34-infill-dev-all.json -o p34-respelt-dev-all.json  # for rule_table.py
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
from pathlib import Path

from magnetsdk.eval.infill import stored_fills
from magnetsdk.files import atomic_write_text

RESPELT_SIMILARITY = 0.8
SAME_START = 3  # a respelt name keeps its first letters ("Downdown" for "Downtown")
MIN_LETTERS = 4
# Endings that make another form of the same word ("beach" -> "beaches", "locate" -> "located"):
# such a pair is an inflection, not a respelling.
INFLECTIONS = ("s", "es", "ed", "d", "ing", "y", "ly", "er", "ers", "ion", "ions")


def words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower())


def unseen_words(fill: dict, vocabulary: set[str]) -> set[str]:
    """The fill's words of at least four letters that neither ``vocabulary`` nor the item holds."""
    known = vocabulary | set(words(fill["left"] + fill["right"]))
    return {w for w in words(fill["generated"]) if len(w) >= MIN_LETTERS and w not in known}


def inflected(word: str, other: str) -> bool:
    """Whether one word is the other with an inflectional ending (a final "e" may drop first)."""
    short, long = sorted((word, other), key=len)
    stems = {short, short[:-1]} if short.endswith("e") else {short}
    return any(long == stem + ending for stem in stems for ending in INFLECTIONS)


def respellings(fill: dict, unseen: set[str]) -> set[str]:
    """The words of ``unseen`` (the fill's unseen words) that spell one of the item's words another
    way: the same first three letters, similarity >= 0.8, and not merely an inflection of it."""
    item = {w for w in words(fill["left"] + fill["right"]) if len(w) >= MIN_LETTERS}
    return {
        word
        for word in unseen
        if any(
            word[:SAME_START] == other[:SAME_START]
            and difflib.SequenceMatcher(None, word, other).ratio() >= RESPELT_SIMILARITY
            and not inflected(word, other)
            for other in item
        )
    }


def respelt_words(fill: dict, vocabulary: set[str]) -> set[str]:
    """The fill's unseen words that respell a word of the item."""
    return respellings(fill, unseen_words(fill, vocabulary))


def counts(fills: list[dict], vocabulary: set[str]) -> dict:
    """Fills holding an unseen word, fills holding a respelt word, and examples of each."""
    unseen = [unseen_words(f, vocabulary) for f in fills]
    respelt = [respellings(f, u) for f, u in zip(fills, unseen, strict=True)]
    return {
        "fills": len(fills),
        "unseen": sum(bool(u) for u in unseen),
        "respelt": sum(bool(r) for r in respelt),
        "unseen_examples": [sorted(u) for u in unseen if u][:6],
        "respelt_examples": [sorted(r) for r in respelt if r][:6],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", type=Path, help="magnet eval infill JSON with stored fills")
    parser.add_argument("--reference", type=Path, default=Path("../shared/data/wikitext2/wiki.valid.tokens"))
    parser.add_argument(
        "--output",
        "-o",
        type=Path,
        help="Also write the counts of the one result given as JSON ({'figures': {'respelt', 'unseen', 'fills'}}), "
        "for benchmarks/rule_table.py",
    )
    args = parser.parse_args(argv)
    if args.output and len(args.results) != 1:
        parser.error("--output writes the counts of one result: give one file")
    vocabulary = set(words(args.reference.read_text(encoding="utf-8")))
    for path in args.results:
        try:
            stored = stored_fills(path)
        except (OSError, ValueError) as error:
            parser.error(str(error))
        if args.output and len(stored) != 1:
            parser.error(f"{path} holds fills of {sorted(stored)}: --output needs one layout")
        for layout, fills in stored.items():
            found = counts(fills, vocabulary)
            if args.output:
                figures = {k: found[k] for k in ("respelt", "unseen", "fills")}
                atomic_write_text(
                    args.output, json.dumps({"figures": figures, "source": path.name}, indent=1)
                )
            print(
                f"{path.name} [{layout}]: {found['unseen']} of {found['fills']} fills "
                f"({found['unseen'] / found['fills']:.3f}) hold an unseen word, e.g. {found['unseen_examples']}; "
                f"{found['respelt']} respell a word of the item, e.g. {found['respelt_examples']}"
            )


if __name__ == "__main__":
    main()
