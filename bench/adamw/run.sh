#!/bin/sh
# CPU AdamW benchmark, all in one run: STREAM triad, AdamW's own traffic
# pattern, fy::adamw_step / fy::AdamWPool (fuyou-bench-adamw), then
# torch.optim.AdamW (foreach=True and False) on the same number of fp32
# parameters with 1 thread and with all threads; prints ours/torch.
#
#   bench/adamw/run.sh [BUILD_DIR (build)] [PARAMS (67108864)] [REPS (5)]
#
# Goals (issue 3): AdamW >= 0.8x the triad bandwidth at 28 B/param, and
# >= 2.5x torch.optim.AdamW(foreach=True), with 1 thread and all threads.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
n=${2:-67108864}
reps=${3:-5}
bin=$build/bin/fuyou-bench-adamw
if [ ! -x "$bin" ]; then
  echo "run.sh: error: $bin not found; build it with: ninja -C $build fuyou-bench-adamw" >&2
  exit 1
fi
threads=$(nproc)
out=$(mktemp)
trap 'rm -f "$out"' EXIT

echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -n), nproc $threads, load average $(cut -d" " -f1-3 /proc/loadavg)"
"$bin" --n "$n" --reps "$reps" --threads "$threads" | tee "$out"
echo
/usr/bin/python3 "$here/torch_adamw.py" --n "$n" --reps "$reps" --threads 1 "$threads" | tee -a "$out"
echo
/usr/bin/python3 - "$out" "$threads" <<'PY'
import sys
kv = {}
for line in open(sys.argv[1]):
    if line.startswith("result "):
        for item in line.split()[1:]:
            k, v = item.split("=", 1)
            kv[k] = v
t = sys.argv[2]
ok = True
for label, ours, torch_key in (("1 thread", "adamw_pps_1t", "torch_foreach_pps_1t"),
                               (f"{t} threads", "adamw_pps_all", f"torch_foreach_pps_{t}t")):
    r = float(kv[ours]) / float(kv[torch_key])
    r1 = float(kv[ours]) / float(kv[torch_key.replace("foreach", "single")])
    print(f"ours/torch AdamW(foreach=True)  {label:>10}: {r:5.2f}x (goal >= 2.5)   [vs foreach=False: {r1:5.2f}x]")
    ok &= r >= 2.5
for label, key, same in (("1 thread", "ratio_triad_1t", "ratio_same_traffic_1t"),
                         (f"{t} threads", "ratio_triad_all", "ratio_same_traffic_all")):
    r = float(kv[key])
    print(f"ours/triad bound (28 B/param)    {label:>10}: {r:5.2f}x (goal >= 0.8)   [vs AdamW's own traffic pattern: {float(kv[same]):4.2f}x]")
    ok &= r >= 0.8
print("goals met" if ok else "goals MISSED")
PY
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
