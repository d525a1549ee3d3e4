"""Copy a trained run into the package as the shipped default adapter, with its model card.

Reads the run directory that ``magnet train`` wrote (adapter, ``magnet_config.json``,
``train_config.json``, ``metrics.jsonl``) and the ``magnet eval`` result files of the adapter and of
the base model, and writes into ``--into`` (default ``magnetsdk/adapters/default``):

- ``adapter_model.safetensors``: the LoRA weights cast to bfloat16 (half the size; the loader
  merges them into the fp32 or bf16 base, so nothing else changes);
- ``adapter_config.json`` and ``magnet_config.json``: as trained (the adapter config names the base
  model instead of the training machine's cache path);
- ``README.md``: the model card: the command, the data, steps, wall time and the scores next to
  the base model's, read from the result files (no figure is typed by hand).

The files are written by :func:`magnetsdk.model_dir.write_model_directory`: staged beside the
target and swapped in by rename; a target holding files this script did not write is refused.

    python scripts/ship_adapter.py runs/magnet-b --command "magnet train ..." \
        --adapter-eval runs/eval/magnet-b --base-eval runs/eval/base
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from magnetsdk.model_dir import Manifest, ModelDirectoryError, write_model_directory

WEIGHTS = "adapter_model.safetensors"

# (result-file suffix, figure key, label)
FIGURES = [
    ("sts", "sts-dev.spearman", "STS-B dev Spearman x100 (higher is better)"),
    ("infill", "ppl_both_sides", "infill span perplexity, both sides (lower is better)"),
    ("infill", "ppl_left_only", "infill span perplexity, left side only"),
    ("lm", "ppl", "plain-text perplexity, WikiText-2 valid, first 20,480 tokens"),
    ("repetition", "greedy.rep4", "rep-4, greedy decoding (200 prefixes, 128 new tokens)"),
    ("repetition", "greedy.tokens", "mean tokens generated, greedy"),
    ("repetition", "nucleus.rep4", "rep-4, nucleus sampling (top-p 0.9, T 1.0, seed 0)"),
    ("repetition", "nucleus.tokens", "mean tokens generated, nucleus"),
]


def figure(prefix: Path, suffix: str, key: str) -> float | None:
    path = prefix.parent / f"{prefix.name}-{suffix}.json"
    if not path.is_file():
        return None
    figures = json.loads(path.read_text(encoding="utf-8"))["figures"]
    return figures.get(key)


def scores_table(adapter_prefix: Path, base_prefix: Path) -> str:
    lines = ["| measure | base (unadapted) | this adapter |", "|---|---|---|"]
    for suffix, key, label in FIGURES:
        ours, base = figure(adapter_prefix, suffix, key), figure(base_prefix, suffix, key)
        if ours is None and base is None:
            continue
        show = [f"{v:.4g}" if v is not None else "not measured" for v in (base, ours)]
        lines.append(f"| {label} | {show[0]} | {show[1]} |")
    return "\n".join(lines)


def run_summary(run: Path) -> dict[str, object]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line]
    steps = [r for r in records if "step" in r]
    last = steps[-1]
    return {
        "steps": last["step"],
        "wall_s": last["elapsed_s"],
        "final_losses": {k: round(last[k], 3) for k in ("mntp", "sscl", "msg") if last.get(k) is not None},
    }


def model_card(run: Path, command: str, adapter_prefix: Path, base_prefix: Path, size: int) -> str:
    config = json.loads((run / "train_config.json").read_text(encoding="utf-8"))
    summary = run_summary(run)
    keys = ("recipe", "max_steps", "batch_size", "max_length", "sscl_max_length", "learning_rate",
            "schedule", "warmup_steps", "lora_r", "lora_alpha", "positives", "mntp_weight",
            "sscl_weight", "msg_weight", "no_context_fraction", "seed")  # fmt: skip
    settings = "\n".join(f"| {k} | {config.get(k)} |" for k in keys)
    return f"""# magnetsdk default adapter (SmolLM2-135M-Instruct, MAGNET recipe)

A LoRA adapter that turns SmolLM2-135M-Instruct (Apache-2.0) into one model that embeds
(bidirectional attention, last-token pooling with the instruction prefix), infills (hybrid mask)
and generates (causal). `Magnet.from_pretrained()` with no arguments loads the base model with this
adapter merged; `Magnet.from_pretrained("default-base")` loads the base model without it.

Weights: {WEIGHTS}, bfloat16, {size / 1e6:.1f} MB (rank {config.get("lora_r")} on every linear
projection of the 30 layers).

## How it was trained

On this project's development machine: 2 CPU cores, fp32, one process.

```
python scripts/prepare_training_data.py --shared ../shared/data --out runs/data2
{command}
```

Data (`scripts/prepare_training_data.py`; nothing downloaded): WikiText-2 valid paragraphs after
line 500 (the first 500 lines are held out: the evaluations below read them), STS-B train
sentences (scores unused), SNLI dev premises; SSCL positives are SNLI dev entailment pairs with
the contradiction as a hard negative. STS-B dev was used only to evaluate.

| setting | value |
|---|---|
{settings}

Steps: {summary["steps"]}. Wall time: {float(summary["wall_s"]) / 60:.0f} min. Final losses:
{summary["final_losses"]}.

## Scores

Measured with `magnet eval` (commands in `docs/results.md`), next to the unadapted base model:

{scores_table(adapter_prefix, base_prefix)}

See `docs/results.md` for the targets and whether each was met. Known limits, visible in the
table: compare the infill rows (whether the right side of a gap helps) and the nucleus rep-4 and
mean-length rows (how often and how early continuations repeat or stop) before relying on this
adapter for infilling or long generation; its strength is embedding.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="the output dir of magnet train")
    parser.add_argument("--command", required=True, help="the magnet train command that made the run")
    parser.add_argument("--adapter-eval", type=Path, required=True, help="prefix of its eval files")
    parser.add_argument("--base-eval", type=Path, required=True, help="prefix of the base's eval files")
    parser.add_argument("--into", type=Path, default=Path("magnetsdk/adapters/default"))
    args = parser.parse_args()

    for name in (WEIGHTS, "adapter_config.json", "magnet_config.json", "train_config.json"):
        if not (args.run / name).is_file():
            raise SystemExit(f"{args.run} has no {name}: is it a finished magnet train output dir?")
    size = 0

    def stage(tmp: Path) -> Manifest:
        nonlocal size
        weights = load_file(args.run / WEIGHTS)
        save_file(
            {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in weights.items()},
            tmp / WEIGHTS,
            metadata={"format": "pt"},
        )
        shutil.copyfile(args.run / "magnet_config.json", tmp / "magnet_config.json")
        adapter_config = json.loads((args.run / "adapter_config.json").read_text(encoding="utf-8"))
        # peft records the base's local path (a cache directory on the training machine); the
        # loader applies the adapter to the embedded base, so record its name instead.
        adapter_config["base_model_name_or_path"] = "SmolLM2-135M-Instruct"
        (tmp / "adapter_config.json").write_text(json.dumps(adapter_config, indent=2) + "\n")
        size = (tmp / WEIGHTS).stat().st_size
        card = model_card(args.run, args.command, args.adapter_eval, args.base_eval, size)
        (tmp / "README.md").write_text(card, encoding="utf-8")
        return Manifest(kind="adapter")

    try:
        write_model_directory(args.into, stage, whole=True)
    except ModelDirectoryError as error:
        raise SystemExit(str(error)) from None
    print(f"shipped {args.run} -> {args.into} ({size / 1e6:.1f} MB of weights)")


if __name__ == "__main__":
    main()
