#!/bin/bash
# The CUDA target on a GPU machine, in one go (issue 5): builds the runtime,
# the GPU tests and the programs that bench/gpu/prepare.sh generated on a
# development machine (the GPU machine has no MLIR and no package manager:
# OpenBLAS, liburing and GoogleTest come unpacked from .gpu/debs), runs the
# tests, the e2e oracle, the speed comparison and the out-of-core run, and
# prints a table. Run from the repository root: bench/gpu.sh [STAGES]
# where STAGES is any of "test attention e2e speed ooc planner optrate xl headline"
# (default: all but optrate, which needs the planner stage's programs, xl and
# headline), run in the order given: a lease can end before the last.
set -uo pipefail
ROOT=$(pwd)
G=$ROOT/.gpu
DEPS=/tmp/fydeps
BUILD=/tmp/fybuild
STAGES=${*:-test e2e speed ooc planner}
OUT=${OUT:-/tmp/fyout}
mkdir -p "$OUT"
export OUT PYTHONUNBUFFERED=1
[ -d "$G" ] || { echo "gpu.sh: no .gpu/: run bench/gpu/prepare.sh on a development machine first"; exit 1; }

mkdir -p $DEPS
for f in "$G"/debs/*.deb; do dpkg -x "$f" $DEPS; done
LIB=$DEPS/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$LIB/openblas-pthread:$LIB:${LD_LIBRARY_PATH:-}

t0=$(date +%s)
cmake -S "$ROOT" -B $BUILD -G Ninja -DFUYOU_BUILD_COMPILER=OFF -DCMAKE_PREFIX_PATH=$DEPS/usr \
  -DFY_OPENBLAS_LIB=$LIB/openblas-pthread/libopenblas.so \
  -DFY_CBLAS_INCLUDE=$DEPS/usr/include/x86_64-linux-gnu/openblas-pthread \
  -DFY_URING_LIB=$LIB/liburing.so -DCMAKE_CXX_FLAGS="-I$DEPS/usr/include" > "$OUT/cmake.log" 2>&1 \
  || { tail -30 "$OUT/cmake.log"; exit 1; }
ninja -C $BUILD fuyou_rt_cuda fuyou_cuda_tests fuyou-calibrate-cuda fuyou-bench-matmul-cuda fuyou-bench-attention-cuda > "$OUT/build.log" 2>&1 || { grep -B2 -A12 -m3 error "$OUT/build.log"; exit 1; }
echo "built the runtime and GPU tests in $(( $(date +%s) - t0 )) s"

# The CUDA libraries CMake found (FindCUDAToolkit's cache entries: full paths).
cache() { sed -n "s/^$1:[A-Z]*=//p" $BUILD/CMakeCache.txt; }
CUDART=$(cache CUDA_cudart_static_LIBRARY)
CUBLASLT=$(cache CUDA_cublasLt_LIBRARY)
program() {  # CPP EXE: a generated program against the CUDA runtime, built as fuyou-compile
  # builds it (-O0: straight-line calls into the runtime; -O2 takes minutes at 48 layers)
  g++ -std=c++17 -O0 -w -I "$ROOT/runtime" "$1" $BUILD/lib/libfuyou_rt_cuda.a "$CUBLASLT" "$CUDART" \
    -Wl,-rpath,"$(dirname "$CUBLASLT")" -ldl -lrt -L$LIB/openblas-pthread -L$LIB -lopenblas -luring -fopenmp \
    -lpthread -o "$2"
}

declare -a TABLE
row() { TABLE+=("$1"); echo "$1"; }

# The cost model's rates for this machine (fuyou-compile --calibrate --target cuda),
# once for several runs of this script into one OUT.
if [ ! -s "$OUT/profile_cuda.json" ]; then
  mkdir -p /tmp/fycal && $BUILD/bin/fuyou-calibrate-cuda --ssd /tmp/fycal -o "$OUT/profile_cuda.json" \
    && row "calibrated: $(tr -d '\n ' < "$OUT/profile_cuda.json")"
fi

stage_test() {
  $BUILD/bin/fuyou_cuda_tests --gtest_brief=1 > "$OUT/gpu_tests.log" 2>&1
  rc=$?
  row "gpu kernel tests: $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/gpu_tests.log" | tr '\n' ' ') (exit $rc)"
  grep -E "^\[  FAILED  \]|Failure|error" "$OUT/gpu_tests.log" | head -20
}

stage_attention() {
  # Our fused attention (tensor cores and CUDA cores) against PyTorch's SDPA, kernels alone.
  python3 "$ROOT/bench/gpu/attention.py" run $BUILD/bin/fuyou-bench-attention-cuda 2>&1 | tee "$OUT/attention.txt"
  while read -r l; do row "$l"; done < <(grep '^attention' "$OUT/attention.txt")
}

stage_e2e() {
  for m in ${E2E_MODELS:-gpt2 llama}; do
    progs="bf16 fp16 fp32 bf16_host bf16_stream bf16_ssd bf16_recompute bf16_selective bf16_devopt bf16_chunks
           bf16_early_no bf16_fused fp32_fused bf16_half bf16_fused_half bf16_fused_half_host
           bf16_fused_half_recompute"
    for p in $progs; do program "$G/$m/train_$p.cpp" "$G/$m/train_$p" & done
    wait  # side by side; a row from a background job would not reach TABLE
    for p in $progs; do [ -x "$G/$m/train_$p" ] || row "e2e $m: build of train_$p failed"; done
    row "$(python3 "$ROOT/bench/gpu/run.py" e2e $m "$G/$m" 2>&1 | tail -3)"
  done
}

stage_speed() {
  # The logits' gradient products, past the 16-bit scratch: in blocks against fp32 operands.
  $BUILD/bin/fuyou-bench-matmul-cuda > "$OUT/matmul_blocks.txt" 2>&1
  row "matmul blocks, fp32-operand ms / blocks ms (logits, dx, dW; d 768 then 1024): $(awk 'NR > 1 {printf "%s ", $(NF-1)}' "$OUT/matmul_blocks.txt")"
  cat "$OUT/matmul_blocks.txt"
  d=$G/gpt124
  # And for rows, the same model compiled with one schedule rule otherwise
  # (bench/gpu/prepare.sh), built beside it; all built before anything is timed.
  for x in train_early_no train_whole train_group_waits; do program "$d/$x.cpp" "$d/$x" & done
  program "$d/train.cpp" "$d/train" && wait && python3 "$ROOT/bench/gpu/run.py" weights "$d/model.json" "$d/train.weights.safetensors" \
    && row "$(python3 "$ROOT/bench/gpu/run.py" speed "$d" "$d/train" 2>&1 | tail -3)" \
    && row "$(python3 "$ROOT/bench/gpu/run.py" rows "$d" "$d/train" 2>&1 | tail -2)"
  # The same model placed otherwise: activations recomputed, in host memory,
  # the planner's choice under --gpu-mem, weights streamed (bench/gpu/prepare.sh).
  v=()
  names=${VARIANTS-gpt124r gpt124sel gpt124h0 gpt124h1 gpt124h gpt124ha8 gpt124p gpt124s gpt124s4 gpt124s16 gpt124fused gpt124half}
  for x in $names; do [ -d "$G/$x" ] && program "$G/$x/train.cpp" "$G/$x/train" & done
  wait  # the builds side by side: the GPU machine has the cores
  for x in $names; do [ -x "$G/$x/train" ] && v+=("$G/$x/train"); done
  [ ${#v[@]} -gt 0 ] || return 0
  python3 "$ROOT/bench/gpu/run.py" variants "$d/train.weights.safetensors" "$d/train" "${v[@]}" 2>&1 | tee "$OUT/variants.txt"
  while read -r l; do row "$l"; done < <(grep '^variant' "$OUT/variants.txt")
}

stage_ooc() {
  for m in ${OOC_MODELS:-gpt350 gpt350s}; do  # resident weights, streamed weights
    d=$G/$m
    program "$d/train.cpp" "$d/train" && python3 "$ROOT/bench/gpu/run.py" weights "$d/model.json" "$d/train.weights.safetensors" \
      && row "$(python3 "$ROOT/bench/gpu/run.py" ooc "$d" "$d/train" /tmp/fyssd_$m 2>&1 | tail -3)"
  done
}

stage_planner() {
  # The planner's choices under --gpu-mem, planned on the development machine
  # (bench/gpu/planner.py prepare), against the keep-all programs; each
  # .cpp there (train, keep, devopt, and the chosen plan compiled with a
  # schedule rule otherwise: train_whole, ...) built beside it.
  for d in "$G"/planner/*/; do
    for c in "$d"*.cpp; do program "$c" "${c%.cpp}" & done
  done
  wait
  python3 "$ROOT/bench/gpu/planner.py" run "$G/planner" 2>&1 | tee "$OUT/planner.txt"
  while read -r l; do row "$l"; done < <(grep '^planner' "$OUT/planner.txt" | grep -v ': busy ')
}

