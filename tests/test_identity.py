"""The model identity an index checks covers everything that changes vectors.

Shift, echo, pooling, attention, and for a merged saved model a hash of its weights: two
fine-tunes of one base saved as full models must not open each other's index.
"""

from __future__ import annotations

import pytest
import torch

from magnetsdk import Index, Magnet
from magnetsdk.attention import AttentionMode
from magnetsdk.config import Pooling
from magnetsdk.index.errors import IndexMismatchError
from magnetsdk.testing import tiny_magnet

TEXTS = ["the cat sat on the mat", "a dog runs in the park", "rain fell all night"]


def index_of(magnet, directory):
    with Index.create(directory, magnet) as index:
        index.add(TEXTS)
        index.save()
    return directory


def reopen(directory, magnet):
    with Index.open(directory, magnet):
        pass


def changed(setting: str) -> Magnet:
    magnet = tiny_magnet("llama")
    if setting == "shift":
        magnet.fit_principal_component(TEXTS, mode="remove")
    elif setting == "echo":
        magnet.config.echo = True
    elif setting == "pooling":
        magnet.config.pooling = Pooling.MEAN
    elif setting == "attention":
        magnet.config.encode_attention = AttentionMode.CAUSAL
    return magnet


@pytest.mark.parametrize("setting", ["shift", "echo", "pooling", "attention"])
def test_each_vector_setting_is_part_of_the_identity(setting, tmp_path):
    base = tiny_magnet("llama")
    other = changed(setting)
    assert base.identity != other.identity
    directory = index_of(base, tmp_path / "index")
    reopen(directory, tiny_magnet("llama"))  # the same model opens it
    with pytest.raises(IndexMismatchError, match="principal_shift|echo|pooling|encode_attention"):
        reopen(directory, other)


def test_two_fine_tunes_of_one_base_saved_as_full_models_differ(tmp_path):
    first, second = tiny_magnet("llama"), tiny_magnet("llama")
    with torch.no_grad():
        second.model.get_input_embeddings().weight[7] += 0.5  # a different fine-tune of the same base
    a = Magnet.from_pretrained(first.save(tmp_path / "a"))
    b = Magnet.from_pretrained(second.save(tmp_path / "b"))
    assert a.identity.model == b.identity.model and a.identity.adapter_sha256 == b.identity.adapter_sha256
    assert a.identity.weights_sha256 and a.identity.weights_sha256 != b.identity.weights_sha256
    directory = index_of(a, tmp_path / "index")
    reopen(directory, Magnet.from_pretrained(tmp_path / "a"))
    with pytest.raises(IndexMismatchError, match="weights_sha256"):
        reopen(directory, b)


def test_identities_recorded_before_the_new_fields_still_match():
    magnet = tiny_magnet("llama")
    recorded = magnet.identity.to_dict()
    assert "echo" not in recorded and "weights_sha256" not in recorded  # unset: left out, as before
    magnet.config.echo = True
    assert magnet.identity.to_dict()["echo"] is True
