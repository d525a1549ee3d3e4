"""Causal perplexity of plain text: does an adapted model remain a language model?

The file is read whole, tokenized once, optionally cut to its first ``max_tokens`` tokens, and
split into non-overlapping windows of ``context`` tokens. Each window is scored on its own
(the tokenizer's special prefix, e.g. BOS, is put in front and not scored; without one, the
window's first token has nothing to be predicted from and is not scored either).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from magnetsdk.attention import AttentionMode
from magnetsdk.eval.result import EvalResult, data_file, utc_now
from magnetsdk.eval.scoring import ScoredSequence, perplexity, target_nll


def windows(ids: list[int], context: int, prefix: list[int]) -> list[ScoredSequence]:
    """Non-overlapping windows of ``ids``, each scored on every token that has a predecessor."""
    if context < 2:
        raise ValueError(f"context={context} must be at least 2 tokens")
    out = []
    for start in range(0, len(ids), context):
        chunk = ids[start : start + context]
        sequence = list(prefix) + chunk
        first = max(1, len(prefix))  # the first position with something before it
        if first >= len(sequence):
            continue
        positions = list(range(first - 1, len(sequence) - 1))
        out.append(ScoredSequence(sequence, positions, sequence[first:]))
    return out


def evaluate_lm(
    magnet: Any,
    path: str | Path,
    context: int = 512,
    max_tokens: int | None = None,
    limit: int | None = None,
    batch_size: int = 4,
    show_progress: bool = True,
) -> EvalResult:
    """Perplexity over the windows of ``path`` (the first ``limit`` windows when given)."""
    started, start = utc_now(), time.perf_counter()
    source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as error:
        raise FileNotFoundError(f"cannot read text file {source}: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"{source} is not UTF-8 text (byte {error.start}); convert it to UTF-8") from None
    if not text.strip():
        raise ValueError(f"{source} is empty; lm needs some text")
    ids = magnet.tokenizer(text, add_special_tokens=False)["input_ids"]
    total_tokens = len(ids)
    if max_tokens is not None:
        ids = ids[:max_tokens]
    sequences = windows(ids, context, magnet.prefix)
    if limit is not None:
        sequences = sequences[:limit]
    with magnet.lock:
        nll = target_nll(
            magnet.model,
            sequences,
            AttentionMode.CAUSAL,
            magnet.pad_id,
            batch_size,
            show_progress,
            "lm",
        )
    ppl = perplexity(nll)
    scored = sum(x.size for x in nll)
    figures = {"ppl": ppl, "nll": float(np.log(ppl)), "scored_tokens": scored, "windows": len(sequences)}
    return EvalResult(
        task="lm",
        figures=figures,
        headers=["data", "windows", "scored tokens", "perplexity", "nll / token"],
        rows=[[source.name, len(sequences), scored, ppl, figures["nll"]]],
        settings={
            "context": context,
            "max_tokens": max_tokens,
            "limit": limit,
            "batch_size": batch_size,
            "file_tokens": total_tokens,
        },
        model=magnet.identity.to_dict(),
        data=[data_file(source)],
        started=started,
        seconds=time.perf_counter() - start,
    )
