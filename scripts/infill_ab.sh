#!/usr/bin/env bash
# The infill layout A/B: the same msg-only training (MSG + plain next-token examples, no SSCL, no
# MNTP) in each layout, equal steps, then the layout study on the dev items (selection) and on the
# test items (no selection decision reads them). Training holds out wiki.valid lines 1-1000; the
# infill sets come from lines 1-500 (dev) and 501-1000 (test): see scripts/build_infill_set.py.
#
#   bash scripts/infill_ab.sh STEPS LAYOUT [LAYOUT ...]
#
# Runs go to runs/ab-LAYOUT, evaluations to runs/eval/ab-LAYOUT-{dev,test}.json. Each run uses one
# thread; the layouts train one after another (set AB_PARALLEL=1 to train them side by side).
set -euo pipefail
steps=${1:?steps}; shift
W=../shared/data/wikitext2/wiki.valid.tokens
mkdir -p runs/data/ab runs/eval runs/logs
[ -f runs/data/infill-dev.jsonl ] || .venv/bin/python scripts/build_infill_set.py $W --items 60 --lines 1-500 -o runs/data/infill-dev.jsonl
[ -f runs/data/infill-test.jsonl ] || .venv/bin/python scripts/build_infill_set.py $W --items 200 --lines 501-1000 -o runs/data/infill-test.jsonl
[ -f runs/data/ab/wiki.txt ] || .venv/bin/python - "$W" <<'PY'
import sys
from pathlib import Path
lines = Path(sys.argv[1]).read_text(encoding="utf-8").splitlines()
keep = [l.strip() for n, l in enumerate(lines, 1)
        if n > 1000 and l.strip() and not l.strip().startswith("=") and len(l.split()) >= 20]
Path("runs/data/ab/wiki.txt").write_text("\n".join(keep) + "\n", encoding="utf-8")
PY
train_one() {
  .venv/bin/magnet train --recipe msg-only --infill-layout "$1" --data runs/data/ab/wiki.txt \
    --output-dir "runs/ab-$1" --max-steps "$steps" --batch-size 8 --max-length 128 \
    --learning-rate 5e-4 --warmup-steps 10 --schedule cosine --lora-r 8 --lora-alpha 16 \
    --save-every 20 --threads 1 --no-progress $( [ -d "runs/ab-$1/checkpoints" ] && echo --resume ) \
    > "runs/logs/ab-$1.log" 2>&1
}
for layout in "$@"; do
  if [ "${AB_PARALLEL:-0}" = 1 ]; then train_one "$layout" & else train_one "$layout"; fi
done
wait
for layout in "$@"; do
  for split in dev test; do
    OMP_NUM_THREADS=2 .venv/bin/magnet eval infill "runs/data/infill-$split.jsonl" --model "runs/ab-$layout" \
      --layout "$layout" --generate 40 --max-new-tokens 48 -o "runs/eval/ab-$layout-$split.json" \
      > "runs/logs/ab-$layout-$split.log" 2>&1 || { echo "eval of $layout on $split failed"; exit 1; }
  done
done
