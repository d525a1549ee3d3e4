"""Build the training files of the default adapter from ``../shared/data`` (nothing is downloaded).

Writes, under ``--out`` (default ``runs/data``):

- ``text.txt``: one training text per line for MNTP and MSG: WikiText-2 valid paragraphs (headings
  dropped) after the first ``--holdout-lines`` lines, STS-B train sentences and SNLI dev + test
  premises, deduplicated. STS-B scores are used only in ``sts_scored.jsonl``.
- ``wikitext.txt`` and ``sentences.txt``: the same texts in two parts, the WikiText paragraphs and
  the single sentences (STS-B, SNLI), so that a run can weight running text (``text.txt`` holds 775
  paragraphs against 15,302 sentences: most missing-span examples are cut from one caption-style
  sentence; ``--data runs/data/wikitext.txt --data SAMPLE`` with a sample of the sentences reads
  mostly paragraphs: phase 42 in ``docs/phases.md``, which read the right side worse for it).
- ``documents.jsonl``: ``{"text"}`` per WikiText-2 article after the held-out lines (its paragraphs
  joined by line breaks): running text for the next-token examples, which end in EOS only where
  an article ends (``TrainConfig.documents``).
- ``snli_pairs.jsonl``: ``{"anchor", "positive", "negative"}`` per SNLI dev or test premise that has
  an entailed hypothesis (the positive) and a contradicted one (the hard negative), for SSCL.
- ``sts_scored.jsonl``: ``{"text1", "text2", "score", "source"}`` (source: the row's genre, such as
  ``headlines``; ``TrainConfig.scored_source_power`` balances by it) per STS-B train row that is not held out
  and shares no sentence with the held-out rows or STS-B dev: scored pairs for the supervised
  CoSENT term (``TrainConfig.scored_pairs``). A recipe that reads it is supervised on STS-B
  train's labels and says so.
- ``sts-heldout.csv``: the held-out STS split (``scripts/build_heldout_sts.py``: every 6th row of
  STS-B train); its sentences are removed from every file above.
- ``eval_prefixes.txt``: held-out WikiText paragraphs (from the first ``--holdout-lines`` lines) for
  the periodic generation check (``TrainConfig.eval_prefixes``).

WikiText's own tokenisation is undone in the training text (``plain_wikitext``): `` @-@ `` is a
hyphen again, punctuation and clitics are attached, and sentences with ``<unk>`` (a word the
corpus removed) are dropped. A model trained on the tokenised form writes `` , `` and ``<unk>``
itself (the adapter of 2026-12-01, steps 1-325, did). ``--wikitext-tokens`` keeps the old form.
The evaluation items stay tokenised, as the base model's figures were measured on them.

STS-B dev is read only to keep its sentences out of ``sts_scored.jsonl``: it is kept for model selection. The first 500 lines of WikiText-2 valid
are never trained on either: the evaluations of ``docs/results.md`` read them (plain-text
perplexity: the first 20,480 tokens, up to line 249; repetition: the first 200 prefixes, up to line
454; the infill set: up to line 279). The shared data has no other WikiText split.

    python scripts/prepare_training_data.py --shared ../shared/data --out runs/data
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_heldout_sts import EVERY, read_rows, row_sentences, split_rows  # noqa: E402

_ARTICLE = re.compile(r"^ = [^=].* = $")  # a top-level WikiText heading: one '=' on each side
# A sentence ends at " . " (or ! ?) before a capital, a digit, an opening quote or bracket, or <unk>.
_SENTENCE_END = re.compile(r"(?<= [.!?]) (?=[A-Z0-9\"(<])")
_JOINED = [(" @-@ ", "-"), (" @,@ ", ","), (" @.@ ", "."), ("( ", "("), ("[ ", "[")]
_CLITIC = re.compile(r" (n't|'s|'re|'ve|'ll|'d|'m|')(?=\s|$)")
_BEFORE_PUNCT = re.compile(r" ([,.;:!?)\]%])")
_QUOTED = re.compile(r'" ([^"]*?) "')


def plain_wikitext(text: str) -> str:
    """WikiText-2's tokenised form as plain text; sentences with ``<unk>`` dropped ('' if none is left)."""
    sentences = [s for s in _SENTENCE_END.split(text.strip()) if "<unk>" not in s]
    out = " ".join(sentences)
    for token, joined in _JOINED:
        out = out.replace(token, joined)
    out = _CLITIC.sub(r"\1", out)
    out = _QUOTED.sub(r'"\1"', out)
    return _BEFORE_PUNCT.sub(r"\1", out)


def wikitext_paragraphs(
    path: Path, min_words: int, skip_lines: int = 0, limit_lines: int | None = None, plain: bool = False
) -> list[str]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines()[skip_lines:limit_lines]:
        text = line.strip()
        if not text or text.startswith("="):
            continue
        text = plain_wikitext(text) if plain else text
        if len(text.split()) >= min_words:
            out.append(text)
    return out


def wikitext_articles(path: Path, skip_lines: int = 0, plain: bool = False) -> list[str]:
    """The articles after ``skip_lines``: paragraphs between top-level headings, joined by ``\\n``."""
    articles: list[list[str]] = [[]]
    for line in path.read_text(encoding="utf-8").splitlines()[skip_lines:]:
        if _ARTICLE.match(line):
            articles.append([])
        elif line.strip() and not line.strip().startswith("="):
            text = plain_wikitext(line) if plain else line.strip()
            if text:
                articles[-1].append(text)
    return ["\n".join(a) for a in articles if a]


