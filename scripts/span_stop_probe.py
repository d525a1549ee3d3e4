"""Which token closes a model's fills, END or EOS: one table, JSON.

The decoder closes a span on END or on EOS (``SpanProgram``), so a model can close its fills with
either. For each model, greedy fills of the first ``--items`` infill items in the model's own
layout; at every span step after the first it records P(END) and P(EOS), and for each fill that
closed, the token that closed it. Also P(END) and P(EOS) right after the 8 one-sentence texts of
``layout_token_probe.py`` (a text that opens a document, read causally).

    python scripts/span_stop_probe.py default-base default runs/default-p21 \\
        --items runs/data/infill-dev-all.jsonl -o runs/eval/span-stops.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from layout_token_probe import ONE_SENTENCE

from magnetsdk import Magnet
from magnetsdk.forward import logits_at, run_decoder
from magnetsdk.infilling import decode_spans, may_break_lines, move_spaces_into_gaps, split_gaps
from magnetsdk.modes import AttentionMode


def after_lone_sentences(magnet: Magnet) -> dict[str, float]:
    """Mean P(END) and P(EOS) after each one-sentence text."""
    end, eos = magnet.layout.end_id, magnet.tokenizer.eos_token_id
    totals = torch.zeros(2)
    for text in ONE_SENTENCE:
        ids = torch.tensor([magnet.tokenizer(text)["input_ids"]])
        with torch.no_grad():
            hidden = run_decoder(
                magnet.model, ids, torch.ones_like(ids, dtype=torch.bool), AttentionMode.CAUSAL
            )
            probs = torch.softmax(logits_at(magnet.model, hidden.hidden[0, -1:]), dim=-1)[0]
        totals += torch.stack([probs[end], probs[eos]])
    mean = totals / len(ONE_SENTENCE)
    return {"lone_p_end": float(mean[0]), "lone_p_eos": float(mean[1])}


def span_steps(magnet: Magnet, items: list[dict], max_new_tokens: int) -> dict[str, float]:
    """P(END) and P(EOS) at every span step after the first, and which token closed each fill."""
    end, eos = magnet.layout.end_id, magnet.tokenizer.eos_token_id
    # The segments and held-back tokens Magnet.infill would use for "left[GAP]right".
    texts = [f"{i['left']}[GAP]{i['right']}" for i in items]
    segments = [move_spaces_into_gaps(split_gaps(t, "[GAP]"))[0] for t in texts]
    contexts = [[magnet.tokenizer(p, add_special_tokens=False)["input_ids"] for p in s] for s in segments]
    held = [frozenset() if may_break_lines(t, "auto") else magnet._line_break_ids for t in texts]
    steps: list[torch.Tensor] = []
    with torch.no_grad():
        spans = decode_spans(
            magnet.model,
            contexts,
            magnet.layout,
            magnet._prefix,
            magnet._pad_id,
            max_new_tokens=max_new_tokens,
            eos_id=eos,
            layout=magnet.infill_layout,
            held_back=held,
            step_logits=steps,
        )
    p_end, p_eos, closed_by = [], [], {"end": 0, "eos": 0}
    for row, found in enumerate(spans):
        length = len(found[0])
        for step in range(1, min(length + 1, len(steps))):  # step 0 may not close a span
            probs = torch.softmax(steps[step][row], dim=-1)
            p_end.append(float(probs[end]))
            p_eos.append(float(probs[eos]))
        if length < max_new_tokens:  # closed: the pick at step `length` was END or EOS
            closed_by["end" if int(steps[length][row].argmax()) == end else "eos"] += 1
    return {
        "span_steps": len(p_end),
        "span_max_p_end": max(p_end),
        "span_max_p_eos": max(p_eos),
        "span_mean_p_end": sum(p_end) / len(p_end),
        "span_mean_p_eos": sum(p_eos) / len(p_eos),
        "closed_by_end": closed_by["end"],
        "closed_by_eos": closed_by["eos"],
        "fills": len(items),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--items", type=Path, default=Path("runs/data/infill-dev-all.jsonl"))
    parser.add_argument("--limit", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("-o", "--output", type=Path, required=True)
    args = parser.parse_args()
    lines = args.items.read_text(encoding="utf-8").splitlines()
    items = [json.loads(line) for line in lines[: args.limit]]
    rows = {}
    for name in args.models:
        magnet = Magnet.from_pretrained(name)
        rows[name] = {
            "end_token": magnet.layout.end,
            **after_lone_sentences(magnet),
            **span_steps(magnet, items, args.max_new_tokens),
        }
    header = [
        "model",
        "END",
        "lone P(END)",
        "lone P(EOS)",
        "span max P(END)",
        "span max P(EOS)",
        "closed by END / EOS",
    ]
    print(" | ".join(header))
    for name, r in rows.items():
        print(
            f"{name} | {r['end_token']} | {r['lone_p_end']:.4f} | {r['lone_p_eos']:.4f} | "
            f"{r['span_max_p_end']:.4f} | {r['span_max_p_eos']:.4f} | "
            f"{r['closed_by_end']} / {r['closed_by_eos']} of {r['fills']}"
        )
    settings = {"items": str(args.items), "limit": args.limit, "max_new_tokens": args.max_new_tokens}
    args.output.write_text(
        json.dumps({"settings": settings, "models": rows}, indent=2) + "\n", encoding="utf-8"
    )


if __name__ == "__main__":
    main()
