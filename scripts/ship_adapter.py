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

The script is longer than the ~400 lines of the structure rule because about a third of it is the
model card's own words (the figure rows' labels and the card's template), kept beside the code that
fills them so that the card reads as one document.

    python scripts/ship_adapter.py runs/default-long --command "bash scripts/train_default.sh" \
        --adapter-eval runs/eval/long --base-eval runs/eval/default-base
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from magnetsdk.layout import RESERVED_CANDIDATES
from magnetsdk.model_dir import Manifest, ModelDirectoryError, write_model_directory

WEIGHTS = "adapter_model.safetensors"

# (result file NAME-SUFFIX.json, figure key, label, scale, better: "+" higher, "-" lower, "" neither)
# The suffixes are the tasks of scripts/eval_model.sh.
FIGURES = [
    ("sts-dev", "sts-dev.spearman", "STS-B dev Spearman x100", 1, "+"),
    (
        "sts-heldout",
        "sts-heldout.spearman",
        "STS held-out split (every 6th STS-B train pair) Spearman x100",
        1,
        "+",
    ),
    (
        "sts-heldout-report",
        "sts-heldout-report.spearman",
        "STS held-out, its odd rows (read by no selection; the even rows chose the temperature)",
        1,
        "+",
    ),
    ("retrieval", "ndcg@10", "retrieval nDCG@10 x100, held-out WikiText set (224 queries)", 1, "+"),
    ("retrieval", "mrr@10", "retrieval MRR@10 x100", 1, "+"),
    ("lm", "ppl", "plain-text perplexity, WikiText-2 valid, first 20,480 tokens", 1, "-"),
    (
        "repetition",
        "nucleus.tokens",
        "natural continuation length, nucleus (top-p 0.9, T 1.0), of 128",
        1,
        "+",
    ),
    ("repetition", "greedy.tokens", "natural continuation length, greedy, of 128", 1, "+"),
    (
        "repetition",
        "nucleus.implausible",
        "nucleus tokens the base model gives p < 1e-6 (--judge default-base), %",
        100,
        "-",
    ),
    (
        "repetition-full",
        "nucleus.rep4",
        "rep-4 % at equal length (128 tokens, EOS held back), nucleus",
        100,
        "-",
    ),
    ("repetition-full", "greedy.rep4", "rep-4 % at equal length, greedy", 100, "-"),
    ("infill-dev", "ppl_both_sides", "infill dev (60 items): span perplexity, both sides (spm)", 1, "-"),
    ("infill-dev", "ppl_left_only", "infill dev: span perplexity, left side only", 1, "-"),
    ("infill-dev", "both_over_left", "infill dev: both sides / its own left only", 1, "-"),
    ("infill-test", "ppl_both_sides", "infill test (144 items, never selected on): both sides (spm)", 1, "-"),
    ("infill-test", "ppl_left_only", "infill test: left side only", 1, "-"),
    ("infill-test", "both_over_left", "infill test: both sides / its own left only", 1, "-"),
    (
        "infill-test",
        "shuffled_over_both[spm]",
        "infill test: another item's right side / the true one",
        1,
        "+",
    ),
    (
        "infill-test",
        "closed_rate",
        "infill test, first 40 filled: greedy spans closed within 48 tokens",
        1,
        "+",
    ),
    (
        "infill-test",
        "copy_rate",
        "infill test, first 40 filled: greedy spans copying 5 words of the context",
        1,
        "-",
    ),
    (
        "infill-test",
        "gold_f1",
        "infill test, first 40 filled: greedy fills, word F1 with the true span",
        1,
        "+",
    ),
    # eval_model.sh's infill-test-all: every test item filled (the copy target is read here)
    (
        "infill-test-all",
        "closed_rate",
        "infill test, all 144 filled: greedy spans closed within 48 tokens",
        1,
        "+",
    ),
    (
        "infill-test-all",
        "copy_rate",
        "infill test, all 144 filled: greedy spans copying 5 words of the context",
        1,
        "-",
    ),
    (
        "infill-test-all",
        "gold_f1",
        "infill test, all 144 filled: greedy fills, word F1 with the true span",
        1,
        "+",
    ),
    # scripts/loop_fills.py -o PREFIX-loops-test-all.json, read from the stored fills of infill-test-all
    (
        "loops-test-all",
        "loop_rate",
        "infill test, all 144 filled: greedy fills that loop (repeat 5 of their own words and marks)",
        1,
        "-",
    ),
    (
        "infill-test-ranked",
        "gold_f1",
        "infill test: ranked fills (candidates=8, seed 0), word F1 with the true span",
        1,
        "+",
    ),
    ("infill-test-ranked", "copy_rate", "infill test: ranked fills copying 5 words of the context", 1, "-"),
    ("infill-test-ranked", "closed_rate", "infill test: ranked fills closed within 48 tokens", 1, "+"),
]


