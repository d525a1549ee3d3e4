"""The runtime commands, run through click's CliRunner on a tiny model saved to disk."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from magnetsdk.cli.main import cli

from magnetsdk import Magnet
from magnetsdk.testing import tiny_model, tiny_tokenizer


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tiny-cli")
    tiny_model("qwen2").save_pretrained(directory)
    tiny_tokenizer().save_pretrained(directory)
    return str(directory)


def run(*args: str, input: str | None = None):
    result = CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)
    return result


def test_encode_prints_one_json_line_per_text(model_dir):
    result = run("encode", "--model", model_dir, "the cat", "a dog")
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["text"] for r in records] == ["the cat", "a dog"]
    expected = Magnet.from_pretrained(model_dir).encode(["the cat", "a dog"])
    np.testing.assert_allclose(np.array([r["embedding"] for r in records]), expected, atol=1e-5)


def test_encode_reads_stdin_and_files_and_writes_npy(model_dir, tmp_path):
    piped = run("encode", "--model", model_dir, input="one\n\ntwo\n")
    assert piped.exit_code == 0 and len(piped.stdout.splitlines()) == 2
    source = tmp_path / "texts.jsonl"
    source.write_text('{"text": "one"}\n{"text": "two"}\n', encoding="utf-8")
    out = tmp_path / "vectors.npy"
    written = run("encode", "--model", model_dir, "--input", str(source), "--output", str(out))
    assert written.exit_code == 0, written.output
    assert np.load(out).shape == (2, 64)
    table = run("encode", "--model", model_dir, "--format", "table", "a", "b")
    assert "[0]" in table.stdout and "1.000" in table.stdout


def test_bad_files_are_named(model_dir, tmp_path):
    binary = tmp_path / "blob.txt"
    binary.write_bytes(b"\xff\xfe\x00abc")
    result = run("encode", "--model", model_dir, "--input", str(binary))
    assert result.exit_code != 0 and "blob.txt is not UTF-8" in result.output
    missing = run("encode", "--model", model_dir, "--input", str(tmp_path / "nope.txt"))
    assert missing.exit_code != 0 and "cannot read" in missing.output
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"text": 1}\n', encoding="utf-8")
    result = run("encode", "--model", model_dir, "--input", str(broken))
    assert result.exit_code != 0 and "broken.jsonl:1" in result.output


def test_unknown_model_is_a_clean_error(tmp_path):
    result = run("info", "--model", str(tmp_path / "nowhere"))
    assert result.exit_code == 1 and "Tried:" in result.output and "Traceback" not in result.output


def test_infill_generate_info(model_dir):
    filled = run("infill", "--model", model_dir, "--max-new-tokens", "3", "The cat [GAP] mat.")
    assert filled.exit_code == 0, filled.output
    record = json.loads(filled.stdout)
    assert record["text"].startswith("The cat ") and len(record["spans"]) == 1
    sides = run(
        "infill", "--model", model_dir, "--max-new-tokens", "3", "--left", "The cat ", "--right", " mat."
    )
    assert json.loads(sides.stdout)["spans"] == record["spans"]
    no_gap = run("infill", "--model", model_dir, "no gap")
    assert no_gap.exit_code == 1 and "no gap marker" in no_gap.output

    generated = run("generate", "--model", model_dir, "--max-new-tokens", "4", "--temperature", "0", "Once")
    assert generated.exit_code == 0 and json.loads(generated.stdout)["prompt"] == "Once"

    info = run("info", "--model", model_dir)
    facts = json.loads(info.stdout)
    assert facts["dimension"] == 64 and facts["encode_attention"] == "causal" and facts["adapted"] is False
    table = run("info", "--model", model_dir, "--format", "table")
    assert "attn_implementation" in table.stdout


def test_demo_runs_every_surface(model_dir):
    result = run("demo", "--model", model_dir)
    assert result.exit_code == 0, result.output
    for part in ("[encode]", "[infill]", "[generate]", "sim([0], [1])"):
        assert part in result.output


def test_explain_lists_key_tokens(model_dir):
    result = run("explain", "--model", model_dir, "-k", "3", "the cat sat")
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    assert record["text"] == "the cat sat" and len(record["tokens"]) == 3


def test_shift_fits_and_saves_a_model_that_applies_it(model_dir, tmp_path):
    texts = [f"text {i} about {w}" for i, w in enumerate("abcdefgh")]
    out = tmp_path / "shifted"
    result = run("shift", "--model", model_dir, "--mode", "shift", "--weight", "2", "-o", str(out), *texts)
    assert result.exit_code == 0, result.output
    saved = Magnet.from_pretrained(out)
    assert saved.principal_shift is not None and saved.principal_shift.weight == 2.0
    plain = Magnet.from_pretrained(model_dir)
    raw = plain.encode(["the cat"], normalize=False)
    expected = raw + 2.0 * saved.principal_shift.component
    np.testing.assert_allclose(saved.encode(["the cat"], normalize=False), expected, atol=1e-4)
