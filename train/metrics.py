"""What a run reports: a JSON-lines metrics log, TensorBoard when installed, a loss-curve PNG.

One record per logged step: ``step``, each objective's loss (``kl`` only with ``kl_weight``, ``end_kl`` only with ``end_kl_weight``),
``loss`` (the weighted total),
``lr``, ``tokens`` (real tokens in the global batch), ``tokens_per_s`` and ``elapsed_s``.
Only the main process writes. On ``--resume`` records after the resumed step are dropped, so
the log reads as one uninterrupted run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from magnetsdk.config import atomic_write_text

METRICS_NAME = "metrics.jsonl"
PLOT_NAME = "loss_curve.png"
LOSS_KEYS = ("mntp", "sscl", "msg", "kl", "end_kl", "loss")


def read_metrics(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


class MetricsLog:
    def __init__(self, run_dir: Path, resume_step: int | None = None, tensorboard: bool = True) -> None:
        self.path = Path(run_dir) / METRICS_NAME
        if resume_step is None:
            atomic_write_text(self.path, "")
        else:
            kept = [r for r in read_metrics(self.path) if r["step"] <= resume_step]
            atomic_write_text(self.path, "".join(json.dumps(r) + "\n" for r in kept))
        self._handle = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._writer = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._writer = SummaryWriter(str(Path(run_dir) / "tensorboard"))
            except ImportError:  # tensorboard is optional
                self._writer = None

    def log(self, record: dict[str, Any]) -> None:
        self._handle.write(json.dumps(record) + "\n")
        self._handle.flush()
        if self._writer is not None:
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)):
                    self._writer.add_scalar(f"train/{key}", value, record["step"])

    def close(self) -> None:
        self._handle.close()
        if self._writer is not None:
            self._writer.close()


def plot_losses(metrics_path: Path, png_path: Path) -> Path | None:
    """Draw each loss against the step; returns None when matplotlib is missing or nothing was logged."""
    records = read_metrics(metrics_path)
    if not records:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    figure, axis = plt.subplots(figsize=(7, 4))
    window = max(1, len(records) // 10)  # per-step losses are noisy at small batches: smooth them
    for index, key in enumerate(LOSS_KEYS):
        points = [(r["step"], r[key]) for r in records if r.get(key) is not None]
        if not points:
            continue
        steps, values = zip(*points, strict=True)
        color = f"C{index}"
        if window > 1:
            axis.plot(steps, values, color=color, alpha=0.25, linewidth=0.8)
            smooth = [
                sum(values[max(0, i - window + 1) : i + 1]) / len(values[max(0, i - window + 1) : i + 1])
                for i in range(len(values))
            ]
            axis.plot(steps, smooth, color=color, label=f"{key} (mean of {window})")
        else:
            axis.plot(steps, values, color=color, label=key)
    axis.set_xlabel("step")
    axis.set_ylabel("loss")
    axis.legend()
    axis.grid(alpha=0.3)
    figure.tight_layout()
    tmp = png_path.with_name(f".{png_path.name}.tmp.png")
    figure.savefig(tmp, dpi=110)
    plt.close(figure)
    tmp.replace(png_path)
    return png_path
