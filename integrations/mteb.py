"""A Magnet behind the model interface that MTEB runs (``mteb.models.EncoderProtocol``).

``mteb`` is imported only to build ``mteb_model_meta`` (it is in the ``dev`` and ``mteb`` extras,
not a runtime dependency). Named ``MTEBEncoder``: ``magnetsdk.eval.encoder.MagnetEncoder`` is the
evaluation suite's encoder, a different class. Both MTEB call styles work:

- mteb >= 2: ``encode(inputs, task_metadata=..., hf_split=..., hf_subset=..., prompt_type=...)``
  where ``inputs`` is an iterable of batches (``{"text": [...]}``, e.g. a ``DataLoader``);
- mteb 1.x: ``encode(sentences, task_name=..., prompt_type=..., batch_size=...)`` with a list.

Prompt types map to instructions: the encoder looks up, in this order, ``"TASK-query"``,
``"TASK"``, ``"TASKTYPE-query"``, ``"TASKTYPE"``, ``"query"`` (or ``"document"``) in its
``instructions`` and falls back to the model's own instruction. A value is used verbatim as the
instruction (``""`` encodes without one). MTEB's ``"passage"`` is read as ``"document"``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import torch

from magnetsdk.magnet import Magnet

__all__ = ["MTEBEncoder"]

_PROMPT_TYPES = {"query": "query", "document": "document", "passage": "document"}


class MTEBEncoder:
    """Encode for MTEB with a Magnet, choosing the instruction by task and prompt type.

    >>> encoder = MTEBEncoder(magnet, instructions={"query": "Given a question, find passages that answer it:"})
    >>> mteb.evaluate(encoder, tasks)  # when mteb is installed
    """

    def __init__(
        self,
        magnet: Magnet,
        instructions: Mapping[str, str] | None = None,
        batch_size: int = 32,
    ) -> None:
        if not isinstance(magnet, Magnet):
            raise TypeError(f"MTEBEncoder wraps a magnetsdk.Magnet, got {type(magnet).__name__}")
        self.magnet = magnet
        self.instructions = dict(instructions or {})
        for key, value in self.instructions.items():
            if not isinstance(value, str):
                raise TypeError(f"instructions[{key!r}] is {type(value).__name__}, expected str")
        self.batch_size = batch_size

    def instruction_for(
        self, task_name: str | None = None, task_type: str | None = None, prompt_type: Any = None
    ) -> str:
        """The instruction used for a task and prompt type (see the module docstring)."""
        kind = _prompt_type(prompt_type)
        keys = []
        for scope in (task_name, task_type):
            if scope:
                keys += [f"{scope}-{kind}", scope] if kind else [scope]
        if kind:
            keys.append(kind)
        for key in keys:
            if key in self.instructions:
                return self.instructions[key]
        return self.magnet.config.instruction

    def encode(
        self,
        inputs: Iterable[str] | Iterable[Mapping[str, Any]],
        *,
        task_metadata: Any = None,
        hf_split: str | None = None,
        hf_subset: str | None = None,
        prompt_type: Any = None,
        task_name: str | None = None,
        batch_size: int | None = None,
        show_progress_bar: bool | None = None,
        **kwargs: Any,
    ) -> np.ndarray:
        """Embed ``inputs``; returns float32 ``(n, d)``, L2-normalised (the model's default).

        Other keyword arguments MTEB passes (e.g. ``precision``) are accepted and ignored.
        """
        texts = _texts(inputs)
        name = task_name or getattr(task_metadata, "name", None)
        task_type = getattr(task_metadata, "type", None)
        return self.magnet.encode(
            texts,
            instruction=self.instruction_for(name, task_type, prompt_type),
            batch_size=batch_size or self.batch_size,
            show_progress=show_progress_bar,
        )

    def similarity(self, embeddings1: Any, embeddings2: Any) -> torch.Tensor:
        """Cosine similarity of every row of ``embeddings1`` with every row of ``embeddings2``."""
        a, b = _matrix(embeddings1), _matrix(embeddings2)
        return torch.nn.functional.normalize(a, dim=-1) @ torch.nn.functional.normalize(b, dim=-1).T

    def similarity_pairwise(self, embeddings1: Any, embeddings2: Any) -> torch.Tensor:
        """Cosine similarity of each row of ``embeddings1`` with the same row of ``embeddings2``."""
        a, b = _matrix(embeddings1), _matrix(embeddings2)
        return torch.nn.functional.cosine_similarity(a, b, dim=-1)

    @property
    def mteb_model_meta(self) -> Any:
        """``mteb.ModelMeta`` describing this model when mteb is installed, else ``None``."""
        try:
            from mteb.models.model_meta import ModelMeta, ScoringFunction
        except ImportError:
            return None
        identity = self.magnet.identity
        name = identity.model if "/" in identity.model else f"magnetsdk/{identity.model}"
        return ModelMeta.create_empty(
            overwrites={
                "name": name,
                "revision": (identity.adapter_sha256 or "no-adapter")[:12],
                "embed_dim": identity.dimension,
                "n_parameters": sum(p.numel() for p in self.magnet.model.parameters()),
                "max_tokens": self.magnet.config.max_length,
                "similarity_fn_name": ScoringFunction.COSINE,
                "framework": ["PyTorch"],
                "use_instructions": True,
            }
        )

    def __repr__(self) -> str:
        return f"MTEBEncoder({self.magnet!r}, instructions={sorted(self.instructions)})"


def _prompt_type(prompt_type: Any) -> str | None:
    if prompt_type is None:
        return None
    value = str(getattr(prompt_type, "value", prompt_type))
    if value not in _PROMPT_TYPES:
        raise ValueError(f"prompt_type={value!r} is not one of {sorted(_PROMPT_TYPES)}")
    return _PROMPT_TYPES[value]


def _texts(inputs: Any) -> list[str]:
    """A flat list of texts from a list of strings or an iterable of ``{"text": [...]}`` batches."""
    if isinstance(inputs, str):
        raise TypeError("inputs is one string; pass a list of strings or batches of {'text': [...]}")
    texts: list[str] = []
    for item in inputs:
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, Mapping) and "text" in item:
            texts.extend(item["text"])
        else:
            raise TypeError(
                f"cannot encode an input of type {type(item).__name__}; expected strings or batches "
                "with a 'text' column (MTEBEncoder encodes text only)"
            )
    return texts


def _matrix(embeddings: Any) -> torch.Tensor:
    tensor = torch.as_tensor(np.asarray(embeddings) if not torch.is_tensor(embeddings) else embeddings)
    tensor = tensor.float()
    return tensor.unsqueeze(0) if tensor.ndim == 1 else tensor
