"""Reused layout tokens: their embedding rows stay the base's by default and train under ``train_layout_tokens``."""

from __future__ import annotations

import json

import pytest
import torch
from magnetsdk.train.trainer import train
from safetensors.torch import load_file

from magnetsdk import Magnet
from magnetsdk.layout import RESERVED_CANDIDATES
from magnetsdk.testing import tiny_model, tiny_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

# SmolLM2's reserved tokens, which the layout reuses (the last candidate of each role).
RESERVED = {role: candidates[-1] for role, candidates in RESERVED_CANDIDATES.items()}


@pytest.fixture(scope="module")
def reserved_base(tmp_path_factory):
    """A tiny base whose tokenizer already holds the reserved tokens, all four with one shared row, as in SmolLM2."""
    directory = tmp_path_factory.mktemp("reserved-base")
    tokenizer = tiny_tokenizer()
    tokenizer.add_special_tokens(
        {"additional_special_tokens": list(RESERVED.values())}, replace_extra_special_tokens=False
    )
    model = tiny_model()
    ids = [tokenizer.convert_tokens_to_ids(t) for t in RESERVED.values()]
    assert max(ids) < model.get_input_embeddings().weight.shape[0]
    with torch.no_grad():
        rows = model.get_input_embeddings().weight
        rows[ids] = rows[ids[0]].clone()
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return str(directory)


def _layout_rows(magnet: Magnet) -> torch.Tensor:
    ids = list(magnet.layout.ids().values())  # mask, gap, span, end
    return magnet.model.get_input_embeddings().weight[ids].detach().clone()


def test_reused_layout_tokens_keep_the_base_rows_unless_asked(
    tmp_path, reserved_base, data_file, train_config
):
    base = Magnet.from_pretrained(reserved_base, device="cpu")
    assert base.layout.strings() == RESERVED  # reused, nothing added
    before = _layout_rows(base)

    kept = train(train_config(tmp_path / "kept", reserved_base, data_file, lora_r=4, lora_alpha=8))
    assert torch.equal(_layout_rows(Magnet.from_pretrained(str(kept.output_dir), device="cpu")), before)

    trained = train(
        train_config(
            tmp_path / "trained", reserved_base, data_file, lora_r=4, lora_alpha=8, train_layout_tokens=True
        )
    )
    saved = json.loads((trained.output_dir / "adapter_config.json").read_text())
    assert sorted(saved["trainable_token_indices"]) == sorted(
        base.tokenizer.convert_tokens_to_ids(t) for t in RESERVED.values()
    )
    magnet = Magnet.from_pretrained(str(trained.output_dir), device="cpu")
    after = _layout_rows(magnet)
    assert not torch.allclose(after, before)
    # The four roles no longer share one row; the LM head (tied) reads the same trained rows.
    assert all(not torch.allclose(after[i], after[j]) for i in range(4) for j in range(i + 1, 4))
    assert torch.equal(magnet.model.get_output_embeddings().weight[magnet.layout.end_id], after[3])
    # Every other row is the base's.
    other = base.tokenizer.convert_tokens_to_ids("the")
    assert torch.equal(
        magnet.model.get_input_embeddings().weight[other], base.model.get_input_embeddings().weight[other]
    )


def test_an_adapter_without_token_rows_starts_a_run_that_trains_them(
    tmp_path, reserved_base, data_file, train_config
):
    first = train(train_config(tmp_path / "first", reserved_base, data_file, lora_r=4, lora_alpha=8))
    second = train(
        train_config(
            tmp_path / "second",
            reserved_base,
            data_file,
            lora_r=4,
            lora_alpha=8,
            init_adapter=str(first.output_dir),
            train_layout_tokens=True,
        )
    )
    record = json.loads((second.output_dir / "magnet_config.json").read_text())["training"]
    assert record["init_adapter"]["path"] == str(first.output_dir)
    base = Magnet.from_pretrained(reserved_base, device="cpu")
    assert not torch.allclose(
        _layout_rows(Magnet.from_pretrained(str(second.output_dir), device="cpu")), _layout_rows(base)
    )