def figure(prefixes: list[Path], suffix: str, key: str) -> float | None:
    """The figure from the first of ``prefixes`` whose result file holds it."""
    for prefix in prefixes:
        value = result_figures(prefix.parent / f"{prefix.name}-{suffix}.json").get(key)
        if value is not None:
            return value
    return None


@functools.cache
def result_figures(path: Path) -> dict[str, float]:
    """The figures of one ``magnet eval`` result file (empty when it was not measured), read once."""
    if not path.is_file():
        return {}
    return json.loads(path.read_text(encoding="utf-8"))["figures"]


def scores_table(adapter_prefix: Path, base_prefixes: list[Path]) -> str:
    """The figures side by side, with whether this adapter is better or worse than the base."""
    lines = ["| measure | base (unadapted) | this adapter | vs base |", "|---|---|---|---|"]
    for suffix, key, label, scale, better in FIGURES:
        ours, base = figure([adapter_prefix], suffix, key), figure(base_prefixes, suffix, key)
        if ours is None and base is None:
            continue
        show = [f"{v * scale:.4g}" if v is not None else "not measured" for v in (base, ours)]
        verdict = ""
        if ours is not None and base is not None and better and ours != base:
            verdict = "better" if (ours > base) == (better == "+") else "**worse**"
        lines.append(f"| {label} | {show[0]} | {show[1]} | {verdict} |")
    return "\n".join(lines)


def run_summary(run: Path) -> dict[str, object]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line]
    steps = [r for r in records if "loss" in r]
    last = steps[-1]
    # A resumed run logs the steps after its checkpoint again: count each step once (the last log).
    by_step = {r["step"]: r for r in steps}
    return {
        "steps": last["step"],
        "tokens": sum(int(r.get("tokens", 0)) for r in by_step.values()),
        "wall_s": sum(_segment_seconds(steps)),
        "final_losses": {
            k: round(last[k], 3) for k in ("mntp", "sscl", "msg", "kl") if last.get(k) is not None
        },
    }


def _segment_seconds(steps: list[dict]) -> list[float]:
    """The wall time of each process that logged steps (elapsed_s restarts at a resume)."""
    segments, previous = [], None
    for record in steps:
        elapsed = float(record["elapsed_s"])
        if previous is not None and elapsed < previous:
            segments.append(previous)
        previous = elapsed
    return [*segments, previous or 0.0]


