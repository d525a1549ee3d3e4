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

With a ``judge`` (another :class:`~magnetsdk.Magnet`, e.g. the base model) every continuation is
read again by the judge, causally, after its prefix (the text tokenized with the judge's
tokenizer): ``judge_ppl`` is the judge's perplexity of the continuation tokens, and
``implausible`` the share of them to which the judge gives a probability below
:data:`IMPLAUSIBLE_P` (1e-6): tokens no fluent writer picks, such as the rare, under-trained
entries of a vocabulary that an adapted model can start to sample. A nucleus sampler over the
judge's own distribution never picks one; the judge's own figure is still not exactly 0 (the base
model: 0.10% on WikiText prefixes), since a continuation is decoded to text and tokenized again.
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
IMPLAUSIBLE_P = 1e-6


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


def judge_logprobs(
    judge: Any, prefixes: list[str], continuations: list[str], batch_size: int = 16
) -> list[list[float]]:
    """The judge's log-probability of each continuation token after its prefix (causal, teacher-forced)."""
    import torch

    tokenizer = judge.tokenizer
    rows = []
    for prefix, continuation in zip(prefixes, continuations, strict=True):
        head = [*judge.prefix, *tokenizer(prefix, add_special_tokens=False)["input_ids"]]
        rows.append((head, tokenizer(continuation, add_special_tokens=False)["input_ids"]))
    out: list[list[float]] = []
    with judge.lock, torch.inference_mode():
        for first in range(0, len(rows), batch_size):
            batch = rows[first : first + batch_size]
            n = max(len(h) + len(c) for h, c in batch)
            ids = torch.full((len(batch), n), judge.pad_id, dtype=torch.long)
            mask = torch.zeros((len(batch), n), dtype=torch.long)
            for row, (head, cont) in enumerate(batch):
                ids[row, : len(head) + len(cont)] = torch.tensor(head + cont)
                mask[row, : len(head) + len(cont)] = 1
            logits = judge.model(input_ids=ids.to(judge.device), attention_mask=mask.to(judge.device)).logits
            logp = logits.float().log_softmax(-1).cpu()  # (b, n, V)
            for row, (head, cont) in enumerate(batch):
                positions = torch.arange(len(head) - 1, len(head) + len(cont) - 1)
                out.append(
                    logp[row, positions, torch.tensor(cont, dtype=torch.long)].tolist() if cont else []
                )
    return out


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
    judge: Any = None,
) -> EvalResult:
    """rep-4 and rep-sen of greedy and/or nucleus continuations of the prefixes in ``path``; with a
    ``judge`` model also its perplexity of them and the share of implausible tokens."""
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
        row = [decoding, len(continuations), f"{length:.1f}", f"{100 * rep4:.2f}", f"{100 * rep_sen:.2f}"]
        if judge is not None:
            scored = [
                lp for each in judge_logprobs(judge, prefixes, continuations, batch_size) for lp in each
            ]
            threshold = float(np.log(IMPLAUSIBLE_P))
            figures[f"{decoding}.judge_ppl"] = float(np.exp(-np.mean(scored))) if scored else float("nan")
            figures[f"{decoding}.implausible"] = (
                float(np.mean([lp < threshold for lp in scored])) if scored else float("nan")
            )
            row += [
                f"{figures[f'{decoding}.judge_ppl']:.2f}",
                f"{100 * figures[f'{decoding}.implausible']:.2f}",
            ]
        rows.append(row)
        details[decoding] = continuations
    return EvalResult(
        task="repetition",
        figures=figures,
        headers=["decoding", "continuations", "mean tokens", "rep-4 %", "rep-sen %"]
        + (["judge ppl", "implausible %"] if judge is not None else []),
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
            "judge": judge.identity.to_dict() if judge is not None else None,
            "implausible_below_p": IMPLAUSIBLE_P if judge is not None else None,
        },
        model=magnet.identity.to_dict(),
        data=[data_file(path)],
        started=started,
        seconds=time.perf_counter() - start,
        details=details,
    )
