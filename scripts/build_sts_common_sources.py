"""STS Benchmark files cut to the sources two splits share, to see how much of a gap is the mix.

STS-B dev and the held-out split (``build_heldout_sts.py``) hold different sources: dev has
answers-forums and track5.en-en, the held-out split deft-forum and deft-news. This writes, for
``--dev`` and ``--heldout``, their rows from the sources both hold (``STEM-common.csv``), and the
held-out rows of those sources sampled to dev's proportions (``HELDOUT-common-devmix.csv``: the
largest such sample, rows evenly spaced within each source). Analysis only: no selection reads
them.

    python scripts/build_sts_common_sources.py --dev ../shared/data/stsb/sts-dev.csv \\
        --heldout runs/data/sts-heldout.csv --out runs/data/mix
    magnet eval sts runs/data/mix/sts-dev-common.csv runs/data/mix/sts-heldout-common.csv \\
        runs/data/mix/sts-heldout-common-devmix.csv --model default
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

SOURCE = 1  # the genre column of an STS Benchmark row (MSRvid, headlines, ...)


def read_lines(path: Path) -> list[str]:
    """The non-blank rows of an STS Benchmark file, each a tab-separated line."""
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def source(line: str) -> str:
    fields = line.split("\t")
    if len(fields) < 7:
        raise ValueError(f"not an STS Benchmark row (7 tab-separated fields): {line[:80]!r}")
    return fields[SOURCE]


def common_rows(dev: list[str], heldout: list[str]) -> tuple[list[str], list[str]]:
    """The rows of each file whose source the other file also holds."""
    shared = {source(r) for r in dev} & {source(r) for r in heldout}
    if not shared:
        raise ValueError("the two files share no source: nothing to compare")
    return [r for r in dev if source(r) in shared], [r for r in heldout if source(r) in shared]


def sampled_to_mix(rows: list[str], mix: Counter) -> list[str]:
    """The largest sample of ``rows`` whose sources follow the proportions of ``mix``, with the
    rows of each source evenly spaced through it; the file's order is kept."""
    by_source: dict[str, list[int]] = {}
    for index, row in enumerate(rows):
        by_source.setdefault(source(row), []).append(index)
    total = sum(mix.values())
    size = min(len(by_source.get(name, [])) * total / count for name, count in mix.items())
    kept: list[int] = []
    for name, count in mix.items():
        indices, wanted = by_source.get(name, []), int(size * count / total)
        kept += [indices[i * len(indices) // wanted] for i in range(wanted)]
    return [rows[i] for i in sorted(kept)]


def write(path: Path, rows: list[str]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(r + "\n" for r in rows), encoding="utf-8")
    tmp.replace(path)
    print(f"{len(rows)} pairs -> {path} ({dict(Counter(source(r) for r in rows))})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dev", type=Path, required=True, help="STS-B dev (or any STS Benchmark file)")
    parser.add_argument("--heldout", type=Path, required=True, help="the held-out split")
    parser.add_argument("--out", type=Path, default=Path("runs/data/mix"))
    args = parser.parse_args()
    dev, heldout = common_rows(read_lines(args.dev), read_lines(args.heldout))
    args.out.mkdir(parents=True, exist_ok=True)
    write(args.out / f"{args.dev.stem}-common.csv", dev)
    write(args.out / f"{args.heldout.stem}-common.csv", heldout)
    mix = Counter(source(r) for r in dev)
    write(args.out / f"{args.heldout.stem}-common-devmix.csv", sampled_to_mix(heldout, mix))


if __name__ == "__main__":
    main()
