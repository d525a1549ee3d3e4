"""scripts/ship_adapter.py: what the model card says about how the run was trained."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def run_dir(tmp_path: Path, training: dict) -> Path:
    (tmp_path / "magnet_config.json").write_text(json.dumps({"training": training}))
    return tmp_path


@pytest.fixture
def ship(repo_script):
    return repo_script("scripts/ship_adapter.py")


def test_the_card_states_the_precision_the_run_recorded(tmp_path, ship):
    assert ship.run_precision(run_dir(tmp_path, {"mixed_precision_used": "no"}), None) == "no"
    assert ship.PRECISIONS[ship.run_precision(tmp_path, "fp32")] == "fp32"  # agrees with the record
    with pytest.raises(SystemExit, match="contradicts the run's record"):
        ship.run_precision(tmp_path, "bf16")


def test_a_run_that_does_not_record_its_precision_needs_it_given(tmp_path, ship):
    run = run_dir(tmp_path, {"recipe": "magnet"})
    with pytest.raises(SystemExit, match="give --precision bf16 or --precision fp32"):
        ship.run_precision(run, None)
    assert ship.PRECISIONS[ship.run_precision(run, "bf16")] == "bf16 autocast"


def test_the_card_names_the_trained_layout_rows_and_the_end_settings(tmp_path, ship):
    config = {"train_layout_tokens": True, "train_layout_roles": ["end"], "end_token": "<|endoftext|>"}
    assert "roles end" in ship._layout_rows(config)
    assert "`<|endoftext|>`" in ship._layout_rows(config)
    assert ship._layout_rows({"train_layout_tokens": False}) == ""
    assert "mask, gap, span, end" in ship._layout_rows({"train_layout_tokens": True})

    run = tmp_path / "run"
    run.mkdir()
    (run / "train_config.json").write_text(
        json.dumps({**config, "recipe": "magnet", "span_end_weight": 5.0, "layout_token_lr": 0.003})
    )
    (run / "magnet_config.json").write_text(json.dumps({"training": {}}))
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 1.0, "tokens": 10, "elapsed_s": 2.0}))
    card = ship.model_card(run, "magnet train", tmp_path / "a", [tmp_path / "b"], 1000, "no")
    for row in ("| span_end_weight | 5.0 |", "| end_token | <|endoftext|> |", "| layout_token_lr | 0.003 |"):
        assert row in card


def test_the_base_s_figures_come_from_the_first_prefix_that_holds_them(tmp_path, ship):
    for name, figures in (("later", {"gold_f1": 0.171}), ("earlier", {"gold_f1": 0.2, "copy_rate": 0.225})):
        (tmp_path / f"{name}-infill-test.json").write_text(json.dumps({"figures": figures}))
    prefixes = [tmp_path / "later", tmp_path / "earlier"]
    assert ship.figure(prefixes, "infill-test", "gold_f1") == 0.171
    assert ship.figure(prefixes, "infill-test", "copy_rate") == 0.225
    assert ship.figure(prefixes, "infill-test-all", "copy_rate") is None
