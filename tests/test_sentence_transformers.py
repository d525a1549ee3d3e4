"""The sentence-transformers drop-in: saved directories (stock and MagnetModule layouts), prompts,
shared weights, ST utilities, and magnetsdk reading a stock directory back unchanged.

Every check uses real sentence-transformers objects on tiny in-process models; the slow test does
the same with the real default model.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from magnetsdk.integrations.sentence_transformers import (
    MODULE_TYPE,
    MagnetModule,
    magnet_of,
    write_sentence_transformers_files,
)
from scipy.stats import spearmanr
from sentence_transformers import SentenceTransformer, util
from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator

from magnetsdk import AttentionMode, Magnet, MagnetConfig
from magnetsdk.encoding import prepare
from magnetsdk.model_dir import read_manifest
from magnetsdk.st_layout import CUSTOM, STOCK
from magnetsdk.testing import tiny_magnet

MODULE_PATH = "magnetsdk.integrations.sentence_transformers.MagnetModule"  # frozen: saved in modules.json
TEXTS = [
    "The cat sat on the mat and looked at the door.",
    "A dog runs in the park while children play football.",
    "Paris",
    "",
    "Stocks rose sharply after the central bank cut rates, and the river rose all night.",
]
# The stock layout prepends "instruction " to the text, so an empty text keeps a trailing space token
# that Magnet.encode does not have (docs/sentence-transformers.md); its checks use non-empty texts.
STOCK_TEXTS = [t for t in TEXTS if t]
QUERY = "Given a question, find the passages that answer it:"
PROMPTS = {"query": QUERY, "document": ""}


@pytest.fixture(scope="module")
def saved(llama_magnet, tmp_path_factory):
    """The tiny adapted model (bidirectional, last token) saved once, with prompts: the stock layout."""
    return llama_magnet.save(tmp_path_factory.mktemp("st") / "model", prompts=PROMPTS)


@pytest.fixture(scope="module")
def loaded(saved):
    return SentenceTransformer(str(saved), device="cpu")  # no trust_remote_code: stock modules only


@pytest.fixture(scope="module")
def custom_saved(tmp_path_factory):
    """An unadapted model (causal, text-only mean pooling): the MagnetModule layout."""
    magnet = tiny_magnet("llama", adapted=False)
    return magnet, magnet.save(tmp_path_factory.mktemp("st-custom") / "model", prompts=PROMPTS)


def test_stock_directory_loads_without_trusted_code(llama_magnet, saved, loaded):
    expected = llama_magnet.encode(STOCK_TEXTS)
    np.testing.assert_allclose(loaded.encode(STOCK_TEXTS, batch_size=4), expected, atol=1e-5)  # padded
    np.testing.assert_allclose(loaded.encode(STOCK_TEXTS[2]), expected[2], atol=1e-5)  # a single text
    np.testing.assert_allclose(
        Magnet.from_pretrained(saved).encode(TEXTS), llama_magnet.encode(TEXTS), atol=1e-5
    )

    modules = json.loads((saved / "modules.json").read_text())
    assert [m["type"] for m in modules] == [
        "sentence_transformers.models.Transformer",
        "sentence_transformers.models.Pooling",
        "sentence_transformers.models.Normalize",
    ]
    assert [type(m).__name__ for m in loaded] == ["Transformer", "Pooling", "Normalize"]
    assert loaded[1].pooling_mode == "lasttoken" and loaded[1].include_prompt
    assert json.loads((saved / "config.json").read_text())["is_causal"] is False  # bidirectional encoder
    manifest = read_manifest(saved)
    assert manifest.sentence_transformers == STOCK and manifest.tokenizer_appends_eos
    assert loaded.get_embedding_dimension() == llama_magnet.dimension
    assert loaded.max_seq_length == llama_magnet.config.max_length
    # The saved tokenizer appends EOS for sentence-transformers and vLLM; magnetsdk gets its own back.
    ids = loaded.tokenizer("a cat")["input_ids"]
    assert ids[-1] == llama_magnet.tokenizer.eos_token_id
    assert (
        Magnet.from_pretrained(saved).tokenizer("a cat")["input_ids"]
        == llama_magnet.tokenizer("a cat")["input_ids"]
    )
    # Weights are safetensors only, merged into one file; nothing a loader would unpickle.
    files = {p.name for p in saved.rglob("*")}
    assert "model.safetensors" in files and "magnet_config.json" in files and "tokenizer.json" in files
    assert not [f for f in files if f.endswith((".bin", ".pt", ".pth", ".pkl", ".ckpt"))]
    assert loaded.prompts["query"] == QUERY + " "


def test_stock_prompts_match_magnet_instructions(llama_magnet, loaded, saved):
    default = llama_magnet.encode(STOCK_TEXTS)
    with_query = llama_magnet.encode(STOCK_TEXTS, instruction=QUERY)
    assert not np.allclose(default, with_query, atol=1e-3)  # the prompt matters for this model
    np.testing.assert_allclose(loaded.encode(STOCK_TEXTS, prompt_name="query"), with_query, atol=1e-5)
    np.testing.assert_allclose(loaded.encode_query(STOCK_TEXTS), with_query, atol=1e-5)
    # The "document" prompt was "": the model's own instruction, as for MagnetModule.
    np.testing.assert_allclose(loaded.encode_document(STOCK_TEXTS), default, atol=1e-5)
    np.testing.assert_allclose(loaded.encode(STOCK_TEXTS, prompt_name="document"), default, atol=1e-5)
    np.testing.assert_allclose(
        loaded.encode(STOCK_TEXTS, prompt="query: "),
        llama_magnet.encode(STOCK_TEXTS, instruction="query:"),
        atol=1e-5,
    )
    by_default = llama_magnet.save(saved.parent / "by-default", prompts=PROMPTS, default_prompt_name="query")
    np.testing.assert_allclose(
        SentenceTransformer(str(by_default)).encode(STOCK_TEXTS), with_query, atol=1e-5
    )


@pytest.mark.parametrize("mode", ["shift", "remove"])
def test_principal_shift_is_a_stock_dense_layer(mode, tmp_path):
    magnet = tiny_magnet("qwen2")
    magnet.fit_principal_component(["a cat", "a dog", "the rain", "a long river"], mode=mode, weight=0.5)
    saved = magnet.save(tmp_path / "shifted")
    loaded = SentenceTransformer(str(saved), device="cpu")
    assert type(loaded[2]).__name__ == "Dense"
    np.testing.assert_allclose(loaded.encode(STOCK_TEXTS), magnet.encode(STOCK_TEXTS), atol=1e-5)
    assert not np.allclose(
        magnet.encode(STOCK_TEXTS), magnet.encode(STOCK_TEXTS, principal_shift=False), atol=1e-3
    )


def test_causal_last_token_model_is_stock_without_the_flag(tmp_path):
    magnet = tiny_magnet("llama")
    magnet.config.encode_attention = AttentionMode.CAUSAL
    saved = magnet.save(tmp_path / "causal")
    assert json.loads((saved / "config.json").read_text()).get("is_causal", True) is True
    loaded = SentenceTransformer(str(saved), device="cpu")
    np.testing.assert_allclose(loaded.encode(STOCK_TEXTS), magnet.encode(STOCK_TEXTS), atol=1e-5)


def test_what_stock_modules_cannot_express_uses_magnet_module(custom_saved):
    magnet, saved = custom_saved
    manifest = read_manifest(saved)
    assert (
        manifest.sentence_transformers == CUSTOM and "mean pooling" in manifest.sentence_transformers_reason
    )
    modules = json.loads((saved / "modules.json").read_text())
    assert modules[0]["type"] == MODULE_PATH and modules[0]["path"] == ""
    assert json.loads((saved / "config.json").read_text()).get("is_causal", True) is True
    with pytest.raises(ValueError, match="trust_remote_code=True"):
        SentenceTransformer(str(saved), device="cpu")
    loaded = SentenceTransformer(str(saved), trust_remote_code=True, device="cpu")
    assert isinstance(loaded[0], MagnetModule)
    np.testing.assert_allclose(loaded.encode(TEXTS), magnet.encode(TEXTS), atol=1e-5)
    np.testing.assert_allclose(loaded.encode_query(TEXTS), magnet.encode(TEXTS, instruction=QUERY), atol=1e-5)
    assert loaded.prompts["query"] == QUERY


def test_a_stock_directory_still_generates_and_infills_causally(llama_magnet, saved, tmp_path):
    """config.json says is_causal=false for other loaders; magnetsdk's causal paths must not care."""
    from transformers import AutoModelForCausalLM

    plain = tmp_path / "plain"  # the same model saved without the flag (and without the stock files)
    llama_magnet.model.save_pretrained(plain)
    llama_magnet.tokenizer.save_pretrained(plain)
    llama_magnet.config.save(plain)
    flagged, unflagged = Magnet.from_pretrained(saved), Magnet.from_pretrained(plain)
    ids = torch.tensor([[5, 17, 40, 99, 23, 61]])
    with torch.no_grad():
        reference = unflagged.model(input_ids=ids).logits
        torch.testing.assert_close(flagged.model(input_ids=ids).logits, reference, atol=1e-5, rtol=1e-5)
        # The hazard is real: transformers' own path reads the flag and attends both ways.
        naive = AutoModelForCausalLM.from_pretrained(saved).eval()
        assert not torch.allclose(naive(input_ids=ids).logits, reference, atol=1e-3)
    prompts = ["The cat sat on", "Paris is the capital"]
    assert flagged.generate(prompts, max_new_tokens=8, temperature=0) == unflagged.generate(
        prompts, max_new_tokens=8, temperature=0
    )
    gap = "The cat [GAP] the mat."
    assert flagged.infill(gap, max_new_tokens=4).text == unflagged.infill(gap, max_new_tokens=4).text
    np.testing.assert_allclose(flagged.encode(TEXTS), unflagged.encode(TEXTS), atol=1e-5)


