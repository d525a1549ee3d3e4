"""The MTEB model interface: both call styles, prompt-type instructions, similarity, the protocol.

Nothing is downloaded: the inputs are in-memory lists and a real torch ``DataLoader`` of
``{"text": ...}`` rows, the shape of batch MTEB 2 passes.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from magnetsdk.integrations.mteb import MTEBEncoder
from torch.utils.data import DataLoader

TEXTS = ["A man plays a guitar.", "The weather is lovely today.", "Kids play football in the park."]
INSTRUCTIONS = {
    "SciFact-query": "A:",
    "SciFact": "B:",
    "Retrieval-query": "C:",
    "Retrieval": "D:",
    "query": "E:",
    "document": "",
}


@pytest.fixture(scope="module")
def encoder(llama_magnet):
    return MTEBEncoder(llama_magnet, instructions=INSTRUCTIONS, batch_size=2)


def test_mteb2_call_style_with_a_dataloader(encoder, llama_magnet):
    batches = DataLoader([{"text": t} for t in TEXTS], batch_size=2)
    task = SimpleNamespace(name="SciFact", type="Retrieval")  # the fields of mteb's TaskMetadata it reads
    queries = encoder.encode(
        batches, task_metadata=task, hf_split="test", hf_subset="default", prompt_type="query"
    )
    assert queries.shape == (len(TEXTS), llama_magnet.dimension) and queries.dtype == np.float32
    np.testing.assert_allclose(queries, llama_magnet.encode(TEXTS, instruction="A:"), atol=1e-6)
    documents = encoder.encode(
        batches, task_metadata=task, hf_split="test", hf_subset="default", prompt_type="document"
    )
    np.testing.assert_allclose(documents, llama_magnet.encode(TEXTS, instruction="B:"), atol=1e-6)


def test_mteb1_call_style_with_a_list(encoder, llama_magnet):
    out = encoder.encode(TEXTS, task_name="STSBenchmark", prompt_type="query", batch_size=1)
    np.testing.assert_allclose(out, llama_magnet.encode(TEXTS, instruction="E:"), atol=1e-6)
    # "passage" (MTEB 1) is a document; the "" instruction encodes without any.
    out = encoder.encode(TEXTS, task_name="STSBenchmark", prompt_type="passage")
    np.testing.assert_allclose(out, llama_magnet.encode(TEXTS, instruction=""), atol=1e-6)
    # No prompt type, unknown task: the model's own instruction, as Magnet.encode uses.
    np.testing.assert_allclose(encoder.encode(TEXTS), llama_magnet.encode(TEXTS), atol=1e-6)


def test_instruction_lookup_order(llama_magnet):
    remaining = dict(INSTRUCTIONS)
    for key, value in list(INSTRUCTIONS.items())[:5]:
        found = MTEBEncoder(llama_magnet, remaining).instruction_for("SciFact", "Retrieval", "query")
        assert found == value, f"expected {key!r} to win"
        del remaining[key]
    assert MTEBEncoder(llama_magnet, remaining).instruction_for("SciFact", "Retrieval", "query") == (
        llama_magnet.config.instruction
    )


def test_similarity_matches_cosine(encoder, llama_magnet):
    a = llama_magnet.encode(TEXTS, normalize=False)
    b = a[::-1].copy()
    unit_a = a / np.linalg.norm(a, axis=1, keepdims=True)
    unit_b = b / np.linalg.norm(b, axis=1, keepdims=True)
    np.testing.assert_allclose(encoder.similarity(a, b).numpy(), unit_a @ unit_b.T, atol=1e-5)
    np.testing.assert_allclose(
        encoder.similarity_pairwise(a, b).numpy(), np.sum(unit_a * unit_b, axis=1), atol=1e-5
    )


def test_bad_inputs(encoder):
    with pytest.raises(ValueError, match="prompt_type='question'"):
        encoder.encode(TEXTS, prompt_type="question")
    with pytest.raises(TypeError, match="list of strings"):
        encoder.encode("one string")
    with pytest.raises(TypeError, match="'text' column"):
        encoder.encode([{"image": [None]}])


def test_satisfies_the_mteb_encoder_protocol(encoder, llama_magnet):
    """With mteb's own types (installed by the dev extra): the protocol, TaskMetadata, PromptType."""
    import mteb
    from mteb.models.model_meta import ModelMeta
    from mteb.models.models_protocols import EncoderProtocol
    from mteb.types import PromptType

    assert isinstance(encoder, EncoderProtocol)
    meta = encoder.mteb_model_meta
    assert isinstance(meta, ModelMeta) and meta.embed_dim == llama_magnet.dimension
    assert meta.name == "magnetsdk/tiny-llama" and meta.max_tokens == llama_magnet.config.max_length
    assert meta.n_parameters == sum(p.numel() for p in llama_magnet.model.parameters())
    batches = DataLoader([{"text": t} for t in TEXTS], batch_size=2)
    task = mteb.get_task("SciFact").metadata  # the real TaskMetadata (no data is downloaded for it)
    assert (task.name, task.type) == ("SciFact", "Retrieval")
    out = encoder.encode(
        batches, task_metadata=task, hf_split="test", hf_subset="default", prompt_type=PromptType.query
    )
    np.testing.assert_allclose(out, llama_magnet.encode(TEXTS, instruction="A:"), atol=1e-6)
    out = encoder.encode(
        batches, task_metadata=task, hf_split="test", hf_subset="default", prompt_type=PromptType.document
    )
    np.testing.assert_allclose(out, llama_magnet.encode(TEXTS, instruction="B:"), atol=1e-6)


def test_model_meta_is_none_without_mteb(encoder, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "mteb.models.model_meta", None)  # as if mteb were not installed
    assert encoder.mteb_model_meta is None
