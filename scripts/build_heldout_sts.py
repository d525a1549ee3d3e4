"""Build a held-out STS split from part of the STS-B *train* pairs, for model selection beside dev.

Takes every ``--every``-th data row of ``sts-train.csv`` (rows 0, 6, 12, ... counting from 0,
i.e. 959 of the 5,749 pairs with the default 6), which keeps the file's mix of genres (captions,
news, forums) and years, and writes them unchanged (same tab-separated columns as
``sts-dev.csv``, so ``magnet eval sts`` reads it) to ``runs/data/sts-heldout.csv``.

The scores of these rows are used for selection only, never as training labels, and their
sentences must never be training text: ``scripts/prepare_training_data.py`` takes
:func:`row_sentences` of the held-out rows and drops them from every training file (STS-B sentences, SNLI
premises and pairs), so the split stays unseen even where SNLI and STS-B share captions.

    python scripts/build_heldout_sts.py --shared ../shared/data --out runs/data/sts-heldout.csv
    python scripts/build_heldout_sts.py --halves runs/data/sts-heldout.csv   # -select / -report halves
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

EVERY = 6


def read_rows(path: Path) -> list[list[str]]:
    with open(path, encoding="utf-8", newline="") as handle:
        return [r for r in csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE) if len(r) >= 7]


def split_rows(rows: list[list[str]], every: int = EVERY) -> tuple[list[list[str]], list[list[str]]]:
    """(held-out rows, the rest): row ``i`` is held out when ``i % every == 0``."""
    if every < 2:
        raise ValueError(f"every={every} must be at least 2 (1 would hold out every row)")
    held = [r for i, r in enumerate(rows) if i % every == 0]
    rest = [r for i, r in enumerate(rows) if i % every != 0]
    return held, rest


def row_sentences(rows: list[list[str]]) -> set[str]:
    """Both sentences of every row, stripped."""
    return {s.strip() for r in rows for s in (r[5], r[6])}


def write_halves(heldout: Path) -> tuple[Path, Path]:
    """Even rows -> ``STEM-select.csv``, odd rows -> ``STEM-report.csv``; both keep the genre mix."""
    rows = heldout.read_text(encoding="utf-8").splitlines(keepends=True)
    paths = heldout.with_name(f"{heldout.stem}-select.csv"), heldout.with_name(f"{heldout.stem}-report.csv")
    for path, part in zip(paths, (rows[0::2], rows[1::2]), strict=True):
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text("".join(part), encoding="utf-8")
        tmp.replace(path)
        print(f"{len(part)} pairs -> {path}")
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--shared", type=Path, default=Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
    )
    parser.add_argument("--out", type=Path, default=Path("runs/data/sts-heldout.csv"))
    parser.add_argument("--every", type=int, default=EVERY, help="hold out rows i with i %% every == 0")
    parser.add_argument(
        "--halves",
        type=Path,
        metavar="HELDOUT_CSV",
        help="instead: split an existing held-out file into its even rows (NAME-select.csv, for "
        "selection) and odd rows (NAME-report.csv, never selected on) beside it, and exit",
    )
    args = parser.parse_args()
    if args.halves:
        write_halves(args.halves)
        return
    held, rest = split_rows(read_rows(args.shared / "stsb" / "sts-train.csv"), args.every)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(f".{args.out.name}.tmp")
    tmp.write_text("".join("\t".join(r) + "\n" for r in held), encoding="utf-8")
    tmp.replace(args.out)
    print(f"{len(held)} held-out pairs -> {args.out}; {len(rest)} pairs left whose sentences may train")


if __name__ == "__main__":
    main()
