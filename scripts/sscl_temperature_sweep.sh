#!/usr/bin/env bash
# The contrastive temperature, measured from a trained adapter's checkpoint (issue: the retrained model).
#
# Each setting continues FROM's newest checkpoint (default runs/default-kl, the shipped run) for
# STEPS more steps of SSCL alone (MNTP, MSG and KL weights 0) at one temperature and a constant
# learning rate LR (default 1e-4; the checkpoint's own schedule has decayed to ~0): the same pairs in
# the same order for every setting, since the step decides the examples. Then `magnet eval sts`
# scores runs/data/sts-heldout-select.csv (the even rows of the held-out STS split; the odd rows stay
# unseen by every selection) and, for reference only, STS-B dev. The batch cannot vary here: a
# resumed run keeps the batch that chose its examples (scripts/sscl_sweep.sh varies it from the base).
#
#   bash scripts/sscl_temperature_sweep.sh [OUT_DIR] [STEPS]       # TEMPERATURES="0.02 0.05 0.1"
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/sscl-temperature}
steps=${2:-20}
from=${FROM:-runs/default-kl}
PY=${PY:-.venv/bin/python}
MAGNET=("$PY" -m magnetsdk.cli.main)
export HF_HUB_OFFLINE=1
latest=$(ls -d "$from"/checkpoints/step-* | sort | tail -1)
start=$((10#${latest##*step-}))
"$PY" scripts/build_heldout_sts.py --halves runs/data/sts-heldout.csv
mkdir -p "$out"
for temperature in ${TEMPERATURES:-0.02 0.05 0.1}; do
  run="$out/t$temperature"
  if [[ ! -f "$run/magnet_config.json" ]]; then
    mkdir -p "$run/checkpoints"
    [[ -d "$run/checkpoints/${latest##*/}" ]] || cp -r "$latest" "$run/checkpoints/"
    began=$(date +%s)
    STEPS=$((start + steps)) OUTPUT_DIR="$run" bash scripts/train_default.sh --mntp-weight 0 --msg-weight 0 \
      --kl-weight 0 --temperature "$temperature" --learning-rate "${LR:-1e-4}" --schedule constant \
      --save-every 1000 --eval-every 0 --keep-checkpoints 1
    echo "t$temperature: steps $((start + 1))-$((start + steps)) in $(( $(date +%s) - began )) s" | tee -a "$out/times.txt"
  fi
  "${MAGNET[@]}" eval sts runs/data/sts-heldout-select.csv --model "$run" -o "$out/sts-heldout-select-t$temperature.json"
  "${MAGNET[@]}" eval sts "${SHARED:-../shared/data}/stsb/sts-dev.csv" --model "$run" -o "$out/dev-t$temperature.json"
done
"$PY" - "$out" <<'PYEOF'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
def score(path):
    figures = json.loads(path.read_text())["figures"]
    return next(v for k, v in figures.items() if "spearman" in k)
print(f"{'temperature':<12} {'held-out select':>16} {'STS-B dev (not selected on)':>28}")
for path in sorted(out.glob("sts-heldout-select-t*.json")):
    t = path.stem.rsplit("-t", 1)[1]
    print(f"{t:<12} {score(path):>16.2f} {score(out / f'dev-t{t}.json'):>28.2f}")
PYEOF
