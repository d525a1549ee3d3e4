"""Build the answer quality set: cloze questions over WikiText paragraphs, answered by copying an entity.

Each line of the output jsonl is ``{"id", "paragraph", "question", "answer", "article", "line"}``. The
paragraph (detokenised) is the context; the question quotes one of its sentences with a name or a
year replaced by a blank; the answer is that name or year, copied verbatim from the paragraph. A
reader of the paragraph finds the sentence and copies the missing words, so exact match measures
whether a generator reads the context it was given.

Paragraphs (headings skipped) qualify at ``--min-words`` .. ``--max-words`` words. In each, the
candidates are sentences of 8 to 40 words without ``<unk>``, and in them runs of capitalised words
(not the sentence's first word, at most three words) or four-digit years; one candidate is drawn at
random (``--seed``), names preferred over years. Paragraphs are used in file order, one item each,
at most ``--per-article`` per WikiText article (so the set spans many topics).

    python scripts/build_answer_set.py /work/shared/data/wikitext2/wiki.valid.tokens \\
        --items 40 --output benchmarks/data/wikitext-answers.jsonl
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
_NAME_WORD = re.compile(r"^[A-Z][a-z]+$")
_YEAR = re.compile(r"^1[0-9]{3}$|^20[0-9]{2}$")
# Capitalised words that start clauses rather than name things.
_NOT_NAMES = {
    "The", "A", "An", "In", "On", "At", "He", "She", "It", "They", "His", "Her", "Its", "Their", "This",
    "That", "These", "Those", "After", "Before", "During", "When", "While", "However", "Although", "As",
    "By", "For", "From", "With", "Of", "To", "But", "And", "Or", "If", "Despite", "Following", "There",
    "We", "I", "Some", "Many", "Most", "Both", "Each", "All", "Other", "Another", "One", "Two", "Three",
}  # fmt: skip
BLANK = "____"
_ARTICLE = re.compile(r"^= [^=].* =$")  # "= Title =" opens an article; "= = Section = =" does not


def detokenize(text: str) -> str:
    """Undo WikiText's tokenisation (`` @-@ ``, spaces before punctuation) well enough to read."""
    text = re.sub(r" @(.)@ ", r"\1", text)
    text = re.sub(r" ([.,;:!?%)\]'])", r"\1", text)
    text = re.sub(r"([(\[$]) ", r"\1", text)
    text = re.sub(r" (n't|'s|'re|'ve|'ll|'d)\b", r"\1", text)
    text = re.sub(r'" (.*?) "', r'"\1"', text)
    return text.strip()


def sentences_of(paragraph: str) -> list[str]:
    return [s for s in _SENTENCE_END.split(paragraph.strip()) if s]


def candidates(sentence: str) -> list[tuple[int, int, str]]:
    """``(start, end, kind)`` word ranges of names (runs of capitalised words) and years."""
    words = sentence.split()
    found: list[tuple[int, int, str]] = []
    i = 1  # the first word is capitalised anyway
    while i < len(words):
        if _NAME_WORD.match(words[i]) and words[i] not in _NOT_NAMES:
            j = i
            while j + 1 < len(words) and _NAME_WORD.match(words[j + 1]):
                j += 1
            if j - i < 3:
                found.append((i, j + 1, "name"))
            i = j + 1
        elif _YEAR.match(words[i]):
            found.append((i, i + 1, "year"))
            i += 1
        else:
            i += 1
    return found


def build(
    lines: list[str], items: int, min_words: int, max_words: int, per_article: int, seed: int
) -> list[dict[str, object]]:
    rng = random.Random(seed)
    out: list[dict[str, object]] = []
    article, used = "", 0
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if _ARTICLE.match(text):
            article, used = text.strip("= "), 0
        if not text or text.startswith("=") or not min_words <= len(text.split()) <= max_words:
            continue
        if used >= per_article:
            continue
        options = []
        for sentence in sentences_of(text):
            words = sentence.split()
            if "<unk>" in words or not 8 <= len(words) <= 40:
                continue
            for start, end, kind in candidates(sentence):
                answer = " ".join(words[start:end])
                if text.count(answer) == 1:  # the blank has one right filler in the paragraph
                    options.append((kind, sentence, start, end, answer))
        names = [o for o in options if o[0] == "name"]
        if not (names or options):
            continue
        _, sentence, start, end, answer = rng.choice(names or options)
        words = sentence.split()
        blanked = " ".join([*words[:start], BLANK, *words[end:]])
        out.append(
            {
                "id": f"wikitext-valid-{number}",
                "paragraph": detokenize(text),
                "question": f'Which words fill the blank in "{detokenize(blanked)}"?',
                "answer": detokenize(answer),
                "article": article,
                "line": number,
            }
        )
        used += 1
        if len(out) >= items:
            break
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="wiki.valid.tokens (or any WikiText split)")
    parser.add_argument("--output", "-o", type=Path, required=True)
    parser.add_argument("--items", type=int, default=40)
    parser.add_argument("--min-words", type=int, default=60)
    parser.add_argument("--max-words", type=int, default=200)
    parser.add_argument("--per-article", type=int, default=2, help="Items per WikiText article at most.")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not args.source.is_file():
        parser.error(f"{args.source} not found; pass the path of a WikiText file")
    if args.items < 1:
        parser.error(f"--items {args.items} must be at least 1")
    lines = args.source.read_text(encoding="utf-8").splitlines()
    records = build(lines, args.items, args.min_words, args.max_words, args.per_article, args.seed)
    if len(records) < args.items:
        print(f"only {len(records)} paragraphs qualify (asked for {args.items})", file=sys.stderr)
    atomic_write_text(args.output, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    print(f"wrote {len(records)} items to {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
