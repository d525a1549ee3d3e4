"""end_kl_weight: KL(adapted || base) of the next token after short texts, the base being the adapter off."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from magnetsdk.train.adaptation import make_trainable
from magnetsdk.train.collate import collate_ends
from magnetsdk.train.config import TrainConfig
from magnetsdk.train.data import DataError
from magnetsdk.train.objectives import MagnetObjectives
from magnetsdk.train.trainer import train

from magnetsdk.encoding import pad_id, special_prefix
from magnetsdk.testing import _CORPUS, tiny_model, tiny_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

WEIGHTS = (1.0, 0.0, 1.0)


def lora_model(perturb: bool):
    torch.manual_seed(0)
    trained = make_trainable(tiny_model(), TrainConfig(data=["unused"], lora_r=4, lora_dropout=0.0), [])
    if perturb:  # LoRA starts as the identity (B = 0); move it so the adapted model differs
        with torch.no_grad():
            for name, p in trained.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.05)
    return trained


def end_batch(tokenizer, texts):
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    return collate_ends(ids, special_prefix(tokenizer), pad_id(tokenizer))


def kl_by_hand(model, tokenizer, texts, drop: int | None = None) -> float:
    """Mean KL(adapted || base) of the next token after each text, one unpadded text at a time
    (over every token but ``drop``, when given)."""
    values = []
    for text in texts:
        ids = torch.tensor(
            [special_prefix(tokenizer) + tokenizer(text, add_special_tokens=False)["input_ids"]]
        )
        with torch.no_grad():
            adapted = model(input_ids=ids).logits[0, -1].float()
            with model.disable_adapter():
                base = model(input_ids=ids).logits[0, -1].float()
        if drop is not None:
            keep = [i for i in range(adapted.shape[-1]) if i != drop]
            adapted, base = adapted[keep], base[keep]
        log_p, log_q = F.log_softmax(adapted, -1), F.log_softmax(base, -1)
        values.append(float((log_p.exp() * (log_p - log_q)).sum()))
    return sum(values) / len(values)


def test_the_end_kl_is_the_divergence_after_each_texts_last_token():
    tokenizer = tiny_tokenizer()
    texts = sorted(set(_CORPUS))[:5]  # different lengths: right padding must not move the read position
    batch = end_batch(tokenizer, texts)
    assert len(set(batch.last.tolist())) > 1
    identity = MagnetObjectives(lora_model(perturb=False), "hybrid", 0.05, end_kl_weight=1.0)
    assert abs(identity(None, None, WEIGHTS, ends=batch).end_kl) < 1e-6

    model = lora_model(perturb=True)
    out = MagnetObjectives(model, "hybrid", 0.05, end_kl_weight=0.5)(None, None, WEIGHTS, ends=batch)
    expected = kl_by_hand(model, tokenizer, texts)
    assert expected > 1e-4
    assert out.end_kl == pytest.approx(expected, rel=1e-4)
    assert float(out.total.detach()) == pytest.approx(0.5 * expected, rel=1e-4)
    assert out.mntp is None and out.msg is None and out.sscl is None


def test_the_end_kl_without_end_compares_every_other_token_renormalised():
    tokenizer = tiny_tokenizer()
    texts = sorted(set(_CORPUS))[:5]
    batch = end_batch(tokenizer, texts)
    model = lora_model(perturb=True)
    end = 7
    out = MagnetObjectives(
        model, "hybrid", 0.05, end_kl_weight=1.0, end_token_id=end, end_kl_without_end=True
    )(None, None, WEIGHTS, ends=batch)
    assert out.end_kl == pytest.approx(kl_by_hand(model, tokenizer, texts, drop=end), rel=1e-4)
    assert out.end_kl != pytest.approx(kl_by_hand(model, tokenizer, texts), rel=1e-3)
    with pytest.raises(ValueError, match="end_token_id"):
        MagnetObjectives(model, "hybrid", 0.05, end_kl_weight=1.0, end_kl_without_end=True)


def test_end_kl_without_end_with_the_end_kl_off_says_what_to_set():
    with pytest.raises(ValueError, match="end_kl_without_end.*--end-kl-weight"):
        TrainConfig(data=["x"], end_kl_without_end=True)


def test_the_end_kl_trains_the_adapter_back_towards_the_base_after_a_text():
    tokenizer = tiny_tokenizer()
    texts = sorted(set(_CORPUS))[:6]
    batch = end_batch(tokenizer, texts)
    model = lora_model(perturb=True)
    term = MagnetObjectives(model, "hybrid", 0.05, end_kl_weight=1.0)
    lora = [p for n, p in model.named_parameters() if "lora_" in n]
    optimizer = torch.optim.Adam(lora, lr=1e-2)
    before = kl_by_hand(model, tokenizer, texts)
    for _ in range(15):
        optimizer.zero_grad()
        term(None, None, WEIGHTS, ends=batch).total.backward()
        assert not any(p.grad is not None for n, p in model.named_parameters() if "lora_" not in n)
        optimizer.step()
    assert kl_by_hand(model, tokenizer, texts) < 0.5 * before


def test_the_end_kl_needs_an_adapter_and_short_texts(tmp_path, base_dir, train_config):
    with pytest.raises(ValueError, match="must be >= 0"):
        TrainConfig(data=["x"], end_kl_weight=-1.0)
    with pytest.raises(ValueError, match="full fine-tune"):
        TrainConfig(data=["x"], end_kl_weight=1.0, full_finetune=True)
    with pytest.raises(ValueError, match="end_kl_batch_size"):
        TrainConfig(data=["x"], end_kl_weight=1.0, end_kl_batch_size=0)
    with pytest.raises(ValueError, match="peft model"):
        MagnetObjectives(tiny_model(), "hybrid", 0.05, end_kl_weight=1.0)
    long_texts = tmp_path / "long.txt"
    long_texts.write_text("\n".join(" ".join(sorted(set(_CORPUS))) for _ in range(8)) + "\n")
    with pytest.raises(DataError, match="end_kl_max_tokens=8"):
        train(train_config(tmp_path, base_dir, str(long_texts), end_kl_weight=1.0, end_kl_max_tokens=8))


def test_a_run_with_the_end_kl_logs_it_and_a_run_without_does_not(
    tmp_path, base_dir, data_file, train_config
):
    end_run = train(
        train_config(
            tmp_path / "end", base_dir, data_file, max_steps=3, end_kl_weight=1.0, end_kl_batch_size=4
        )
    )
    plain_run = train(train_config(tmp_path / "plain", base_dir, data_file, max_steps=2))
    end_rows = [json.loads(line) for line in end_run.metrics_path.read_text().splitlines()]
    plain_rows = [json.loads(line) for line in plain_run.metrics_path.read_text().splitlines()]
    logged = [row["end_kl"] for row in end_rows if row.get("end_kl") is not None]
    assert len(logged) == 3 and all(value >= 0 for value in logged)
    assert logged[-1] > 0  # the adapter has moved off the identity by the third step
    assert all("end_kl" not in row for row in plain_rows)
