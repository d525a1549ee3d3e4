#!/usr/bin/env bash
# Every figure the shipped model is judged on (issue: the retrained model), for one model, measured
# the same way for the base and the adapted model: runs/eval/NAME-TASK.json, logs in runs/logs.
#
#   bash scripts/eval_model.sh NAME [MODEL OPTIONS]          # e.g.
#   bash scripts/eval_model.sh default-base --model default-base
#   bash scripts/eval_model.sh long --model runs/default-long
#   TASKS="sts-dev infill-dev" bash scripts/eval_model.sh long --model runs/default-long
#
# Selection reads only sts-dev, infill-dev (or infill-dev-all: every item lines 1-500 give, all
# filled; build_infill_set.py --items 500 --lines 1-500) and (scripts/sscl_sweep.sh) the even rows of sts-heldout;
# sts-heldout (every 6th STS-B train row), its odd rows sts-heldout-report, infill-test
# (wiki.valid lines 501-1000) and the retrieval set (lines 1-500) are reported, never selected on.
# The infill tasks read the model's plain fills (no loop guard, no resampling, no cut), so that a phase is
# compared with the phases before it as they were measured; the *-defaults tasks fill with
# Magnet.infill's defaults (loop guard, copies resampled, unclosed fills cut: docs/results.md,
# "Loops in fills" and "Fills that end inside a sentence").
# The infill tasks fill in LAYOUT (default spm, the layout every phase up to 37 was measured in;
# LAYOUT=spm-joined for a model served in it).
# Data: runs/data from scripts/train_default.sh (prepare_training_data.py --holdout-lines 1000),
# scripts/build_infill_set.py and scripts/build_retrieval_set.py (see docs/results.md).
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:?NAME}; shift
MAGNET=${MAGNET:-.venv/bin/magnet}
SHARED=${SHARED:-../shared/data}
S=$SHARED/stsb/sts-dev.csv
W=$SHARED/wikitext2/wiki.valid.tokens
TASKS=${TASKS:-sts-dev sts-heldout sts-heldout-select sts-heldout-report retrieval lm repetition repetition-full infill-dev infill-dev-all infill-test infill-test-all infill-test-ranked}
export HF_HUB_OFFLINE=1
mkdir -p runs/eval runs/logs
[[ -f runs/data/sts-heldout-report.csv ]] || "${PY:-.venv/bin/python}" scripts/build_heldout_sts.py --halves runs/data/sts-heldout.csv
repetition=(repetition "$W" --limit 100 --prefix-tokens 32 --new-tokens 128 --top-p 0.9 --temperature 1.0
  --seed 0 --batch-size 16 --judge default-base)
LAYOUT=${LAYOUT:-spm}
infill=(--layout "$LAYOUT" --generate 40 --max-new-tokens 48 --batch-size 8 --candidates 1 --no-repeat-ngram 0 --resample-copies 0 --no-cut-unclosed --no-whole-sentences)
defaults=(--layout "$LAYOUT" --generate 1000 --max-new-tokens 48 --batch-size 8)
for task in $TASKS; do
  case $task in
    sts-dev) args=(sts "$S") ;;
    sts-heldout) args=(sts runs/data/sts-heldout.csv) ;;
    sts-heldout-select) args=(sts runs/data/sts-heldout-select.csv) ;;  # even rows: selection
    sts-heldout-report) args=(sts runs/data/sts-heldout-report.csv) ;;  # odd rows: never selected on
    retrieval) args=(retrieval runs/data/retrieval-heldout) ;;
    lm) args=(lm "$W" --max-tokens 20480 --context 512) ;;
    repetition) args=("${repetition[@]}") ;;
    repetition-full) args=("${repetition[@]}" --full-length) ;;
    infill-dev) args=(infill runs/data/infill-dev.jsonl "${infill[@]}") ;;
    infill-dev-all) args=(infill runs/data/infill-dev-all.jsonl "${infill[@]}" --generate 1000) ;;  # all 149 greedy
    infill-test) args=(infill runs/data/infill-test.jsonl "${infill[@]}") ;;
    infill-test-all) args=(infill runs/data/infill-test.jsonl "${infill[@]}" --generate 1000) ;;  # all 144 greedy
    infill-test-ranked) args=(infill runs/data/infill-test.jsonl "${infill[@]}" --candidates 8) ;;
    infill-dev-all-defaults) args=(infill runs/data/infill-dev-all.jsonl "${defaults[@]}") ;;
    infill-test-all-defaults) args=(infill runs/data/infill-test.jsonl "${defaults[@]}") ;;
    *) echo "unknown task $task" >&2; exit 2 ;;
  esac
  started=$(date +%s)
  "$MAGNET" eval "${args[@]}" "$@" -o "runs/eval/$name-$task.json" > "runs/logs/eval-$name-$task.log" 2>&1 \
    || { echo "$name $task failed: runs/logs/eval-$name-$task.log" >&2; exit 1; }
  echo "$name $task: $(( $(date +%s) - started )) s"
done
