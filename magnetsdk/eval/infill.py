"""Infill quality: how well a model predicts a known span from both sides, per layout, with controls.

Input: jsonl, one ``{"left": ..., "span": ..., "right": ...}`` per line; the three texts are joined
as they are (put the separating spaces inside them, e.g. a span that starts with a space). The left
side may be empty (a gap at the start of a text; its left-only reading follows an end-of-text token).

For each :class:`magnetsdk.layout.InfillLayout` asked for, the perplexity of exactly the same span
tokens (END excluded, so every row averages over the same tokens):

- ``both sides``: the span laid out after its context in that layout (what ``Magnet.infill``
  decodes with);
- ``shuffled right``: the same, with each item's right side replaced by the next item's (a control:
  a layout that only gains from *having* a right side, not from reading it, scores the same);

and once, the ``left only`` perplexity (the plain causal LM loss of the span after the left side),
the reference both-sides perplexity must beat. Perplexity by position inside the span
(:data:`POSITION_BUCKETS`) shows where the right side helps. With ``generate > 0`` the first
``generate`` items are also filled greedily in each layout: the share of spans closed within the
budget, the share left empty (closed at once, or only whitespace), the share that copy a run of
:data:`COPY_WORDS` words of either side, the share that loop (repeat a run of :data:`LOOP_UNITS` of
their own words and marks; the true spans' own rate is ``gold_loop_rate``), and the mean word F1
of each fill against the true span (:func:`word_f1`; many fills are right without being the
original, so it ranks, it does not grade). The fills use ``Magnet.infill``'s defaults (a loop
guard, copies resampled, unclosed fills cut at a sentence end, gaps between sentences closed only
after one) unless the options set them: ``--no-repeat-ngram 0 --resample-copies 0
--no-cut-unclosed --no-whole-sentences`` reads the model's plain greedy fills.
``candidates`` fills them the way ``Magnet.infill(candidates=..., seed=0)`` does (``"auto"``, the
default: 8 ranked for a gap inside a sentence or at a text's start, one greedy fill between
sentences; N > 1: ranked as ``candidate_ranking`` says, by default the text after the fill for a
gap at a text's start and the filled text's likelihood otherwise). ``line_breaks`` is ``Magnet.infill``'s rule (default ``"auto"``: the
items are single lines, so their fills keep to the line); the share of fills that break a line is
reported either way, and ``"allow"`` measures how often the model itself would.
"""

from __future__ import annotations

import inspect
import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from magnetsdk.copies import COPY_WORDS, DEFAULT_INFILL_TOKENS, LOOP_UNITS, copies_text, loops, words
from magnetsdk.eval.result import EvalResult, data_file, utc_now
from magnetsdk.eval.scoring import ScoredSequence, perplexity, target_nll
from magnetsdk.infilling import given_guards, has_line_break
from magnetsdk.layout import InfillLayout, infill_layout, lay_out
from magnetsdk.records import jsonl_rows, read_text
from magnetsdk.unclosed import ends_inside_a_sentence

# Span positions (1-based) grouped for the by-position perplexity: 1, 2, 3-4, 5-8, 9-16, 17+.
POSITION_BUCKETS = ((1, 1), (2, 2), (3, 4), (5, 8), (9, 16), (17, None))


@dataclass
class InfillItem:
    left: str
    span: str
    right: str


def read_infill_items(path: str | Path, limit: int | None = None) -> list[InfillItem]:
    source = Path(path)
    items: list[InfillItem] = []
    for row in jsonl_rows(read_text(source), str(source)):
        record, number = row.fields, row.line
        if not all(isinstance(record.get(k), str) for k in ("left", "span", "right")):
            raise ValueError(f'{source}:{number}: expected an object with "left", "span" and "right" strings')
        if not record["span"].strip():
            raise ValueError(f"{source}:{number}: the span must be non-empty (it is what is scored)")
        items.append(InfillItem(record["left"], record["span"], record["right"]))
        if limit is not None and len(items) >= limit:
            break
    if not items:
        raise ValueError(f"{source} holds no infill items")
    return items


@dataclass
class TokenizedItem:
    left: list[int]
    span: list[int]
    right: list[int]


def tokenize_items(magnet: Any, items: list[InfillItem]) -> list[TokenizedItem]:
    def ids(text: str) -> list[int]:
        return magnet.tokenizer(text, add_special_tokens=False)["input_ids"]

    return [TokenizedItem(ids(i.left), ids(i.span), ids(i.right)) for i in items]