def test_end_row_from_eos_refuses_to_overwrite_an_adapter_s_trained_end_row(
    tmp_path, reserved_base, data_file, train_config
):
    rows = {"lora_r": 4, "lora_alpha": 8, "train_layout_tokens": True, "train_layout_roles": ["end"]}
    first = train(train_config(tmp_path / "first", reserved_base, data_file, end_row_from_eos=True, **rows))
    start = {"init_adapter": str(first.output_dir), **rows}
    with pytest.raises(ValueError, match="holds trained layout-token rows.*drop end_row_from_eos"):
        train(train_config(tmp_path / "copy", reserved_base, data_file, end_row_from_eos=True, **start))
    # Without the copy the run continues from the adapter's END row.
    second = train(train_config(tmp_path / "second", reserved_base, data_file, **start))
    assert json.loads((second.output_dir / "magnet_config.json").read_text())["training"]["init_adapter"]


def test_train_layout_tokens_with_a_full_finetune_says_what_to_change(
    tmp_path, reserved_base, data_file, train_config
):
    with pytest.raises(ValueError, match="train_layout_tokens.*full fine-tune"):
        train_config(tmp_path, reserved_base, data_file, full_finetune=True, train_layout_tokens=True)


def test_layout_token_lr_moves_the_rows_further_than_lora_s_rate(
    tmp_path, reserved_base, data_file, train_config
):
    base = _layout_rows(Magnet.from_pretrained(reserved_base, device="cpu"))
    moved = {}
    for name, token_lr in (("shared", None), ("faster", 1e-2)):
        run = train(
            train_config(
                tmp_path / name,
                reserved_base,
                data_file,
                lora_r=4,
                lora_alpha=8,
                learning_rate=1e-4,
                train_layout_tokens=True,
                layout_token_lr=token_lr,
            )
        )
        rows = _layout_rows(Magnet.from_pretrained(str(run.output_dir), device="cpu"))
        moved[name] = (rows - base).abs().max().item()
    # Adam moves a weight by about its learning rate per step: the rows at 1e-2 go ~100x further.
    assert moved["faster"] > 20 * moved["shared"] > 0


def test_layout_token_lr_zero_keeps_the_rows_while_lora_trains(
    tmp_path, reserved_base, data_file, train_config
):
    base = _layout_rows(Magnet.from_pretrained(reserved_base, device="cpu"))
    config = train_config(
        tmp_path,
        reserved_base,
        data_file,
        lora_r=4,
        lora_alpha=8,
        train_layout_tokens=True,
        layout_token_lr=0.0,
    )
    run = train(config)
    assert torch.equal(_layout_rows(Magnet.from_pretrained(str(run.output_dir), device="cpu")), base)
    weights = load_file(run.output_dir / "adapter_model.safetensors")
    assert any("lora_B" in name and tensor.abs().sum() > 0 for name, tensor in weights.items())


def test_layout_token_lr_without_trained_rows_says_what_to_add(
    tmp_path, reserved_base, data_file, train_config
):
    with pytest.raises(ValueError, match="layout_token_lr is set.*--train-layout-tokens"):
        train(train_config(tmp_path, reserved_base, data_file, lora_r=4, lora_alpha=8, layout_token_lr=1e-3))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"layout_token_lr": -1e-3}, "must be >= 0"),
        ({"layout_token_lr": 1e-3, "full_finetune": True}, "full fine-tune"),
    ],
)
def test_layout_token_lr_settings_that_cannot_work(
    tmp_path, reserved_base, data_file, train_config, overrides, message
):
    with pytest.raises(ValueError, match=f"layout_token_lr.*{message}|{message}"):
        train_config(tmp_path, reserved_base, data_file, **overrides)


def test_end_token_chooses_the_token_that_closes_spans_and_is_stored(
    tmp_path, reserved_base, data_file, train_config
):
    tokenizer = tiny_tokenizer()
    other = tokenizer.convert_ids_to_tokens(5)  # an ordinary token of the base, not a reserved one
    run = train(
        train_config(tmp_path / "end", reserved_base, data_file, lora_r=4, lora_alpha=8, end_token=other)
    )
    magnet = Magnet.from_pretrained(str(run.output_dir), device="cpu")
    assert magnet.layout.end == other and magnet.layout.end_id == 5
    assert {k: v for k, v in magnet.layout.strings().items() if k != "end"} == {
        k: v for k, v in RESERVED.items() if k != "end"
    }
    stored = json.loads((run.output_dir / "magnet_config.json").read_text())["layout_tokens"]
    assert stored["end"] == other


