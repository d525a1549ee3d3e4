"""The small probes docs/results.md reports beside the eval figures, for one model, as JSON.

- facts: of the 16 prompts of tests/test_default_model.py (FACTS), how many a greedy 12-token
  continuation states; infill_greedy / infill_ranked: of its 16 gaps (INFILL_FACTS), how many a
  greedy fill and a ranked fill (8 candidates, seed 0) state, read plain (no loop guard, no
  resampling, no cut, as every phase was read); infill_greedy_defaults: the greedy fills with
  ``Magnet.infill``'s defaults (phase 35: 10 of 16, as plain);
- the demo's gap filled both ways, and the demo prompt continued greedily (48 tokens);
- demo_seed_tokens: the demo's continuation (32 tokens, sampled as ``magnet demo`` does) under
  seeds 0-11, in tokens, so a continuation that ends early reads as one seed's chance or as a habit.

    python scripts/probe_model.py default -o runs/eval/NAME-probe.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from test_default_model import (  # noqa: E402
    INFILL_FACTS,
    demo_continuations,
    facts_known,
    infill_facts_stated,
)

from magnetsdk import Magnet  # noqa: E402
from magnetsdk.demo import GAP_TEXT, PROMPT  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="a model name or directory, as --model takes it")
    parser.add_argument("-o", "--output", type=Path, required=True)
    args = parser.parse_args()

    texts = [text for text, _ in INFILL_FACTS]
    if texts[0] != GAP_TEXT:
        raise SystemExit("tests/test_default_model.py: INFILL_FACTS must open with magnetsdk.demo.GAP_TEXT")

    magnet = Magnet.from_pretrained(args.model)
    # The model's plain fills, as every earlier phase was read; and the fills with Magnet.infill's
    # defaults (loop guard, copies resampled, unclosed fills cut: docs/results.md, "Loops in fills").
    plain = {"no_repeat_ngram": 0, "resample_copies": 0, "cut_unclosed": False, "candidates": 1}
    greedy = magnet.infill(texts, max_new_tokens=8, **plain)
    ranked = magnet.infill(texts, max_new_tokens=8, seed=0, **{**plain, "candidates": 8})
    greedy_defaults = magnet.infill(texts, max_new_tokens=8)  # candidates='auto' since 2026-12-07

    sampled = demo_continuations(magnet)
    result = {
        "model": args.model,
        "facts": facts_known(magnet),
        "infill_greedy": sum(infill_facts_stated(greedy)),
        "infill_ranked": sum(infill_facts_stated(ranked)),
        "infill_greedy_defaults": sum(infill_facts_stated(greedy_defaults)),
        "demo_gap_ranked": ranked[0].spans[0],
        "demo_gap_greedy": greedy[0].spans[0],
        "generate_greedy": magnet.generate(PROMPT, max_new_tokens=48, temperature=0),
        "demo_seed_tokens": [tokens for _, tokens in sampled],
        "demo_seed_0": sampled[0][0],
    }
    args.output.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    # Only the stop figure: a rule may leave the others (facts, fills) unread until its decision.
    print(f"wrote {args.output}; demo continuation tokens under seeds 0-11: {result['demo_seed_tokens']}")


if __name__ == "__main__":
    main()
