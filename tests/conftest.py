from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from magnetsdk.testing import _CORPUS, ARCHITECTURES, tiny_magnet, tiny_model, tiny_tokenizer

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo_script():
    """Loads a script of the repository (its path from the root, e.g. ``"scripts/ship_adapter.py"``)
    as a module, for tests of the functions inside it."""

    def load(relative: str):
        path = ROOT / relative
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # a dataclass of the script looks its module up
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture(scope="session", params=sorted(ARCHITECTURES))
def magnet(request):
    """A tiny adapted-config Magnet, once per architecture."""
    return tiny_magnet(request.param)


@pytest.fixture(scope="session")
def llama_magnet():
    return tiny_magnet("llama")


@pytest.fixture(scope="session")
def base_dir(tmp_path_factory):
    """A tiny Llama base model and its tokenizer saved as a plain Hugging Face directory (read-only)."""
    directory = tmp_path_factory.mktemp("tiny-base")
    tiny_model().save_pretrained(directory)
    tiny_tokenizer().save_pretrained(directory)
    return str(directory)


@pytest.fixture(scope="session")
def data_file(tmp_path_factory):
    """The tiny tokenizer's corpus as a training text file, one text per line."""
    path = tmp_path_factory.mktemp("data") / "text.txt"
    path.write_text("\n".join(sorted(set(_CORPUS))) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for a module: tiny matrices on a shared 2-core machine run ~10x faster."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _small_train_config(tmp_path, base_model, data_file, **overrides):
    """A few steps of tiny training under ``tmp_path / "run"``; ``overrides`` win."""
    from magnetsdk.train.config import TrainConfig

    settings = dict(
        base_model=base_model,
        data=[data_file],
        output_dir=str(tmp_path / "run"),
        max_steps=4,
        batch_size=4,
        max_length=32,
        sscl_max_length=48,
        warmup_steps=1,
        save_every=2,
        learning_rate=5e-3,
        progress=False,
        positives="dropout",  # no generation pass in these tests (the paraphrase test sets its own)
        threads=1,
    )
    return TrainConfig(**{**settings, **overrides})


@pytest.fixture(scope="session")
def train_config():
    """``train_config(tmp_path, base_model, data_file, **overrides)``: the training tests' small config."""
    return _small_train_config


def _lm_batch(tokenizer, settings, texts, seed: int = 0):
    """The collated LM rows of ``texts`` under ``settings`` (example ``i`` drawn with ``example_rng(seed, i)``)."""
    from magnetsdk.train.collate import build_lm_example, collate_lm
    from magnetsdk.train.masking import example_rng

    from magnetsdk.encoding import special_prefix
    from magnetsdk.layout import resolve_layout_tokens

    layout, _ = resolve_layout_tokens(tokenizer)
    prefix = special_prefix(tokenizer)
    examples = [
        build_lm_example(
            tokenizer(t, add_special_tokens=False)["input_ids"],
            layout,
            prefix,
            tokenizer.eos_token_id,
            len(tokenizer),
            settings,
            example_rng(seed, i),
        )
        for i, t in enumerate(texts)
    ]
    return collate_lm(examples, tokenizer.pad_token_id)


@pytest.fixture(scope="session")
def lm_batch():
    """``lm_batch(tokenizer, settings, texts, seed=0)``: the objective tests' collated LM rows."""
    return _lm_batch
