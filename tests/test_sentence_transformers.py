"""The sentence-transformers drop-in: saved directories, prompts, shared weights, ST utilities.

Every check uses real sentence-transformers objects on tiny in-process models; the slow test does
the same with the real default model.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from magnetsdk.integrations.sentence_transformers import (
    MODULE_TYPE,
    MagnetModule,
    magnet_of,
    write_sentence_transformers_files,
)
from scipy.stats import spearmanr
from sentence_transformers import SentenceTransformer, util
from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator

from magnetsdk import Magnet, MagnetConfig
from magnetsdk.encoding import prepare
from magnetsdk.testing import tiny_magnet

MODULE_PATH = "magnetsdk.integrations.sentence_transformers.MagnetModule"  # frozen: saved in modules.json
TEXTS = [
    "The cat sat on the mat and looked at the door.",
    "A dog runs in the park while children play football.",
    "Paris",
    "",
    "Stocks rose sharply after the central bank cut rates, and the river rose all night.",
]
QUERY = "Given a question, find the passages that answer it:"
PROMPTS = {"query": QUERY, "document": ""}


@pytest.fixture(scope="module")
def saved(llama_magnet, tmp_path_factory):
    """The tiny model saved once, with prompts."""
    return llama_magnet.save(tmp_path_factory.mktemp("st") / "model", prompts=PROMPTS)


@pytest.fixture(scope="module")
def loaded(saved):
    return SentenceTransformer(str(saved), trust_remote_code=True, device="cpu")


def test_saved_directory_is_read_by_both_loaders(llama_magnet, saved, loaded):
    expected = llama_magnet.encode(TEXTS)
    np.testing.assert_allclose(loaded.encode(TEXTS), expected, atol=1e-5)
    np.testing.assert_allclose(Magnet.from_pretrained(saved).encode(TEXTS), expected, atol=1e-5)

    modules = json.loads((saved / "modules.json").read_text())
    assert modules[0]["type"] == MODULE_PATH and modules[0]["path"] == ""
    assert isinstance(loaded[0], MagnetModule)
    assert loaded.get_embedding_dimension() == llama_magnet.dimension
    assert loaded.max_seq_length == llama_magnet.config.max_length
    # Weights are safetensors only, merged into one file; nothing a loader would unpickle.
    files = {p.name for p in saved.rglob("*")}
    assert "model.safetensors" in files and "magnet_config.json" in files and "tokenizer.json" in files
    assert not [f for f in files if f.endswith((".bin", ".pt", ".pth", ".pkl", ".ckpt"))]
    # The saved prompts come back.
    assert loaded.prompts["query"] == QUERY


def test_loading_without_trust_remote_code_says_what_to_pass(saved):
    with pytest.raises(ValueError, match="trust_remote_code=True"):
        SentenceTransformer(str(saved), device="cpu")


@pytest.mark.parametrize("adapted", [True, False], ids=["adapted", "unadapted"])
def test_encode_equals_magnet_encode(magnet, adapted):
    """Bidirectional last-token (adapted) and causal mean (unadapted) configs, both architectures."""
    model = magnet if adapted else tiny_magnet(magnet.name.removeprefix("tiny-"), adapted=False)
    wrapped = model.to_sentence_transformer()
    np.testing.assert_allclose(wrapped.encode(TEXTS, batch_size=2), model.encode(TEXTS), atol=1e-5)
    single = wrapped.encode(TEXTS[0])
    assert single.shape == (model.dimension,)
    np.testing.assert_allclose(single, model.encode(TEXTS[0]), atol=1e-5)
    unnormalised = model.to_sentence_transformer(normalize=False).encode(TEXTS)
    np.testing.assert_allclose(unnormalised, model.encode(TEXTS, normalize=False), atol=1e-5)


def test_to_sentence_transformer_shares_the_weights(llama_magnet):
    wrapped = llama_magnet.to_sentence_transformer()
    assert magnet_of(wrapped) is llama_magnet
    assert wrapped[0].model is llama_magnet.model
    ours = list(llama_magnet.model.parameters())
    theirs = list(wrapped.parameters())
    assert len(theirs) == len(ours)
    assert all(a is b for a, b in zip(theirs, ours, strict=True))
    assert [p.data_ptr() for p in theirs] == [p.data_ptr() for p in ours]


def test_prompts_replace_the_instruction(llama_magnet, loaded):
    default = llama_magnet.encode(TEXTS)
    with_query = llama_magnet.encode(TEXTS, instruction=QUERY)
    assert not np.allclose(default, with_query, atol=1e-3)  # the prompt matters for this model

    for model in (llama_magnet.to_sentence_transformer(prompts=PROMPTS), loaded):
        np.testing.assert_allclose(model.encode(TEXTS, prompt_name="query"), with_query, atol=1e-5)
        np.testing.assert_allclose(model.encode_query(TEXTS), with_query, atol=1e-5)
        # An empty prompt keeps the model's own instruction.
        np.testing.assert_allclose(model.encode(TEXTS, prompt_name="document"), default, atol=1e-5)
        np.testing.assert_allclose(model.encode_document(TEXTS), default, atol=1e-5)
        # A literal prompt, trailing space dropped (the encoder adds one between instruction and text).
        np.testing.assert_allclose(
            model.encode(TEXTS, prompt="query: "),
            llama_magnet.encode(TEXTS, instruction="query:"),
            atol=1e-5,
        )

    by_default = llama_magnet.to_sentence_transformer(prompts=PROMPTS, default_prompt_name="query")
    np.testing.assert_allclose(by_default.encode(TEXTS), with_query, atol=1e-5)


def test_prompt_is_not_also_prepended_to_the_text(llama_magnet):
    wrapped = llama_magnet.to_sentence_transformer(prompts=PROMPTS)
    features = wrapped.preprocess(TEXTS[:2], prompt=QUERY)
    expected = prepare(llama_magnet.tokenizer, TEXTS[:2], QUERY, llama_magnet.config.max_length)
    for row, item in enumerate(expected):
        n = len(item.ids)
        assert features["input_ids"][row, :n].tolist() == item.ids
        assert int(features["attention_mask"][row].sum()) == n
        assert (int(features["text_start"][row]), int(features["text_end"][row])) == (
            item.text_start,
            item.text_end,
        )


def test_similarity_semantic_search_and_evaluator(llama_magnet):
    wrapped = llama_magnet.to_sentence_transformer()
    vectors = llama_magnet.encode(TEXTS)
    cosine = vectors @ vectors.T  # unit vectors

    np.testing.assert_allclose(wrapped.similarity(wrapped.encode(TEXTS), vectors).numpy(), cosine, atol=1e-5)

    queries, corpus = TEXTS[:2], TEXTS[2:]
    hits = util.semantic_search(wrapped.encode(queries), wrapped.encode(corpus), top_k=2)
    reference = llama_magnet.encode(queries) @ llama_magnet.encode(corpus).T
    for row, found in enumerate(hits):
        assert [h["corpus_id"] for h in found] == list(np.argsort(-reference[row])[:2])
        np.testing.assert_allclose([h["score"] for h in found], np.sort(reference[row])[::-1][:2], atol=1e-5)

    s1, s2, gold = TEXTS, TEXTS[::-1], [0.1, 0.9, 0.5, 0.3, 0.7]
    evaluator = EmbeddingSimilarityEvaluator(s1, s2, gold, name="sts", write_csv=False)
    metrics = evaluator(wrapped)
    ours = np.sum(llama_magnet.encode(s1) * llama_magnet.encode(s2), axis=1)
    assert metrics["sts_spearman_cosine"] == pytest.approx(spearmanr(gold, ours).statistic, abs=1e-6)


def test_save_is_atomic_and_careful_with_existing_directories(llama_magnet, tmp_path):
    foreign = tmp_path / "notes"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        llama_magnet.save(foreign)
    assert (foreign / "keep.txt").read_text() == "mine"

    target = tmp_path / "model"
    llama_magnet.save(target)
    first = (target / "model.safetensors").stat().st_ino
    llama_magnet.save(target)  # an existing model directory is replaced whole
    assert (target / "model.safetensors").stat().st_ino != first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "notes"]  # no temporaries left

    llama_magnet.save(foreign, overwrite=True)
    assert not (foreign / "keep.txt").exists() and (foreign / "magnet_config.json").is_file()

    umask = os.umask(0)
    os.umask(umask)
    assert (target.stat().st_mode & 0o777) == 0o777 & ~umask


def test_bad_inputs_give_clear_errors(llama_magnet, tmp_path):
    wrapped = llama_magnet.to_sentence_transformer()
    with pytest.raises(ValueError, match="encodes text only"):
        wrapped.encode([("a pair", "of texts")])
    with pytest.raises(FileNotFoundError, match="not a magnetsdk model directory"):
        MagnetModule.load(str(tmp_path))
    with pytest.raises(ValueError, match="not supported by MagnetModule"):
        MagnetModule.load(str(tmp_path), model_kwargs={"device_map": "auto"})
    with pytest.raises(ValueError, match="safetensors only"):
        wrapped[0].save(str(tmp_path), safe_serialization=False)
    with pytest.raises(TypeError, match="magnetsdk.Magnet"):
        MagnetModule(llama_magnet.model)


@pytest.mark.slow
def test_default_model_round_trips_through_sentence_transformers(tmp_path):
    magnet = Magnet.from_pretrained()
    texts = ["A man is playing a guitar.", "The weather is lovely today.", "Kids play football."]
    expected = magnet.encode(texts)
    np.testing.assert_allclose(magnet.to_sentence_transformer().encode(texts), expected, atol=1e-5)
    saved = magnet.save(tmp_path / "default")
    loaded = SentenceTransformer(str(saved), trust_remote_code=True, device="cpu")
    np.testing.assert_allclose(loaded.encode(texts), expected, atol=1e-5)
    np.testing.assert_allclose(Magnet.from_pretrained(saved).encode(texts), expected, atol=1e-5)


def test_module_path_in_modules_json_is_the_class_path():
    assert f"{MagnetModule.__module__}.{MagnetModule.__qualname__}" == MODULE_TYPE == MODULE_PATH


def test_adapter_directory_loads_with_its_base(llama_magnet, tmp_path):
    """A training-style adapter directory (LoRA + magnet_config.json naming the base) made loadable."""
    from peft import LoraConfig, get_peft_model

    base_dir = llama_magnet.save(tmp_path / "base")
    base = Magnet.from_pretrained(base_dir)
    lora = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)  # non-zero update
    peft_model = get_peft_model(base.model, lora)
    adapter_dir = tmp_path / "adapter"
    peft_model.save_pretrained(adapter_dir)
    MagnetConfig(base_model=str(base_dir)).save(adapter_dir)
    write_sentence_transformers_files(adapter_dir, prompts={"query": QUERY})

    adapted = Magnet.from_pretrained(adapter_dir)
    expected = adapted.encode(TEXTS)
    assert not np.allclose(expected, llama_magnet.encode(TEXTS), atol=1e-3)  # the adapter changes vectors
    loaded = SentenceTransformer(str(adapter_dir), trust_remote_code=True, device="cpu")
    np.testing.assert_allclose(loaded.encode(TEXTS), expected, atol=1e-5)
    np.testing.assert_allclose(
        loaded.encode_query(TEXTS), adapted.encode(TEXTS, instruction=QUERY), atol=1e-5
    )
    with pytest.raises(FileNotFoundError, match="magnet_config.json"):
        write_sentence_transformers_files(tmp_path)


def test_echo_and_principal_shift_travel_to_sentence_transformers(tmp_path):
    from magnetsdk.testing import tiny_magnet

    magnet = tiny_magnet("llama", adapted=False)
    magnet.config.echo = True
    magnet.fit_principal_component(["a cat", "a dog", "the rain", "a long river"], mode="shift", weight=0.5)
    texts = ["the cat sat", "a river"]
    expected = magnet.encode(texts)
    np.testing.assert_allclose(magnet.to_sentence_transformer().encode(texts), expected, atol=1e-5)
    magnet.save(tmp_path / "saved")
    loaded = SentenceTransformer(str(tmp_path / "saved"), trust_remote_code=True)
    np.testing.assert_allclose(loaded.encode(texts), expected, atol=1e-5)
    again = Magnet.from_pretrained(tmp_path / "saved")
    assert again.config.echo and again.principal_shift.describe() == magnet.principal_shift.describe()
    np.testing.assert_allclose(again.encode(texts), expected, atol=1e-5)
