"""End-to-end training on a tiny model: losses fall, the export loads, recipes run, bad input fails clearly."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from magnetsdk.cli.main import cli
from magnetsdk.train.checkpoint import list_checkpoints
from magnetsdk.train.data import DataError
from magnetsdk.train.metrics import read_metrics
from magnetsdk.train.trainer import NonFiniteLossError, train

from magnetsdk import Magnet
from magnetsdk.attention import AttentionMode
from magnetsdk.config import Pooling
from magnetsdk.testing import _CORPUS, tiny_model, tiny_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")


def test_training_lowers_the_losses_and_exports_a_model_that_loads(
    tmp_path, base_dir, data_file, train_config
):
    result = train(train_config(tmp_path, base_dir, data_file, max_steps=30, save_every=10, lora_r=8))
    records = read_metrics(result.metrics_path)
    assert [r["step"] for r in records] == list(range(1, 31))
    for key in ("mntp", "msg", "sscl"):
        # A step whose batch drew no example of an objective logs no value for it.
        first = np.mean([r[key] for r in records[:8] if r.get(key) is not None])
        last = np.mean([r[key] for r in records[-8:] if r.get(key) is not None])
        assert last < first, f"{key} did not fall: {first:.3f} -> {last:.3f}"
    out = result.output_dir
    for name in ("adapter_model.safetensors", "adapter_config.json", "magnet_config.json", "loss_curve.png"):
        assert (out / name).is_file(), name
    assert (out / "tokenizer_config.json").is_file()  # the tiny tokenizer needed new layout tokens

    magnet = Magnet.from_pretrained(str(out), device="cpu")
    base = Magnet.from_pretrained(base_dir, device="cpu")
    assert magnet.config.encode_attention is AttentionMode.BIDIRECTIONAL
    assert magnet.config.pooling is Pooling.LAST
    assert magnet.config.training["recipe"] == "magnet"
    assert magnet.config.training["steps"] == 30
    assert magnet.layout == base.layout
    # The adapter changed the weights, including the rows of the added layout tokens.
    mask_row = magnet.layout.mask_id
    trained_rows = magnet.model.get_input_embeddings().weight[mask_row]
    base_rows = base.model.get_input_embeddings().weight[mask_row]
    assert not torch.allclose(trained_rows, base_rows)
    vectors = magnet.encode(["the cat sat on the mat", "a dog runs in the park"])
    assert vectors.shape == (2, 64) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert not np.allclose(vectors, base.encode(["the cat sat on the mat", "a dog runs in the park"]))
    # Bidirectional: the pooled (last) token is unchanged by padding, and an earlier token sees later ones.
    ids = magnet.tokenizer("the cat sat on the mat", add_special_tokens=False)["input_ids"]
    from magnetsdk.forward import run_decoder

    with torch.no_grad():
        x = torch.tensor([ids])
        y = torch.tensor([ids[:-1] + [ids[0]]])
        valid = torch.ones_like(x, dtype=torch.bool)
        first_x = run_decoder(magnet.model, x, valid, "bidirectional").hidden[0, 0]
        first_y = run_decoder(magnet.model, y, valid, "bidirectional").hidden[0, 0]
    assert not torch.allclose(first_x, first_y)


@pytest.mark.parametrize("recipe", ["llm2vec", "meap", "msg-only"])
def test_other_recipes_run_and_record_how_to_encode(tmp_path, base_dir, data_file, recipe, train_config):
    from magnetsdk.train.startup import cpu_has_native_bf16, pick_mixed_precision

    config = train_config(tmp_path, base_dir, data_file, recipe=recipe)
    result = train(config)
    saved = json.loads((result.output_dir / "magnet_config.json").read_text())
    assert saved["training"]["recipe"] == recipe
    # The precision the run used, not the setting ("auto" resolves per machine): the model card reads it.
    used = pick_mixed_precision(config.mixed_precision, True, cpu_has_native_bf16()).value
    assert saved["training"]["mixed_precision_used"] == used != "auto"
    expected = {
        "llm2vec": ("bidirectional", "last"),
        "meap": ("causal", "mean"),
        "msg-only": ("bidirectional", "mean"),
    }
    assert (saved["encode_attention"], saved["pooling"]) == expected[recipe]
    records = read_metrics(result.metrics_path)
    if recipe == "llm2vec":  # MNTP alone, then SimCSE alone
        assert records[0]["mntp"] is not None and records[0]["sscl"] is None
        assert records[-1]["mntp"] is None and records[-1]["sscl"] is not None
    if recipe == "meap":
        assert all(r["mntp"] is None and r["sscl"] is None and r["msg"] is not None for r in records)


def test_paraphrase_views_are_generated_once_and_cached(tmp_path, base_dir, data_file, train_config):
    settings = dict(positives="paraphrase", max_steps=1, paraphrase_cache=str(tmp_path / "para.jsonl"))
    train(train_config(tmp_path, base_dir, data_file, **settings))
    cache = tmp_path / "para.jsonl"
    rows = [json.loads(line) for line in cache.read_text().splitlines()]
    assert {r["text"] for r in rows} == set(_CORPUS)
    stamp = cache.stat().st_mtime_ns
    train(train_config(tmp_path, base_dir, data_file, output_dir=str(tmp_path / "again"), **settings))
    assert cache.stat().st_mtime_ns == stamp  # nothing generated the second time


def test_cli_reads_a_toml_config_and_flags_override_it(tmp_path, base_dir, data_file):
    path = tmp_path / "run.toml"
    path.write_text(
        f'base_model = "{base_dir}"\ndata = ["{data_file}"]\noutput_dir = "{tmp_path / "cli"}"\n'
        "max_steps = 50\nbatch_size = 4\nmax_length = 32\nprogress = false\n"
    )
    result = CliRunner().invoke(
        cli, ["train", "--config", str(path), "--max-steps", "2", "--recipe", "msg-only"]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output.strip().splitlines()[-1])
    assert summary["steps"] == 2 and summary["losses"]["msg"] > 0
    assert json.loads((tmp_path / "cli" / "train_config.json").read_text())["recipe"] == "msg-only"
    # The adapted directory is a sentence-transformers model too, giving Magnet.encode's vectors.
    modules = json.loads((tmp_path / "cli" / "modules.json").read_text())
    assert modules[0]["type"] == "magnetsdk.integrations.sentence_transformers.MagnetModule"
    from sentence_transformers import SentenceTransformer

    from magnetsdk import Magnet

    texts = ["the cat sat", "a dog runs"]
    st = SentenceTransformer(str(tmp_path / "cli"), trust_remote_code=True, device="cpu")
    expected = Magnet.from_pretrained(tmp_path / "cli", device="cpu").encode(texts)
    assert abs(st.encode(texts) - expected).max() < 1e-5
    bad = CliRunner().invoke(cli, ["train", "--config", str(path), "--recipe", "nope"])
    assert bad.exit_code != 0 and "'nope' is not one of" in bad.output  # click.Choice lists them


def test_empty_and_tiny_data_are_rejected(tmp_path, base_dir, train_config):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n   \n")
    with pytest.raises(DataError, match="no training text"):
        train(train_config(tmp_path, base_dir, str(empty)))
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("The cat sat on the mat and looked at the door.\nA dog runs in the park.\n")
    with pytest.raises(DataError, match="fewer than one global batch of 4"):
        train(train_config(tmp_path, base_dir, str(tiny)))


def test_base_model_without_eos_is_rejected(tmp_path, data_file, train_config):
    tokenizer = tiny_tokenizer()
    tokenizer.eos_token = None
    with pytest.raises(ValueError, match="no EOS token"):
        train(train_config(tmp_path, "tiny", data_file), model=tiny_model(), tokenizer=tokenizer)


def test_non_finite_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path, data_file, train_config):
    model = tiny_model()
    calls = {"n": 0}

    def poison(module, inputs, output):
        calls["n"] += 1
        # Two decoder passes per step (LM + contrastive): from step 4 on, the hidden states are NaN.
        return output * float("nan") if calls["n"] > 6 else output

    model.get_decoder().norm.register_forward_hook(poison)  # the final norm (peft leaves it alone)
    # Two passes per step, not one fused pass: the hook counts them.
    settings = train_config(tmp_path, "tiny", data_file, max_steps=8, save_every=2, fuse_passes=False)
    with pytest.raises(NonFiniteLossError, match=r"step 4 .*example indices .*step-00000002") as error:
        train(settings, model=model, tokenizer=tiny_tokenizer())
    assert "the last good checkpoint is" in str(error.value)
    assert [c.step for c in list_checkpoints(tmp_path / "run")] == [2]
    assert not (tmp_path / "run" / "magnet_config.json").exists()  # nothing exported


def test_existing_run_needs_resume(tmp_path, base_dir, data_file, train_config):
    train(train_config(tmp_path, base_dir, data_file, max_steps=2))
    with pytest.raises(FileExistsError, match="pass --resume"):
        train(train_config(tmp_path, base_dir, data_file, max_steps=2))
    with pytest.raises(ValueError, match=r"\['seed'\] differ"):
        train(train_config(tmp_path, base_dir, data_file, max_steps=3, seed=5), resume=True)


def test_full_finetune_with_gradient_checkpointing_exports_a_full_model(
    tmp_path, base_dir, data_file, train_config
):
    result = train(
        train_config(
            tmp_path, base_dir, data_file, max_steps=2, full_finetune=True, gradient_checkpointing=True
        )
    )
    out = result.output_dir
    assert (out / "config.json").is_file() and not (out / "adapter_config.json").exists()
    magnet = Magnet.from_pretrained(str(out), device="cpu")
    assert magnet.config.training["config"]["full_finetune"] is True
    assert magnet.encode("a cat").shape == (64,)


def test_pairs_with_hard_negatives_alone_are_enough_data(tmp_path, base_dir, train_config):
    path = tmp_path / "pairs.jsonl"
    sentences = sorted(set(_CORPUS))
    shifted = sentences[1:] + sentences[:1]
    rows = [
        {"anchor": a, "positive": a.lower(), **({"negative": b} if i % 2 else {})}
        for i, (a, b) in enumerate(zip(sentences, shifted, strict=True))
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = train(
        train_config(tmp_path, base_dir, str(path), data=[], pairs=[str(path)], positives="auto", max_steps=3)
    )
    saved = json.loads((result.output_dir / "magnet_config.json").read_text())
    assert saved["training"]["config"]["positives"] == "pairs"
    assert all(r["sscl"] is not None and r["msg"] is not None for r in read_metrics(result.metrics_path))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_run_uses_bf16_autocast_and_exports(tmp_path, base_dir, data_file, train_config):
    result = train(train_config(tmp_path, base_dir, data_file, max_steps=3, device="cuda"))
    saved = json.loads((result.output_dir / "magnet_config.json").read_text())
    assert saved["training"]["config"]["mixed_precision"] == "auto"
    assert all(np.isfinite(r["loss"]) for r in read_metrics(result.metrics_path))
    assert Magnet.from_pretrained(str(result.output_dir), device="cuda").encode("a cat").shape == (64,)
