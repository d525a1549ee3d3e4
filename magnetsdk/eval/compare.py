"""Several models side by side: run a set of tasks per model, render one Markdown table per task
(like the paper's tables) and one bar chart per task (matplotlib, imported only when plotting).

The comparison reads :class:`~magnetsdk.eval.result.EvalResult` objects, so results written by
earlier ``magnet eval`` runs can be compared without running anything again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from magnetsdk.config import atomic_write_text
from magnetsdk.eval.result import EvalResult

# Per task, which figures a comparison shows (a figure is shown when its name contains a pattern),
# and how to print them. Counts (items, prefixes, ...) are left out.
SHOWN_FIGURES: dict[str, tuple[str, ...]] = {
    "sts": (".spearman",),
    "repetition": (".rep4", ".rep_sen"),
    "infill": ("ppl_",),
    "probe": ("accuracy", "f1"),
    "dependence": (".before", ".main", ".after"),
    "lm": ("ppl",),
}
# Figures stored as fractions and shown as percentages.
PERCENT_FIGURES = (".rep4", ".rep_sen")


def model_label(result: EvalResult) -> str:
    """A short name for the model that produced ``result``: the base model, plus the adapter's folder."""
    name = str(result.model.get("model", "?"))
    adapter = result.model.get("adapter")
    label = f"{Path(name).name} + {Path(adapter).name}" if adapter else Path(name).name
    if result.model.get("kind") == "sentence-transformers":  # saved folders are often just "model"
        label = "/".join(Path(name).parts[-2:])
    # An embedding run with other encode settings than the model's own says which ones.
    attention, pooling = result.settings.get("attention"), result.settings.get("pooling")
    own = (result.model.get("encode_attention"), result.model.get("pooling"))
    if result.task == "sts" and attention and pooling and (attention, pooling) != own:
        label += f" ({attention}, {pooling})"
    return label


def shown_figures(result: EvalResult) -> dict[str, float]:
    patterns = SHOWN_FIGURES.get(result.task, ())
    shown = {}
    for key, value in result.figures.items():
        if isinstance(value, (int, float)) and any(p in key for p in patterns):
            scale = 100.0 if any(key.endswith(p) for p in PERCENT_FIGURES) else 1.0
            shown[key] = float(value) * scale
    return shown


def comparison_markdown(results: list[EvalResult]) -> str:
    """One Markdown table per task: a row per model, a column per figure."""
    if not results:
        raise ValueError("nothing to compare: no results")
    sections = []
    for task in dict.fromkeys(r.task for r in results):
        chosen = [r for r in results if r.task == task]
        columns = list(dict.fromkeys(k for r in chosen for k in shown_figures(r)))
        note = " (rep-4 and rep-sen in %)" if task == "repetition" else ""
        lines = [f"### {task}{note}", "", "| model | " + " | ".join(columns) + " |"]
        lines.append("|---|" + "---:|" * len(columns))
        for result in chosen:
            figures = shown_figures(result)
            cells = [_format(figures.get(c), c.endswith(PERCENT_FIGURES)) for c in columns]
            lines.append(f"| {model_label(result)} | " + " | ".join(cells) + " |")
        sections.append("\n".join(lines))
    return "\n\n".join(sections) + "\n"


def _format(value: float | None, percent: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.4f}" if abs(value) < 1 and not percent else f"{value:.2f}"


def plot_comparison(results: list[EvalResult], directory: str | Path) -> list[Path]:
    """A grouped bar chart per task (``compare-TASK.png``); returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for task in dict.fromkeys(r.task for r in results):
        chosen = [r for r in results if r.task == task]
        columns = list(dict.fromkeys(k for r in chosen for k in shown_figures(r)))
        if not columns:
            continue
        width = 0.8 / len(chosen)
        figure, axis = plt.subplots(figsize=(max(5.0, 1.3 * len(columns) + 2), 3.8))
        for i, result in enumerate(chosen):
            figures = shown_figures(result)
            xs = [c + (i - (len(chosen) - 1) / 2) * width for c in range(len(columns))]
            ys = [figures.get(c, float("nan")) for c in columns]
            axis.bar(xs, ys, width=width, label=model_label(result))
        axis.set_xticks(range(len(columns)))
        axis.set_xticklabels(columns, rotation=20, ha="right")
        axis.set_title(task)
        axis.legend(fontsize=8)
        figure.tight_layout()
        target = out / f"compare-{task}.png"
        tmp = out / f".compare-{task}.tmp.png"
        figure.savefig(tmp, dpi=120)
        plt.close(figure)
        tmp.replace(target)
        written.append(target)
    return written


@dataclass
class Suite:
    """Which tasks to run on every model, with their data files (None: skip the task)."""

    sts: list[str] = field(default_factory=list)
    repetition: str | None = None
    infill: str | None = None
    dependence: str | None = None
    lm: str | None = None
    limit: int | None = None

    def tasks(self) -> list[str]:
        chosen = ["sts"] if self.sts else []
        chosen += [t for t in ("repetition", "infill", "dependence", "lm") if getattr(self, t)]
        if not chosen:
            raise ValueError(
                "no task chosen; give at least one data file (--sts, --infill, --repetition, ...)"
            )
        return chosen


def run_suite(magnet: Any, suite: Suite, show_progress: bool = True) -> list[EvalResult]:
    """Run every task of ``suite`` on one model with each task's default settings."""
    results = []
    for task in suite.tasks():
        if task == "sts":
            from magnetsdk.eval.encoder import MagnetEncoder
            from magnetsdk.eval.sts import evaluate_sts

            results.append(evaluate_sts(MagnetEncoder(magnet), suite.sts, limit=suite.limit))
        elif task == "repetition":
            from magnetsdk.eval.repetition import evaluate_repetition

            results.append(
                evaluate_repetition(magnet, suite.repetition, limit=suite.limit, show_progress=show_progress)
            )
        elif task == "infill":
            from magnetsdk.eval.infill import evaluate_infill

            results.append(
                evaluate_infill(magnet, suite.infill, limit=suite.limit, show_progress=show_progress)
            )
        elif task == "dependence":
            from magnetsdk.eval.dependence import evaluate_dependence

            results.append(
                evaluate_dependence(magnet, suite.dependence, limit=suite.limit, show_progress=show_progress)
            )
        elif task == "lm":
            from magnetsdk.eval.lm import evaluate_lm

            results.append(evaluate_lm(magnet, suite.lm, limit=suite.limit, show_progress=show_progress))
    return results


def write_comparison(results: list[EvalResult], directory: str | Path, plots: bool = True) -> list[Path]:
    """``comparison.md`` (and the plots) in ``directory``; returns the files written."""
    out = Path(directory)
    table = out / "comparison.md"
    atomic_write_text(table, comparison_markdown(results))
    return [table, *(plot_comparison(results, out) if plots else [])]