def _shown(path: str) -> str:
    """A path as the repository names it (relative to the working directory) when it is inside it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return path


PRECISIONS = {"bf16": "bf16 autocast", "no": "fp32"}


def run_precision(run: Path, given: str | None) -> str:
    """The precision the run trained in ("bf16" or "no"): recorded by the run, or ``--precision``
    for a run trained before it was recorded (``mixed_precision = 'auto'`` resolves per machine)."""
    training = json.loads((run / "magnet_config.json").read_text(encoding="utf-8")).get("training") or {}
    recorded = training.get("mixed_precision_used")
    given = {"fp32": "no"}.get(given, given)
    if recorded and given and recorded != given:
        raise SystemExit(f"--precision {given} contradicts the run's record ({recorded}): drop --precision")
    if not (recorded or given):
        raise SystemExit(
            f"{run} does not record the precision it trained in (runs made before it was recorded): "
            "give --precision bf16 or --precision fp32"
        )
    return recorded or given


def _setting_rows(config: dict, keys: tuple[str, ...]) -> str:
    return "".join(f"\n| {k} | {config.get(k)} |" for k in keys)


def _layout_rows(config: dict) -> str:
    """What the weights hold beside LoRA: the layout tokens' embedding rows, when they were trained."""
    if not config.get("train_layout_tokens"):
        return ""
    roles = config.get("train_layout_roles") or list(RESERVED_CANDIDATES)  # empty: every role
    played = (
        f"; END is played by `{config['end_token']}`" if config.get("end_token") and "end" in roles else ""
    )
    return (
        f", and the trained embedding rows of the layout roles {', '.join(roles)} (tied to the LM head;"
        f" the loader writes them into both{played})"
    )