def stsb_sentences(path: Path, held: set[str]) -> list[str]:
    _, rest = split_rows(read_rows(path), EVERY)
    return [s.strip() for r in rest for s in (r[5], r[6]) if s.strip() not in held]


def snli_triples(folder: Path, held: set[str]) -> tuple[list[str], list[dict[str, str]]]:
    by_premise: dict[str, dict[str, str]] = defaultdict(dict)
    for split in ("dev", "test"):
        premises = (folder / f"s1.{split}").read_text(encoding="utf-8").splitlines()
        hypotheses = (folder / f"s2.{split}").read_text(encoding="utf-8").splitlines()
        labels = (folder / f"labels.{split}").read_text(encoding="utf-8").splitlines()
        if not len(premises) == len(hypotheses) == len(labels):
            raise SystemExit(f"{folder}: s1.{split}, s2.{split} and labels.{split} differ in length")
        for premise, hypothesis, label in zip(premises, hypotheses, labels, strict=True):
            if premise.strip() in held or hypothesis.strip() in held:
                continue
            by_premise[premise.strip()].setdefault(label.strip(), hypothesis.strip())
    pairs = [
        {"anchor": p, "positive": h["entailment"], "negative": h["contradiction"]}
        for p, h in by_premise.items()
        if "entailment" in h and "contradiction" in h
    ]
    return list(by_premise), pairs


def write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def scored_pairs(rows: list[list[str]], excluded: set[str]) -> list[dict[str, object]]:
    """STS-B rows as ``{"text1", "text2", "score", "source"}``, leaving out every row with a sentence in ``excluded``."""
    return [
        {"text1": r[5].strip(), "text2": r[6].strip(), "score": float(r[4]), "source": r[1]}
        for r in rows
        if r[5].strip() not in excluded and r[6].strip() not in excluded
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--shared", type=Path, default=Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
    )
    parser.add_argument("--out", type=Path, default=Path("runs/data"))
    parser.add_argument("--min-words", type=int, default=12, help="shortest WikiText paragraph kept")
    parser.add_argument(
        "--holdout-lines",
        type=int,
        default=500,
        help="leading lines of wiki.valid kept out of training for evaluation",
    )
    parser.add_argument("--eval-prefixes", type=int, default=16, help="held-out paragraphs for the check")
    parser.add_argument(
        "--wikitext-tokens",
        action="store_true",
        help="train on WikiText's tokenised form (' @-@ ', ' , ', '<unk>') instead of plain text",
    )
    args = parser.parse_args()

    sts_train = args.shared / "stsb" / "sts-train.csv"
    heldout_rows, rest_rows = split_rows(read_rows(sts_train), EVERY)
    held = row_sentences(heldout_rows)
    wiki = args.shared / "wikitext2" / "wiki.valid.tokens"
    premises, pairs = snli_triples(args.shared / "snli", held)
    paragraphs = wikitext_paragraphs(wiki, args.min_words, args.holdout_lines, plain=not args.wikitext_tokens)
    texts = paragraphs + stsb_sentences(sts_train, held) + premises
    unique = [t for t in dict.fromkeys(t for t in texts if t) if t not in held]
    running = set(paragraphs)
    wikitext = [t for t in unique if t in running]
    sentences = [t for t in unique if t not in running]
    documents = wikitext_articles(wiki, args.holdout_lines, plain=not args.wikitext_tokens)
    prefixes = wikitext_paragraphs(wiki, 40, 0, args.holdout_lines)[: args.eval_prefixes]
    scored = scored_pairs(rest_rows, held | row_sentences(read_rows(args.shared / "stsb" / "sts-dev.csv")))

    args.out.mkdir(parents=True, exist_ok=True)
    write(args.out / "text.txt", "\n".join(unique) + "\n")
    write(args.out / "wikitext.txt", "\n".join(wikitext) + "\n")
    write(args.out / "sentences.txt", "\n".join(sentences) + "\n")
    write(
        args.out / "documents.jsonl",
        "".join(json.dumps({"text": d}, ensure_ascii=False) + "\n" for d in documents),
    )
    write(args.out / "snli_pairs.jsonl", "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in pairs))
    write(args.out / "sts_scored.jsonl", "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in scored))
    write(args.out / "sts-heldout.csv", "".join("\t".join(r) + "\n" for r in heldout_rows))
    write(args.out / "eval_prefixes.txt", "\n".join(prefixes) + "\n")
    print(
        f"{len(unique)} texts -> text.txt ({len(wikitext)} paragraphs -> wikitext.txt, {len(sentences)} "
        f"sentences -> sentences.txt); {len(documents)} articles -> documents.jsonl; "
        f"{len(pairs)} pairs -> snli_pairs.jsonl; {len(scored)} scored pairs -> sts_scored.jsonl; {len(heldout_rows)} held-out STS pairs -> sts-heldout.csv "
        f"({len(held)} sentences kept out of training); {len(prefixes)} prefixes -> eval_prefixes.txt (in {args.out})"
    )


if __name__ == "__main__":
    main()
