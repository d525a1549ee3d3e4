"""magnetsdk.train: MAGNET adaptation of a decoder (hybrid mask, three objectives, LoRA).

Training uses the same forward function (:mod:`magnetsdk.forward`), attention masks
(:mod:`magnetsdk.attention`) and token layout (:mod:`magnetsdk.layout`) as serving.

    from magnetsdk.train import TrainConfig, train
    train(TrainConfig(data=["notes.txt"], output_dir="runs/mine", max_steps=500))

One concept per module: ``config`` and ``recipes`` (settings), ``data`` (files, order),
``views`` (contrastive positives), ``masking`` (what is hidden), ``collate`` (layout into
tensors), ``batches`` (the micro-batch of a step), ``objectives`` (the losses), ``adaptation``
(LoRA or full), ``checkpoint``, ``metrics``, ``export``, and ``trainer`` (the loop).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["TrainConfig", "TrainResult", "NonFiniteLossError", "train"]

if TYPE_CHECKING:
    from magnetsdk.train.config import TrainConfig
    from magnetsdk.train.trainer import NonFiniteLossError, TrainResult, train

_LAZY = {
    "TrainConfig": "magnetsdk.train.config",
    "TrainResult": "magnetsdk.train.trainer",
    "NonFiniteLossError": "magnetsdk.train.trainer",
    "train": "magnetsdk.train.trainer",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'magnetsdk.train' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