@pytest.mark.parametrize("token", ["eos", "gap"])
def test_end_token_may_be_neither_eos_nor_another_role(
    tmp_path, reserved_base, data_file, train_config, token
):
    tokenizer = tiny_tokenizer()
    end = tokenizer.eos_token if token == "eos" else RESERVED["gap"]
    message = "is the tokenizer's EOS" if token == "eos" else "four different tokens"
    with pytest.raises(ValueError, match=message):
        train(train_config(tmp_path / token, reserved_base, data_file, lora_r=4, lora_alpha=8, end_token=end))


def test_a_blank_end_token_is_refused(tmp_path, reserved_base, data_file, train_config):
    with pytest.raises(ValueError, match="end_token=' ' is blank"):
        train_config(tmp_path / "blank", reserved_base, data_file, end_token=" ")


def _end_and_eos_rows(directory) -> tuple[torch.Tensor, torch.Tensor]:
    magnet = Magnet.from_pretrained(str(directory), device="cpu")
    rows = magnet.model.get_input_embeddings().weight
    return rows[magnet.layout.end_id].detach(), rows[magnet.tokenizer.eos_token_id].detach()


def test_end_row_from_eos_starts_end_on_eos_s_row(tmp_path, reserved_base, data_file, train_config):
    """END's row starts as EOS's and trains from there: after 4 steps at 1e-3 it is within a few
    Adam steps of EOS's row, while a run without the copy leaves it near its own (the reserved) row."""
    moved = {}
    for name, copy in (("copied", True), ("own", False)):
        run = train(
            train_config(
                tmp_path / name,
                reserved_base,
                data_file,
                lora_r=4,
                lora_alpha=8,
                train_layout_tokens=True,
                layout_token_lr=1e-3,
                end_row_from_eos=copy,
            )
        )
        end, eos = _end_and_eos_rows(run.output_dir)
        moved[name] = (end - eos).abs().max().item()
        assert json.loads((run.output_dir / "train_config.json").read_text())["end_row_from_eos"] is copy
    # Adam moves a weight by about its rate per step: 4 steps at 1e-3 leave END within ~4e-3 of EOS.
    assert 0 < moved["copied"] < 1e-2 < moved["own"]


def test_end_row_from_eos_without_a_trained_end_row_says_what_to_add(
    tmp_path, reserved_base, data_file, train_config
):
    with pytest.raises(ValueError, match="does not train in this run.*--train-layout-tokens"):
        train(train_config(tmp_path, reserved_base, data_file, lora_r=4, lora_alpha=8, end_row_from_eos=True))
    with pytest.raises(ValueError, match="end_row_from_eos.*full fine-tune"):
        train_config(tmp_path, reserved_base, data_file, full_finetune=True, end_row_from_eos=True)


def test_train_layout_roles_trains_only_the_rows_named(tmp_path, reserved_base, data_file, train_config):
    """With ["end"], END's row parts from EOS's while mask, gap and span keep the base's rows."""
    base = _layout_rows(Magnet.from_pretrained(reserved_base, device="cpu"))
    run = train(
        train_config(
            tmp_path / "end-only",
            reserved_base,
            data_file,
            lora_r=4,
            lora_alpha=8,
            train_layout_tokens=True,
            train_layout_roles=["end"],
            layout_token_lr=1e-2,
            end_row_from_eos=True,
        )
    )
    magnet = Magnet.from_pretrained(str(run.output_dir), device="cpu")
    saved = json.loads((run.output_dir / "adapter_config.json").read_text())
    assert saved["trainable_token_indices"] == [magnet.layout.end_id]
    rows = _layout_rows(magnet)
    assert torch.equal(rows[:3], base[:3])  # mask, gap, span
    assert not torch.allclose(rows[3], base[3])
    assert json.loads((run.output_dir / "train_config.json").read_text())["train_layout_roles"] == ["end"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"train_layout_tokens": True, "train_layout_roles": ["stop"]}, r"\['stop'\] is not a layout role"),
        ({"train_layout_roles": ["end"]}, "train_layout_tokens is off.*--train-layout-tokens"),
    ],
)
def test_train_layout_roles_that_cannot_work(
    tmp_path, reserved_base, data_file, train_config, overrides, message
):
    with pytest.raises(ValueError, match=message):
        train_config(tmp_path, reserved_base, data_file, **overrides)


