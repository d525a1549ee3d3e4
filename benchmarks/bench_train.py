"""Training-step benchmark: the step as it was on main (baseline) against the current step.

Both run forward + backward through a fresh LoRA adapter (r=8, all linear projections) on the
real default base model, over the *same* examples: the first ``--steps`` micro-batches of the
real training data (``runs/data``: text for MNTP + MSG, SNLI pairs with their contradictions as
hard negatives for SSCL) at batch 8, ``max_length`` 96, ``sscl_max_length`` 48.

- ``baseline`` (main before this change): batches in the seeded random order, every LM row
  padded to the longest of its batch; one decoder pass for the LM rows with one LM-head call per
  objective, one bidirectional pass for the views; ``--baseline-threads`` torch threads (1, as
  the shipped adapter was trained).
- ``current``: the same examples grouped by length over a window of ``--steps`` batches
  (``bucket_batches``), LM rows and views in one hybrid pass when that wastes little padding,
  one LM-head call for both objectives; ``--threads`` torch threads (2: both cores) and
  ``--precision`` (bf16 autocast by default, as ``mixed_precision = "bf16"`` trains; fp32 too).

tokens/s counts each step's real (non-padding) tokens. Steps alternate between the two so load
from other jobs on this shared machine hits both alike. Prints a table and writes JSON.

    python scripts/prepare_training_data.py --out runs/data     # once
    OMP_NUM_THREADS=2 python benchmarks/bench_train.py           # the real default model
    python benchmarks/bench_train.py --model tiny                # a tiny random model (seconds)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from types import SimpleNamespace

import torch
from magnetsdk.train.adaptation import make_trainable
from magnetsdk.train.batches import Batches
from magnetsdk.train.config import TrainConfig
from magnetsdk.train.objectives import MagnetObjectives, info_nce, token_loss_sum

from magnetsdk.attention import AttentionMode
from magnetsdk.config import Pooling
from magnetsdk.encoding import pool
from magnetsdk.forward import run_decoder
from magnetsdk.layout import resolve_layout_tokens

ROOT = Path(__file__).resolve().parents[1]


def baseline_step(model, lm, views, temperature: float = 0.05) -> None:
    """The objectives' forward as on main (one process), then backward."""
    hidden = run_decoder(model, lm.input_ids, lm.valid, AttentionMode.HYBRID, lm.is_span).hidden
    total = 0.0
    for rows, positions, targets in (
        (lm.mntp_rows, lm.mntp_positions, lm.mntp_targets),
        (lm.msg_rows, lm.msg_positions, lm.msg_targets),
    ):
        total = total + token_loss_sum(model, hidden, rows, positions, targets) / max(1, targets.numel())
    hidden = run_decoder(model, views.input_ids, views.valid, AttentionMode.BIDIRECTIONAL).hidden
    pooled = pool(hidden, views.inputs, Pooling.LAST)
    b = views.anchors
    negatives = None
    if bool(views.has_negative.any()):
        negatives = torch.zeros_like(pooled[:b])
        negatives[views.has_negative] = pooled[2 * b :]
    total = total + info_nce(pooled[:b], pooled[b : 2 * b], temperature, negatives, views.has_negative)
    total.backward()


def current_step(objectives: MagnetObjectives, lm, views, bf16: bool) -> None:
    # bf16 autocast as the trainer runs it with mixed_precision="bf16" (accelerate's autocast).
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        out = objectives(lm, views, (1.0, 1.0, 1.0))
    out.total.backward()


def load(name: str):
    if name == "tiny":
        from magnetsdk.testing import tiny_model, tiny_tokenizer

        return tiny_model(), tiny_tokenizer(), "tiny-llama", "tiny"
    from magnetsdk.train.trainer import load_base

    config = TrainConfig(data=["unused"], base_model=name)
    model, tokenizer = load_base(config, torch.device("cpu"))
    return model, tokenizer, Path(name).name if name != "default" else "SmolLM2-135M-Instruct", name