stage_xl() {
  # The planner's choice at GPT-2 XL's shape under --gpu-mem 24G against the uniform
  # recompute program (bench/gpu/planner_xl.py prepare; weights drawn here).
  d=$G/xl
  [ -f "$d/plan.cpp" ] || { row "xl: no .gpu/xl/ (prepare.sh needs make deps' torch 2.x)"; return; }
  program "$d/plan.cpp" "$d/plan" & program "$d/recompute.cpp" "$d/recompute" &
  wait
  python3 "$ROOT/bench/gpu/planner_xl.py" run "$d" 2>&1 | tee "$OUT/xl.txt"
  while read -r l; do row "$l"; done < <(grep '^xl' "$OUT/xl.txt")
}

stage_headline() {
  # Ours (default and --fuse all --half-activations yes) against PyTorch eager and
  # torch.compile on GPT-2 124M, the Llama-shaped 162M and GPT-2 XL's shape
  # (bench/gpu/headline.py prepare).
  d=$G/headline
  [ -d "$d" ] || { row "headline: no .gpu/headline/ (prepare.sh needs make deps' torch 2.x)"; return; }
  for m in gpt124 llama162 xl; do
    for p in default fast; do [ -f "$d/$m/$p.cpp" ] && program "$d/$m/$p.cpp" "$d/$m/$p" & done
  done
  wait
  python3 "$ROOT/bench/gpu/headline.py" run "$d" 2>&1 | tee "$OUT/headline.txt"
  while read -r l; do row "$l"; done < <(grep '^headline' "$OUT/headline.txt")
}

stage_optrate() {
  # The CPU AdamW's rate in the planner's programs (built by the planner
  # stage) at several optimizer thread counts: the programs ran it slower
  # than calibrated (OPT_THREADS: 0 is every CPU, the default), by default
  # in the two configs the CPU optimizer bounds.
  OPTRATE_CONFIGS=${OPTRATE_CONFIGS-gpt2-L3-d1536-B4 llama-L3-d2048-B4} \
    python3 "$ROOT/bench/gpu/planner.py" optrate "$G/planner" ${OPT_THREADS:-0 14 12} 2>&1 | tee "$OUT/optrate.txt"
  while read -r l; do row "$l"; done < <(grep '^optrate' "$OUT/optrate.txt")
}

for st in $STAGES; do
  declare -F "stage_$st" > /dev/null || { echo "gpu.sh: no stage $st (test attention e2e speed ooc planner optrate xl headline)"; exit 1; }
  s0=$(date +%s)
  "stage_$st"
  echo "gpu.sh: stage $st took $(( $(date +%s) - s0 )) s"
done

echo
echo "=== bench/gpu.sh on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), $(date -u +%F) ==="
for r in "${TABLE[@]}"; do echo "$r"; done
