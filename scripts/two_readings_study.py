"""Span words read without the wrap GAP, span ends read with it: a study of two readings (issue: infilling).

In ``spm`` (``BOS right GAP left | span``) the GAP between the right and the left side costs the
reading of the span (phase 35, dev: perplexity 15.96 against 15.38 in ``spm-joined``, which has no
GAP there) but is the cue that tells the model where the span ends (served in ``spm-joined`` it
closes 4 of 149 dev fills; docs/results.md, "The wrap GAP"). Two readings take each one's strength:
at every step the probability of a stop (END or EOS) is ``spm``'s, and the other tokens share the
rest in ``spm-joined``'s proportions. This measures, on ``magnet eval infill`` items, the span
perplexity of that distribution (the same span tokens, END excluded) and greedy fills (line breaks
held back as ``Magnet.infill`` does for a one-line text; no loop guard, resampling or cut): closed,
word F1 with the true span, copies and loops.

    .venv/bin/python scripts/two_readings_study.py runs/data/infill-dev-all.jsonl --model default \\
        -o runs/eval/two-readings-dev.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from magnetsdk import Magnet
from magnetsdk.copies import copies_text, loops
from magnetsdk.eval.infill import both_sides_sequence, read_infill_items, tokenize_items, word_f1
from magnetsdk.forward import logits_at, run_decoder
from magnetsdk.infilling import line_break_ids
from magnetsdk.layout import infill_layout

WORDS, ENDS = infill_layout("spm-joined"), infill_layout("spm")


def two_readings(ends: torch.Tensor, words: torch.Tensor, stops: list[int]) -> torch.Tensor:
    """Log-probabilities (V,): the stops' from ``ends``' logits, the rest from ``words``' renormalised."""
    from_ends, from_words = ends.double().log_softmax(-1), words.double().log_softmax(-1)
    stop = from_ends[stops].exp().sum().clamp(max=1 - 1e-9)
    rest = from_words.clone()
    rest[stops] = float("-inf")
    out = rest - rest.logsumexp(-1) + torch.log1p(-stop)
    out[stops] = from_ends[stops]
    return out


def last_logits(magnet: Magnet, ids: list[int], past=None, past_valid=None):
    """The logits after ``ids`` fed on top of ``past`` (causal), the new cache and its valid mask."""
    x = torch.tensor([ids])
    valid = torch.ones_like(x, dtype=torch.bool)
    seen = valid if past_valid is None else torch.cat([past_valid, valid], 1)
    past_span = None if past_valid is None else torch.ones_like(past_valid)
    out = run_decoder(
        magnet.model, x, valid, "causal", torch.ones_like(valid), past, past_valid, past_span, use_cache=True
    )
    return logits_at(magnet.model, out.hidden[0, -1]), out.cache, seen


def study(magnet: Magnet, path: Path, max_new_tokens: int) -> dict:
    items = read_infill_items(path)
    tokenized = tokenize_items(magnet, items)
    stops = [magnet.layout.end_id, magnet.tokenizer.eos_token_id]
    banned = [
        magnet.layout.gap_id,
        magnet.layout.span_id,
        magnet.layout.mask_id,
        *line_break_ids(magnet.tokenizer),
    ]
    nll, fills = [], []
    with torch.inference_mode():
        for item, tokens in zip(items, tokenized, strict=True):
            sequences = [both_sides_sequence(magnet, tokens, layout) for layout in (ENDS, WORDS)]
            ends, words = (
                logits_at(
                    magnet.model,
                    run_decoder(
                        magnet.model,
                        torch.tensor([s.input_ids]),
                        torch.ones(1, len(s.input_ids), dtype=torch.bool),
                        "causal",
                    ).hidden[0, s.target_positions],
                )
                for s in sequences
            )
            targets = sequences[0].targets  # the same span tokens in both readings
            nll.extend(
                -float(two_readings(e, w, stops)[t]) for e, w, t in zip(ends, words, targets, strict=True)
            )
            # Each reading's context: its sequence up to the first span token.
            states = [last_logits(magnet, s.input_ids[: s.target_positions[0] + 1]) for s in sequences]
            chosen, closed = [], False
            for step in range(max_new_tokens):
                scores = two_readings(states[0][0], states[1][0], stops)
                scores[banned] = float("-inf")
                if step == 0:  # a span gets at least one token, as Magnet.infill's do
                    scores[stops] = float("-inf")
                token = int(scores.argmax())
                if token in stops:
                    closed = True
                    break
                chosen.append(token)
                states = [last_logits(magnet, [token], cache, seen) for _, cache, seen in states]
            text = magnet.tokenizer.decode(chosen)
            fills.append(
                {
                    "left": item.left,
                    "gold": item.span,
                    "right": item.right,
                    "generated": text,
                    "closed": closed,
                }
            )
    return {
        "items": len(items),
        "span_tokens": len(nll),
        "ppl_two_readings": float(np.exp(np.mean(nll))),
        "closed": sum(f["closed"] for f in fills),
        "copies": sum(copies_text(f["generated"], (f["left"], f["right"])) for f in fills),
        "loops": sum(loops(f["generated"]) for f in fills),
        "gold_f1": float(np.mean([word_f1(f["generated"], f["gold"]) for f in fills])),
        "fills": fills,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("items", type=Path, help="infill items (JSONL: left, span, right)")
    parser.add_argument("--model", default="default")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("-o", "--output", type=Path, required=True)
    args = parser.parse_args()
    magnet = Magnet.from_pretrained(args.model)
    result = study(magnet, args.items, args.max_new_tokens)
    args.output.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in result.items() if k != "fills"}))


if __name__ == "__main__":
    main()
