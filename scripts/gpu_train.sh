#!/usr/bin/env bash
# Train the default recipe far longer on one CUDA device, then evaluate it; ~12 minutes on an H200.
#
#   bash scripts/gpu_train.sh                       # configs/train-gpu.toml -> runs/gpu/
#   SCORED=0 bash scripts/gpu_train.sh              # the same without CoSENT on STS-B train labels
#   DEVICE=cpu STEPS=2 BASE=DIR bash scripts/gpu_train.sh   # the CPU check (tests/test_train_gpu_script.py)
#
# Writes runs/gpu/adapter/ (the adapter; Magnet.from_pretrained loads it), runs/gpu/eval/*.json
# (magnet eval sts on STS-B dev and the held-out split, lm, repetition natural and --full-length,
# infill; the base model beside it) and runs/gpu/eval.json (every figure in one file, with the
# training's tokens, steps and wall time). Training gets TRAIN_S seconds (default 540): if it is not
# done by then it is stopped and the newest checkpoint is exported, so the evals still run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
MAGNET=("$PY" -m magnetsdk.cli.main)
SHARED=${SHARED:-../shared/data}
OUT=${OUT:-runs/gpu}
CONFIG=${CONFIG:-configs/train-gpu.toml}
DEVICE=${DEVICE:-cuda}
TRAIN_S=${TRAIN_S:-540}
EVAL_LIMIT=${EVAL_LIMIT:-}            # e.g. 20 for a quick check; empty: the full files
DATA=${DATA:-runs/data}
W="$SHARED/wikitext2/wiki.valid.tokens"
S="$SHARED/stsb/sts-dev.csv"
mkdir -p "$OUT/eval"
started=$(date +%s)

# Lines 1-1000 of wiki.valid stay out of training: the infill dev (1-500) and test (501-1000) items.
"$PY" scripts/prepare_training_data.py --shared "$SHARED" --out "$DATA" --holdout-lines "${HOLDOUT_LINES:-1000}"
[[ -f "$DATA/infill-test.jsonl" ]] || \
  "$PY" scripts/build_infill_set.py "$W" --items 200 --lines "${INFILL_LINES:-501-1000}" --output "$DATA/infill-test.jsonl"

train=(train --config "$CONFIG" --output-dir "$OUT/adapter" --device "$DEVICE" --resume
  --data "$DATA/text.txt" --documents "$DATA/documents.jsonl" --pairs "$DATA/snli_pairs.jsonl"
  --eval-prefixes "$DATA/eval_prefixes.txt" --scored-pairs "$DATA/sts_scored.jsonl")
[[ "${SCORED:-1}" == 0 ]] && train+=(--scored-weight 0)  # without STS-B train labels
[[ -n "${STEPS:-}" ]] && train+=(--max-steps "$STEPS")
[[ -n "${BASE:-}" ]] && train+=(--base-model "$BASE")
[[ -n "${TRAIN_ARGS:-}" ]] && read -r -a extra <<< "$TRAIN_ARGS" && train+=("${extra[@]}")
set +e
timeout --signal=INT "$TRAIN_S" "${MAGNET[@]}" "${train[@]}"
code=$?
set -e
if [[ $code -ne 0 ]]; then
  last=$(ls "$OUT/adapter/checkpoints" 2>/dev/null | grep '^step-' | sort | tail -1 || true)
  [[ -n "$last" ]] || { echo "training failed (exit $code) before its first checkpoint" >&2; exit 1; }
  steps=$((10#${last#step-}))
  echo "training stopped (exit $code) at $TRAIN_S s; exporting the checkpoint of step $steps" >&2
  "${MAGNET[@]}" "${train[@]}" --max-steps "$steps"
fi
trained=$(date +%s)

model=(--model "$OUT/adapter" --device "$DEVICE")
base=(--device "$DEVICE")
[[ -n "${BASE:-}" ]] && base+=(--model "$BASE") || base+=(--model default-base)
limit=()
[[ -n "$EVAL_LIMIT" ]] && limit=(--limit "$EVAL_LIMIT")
for who in adapter base; do
  if [[ $who == adapter ]]; then m=("${model[@]}"); else m=("${base[@]}"); fi
  "${MAGNET[@]}" eval sts "$S" "${m[@]}" "${limit[@]}" -o "$OUT/eval/$who-sts-dev.json"
  "${MAGNET[@]}" eval sts "$DATA/sts-heldout.csv" "${m[@]}" "${limit[@]}" -o "$OUT/eval/$who-sts-heldout.json"
  "${MAGNET[@]}" eval lm "$W" --max-tokens "${LM_TOKENS:-20480}" --context 512 "${m[@]}" -o "$OUT/eval/$who-lm.json"
  "${MAGNET[@]}" eval repetition "$W" --limit "${EVAL_LIMIT:-100}" --prefix-tokens 32 --new-tokens 128 \
    --top-p 0.9 --temperature 1.0 --seed 0 "${m[@]}" -o "$OUT/eval/$who-repetition.json"
  "${MAGNET[@]}" eval repetition "$W" --limit "${EVAL_LIMIT:-100}" --prefix-tokens 32 --new-tokens 128 \
    --top-p 0.9 --temperature 1.0 --seed 0 --full-length "${m[@]}" -o "$OUT/eval/$who-repetition-full.json"
  "${MAGNET[@]}" eval infill "$DATA/infill-test.jsonl" "${m[@]}" "${limit[@]}" --generate 40 -o "$OUT/eval/$who-infill.json"
done
"$PY" scripts/collect_eval.py "$OUT" --train-s $((trained - started)) --total-s $(( $(date +%s) - started ))
