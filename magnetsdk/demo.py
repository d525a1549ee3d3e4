"""The demo that ``make demo`` runs: every surface of one loaded model, in a few seconds."""

from __future__ import annotations

import time
from collections.abc import Callable

from magnetsdk.magnet import Magnet

SENTENCES = [
    "A man is playing a guitar on stage.",
    "Someone performs music with a guitar.",
    "The stock market fell sharply today.",
]
GAP_TEXT = "The Eiffel Tower is in [GAP], the capital of France."
PROMPT = "The best way to learn a new language is"
GENERATE_TOKENS = 32  # sampled with the model's defaults and seed 0


def run_demo(magnet: Magnet, echo: Callable[[str], None] = print) -> dict:
    info = magnet.info()
    echo(
        f"model: {info['model']}  adapter: {info['adapter']}  device: {info['device']}  d={info['dimension']}"
    )
    echo(f"encoding: {info['encode_attention']} attention, {info['pooling']} pooling")
    if not info["adapted"]:
        echo(
            "note: this model was never MAGNET-adapted, so it encodes causally and infills poorly; "
            "`magnet train` adapts it"
        )

    start = time.perf_counter()
    vectors = magnet.encode(SENTENCES)
    sims = vectors @ vectors.T
    echo(f"\n[encode] {len(SENTENCES)} sentences in {time.perf_counter() - start:.2f}s, cosine similarity:")
    for i, sentence in enumerate(SENTENCES):
        echo(f"  [{i}] {sentence}")
    echo(f"  sim([0], [1]) = {sims[0, 1]:.3f}   (paraphrases)")
    echo(f"  sim([0], [2]) = {sims[0, 2]:.3f}   (unrelated)")

    start = time.perf_counter()
    # Eight fills (the greedy one and seven sampled, seeded) ranked by the filled text's likelihood.
    filled = magnet.infill(GAP_TEXT, max_new_tokens=8, candidates=8, seed=0)
    echo(f"\n[infill] {GAP_TEXT}\n  -> {filled.text!r}   ({time.perf_counter() - start:.2f}s)")

    start = time.perf_counter()
    continuation = magnet.generate(PROMPT, max_new_tokens=GENERATE_TOKENS, seed=0)
    echo(f"\n[generate] {PROMPT}\n  -> {continuation!r}   ({time.perf_counter() - start:.2f}s)")
    return {"similarity": sims.tolist(), "infill": filled.text, "generation": continuation}
