"""Attention dependence (UBMoE-LLM, Li et al. ICML 2025): how much each token attends before, to
itself and after.

For one sequence the attention probabilities are averaged over all heads and layers into one
``(n, n)`` matrix ``A`` (rows are queries). Then, averaging over the tokens ``i``::

    DP_before = mean_i sum_{j < i} A[i, j]
    DP_main   = mean_i A[i, i]
    DP_after  = mean_i sum_{j > i} A[i, j]

(the three add up to 1), and the figures are the means over a text file. The paper computes ``A``
without the causal mask (``bidirectional`` here); the model's own encode mode is measured too.

Attention probabilities come from the model's eager attention (``output_attentions=True``); a
model loaded with another backend is switched with the public ``set_attn_implementation`` for the
measurement and switched back afterwards. Masks are the ones :mod:`magnetsdk.attention` builds.
Texts are tokenized as they are (the tokenizer's special prefix, no instruction).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from magnetsdk.attention import AttentionMode, allowed, backend_mask, position_ids
from magnetsdk.encoding import pad_batch
from magnetsdk.eval.result import EvalResult, data_file, utc_now
from magnetsdk.forward import attn_implementation, decoder_body
from magnetsdk.records import read_texts


def dependence(attention: np.ndarray | torch.Tensor) -> tuple[float, float, float]:
    """(DP_before, DP_main, DP_after) of one averaged attention matrix ``(n, n)``."""
    a = torch.as_tensor(attention, dtype=torch.float64)
    if a.ndim != 2 or a.shape[0] != a.shape[1] or a.shape[0] == 0:
        raise ValueError(f"expected a non-empty square (n, n) attention matrix, got shape {tuple(a.shape)}")
    before = torch.tril(a, diagonal=-1).sum(dim=1).mean()
    main = torch.diagonal(a).mean()
    after = torch.triu(a, diagonal=1).sum(dim=1).mean()
    return float(before), float(main), float(after)


@contextlib.contextmanager
def eager_attention(model: torch.nn.Module) -> Iterator[None]:
    """Run the model with eager attention (the backend that returns probabilities), then restore."""
    previous = attn_implementation(model)
    if previous == "eager":
        yield
        return
    model.set_attn_implementation("eager")
    try:
        yield
    finally:
        model.set_attn_implementation(previous)


def averaged_attention(
    model: torch.nn.Module, input_ids: torch.Tensor, valid: torch.Tensor, mode: AttentionMode | str
) -> torch.Tensor:
    """Attention probabilities averaged over layers and heads, ``(b, n, n)``; call under eager."""
    mode = AttentionMode(mode)
    if mode is AttentionMode.HYBRID:
        raise ValueError("dependence measures plain texts; use attention 'causal' or 'bidirectional'")
    if mode is AttentionMode.CAUSAL:
        mask = valid.long()  # the model builds its own causal mask
    else:
        mask = backend_mask(allowed(mode, valid), "eager", model.dtype)  # (b, 1, n, n)
    out = decoder_body(model)(
        input_ids=input_ids,
        attention_mask=mask,
        position_ids=position_ids(valid),
        output_attentions=True,
    )
    if not out.attentions or out.attentions[0] is None:
        raise RuntimeError("the model returned no attention probabilities; it must support eager attention")
    stacked = torch.stack([a.float() for a in out.attentions])  # (layers, b, heads, n, n)
    return stacked.mean(dim=(0, 2))  # (b, n, n)


def tokenize_texts(tokenizer: Any, path: str | Path, min_tokens: int, max_tokens: int, limit: int | None):
    """Token ids of the texts in ``path`` with at least ``min_tokens`` tokens, cut to ``max_tokens``."""
    texts, skipped = [], 0
    for text in read_texts(path, "text"):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(ids) < min_tokens:
            skipped += 1
            continue
        texts.append(ids[:max_tokens])
        if limit is not None and len(texts) >= limit:
            break
    return texts, skipped


def evaluate_dependence(
    magnet: Any,
    path: str | Path,
    modes: Sequence[str] | None = None,
    limit: int | None = None,
    min_tokens: int = 16,
    max_tokens: int = 256,
    batch_size: int = 8,
    heatmap: str | Path | None = None,
    show_progress: bool = True,
) -> EvalResult:
    """DP_before / DP_main / DP_after per attention mode over the texts of ``path``.

    ``modes`` defaults to bidirectional (the paper's setting) and the model's own encode mode.
    ``heatmap``: a PNG of the first text's averaged attention, one panel per mode.
    """
    started, start = utc_now(), time.perf_counter()
    own = magnet.config.encode_attention.value
    chosen = list(dict.fromkeys(modes or ["bidirectional", own]))
    for mode in chosen:
        if mode not in ("causal", "bidirectional"):
            raise ValueError(f"attention mode {mode!r} is not one of ['causal', 'bidirectional']")
    sequences, skipped = tokenize_texts(magnet.tokenizer, path, min_tokens, max_tokens, limit)
    if not sequences:
        raise ValueError(f"no text in {path} has {min_tokens} tokens ({skipped} skipped); lower --min-tokens")
    prefix = list(magnet.prefix)
    sequences = [prefix + s for s in sequences]
    model = magnet.model
    device = next(model.parameters()).device
    per_mode: dict[str, np.ndarray] = {}
    first_matrix: dict[str, np.ndarray] = {}
    with magnet.lock, torch.inference_mode(), eager_attention(model):
        for mode in chosen:
            starts = range(0, len(sequences), batch_size)
            if show_progress:
                from tqdm.auto import tqdm

                starts = tqdm(starts, desc=f"dependence ({mode})", unit="batch")
            values = []
            for first in starts:
                batch = sequences[first : first + batch_size]
                ids, valid = pad_batch(batch, magnet.pad_id, device)  # (b, n)
                attention = averaged_attention(model, ids, valid, mode)  # (b, n, n)
                for row, seq in enumerate(batch):
                    matrix = attention[row, : len(seq), : len(seq)]
                    values.append(dependence(matrix))
                    if first == 0 and row == 0:
                        first_matrix[mode] = matrix.cpu().numpy()
            per_mode[mode] = np.asarray(values)  # (texts, 3)
    figures: dict[str, Any] = {"texts": len(sequences), "skipped_short": skipped}
    rows = []
    for mode, values in per_mode.items():
        before, main, after = values.mean(axis=0)
        figures[f"{mode}.before"], figures[f"{mode}.main"], figures[f"{mode}.after"] = before, main, after
        rows.append([mode, len(values), f"{before:.4f}", f"{main:.4f}", f"{after:.4f}"])
    details: dict[str, Any] = {}
    if heatmap is not None:
        details["heatmap"] = str(plot_heatmaps(first_matrix, heatmap))
    return EvalResult(
        task="dependence",
        figures=figures,
        headers=["attention", "texts", "DP_before", "DP_main", "DP_after"],
        rows=rows,
        settings={
            "modes": chosen,
            "limit": limit,
            "min_tokens": min_tokens,
            "max_tokens": max_tokens,
            "batch_size": batch_size,
            "tokens": "the text as tokenized, after the tokenizer's special prefix; no instruction",
        },
        model=magnet.identity.to_dict(),
        data=[data_file(path)],
        started=started,
        seconds=time.perf_counter() - start,
        details=details,
    )


def plot_heatmaps(matrices: dict[str, np.ndarray], path: str | Path) -> Path:
    """One heatmap panel per attention mode; written to a temporary file and renamed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    figure, axes = plt.subplots(1, len(matrices), figsize=(4.5 * len(matrices), 4), squeeze=False)
    for axis, (mode, matrix) in zip(axes[0], matrices.items(), strict=True):
        # The first token soaks up most causal attention; cap the colour scale so the rest shows.
        image = axis.imshow(matrix, cmap="viridis", vmin=0.0, vmax=float(np.quantile(matrix, 0.99)) or None)
        axis.set_title(f"{mode}: mean attention")
        axis.set_xlabel("key position")
        axis.set_ylabel("query position")
        figure.colorbar(image, ax=axis, fraction=0.046)
    figure.tight_layout()
    tmp = target.with_name(f".{target.name}.tmp.png")
    figure.savefig(tmp, dpi=120)
    plt.close(figure)
    tmp.replace(target)
    return target
