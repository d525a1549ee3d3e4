"""Does amplifying the right side at decode time lower the span perplexity? (issue: infilling)

Context-aware decoding (Shi et al., 2023) scores a token with ``(1 + a) log p(x | both sides) -
a log p(x | left only)``, renormalised: the right side's share of the prediction is amplified by
``a``. This measures, for the same span tokens ``magnet eval infill`` scores (END excluded), the
perplexity of that distribution with the true right side and with the next item's right side (the
shuffled control), beside the plain left-only perplexity, for several ``a``. A causal layout only
(``spm``: the both-sides rows and the left-only rows share one attention mode).

    .venv/bin/python scripts/contrastive_infill_study.py runs/default-kl runs/data/infill-dev.jsonl \\
        -o runs/eval/contrast-dev.json
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch

from magnetsdk import Magnet
from magnetsdk.eval.infill import both_sides_sequence, left_only_sequence, read_infill_items, tokenize_items
from magnetsdk.forward import logits_at, run_decoder


def log_probs(magnet: Magnet, sequences) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per sequence, the log-softmax at its target positions (t, V) and its targets (t,)."""
    out = []
    with torch.inference_mode():
        for s in sequences:
            ids = torch.tensor([s.input_ids])
            hidden = run_decoder(magnet.model, ids, torch.ones_like(ids, dtype=torch.bool), "causal").hidden[
                0
            ]
            logits = logits_at(magnet.model, hidden[torch.tensor(s.target_positions)])
            out.append((logits.log_softmax(-1), torch.tensor(s.targets)))
    return out


def perplexity(rows, left_rows, amplify: float) -> float:
    total = count = 0.0
    for (both, targets), (left, _) in zip(rows, left_rows, strict=True):
        mixed = ((1 + amplify) * both - amplify * left).log_softmax(-1)
        total -= float(mixed.gather(-1, targets[:, None]).sum())
        count += len(targets)
    return math.exp(total / count)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model")
    parser.add_argument("items", help="infill jsonl (left, span, right)")
    parser.add_argument("--amplify", type=float, nargs="+", default=[0.0, 0.25, 0.5, 0.75, 1.0, 1.5])
    parser.add_argument("-o", "--output", type=Path, required=True)
    args = parser.parse_args()
    magnet = Magnet.from_pretrained(args.model)
    if magnet.infill_layout.bidirectional_context:
        raise SystemExit(
            f"{args.model}: layout {magnet.infill_layout.name} is not causal; this study needs one"
        )
    items = tokenize_items(magnet, read_infill_items(args.items))
    shuffled = [items[(i + 1) % len(items)].right for i in range(len(items))]
    both = log_probs(magnet, [both_sides_sequence(magnet, t, magnet.infill_layout) for t in items])
    control = log_probs(
        magnet,
        [
            both_sides_sequence(magnet, t, magnet.infill_layout, r)
            for t, r in zip(items, shuffled, strict=True)
        ],
    )
    left = log_probs(magnet, [left_only_sequence(magnet, t) for t in items])
    ppl_left = perplexity(left, left, 0.0)
    rows = []
    print(f"{'amplify':>8} {'both sides':>11} {'/ left only':>12} {'shuffled':>9} {'shuffled / both':>16}")
    for a in args.amplify:
        ppl_both, ppl_control = perplexity(both, left, a), perplexity(control, left, a)
        rows.append(
            {
                "amplify": a,
                "both_sides": ppl_both,
                "shuffled_right": ppl_control,
                "both_over_left": ppl_both / ppl_left,
            }
        )
        print(
            f"{a:>8.2f} {ppl_both:>11.2f} {ppl_both / ppl_left:>12.3f} {ppl_control:>9.2f} {ppl_control / ppl_both:>16.3f}"
        )
    result = {"model": args.model, "items": args.items, "left_only": ppl_left, "rows": rows}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
