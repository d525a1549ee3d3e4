"""A small generation check during training: does the model still write, and write without looping?

Every ``eval_every`` steps the main process continues a few fixed held-out prefixes (the first
``prefix_tokens`` tokens of each text in ``eval_prefixes``) twice, with nucleus sampling (top-p
0.9, T 1.0, repetition penalty off, as ``magnet eval repetition``):

- ``eval_natural_tokens``: the mean continuation length when the model may stop (EOS allowed),
  up to ``eval_new_tokens``; a model that learned to stop after one sentence scores low;
- ``eval_rep4``: the mean rep-4 (``1 - unique 4-grams / 4-grams``) of continuations of exactly
  ``eval_new_tokens`` tokens (EOS held back), so lengths do not decide the figure.

Both go into ``metrics.jsonl`` beside the losses, so a run can be stopped or reweighted before it
drifts. The check runs in eval mode (no dropout) and restores the global random generators, so
it does not change the training run (a resumed run stays exact).

It knows nothing about losses, optimizers or data files other than its prefix file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from magnetsdk.eval.repetition import cut_prefixes, mean_defined, ngram_repetition
from magnetsdk.records import read_texts


@dataclass
class GenerationCheck:
    prefixes: list[str]
    new_tokens: int
    seed: int

    @classmethod
    def from_file(
        cls, path: str, tokenizer, new_tokens: int, seed: int, limit: int = 8, prefix_tokens: int = 32
    ) -> GenerationCheck:
        prefixes, skipped = cut_prefixes(tokenizer, read_texts(path, "prefix"), prefix_tokens, limit)
        if not prefixes:
            raise ValueError(
                f"eval_prefixes={path}: no text has {prefix_tokens} tokens ({skipped} shorter skipped); "
                "pass held-out paragraphs, one per line"
            )
        return cls(prefixes, new_tokens, seed)

    def __call__(self, model: torch.nn.Module, tokenizer, base_model: str) -> dict[str, Any]:
        from magnetsdk.config import MagnetConfig
        from magnetsdk.magnet import Magnet

        was_training = model.training
        devices = [model.device] if getattr(model, "device", torch.device("cpu")).type == "cuda" else []
        try:
            with torch.random.fork_rng(devices=devices):
                magnet = Magnet(model, tokenizer, MagnetConfig.for_base_model(base_model))  # sets eval()
                settings = dict(
                    max_new_tokens=self.new_tokens,
                    temperature=1.0,
                    top_p=0.9,
                    repetition_penalty=1.0,
                    seed=self.seed,
                    batch_size=len(self.prefixes),
                )
                natural = magnet.generate(self.prefixes, **settings)
                full = magnet.generate(self.prefixes, min_new_tokens=self.new_tokens, **settings)
        finally:
            model.train(was_training)
        count = lambda texts: [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]  # noqa: E731
        natural_tokens, full_tokens = count(natural), count(full)
        return {
            "eval_natural_tokens": float(np.mean([len(t) for t in natural_tokens])),
            "eval_full_tokens": float(np.mean([len(t) for t in full_tokens])),
            "eval_rep4": mean_defined([ngram_repetition(t, 4) for t in full_tokens]),
        }
