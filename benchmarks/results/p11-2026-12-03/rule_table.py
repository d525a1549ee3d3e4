"""The rule table of phase 11 (rule.md), from the result files; run from the repository root."""

import json
from pathlib import Path

NEW = "benchmarks/results/p11-2026-12-03/p11-{}.json"
OLD = "benchmarks/results/p10-2026-12-03/p10fp32-{}.json"
ITEMS = [
    ("STS-B dev", "sts-dev", "sts-dev.spearman", ">=", 83.44),
    ("held-out even rows", "sts-heldout-select", "sts-heldout-select.spearman", ">=", 78.22),
    ("infill dev-all both/left", "infill-dev-all", "both_over_left", "<=", 0.936),
    ("infill dev-all copies", "infill-dev-all", "copy_rate", "<=", 0.1946),
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


for label, task, key, op, threshold in ITEMS:
    old, new = figure(OLD, task, key), figure(NEW, task, key)
    if new is None:
        print(f"{label:32} p10 {old:8.4f}  p11 (not yet)")
        continue
    holds = new >= threshold if op == ">=" else new <= threshold
    print(f"{label:32} p10 {old:8.4f}  p11 {new:8.4f}  {op} {threshold}: {'holds' if holds else 'FAILS'}")
