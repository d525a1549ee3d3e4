#!/usr/bin/env bash
# A small measured choice of contrastive batch and temperature, selected on the held-out STS split.
#
# Each setting trains the `sscl-only` recipe from the same base on the SNLI pairs of runs/data (hard
# negatives on) for the same number of anchors (ANCHORS; steps = ANCHORS / batch, so every run sees
# the same pairs and about the same tokens), then `magnet eval sts` scores it on
# runs/data/sts-heldout-select.csv: the even rows of runs/data/sts-heldout.csv (every 6th STS-B
# train pair; scores used for selection only, never as labels). The odd rows
# (runs/data/sts-heldout-report.csv) are never read here, so they stay a split that no selection
# decision has seen; scripts/eval_model.sh reports them as task sts-heldout-report.
# One thread per process, fp32 (bf16 matmuls are far slower on CPU), GradCache chunks of 16
# anchors (a 48-anchor batch in one pass was killed for memory on this shared machine).
#
#   bash scripts/sscl_sweep.sh [OUT_DIR] [ANCHORS]     # all 480 selection pairs are scored (the file is
#                                                      # ordered by genre: a --limit would keep captions only)
#   SETTINGS="16:0.05 48:0.05 48:0.02" bash scripts/sscl_sweep.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/sscl-sweep}
anchors=${2:-768}
PY=${PY:-.venv/bin/python}
MAGNET=("$PY" -m magnetsdk.cli.main)
export OMP_NUM_THREADS=1
[[ -f runs/data/sts-heldout.csv ]] || "$PY" scripts/prepare_training_data.py --shared "${SHARED:-../shared/data}" --out runs/data
"$PY" scripts/build_heldout_sts.py --halves runs/data/sts-heldout.csv
mkdir -p "$out"
for setting in ${SETTINGS:-16:0.05 48:0.05 48:0.02}; do
  batch=${setting%%:*}; temperature=${setting##*:}
  name="b${batch}-t${temperature}"
  if [[ ! -f "$out/$name/magnet_config.json" ]]; then
    start=$(date +%s)
    "${MAGNET[@]}" train --recipe sscl-only --pairs runs/data/snli_pairs.jsonl --output-dir "$out/$name" \
      --batch-size "$batch" --contrastive-chunk-size 16 --temperature "$temperature" --max-steps $((anchors / batch)) \
      --sscl-max-length 48 --learning-rate 5e-4 --warmup-steps 3 --schedule cosine --lora-r 8 \
      --lora-alpha 16 --threads 1 --mixed-precision auto --no-progress --save-every 1000 --resume
    echo "$name trained in $(( $(date +%s) - start )) s" | tee -a "$out/times.txt"
  fi
  "${MAGNET[@]}" eval sts runs/data/sts-heldout-select.csv --model "$out/$name" -o "$out/heldout-$name.json"
done
"$PY" - "$out" <<'PYEOF'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
for path in sorted(out.glob("heldout-*.json")):
    figures = json.loads(path.read_text())["figures"]
    score = next(v for k, v in figures.items() if "spearman" in k)
    print(f"{path.stem[len('heldout-'):]:<14} held-out STS Spearman x100 {score:.2f}")
PYEOF