def both_sides_sequence(
    magnet: Any, item: TokenizedItem, layout: InfillLayout, right: list[int] | None = None
) -> ScoredSequence:
    """The span scored after its context in ``layout`` (``right`` replaces the item's right side)."""
    laid = lay_out(
        [item.left, item.right if right is None else right],
        magnet.layout,
        spans=[item.span],
        prefix=magnet.prefix,
        layout=layout,
    )
    # The targets are the span tokens and then END; END is dropped so every row scores the same tokens.
    return ScoredSequence(laid.input_ids, laid.target_positions[:-1], laid.targets[:-1], laid.is_span)


def left_only_sequence(magnet: Any, item: TokenizedItem) -> ScoredSequence:
    """The span read causally after the left side; a gap at the text's start (an empty left side,
    no BOS) is read after an end-of-text token, as the text's first token follows a document."""
    before = magnet.prefix + item.left
    if not before:
        if magnet.tokenizer.eos_token_id is None:
            raise ValueError(
                "an item with an empty left side needs a BOS or EOS token to read its span after; "
                "this tokenizer has neither: give every item some left text"
            )
        before = [magnet.tokenizer.eos_token_id]
    ids = before + item.span
    return ScoredSequence(ids, list(range(len(before) - 1, len(ids) - 1)), item.span)


def by_position(nll: list[np.ndarray]) -> dict[str, float]:
    """Perplexity of the span tokens at each position bucket (1-based positions inside the span)."""
    out: dict[str, float] = {}
    for low, high in POSITION_BUCKETS:
        picked = [x[low - 1 : high] for x in nll if x.size >= low]
        name = f"{low}" if low == high else (f"{low}-{high}" if high else f"{low}+")
        if any(p.size for p in picked):
            out[name] = perplexity(picked)
    return out


def infill_default(magnet: Any, name: str) -> Any:
    """``magnet.infill``'s default for the keyword ``name``."""
    return inspect.signature(magnet.infill).parameters[name].default


def copies_context(span: str, left: str, right: str, n: int = COPY_WORDS) -> bool:
    """Whether ``span`` contains a run of ``n`` words that also occurs in ``left`` or ``right``."""
    return copies_text(span, (left, right), n)


def word_f1(generated: str, gold: str) -> float:
    """F1 of the two texts' words (lower-cased, as multisets): 1 when they share every word, 0 when none."""
    ours, theirs = Counter(words(generated)), Counter(words(gold))
    shared = sum((ours & theirs).values())
    if not shared:
        return 0.0
    precision, recall = shared / sum(ours.values()), shared / sum(theirs.values())
    return 2 * precision * recall / (precision + recall)


def stored_fills(path: str | Path) -> dict[str, list[dict]]:
    """The fills a ``magnet eval infill --generate N`` JSON stores, by layout: each a dict with
    "left", "gold", "generated" and "right"."""
    try:
        result = json.loads(read_text(path))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not a magnet eval infill JSON result: {error}") from None
    fills = result.get("details", {}).get("infills") if isinstance(result, dict) else None
    if not fills:
        raise ValueError(
            f"{path} holds no stored fills: write it with magnet eval infill ... --generate N (N > 0)"
        )
    return fills


