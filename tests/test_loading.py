"""Finding and loading models: local directories, adapters, configs, and clear errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from magnetsdk import Magnet, MagnetConfig, ModelNotFoundError
from magnetsdk.config import CONFIG_NAME, FORMAT_VERSION
from magnetsdk.loading import magnet_home, pick_dtype, resolve
from magnetsdk.testing import tiny_model


def test_plain_directory_loads_as_an_unadapted_model(base_dir):
    magnet = Magnet.from_pretrained(base_dir, device="cpu")
    assert magnet.model.dtype == torch.float32
    assert not magnet.config.adapted
    assert magnet.config.encode_attention.value == "causal" and magnet.config.pooling.value == "mean"
    assert magnet.encode(["hello"]).shape == (1, 64)
    assert magnet.info()["modes"] == {"encode": True, "infill": True, "generate": True}


def test_adapter_directory_loads_base_and_merges_the_adapter(base_dir, tmp_path):
    from peft import LoraConfig, get_peft_model

    base = tiny_model("llama")
    lora = get_peft_model(
        base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    )
    adapter_dir = tmp_path / "adapter"
    lora.save_pretrained(adapter_dir)
    MagnetConfig(base_model=str(base_dir), pooling="last").save(adapter_dir)

    magnet = Magnet.from_pretrained(adapter_dir, device="cpu")
    assert magnet.config.adapted and magnet.config.encode_attention.value == "bidirectional"
    assert magnet.identity.adapter == str(adapter_dir) and len(magnet.identity.adapter_sha256) == 64
    plain = Magnet.from_pretrained(base_dir, device="cpu")
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        merged = magnet.model(input_ids=ids).logits
        unmerged = lora.eval()(input_ids=ids).logits
        untouched = plain.model(input_ids=ids).logits
    torch.testing.assert_close(merged, unmerged, atol=1e-4, rtol=1e-4)
    assert not torch.allclose(merged, untouched, atol=1e-4)
    # The same adapter given explicitly to the base gives the same model.
    explicit = Magnet.from_pretrained(base_dir, adapter=adapter_dir, device="cpu")
    np.testing.assert_allclose(explicit.encode(["a b c"]), magnet.encode(["a b c"]), atol=1e-5)


def test_default_names_pick_the_shipped_adapter_or_the_bare_base(base_dir, tmp_path, monkeypatch):
    # "default" is the embedded base plus the adapter shipped in the package, "default-base" the
    # base alone. The embedded GGUF is replaced by the tiny base so the test needs no real model.
    from peft import LoraConfig, get_peft_model

    from magnetsdk import loading

    monkeypatch.setattr(loading, "convert_gguf", lambda gguf, cache_root=None: base_dir)
    monkeypatch.setattr(loading, "default_gguf_path", lambda: tmp_path / "embedded.gguf")
    shipped = tmp_path / "adapters" / "default"
    monkeypatch.setattr(loading, "SHIPPED_ADAPTER", shipped)
    assert resolve(None).adapter is None  # a package without a shipped adapter serves the bare base

    lora = get_peft_model(
        tiny_model("llama"), LoraConfig(r=4, target_modules=["q_proj"], init_lora_weights=False)
    )
    lora.save_pretrained(shipped)
    MagnetConfig(base_model="default", pooling="last", adapted=True).save(shipped)
    adapted, bare = resolve(None), resolve("default-base")
    assert adapted.adapter == shipped and adapted.config.adapted and resolve("default").adapter == shipped
    assert bare.adapter is None and bare.config is None and bare.base == adapted.base
    # A model trained from "default" names its base "default": that resolves to the bare weights.
    trained = tmp_path / "trained"
    lora.save_pretrained(trained)
    MagnetConfig(base_model="default", pooling="last", adapted=True).save(trained)
    assert resolve(trained).base == str(base_dir) and resolve(trained).adapter == trained


def test_adapter_without_base_model_says_what_to_do(tmp_path):
    (tmp_path / "adapter_config.json").write_text("{}")
    with pytest.raises(ModelNotFoundError, match="adapter=") as error:
        Magnet.from_pretrained(tmp_path)
    assert CONFIG_NAME in str(error.value)


def test_unknown_name_lists_what_was_tried(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError) as error:
        resolve("no-such-org/no-such-model")
    message = str(error.value)
    assert "local directory" in message and "Hugging Face id" in message and "default" in message
    with pytest.raises(ModelNotFoundError, match="GGUF file"):
        resolve(tmp_path / "missing.gguf")
    with pytest.raises(ModelNotFoundError, match="neither a model"):
        resolve(tmp_path)
    with pytest.raises(FileNotFoundError, match="adapter directory"):
        Magnet.from_pretrained(tmp_path, adapter=tmp_path / "nope")


def test_magnet_home(monkeypatch, tmp_path):
    monkeypatch.setenv("MAGNET_HOME", str(tmp_path))
    assert magnet_home() == tmp_path
    monkeypatch.delenv("MAGNET_HOME")
    assert magnet_home().name == "magnetsdk"


def test_dtype_choices():
    assert pick_dtype("auto", torch.device("cpu")) == torch.float32
    assert pick_dtype("auto", torch.device("cuda")) == torch.bfloat16
    with pytest.raises(ValueError, match="dtype='int8'"):
        pick_dtype("int8", torch.device("cpu"))


def test_config_round_trip_and_versions(tmp_path):
    config = MagnetConfig(
        base_model="x", instruction="Find it:", layout_tokens={"mask": "<m>"}, training={"steps": 3}
    )
    config.save(tmp_path)
    assert MagnetConfig.load(tmp_path) == config
    assert not list(tmp_path.glob("*.tmp"))  # the atomic write left nothing behind
    assert (tmp_path / CONFIG_NAME).stat().st_mode & 0o044  # readable by others, as any saved file
    data = json.loads((tmp_path / CONFIG_NAME).read_text())
    data["format_version"] = FORMAT_VERSION + 1
    (tmp_path / CONFIG_NAME).write_text(json.dumps(data))
    with pytest.raises(ValueError, match="upgrade magnetsdk"):
        MagnetConfig.load(tmp_path)
    (tmp_path / CONFIG_NAME).write_text('{"pooling": "max"}')
    with pytest.raises(ValueError, match=r"pooling='max' is not one of \['last', 'mean'\]"):
        MagnetConfig.load(tmp_path)
    (tmp_path / CONFIG_NAME).write_text('{"colour": 1}')
    with pytest.raises(ValueError, match="unknown keys"):
        MagnetConfig.load(tmp_path)
    (tmp_path / CONFIG_NAME).write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        MagnetConfig.load(tmp_path)


def test_only_expected_hub_errors_mean_not_found(monkeypatch):
    """Not in the cache or not a valid id: ModelNotFoundError with the reason. Anything else is a bug
    or a broken environment, and comes through with its own message."""
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    def missing(name, local_files_only):
        raise LocalEntryNotFoundError(f"{name} is not in the cache")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", missing)
    with pytest.raises(ModelNotFoundError, match="LocalEntryNotFoundError: org/model is not in the cache"):
        resolve("org/model")

    def broken(name, local_files_only):
        raise RuntimeError("the cache index is corrupt")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", broken)
    with pytest.raises(RuntimeError, match="the cache index is corrupt"):
        resolve("org/model")


def test_a_stored_base_named_default_is_the_bare_embedded_base(base_dir, tmp_path, monkeypatch):
    """ "default" names base + shipped adapter; an adapter that names it as its base stacks on the
    base weights only, and training's default base is "default-base"."""
    from magnetsdk.train.config import TrainConfig

    from magnetsdk import loading

    monkeypatch.setattr(loading, "convert_gguf", lambda gguf, cache_root=None: base_dir)
    monkeypatch.setattr(loading, "default_gguf_path", lambda: tmp_path / "embedded.gguf")
    assert TrainConfig(data=["a.txt"]).base_model == loading.EMBEDDED_BASE
    assert resolve(loading.EMBEDDED_BASE).adapter is None
