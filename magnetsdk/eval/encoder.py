"""What the embedding tasks embed with: a :class:`magnetsdk.Magnet` or a sentence-transformers model.

Both are wrapped as a :class:`SentenceEncoder` (texts in, float32 ``(n, d)`` out, plus an identity
for the result file), so ``magnet eval sts`` can score a reference sentence-transformers model with
exactly the code that scores a Magnet. sentence-transformers is imported only when such a model is
loaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np


class SentenceEncoder(Protocol):
    def encode_texts(self, texts: list[str], batch_size: int, show_progress: bool) -> np.ndarray: ...

    def identity(self) -> dict[str, Any]: ...


@dataclass
class MagnetEncoder:
    """A Magnet with the encode options of one evaluation (``None`` means the model's own)."""

    magnet: Any  # magnetsdk.Magnet
    instruction: str | None = None
    pooling: str | None = None
    attention: str | None = None
    max_length: int | None = None
    echo: bool | None = None

    def encode_texts(self, texts: list[str], batch_size: int = 32, show_progress: bool = False) -> np.ndarray:
        return self.magnet.encode(
            texts,
            instruction=self.instruction,
            batch_size=batch_size,
            normalize=True,
            max_length=self.max_length,
            pooling=self.pooling,
            attention=self.attention,
            show_progress=show_progress,
            echo=self.echo,
        )

    def identity(self) -> dict[str, Any]:
        return self.magnet.identity.to_dict()

    def settings(self) -> dict[str, Any]:
        """The encode options actually used (the model's defaults filled in)."""
        config = self.magnet.config
        return {
            "instruction": config.instruction if self.instruction is None else self.instruction,
            "pooling": self.pooling or config.pooling.value,
            "attention": self.attention or config.encode_attention.value,
            "max_length": self.max_length or config.max_length,
            "echo": config.echo if self.echo is None else self.echo,
        }


@dataclass
class SentenceTransformerEncoder:
    """A sentence-transformers model, encoded the way its own evaluators encode it."""

    model: Any  # sentence_transformers.SentenceTransformer
    path: str

    def encode_texts(self, texts: list[str], batch_size: int = 32, show_progress: bool = False) -> np.ndarray:
        vectors = self.model.encode(
            texts, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=show_progress
        )
        return np.asarray(vectors, dtype=np.float32)

    def identity(self) -> dict[str, Any]:
        return {
            "model": self.path,
            "adapter": None,
            "kind": "sentence-transformers",
            "dimension": int(self.model.get_embedding_dimension()),
        }

    def settings(self) -> dict[str, Any]:
        return {"encoder": "sentence-transformers", "max_seq_length": self.model.max_seq_length}


def is_sentence_transformers_dir(path: str | None) -> bool:
    """A saved sentence-transformers model is a directory with ``modules.json``.

    A magnetsdk model directory (``magnet_config.json``) has one too, but is evaluated as a Magnet:
    the same vectors, without going through sentence-transformers.
    """
    if path is None:
        return False
    directory = Path(path).expanduser()
    return (directory / "modules.json").is_file() and not (directory / "magnet_config.json").is_file()


def load_sentence_transformer(path: str, device: str = "auto") -> SentenceTransformerEncoder:
    from sentence_transformers import SentenceTransformer

    resolved = str(Path(path).expanduser())
    model = SentenceTransformer(resolved, device=None if device == "auto" else device)
    return SentenceTransformerEncoder(model=model, path=resolved)
