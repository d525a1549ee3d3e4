# The rule table of phase 11 (rule.md), from the result files; run from the repository root.
import json, os
P = "benchmarks/results/p11-2026-12-03/p11-{}.json"
B = "benchmarks/results/p10-2026-12-03/p10fp32-{}.json"
items = [
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
for label, task, key, op, th in items:
    scale = 100 if "rep4" in key else 1
    old = json.load(open(B.format(task)))["figures"][key] * scale
    if not os.path.exists(P.format(task)):
        print(f"{label:32} p10 {old:8.4f}  p11 (not yet)"); continue
    new = json.load(open(P.format(task)))["figures"][key] * scale
    ok = new >= th if op == ">=" else new <= th
    print(f"{label:32} p10 {old:8.4f}  p11 {new:8.4f}  {op} {th}: {'holds' if ok else 'FAILS'}")
