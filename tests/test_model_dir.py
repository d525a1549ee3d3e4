"""The model-directory writer never deletes or overwrites what it did not write (every writer).

Reproduces `magnet shift -o RUN_DIR`, which replaced a training run whole (checkpoints, metrics,
paraphrase cache, model card gone), and checks the rule for Magnet.save, training's export, the
UBMoE mixture writer, the sentence-transformers files and the shipped adapter.
"""

from __future__ import annotations

import json
import os

import pytest

from magnetsdk import Magnet
from magnetsdk.attention import AttentionMode
from magnetsdk.config import Pooling
from magnetsdk.layout import resolve_layout_tokens
from magnetsdk.loading import SHIPPED_ADAPTER
from magnetsdk.model_dir import (
    MANIFEST_NAME,
    Manifest,
    ModelDirectoryError,
    add_custom_sentence_transformers_files,
    read_manifest,
    write_model_directory,
)
from magnetsdk.testing import tiny_model, tiny_tokenizer


def a_run_directory(tmp_path, llama_magnet):
    """What `magnet train` leaves: an exported adapter beside checkpoints, metrics and a cache."""
    from magnetsdk.train.export import export_model

    run = tmp_path / "run"
    (run / "checkpoints" / "step-10").mkdir(parents=True)
    (run / "checkpoints" / "step-10" / "state.safetensors").write_text("weights")
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    (run / "README.md").write_text("my notes")
    layout, _ = resolve_layout_tokens(llama_magnet.tokenizer)
    export_model(
        tiny_model(),
        llama_magnet.tokenizer,
        run,
        base_model="tiny",
        instruction="Find:",
        layout=layout,
        tokens_added=True,
        uses_sscl=True,
        lm_attention="hybrid",
        training={"steps": 10},
        full_weights=True,
    )
    return run


def foreign_files(run):
    return {
        "checkpoints/step-10/state.safetensors": "weights",
        "metrics.jsonl": '{"step": 1}\n',
        "README.md": "my notes",
    }


def assert_untouched(run):
    for name, text in foreign_files(run).items():
        assert (run / name).read_text() == text, name


def test_saving_over_a_training_run_is_refused_and_deletes_nothing(llama_magnet, tmp_path):
    run = a_run_directory(tmp_path, llama_magnet)
    assert (run / "magnet_config.json").is_file()  # it looks like a model directory, and it is one
    with pytest.raises(ModelDirectoryError, match="did not write") as error:
        llama_magnet.save(run)  # what `magnet shift -o RUN` does
    message = str(error.value)
    assert "checkpoints/step-10/state.safetensors" in message and "new or empty directory" in message
    assert isinstance(error.value, FileExistsError)  # the CLI turns it into a message
    assert_untouched(run)
    assert Magnet.from_pretrained(run).encode("still loads").shape == (64,)


def test_a_foreign_directory_is_refused_and_an_own_one_replaced(llama_magnet, tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "keep.txt").write_text("mine")
    with pytest.raises(ModelDirectoryError, match="keep.txt"):
        llama_magnet.save(notes)
    assert sorted(p.name for p in notes.iterdir()) == ["keep.txt"]

    target = llama_magnet.save(tmp_path / "model")
    first = (target / "model.safetensors").stat().st_ino
    llama_magnet.save(target)  # a directory this code wrote is replaced whole
    assert (target / "model.safetensors").stat().st_ino != first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "notes"]  # no temporaries left
    assert set(read_manifest(target).files) == {
        p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file()
    }
    (target / "extra.txt").write_text("added by hand")
    with pytest.raises(ModelDirectoryError, match="extra.txt"):
        llama_magnet.save(target)  # one added file makes it not exactly ours any more
    assert (target / "extra.txt").read_text() == "added by hand"

    umask = os.umask(0)
    os.umask(umask)
    assert (target.stat().st_mode & 0o777) == 0o777 & ~umask
    assert ((target / "model.safetensors").stat().st_mode & 0o777) == 0o666 & ~umask


def test_a_directory_saved_before_manifests_is_still_replaceable(llama_magnet, tmp_path):
    old = llama_magnet.save(tmp_path / "old")
    (old / MANIFEST_NAME).unlink()
    modules = [
        {
            "idx": 0,
            "name": "0",
            "path": "",
            "type": "magnetsdk.integrations.sentence_transformers.MagnetModule",
        }
    ]
    (old / "modules.json").write_text(json.dumps(modules))
    for stock in ("1_Pooling", "2_Normalize", "sentence_bert_config.json"):
        path = old / stock
        if path.is_dir():
            for child in path.iterdir():
                child.unlink()
            path.rmdir()
        else:
            path.unlink()
    llama_magnet.save(old)
    assert read_manifest(old) is not None