def model_card(
    run: Path, command: str, adapter_prefix: Path, base_prefixes: list[Path], size: int, precision: str
) -> str:
    config = json.loads((run / "train_config.json").read_text(encoding="utf-8"))
    summary = run_summary(run)
    keys = ("recipe", "max_steps", "batch_size", "contrastive_batch_size", "max_length", "sscl_max_length",
            "learning_rate", "schedule", "warmup_steps", "lora_r", "lora_alpha", "positives", "ict_share",
            "temperature", "mntp_weight", "sscl_weight", "msg_weight", "no_context_fraction",
            "mntp_fraction", "kl_weight", "infill_layout", "mixed_precision", "seed")  # fmt: skip
    settings = "\n".join(f"| {k} | {config.get(k)} |" for k in keys if k in config)
    if config.get("end_kl_weight"):
        settings += _setting_rows(
            config, ("end_kl_weight", "end_kl_without_end", "end_kl_batch_size", "end_kl_max_tokens")
        )
    if config.get("copy_fills"):
        settings += _setting_rows(config, ("copy_fills", "copy_ul_weight", "copy_ul_batch_size"))
    if config.get("span_end_weight", 1.0) != 1.0:
        settings += _setting_rows(config, ("span_end_weight",))
    if config.get("end_token") or config.get("train_layout_tokens"):
        settings += _setting_rows(
            config,
            ("end_token", "end_row_from_eos", "train_layout_tokens", "train_layout_roles", "layout_token_lr"),
        )
    if config.get("scored_pairs"):
        settings += (
            f"\n| scored_pairs | {', '.join(config['scored_pairs'])} |"
            f"\n| scored_weight | {config.get('scored_weight')} |"
        )
    sts_train = (
        "STS-B train pairs except the held-out rows and any pair sharing a sentence with them or with "
        "STS-B dev, with their scores (CoSENT, `scored_pairs`)"
        if config.get("scored_pairs")
        else "STS-B train sentences except the held-out rows (scores unused)"
    )
    copies = (
        " Copy unlikelihood (`copy_fills`): fills of the adapter this run started from, greedy, on "
        "infill items from those WikiText lines, where they copied a 5-word run of their context."
        if config.get("copy_fills")
        else ""
    )
    started = json.loads((run / "magnet_config.json").read_text(encoding="utf-8"))["training"].get(
        "init_adapter"
    )
    origin = (
        f"This run started from the weights of the adapter in `{_shown(started['path'])}` "
        f"(`--init-adapter`, weights sha256 `{started['sha256'][:16]}`); the steps, tokens and time below "
        "are this run's alone, the notes give the whole history.\n\n"
        if started
        else ""
    )
    return f"""# magnetsdk default adapter (SmolLM2-135M-Instruct, MAGNET recipe)

A LoRA adapter that turns SmolLM2-135M-Instruct (Apache-2.0) into one model that embeds
(bidirectional attention, last-token pooling with the instruction prefix), infills (the
`{config.get("infill_layout")}` layout: suffix first, then the span, all causal) and generates
(causal). `Magnet.from_pretrained()` with no arguments loads the base model with this adapter
merged; `Magnet.from_pretrained("default-base")` loads the base model without it.

Weights: {WEIGHTS}, bfloat16, {size / 1e6:.1f} MB (rank {config.get("lora_r")} on every linear
projection of the 30 layers){_layout_rows(config)}.

## How it was trained

On this project's development machine: 2 CPU cores, one process, {PRECISIONS[precision]}
(`mixed_precision = {config.get("mixed_precision")!r}`).

```
{command}
```

Data (`scripts/prepare_training_data.py --holdout-lines 1000`; nothing downloaded; the notes
below say which form of WikiText each part of the run read): WikiText-2
valid paragraphs after line 1000 (lines 1-1000 are held out: the infill, perplexity, repetition
and retrieval evaluations read them) as missing-span and MNTP texts and, whole articles with EOS
only at an article's end, as next-token documents; {sts_train}; SNLI dev and test premises. SSCL positives: SNLI entailment pairs with the
contradiction as a hard negative, plus inverse-cloze pairs from the WikiText paragraphs
(`ict_share`).{copies} STS-B dev and the held-out STS rows never train.

| setting | value |
|---|---|
{settings}

{origin}Steps: {summary["steps"]}. Tokens: {summary["tokens"]:,}. Wall time: {float(summary["wall_s"]) / 60:.0f} min.
Final losses: {summary["final_losses"]}.

## Scores

Measured with `magnet eval` (`scripts/eval_model.sh`, commands in `docs/results.md`), next to the
unadapted base model measured the same way (equal lengths and the same sampler for repetition,
the same tokens for perplexity). "worse" marks every figure where this adapter is behind the base.

{scores_table(adapter_prefix, base_prefixes)}

See `docs/results.md` for the project's targets and which of them this adapter misses.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="the output dir of magnet train")
    parser.add_argument("--command", required=True, help="the magnet train command that made the run")
    parser.add_argument("--adapter-eval", type=Path, required=True, help="prefix of its eval files")
    parser.add_argument(
        "--base-eval",
        type=Path,
        nargs="+",
        required=True,
        help="prefix of the base's eval files; several when they were measured apart (the first that "
        "holds a figure gives it)",
    )
    parser.add_argument("--into", type=Path, default=Path("magnetsdk/adapters/default"))
    parser.add_argument("--notes", type=Path, default=None, help="Markdown appended to the card")
    parser.add_argument(
        "--precision",
        choices=["bf16", "fp32"],
        default=None,
        help="what the run trained in, for a run that does not record it",
    )
    args = parser.parse_args()

    for name in (WEIGHTS, "adapter_config.json", "magnet_config.json", "train_config.json"):
        if not (args.run / name).is_file():
            raise SystemExit(f"{args.run} has no {name}: is it a finished magnet train output dir?")
    precision = run_precision(args.run, args.precision)
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
        card = model_card(args.run, args.command, args.adapter_eval, args.base_eval, size, precision)
        if args.notes is not None:
            card += "\n" + args.notes.read_text(encoding="utf-8").strip() + "\n"
        (tmp / "README.md").write_text(card, encoding="utf-8")
        return Manifest(kind="adapter")

    try:
        write_model_directory(args.into, stage, whole=True)
    except ModelDirectoryError as error:
        raise SystemExit(str(error)) from None
    print(f"shipped {args.run} -> {args.into} ({size / 1e6:.1f} MB of weights)")


if __name__ == "__main__":
    main()
