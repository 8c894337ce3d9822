#!/bin/sh
# A torch 1.x export whose causal mask is a buffer, side by side: the mask read
# (the default) against the previous import, which kept it a frozen parameter
# (the same file without its fuyou.frozen metadata, the buffers frozen by flag).
# Memory plans, fused ops, ms a step and losses. Usage: bench/cpu/mask_buffer.sh [WORKDIR]
set -e
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
W=${1:-/tmp/fy-mask-buffer}
mkdir -p "$W" && cd "$W"
B=$ROOT/build/bin
/usr/bin/python3 $ROOT/examples/export.py --model gpt2 --n-layer 2 --d-model 256 --n-head 4 --batch 4 --seq 512 --block-size 512 --vocab 50257 --out gv.onnx > /dev/null
# before: the buffers listed nowhere, frozen by flag instead (the import before commit 05d7324)
/usr/bin/python3 - <<'PY'
import onnx
m = onnx.load("gv.onnx")
print("fuyou.frozen:", [p.value for p in m.metadata_props if p.key == "fuyou.frozen"])
del m.metadata_props[:]
onnx.save(m, "gv_nometa.onnx")
PY
$B/fuyou-compile gv.onnx -o now --precision bf16 2>&1 | head -2
$B/fuyou-compile gv_nometa.onnx -o before --precision bf16 --freeze 'pos|transformer\.h\.[0-9]+\.attn\.bias' 2>&1 | head -2
for p in now before; do
  f=gv.onnx; fl=""
  [ $p = before ] && f=gv_nometa.onnx && fl="--freeze pos|transformer\.h\.[0-9]+\.attn\.bias"
  echo "$p: $($B/fuyou-compile $f --precision bf16 $fl --emit=plan 2>/dev/null | grep -E '^(host|device|predicted)')"
  $B/fuyou-compile $f --precision bf16 $fl --emit=fygraph 2>/dev/null | grep -oE "fygraph\.(attention[a-z_]*|masked_softmax|linear_cross_entropy)" | sort | uniq -c | tr '\n' ' '; echo
done
head -c 8000000 /dev/urandom | /usr/bin/python3 -c "
import sys, numpy as np
b = np.frombuffer(sys.stdin.buffer.read(), dtype=np.uint32) % 50257
b.astype(np.uint16).tofile('tokens.bin')"
for r in 1 2; do
  for p in now before; do
    ./$p --data tokens.bin --steps 6 --log-json $p.$r.jsonl --log-every 1 > $p.$r.out 2>&1
    /usr/bin/python3 -c "
import json,statistics
l=[json.loads(x) for x in open('$p.$r.jsonl')]
ms=[x.get('step_ms', x.get('ms')) for x in l]
print('$p run $r: median ms steps 3-6', statistics.median(ms[2:]), 'losses', [round(x['loss'],4) for x in l[:3]])"
  done
done
