"""Semantic alignment of embeddings with the LM head (Nie et al., ACL 2025).

Two findings about decoder-based embedders, and the tools built on them:

- An embedding projected through the LM head puts its probability on the *key tokens* of the text:
  :func:`key_tokens` returns them, which explains what an embedding encodes.
- The first principal component of a model's embeddings carries much of what they share; moving
  along it, ``e + lambda * v1``, or removing it, ``e - (e . v1) v1``, changes how similarities spread.
  :class:`PrincipalShift` is fitted once on a sample corpus and stored with the model as
  ``principal_component.safetensors`` (one writer, one reader, here). Its metadata carries a
  ``format_version``; files written before it had none and read as version 1.

This module works on hidden states and vectors; :class:`magnetsdk.Magnet` feeds it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import numpy as np
import torch

PC_FILE = "principal_component.safetensors"
PC_FORMAT_VERSION = 1  # metadata: mode, weight (JSON), samples; tensor "component" (d,) float32


class ShiftMode(str, Enum):
    SHIFT = "shift"  # e + lambda * v1
    REMOVE = "remove"  # e - (e . v1) v1


@dataclass
class PrincipalShift:
    """The first principal component ``v1`` (unit length) of a sample of embeddings, and how to apply it."""

    component: np.ndarray  # (d,)
    mode: ShiftMode = ShiftMode.SHIFT
    weight: float = 1.0  # lambda, for mode="shift"
    samples: int = 0

    def __post_init__(self) -> None:
        self.mode = ShiftMode(self.mode)
        self.component = np.asarray(self.component, dtype=np.float32)
        norm = float(np.linalg.norm(self.component))
        if self.component.ndim != 1 or norm == 0:
            raise ValueError("the principal component must be a non-zero vector")
        if abs(norm - 1.0) > 1e-6:
            self.component = self.component / norm

    @classmethod
    def fit(
        cls, vectors: np.ndarray, mode: ShiftMode | str = ShiftMode.SHIFT, weight: float = 1.0
    ) -> PrincipalShift:
        """Fit ``v1`` on ``vectors`` (n, d), n >= 2. Its sign is fixed to point along the mean embedding."""
        vectors = np.asarray(vectors, dtype=np.float64)
        if vectors.ndim != 2 or vectors.shape[0] < 2:
            raise ValueError(
                f"need at least 2 embeddings of shape (n, d) to fit a component, got {vectors.shape}"
            )
        mean = vectors.mean(axis=0)
        _, _, vt = np.linalg.svd(vectors - mean, full_matrices=False)
        component = vt[0]
        if component @ mean < 0:
            component = -component
        return cls(component.astype(np.float32), ShiftMode(mode), weight, samples=vectors.shape[0])

    def describe(self) -> str:
        """A short identity: the mode, the weight and a hash of the component."""
        import hashlib

        digest = hashlib.sha256(self.component.tobytes()).hexdigest()[:12]
        return f"shift:{self.weight:g}:{digest}" if self.mode is ShiftMode.SHIFT else f"remove:{digest}"

    def apply(self, vectors):
        """Shift or remove the component in un-normalised embeddings (n, d): numpy or torch."""
        if isinstance(vectors, torch.Tensor):
            v1 = torch.as_tensor(self.component, device=vectors.device, dtype=vectors.dtype)
        else:
            vectors = np.asarray(vectors, dtype=np.float32)
            v1 = self.component
        if self.mode is ShiftMode.SHIFT:
            return vectors + self.weight * v1
        return vectors - (vectors @ v1)[:, None] * v1

    def save(self, directory: str | os.PathLike) -> Path:
        from safetensors.numpy import save_file

        path = Path(directory) / PC_FILE
        tmp = path.with_name(path.name + ".tmp")
        metadata = {
            "format_version": str(PC_FORMAT_VERSION),
            "mode": self.mode.value,
            "weight": json.dumps(self.weight),
            "samples": str(self.samples),
        }
        save_file({"component": self.component}, str(tmp), metadata=metadata)
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, directory: str | os.PathLike) -> PrincipalShift | None:
        """The stored component of a model directory, or None when it has none."""
        from safetensors import safe_open

        path = Path(directory) / PC_FILE
        if not path.is_file():
            return None
        with safe_open(str(path), framework="numpy") as handle:
            metadata = handle.metadata() or {}
            if "component" not in handle.keys():  # noqa: SIM118 - safe_open has no __contains__
                raise ValueError(f"{path} holds no 'component' tensor; re-fit it with `magnet shift`")
            component = handle.get_tensor("component")
        version = metadata.get("format_version", "1")  # files written before versions are version 1
        if not version.isdigit() or int(version) > PC_FORMAT_VERSION:
            raise ValueError(
                f"{path} has format_version {version!r}, newer than this magnetsdk reads "
                f"({PC_FORMAT_VERSION}); upgrade magnetsdk"
            )
        return cls(
            component,
            ShiftMode(metadata.get("mode", "shift")),
            float(json.loads(metadata.get("weight", "1.0"))),
            int(metadata.get("samples", "0")),
        )


def key_tokens(
    lm_head: torch.nn.Module, embeddings: torch.Tensor, tokenizer, k: int, skip_ids: set[int] | None = None
) -> list[list[tuple[str, float]]]:
    """The ``k`` most probable tokens of each embedding (b, d) under the LM head, with probabilities.

    Special tokens (``skip_ids``) are left out: they say nothing about the text.
    """
    if k < 1:
        raise ValueError(f"k={k} must be at least 1")
    logits = lm_head(embeddings).float()  # (b, V)
    if skip_ids:
        logits[:, sorted(skip_ids)] = float("-inf")
    probs = torch.softmax(logits, dim=-1)
    top = probs.topk(min(k, probs.shape[-1]), dim=-1)
    return [
        [(tokenizer.decode([i]), float(p)) for i, p in zip(ids.tolist(), values.tolist(), strict=True)]
        for ids, values in zip(top.indices, top.values, strict=True)
    ]
