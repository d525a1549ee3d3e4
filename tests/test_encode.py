"""Magnet.encode: shapes, pooling, batching invariance, bad input, threads."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from magnetsdk.attention import AttentionMode
from magnetsdk.config import Pooling
from magnetsdk.encoding import prepare
from magnetsdk.forward import run_decoder

TEXTS = [
    "The cat sat on the mat.",
    "A dog runs in the park while children play football.",
    "Paris",
    "Rain fell on the roof all night, and the river rose after the storm.",
    "",
]


def test_shapes_and_normalisation(magnet):
    vectors = magnet.encode(TEXTS)
    assert vectors.shape == (len(TEXTS), magnet.dimension) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    raw = magnet.encode(TEXTS, normalize=False)
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0)
    single = magnet.encode(TEXTS[0])
    assert single.shape == (magnet.dimension,)


def test_empty_list_and_empty_string(magnet):
    assert magnet.encode([]).shape == (0, magnet.dimension)
    empty = magnet.encode([""])
    assert empty.shape == (1, magnet.dimension) and np.isfinite(empty).all()


def test_batching_and_sorting_do_not_change_results(magnet):
    together = magnet.encode(TEXTS, batch_size=32)
    one_by_one = np.stack([magnet.encode([t])[0] for t in TEXTS])
    pairs = magnet.encode(TEXTS, batch_size=2)
    np.testing.assert_allclose(together, one_by_one, atol=1e-5)
    np.testing.assert_allclose(pairs, one_by_one, atol=1e-5)


def test_last_token_pooling_reads_the_eos_state_of_a_bidirectional_pass(llama_magnet):
    m = llama_magnet
    text = "The quick brown fox."
    (item,) = prepare(m.tokenizer, [text], m.config.instruction, 512)
    assert item.ids[-1] == m.tokenizer.eos_token_id
    ids = torch.tensor([item.ids])
    with torch.no_grad():
        hidden = run_decoder(
            m.model, ids, torch.ones_like(ids, dtype=torch.bool), AttentionMode.BIDIRECTIONAL
        ).hidden
    expected = torch.nn.functional.normalize(hidden[0, -1], dim=-1).numpy()
    np.testing.assert_allclose(m.encode(text), expected, atol=1e-5)


def test_mean_pooling_covers_only_the_text_tokens(llama_magnet):
    m = llama_magnet
    text = "She sells sea shells."
    (item,) = prepare(m.tokenizer, [text], m.config.instruction, 512)
    instruction_ids = m.tokenizer(m.config.instruction, add_special_tokens=False)["input_ids"]
    assert item.text_start == len(instruction_ids)
    assert m.tokenizer.decode(item.ids[item.text_start : item.text_end]) == " " + text
    ids = torch.tensor([item.ids])
    with torch.no_grad():
        hidden = run_decoder(
            m.model, ids, torch.ones_like(ids, dtype=torch.bool), AttentionMode.CAUSAL
        ).hidden
    expected = hidden[0, item.text_start : item.text_end].mean(0)
    expected = torch.nn.functional.normalize(expected, dim=-1).numpy()
    np.testing.assert_allclose(m.encode(text, pooling="mean", attention="causal"), expected, atol=1e-5)


def test_instruction_and_mode_change_the_embedding(llama_magnet):
    m = llama_magnet
    base = m.encode("a red car")
    assert not np.allclose(base, m.encode("a red car", instruction="Represent the query:"))
    assert not np.allclose(base, m.encode("a red car", instruction=""))
    assert not np.allclose(base, m.encode("a red car", attention="causal"))
    assert not np.allclose(base, m.encode("a red car", pooling=Pooling.MEAN))


def test_unadapted_models_encode_causally_with_mean_pooling():
    from magnetsdk.testing import tiny_magnet

    unadapted = tiny_magnet("llama", adapted=False)
    assert unadapted.config.encode_attention is AttentionMode.CAUSAL
    np.testing.assert_allclose(
        unadapted.encode(TEXTS), unadapted.encode(TEXTS, attention="causal", pooling="mean"), atol=1e-6
    )


def test_long_text_is_truncated_with_a_warning(llama_magnet):
    long = "the cat sat on the mat " * 200
    with pytest.warns(UserWarning, match="1 of 2 texts were longer than max_length=64"):
        vectors = llama_magnet.encode([long, "short"], max_length=64)
    assert vectors.shape == (2, llama_magnet.dimension)


def test_bad_input_is_refused(llama_magnet):
    with pytest.raises(TypeError, match=r"texts\[1\] is int"):
        llama_magnet.encode(["ok", 3])
    with pytest.raises(ValueError, match="batch_size"):
        llama_magnet.encode(["ok"], batch_size=0)
    with pytest.raises(ValueError, match="no room for text"):
        llama_magnet.encode(["ok"], max_length=8, instruction="a very long instruction " * 5)
    with pytest.raises(ValueError, match="pooling"):
        llama_magnet.encode(["ok"], pooling="max")


def test_threads_share_one_magnet(llama_magnet):
    expected = llama_magnet.encode(TEXTS)
    results, errors = [], []

    def work():
        try:
            for _ in range(3):
                results.append(llama_magnet.encode(TEXTS, batch_size=2))
            llama_magnet.infill("The cat [GAP] mat.", max_new_tokens=3)
        except Exception as error:  # noqa: BLE001 - collected and asserted below
            errors.append(error)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(results) == 12
    for result in results:
        np.testing.assert_allclose(result, expected, atol=1e-5)


def test_echo_pools_over_the_second_copy(llama_magnet):
    m = llama_magnet
    text = "The river rose."
    (plain,) = prepare(m.tokenizer, [text], m.config.instruction, 512)
    (echoed,) = prepare(m.tokenizer, [text], m.config.instruction, 512, echo=True)
    first = plain.ids[plain.text_start : plain.text_end]
    second = echoed.ids[echoed.text_start : echoed.text_end]
    assert second == first and echoed.ids[-1] == m.tokenizer.eos_token_id
    assert echoed.ids[: plain.text_end] == plain.ids[: plain.text_end]  # the first copy opens the sequence
    ids = torch.tensor([echoed.ids])
    with torch.no_grad():
        hidden = run_decoder(
            m.model, ids, torch.ones_like(ids, dtype=torch.bool), AttentionMode.CAUSAL
        ).hidden
    expected = torch.nn.functional.normalize(hidden[0, echoed.text_start : echoed.text_end].mean(0), dim=-1)
    np.testing.assert_allclose(
        m.encode(text, echo=True, attention="causal", pooling="mean"), expected.numpy(), atol=1e-5
    )
    with pytest.warns(UserWarning, match="truncated"):
        (cut,) = prepare(m.tokenizer, ["word " * 100], m.config.instruction, 64, echo=True)
    assert len(cut.ids) <= 64
