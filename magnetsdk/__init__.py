"""magnetsdk: one decoder LLM that embeds, infills and generates (MAGNET).

``import magnetsdk`` stays light: torch and transformers load when a model does, and faiss,
peft, accelerate, sentence-transformers and matplotlib only where they are used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = [
    "Magnet",
    "MagnetConfig",
    "AttentionMode",
    "Pooling",
    "InfillResult",
    "ModelNotFoundError",
    "Index",
]

if TYPE_CHECKING:
    from magnetsdk.attention import AttentionMode
    from magnetsdk.config import MagnetConfig, Pooling
    from magnetsdk.index import Index
    from magnetsdk.infilling import InfillResult
    from magnetsdk.loading import ModelNotFoundError
    from magnetsdk.magnet import Magnet

_LAZY = {
    "Magnet": "magnetsdk.magnet",
    "MagnetConfig": "magnetsdk.config",
    "Pooling": "magnetsdk.config",
    "AttentionMode": "magnetsdk.attention",
    "InfillResult": "magnetsdk.infilling",
    "ModelNotFoundError": "magnetsdk.loading",
    "Index": "magnetsdk.index",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'magnetsdk' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
