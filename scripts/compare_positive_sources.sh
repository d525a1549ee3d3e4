#!/usr/bin/env bash
# Compare the three positive-view sources of SSCL (pairs, paraphrase, dropout) on STS-B dev.
#
# Each source trains the `sscl-only` recipe from the same base, on the same anchor texts (the first
# N SNLI dev premises that have an entailed and a contradicted hypothesis), with the same steps,
# batch and learning rate; only where the positive view comes from differs:
#   pairs       the entailed hypothesis (and the contradiction as a hard negative)
#   paraphrase  a paraphrase of the premise written once by the base model, cached
#   dropout     the premise itself, a second pass with different dropout (SimCSE)
# Then `magnet eval sts` scores each on STS-B dev. Needs runs/data2 from
# scripts/prepare_training_data.py. One thread per process, so it can share the machine.
#
#   bash scripts/compare_positive_sources.sh [OUT_DIR] [ANCHORS] [STEPS]
set -euo pipefail
out=${1:-runs/positives}
anchors=${2:-800}
steps=${3:-40}
shared=${SHARED:-../shared/data}
export OMP_NUM_THREADS=1
mkdir -p "$out"
head -n "$anchors" runs/data2/snli_pairs.jsonl > "$out/pairs.jsonl"
python -c "
import json, sys
for line in open('$out/pairs.jsonl', encoding='utf-8'):
    print(json.loads(line)['anchor'])
" > "$out/anchors.txt"
flags=(--recipe sscl-only --max-steps "$steps" --batch-size 16 --sscl-max-length 48 --learning-rate 5e-4
    --warmup-steps 5 --schedule cosine --lora-r 8 --lora-alpha 16 --threads 1 --no-progress --save-every 1000)
for source in pairs paraphrase dropout; do
    if [[ ! -f "$out/$source/magnet_config.json" ]]; then
        if [[ $source == pairs ]]; then
            magnet train --pairs "$out/pairs.jsonl" --positives pairs --output-dir "$out/$source" "${flags[@]}"
        else
            magnet train --data "$out/anchors.txt" --positives "$source" --output-dir "$out/$source" "${flags[@]}"
        fi
    fi
    magnet eval sts "$shared/stsb/sts-dev.csv" --model "$out/$source" -o "$out/sts-$source.json"
done
python - "$out" <<'EOF'
import json, sys
from pathlib import Path

out = Path(sys.argv[1])
rows = []
for source in ("pairs", "paraphrase", "dropout"):
    result = json.loads((out / f"sts-{source}.json").read_text())
    rows.append({"source": source, "sts_spearman_x100": result["figures"]["sts-dev.spearman"]})
print("| positives | STS-B dev |\n|---|---|")
for row in rows:
    print(f"| {row['source']} | {row['sts_spearman_x100']:.2f} |")
(out / "summary.json").write_text(json.dumps(rows, indent=2) + "\n")
EOF