def batches_for(config: TrainConfig, tokenizer, model) -> Batches:
    accelerator = SimpleNamespace(
        process_index=0,
        num_processes=1,
        device=torch.device("cpu"),
        is_main_process=True,
        print=lambda *a: None,
        wait_for_everyone=lambda: None,
    )
    layout, _ = resolve_layout_tokens(tokenizer)
    return Batches(config, tokenizer, layout, model, accelerator)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="default", help="model name or directory, or 'tiny'")
    parser.add_argument("--data", default=str(ROOT / "runs" / "data" / "text.txt"))
    parser.add_argument("--pairs", default=str(ROOT / "runs" / "data" / "snli_pairs.jsonl"))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=96)
    parser.add_argument("--sscl-max-length", type=int, default=48)
    parser.add_argument("--steps", type=int, default=8, help="micro-batches per variant (one bucket window)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the current step")
    parser.add_argument("--baseline-threads", type=int, default=1, help="torch threads of the baseline")
    parser.add_argument(
        "--precision",
        choices=["bf16", "fp32"],
        default="bf16",
        help="the current step's precision (bf16 autocast needs a CPU with native bf16, e.g. AVX512-BF16)",
    )
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "train.json"))
    args = parser.parse_args()
    for path in (args.data, args.pairs):
        if not Path(path).is_file():
            raise SystemExit(
                f"{path} not found; run: python scripts/prepare_training_data.py --out runs/data"
            )

    model, tokenizer, name, base = load(args.model)
    settings = dict(
        data=[args.data],
        pairs=[args.pairs],
        base_model=base,
        batch_size=args.batch,
        max_length=args.max_length,
        sscl_max_length=args.sscl_max_length,
        lora_r=8,
        lora_alpha=16,
        lora_dropout=0.05,
        progress=False,
    )
    old = batches_for(TrainConfig(**settings, bucket_batches=1), tokenizer, model)
    new_config = TrainConfig(**settings, bucket_batches=args.steps)
    new = batches_for(new_config, tokenizer, model)
    torch.manual_seed(0)
    trained = make_trainable(model, new_config, [])
    objectives = MagnetObjectives(trained, "hybrid", 0.05, fuse=True)
    weights = (1.0, 1.0, 1.0)
    variants = {
        "baseline": (old, args.baseline_threads, lambda lm, v: baseline_step(trained, lm, v)),
        "current": (
            new,
            args.threads,
            lambda lm, v: current_step(objectives, lm, v, args.precision == "bf16"),
        ),
    }
    seconds = {k: [] for k in variants}
    tokens = {k: [] for k in variants}
    padded = {k: [] for k in variants}
    for batches, threads, run in variants.values():  # warm-up on a batch outside the window
        torch.set_num_threads(threads)
        lm, views, _ = batches.batch(args.steps, 0, weights)
        run(lm, views)
        trained.zero_grad(set_to_none=True)
    for step in range(args.steps):
        for key, (batches, threads, run) in variants.items():
            torch.set_num_threads(threads)
            lm, views, _ = batches.batch(step, 0, weights)
            start = time.perf_counter()
            run(lm, views)
            seconds[key].append(time.perf_counter() - start)
            trained.zero_grad(set_to_none=True)
            tokens[key].append(lm.tokens + views.tokens)
            padded[key].append(lm.input_ids.numel() + views.input_ids.numel())
        print(f"step {step + 1}/{args.steps}: " + ", ".join(f"{k} {seconds[k][-1]:.2f} s" for k in variants))
    rate = {k: sum(tokens[k]) / sum(seconds[k]) for k in variants}
    result = {
        "model": name,
        "batch": args.batch,
        "max_length": args.max_length,
        "sscl_max_length": args.sscl_max_length,
        "steps": args.steps,
        "threads": {k: variants[k][1] for k in variants},
        "precision": {"baseline": "fp32", "current": args.precision},
        "real_tokens": {k: sum(v) for k, v in tokens.items()},
        "token_slots": {k: sum(v) for k, v in padded.items()},
        "seconds": {k: [round(t, 3) for t in v] for k, v in seconds.items()},
        "tokens_per_s": {k: round(v, 1) for k, v in rate.items()},
        "ratio": round(rate["current"] / rate["baseline"], 3),
        "goal": 1.8,
        "load_average_after": os.getloadavg(),
        "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(),
    }
    print(f"model {name}, batch {args.batch}, max length {args.max_length}, {args.steps} steps per variant")
    print(f"{'step':<9} {'threads':>7} {'real tokens':>11} {'slots':>7} {'seconds':>8} {'tokens/s':>9}")
    for key in variants:
        print(
            f"{key:<9} {variants[key][1]:>7} {sum(tokens[key]):>11} {sum(padded[key]):>7} "
            f"{sum(seconds[key]):>8.1f} {rate[key]:>9.1f}"
        )
    print(f"ratio (current / baseline tokens/s): {result['ratio']:.2f}x (goal >= 1.8x)")
    out = Path(args.out)
    existing = json.loads(out.read_text()) if out.is_file() else {}
    key = f"{name}, batch {args.batch}: fp32 {args.baseline_threads} thread(s) -> {args.precision} {args.threads}"
    existing[key] = result
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(json.dumps(existing, indent=2) + "\n")
    tmp.replace(out)


if __name__ == "__main__":
    main()