def _lora_weights(run) -> dict[str, torch.Tensor]:
    weights = load_file(run.output_dir / "adapter_model.safetensors")
    return {name: tensor for name, tensor in weights.items() if "lora_" in name}


def test_the_gap_row_trains_alone_while_lora_and_an_adapter_s_end_row_are_held(
    tmp_path, reserved_base, data_file, train_config
):
    """freeze_lora with train_layout_roles=["gap"] from an adapter that trained END: only GAP moves."""
    small = {"lora_r": 4, "lora_alpha": 8, "train_layout_tokens": True, "layout_token_lr": 1e-2}
    first = train(
        train_config(
            tmp_path / "first",
            reserved_base,
            data_file,
            train_layout_roles=["end"],
            end_row_from_eos=True,
            **small,
        )
    )
    second = train(
        train_config(
            tmp_path / "gap",
            reserved_base,
            data_file,
            init_adapter=str(first.output_dir),
            train_layout_roles=["gap"],
            freeze_lora=True,
            **small,
        )
    )
    magnet = Magnet.from_pretrained(str(second.output_dir), device="cpu")
    saved = json.loads((second.output_dir / "adapter_config.json").read_text())
    assert saved["trainable_token_indices"] == sorted([magnet.layout.end_id, magnet.layout.gap_id])
    base = _layout_rows(Magnet.from_pretrained(reserved_base, device="cpu"))
    before = _layout_rows(Magnet.from_pretrained(str(first.output_dir), device="cpu"))
    after = _layout_rows(magnet)  # mask, gap, span, end
    assert torch.equal(after[3], before[3])  # END: the adapter's row, held
    assert not torch.allclose(after[3], base[3])
    assert not torch.allclose(after[1], before[1])  # GAP moved
    assert torch.equal(after[[0, 2]], base[[0, 2]])  # mask and span keep the base's rows
    lora_before, lora_after = _lora_weights(first), _lora_weights(second)
    assert lora_before.keys() == lora_after.keys()
    assert all(torch.equal(lora_before[name], lora_after[name]) for name in lora_before)


def test_a_run_that_trains_no_rows_keeps_an_adapter_s_rows(tmp_path, reserved_base, data_file, train_config):
    rows = {"lora_r": 4, "lora_alpha": 8}
    first = train(
        train_config(
            tmp_path / "first",
            reserved_base,
            data_file,
            train_layout_tokens=True,
            train_layout_roles=["end"],
            layout_token_lr=1e-2,
            end_row_from_eos=True,
            **rows,
        )
    )
    second = train(
        train_config(
            tmp_path / "second", reserved_base, data_file, init_adapter=str(first.output_dir), **rows
        )
    )
    magnet = Magnet.from_pretrained(str(second.output_dir), device="cpu")
    saved = json.loads((second.output_dir / "adapter_config.json").read_text())
    assert saved["trainable_token_indices"] == [magnet.layout.end_id]
    before = _layout_rows(Magnet.from_pretrained(str(first.output_dir), device="cpu"))
    assert torch.equal(_layout_rows(magnet), before)
    lora_before, lora_after = _lora_weights(first), _lora_weights(second)
    assert any(not torch.equal(lora_before[name], lora_after[name]) for name in lora_before)  # LoRA trained


def test_freeze_lora_with_nothing_else_to_train_says_what_to_add(
    tmp_path, reserved_base, data_file, train_config
):
    small = {"lora_r": 4, "lora_alpha": 8}
    with pytest.raises(ValueError, match="freeze_lora holds LoRA.*--train-layout-tokens"):
        train(train_config(tmp_path / "fresh", reserved_base, data_file, freeze_lora=True, **small))
    # An init adapter's END row is held unless named, so it trains nothing either.
    rows = {"train_layout_tokens": True, "train_layout_roles": ["end"], "end_row_from_eos": True}
    first = train(train_config(tmp_path / "first", reserved_base, data_file, **rows, **small))
    start = {"init_adapter": str(first.output_dir), "freeze_lora": True}
    with pytest.raises(ValueError, match="freeze_lora holds LoRA.*held unless named"):
        train(train_config(tmp_path / "held", reserved_base, data_file, **start, **small))
    with pytest.raises(ValueError, match="freeze_lora.*full fine-tune"):
        train_config(tmp_path, reserved_base, data_file, full_finetune=True, freeze_lora=True)
