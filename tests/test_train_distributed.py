"""Scale-out and never losing a run, on a tiny model in real subprocesses.

- Two CPU processes (torchrun, gloo) with 2 examples each compute the same losses as one process
  with 4 examples: the global batch, per-example masking and gathered contrastive negatives are
  identical, so only the order of floating-point sums differs (tolerance: relative 1e-4).
- A run killed with SIGKILL mid-training and resumed with ``resume=True`` ends with the same
  losses as an uninterrupted run (tolerance: relative 1e-4; dropout is on, so this also checks
  that the RNG state is restored).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from magnetsdk.train.checkpoint import list_checkpoints
from magnetsdk.train.config import TrainConfig
from magnetsdk.train.metrics import read_metrics
from magnetsdk.train.trainer import train

pytestmark = pytest.mark.usefixtures("one_thread")

TOLERANCE = 1e-4
LOSSES = ("mntp", "sscl", "msg", "scored", "loss")
SCORED = [  # graded pairs for the CoSENT term: its cosines are gathered across processes too
    ("The cat sat on the mat.", "A cat was sitting on the mat.", 4.8),
    ("A dog runs in the park.", "A dog is running in a park.", 4.2),
    ("Paris is the capital of France.", "France has many museums.", 2.0),
    ("Stocks rose after the bank cut rates.", "She sells sea shells by the shore.", 0.2),
    ("He plays the piano.", "He plays the piano and the guitar.", 3.5),
    ("Rain fell all night.", "Water boils at one hundred degrees.", 0.0),
    ("The quick brown fox jumps.", "A fast brown fox leaps.", 4.5),
    ("Machine learning models learn.", "Models learn patterns from data.", 3.0),
]


def settings(base_dir, data_file, output_dir, **overrides) -> dict:
    base = dict(
        base_model=base_dir,
        data=[data_file],
        output_dir=str(output_dir),
        batch_size=4,
        max_length=32,
        sscl_max_length=48,
        warmup_steps=1,
        learning_rate=5e-3,
        progress=False,
        # fp32: "auto" picks bf16 on a CPU with native bf16 (AVX512-BF16, AMX), and bf16 rounding
        # alone moves one- and two-process losses apart by more than TOLERANCE after one update.
        mixed_precision="no",
        positives="dropout",  # SimCSE positives: no generation pass
    )
    return {**base, **overrides}


def flags(values: dict) -> list[str]:
    out = []
    for key, value in values.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            out.append(flag if value else "--no-" + key.replace("_", "-"))
        elif isinstance(value, list):
            for item in value:
                out += [flag, str(item)]
        else:
            out += [flag, str(value)]
    return out


def environment() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def assert_same_losses(a: list[dict], b: list[dict]) -> None:
    assert [r["step"] for r in a] == [r["step"] for r in b]
    for left, right in zip(a, b, strict=True):
        for key in LOSSES:
            if left.get(key) is None:
                assert right.get(key) is None
            else:
                assert right[key] == pytest.approx(left[key], rel=TOLERANCE), (left["step"], key)


def test_two_processes_match_one_process_with_the_same_global_batch(tmp_path, base_dir, data_file):
    scored = tmp_path / "scored.jsonl"
    scored.write_text("".join(json.dumps({"text1": a, "text2": b, "score": s}) + "\n" for a, b, s in SCORED))
    common = dict(
        max_steps=4, save_every=4, lora_dropout=0.0, attention_dropout=0.0, scored_pairs=[str(scored)]
    )
    one = train(TrainConfig(**settings(base_dir, data_file, tmp_path / "one", scored_batch_size=4, **common)))
    two_settings = settings(
        base_dir, data_file, tmp_path / "two", batch_size=2, scored_batch_size=2, **common
    )
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "magnetsdk.cli.main",
        "train",
        *flags(two_settings),
    ]
    done = subprocess.run(command, env=environment(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    two = read_metrics(tmp_path / "two" / "metrics.jsonl")
    ones = read_metrics(one.metrics_path)
    assert [r["tokens"] for r in two] == [r["tokens"] for r in ones]  # the same examples
    assert_same_losses(ones, two)
    assert (tmp_path / "two" / "magnet_config.json").is_file()


def test_sigkill_then_resume_ends_like_an_uninterrupted_run(tmp_path, base_dir, data_file):
    common = dict(max_steps=24, save_every=3)  # dropout stays on (SimCSE positives)
    killed_dir = tmp_path / "killed"
    command = [
        sys.executable,
        "-m",
        "magnetsdk.cli.main",
        "train",
        *flags(settings(base_dir, data_file, killed_dir, **common)),
    ]
    process = subprocess.Popen(
        command, env=environment(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 240
        while not list_checkpoints(killed_dir):
            assert process.poll() is None, process.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "no checkpoint appeared"
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == -signal.SIGKILL
    reached = list_checkpoints(killed_dir)[-1].step
    assert reached < 24 and not (killed_dir / "magnet_config.json").exists()

    resumed = train(TrainConfig(**settings(base_dir, data_file, killed_dir, **common)), resume=True)
    full = train(TrainConfig(**settings(base_dir, data_file, tmp_path / "full", **common)))
    assert resumed.steps == full.steps == 24
    for key in LOSSES:
        if full.losses.get(key) is None:
            assert resumed.losses.get(key) is None, key
        else:
            assert resumed.losses[key] == pytest.approx(full.losses[key], rel=TOLERANCE), key
    # The metrics log reads as one run: every step once, and the same losses throughout.
    assert_same_losses(read_metrics(full.metrics_path), read_metrics(resumed.metrics_path))
