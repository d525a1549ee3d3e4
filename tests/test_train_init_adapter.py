"""A run that starts from an exported adapter's LoRA weights (``init_adapter``) instead of a fresh LoRA."""

from __future__ import annotations

import json

import pytest
import torch
from magnetsdk.train.trainer import train
from safetensors.torch import load_file

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def first_run(tmp_path_factory, base_dir, data_file, train_config):
    """A 4-step run with a non-zero adapter (LoRA's B starts at zero; training moves it)."""
    tmp = tmp_path_factory.mktemp("first")
    train(train_config(tmp, base_dir, data_file, lora_r=4, lora_alpha=8))
    return tmp / "run"


def _lora(directory) -> dict[str, torch.Tensor]:
    return load_file(directory / "adapter_model.safetensors")


def test_a_run_starts_from_the_adapter_and_records_it(tmp_path, base_dir, data_file, first_run, train_config):
    start = _lora(first_run)
    assert any(v.abs().sum() > 0 for k, v in start.items() if "lora_B" in k)
    # A learning rate of 1e-9: Adam moves each weight by about that, so the exported weights are
    # the ones the run started from.
    config = train_config(
        tmp_path,
        base_dir,
        data_file,
        lora_r=4,
        lora_alpha=8,
        init_adapter=str(first_run),
        learning_rate=1e-9,
        max_steps=1,
    )
    train(config)
    exported = _lora(tmp_path / "run")
    assert exported.keys() == start.keys()
    for name, weight in start.items():
        torch.testing.assert_close(exported[name], weight, rtol=0, atol=1e-7)
    record = json.loads((tmp_path / "run" / "magnet_config.json").read_text())["training"]["init_adapter"]
    assert record["path"] == str(first_run)
    assert len(record["sha256"]) == 64


def test_a_fresh_run_differs_from_one_that_starts_from_the_adapter(
    tmp_path, base_dir, data_file, first_run, train_config
):
    # The same run without init_adapter: LoRA's B starts at zero and stays within 1e-9 of it.
    train(
        train_config(tmp_path, base_dir, data_file, lora_r=4, lora_alpha=8, learning_rate=1e-9, max_steps=1)
    )
    fresh = _lora(tmp_path / "run")
    assert all(v.abs().max() < 1e-7 for k, v in fresh.items() if "lora_B" in k)
    assert (
        json.loads((tmp_path / "run" / "magnet_config.json").read_text())["training"]["init_adapter"] is None
    )


def test_an_adapter_of_another_rank_is_rejected_with_the_setting_named(
    tmp_path, base_dir, data_file, first_run, train_config
):
    config = train_config(tmp_path, base_dir, data_file, lora_r=8, lora_alpha=8, init_adapter=str(first_run))
    with pytest.raises(ValueError, match=r"r 4 \(this run: 8\): set lora_r"):
        train(config)


def test_a_directory_without_an_adapter_is_rejected(tmp_path, base_dir, data_file, train_config):
    config = train_config(tmp_path, base_dir, data_file, init_adapter=base_dir)
    with pytest.raises(ValueError, match="holds no LoRA adapter"):
        train(config)


def test_an_adapter_on_another_base_is_rejected(tmp_path, base_dir, data_file, first_run, train_config):
    other = tmp_path / "other-base"
    from transformers import AutoModelForCausalLM, AutoTokenizer

    AutoModelForCausalLM.from_pretrained(base_dir).save_pretrained(other)
    AutoTokenizer.from_pretrained(base_dir).save_pretrained(other)
    config = train_config(
        tmp_path, str(other), data_file, lora_r=4, lora_alpha=8, init_adapter=str(first_run)
    )
    with pytest.raises(ValueError, match="set base_model to the adapter's base"):
        train(config)


def test_init_adapter_with_a_full_finetune_is_a_config_error(tmp_path, base_dir, data_file, train_config):
    with pytest.raises(ValueError, match="a full fine-tune has no adapter"):
        train_config(tmp_path, base_dir, data_file, init_adapter="default", full_finetune=True)
