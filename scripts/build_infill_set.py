"""Build the infill evaluation set: paragraphs of WikiText with one inner sentence removed.

With ``--phrase N`` a run of 1..N words is removed from inside that sentence instead (never its first
word or its closing mark; only words holding a letter or a digit): the gaps a user marks inside a
sentence ("The Eiffel Tower is in [GAP], the capital of France."), which whole-sentence items never
test. With ``--at-start`` the paragraph's first sentence is removed instead (an empty left side,
no leading space in the span): the gap a user marks at the start of a text ("[GAP] The museum
reopened in 2020.").

Each line of the output jsonl is ``{"left", "span", "right", "line"}``: up to ``--context``
sentences before the removed sentence, the sentence itself (with its leading space, so the three
texts join back into the original), up to ``--context`` sentences after, and the source line.
Headings (``= Title =``) are skipped; a paragraph qualifies when it has a sentence with at least
one sentence on each side whose length is within ``--min-words`` .. ``--max-words``. The removed
sentence is drawn at random (``--seed``) among those; paragraphs are used in file order.

    python scripts/build_infill_set.py /work/shared/data/wikitext2/wiki.valid.tokens \
        --items 100 --output runs/data/wikitext-infill.jsonl

The layout study selects on ``--lines 1-500`` (``infill-dev.jsonl``) and reports ``--lines 501-1000``
(``infill-test.jsonl``), which no selection decision has seen; training holds out lines 1-1000.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path

from magnetsdk.config import atomic_write_text

# WikiText is tokenized: sentences end with " . ", " ? " or " ! " followed by the next word.
_SENTENCE_END = re.compile(r"(?<= [.!?]) (?=\S)")


def sentences_of(paragraph: str) -> list[str]:
    return [s for s in _SENTENCE_END.split(paragraph.strip()) if s]


def build(
    lines: list[str],
    items: int,
    context: int,
    min_words: int,
    max_words: int,
    seed: int,
    first_line: int = 1,
    last_line: int | None = None,
    phrase: int = 0,
    at_start: bool = False,
) -> list[dict[str, object]]:
    rng = random.Random(seed)
    out: list[dict[str, object]] = []
    for number, line in enumerate(lines, 1):
        if number < first_line or (last_line is not None and number > last_line):
            continue
        text = line.strip()
        if not text or text.startswith("="):
            continue
        sentences = sentences_of(text)
        kept = range(0, min(1, len(sentences) - 1)) if at_start else range(1, len(sentences) - 1)
        inner = [i for i in kept if min_words <= len(sentences[i].split()) <= max_words]
        if not inner:
            continue
        k = rng.choice(inner)
        left = " ".join(sentences[max(0, k - context) : k])
        right = " ".join(sentences[k + 1 : k + 1 + context])
        if phrase:
            cut = phrase_cut(sentences[k], phrase, rng)
            if cut is None:
                continue
            before, span, after = cut
            left, right = f"{left} {before}", f" {after} {right}"
        else:
            span, right = (" " if left else "") + sentences[k], " " + right
        out.append({"left": left, "span": span, "right": right, "line": number})
        if len(out) >= items:
            break
    return out


def phrase_cut(sentence: str, most: int, rng: random.Random) -> tuple[str, str, str] | None:
    """``sentence`` as (words before, " " + a run of 1..``most`` words, words after): the run is
    inside the sentence (not its first word, not its closing mark) and every word in it holds a
    letter or a digit; None when the sentence has no such run."""
    words = sentence.split()
    length = rng.randint(1, most)
    starts = [
        i
        for i in range(1, len(words) - length)
        if all(any(c.isalnum() for c in w) for w in words[i : i + length])
    ]
    if not starts:
        return None
    i = rng.choice(starts)
    return " ".join(words[:i]), " " + " ".join(words[i : i + length]), " ".join(words[i + length :])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="wiki.valid.tokens (or any WikiText split)")
    parser.add_argument("--output", "-o", type=Path, required=True)
    parser.add_argument("--items", type=int, default=100)
    parser.add_argument("--context", type=int, default=3, help="Sentences kept on each side.")
    parser.add_argument("--min-words", type=int, default=5)
    parser.add_argument("--max-words", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--phrase",
        type=int,
        default=0,
        metavar="N",
        help="Remove a run of 1..N words inside the sentence instead.",
    )
    parser.add_argument(
        "--at-start",
        action="store_true",
        help="Remove each paragraph's first sentence instead (a gap at the start of a text).",
    )
    parser.add_argument(
        "--lines",
        default=None,
        metavar="A-B",
        help="Use only source lines A..B (1-based, inclusive), e.g. 501-1000 for a split of its own.",
    )
    args = parser.parse_args(argv)
    first, last = 1, None
    if args.lines:
        try:
            first, last = (int(x) for x in args.lines.split("-"))
        except ValueError:
            parser.error(f"--lines {args.lines!r} must look like 501-1000")
    if not args.source.is_file():
        parser.error(f"{args.source} not found; pass the path of a WikiText file")
    lines = args.source.read_text(encoding="utf-8").splitlines()
    if args.phrase < 0:
        parser.error(f"--phrase {args.phrase} must be >= 0 (0: remove the whole sentence)")
    if args.phrase and args.at_start:
        parser.error("--phrase and --at-start remove different gaps: give one of them")
    records = build(
        lines,
        args.items,
        args.context,
        args.min_words,
        args.max_words,
        args.seed,
        first,
        last,
        args.phrase,
        args.at_start,
    )
    if len(records) < args.items:
        print(f"only {len(records)} paragraphs qualify (asked for {args.items})", file=sys.stderr)
    atomic_write_text(args.output, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    print(f"wrote {len(records)} items to {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
