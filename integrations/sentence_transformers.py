"""A magnetsdk model as a sentence-transformers model: the ``MagnetModule`` input module.

``magnetsdk.integrations.sentence_transformers.MagnetModule`` is written into ``modules.json``
by every saved model directory, so that import path and the class's ``load``/``save`` contract
are frozen public API. A saved directory holds one model that both loaders read:

- ``config.json`` + ``model.safetensors`` (merged weights), the tokenizer, ``magnet_config.json``:
  what :meth:`magnetsdk.Magnet.from_pretrained` reads (and what ``MagnetModule`` loads through it);
- ``modules.json`` (``MagnetModule``, then sentence-transformers' own ``Normalize``),
  ``config_sentence_transformers.json`` and ``1_Normalize/``: what ``SentenceTransformer`` reads.

:meth:`magnetsdk.Magnet.save` writes such a directory (:func:`save_model_directory`);
:func:`write_sentence_transformers_files` adds the sentence-transformers files to a directory that
already holds a magnetsdk model, e.g. a training run's adapter directory (peft adapter +
``magnet_config.json`` naming its base model), which ``MagnetModule`` then loads with its base.

The module runs the same code as :meth:`magnetsdk.Magnet.encode`: :func:`magnetsdk.encoding.prepare`
tokenizes (instruction prefix, EOS, truncation), :func:`magnetsdk.forward.run_decoder` runs the
model's encoding attention mode and :func:`magnetsdk.encoding.pool` pools; ``Normalize`` then does
what ``normalize=True`` does. It keeps no settings of its own: ``magnet_config.json`` is its config.

Prompts. A sentence-transformers prompt *replaces* the model's instruction; the module takes the
prompt in ``preprocess`` so sentence-transformers does not also prepend it to the text. An empty
prompt (sentence-transformers' value for "no prompt", e.g. the default ``"query"`` prompt used by
``encode_query``) keeps the model's instruction. Trailing whitespace is dropped from a prompt,
because the encoder puts exactly one space between the instruction and the text:
``encode(x, prompt="query: ")`` equals ``Magnet.encode(x, instruction="query:")``.

Loading needs ``trust_remote_code=True``: since sentence-transformers 6.0 any module class outside
the ``sentence_transformers`` package needs it, local directories included. With this class it
imports the installed ``magnetsdk`` package; no code is read from the model directory (its dotted
path is not a repository-local file reference). ``Magnet.to_sentence_transformer()`` needs no flag.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import sentence_transformers
import torch
import transformers
from sentence_transformers import SentenceTransformer
from sentence_transformers.base.modules import InputModule, Normalize

from magnetsdk.attention import AttentionMode
from magnetsdk.config import CONFIG_NAME, atomic_write_text, current_umask
from magnetsdk.encoding import EncodeInput, pad_batch, pool, prepare
from magnetsdk.forward import run_decoder
from magnetsdk.magnet import Magnet

__all__ = [
    "MODULE_TYPE",
    "MagnetModule",
    "magnet_of",
    "save_model_directory",
    "to_sentence_transformer",
    "write_sentence_transformers_files",
]

# What modules.json says: frozen, every saved model directory names this class by this path.
MODULE_TYPE = "magnetsdk.integrations.sentence_transformers.MagnetModule"

# The model_kwargs that MagnetModule.load passes on to Magnet.from_pretrained.
_MODEL_KWARGS = ("dtype", "torch_dtype", "attn_implementation")


class MagnetModule(InputModule):
    """Tokenize with the model's instruction, run its encoding attention mode, pool.

    Wraps a :class:`magnetsdk.Magnet` without copying it: the decoder is registered as this
    module's submodule, so moving or casting the sentence-transformers model moves the Magnet's
    model too. Outputs ``token_embeddings`` (b, n, d) and ``sentence_embedding`` (b, d, float32).
    Its forward takes the Magnet's lock, so it may run while other threads use the same Magnet.
    """

    config_file_name = CONFIG_NAME  # the module's settings are the model's magnet_config.json
    config_keys: list[str] = []
    save_in_root = True

    def __init__(self, magnet: Magnet) -> None:
        super().__init__()
        if not isinstance(magnet, Magnet):
            raise TypeError(
                f"MagnetModule wraps a magnetsdk.Magnet, got {type(magnet).__name__}; "
                "load one with magnetsdk.Magnet.from_pretrained(...)"
            )
        self.magnet = magnet
        self.model = magnet.model  # registered submodule: the same tensors, no copy
        self.tokenizer = magnet.tokenizer

    # ------------------------------------------------------------------ facts

    @property
    def max_seq_length(self) -> int:
        """Tokens per text including the instruction and EOS; shared with the Magnet's config."""
        return self.magnet.config.max_length

    @max_seq_length.setter
    def max_seq_length(self, value: int) -> None:
        if not isinstance(value, int) or value < 8:
            raise ValueError(f"max_seq_length={value!r} must be an int of at least 8 tokens")
        self.magnet.config.max_length = value

    def get_embedding_dimension(self) -> int:
        return self.magnet.dimension

    def instruction_for(self, prompt: str | None) -> str:
        """The instruction a text is encoded with under a sentence-transformers ``prompt``."""
        if prompt is None or not prompt.strip():
            return self.magnet.config.instruction
        return prompt.rstrip()

    # ------------------------------------------------------------------ encode

    def preprocess(
        self, inputs: Sequence[Any], prompt: str | None = None, **kwargs: Any
    ) -> dict[str, torch.Tensor]:
        """Tokenize texts as ``[BOS] instruction " " text EOS``, right-padded.

        ``kwargs`` (e.g. ``task``) are accepted and ignored: a Magnet encodes one way.
        """
        texts = list(inputs)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                # ValueError, not TypeError: sentence-transformers retries a TypeError with the
                # prompt glued onto the text, which would hide this message behind a second failure.
                raise ValueError(
                    f"inputs[{i}] is {type(text).__name__}; a magnetsdk model encodes text only "
                    "(one string per input, no pairs, images or messages)"
                )
        prepared = prepare(
            self.tokenizer,
            texts,
            self.instruction_for(prompt),
            self.max_seq_length,
            echo=self.magnet.config.echo,
        )
        # The pad id Magnet.encode pads with (padding is masked out; the id only has to be valid).
        ids, valid = pad_batch([p.ids for p in prepared], self.magnet.pad_id, torch.device("cpu"))
        return {
            "input_ids": ids,  # (b, n)
            "attention_mask": valid.long(),  # (b, n)
            "text_start": torch.tensor([p.text_start for p in prepared]),  # (b,)
            "text_end": torch.tensor([p.text_end for p in prepared]),  # (b,)
        }

    def forward(self, features: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        ids, valid = features["input_ids"], features["attention_mask"].bool()
        mode = AttentionMode(self.magnet.config.encode_attention)
        with self.magnet.lock:
            hidden = run_decoder(self.model, ids, valid, mode).hidden  # (b, n, d)
        lengths = valid.sum(dim=1).tolist()
        batch = [
            EncodeInput(ids[row, :length].tolist(), int(start), int(end))
            for row, (length, start, end) in enumerate(
                zip(lengths, features["text_start"].tolist(), features["text_end"].tolist(), strict=True)
            )
        ]
        features["token_embeddings"] = hidden
        embedding = pool(hidden, batch, self.magnet.config.pooling).float()  # (b, d)
        if self.magnet.principal_shift is not None:
            embedding = self.magnet.principal_shift.apply(embedding)
        features["sentence_embedding"] = embedding
        return features

    # ------------------------------------------------------------------ disk

    def save(self, output_path: str, *args: Any, safe_serialization: bool = True, **kwargs: Any) -> None:
        """Write merged safetensors weights, the tokenizer and ``magnet_config.json``."""
        if not safe_serialization:
            raise ValueError(
                "magnetsdk saves weights as safetensors only (no pickle); call save() without "
                "safe_serialization=False"
            )
        self.model.save_pretrained(output_path, safe_serialization=True)
        self.tokenizer.save_pretrained(output_path)
        self.magnet.config.save(output_path)
        if self.magnet.principal_shift is not None:
            self.magnet.principal_shift.save(output_path)

    @classmethod
    def load(
        cls,
        model_name_or_path: str,
        subfolder: str = "",
        token: bool | str | None = None,
        cache_folder: str | None = None,
        revision: str | None = None,
        local_files_only: bool = False,
        model_kwargs: dict[str, Any] | None = None,
        backend: str = "torch",
        **kwargs: Any,
    ) -> MagnetModule:
        """Load through :meth:`magnetsdk.Magnet.from_pretrained`, on the CPU in float32 by default.

        sentence-transformers then moves the model to its device. ``model_kwargs`` may set
        ``dtype`` (or ``torch_dtype``) and ``attn_implementation`` (``sdpa`` or ``eager`` for the
        bidirectional and hybrid modes).
        """
        if backend != "torch":
            raise ValueError(f"backend={backend!r}: a magnetsdk model runs on the 'torch' backend only")
        model_kwargs = dict(model_kwargs or {})
        unknown = sorted(set(model_kwargs) - set(_MODEL_KWARGS))
        if unknown:
            raise ValueError(
                f"model_kwargs {unknown} are not supported by MagnetModule; supported: {list(_MODEL_KWARGS)}"
            )
        directory = cls.load_dir_path(
            model_name_or_path,
            subfolder=subfolder,
            token=token,
            cache_folder=cache_folder,
            revision=revision,
            local_files_only=local_files_only,
        )
        if directory is None or not (Path(directory) / CONFIG_NAME).is_file():
            raise FileNotFoundError(
                f"{model_name_or_path} has no {CONFIG_NAME}: it is not a magnetsdk model directory; "
                "write one with magnetsdk.Magnet.from_pretrained(...).save(DIR)"
            )
        dtype = model_kwargs.get("dtype", model_kwargs.get("torch_dtype", torch.float32))
        magnet = Magnet.from_pretrained(
            directory,
            device="cpu",
            dtype="float32" if dtype == "auto" else dtype,
            attn_implementation=model_kwargs.get("attn_implementation", "sdpa"),
        )
        return cls(magnet)

    def __repr__(self) -> str:
        config = self.magnet.config
        return (
            f"MagnetModule(model={self.magnet.name!r}, attention={config.encode_attention.value!r}, "
            f"pooling={config.pooling.value!r}, max_seq_length={config.max_length})"
        )


def to_sentence_transformer(
    magnet: Magnet,
    prompts: dict[str, str] | None = None,
    default_prompt_name: str | None = None,
    normalize: bool = True,
) -> SentenceTransformer:
    """Wrap an already-loaded Magnet as a ``SentenceTransformer`` sharing its weights.

    ``prompts`` (e.g. ``{"query": "Given a question, find passages that answer it:"}``) replace
    the model's instruction when selected with ``prompt_name=`` (see the module docstring).
    ``normalize=False`` leaves out the ``Normalize`` module (``Magnet.encode(normalize=False)``).
    """
    modules: list[torch.nn.Module] = [MagnetModule(magnet)]
    if normalize:
        modules.append(Normalize())
    return SentenceTransformer(
        modules=modules,
        device=str(magnet.device),  # stay where the Magnet is; the default would pick a device
        prompts=prompts,
        default_prompt_name=default_prompt_name,
        similarity_fn_name="cosine",
    )


def write_sentence_transformers_files(
    directory: str | os.PathLike,
    prompts: dict[str, str] | None = None,
    default_prompt_name: str | None = None,
    normalize: bool = True,
) -> None:
    """Make a magnetsdk model directory (full model or adapter) loadable by ``SentenceTransformer``.

    Writes ``config_sentence_transformers.json``, ``1_Normalize/`` and, last, ``modules.json``
    naming :class:`MagnetModule`. The model files themselves are left as they are: the module
    loads whatever :meth:`magnetsdk.Magnet.from_pretrained` loads from ``directory``.
    """
    directory = Path(directory)
    if not (directory / CONFIG_NAME).is_file():
        raise FileNotFoundError(
            f"{directory} has no {CONFIG_NAME}; write the model first (Magnet.save or training's export)"
        )
    prompts = {"query": "", "document": "", **(prompts or {})}
    for name, text in prompts.items():
        if not isinstance(text, str):
            raise TypeError(f"prompts[{name!r}] is {type(text).__name__}, expected str")
    if default_prompt_name is not None and default_prompt_name not in prompts:
        raise ValueError(f"default_prompt_name={default_prompt_name!r} is not one of {sorted(prompts)}")
    modules = [{"idx": 0, "name": "0", "path": "", "type": MODULE_TYPE}]
    if normalize:
        Path(directory / "1_Normalize").mkdir(exist_ok=True)
        Normalize().save(str(directory / "1_Normalize"))
        modules.append({"idx": 1, "name": "1", "path": "1_Normalize", "type": _class_path(Normalize)})
    settings = {
        "model_type": "SentenceTransformer",
        "__version__": {
            "sentence_transformers": sentence_transformers.__version__,
            "transformers": transformers.__version__,
            "pytorch": torch.__version__,
        },
        "prompts": prompts,
        "default_prompt_name": default_prompt_name,
        "similarity_fn_name": "cosine",
    }
    atomic_write_text(directory / "config_sentence_transformers.json", json.dumps(settings, indent=2) + "\n")
    atomic_write_text(directory / "modules.json", json.dumps(modules, indent=2) + "\n")


def save_model_directory(
    magnet: Magnet,
    directory: str | os.PathLike,
    overwrite: bool = False,
    prompts: dict[str, str] | None = None,
    default_prompt_name: str | None = None,
) -> Path:
    """Write ``magnet`` to ``directory`` for both ``Magnet.from_pretrained`` and ``SentenceTransformer``.

    The directory is written under a temporary name beside the target and renamed into place;
    an existing model directory is replaced only after the new one is complete. A non-empty
    directory that is not a magnetsdk model is refused unless ``overwrite=True``.
    """
    if magnet.config.mixture:
        raise ValueError(
            "a UBMoE expert mixture cannot be saved as merged weights (its two FFN experts and gates "
            "do not merge into one model); keep the directory `magnet ubmoe` wrote, which "
            "Magnet.from_pretrained loads"
        )
    target = Path(directory).expanduser()
    if target.exists():
        if not target.is_dir():
            raise FileExistsError(f"{target} exists and is a file; choose a directory path")
        is_model = (target / CONFIG_NAME).is_file()
        if any(target.iterdir()) and not is_model and not overwrite:
            raise FileExistsError(
                f"{target} is not empty and is not a magnetsdk model directory; choose another path "
                "or pass overwrite=True to replace its contents"
            )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    old: Path | None = None
    try:
        tmp.chmod(0o777 & ~current_umask())  # mkdtemp makes it owner-only; a model directory is not secret
        MagnetModule(magnet).save(str(tmp))
        write_sentence_transformers_files(tmp, prompts, default_prompt_name)
        if target.exists():
            # Linux cannot swap two directories in one rename: move the old one aside first, and
            # put it back if the second rename fails.
            old = target.with_name(f".{target.name}.old-{tmp.name}")
            os.replace(target, old)
        try:
            os.replace(tmp, target)
        except BaseException:
            if old is not None:
                os.replace(old, target)
                old = None
            raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return target


def _class_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def magnet_of(model: SentenceTransformer) -> Magnet:
    """The Magnet inside a sentence-transformers model built or loaded by this module."""
    first = model[0]
    if not isinstance(first, MagnetModule):
        raise TypeError(f"the model's first module is {type(first).__name__}, not MagnetModule")
    return first.magnet
