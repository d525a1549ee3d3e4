"""A magnetsdk model as a sentence-transformers model: the ``MagnetModule`` input module.

Where the stock modules can encode like the model (last-token pooling, bidirectional or causal
attention, the instruction as a prompt, the principal shift as ``Dense``), :meth:`magnetsdk.Magnet.save`
writes the stock layout and ``SentenceTransformer(dir)`` needs nothing from here (see
:mod:`magnetsdk.model_dir`, which writes every model directory). This module is for the rest:

- ``magnetsdk.integrations.sentence_transformers.MagnetModule`` is written into ``modules.json``
  for echo embeddings, text-only mean pooling and adapter or expert-mixture directories, so that
  import path and the class's ``load``/``save`` contract are frozen public API. Loading such a
  directory needs ``trust_remote_code=True`` (sentence-transformers 6 asks it for any module class
  outside its package; the class is imported from the installed ``magnetsdk``, no code is read
  from the directory).
- :func:`to_sentence_transformer` (``Magnet.to_sentence_transformer``) wraps a loaded Magnet
  without copying its weights, for any encode settings, with no flag.

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
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.base.modules import InputModule, Normalize

from magnetsdk.attention import AttentionMode
from magnetsdk.config import CONFIG_NAME
from magnetsdk.encoding import EncodeInput, pad_batch, pool, prepare
from magnetsdk.forward import run_decoder
from magnetsdk.magnet import Magnet
from magnetsdk.model_dir import add_custom_sentence_transformers_files
from magnetsdk.st_layout import MAGNET_MODULE

__all__ = [
    "MODULE_TYPE",
    "MagnetModule",
    "magnet_of",
    "to_sentence_transformer",
    "write_sentence_transformers_files",
]

# What modules.json says: frozen, every directory in the magnetsdk layout names this class by this path.
MODULE_TYPE = MAGNET_MODULE

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
) -> Path:
    """Make a magnetsdk adapter or mixture directory loadable by ``SentenceTransformer`` (with
    ``trust_remote_code=True``): ``modules.json`` naming :class:`MagnetModule`, ``Normalize`` and the
    prompts. The model files are left as they are; ``MagnetModule`` loads whatever
    :meth:`magnetsdk.Magnet.from_pretrained` loads from ``directory``. (Training's export already
    writes these files; see :func:`magnetsdk.model_dir.add_custom_sentence_transformers_files`.)
    """
    return add_custom_sentence_transformers_files(directory, prompts, default_prompt_name)


def magnet_of(model: SentenceTransformer) -> Magnet:
    """The Magnet inside a sentence-transformers model built or loaded by this module."""
    first = model[0]
    if not isinstance(first, MagnetModule):
        raise TypeError(f"the model's first module is {type(first).__name__}, not MagnetModule")
    return first.magnet