def test_export_writes_beside_a_runs_files_and_replaces_only_its_own(llama_magnet, tmp_path):
    from magnetsdk.train.export import export_model

    run = a_run_directory(tmp_path, llama_magnet)
    manifest = read_manifest(run)
    assert manifest.kind == "model" and "metrics.jsonl" not in manifest.files
    assert "adapter_config.json" not in manifest.files
    # A second export (a resumed run) writes an adapter instead: the full weights it wrote before go,
    # the run's own files stay.
    from peft import LoraConfig, get_peft_model

    peft_model = get_peft_model(tiny_model(), LoraConfig(r=2, target_modules=["q_proj"]))
    layout, _ = resolve_layout_tokens(llama_magnet.tokenizer)
    export_model(
        peft_model, llama_magnet.tokenizer, run, "tiny", "Find:", layout, False, True, "hybrid", {}, False
    )
    assert (run / "adapter_model.safetensors").is_file() and not (run / "model.safetensors").exists()
    assert_untouched(run)
    assert read_manifest(run).kind == "adapter"
    # A file of the same name that the writer did not write is never overwritten.
    (run / "adapter_config.json").unlink()
    (run / "adapter_config.json").write_text("{}")
    manifest = read_manifest(run)
    manifest.files.remove("adapter_config.json")
    (run / MANIFEST_NAME).write_text(manifest.to_json())
    with pytest.raises(ModelDirectoryError, match="adapter_config.json"):
        export_model(
            peft_model, llama_magnet.tokenizer, run, "tiny", "Find:", layout, False, True, "hybrid", {}, False
        )
    assert (run / "adapter_config.json").read_text() == "{}"
    assert_untouched(run)


def test_sentence_transformers_files_are_added_to_the_manifest(llama_magnet, tmp_path):
    run = a_run_directory(tmp_path, llama_magnet)
    add_custom_sentence_transformers_files(run, prompts={"query": "Q:"})  # what `magnet train` calls
    files = read_manifest(run).files
    assert {"modules.json", "config_sentence_transformers.json", "model.safetensors"} <= set(files)
    assert_untouched(run)


def test_mixture_writer_keeps_the_runs_files(tmp_path):
    from magnetsdk.train.export import export_model

    from magnetsdk.experts import bidirectional_mlps, install_experts, save_mixture

    tokenizer = tiny_tokenizer()
    layout, _ = resolve_layout_tokens(tokenizer)
    from peft import LoraConfig, get_peft_model

    stage1 = tmp_path / "stage1"
    peft_model = get_peft_model(
        tiny_model(), LoraConfig(r=2, target_modules=["gate_proj", "up_proj", "down_proj"])
    )
    export_model(
        peft_model, tokenizer, stage1, "tiny", "Find:", layout, False, True, "bidirectional", {}, False
    )
    model = tiny_model()
    install_experts(model, bidirectional_mlps(model, stage1))
    out = tmp_path / "ubmoe"
    out.mkdir()
    (out / "metrics.jsonl").write_text("gate steps\n")
    save_mixture(model, tokenizer, out, stage1, training={"steps": 1})
    assert (out / "metrics.jsonl").read_text() == "gate steps\n"
    assert (
        read_manifest(out).kind == "mixture"
        and "bidirectional/adapter_model.safetensors" in read_manifest(out).files
    )
    save_mixture(model, tokenizer, out, stage1, training={"steps": 2})  # rewriting its own files is fine
    assert json.loads((out / "magnet_config.json").read_text())["training"]["ubmoe"] == {"steps": 2}


def test_the_shipped_adapter_directory_is_one_this_code_wrote():
    """scripts/ship_adapter.py replaces it whole, which the writer allows only for its own files."""
    manifest = read_manifest(SHIPPED_ADAPTER)
    assert manifest is not None and manifest.kind == "adapter"
    assert set(manifest.files) == {p.name for p in SHIPPED_ADAPTER.iterdir()}


def test_a_failing_write_leaves_the_target_as_it_was(llama_magnet, tmp_path):
    target = llama_magnet.save(tmp_path / "model")
    before = sorted(p.name for p in target.iterdir())

    def broken(tmp):
        (tmp / "config.json").write_text("{}")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        write_model_directory(target, broken)
    assert sorted(p.name for p in target.iterdir()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    with pytest.raises(ModelDirectoryError, match="is a file"):
        write_model_directory(target / "config.json", lambda tmp: Manifest(kind="model"))


def test_encode_settings_that_stock_modules_cannot_express(tmp_path):
    from magnetsdk.st_layout import stock_obstacle
    from magnetsdk.testing import tiny_magnet

    magnet = tiny_magnet("llama")
    assert stock_obstacle(magnet.config, magnet.tokenizer) is None
    magnet.config.pooling = Pooling.MEAN
    assert "mean pooling" in stock_obstacle(magnet.config, magnet.tokenizer)
    magnet.config.pooling, magnet.config.echo = Pooling.LAST, True
    assert "echo" in stock_obstacle(magnet.config, magnet.tokenizer)
    magnet.config.echo, magnet.config.encode_attention = False, AttentionMode.HYBRID
    assert "hybrid" in stock_obstacle(magnet.config, magnet.tokenizer)


def test_magnet_shift_onto_a_training_run_says_what_to_do(llama_magnet, tmp_path, base_dir):
    """The reported failure, through the CLI: `magnet shift -o RUN` used to replace the run whole."""
    from click.testing import CliRunner
    from magnetsdk.cli.main import cli

    run = a_run_directory(tmp_path, llama_magnet)
    result = CliRunner().invoke(
        cli, ["shift", "--model", base_dir, "-o", str(run), "a cat", "a dog", "the rain"]
    )
    assert result.exit_code != 0
    assert "did not write" in result.output and "Traceback" not in result.output
    assert_untouched(run)
    beside = tmp_path / "shifted"
    ok = CliRunner().invoke(
        cli, ["shift", "--model", base_dir, "-o", str(beside), "a cat", "a dog", "the rain"]
    )
    assert ok.exit_code == 0, ok.output
    assert Magnet.from_pretrained(beside).principal_shift is not None
