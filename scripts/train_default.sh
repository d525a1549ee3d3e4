#!/usr/bin/env bash
# The long CPU run of the default adapter: configs/train-default.toml (~1.22M tokens, 345 steps, about 2 h on both cores).
#
#   bash scripts/train_default.sh            # start, or continue after any stop (always --resume)
#   THREADS=1 bash scripts/train_default.sh  # on a CPU shared with other jobs
#
# Safe to re-run at any time: --resume continues from the newest readable checkpoint in
# runs/default-long, starts fresh when that directory is gone, and the data files are rebuilt
# only when missing. Watch runs/default-long/metrics.jsonl: losses every step, and every 50
# steps eval_natural_tokens / eval_rep4 (stop or reweight if the continuation length falls).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
SHARED=${SHARED:-../shared/data}
CONFIG=${CONFIG:-configs/train-default.toml}
if [[ ! -f runs/data/documents.jsonl || ! -f runs/data/sts-heldout.csv || ! -f runs/data/sts_scored.jsonl ]]; then
  # Lines 1-1000 of wiki.valid stay out of training: the infill dev (1-500) and test (501-1000) items.
  "$PY" scripts/prepare_training_data.py --shared "$SHARED" --out runs/data --holdout-lines 1000
fi
args=(train --config "$CONFIG" --resume)
[[ -n "${THREADS:-}" ]] && args+=(--threads "$THREADS")
[[ -n "${STEPS:-}" ]] && args+=(--max-steps "$STEPS")
[[ -n "${OUTPUT_DIR:-}" ]] && args+=(--output-dir "$OUTPUT_DIR")
exec "$PY" -m magnetsdk.cli.main "${args[@]}" "$@"