def test_loaded_model_refuses_a_config_that_is_not_causal(llama_magnet, saved):
    from transformers import AutoModelForCausalLM

    with pytest.raises(ValueError, match="is_causal=True"):
        Magnet(AutoModelForCausalLM.from_pretrained(saved), llama_magnet.tokenizer)


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


def test_prompts_replace_the_instruction(llama_magnet):
    default = llama_magnet.encode(TEXTS)
    with_query = llama_magnet.encode(TEXTS, instruction=QUERY)
    model = llama_magnet.to_sentence_transformer(prompts=PROMPTS)
    np.testing.assert_allclose(model.encode(TEXTS, prompt_name="query"), with_query, atol=1e-5)
    np.testing.assert_allclose(model.encode_query(TEXTS), with_query, atol=1e-5)
    # An empty prompt keeps the model's own instruction.
    np.testing.assert_allclose(model.encode(TEXTS, prompt_name="document"), default, atol=1e-5)
    np.testing.assert_allclose(model.encode_document(TEXTS), default, atol=1e-5)
    # A literal prompt, trailing space dropped (the encoder adds one between instruction and text).
    np.testing.assert_allclose(
        model.encode(TEXTS, prompt="query: "), llama_magnet.encode(TEXTS, instruction="query:"), atol=1e-5
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
    assert read_manifest(saved).sentence_transformers == STOCK
    loaded = SentenceTransformer(str(saved), device="cpu")  # stock modules: no trust_remote_code
    np.testing.assert_allclose(loaded.encode(texts), expected, atol=1e-5)
    np.testing.assert_allclose(loaded.encode(texts, batch_size=2), expected, atol=1e-5)
    query = "Given a question, find the passages that answer it:"
    np.testing.assert_allclose(
        loaded.encode(texts, prompt=query + " "), magnet.encode(texts, instruction=query), atol=1e-5
    )
    again = Magnet.from_pretrained(saved)
    np.testing.assert_allclose(again.encode(texts), expected, atol=1e-5)
    prompt = "The capital of France is"
    assert again.generate(prompt, max_new_tokens=12, temperature=0) == magnet.generate(
        prompt, max_new_tokens=12, temperature=0
    )


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
    assert read_manifest(tmp_path / "saved").sentence_transformers_reason.startswith("echo")
    loaded = SentenceTransformer(str(tmp_path / "saved"), trust_remote_code=True)
    np.testing.assert_allclose(loaded.encode(texts), expected, atol=1e-5)
    again = Magnet.from_pretrained(tmp_path / "saved")
    assert again.config.echo and again.principal_shift.describe() == magnet.principal_shift.describe()
    np.testing.assert_allclose(again.encode(texts), expected, atol=1e-5)
