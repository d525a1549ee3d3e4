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
    args = ("infill", "--model", model_dir, "--max-new-tokens", "3", "--candidates", "3", "--seed", "0")
    ranked = [json.loads(run(*args, "The cat [GAP] mat.").stdout) for _ in range(2)]
    assert ranked[0] == ranked[1] and ranked[0]["text"].startswith("The cat ")
    start = [
        json.loads(run(*args, "--candidate-ranking", how, "[GAP] The cat sat.").stdout)
        for how in ("auto", "right")
    ]
    assert start[0] == start[1] and start[0]["text"].endswith(" The cat sat.")
    bad = run(*args, "--candidate-ranking", "mean", "[GAP] The cat sat.")
    assert bad.exit_code == 2 and "'mean' is not one of 'auto', 'total', 'right'" in bad.output
    kept = run("infill", "--model", model_dir, "--max-new-tokens", "3", "--line-breaks", "forbid", "A [GAP].")
    assert kept.exit_code == 0 and "\n" not in json.loads(kept.stdout)["spans"][0]
    wrong = run("infill", "--model", model_dir, "--line-breaks", "never", "A [GAP].")
    assert wrong.exit_code == 2 and "'never' is not one of 'auto', 'allow', 'forbid'" in wrong.output
    guarded = run(
        "infill", "--model", model_dir, "--max-new-tokens", "3", "--no-repeat-ngram", "2", "A [GAP]."
    )
    assert guarded.exit_code == 0 and json.loads(guarded.stdout)["text"].startswith("A ")
    one = run("infill", "--model", model_dir, "--no-repeat-ngram", "1", "A [GAP].")
    assert one.exit_code == 1 and "--no-repeat-ngram" in one.output and "at least 2" in one.output
    copying = "b b b b b b b b [GAP] b b b b b b"
    args = ("infill", "--model", model_dir, "--max-new-tokens", "8")
    plain = json.loads(run(*args, copying).stdout)
    resampled = run(*args, "--resample-copies", "4", copying)
    assert resampled.exit_code == 0 and json.loads(resampled.stdout) == plain  # this fill does not copy
    negative = run(*args, "--resample-copies", "-1", copying)
    assert negative.exit_code == 2 and "--resample-copies" in negative.output
    unknown = run(*args, "--resample-copies", "4", "--resample-ranking", "mean", copying)
    assert unknown.exit_code == 2 and "'mean' is not one of 'total', 'per-token'" in unknown.output

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


# ---------------------------------------------------------------------- errors a person can act on


@pytest.mark.parametrize("command", ["encode", "infill", "generate", "explain"])
def test_empty_input_is_reported_before_the_model_loads(command, tmp_path):
    nowhere = str(tmp_path / "no-model")  # loading it would fail: the input check comes first
    piped = run(command, "--model", nowhere, input="")
    assert piped.exit_code == 1 and "no input: standard input holds no" in piped.output
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n", encoding="utf-8")
    from_file = run(command, "--model", nowhere, "--input", str(blank))
    assert from_file.exit_code == 1 and f"no input: {blank} holds no" in from_file.output


def test_devices_that_do_not_exist_are_refused_before_loading(tmp_path):
    nowhere = str(tmp_path / "no-model")
    banana = run("info", "--model", nowhere, "--device", "banana")
    assert banana.exit_code == 1 and "--device 'banana' is not a device" in banana.output
    if not __import__("torch").cuda.is_available():
        cuda = run("info", "--model", nowhere, "--device", "cuda")
        assert cuda.exit_code == 1 and "asks for CUDA, which this machine does not have" in cuda.output


def test_broken_model_directories_are_named(model_dir, tmp_path):
    import shutil

    import torch

    bad_json = tmp_path / "bad-json"
    shutil.copytree(model_dir, bad_json)
    (bad_json / "config.json").write_text("{broken")
    result = run("info", "--model", str(bad_json))
    assert result.exit_code == 1 and f"cannot load the model at {bad_json}" in result.output
    bad_type = tmp_path / "bad-type"
    shutil.copytree(model_dir, bad_type)
    config = json.loads((bad_type / "config.json").read_text())
    config["hidden_size"] = "big"
    (bad_type / "config.json").write_text(json.dumps(config))
    result = run("info", "--model", str(bad_type))
    assert result.exit_code == 1 and "hidden_size" in result.output and "Traceback" not in result.output
    pickled = tmp_path / "pickled"
    shutil.copytree(model_dir, pickled)
    weights = __import__("safetensors.torch", fromlist=["load_file"]).load_file(pickled / "model.safetensors")
    (pickled / "model.safetensors").unlink()
    torch.save(weights, pickled / "pytorch_model.bin")
    result = run("info", "--model", str(pickled))
    assert result.exit_code == 1 and "only pickle checkpoints (pytorch_model.bin)" in result.output
    assert "safetensors weights only" in result.output


