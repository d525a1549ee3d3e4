"""kl_weight: the next-token rows also take KL(adapted || base), the base being the adapter switched off."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from magnetsdk.train.adaptation import make_trainable
from magnetsdk.train.collate import LMSettings
from magnetsdk.train.config import TrainConfig
from magnetsdk.train.objectives import MagnetObjectives
from magnetsdk.train.trainer import train

from magnetsdk.testing import _CORPUS, tiny_model, tiny_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

WEIGHTS = (1.0, 0.0, 1.0)  # MNTP and MSG; no views


def lora_model(perturb: bool):
    torch.manual_seed(0)
    trained = make_trainable(tiny_model(), TrainConfig(data=["unused"], lora_r=4, lora_dropout=0.0), [])
    if perturb:  # LoRA starts as the identity (B = 0); move it so the adapted model differs
        with torch.no_grad():
            for name, p in trained.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.05)
    return trained


def plain_and_context_rows(tokenizer, lm_batch):
    settings = LMSettings(
        True, True, 0.2, 0.2, 3, 0.5, 0.0, layout="spm", mntp_fraction=0.3, msg_mask_fraction=0.0
    )
    lm = lm_batch(tokenizer, settings, sorted(set(_CORPUS))[:8], seed=3)
    plain = (lm.is_span | ~lm.valid).all(dim=1)
    assert 0 < int(plain.sum()) < len(plain), "the batch needs next-token rows and rows with context"
    return lm, plain


def kl_by_hand(model, lm, plain) -> float:
    """Mean KL(adapted || base) over the plain rows' next-token targets, one row at a time, causally."""
    values = []
    for row in torch.nonzero(plain).flatten().tolist():
        n = int(lm.valid[row].sum())
        ids = lm.input_ids[row : row + 1, :n]
        positions = lm.msg_positions[lm.msg_rows == row]
        with torch.no_grad():
            adapted = model(input_ids=ids).logits[0, positions].float()
            with model.disable_adapter():
                base = model(input_ids=ids).logits[0, positions].float()
        log_p, log_q = F.log_softmax(adapted, -1), F.log_softmax(base, -1)
        values.extend((log_p.exp() * (log_p - log_q)).sum(-1).tolist())
    return sum(values) / len(values)


def test_kl_is_zero_while_the_adapter_is_the_identity(lm_batch):
    tokenizer = tiny_tokenizer()
    model = lora_model(perturb=False)
    lm, _ = plain_and_context_rows(tokenizer, lm_batch)
    out = MagnetObjectives(model, "hybrid", 0.05, kl_weight=1.0)(lm, None, WEIGHTS)
    assert out.kl is not None and abs(out.kl) < 1e-6


def test_kl_is_the_divergence_from_the_base_on_next_token_rows_only(lm_batch):
    tokenizer = tiny_tokenizer()
    model = lora_model(perturb=True)
    lm, plain = plain_and_context_rows(tokenizer, lm_batch)
    with_kl = MagnetObjectives(model, "hybrid", 0.05, kl_weight=0.5)(lm, None, WEIGHTS)
    without = MagnetObjectives(model, "hybrid", 0.05)(lm, None, WEIGHTS)
    expected = kl_by_hand(model, lm, plain)
    assert expected > 1e-4
    assert with_kl.kl == pytest.approx(expected, rel=1e-4)
    assert without.kl is None
    assert with_kl.mntp == pytest.approx(without.mntp) and with_kl.msg == pytest.approx(without.msg)
    assert float(with_kl.total - without.total) == pytest.approx(0.5 * expected, rel=1e-4)
    # The term trains the adapter (the base pass has no gradient).
    (with_kl.total - without.total).backward()
    grads = [p.grad for n, p in model.named_parameters() if "lora_" in n and p.grad is not None]
    assert grads and any(float(g.abs().sum()) > 0 for g in grads)
    assert not any(p.grad is not None for n, p in model.named_parameters() if "lora_" not in n)


def test_kl_needs_an_adapter_and_next_token_rows():
    with pytest.raises(ValueError, match="must be >= 0"):
        TrainConfig(data=["x"], kl_weight=-1.0)
    with pytest.raises(ValueError, match="full fine-tune"):
        TrainConfig(data=["x"], kl_weight=1.0, full_finetune=True)
    with pytest.raises(ValueError, match="no_context_fraction > 0"):
        TrainConfig(data=["x"], kl_weight=1.0, no_context_fraction=0.0)
    with pytest.raises(ValueError, match="peft model"):
        MagnetObjectives(tiny_model(), "hybrid", 0.05, kl_weight=1.0)


def test_a_run_with_kl_logs_it_and_a_run_without_does_not(tmp_path, base_dir, data_file, train_config):
    kl_run = train(train_config(tmp_path / "kl", base_dir, data_file, max_steps=3, kl_weight=1.0))
    plain_run = train(train_config(tmp_path / "plain", base_dir, data_file, max_steps=2))
    kl_rows = [json.loads(line) for line in kl_run.metrics_path.read_text().splitlines()]
    plain_rows = [json.loads(line) for line in plain_run.metrics_path.read_text().splitlines()]
    logged = [row["kl"] for row in kl_rows if row.get("kl") is not None]
    assert logged and all(value >= 0 for value in logged)
    assert all("kl" not in row for row in plain_rows)


@pytest.mark.parametrize("targets", ["context rows only", "no MSG target at all"])
def test_a_process_without_next_token_rows_still_runs_the_base_pass(lm_batch, monkeypatch, targets):
    # Under FSDP every process must make the same decoder calls. Pretend another process has
    # next-token rows (every global sum gets 1 more); this one has none, and must still run the
    # base pass once, adding nothing.
    import magnetsdk.train.objectives as objectives

    tokenizer = tiny_tokenizer()
    model = lora_model(perturb=True)
    lm, plain = plain_and_context_rows(tokenizer, lm_batch)
    msg = ~plain[lm.msg_rows]
    lm.msg_rows, lm.msg_positions, lm.msg_targets = (
        lm.msg_rows[msg],
        lm.msg_positions[msg],
        lm.msg_targets[msg],
    )
    lm.is_span[plain] = False  # the plain rows now read as context rows: no next-token row is left
    monkeypatch.setattr(objectives, "global_sum", lambda value: value.detach().clone() + 1)
    calls = []
    real = objectives.run_decoder
    monkeypatch.setattr(objectives, "run_decoder", lambda *a, **k: calls.append(1) or real(*a, **k))
    term = MagnetObjectives(model, "hybrid", 0.05, kl_weight=1.0)
    logits = None if targets == "no MSG target at all" else torch.zeros(len(lm.msg_targets), 8)
    summed, count = term._kl_to_base(lm, logits)
    assert calls == [1] and float(summed) == 0.0 and float(count) == 1.0
