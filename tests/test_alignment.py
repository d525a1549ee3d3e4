"""Semantic alignment: key tokens through the LM head, and the first-principal-component shift."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from magnetsdk import Magnet
from magnetsdk.alignment import PC_FILE, PrincipalShift, key_tokens
from magnetsdk.testing import tiny_magnet, tiny_model, tiny_tokenizer

TEXTS = [
    "the cat sat on the mat",
    "a dog runs in the park",
    "paris is the capital of france",
    "rain fell all night",
]


def test_fit_finds_the_dominant_direction_and_applies_it():
    rng = np.random.default_rng(0)
    direction = np.zeros(8)
    direction[2] = 1.0
    vectors = rng.normal(size=(200, 8)) * 0.1 + np.outer(rng.normal(size=200) * 5, direction) + 1.0
    shift = PrincipalShift.fit(vectors, mode="remove")
    assert abs(abs(shift.component[2]) - 1.0) < 1e-2
    assert shift.component @ vectors.mean(0) > 0  # sign points along the mean
    removed = shift.apply(vectors.astype(np.float32))
    np.testing.assert_allclose(removed @ shift.component, 0.0, atol=1e-4)
    moved = PrincipalShift(shift.component, "shift", weight=2.0).apply(np.zeros((1, 8), np.float32))
    np.testing.assert_allclose(moved[0], 2.0 * shift.component, atol=1e-6)
    with pytest.raises(ValueError, match="at least 2 embeddings"):
        PrincipalShift.fit(vectors[:1])


def test_save_and_load_round_trip(tmp_path):
    shift = PrincipalShift(np.arange(1, 5, dtype=np.float32), "shift", weight=-0.5, samples=9)
    shift.save(tmp_path)
    again = PrincipalShift.load(tmp_path)
    np.testing.assert_array_equal(again.component, shift.component)
    assert (again.mode, again.weight, again.samples) == (shift.mode, -0.5, 9)
    assert PrincipalShift.load(tmp_path / "elsewhere") is None


def test_key_tokens_by_hand():
    tokenizer = tiny_tokenizer()
    head = torch.nn.Linear(2, len(tokenizer), bias=False)
    with torch.no_grad():
        head.weight.zero_()
        head.weight[40] = torch.tensor([3.0, 0.0])
        head.weight[41] = torch.tensor([2.0, 0.0])
        head.weight[0] = torch.tensor([9.0, 0.0])  # a special token: skipped
    (top,) = key_tokens(head, torch.tensor([[1.0, 0.0]]), tokenizer, k=2, skip_ids={0})
    assert [t for t, _ in top] == [tokenizer.decode([40]), tokenizer.decode([41])]
    logits = torch.zeros(len(tokenizer))
    logits[40], logits[41], logits[0] = 3.0, 2.0, float("-inf")
    expected = torch.softmax(logits, 0)
    assert top[0][1] == pytest.approx(float(expected[40]), rel=1e-5)


def test_magnet_key_tokens_and_shift(tmp_path):
    magnet = tiny_magnet("llama")
    tokens = magnet.key_tokens(TEXTS[0], k=5)
    assert len(tokens) == 5 and all(isinstance(t, str) and 0 < p < 1 for t, p in tokens)
    assert [p for _, p in tokens] == sorted((p for _, p in tokens), reverse=True)
    assert len(magnet.key_tokens(TEXTS, k=3)) == len(TEXTS)

    before = magnet.encode(TEXTS)
    shift = magnet.fit_principal_component(TEXTS, mode="remove")
    after = magnet.encode(TEXTS)
    raw = magnet.encode(TEXTS, normalize=False, principal_shift=False)
    expected = shift.apply(raw)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(after, expected, atol=1e-5)
    assert not np.allclose(before, after)
    assert magnet.identity.principal_shift.startswith("remove:")
    np.testing.assert_allclose(magnet.encode(TEXTS, principal_shift=False), before, atol=1e-6)


def test_a_stored_component_is_loaded_with_the_model(tmp_path):
    tiny_model("llama").save_pretrained(tmp_path)
    tiny_tokenizer().save_pretrained(tmp_path)
    PrincipalShift(np.ones(64, np.float32), "shift", weight=0.5).save(tmp_path)
    assert (tmp_path / PC_FILE).is_file()
    magnet = Magnet.from_pretrained(tmp_path)
    assert magnet.principal_shift is not None and magnet.principal_shift.weight == 0.5
    assert magnet.identity.principal_shift.startswith("shift:0.5:")


def test_shift_file_has_a_format_version_and_reads_older_files(tmp_path):
    from safetensors import safe_open
    from safetensors.numpy import save_file

    from magnetsdk.alignment import PC_FORMAT_VERSION

    shift = PrincipalShift(np.ones(4, dtype=np.float32), "remove", samples=3)
    path = shift.save(tmp_path)
    with safe_open(str(path), framework="numpy") as handle:
        assert handle.metadata()["format_version"] == str(PC_FORMAT_VERSION)
    # A file from before versions (no format_version) still loads, as version 1.
    save_file({"component": np.ones(4, np.float32)}, str(path), metadata={"mode": "remove", "samples": "3"})
    assert PrincipalShift.load(tmp_path).describe() == shift.describe()
    newer = {"format_version": str(PC_FORMAT_VERSION + 1), "mode": "shift"}
    save_file({"component": np.ones(4, np.float32)}, str(path), metadata=newer)
    with pytest.raises(ValueError, match="upgrade magnetsdk"):
        PrincipalShift.load(tmp_path)
    save_file({"vector": np.ones(4, np.float32)}, str(path))
    with pytest.raises(ValueError, match="no 'component' tensor"):
        PrincipalShift.load(tmp_path)