def test_a_csv_input_is_read_by_its_text_column(model_dir, tmp_path):
    table = tmp_path / "texts.csv"
    table.write_text("id,text\n1,the cat\n2,a dog\n", encoding="utf-8")
    result = run("encode", "--model", model_dir, "--input", str(table))
    assert result.exit_code == 0, result.output
    assert [json.loads(x)["text"] for x in result.stdout.splitlines()] == ["the cat", "a dog"]
    no_column = tmp_path / "other.csv"
    no_column.write_text("a,b\n1,2\n", encoding="utf-8")
    result = run("encode", "--model", model_dir, "--input", str(no_column))
    assert result.exit_code == 1 and "no 'text' column (columns: ['a', 'b'])" in result.output


def test_messages_name_flags_not_python_arguments(model_dir):
    no_gap = run("infill", "--model", model_dir, "no gap here")
    assert no_gap.exit_code == 1 and "--marker" in no_gap.output and "--left ... and --right" in no_gap.output
    assert "gap_marker=" not in no_gap.output and "left=" not in no_gap.output


def test_shift_never_replaces_a_folder_it_did_not_write(model_dir, tmp_path):
    run_dir = tmp_path / "training-run"
    (run_dir / "checkpoints" / "step-10").mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text('{"step": 1}\n')
    (run_dir / "magnet_config.json").write_text("{}")  # looks like a model directory
    result = run("shift", "--model", model_dir, "-o", str(run_dir), "one text", "another text")
    assert result.exit_code == 1 and "is not empty" in result.output
    assert (run_dir / "metrics.jsonl").is_file() and (run_dir / "checkpoints" / "step-10").is_dir()


def test_train_lists_its_recipes_and_names_a_file_that_is_not_utf8(tmp_path, base_dir):
    from magnetsdk.train.recipes import RECIPES

    help_text = " ".join(run("train", "--help").output.split())
    assert "--recipe [" + "|".join(sorted(RECIPES)) + "]" in help_text
    wrong = run("train", "--recipe", "nope", "--base-model", base_dir)
    assert wrong.exit_code == 2 and "'nope' is not one of" in wrong.output
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    result = run(
        "train", "--base-model", base_dir, "--data", str(latin), "--output-dir", str(tmp_path / "out")
    )
    assert result.exit_code == 1 and f"{latin} is not UTF-8 text (line 1" in result.output


def test_python_keyword_spellings_become_the_commands_flags():
    import click
    from magnetsdk.cli.ask import ask_command
    from magnetsdk.cli.errors import clean_message
    from magnetsdk.cli.runtime import generate

    message = "chat=True, but this tokenizer has no chat template; pass chat=False"
    with click.Context(generate):
        assert (
            clean_message(message) == "--chat, but this tokenizer has no chat template; pass without --chat"
        )
        assert clean_message("max_new_tokens=0 must be at least 1") == "--max-new-tokens 0 must be at least 1"
        assert clean_message("'quoted'") == "quoted"
    with click.Context(ask_command):
        assert clean_message(message).endswith("pass --plain")


def test_the_infill_commands_fill_with_the_sdks_token_budget():
    """`magnet infill`, `magnet eval infill` and Magnet.infill share one default budget (48)."""
    import inspect

    from magnetsdk.cli.eval import eval_group
    from magnetsdk.cli.runtime import infill

    from magnetsdk.copies import DEFAULT_INFILL_TOKENS
    from magnetsdk.eval.infill import evaluate_infill

    def option_default(command, name: str):
        return next(p.default for p in command.params if p.name == name)

    assert DEFAULT_INFILL_TOKENS == 48
    assert option_default(infill, "max_new_tokens") == DEFAULT_INFILL_TOKENS
    assert option_default(eval_group.commands["infill"], "max_new_tokens") == DEFAULT_INFILL_TOKENS
    for function in (Magnet.infill, evaluate_infill):
        assert inspect.signature(function).parameters["max_new_tokens"].default == DEFAULT_INFILL_TOKENS
