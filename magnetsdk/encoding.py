"""Sentence embeddings from a decoder: instruction prefix, one attention mode, pooling.

A text is encoded as ``[BOS] instruction " " text EOS``. The instruction and the text are
tokenized separately so the text tokens are known exactly (mean pooling covers only them); the
EOS token is appended so last-token pooling reads a fixed token whatever the text ends with.

Echo embeddings (Springer et al. 2024) give the text twice, ``instruction " " text ECHO text EOS``,
and pool over the second occurrence: under causal attention its tokens have seen the whole text,
which makes a never-adapted decoder a better encoder without training.

This module knows nothing about loading or thread safety; :class:`magnetsdk.Magnet` owns those.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch

from magnetsdk.attention import AttentionMode
from magnetsdk.config import Pooling
from magnetsdk.forward import run_decoder

ECHO_SEPARATOR = "\nThe same sentence, rewritten:"


@dataclass
class EncodeInput:
    ids: list[int]
    text_start: int  # first text token
    text_end: int  # one past the last text token (the EOS sits at text_end)


def special_prefix(tokenizer) -> list[int]:
    """The tokens the tokenizer puts before any text (a BOS for Llama-style tokenizers)."""
    empty = tokenizer("", add_special_tokens=True)["input_ids"]
    return [t for t in empty if t != tokenizer.eos_token_id]


def pad_id(tokenizer) -> int:
    """The id batches are padded with: the tokenizer's pad token, else its EOS (padding is masked
    out everywhere, so it only has to be a valid id)."""
    chosen = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if chosen is None:
        raise ValueError("the tokenizer has neither a pad nor an EOS token; set tokenizer.pad_token")
    return chosen


def fit_embeddings(model, tokenizer) -> bool:
    """Give every token of ``tokenizer`` a row in the model's (possibly tied) embedding matrix.

    Added layout tokens need rows; an adapted model that added them carries the trained rows in its
    adapter, an unadapted one gets fresh ones. Returns whether the matrix was resized.
    """
    if len(tokenizer) <= model.get_input_embeddings().weight.shape[0]:
        return False
    model.resize_token_embeddings(len(tokenizer))
    return True


def eos_id(tokenizer) -> int:
    if tokenizer.eos_token_id is None:
        raise ValueError(
            "the tokenizer has no EOS token, which last-token pooling needs; set tokenizer.eos_token "
            "or encode with pooling='mean'"
        )
    return tokenizer.eos_token_id


def prepare(
    tokenizer, texts: list[str], instruction: str, max_length: int, echo: bool = False
) -> list[EncodeInput]:
    """Tokenize ``texts`` with the instruction prefix, truncating (with a warning) to ``max_length``.

    With ``echo`` each text appears twice and ``text_start:text_end`` is its second occurrence.
    """
    prefix = special_prefix(tokenizer) + (
        tokenizer(instruction, add_special_tokens=False)["input_ids"] if instruction else []
    )
    eos = eos_id(tokenizer)
    separator = tokenizer(ECHO_SEPARATOR, add_special_tokens=False)["input_ids"] if echo else []
    budget = max_length - len(prefix) - len(separator) - 1
    if echo:
        budget //= 2
    if budget < 1:
        raise ValueError(
            f"max_length={max_length} leaves no room for text after the {len(prefix)}-token instruction "
            "prefix; raise max_length or shorten the instruction"
        )
    # A text follows the instruction (or the echo separator) after a space.
    joined = [(" " + t if instruction or echo else t) if t else "" for t in texts]
    text_ids = tokenizer(joined, add_special_tokens=False)["input_ids"] if joined else []
    truncated = 0
    inputs = []
    for ids in text_ids:
        if len(ids) > budget:
            ids = ids[:budget]
            truncated += 1
        if echo:
            first = prefix + ids + separator
            inputs.append(EncodeInput(first + ids + [eos], len(first), len(first) + len(ids)))
        else:
            inputs.append(EncodeInput(prefix + ids + [eos], len(prefix), len(prefix) + len(ids)))
    if truncated:
        warnings.warn(
            f"{truncated} of {len(texts)} texts were longer than max_length={max_length} tokens and were "
            "truncated; raise max_length to encode them whole",
            stacklevel=3,
        )
    return inputs


def pad_batch(
    sequences: list[list[int]], pad_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad token lists into ``(ids, valid)`` tensors of shape (b, n)."""
    n = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), n), pad_id, dtype=torch.long)
    valid = torch.zeros((len(sequences), n), dtype=torch.bool)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        valid[row, : len(seq)] = True
    return ids.to(device), valid.to(device)


def pool(hidden: torch.Tensor, batch: list[EncodeInput], pooling: Pooling) -> torch.Tensor:
    """Pool right-padded hidden states (b, n, d) into (b, d)."""
    rows = []
    for row, item in enumerate(batch):
        if pooling is Pooling.MEAN and item.text_end > item.text_start:
            rows.append(hidden[row, item.text_start : item.text_end].mean(dim=0))
        else:  # last token; also the mean of an empty text, which has no text tokens to average
            rows.append(hidden[row, len(item.ids) - 1])
    return torch.stack(rows)  # (b, d)


def embed(
    model: torch.nn.Module,
    inputs: list[EncodeInput],
    mode: AttentionMode,
    pooling: Pooling,
    pad_id: int,
    batch_size: int,
    normalize: bool,
    progress: bool = False,
) -> np.ndarray:
    """Embed prepared inputs in length-sorted batches; return float32 (n, d) in input order."""
    dim = model.config.hidden_size
    out = np.zeros((len(inputs), dim), dtype=np.float32)
    order = sorted(range(len(inputs)), key=lambda i: len(inputs[i].ids), reverse=True)
    device = next(model.parameters()).device
    starts = range(0, len(order), batch_size)
    if progress:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc="encode", unit="batch")
    for start in starts:
        index = order[start : start + batch_size]
        batch = [inputs[i] for i in index]
        ids, valid = pad_batch([b.ids for b in batch], pad_id, device)
        hidden = run_decoder(model, ids, valid, mode).hidden  # (b, n, d)
        pooled = pool(hidden, batch, pooling).float()
        if normalize:
            pooled = torch.nn.functional.normalize(pooled, dim=-1)
        out[index] = pooled.cpu().numpy()
    return out
