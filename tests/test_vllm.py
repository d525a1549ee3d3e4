"""Serving a saved stock directory with vLLM's pooling runner gives Magnet.encode's vectors (GPU only).

vLLM reads ``modules.json`` (last-token pooling, Normalize), ``config.json`` (``is_causal: false``:
encoder-only attention) and the tokenizer that appends EOS. It does not apply sentence-transformers
prompts, so the instruction prompt is prepended to each text, as sentence-transformers would.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


def _skip_without_cuda_and_vllm() -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("needs vllm (pip install vllm)")


def test_vllm_pooling_runner_serves_the_saved_directory(tmp_path):
    _skip_without_cuda_and_vllm()
    from vllm import LLM

    from magnetsdk import Magnet
    from magnetsdk.model_dir import read_manifest
    from magnetsdk.st_layout import STOCK, instruction_prompt

    magnet = Magnet.from_pretrained(device="cuda", dtype="float32")
    saved = magnet.save(tmp_path / "served")
    assert read_manifest(saved).sentence_transformers == STOCK
    texts = ["A man is playing a guitar.", "The weather is lovely today.", "Kids play football in the park."]
    expected = magnet.encode(texts)
    del magnet
    llm = LLM(
        model=str(saved), runner="pooling", dtype="float32", enforce_eager=True, gpu_memory_utilization=0.3
    )
    prompt = instruction_prompt(Magnet.from_pretrained(saved, device="cpu").config.instruction)
    outputs = llm.embed([prompt + t for t in texts])
    served = np.array([o.outputs.embedding for o in outputs], dtype=np.float32)
    assert served.shape == expected.shape
    np.testing.assert_allclose(served, expected, atol=2e-3)
