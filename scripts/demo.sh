#!/bin/sh
# make demo: export the example GPT, compile it, train it on the Python
# standard library's sources (bytes as tokens); the loss falls.
set -e
BUILD=${1:-build}
D=$BUILD/demo
PY=/usr/bin/python3
mkdir -p "$D"
[ -f "$D/stdlib.bin" ] || $PY examples/prepare_data.py --out "$D/stdlib.bin"
$PY examples/export.py --model gpt2 --out "$D/gpt2.onnx" --batch 8 --seq 64 \
    --n-layer 4 --d-model 128 --n-head 4 --block-size 64 > /dev/null
"$BUILD/bin/fuyou-compile" "$D/gpt2.onnx" -o "$D/train"
"$D/train" --data "$D/stdlib.bin" --steps 200 --lr 3e-3 --log-every 25 \
    --log-json "$D/log.jsonl" --save "$D/checkpoint"
$PY - "$D/log.jsonl" <<'PYEOF'
import json, sys
losses = [json.loads(l)["loss"] for l in open(sys.argv[1])]
first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
print(f"demo: mean loss of the first 10 steps {first:.3f}, of the last 10 steps {last:.3f}")
sys.exit(0 if last < first - 1.0 else "demo: the loss did not fall")
PYEOF
