"""scripts/gpu_train.sh end to end on the CPU: a tiny base, tiny synthetic shared data, 2 steps.

Checks what the GPU run will do, minus the GPU: data preparation, training with the GPU config
(GradCache chunks, documents, the generation check), every evaluation for adapter and base, and
the one summary JSON. Slow (a dozen Python start-ups): ``pytest -m slow``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from magnetsdk.testing import _CORPUS

ROOT = Path(__file__).resolve().parents[1]


def tiny_shared(folder: Path) -> Path:
    """The layout of ../shared/data with a few synthetic rows (the tiny tokenizer's words)."""
    texts = sorted(set(_CORPUS))
    sentence = lambda i: texts[i % len(texts)].capitalize() + f" number {i} ."  # noqa: E731 (WikiText style)
    (folder / "stsb").mkdir(parents=True)
    rows = [
        f"main-captions\tx\t2012\t{i:04d}\t{i % 6}.0\t{sentence(i)}\t{sentence(i + 3)}" for i in range(60)
    ]
    (folder / "stsb" / "sts-train.csv").write_text("\n".join(rows) + "\n")
    (folder / "stsb" / "sts-dev.csv").write_text("\n".join(rows[:20]) + "\n")
    (folder / "snli").mkdir()
    for split in ("dev", "test"):
        premises, hypotheses, labels = [], [], []
        for i in range(40):
            for label, offset in (("entailment", 1), ("contradiction", 5)):
                premises.append(sentence(100 + i))
                hypotheses.append(sentence(200 + i + offset))
                labels.append(label)
        (folder / "snli" / f"s1.{split}").write_text("\n".join(premises) + "\n")
        (folder / "snli" / f"s2.{split}").write_text("\n".join(hypotheses) + "\n")
        (folder / "snli" / f"labels.{split}").write_text("\n".join(labels) + "\n")
    (folder / "wikitext2").mkdir()
    lines = []
    for article in range(12):
        lines += [f" = Article {article} = ", ""]
        for paragraph in range(6):
            words = " ".join(sentence(article * 10 + paragraph + k) for k in range(6))
            lines += [" " + words + " ", ""]
    (folder / "wikitext2" / "wiki.valid.tokens").write_text("\n".join(lines * 4) + "\n")
    return folder


@pytest.mark.slow
def test_gpu_script_runs_on_the_cpu_with_a_tiny_model(tmp_path, base_dir):
    shared = tiny_shared(tmp_path / "shared")
    out = tmp_path / "gpu"
    env = {
        **os.environ,
        "PY": sys.executable,
        "SHARED": str(shared),
        "OUT": str(out),
        "DATA": str(tmp_path / "data"),
        "HOLDOUT_LINES": "500",  # the tiny WikiText file has fewer than 1000 lines
        "INFILL_LINES": "1-500",
        "DEVICE": "cpu",
        "STEPS": "2",
        "BASE": base_dir,
        "EVAL_LIMIT": "4",
        "LM_TOKENS": "256",
        "OMP_NUM_THREADS": "1",
        "TRAIN_ARGS": "--batch-size 4 --contrastive-batch-size 8 --contrastive-chunk-size 4 --eval-every 1 "
        "--eval-new-tokens 8 --max-length 32 --end-token <span_end>",  # the tiny base's EOS is <|endoftext|>
    }
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_train.sh")], env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "eval.json").read_text())
    assert summary["training"]["steps"] == 2
    for who in ("adapter", "base"):
        assert set(summary[who]) >= {
            "sts-dev",
            "sts-heldout",
            "lm",
            "repetition",
            "repetition-full",
            "infill",
        }
    records = [json.loads(line) for line in (out / "adapter" / "metrics.jsonl").read_text().splitlines()]
    assert all("eval_natural_tokens" in r for r in records)
    assert all(r["scored"] is not None and r["kl"] is not None for r in records)  # CoSENT and KL train
    assert all(r["end_kl"] is not None for r in records)  # the end KL trains too
    trained = json.loads((out / "adapter" / "train_config.json").read_text())
    assert (
        trained["end_token"] == "<span_end>"
        and trained["end_row_from_eos"]
        and trained["train_layout_tokens"]
    )
    assert (out / "adapter" / "adapter_model.safetensors").is_file()