def evaluate_infill(
    magnet: Any,
    path: str | Path,
    limit: int | None = None,
    batch_size: int = 8,
    generate: int = 0,
    max_new_tokens: int = DEFAULT_INFILL_TOKENS,
    show_progress: bool = True,
    layouts: list[str] | None = None,
    candidates: int | str = "auto",
    candidate_ranking: str = "auto",
    line_breaks: str = "auto",
    no_repeat_ngram: int | None = None,
    copy_guard: int | None = None,
    resample_copies: int | None = None,
    resample_ranking: str | None = None,
    pool_stops: bool | None = None,
    cut_unclosed: bool | None = None,
    whole_sentences: bool | None = None,
) -> EvalResult:
    """Span perplexity with both sides in each layout (default: the model's own), the shuffled-right
    control, and the left side only; optionally greedy fills of the first ``generate`` items."""
    started, start = utc_now(), time.perf_counter()
    items = read_infill_items(path, limit)
    if len(items) < 2:
        raise ValueError(f"{path} holds one item; the shuffled-right control needs at least two")
    chosen = [infill_layout(name) for name in (layouts or [magnet.infill_layout.name])]
    tokenized = tokenize_items(magnet, items)
    # The control: item i read with item i+1's right side (a fixed rotation, so it is reproducible).
    shuffled_right = [tokenized[(i + 1) % len(tokenized)].right for i in range(len(tokenized))]

    def score(sequences: list[ScoredSequence], mode: str, desc: str) -> list[np.ndarray]:
        return target_nll(magnet.model, sequences, mode, magnet.pad_id, batch_size, show_progress, desc)

    with magnet.lock:
        left = score([left_only_sequence(magnet, t) for t in tokenized], "causal", "infill left only")
        per_layout: dict[str, dict[str, Any]] = {}
        for layout in chosen:
            both = score(
                [both_sides_sequence(magnet, t, layout) for t in tokenized],
                layout.mode,
                f"{layout.name} both",
            )
            control = score(
                [
                    both_sides_sequence(magnet, t, layout, r)
                    for t, r in zip(tokenized, shuffled_right, strict=True)
                ],
                layout.mode,
                f"{layout.name} shuffled right",
            )
            per_layout[layout.name] = {"both": both, "shuffled": control}

    ppl_left = perplexity(left)
    tokens = sum(x.size for x in left)
    figures: dict[str, Any] = {
        "ppl_left_only": ppl_left,
        "nll_left_only": float(np.log(ppl_left)),
        "items": len(items),
        "span_tokens": tokens,
    }
    rows: list[list[Any]] = [["left only (causal)", "", ppl_left, "", "", tokens]]
    details: dict[str, Any] = {"left_only_by_position": by_position(left), "layouts": {}}
    for name, scored in per_layout.items():
        ppl_both, ppl_shuffled = perplexity(scored["both"]), perplexity(scored["shuffled"])
        layout_figures = {
            "ppl_both_sides": ppl_both,
            "ppl_shuffled_right": ppl_shuffled,
            "both_over_left": ppl_both / ppl_left,
            "shuffled_over_both": ppl_shuffled / ppl_both,
        }
        details["layouts"][name] = {
            **layout_figures,
            "both_sides_by_position": by_position(scored["both"]),
            "shuffled_right_by_position": by_position(scored["shuffled"]),
            "per_item_nll": [
                {"both_sides": float(b.mean()), "left_only": float(c.mean()), "tokens": int(b.size)}
                for b, c in zip(scored["both"], left, strict=True)
            ],
        }
        figures.update({f"{k}[{name}]": v for k, v in layout_figures.items()})
        rows.append([f"both sides ({name})", name, ppl_both, ppl_both / ppl_left, ppl_shuffled, tokens])
    if len(chosen) == 1:  # one layout: its figures also under the plain names
        only = details["layouts"][chosen[0].name]
        figures.update({k: only[k] for k in ("ppl_both_sides", "ppl_shuffled_right", "both_over_left")})
        figures["nll_both_sides"] = float(np.log(only["ppl_both_sides"]))

    if generate > 0:
        details["infills"] = {}
        picked = items[:generate]
        texts = [f"{i.left}[GAP]{i.right}" for i in picked]
        for layout in chosen:
            filled = magnet.infill(
                texts,
                max_new_tokens=max_new_tokens,
                temperature=0.0,
                layout=layout.name,
                candidates=candidates,
                candidate_ranking=candidate_ranking,
                seed=0,
                line_breaks=line_breaks,
                **given_guards(
                    no_repeat_ngram=no_repeat_ngram,
                    copy_guard=copy_guard,
                    resample_copies=resample_copies,
                    resample_ranking=resample_ranking,
                    pool_stops=pool_stops,
                    cut_unclosed=cut_unclosed,
                    whole_sentences=whole_sentences,
                ),
            )
            cut = [bool(r.cut and r.cut[0]) for r in filled]
            # Closed: the model ended the span itself (a fill cut_unclosed cut did not).
            closed = [len(r.span_ids[0]) < max_new_tokens and not c for r, c in zip(filled, cut, strict=True)]
            fragments = [ends_inside_a_sentence(r.spans[0]) for r in filled]
            empty = [not r.spans[0].strip() for r in filled]
            broken = [has_line_break(r.spans[0]) for r in filled]
            copied = [
                copies_context(r.spans[0], i.left, i.right) for i, r in zip(picked, filled, strict=True)
            ]
            looped = [loops(r.spans[0]) for r in filled]
            overlap = [word_f1(r.spans[0], i.span) for i, r in zip(picked, filled, strict=True)]
            resampled = [r.resampled for r in filled]
            figures[f"gold_f1[{layout.name}]"] = float(np.mean(overlap))
            figures[f"resampled_rate[{layout.name}]"] = float(np.mean(resampled))
            figures[f"closed_rate[{layout.name}]"] = float(np.mean(closed))
            figures[f"copy_rate[{layout.name}]"] = float(np.mean(copied))
            figures[f"loop_rate[{layout.name}]"] = float(np.mean(looped))
            figures[f"fragment_rate[{layout.name}]"] = float(np.mean(fragments))
            figures[f"cut_rate[{layout.name}]"] = float(np.mean(cut))
            figures[f"empty_rate[{layout.name}]"] = float(np.mean(empty))
            figures[f"line_break_rate[{layout.name}]"] = float(np.mean(broken))
            details["infills"][layout.name] = [
                {
                    "left": i.left,
                    "gold": i.span,
                    "generated": r.spans[0],
                    "right": i.right,
                    "closed": c,
                    "copies": k,
                    "loops": o,
                    "cut": x,
                    "gold_f1": f,
                    "resampled": r.resampled,
                }
                for i, r, c, k, o, x, f in zip(
                    picked, filled, closed, copied, looped, cut, overlap, strict=True
                )
            ]
        # The true spans' own loops: the rate a fill as repetitive as the text would show.
        figures["gold_loop_rate"] = float(np.mean([loops(i.span) for i in picked]))
        if len(chosen) == 1:
            figures["closed_rate"] = figures[f"closed_rate[{chosen[0].name}]"]
            figures["copy_rate"] = figures[f"copy_rate[{chosen[0].name}]"]
            figures["loop_rate"] = figures[f"loop_rate[{chosen[0].name}]"]
            figures["fragment_rate"] = figures[f"fragment_rate[{chosen[0].name}]"]
            figures["cut_rate"] = figures[f"cut_rate[{chosen[0].name}]"]
            figures["empty_rate"] = figures[f"empty_rate[{chosen[0].name}]"]
            figures["line_break_rate"] = figures[f"line_break_rate[{chosen[0].name}]"]
            figures["gold_f1"] = figures[f"gold_f1[{chosen[0].name}]"]
            figures["resampled_rate"] = figures[f"resampled_rate[{chosen[0].name}]"]

    headers = ["context", "layout", "span perplexity", "/ left only", "shuffled right", "span tokens"]
    if generate > 0:
        headers += [
            "closed",
            f"copies {COPY_WORDS} words",
            f"loops {LOOP_UNITS} units",
            "word F1 with the span",
        ]
        for row in rows:
            name = row[1]
            row += (
                [figures[f"{key}[{name}]"] for key in ("closed_rate", "copy_rate", "loop_rate", "gold_f1")]
                if name
                else ["", "", "", ""]
            )
    return EvalResult(
        task="infill",
        figures=figures,
        headers=headers,
        rows=rows,
        settings={
            "limit": limit,
            "batch_size": batch_size,
            "generate": generate,
            "max_new_tokens": max_new_tokens,
            "candidates": candidates,
            "candidate_ranking": candidate_ranking,
            "line_breaks": line_breaks,
            # The guards as the fills ran: unset ones at Magnet.infill's defaults.
            **{
                name: infill_default(magnet, name) if value is None else value
                for name, value in (
                    ("no_repeat_ngram", no_repeat_ngram),
                    ("copy_guard", copy_guard),
                    ("resample_copies", resample_copies),
                    ("resample_ranking", resample_ranking),
                    ("pool_stops", pool_stops),
                    ("cut_unclosed", cut_unclosed),
                    ("whole_sentences", whole_sentences),
                )
            },
            "layouts": [layout.name for layout in chosen],
            "scored_tokens": "span tokens only; the END token is excluded so every perplexity averages "
            "over exactly the same tokens",
            "shuffled_right": "item i's right side replaced by item i+1's (the last item takes the first's)",
        },
        model=magnet.identity.to_dict(),
        data=[data_file(path)],
        started=started,
        seconds=time.perf_counter() - start,
        details=details,
    )
