"""Repetition of generated continuations: rep-4 (Welleck et al. 2019) and rep-sen (Xu et al. 2022).

Prefixes come from a text file (one per line) or jsonl (``{"prefix": ...}``). Each is cut to its
first ``prefix_tokens`` tokens (lines shorter than that are skipped), then continued for
``new_tokens`` tokens greedily and with nucleus sampling, through ``Magnet.generate`` with the
repetition penalty off (1.0), so the model is measured and not the penalty. With
``full_length`` the end-of-sequence token is held back, so every continuation has ``new_tokens``
tokens: a model that stops early otherwise has fewer tokens in which to repeat itself.

- rep-4 of one continuation: ``1 - unique 4-grams / 4-grams`` over its tokens (the continuation
  text tokenized again with the model's tokenizer).
- rep-sen of one continuation: split into sentences, ``(sentences - unique sentences) / sentences``.

Both are averaged over the continuations that have at least one 4-gram / one sentence.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from magnetsdk.eval.result import EvalResult, data_file, utc_now
from magnetsdk.records import read_texts

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


def ngram_repetition(tokens: Sequence[Any], n: int = 4) -> float | None:
    """``1 - unique n-grams / n-grams``; None when the sequence has no n-gram."""
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    if not grams:
        return None
    return 1.0 - len(set(grams)) / len(grams)


def split_sentences(text: str) -> list[str]:
    """Sentences end at ``.``, ``!`` or ``?`` followed by whitespace, or at a line break."""
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def sentence_repetition(text: str) -> float | None:
    """``(sentences - unique sentences) / sentences``; None for a text with no sentence."""
    sentences = split_sentences(text)
    if not sentences:
        return None
    return (len(sentences) - len(set(sentences))) / len(sentences)


def mean_defined(values: list[float | None]) -> float:
    defined = [v for v in values if v is not None]
    return float(np.mean(defined)) if defined else float("nan")


def cut_prefixes(
    tokenizer: Any, texts: list[str], prefix_tokens: int, limit: int | None = None
) -> tuple[list[str], int]:
    """The first ``prefix_tokens`` tokens of each text long enough; returns (prefixes, skipped)."""
    if prefix_tokens < 1:
        raise ValueError(f"prefix_tokens={prefix_tokens} must be at least 1")
    prefixes, skipped = [], 0
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(ids) < prefix_tokens:
            skipped += 1
            continue
        prefixes.append(tokenizer.decode(ids[:prefix_tokens]))
        if limit is not None and len(prefixes) >= limit:
            break
    return prefixes, skipped


def evaluate_repetition(
    magnet: Any,
    path: str | Path,
    prefix_tokens: int = 32,
    new_tokens: int = 128,
    limit: int | None = None,
    top_p: float = 0.9,
    temperature: float = 1.0,
    seed: int = 0,
    batch_size: int = 16,
    decodings: Sequence[str] = ("greedy", "nucleus"),
    show_progress: bool = True,
    full_length: bool = False,
) -> EvalResult:
    """rep-4 and rep-sen of greedy and/or nucleus continuations of the prefixes in ``path``."""
    unknown = sorted(set(decodings) - {"greedy", "nucleus"})
    if unknown or not decodings:
        raise ValueError(f"decodings {unknown or '[]'} are not a non-empty subset of ['greedy', 'nucleus']")
    started, start = utc_now(), time.perf_counter()
    prefixes, skipped = cut_prefixes(magnet.tokenizer, read_texts(path, "prefix"), prefix_tokens, limit)
    if not prefixes:
        raise ValueError(
            f"no prefix in {path} has {prefix_tokens} tokens ({skipped} shorter lines skipped); "
            "lower --prefix-tokens or pass longer texts"
        )
    figures: dict[str, Any] = {"prefixes": len(prefixes), "skipped_short": skipped}
    rows, details = [], {"prefixes": prefixes}
    for decoding in decodings:
        sampled = decoding == "nucleus"
        starts = range(0, len(prefixes), batch_size)
        if show_progress:
            from tqdm.auto import tqdm

            starts = tqdm(starts, desc=f"generate ({decoding})", unit="batch")
        continuations: list[str] = []
        for first in starts:
            batch = prefixes[first : first + batch_size]
            continuations.extend(
                magnet.generate(
                    batch,
                    max_new_tokens=new_tokens,
                    temperature=temperature if sampled else 0.0,
                    top_p=top_p if sampled else 1.0,
                    repetition_penalty=1.0,
                    seed=seed + first,
                    batch_size=len(batch),
                    min_new_tokens=new_tokens if full_length else 0,
                )
            )
        token_lists = [magnet.tokenizer(c, add_special_tokens=False)["input_ids"] for c in continuations]
        rep4 = mean_defined([ngram_repetition(t, 4) for t in token_lists])
        rep_sen = mean_defined([sentence_repetition(c) for c in continuations])
        length = float(np.mean([len(t) for t in token_lists]))
        figures[f"{decoding}.rep4"] = rep4
        figures[f"{decoding}.rep_sen"] = rep_sen
        figures[f"{decoding}.tokens"] = length
        rows.append(
            [decoding, len(continuations), f"{length:.1f}", f"{100 * rep4:.2f}", f"{100 * rep_sen:.2f}"]
        )
        details[decoding] = continuations
    return EvalResult(
        task="repetition",
        figures=figures,
        headers=["decoding", "continuations", "mean tokens", "rep-4 %", "rep-sen %"],
        rows=rows,
        settings={
            "prefix_tokens": prefix_tokens,
            "new_tokens": new_tokens,
            "limit": limit,
            "top_p": top_p,
            "temperature": temperature,
            "seed": seed,
            "batch_size": batch_size,
            "repetition_penalty": 1.0,
            "decodings": list(decodings),
            "full_length": full_length,
        },
        model=magnet.identity.to_dict(),
        data=[data_file(path)],
        started=started,
        seconds=time.perf_counter() - start,
        details=details,
    )
