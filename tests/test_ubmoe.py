"""UBMoE-LLM on tiny models: FFN-only stage 1, the two-expert mixture, gate training, save/load, errors."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from click.testing import CliRunner
from magnetsdk.cli.main import cli
from magnetsdk.train.config import TrainConfig
from magnetsdk.train.trainer import train
from magnetsdk.train.ubmoe import UBMoEConfig, load_mixture_for_training, mixture_losses

from magnetsdk import Magnet
from magnetsdk.attention import AttentionMode
from magnetsdk.config import CONFIG_NAME, MagnetConfig, Pooling
from magnetsdk.encoding import pad_batch
from magnetsdk.eval.dependence import evaluate_dependence
from magnetsdk.experts import (
    GATES_FILE,
    MixtureError,
    TwoExpertFFN,
    balance_loss,
    force_expert,
    mixture_modules,
    save_mixture,
)
from magnetsdk.testing import _CORPUS

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = sorted(set(_CORPUS))


@pytest.fixture(scope="module")
def stage1(tmp_path_factory, base_dir, data_file):
    """A stage-1 directory: 4 steps of bidirectional SSCL with LoRA on the FFN only."""
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("stage1")
    config = TrainConfig(
        base_model=base_dir,
        recipe="ubmoe-ffn",
        data=[data_file],
        output_dir=str(out),
        max_steps=4,
        batch_size=4,
        sscl_max_length=48,
        warmup_steps=0,
        learning_rate=5e-2,
        lora_r=4,
        save_every=100,
        progress=False,
        positives="dropout",
    )
    train(config)
    return out


@pytest.fixture(scope="module")
def mixture(tmp_path_factory, stage1, data_file):
    """Stage 2 through the CLI: 12 gate steps, and the printed summary."""
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("mixture")
    result = CliRunner().invoke(
        cli,
        ["ubmoe", "--bi-model", str(stage1), "--data", data_file, "--output-dir", str(out)]
        + ["--max-steps", "12", "--batch-size", "8", "--max-length", "32", "--learning-rate", "0.05"]
        + ["--warmup-steps", "0", "--threads", "1", "--device", "cpu"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    return out, json.loads(result.stdout.strip().splitlines()[-1])


def logits(magnet: Magnet, texts: list[str]) -> torch.Tensor:
    rows = [magnet.tokenizer(t)["input_ids"] for t in texts]
    ids, valid = pad_batch(rows, magnet.pad_id, magnet.device)
    with torch.no_grad():
        return magnet.model(input_ids=ids, attention_mask=valid.long()).logits


def test_the_recipe_adapts_only_the_ffn_projections(stage1):
    adapter = json.loads((stage1 / "adapter_config.json").read_text())
    assert set(adapter["target_modules"]) == {"gate_proj", "up_proj", "down_proj"}
    from safetensors.torch import load_file

    lora = [k for k in load_file(str(stage1 / "adapter_model.safetensors")) if "lora_" in k]
    assert lora and all(".mlp." in k for k in lora)
    config = MagnetConfig.load(stage1)
    assert config.encode_attention is AttentionMode.BIDIRECTIONAL and config.pooling is Pooling.LAST
    assert TrainConfig(data=["a.txt"]).lora_target_modules == "all-linear"  # other recipes unchanged


def test_forced_experts_are_exactly_the_base_and_the_stage1_models(mixture, stage1, base_dir):
    out, _ = mixture
    mixed = Magnet.from_pretrained(str(out), device="cpu")
    assert len(mixture_modules(mixed.model)) == mixed.model.config.num_hidden_layers
    base = Magnet.from_pretrained(base_dir, device="cpu")
    tuned = Magnet.from_pretrained(str(stage1), device="cpu")
    with force_expert(mixed.model, 0):
        zero = logits(mixed, TEXTS[:3])
    with force_expert(mixed.model, 1):
        one = logits(mixed, TEXTS[:3])
    assert torch.equal(zero, logits(base, TEXTS[:3]))
    assert torch.equal(one, logits(tuned, TEXTS[:3]))
    assert not torch.allclose(zero, one, atol=1e-3)  # stage 1 did change the FFNs
    gated = logits(mixed, TEXTS[:3])  # the trained gates mix both
    assert not torch.allclose(gated, zero, atol=1e-4) and not torch.allclose(gated, one, atol=1e-4)


def test_gate_training_lowers_the_loss_and_trains_only_the_gates(mixture, stage1, data_file):
    out, summary = mixture
    config = UBMoEConfig(bi_model=str(stage1), data=[data_file], output_dir=str(out / "unused"))
    fresh, tokenizer, _ = load_mixture_for_training(config, torch.device("cpu"))
    trainable = [n for n, p in fresh.named_parameters() if p.requires_grad]
    assert trainable and all(".gate." in n for n in trainable)
    assert len(trainable) == 2 * fresh.config.num_hidden_layers  # weight and bias per layer

    trained = Magnet.from_pretrained(str(out), device="cpu")
    rows = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in TEXTS]
    ids, valid = pad_batch(rows, tokenizer.pad_token_id, torch.device("cpu"))
    with torch.no_grad():
        before, _, _ = mixture_losses(fresh, ids, valid, 0.01)
        after, _, shares = mixture_losses(trained.model, ids, valid, 0.01)
    assert float(after) < float(before) - 1e-3, (float(before), float(after))
    assert summary["losses"]["ce"] < summary["first_losses"]["ce"]
    # Everything but the gates is the same in the trained and the fresh mixture.
    fresh_params = dict(fresh.named_parameters())
    for name, parameter in trained.model.named_parameters():
        if ".gate." not in name:
            assert torch.equal(parameter, fresh_params[name]), name
    assert any(
        not torch.equal(p, fresh_params[n]) for n, p in trained.model.named_parameters() if ".gate." in n
    )
    assert all(0.0 < s < 1.0 for s in shares)


def test_balance_loss_matches_a_hand_computation():
    probs = torch.tensor([[[0.9, 0.1], [0.6, 0.4], [0.2, 0.8], [0.5, 0.5]]])  # (1, 4, 2)
    valid = torch.tensor([[True, True, True, False]])
    # Valid tokens: top experts 0, 0, 1 -> f = (2/3, 1/3); mean probabilities P = (1.7/3, 1.3/3).
    expected = 2 * (2 / 3 * 1.7 / 3 + 1 / 3 * 1.3 / 3)
    assert float(balance_loss(probs, valid)) == pytest.approx(expected, abs=1e-6)
    uniform = torch.tensor([[[0.5, 0.5], [0.5, 0.5]]])
    assert float(balance_loss(uniform)) == pytest.approx(1.0)
    # The gradient reaches the probabilities (f carries none).
    probs.requires_grad_(True)
    balance_loss(probs, valid).backward()
    assert probs.grad is not None and probs.grad.abs().sum() > 0


def test_save_and_from_pretrained_round_trip_and_all_surfaces_work(tmp_path, stage1, data_file, base_dir):
    config = UBMoEConfig(bi_model=str(stage1), data=[data_file], output_dir=str(tmp_path))
    model, tokenizer, _ = load_mixture_for_training(config, torch.device("cpu"))
    torch.manual_seed(1)
    with torch.no_grad():
        for module in mixture_modules(model):
            module.gate.weight.normal_(0, 0.5)
            module.gate.bias.normal_(0, 0.5)
    out = save_mixture(model, tokenizer, tmp_path / "mix", stage1, {"note": "test"})
    saved = MagnetConfig.load(out)
    assert saved.mixture["kind"] == "ubmoe" and saved.training["ubmoe"] == {"note": "test"}
    # Small on disk: the gates and the FFN LoRA, not a copy of the model.
    assert (out / GATES_FILE).stat().st_size < 10_000
    assert (out / GATES_FILE).stat().st_mode & 0o044  # not owner-only, like the other model files
    assert not (out / "model.safetensors").exists()

    loaded = Magnet.from_pretrained(str(out), device="cpu")
    in_memory = Magnet(model, tokenizer, saved, name="in-memory")
    assert torch.equal(logits(loaded, TEXTS[:4]), logits(in_memory, TEXTS[:4]))
    assert loaded.config.encode_attention is AttentionMode.BIDIRECTIONAL
    assert loaded.config.pooling is Pooling.LAST

    vectors = loaded.encode(TEXTS[:3])
    assert vectors.shape == (3, loaded.dimension)
    assert loaded.generate("The cat", max_new_tokens=4, temperature=0.0)
    assert loaded.infill("The cat [GAP] the mat.", max_new_tokens=3, temperature=0.0) is not None

    base = Magnet.from_pretrained(base_dir, device="cpu")
    tuned = Magnet.from_pretrained(str(stage1), device="cpu")
    ids = {loaded.identity, base.identity, tuned.identity}
    assert len(ids) == 3 and loaded.identity.adapter_sha256
    # Magnet.save would write merged weights, which cannot hold two experts: it refuses.
    with pytest.raises(ValueError, match="magnet ubmoe"):
        loaded.save(tmp_path / "merged")
    assert not (tmp_path / "merged").exists()


def test_attention_dependence_runs_on_a_mixture(mixture, tmp_path):
    out, _ = mixture
    mixed = Magnet.from_pretrained(str(out), device="cpu")
    path = tmp_path / "texts.txt"
    path.write_text("\n".join(TEXTS[:3]) + "\n", encoding="utf-8")
    result = evaluate_dependence(mixed, path, min_tokens=4, batch_size=2, show_progress=False)
    assert result.figures["bidirectional.after"] > 0.0
    assert isinstance(mixed.model.get_decoder().layers[0].mlp, TwoExpertFFN)


def test_an_adapter_outside_the_ffn_is_refused(tmp_path, stage1, data_file):
    bad = tmp_path / "all-linear"
    shutil.copytree(stage1, bad)
    adapter = json.loads((bad / "adapter_config.json").read_text())
    adapter["target_modules"] = ["q_proj", "gate_proj"]
    (bad / "adapter_config.json").write_text(json.dumps(adapter))
    config = UBMoEConfig(bi_model=str(bad), data=[data_file], output_dir=str(tmp_path / "out"))
    with pytest.raises(MixtureError, match=r"\['q_proj'\].*ubmoe-ffn"):
        load_mixture_for_training(config, torch.device("cpu"))


def test_bad_stage1_directories_and_incomplete_mixtures_fail_clearly(tmp_path, mixture, base_dir, data_file):
    with pytest.raises(MixtureError, match="not a stage-1 adapter directory"):
        UBMoEConfig(bi_model=base_dir, data=[data_file])
    with pytest.raises(ValueError, match="no training text"):
        UBMoEConfig(bi_model=base_dir, data=[])
    out, _ = mixture
    broken = tmp_path / "broken"
    shutil.copytree(out, broken)
    (broken / GATES_FILE).unlink()
    with pytest.raises(MixtureError, match=f"{GATES_FILE} is missing"):
        Magnet.from_pretrained(str(broken), device="cpu")
    changed = tmp_path / "changed"
    shutil.copytree(out, changed)
    weights = changed / "bidirectional" / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8] + b"\0" * 8)
    with pytest.raises(MixtureError, match="does not match the hash"):
        Magnet.from_pretrained(str(changed), device="cpu")
    result = CliRunner().invoke(cli, ["ubmoe", "--bi-model", base_dir, "--data", data_file])
    assert result.exit_code != 0 and "not a stage-1 adapter directory" in result.output


def test_a_version_1_config_reads_as_no_mixture(tmp_path):
    data = MagnetConfig(base_model="x").to_dict()
    data.pop("mixture")
    data.pop("infill_layout")
    data["format_version"] = 1
    (tmp_path / CONFIG_NAME).write_text(json.dumps(data))
    config = MagnetConfig.load(tmp_path)
    assert config.mixture == {} and config.format_version == 3
    assert config.infill_layout == "magnet"  # the one layout models of that version were trained with
