#!/bin/bash
# bench/gpu.sh's stages inside one device call of a short lease: each stage
# a run of gpu.sh with its own cap, all of them under one deadline, so that a
# hang in one stage (a new CUDA path, say) leaves time for the next; at the
# end (or when the call is cut short) the logs and traces are packed into two
# files under the device tool's $OUT (it returns at most 8 files).
# Usage, on the GPU machine from the repository root:
#   bench/gpu/lease.sh SECONDS STAGE[:CAP[:VAR=VALUE]] ...
# e.g. bench/gpu/lease.sh 560 test:200 e2e:150:E2E_MODELS=gpt2 planner:220 speed
# VAR=VALUE sets one of gpu.sh's variables (E2E_MODELS, VARIANTS, ...) for
# that stage alone.
set -u
END=$(( $(date +%s) + $1 )); shift
BACK=${OUT:?lease.sh: the device tool sets OUT}
export OUT=/tmp/fyout
mkdir -p "$OUT"
pack() {
  cd "$OUT" || return
  tar czf "$BACK/logs.tgz" --exclude='*.trace.json' .
  ls ./*.trace.json > /dev/null 2>&1 && tar czf "$BACK/traces.tgz" ./*.trace.json
}
trap pack EXIT
for item in "$@"; do
  IFS=: read -r stage cap var <<< "$item"
  cap=${cap:-600}
  left=$(( END - $(date +%s) ))
  [ $left -gt 20 ] || { echo "lease.sh: no time left for $stage"; continue; }
  [ $cap -lt $left ] || cap=$left
  echo "lease.sh: $stage, at most $cap s"
  env ${var:+"$var"} timeout -k 5 $cap bench/gpu.sh "$stage"
  rc=$?
  [ $rc -ne 124 ] || echo "lease.sh: $stage cut at $cap s"
  # A cut stage leaves its programs running on the GPU: end them.
  pkill -f "$PWD/.gpu/"; pkill -f "bench/gpu/(run|planner|planner_xl|headline|attention).py"; true
done
