#!/bin/sh
# make demo: export the example GPT, compile it, train it on the Python
# standard library's sources (bytes as tokens); the loss falls.
set -e
BUILD=${1:-build}
D=$BUILD/demo
PY=/usr/bin/python3
mkdir -p "$D"
[ -f "$D/val.bin" ] || $PY examples/prepare_data.py --out "$D/stdlib.bin" --val-out "$D/val.bin"
$PY examples/export.py --model gpt2 --out "$D/gpt2.onnx" --batch 8 --seq 64 \
    --n-layer 4 --d-model 128 --n-head 4 --block-size 64 > /dev/null
"$BUILD/bin/fuyou-compile" "$D/gpt2.onnx" -o "$D/train"
"$D/train" --data "$D/stdlib.bin" --steps 200 --lr 3e-3 --log-every 25 \
    --log-json "$D/log.jsonl" --save "$D/checkpoint" --val-data "$D/val.bin" --val-every 100
$PY - "$D/log.jsonl" <<'PYEOF'
import json, sys
log = [json.loads(l) for l in open(sys.argv[1])]
losses = [r["loss"] for r in log]
first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
val = [r["val_loss"] for r in log if "val_loss" in r]
print(f"demo: mean loss of the first 10 steps {first:.3f}, of the last 10 steps {last:.3f}; "
      f"held-out loss after steps 100 and 200: {val[0]:.3f}, {val[-1]:.3f}")
sys.exit(0 if last < first - 1.0 and val[-1] < val[0] else "demo: the loss did not fall")
PYEOF
