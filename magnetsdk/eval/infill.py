"""Infill perplexity: how well a model predicts a known span given both sides vs the left side only.

Input: jsonl, one ``{"left": ..., "span": ..., "right": ...}`` per line; the three texts are joined
as they are (put the separating spaces inside them, e.g. a span that starts with a space).

Two perplexities of exactly the same span tokens:

- (a) ``both sides``: the hybrid layout that ``Magnet.infill`` decodes with
  (:func:`magnetsdk.layout.lay_out`: ``left GAP right SPAN s1 .. sk END``, context bidirectional,
  span causal and seeing all context);
- (b) ``left only``: the plain causal LM loss of ``s1 .. sk`` after ``left``.

The END token that closes the span in (a) is not scored, so (a) and (b) average over the same
tokens and their difference is what the right context (and the layout) adds.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from magnetsdk.attention import AttentionMode
from magnetsdk.eval.result import EvalResult, data_file, utc_now
from magnetsdk.eval.scoring import ScoredSequence, perplexity, target_nll
from magnetsdk.layout import lay_out


@dataclass
class InfillItem:
    left: str
    span: str
    right: str


def read_infill_items(path: str | Path, limit: int | None = None) -> list[InfillItem]:
    source = Path(path)
    try:
        lines = source.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise FileNotFoundError(f"cannot read infill file {source}: {error.strerror or error}") from None
    items: list[InfillItem] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{source}:{number}: not valid JSON ({error.msg})") from None
        if not isinstance(record, dict) or not all(
            isinstance(record.get(k), str) for k in ("left", "span", "right")
        ):
            raise ValueError(f'{source}:{number}: expected an object with "left", "span" and "right" strings')
        if not record["left"].strip() or not record["span"].strip():
            raise ValueError(
                f"{source}:{number}: the left text and the span must be non-empty (the left-only "
                "perplexity needs a left context to predict the first span token from)"
            )
        items.append(InfillItem(record["left"], record["span"], record["right"]))
        if limit is not None and len(items) >= limit:
            break
    if not items:
        raise ValueError(f"{source} holds no infill items")
    return items


def build_sequences(magnet: Any, item: InfillItem) -> tuple[ScoredSequence, ScoredSequence]:
    """The (hybrid, left-only causal) sequences that score ``item.span``'s tokens."""
    tokenize = magnet.tokenizer
    left = tokenize(item.left, add_special_tokens=False)["input_ids"]
    span = tokenize(item.span, add_special_tokens=False)["input_ids"]
    right = tokenize(item.right, add_special_tokens=False)["input_ids"]
    prefix = list(magnet._prefix)
    laid = lay_out([left, right], magnet.layout, spans=[span], prefix=prefix)
    # The targets are the span tokens and then END; END is dropped so (a) and (b) score the same tokens.
    hybrid = ScoredSequence(laid.input_ids, laid.target_positions[:-1], laid.targets[:-1], laid.is_span)
    ids = prefix + left + span
    first = len(prefix) + len(left)
    causal = ScoredSequence(ids, list(range(first - 1, first - 1 + len(span))), span)
    assert hybrid.targets == causal.targets
    return hybrid, causal


def evaluate_infill(
    magnet: Any,
    path: str | Path,
    limit: int | None = None,
    batch_size: int = 8,
    generate: int = 0,
    max_new_tokens: int = 32,
    show_progress: bool = True,
) -> EvalResult:
    """Perplexity of each span with both sides (hybrid) and with the left side only (causal).

    ``generate`` > 0 also fills the first ``generate`` gaps greedily, kept for reading.
    """
    started, start = utc_now(), time.perf_counter()
    items = read_infill_items(path, limit)
    pairs = [build_sequences(magnet, item) for item in items]
    with magnet._lock:
        both = target_nll(
            magnet.model,
            [h for h, _ in pairs],
            AttentionMode.HYBRID,
            magnet._pad_id,
            batch_size,
            show_progress,
            "infill both sides",
        )
        left = target_nll(
            magnet.model,
            [c for _, c in pairs],
            AttentionMode.CAUSAL,
            magnet._pad_id,
            batch_size,
            show_progress,
            "infill left only",
        )
    tokens = sum(x.size for x in both)
    ppl_both, ppl_left = perplexity(both), perplexity(left)
    figures = {
        "ppl_both_sides": ppl_both,
        "ppl_left_only": ppl_left,
        "nll_both_sides": float(np.log(ppl_both)),
        "nll_left_only": float(np.log(ppl_left)),
        "items": len(items),
        "span_tokens": tokens,
    }
    details: dict[str, Any] = {
        "per_item_nll": [
            {"both_sides": float(b.mean()), "left_only": float(c.mean()), "tokens": int(b.size)}
            for b, c in zip(both, left, strict=True)
        ]
    }
    if generate > 0:
        chosen = items[:generate]
        filled = magnet.infill(
            [f"{i.left}[GAP]{i.right}" for i in chosen], max_new_tokens=max_new_tokens, temperature=0.0
        )
        details["infills"] = [
            {"left": i.left, "gold": i.span, "generated": r.spans[0], "right": i.right}
            for i, r in zip(chosen, filled, strict=True)
        ]
    return EvalResult(
        task="infill",
        figures=figures,
        headers=["context", "span perplexity", "nll / token", "span tokens"],
        rows=[
            ["both sides (hybrid layout)", ppl_both, figures["nll_both_sides"], tokens],
            ["left only (causal)", ppl_left, figures["nll_left_only"], tokens],
        ],
        settings={
            "limit": limit,
            "batch_size": batch_size,
            "generate": generate,
            "max_new_tokens": max_new_tokens,
            "scored_tokens": "span tokens only; the END token of the hybrid layout is excluded so both "
            "perplexities average over exactly the same tokens",
        },
        model=magnet.identity.to_dict(),
        data=[data_file(path)],
        started=started,
        seconds=time.perf_counter() - start,
        details=details,
    )
