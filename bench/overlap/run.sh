#!/bin/bash
# Overlap of the CPU optimizer with backward (issue 3), measured on one
# binary side by side: the synchronous optimizer (--sync-optimizer build),
# the overlapped one with AdamW's state in memory, and the overlapped one with
# the state on SSD. Prints step, compute, optimizer and store-busy times per
# step, and step / max(compute, optimizer, store busy).
#
#   [BATCH=1] [PREFETCH=3] bench/overlap/run.sh [BUILD] [SSD_DIR] [STEPS]
# PREFETCH is fuyou-compile's --prefetch-state: how many updates ahead the
# program reads a group's state.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
SSD=${2:-/tmp/fuyou-overlap-ssd}
STEPS=${3:-12}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
PY=/usr/bin/python3
mkdir -p "$SSD"
$PY "$ROOT/examples/prepare_data.py" --out "$W/tokens.bin" --max-bytes 200000 > /dev/null
# 12.5M parameters, small batch: the optimizer and its I/O are as big as compute.
$PY "$ROOT/examples/export.py" --model gpt2 --out "$W/m.onnx" --batch "${BATCH:-1}" --seq 16 --n-layer 7 \
    --d-model 384 --n-head 6 --block-size 16 > /dev/null
"$BUILD/bin/fuyou-compile" "$W/m.onnx" -o "$W/train" --max-group-bytes 2500000 --prefetch-state "${PREFETCH:-3}" 2> /dev/null
"$BUILD/bin/fuyou-compile" "$W/m.onnx" -o "$W/train_sync" --sync-optimizer 2> /dev/null

mean_ms() {  # mean step ms of a JSON log, skipping the first 2 steps (warm-up)
  $PY -c "import json,sys; ms=[json.loads(l)['ms'] for l in open(sys.argv[1])][2:]; print(f'{sum(ms)/len(ms):.1f}')" "$1"
}
"$W/train_sync" --data "$W/tokens.bin" --steps "$STEPS" --log-json "$W/sync.jsonl" --log-every 1000 2> /dev/null
"$W/train" --data "$W/tokens.bin" --steps "$STEPS" --log-json "$W/mem.jsonl" --log-every 1000 2> "$W/mem.err"
echo "machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p'); SSD dir $SSD on $(df --output=fstype "$SSD" | tail -1)"
echo "synchronous optimizer, state in memory: $(mean_ms "$W/sync.jsonl") ms/step"
echo "overlapped optimizer, state in memory:  $(mean_ms "$W/mem.jsonl") ms/step;  $(grep 'per step' "$W/mem.err")"
# State on SSD under three host budgets: 12M leaves one gradient slot (backward
# waits for each update), 40M more slots, 100M a slot per group and 8 staged groups.
for MEM in 12M 40M 100M; do
  "$W/train" --data "$W/tokens.bin" --steps "$STEPS" --log-json "$W/ssd.jsonl" --log-every 1000 \
      --ssd "$SSD" --cpu-mem $MEM 2> "$W/ssd.err"
  echo "overlapped optimizer, state on SSD, --cpu-mem $MEM: $(mean_ms "$W/ssd.jsonl") ms/step;  $(grep 'per step' "$W/ssd.err")"
  grep 'store:' "$W/ssd.err"
  $PY - "$W/ssd.err" <<'PYEOF'
import re, sys
t = open(sys.argv[1]).read()
step, comp, opt = map(float, re.search(r"per step: ([\d.]+) ms, compute ([\d.]+) ms, optimizer ([\d.]+) ms", t).groups())
busy = float(re.search(r"busy ([\d.]+) ms/step", t).group(1))
print(f"  step / max(compute {comp:.1f}, optimizer {opt:.1f}, store busy {busy:.1f}) = "
      f"{step / max(comp, opt, busy):.3f}  (goal <= 1.15)")
PYEOF
done
