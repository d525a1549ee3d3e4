"""fp32 against bf16 autocast for one LoRA training pass on this CPU, and what ``auto`` picks here.

A CPU without native bf16 (no AVX512-BF16, no AMX) emulates it, so ``mixed_precision = "bf16"``
that halves a step on one machine makes it many times slower on another. This measures both on
the machine it runs on: forward + backward of the causal LM loss through a fresh LoRA adapter
(r 8, every linear projection) on the real default base, the same token batch for both, after one
warm-up pass each. Passes alternate between the two so other load hits both alike. Prints a
table and writes JSON (one entry per machine).

    python benchmarks/bench_precision.py                      # the real default model
    python benchmarks/bench_precision.py --model tiny         # a tiny random model (seconds)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import torch
from magnetsdk.train.adaptation import make_trainable
from magnetsdk.train.config import MixedPrecision, TrainConfig
from magnetsdk.train.startup import cpu_has_native_bf16, pick_mixed_precision

from magnetsdk.files import atomic_write_text

ROOT = Path(__file__).resolve().parents[1]


def load(name: str) -> tuple[torch.nn.Module, str]:
    if name == "tiny":
        from magnetsdk.testing import tiny_model

        return tiny_model(), "tiny-llama"
    from magnetsdk.train.trainer import load_base

    base = "default-base" if name == "default" else name  # training starts from the bare base
    model, _ = load_base(TrainConfig(data=["unused"], base_model=base), torch.device("cpu"))
    return model, "SmolLM2-135M-Instruct" if name == "default" else Path(name).name


def one_pass(model: torch.nn.Module, ids: torch.Tensor, bf16: bool) -> float:
    started = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="default", help="model name or directory, or 'tiny'")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per precision")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "precision.json"))
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model, name = load(args.model)
    model = make_trainable(model, TrainConfig(data=["unused"], lora_r=8, lora_alpha=16), [])
    ids = torch.randint(0, model.config.vocab_size, (args.batch, args.length))
    seconds: dict[str, list[float]] = {"fp32": [], "bf16": []}
    for key in seconds:  # warm-up, not timed
        one_pass(model, ids, key == "bf16")
    for _ in range(args.repeats):
        for key in seconds:
            seconds[key].append(one_pass(model, ids, key == "bf16"))
    tokens = args.batch * args.length
    rate = {k: tokens * len(v) / sum(v) for k, v in seconds.items()}
    native = cpu_has_native_bf16()
    auto = pick_mixed_precision(MixedPrecision.AUTO, use_cpu=True, native_bf16=native).value
    capability = torch.backends.cpu.get_cpu_capability()
    result = {
        "model": name,
        "batch": args.batch,
        "length": args.length,
        "threads": args.threads,
        "repeats": args.repeats,
        "seconds": {k: [round(t, 3) for t in v] for k, v in seconds.items()},
        "tokens_per_s": {k: round(v, 1) for k, v in rate.items()},
        "bf16_over_fp32": round(rate["bf16"] / rate["fp32"], 3),
        "native_bf16": native,
        "cpu_capability": capability,
        "auto_picks": auto,
        "load_average_after": os.getloadavg(),
        "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(),
    }
    print(f"model {name}, LoRA r 8, batch {args.batch} x {args.length} tokens, {args.threads} threads")
    print(f"CPU capability {capability}, native bf16: {native}; mixed_precision='auto' picks {auto!r}")
    print(f"{'precision':<10} {'seconds/pass':>12} {'tokens/s':>9}")
    for key, values in seconds.items():
        print(f"{key:<10} {sum(values) / len(values):>12.2f} {rate[key]:>9.1f}")
    print(f"bf16 / fp32 tokens/s: {result['bf16_over_fp32']:.3f}x")
    out = Path(args.out)
    existing = json.loads(out.read_text()) if out.is_file() else {}
    existing[f"{name}, {capability}, native bf16 {native}"] = result
    atomic_write_text(out, json.dumps(existing, indent=2) + "\n")


if __name__ == "__main__":
    main()
