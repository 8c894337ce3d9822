#!/bin/bash
# Tensor store throughput against fio, side by side, on the same directory.
#
#   bench/store.sh [DIR[,DIR...]] [SIZE] [BLOCK] [QD]      (defaults: /tmp 1G 1M 32)
#
# fio: --ioengine=io_uring --direct=1, sequential write then sequential read of
# one SIZE file with BLOCK-sized I/Os at queue depth QD (one file per DIR when
# several are given; fio splits SIZE between them). Ours: fuyou-bench-store with
# the same size, block, queue depth and directories, O_DIRECT. Both overwrite a
# laid-out file in the write test (fio's file is laid out once before the
# rounds; fuyou-bench-store writes its region once untimed) and read a fully
# written one. ROUNDS rounds (default 3) alternate which goes first; the
# summary is the median per mode. Needs fio (installed with apt-get when missing) and the
# built tool: $BUILD/bin/fuyou-bench-store (BUILD defaults to ./build), or
# FUYOU_BENCH_STORE=path.
set -euo pipefail
DIRS=${1:-/tmp}
SIZE=${2:-1G}
BLOCK=${3:-1M}
QD=${4:-32}
ROUNDS=${ROUNDS:-3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TOOL=${FUYOU_BENCH_STORE:-${BUILD:-$ROOT/build}/bin/fuyou-bench-store}
PY=/usr/bin/python3

if ! command -v fio >/dev/null; then
  echo "store.sh: installing fio" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get install -y -qq fio >/dev/null || { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq fio >/dev/null; }
fi
[ -x "$TOOL" ] || { echo "store.sh: error: $TOOL not built (ninja -C build fuyou-bench-store)" >&2; exit 1; }

IFS=, read -r -a DIRLIST <<<"$DIRS"
FIOFILES=""
for d in "${DIRLIST[@]}"; do
  [ -d "$d" ] || { echo "store.sh: error: $d is not a directory" >&2; exit 1; }
  FIOFILES="${FIOFILES:+$FIOFILES:}$d/fio-store-bench.$$"
done
cleanup() { for d in "${DIRLIST[@]}"; do rm -f "$d/fio-store-bench.$$"; done; }
trap cleanup EXIT

fio_gbps() {  # $1 = write|read
  fio --name=store-$1 --filename="$FIOFILES" --size="$SIZE" --bs="$BLOCK" --iodepth="$QD" \
      --ioengine=io_uring --direct=1 --rw="$1" --numjobs=1 --output-format=json |
    $PY -c "import json,sys; j=json.load(sys.stdin)['jobs'][0]['$1']; print('%.3f' % (j['bw_bytes']/1e9))"
}

ours() {  # prints "WRITE_GBPS READ_GBPS"
  "$TOOL" --size "$SIZE" --block "$BLOCK" --qd "$QD" --dir "$DIRS" --direct 1 |
    awk '$1=="write"{w=$2} $1=="read"{r=$2} END{print w, r}'
}

median() { tr ' ' '\n' | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }

echo "store.sh: dirs=$DIRS size=$SIZE block=$BLOCK qd=$QD rounds=$ROUNDS"
echo "store.sh: fs: $(df -T "${DIRLIST[0]}" | awk 'NR==2{print $1, $2}')"
fio_gbps write >/dev/null  # lay out fio's file
FW=() FR=() OW=() OR=()
for ((i = 1; i <= ROUNDS; i++)); do
  if ((i % 2)); then  # alternate who goes first (VM disks throttle in bursts)
    fw=$(fio_gbps write); fr=$(fio_gbps read); read -r ow or < <(ours)
  else
    read -r ow or < <(ours); fw=$(fio_gbps write); fr=$(fio_gbps read)
  fi
  printf 'round %d: fio write %s read %s GB/s | ours write %s read %s GB/s\n' "$i" "$fw" "$fr" "$ow" "$or"
  FW+=("$fw"); FR+=("$fr"); OW+=("$ow"); OR+=("$or")
done
fw=$(echo "${FW[*]}" | median); fr=$(echo "${FR[*]}" | median)
ow=$(echo "${OW[*]}" | median); or=$(echo "${OR[*]}" | median)
printf '%-6s %10s %10s %8s\n' mode "fio GB/s" "ours GB/s" ratio
printf '%-6s %10s %10s %8s\n' write "$fw" "$ow" "$(awk -v a="$ow" -v b="$fw" 'BEGIN{printf "%.2f", a/b}')"
printf '%-6s %10s %10s %8s\n' read "$fr" "$or" "$(awk -v a="$or" -v b="$fr" 'BEGIN{printf "%.2f", a/b}')"
