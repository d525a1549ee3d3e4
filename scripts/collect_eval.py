"""Gather a training run's evaluations into one JSON file (``scripts/gpu_train.sh`` calls it).

Reads ``OUT/eval/{adapter,base}-*.json`` (``magnet eval`` results) and the adapter's
``magnet_config.json`` and writes ``OUT/eval.json``:

    {"training": {steps, tokens, wall time, recipe, ...},
     "adapter": {"sts-dev": {figures}, "sts-heldout": {...}, "lm": {...}, ...},
     "base": {...}, "seconds": {"train": ..., "total": ...}}

and prints one line per figure, adapter beside base.

    python scripts/collect_eval.py runs/gpu --train-s 500 --total-s 700
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def collect(out: Path) -> dict:
    summary: dict = {"adapter": {}, "base": {}}
    for path in sorted((out / "eval").glob("*.json")):
        who, _, name = path.stem.partition("-")
        if who not in summary:
            continue
        data = json.loads(path.read_text(encoding="utf-8"))
        summary[who][name] = data.get("figures", {})
    config = out / "adapter" / "magnet_config.json"
    if config.is_file():
        training = json.loads(config.read_text(encoding="utf-8")).get("training", {})
        summary["training"] = {k: v for k, v in training.items() if k != "config"}
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--train-s", type=float, default=None, help="wall seconds of data + training")
    parser.add_argument("--total-s", type=float, default=None, help="wall seconds of the whole script")
    args = parser.parse_args()
    summary = collect(args.out)
    summary["seconds"] = {"train": args.train_s, "total": args.total_s}
    target = args.out / "eval.json"
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    tmp.replace(target)
    for task, figures in summary["adapter"].items():
        for key, value in figures.items():
            if isinstance(value, (int, float)):
                base = summary["base"].get(task, {}).get(key)
                print(
                    f"{task:<16} {key:<28} adapter {value:>10.4g}   base {base if base is not None else '-'}"
                )
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
