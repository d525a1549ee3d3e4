"""TrainConfig: recipe presets, file loading (TOML, YAML), overrides and validation errors."""

from __future__ import annotations

import pytest
from magnetsdk.train.config import LMAttention, PositiveSource, TrainConfig
from magnetsdk.train.recipes import RECIPES


def test_recipes_fill_unset_fields_and_explicit_values_win():
    magnet = TrainConfig(data=["a.txt"])
    assert (magnet.mntp_weight, magnet.sscl_weight, magnet.msg_weight) == (1.0, 1.0, 1.0)
    assert magnet.lm_attention is LMAttention.HYBRID
    meap = TrainConfig(data=["a.txt"], recipe="meap")
    assert meap.lm_attention is LMAttention.CAUSAL
    assert meap.input_mask_probability == 0.15 and meap.no_context_fraction == 1.0
    assert (meap.mntp_weight, meap.sscl_weight) == (0.0, 0.0)
    custom = TrainConfig(data=["a.txt"], recipe="meap", input_mask_probability=0.3)
    assert custom.input_mask_probability == 0.3


def test_every_recipe_is_a_valid_config_with_its_preset_values():
    for name, preset in RECIPES.items():
        config = TrainConfig(data=["a.txt"], recipe=name)
        assert config.recipe == name
        for key, value in preset.items():
            got = getattr(config, key)
            got = getattr(got, "value", got)  # enums compare by their stored name
            if key == "positives" and value == "auto":
                assert got != "auto", f"{name}: positives='auto' was not resolved"
                continue
            assert got == value, f"recipe {name}: {key} is {got!r}, the preset says {value!r}"


def test_llm2vec_trains_mntp_then_simcse():
    config = TrainConfig(data=["a.txt"], recipe="llm2vec", max_steps=10)
    assert config.positives is PositiveSource.DROPOUT
    assert config.lm_attention is LMAttention.BIDIRECTIONAL
    assert config.weights_at(0) == (1.0, 0.0, 0.0)
    assert config.weights_at(4) == (1.0, 0.0, 0.0)
    assert config.weights_at(5) == (0.0, 1.0, 0.0)


def test_positive_source_auto_follows_the_data():
    assert TrainConfig(data=["a.txt"]).positives is PositiveSource.PARAPHRASE
    assert TrainConfig(data=["a.txt"], pairs=["p.jsonl"]).positives is PositiveSource.PAIRS
    # Dropout positives need dropout noise; given pairs and paraphrases do not.
    assert TrainConfig(data=["a.txt"], positives="dropout").attention_dropout == 0.1
    assert TrainConfig(data=["a.txt"]).attention_dropout == 0.0
    assert TrainConfig(data=["a.txt"], pairs=["p.jsonl"]).attention_dropout == 0.0


def test_toml_file_then_overrides(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('recipe = "msg-only"\ndata = ["x.txt"]\nmax_steps = 7\nlearning_rate = 1e-3\n')
    config = TrainConfig.load(path, {"max_steps": 9, "seed": None})
    assert config.recipe == "msg-only" and config.data == ["x.txt"]
    assert config.max_steps == 9  # the flag wins
    assert config.learning_rate == 1e-3
    assert config.seed == 0  # None overrides are "not given"


def test_yaml_file(tmp_path):
    pytest.importorskip("yaml")
    path = tmp_path / "run.yaml"
    path.write_text("data: [x.txt]\nbatch_size: 3\n")
    assert TrainConfig.load(path).batch_size == 3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"recipe": "bert"}, "recipe='bert' is not one of"),
        ({"mntp_probability": 1.5}, "mntp_probability=1.5 must be between 0 and 1"),
        ({"lm_attention": "sideways"}, "lm_attention='sideways' is not one of"),
        ({"mntp_weight": 0, "sscl_weight": 0, "msg_weight": 0}, "all objective weights are 0"),
        ({"batch_size": 0}, "batch_size=0 must be at least 1"),
        ({"batch_size": 1}, "in-batch negatives"),
        ({"max_length": 4}, "max_length=4 is too small"),
        ({"positives": "pairs"}, "needs pair files"),
        ({"lm_attention": "bidirectional"}, "bidirectional. lets spans see"),
        ({"lm_attention": "causal", "recipe": "mntp-only"}, "MNTP needs a bidirectional"),
        ({"infill_layout": "sideways"}, "infill layout 'sideways' is not one of"),
        ({"infill_layout": "spm", "msg_mask_fraction": 0.5}, "cannot be MNTP-masked too"),
        ({"infill_layout": "magnet", "context_loss": True}, "context_loss needs a causal"),
        ({"span_sentence_share": 0.9}, "must be >= 0 and sum to 1"),
        ({"span_unit": "letter"}, "span_unit='letter' is not one of"),
        ({"mntp_fraction": 2.0}, "mntp_fraction=2.0 must be between 0 and 1"),
    ],
)
def test_bad_settings_name_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(data=["a.txt"], **kwargs)


def test_no_data_and_unknown_keys(tmp_path):
    with pytest.raises(ValueError, match="no training data"):
        TrainConfig()
    path = tmp_path / "run.toml"
    path.write_text('data = ["x.txt"]\nlearning_rat = 1.0\n')
    with pytest.raises(ValueError, match=r"unknown keys \['learning_rat'\]"):
        TrainConfig.load(path)
    with pytest.raises(ValueError, match="must end in .toml"):
        bad = tmp_path / "run.ini"
        bad.write_text("x")
        TrainConfig.load(bad)


def test_to_dict_round_trips():
    config = TrainConfig(data=["a.txt"], recipe="llm2vec", max_steps=3)
    again = TrainConfig.from_dict(config.to_dict())
    assert again == config


def test_the_cli_builds_its_train_flags_without_importing_torch():
    import subprocess
    import sys

    code = "import sys, magnetsdk.cli.train; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_auto_precision_is_bf16_only_where_bf16_is_native():
    from magnetsdk.train.config import MixedPrecision
    from magnetsdk.train.startup import pick_mixed_precision

    auto, no, bf16 = MixedPrecision.AUTO, MixedPrecision.NO, MixedPrecision.BF16
    assert pick_mixed_precision(auto, use_cpu=False, native_bf16=False) is bf16  # a GPU
    assert pick_mixed_precision(auto, use_cpu=True, native_bf16=True) is bf16  # AVX512-BF16 / AMX
    assert pick_mixed_precision(auto, use_cpu=True, native_bf16=False) is no  # emulated bf16: fp32
    assert pick_mixed_precision(no, use_cpu=False, native_bf16=False) is no  # explicit wins
    with pytest.warns(UserWarning, match="without native bf16.*'auto'"):
        assert pick_mixed_precision(bf16, use_cpu=True, native_bf16=False) is bf16


def test_one_process_can_train_in_fp32_after_bf16():
    from accelerate import Accelerator
    from magnetsdk.train.config import MixedPrecision
    from magnetsdk.train.startup import forget_other_precision

    forget_other_precision(MixedPrecision.BF16)  # whatever an earlier test's run left
    Accelerator(cpu=True, mixed_precision="bf16")
    forget_other_precision(MixedPrecision.BF16)  # the same precision: the state is kept
    assert Accelerator(cpu=True).mixed_precision == "bf16"  # a fresh state would be "no"
    forget_other_precision(MixedPrecision.NO)
    assert Accelerator(cpu=True, mixed_precision="no").mixed_precision == "no"
