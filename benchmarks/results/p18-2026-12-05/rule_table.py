"""The rule table of phase 17 (rule.md), from the result files; run from the repository root."""

import json
from pathlib import Path

HERE = "benchmarks/results/p18-2026-12-05/"
NEW = HERE + "p18-{}.json"
OLD = "benchmarks/results/p11-2026-12-03/p11-{}.json"
ITEMS = [
    # The rule: ">= 0.289 (phase 11 0.322, 48 of 149, less 5 items)", i.e. 43 of 149 (0.2886).
    ("infill dev-all closed", "infill-dev-all", "closed_rate", ">=", 43 / 149),
    ("infill dev-all word F1", "infill-dev-all", "gold_f1", ">=", 0.198),
    ("STS-B dev", "sts-dev", "sts-dev.spearman", ">=", 84.00),
    ("held-out even rows", "sts-heldout-select", "sts-heldout-select.spearman", ">=", 78.89),
    ("infill dev-all both/left", "infill-dev-all", "both_over_left", "<=", 0.934),
    # The rule: "<= 0.1879 (phase 11 26 of 149, + 2)", i.e. 28 of 149 = 0.18792, written rounded down.
    ("infill dev-all copies", "infill-dev-all", "copy_rate", "<=", 28 / 149),
    ("nucleus natural length", "repetition", "nucleus.tokens", ">=", 100.0),
    ("rep-4 nucleus equal length %", "repetition-full", "nucleus.rep4", "<=", 5.91),
    ("rep-4 greedy equal length %", "repetition-full", "greedy.rep4", "<=", 64.64),
    ("perplexity", "lm", "ppl", "<=", 22.26),
    ("retrieval nDCG@10", "retrieval", "ndcg@10", ">=", 50.25),
]


def figure(pattern: str, task: str, key: str) -> float | None:
    path = Path(pattern.format(task))
    if not path.exists():
        return None
    scale = 100 if "rep4" in key else 1
    return json.loads(path.read_text())["figures"][key] * scale


def item_one() -> None:
    """Item 1: the lone-sentence EOS, the inner-period EOS and the demo's early stops."""
    tokens = json.loads(Path(HERE + "p18-probe-demo-seeds.json").read_text())["demo_seed_tokens"]
    probe = json.loads(Path(HERE + "p18-layout-tokens.json").read_text())
    model = probe[0] if isinstance(probe, list) else next(iter(probe.values()))
    lone = model["p_eos_after_one_sentence_mean"]
    inner = model["p_eos_after_inner_period_mean"]
    early = sum(t < 32 for t in tokens)
    print(
        f"{'P(EOS) after a lone sentence':32} p11 0.229   p18 {lone:.4f}  <= 0.115: {'holds' if lone <= 0.115 else 'FAILS'}"
    )
    print(
        f"{'P(EOS) after an inner period':32} base 0.0081 p18 {inner:.4f}  <= 0.0081: {'holds' if inner <= 0.0081 else 'FAILS'}"
    )
    print(
        f"{'demo early stops of 12 seeds':32} p11 2       p18 {early}       <= 1: {'holds' if early <= 1 else 'FAILS'}"
    )


item_one()
for label, task, key, op, threshold in ITEMS:
    old, new = figure(OLD, task, key), figure(NEW, task, key)
    if new is None:
        print(f"{label:32} p11 {old:8.4f}  p18 (not yet)")
        continue
    holds = new >= threshold if op == ">=" else new <= threshold
    print(f"{label:32} p11 {old:8.4f}  p18 {new:8.4f}  {op} {threshold}: {'holds' if holds else 'FAILS'}")
