#!/bin/bash
# Development-machine half of bench/gpu.sh: everything that needs MLIR or the
# Debian packages, into .gpu/ (ignored by git, carried to the GPU machine):
#   .gpu/debs/            OpenBLAS, liburing, GoogleTest .debs (unpacked there, not installed)
#   .gpu/tokens.bin       training data (Python stdlib source bytes)
#   .gpu/tokens_zipf.bin  GPT-2-vocabulary ids with BPE-like frequencies (zipf_tokens.py)
#   .gpu/{gpt2,llama}/    small oracle models: ONNX + config, and for bf16, fp16 and
#                         fp32 the generated C++ and weights of the CUDA target
#   .gpu/gpt124/          GPT-2 124M-shaped program (C++ only; weights are drawn there), and the
#                         same compiled with --early-rows no, --rows-first no, --param-waits no
#                         (train_early_no, train_whole, train_group_waits: bench/gpu/run.py rows)
#   .gpu/gpt124{r,sel,h,h0,h1,ha8,p}/ the same with activations recomputed (all, or sel: those
#                         made without a product), in host memory (each
#                         copy waited for at once: h0, after a launch: h1; copied back 8
#                         launches ahead: ha8), or as the planner chooses under --gpu-mem 8G
#   .gpu/gpt124{s,s4,s16}/ the same with its weights streamed, copied 0, 4 or 16 launches ahead
#   .gpu/gpt124f/         the same at --precision fp16 (dynamic loss scaling)
#   .gpu/gpt124fused/     the same with attention and the loss fused (--fuse all)
#   .gpu/gpt124half/      ... and its activations stored in 16 bits (--half-activations yes)
#   .gpu/planner/         bench/gpu/planner.py's configs: chosen and keep-all programs, plans,
#                         and the chosen plan compiled with each schedule rule otherwise
#   .gpu/gpt350/          GPT-2 350M-shaped program for the out-of-core run (likewise)
#   .gpu/gpt350s/         the same with its parameters streamed (--params stream)
#   .gpu/xl/              bench/gpu/planner_xl.py's GPT-2 XL programs (the planner's, uniform
#                         recompute) under --gpu-mem 24G, and the parameters' names and shapes
# Usage: bench/gpu/prepare.sh [BUILD_DIR]   (default build/)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${1:-$ROOT/build}
FC=$B/bin/fuyou-compile
PY=/usr/bin/python3
OUT=$ROOT/.gpu
rm -rf "$OUT" && mkdir -p "$OUT/debs"
(cd "$OUT/debs" && apt-get download libopenblas0-pthread libopenblas-pthread-dev libopenblas-dev \
   liburing2 liburing-dev libgtest-dev libgfortran5 >/dev/null 2>&1)
$PY "$ROOT/examples/prepare_data.py" --out "$OUT/tokens.bin" --max-bytes 4000000 >/dev/null
$PY "$ROOT/bench/gpu/zipf_tokens.py" "$OUT/tokens_zipf.bin" >/dev/null

# Small models: the e2e oracle's shapes (test/e2e/e2e.py).
for m in gpt2 llama; do
  mkdir -p "$OUT/$m"
  $PY "$ROOT/examples/export.py" --model $m --out "$OUT/$m/model.onnx" --batch 4 --seq 32 >/dev/null
  for p in bf16 fp16 fp32; do
    # Builds the executable here too (the CUDA link is checked); its C++ travels, and reads the
    # weights from model.onnx beside it there (the program finds its model relative to itself).
    $FC "$OUT/$m/model.onnx" -o "$OUT/$m/train_$p" --target cuda --precision $p 2>/dev/null
    rm -f "$OUT/$m/train_$p"
  done
  # Placement variants that must match train_bf16 bit for bit: activations saved
  # for backward waiting in pinned host memory, or on SSD through it, or computed
  # again in backward; parameters streamed per phase; and a tied table's rows
  # all updated at the step's end (a schedule rule: the program's own).
  $FC "$OUT/$m/model.onnx" -o "$OUT/$m/train_bf16_host" --target cuda --precision bf16 --activations host \
    --activation-prefetch 2 2>/dev/null
  $FC "$OUT/$m/model.onnx" -o "$OUT/$m/train_bf16_stream" --target cuda --precision bf16 --params stream \
    --param-prefetch 2 2>/dev/null
  $FC "$OUT/$m/model.onnx" -o "$OUT/$m/train_bf16_ssd" --target cuda --precision bf16 --activations ssd 2>/dev/null
  $FC "$OUT/$m/model.onnx" -o "$OUT/$m/train_bf16_recompute" --target cuda --precision bf16 --activations recompute 2>/dev/null
  $FC "$OUT/$m/model.onnx" -o "$OUT/$m/train_bf16_selective" --target cuda --precision bf16 --activations selective 2>/dev/null
  $FC "$OUT/$m/model.onnx" -o "$OUT/$m/train_bf16_devopt" --target cuda --precision bf16 --device-optimizer 3 2>/dev/null
  $FC "$OUT/$m/model.onnx" -o "$OUT/$m/train_bf16_chunks" --target cuda --precision bf16 --early-chunks all 2>/dev/null
  $FC "$OUT/$m/model.onnx" -o "$OUT/$m/train_bf16_early_no" --target cuda --precision bf16 --early-rows no 2>/dev/null
  # Attention and the loss fused (--fuse all: the CUDA target's new kernels),
  # against torch like train_bf16 and train_fp32.
  for p in bf16 fp32; do
    $FC "$OUT/$m/model.onnx" -o "$OUT/$m/train_${p}_fused" --target cuda --precision $p --fuse all 2>/dev/null
  done
  # Activations stored in 16 bits, against torch's autocast: alone, and with
  # the fused kernels (--fuse all).
  $FC "$OUT/$m/model.onnx" -o "$OUT/$m/train_bf16_half" --target cuda --precision bf16 --half-activations yes 2>/dev/null
  $FC "$OUT/$m/model.onnx" -o "$OUT/$m/train_bf16_fused_half" --target cuda --precision bf16 --fuse all \
    --half-activations yes 2>/dev/null
  # ... placed otherwise, which must match it bit for bit.
  $FC "$OUT/$m/model.onnx" -o "$OUT/$m/train_bf16_fused_half_host" --target cuda --precision bf16 --fuse all \
    --half-activations yes --activations host --activation-prefetch 2 2>/dev/null
  $FC "$OUT/$m/model.onnx" -o "$OUT/$m/train_bf16_fused_half_recompute" --target cuda --precision bf16 --fuse all \
    --half-activations yes --activations recompute 2>/dev/null
  rm -f "$OUT"/$m/train_bf16_{host,stream,ssd,recompute,selective,devopt,chunks,early_no,fused,half,fused_half} \
    "$OUT"/$m/train_bf16_fused_half_{host,recompute} \
    "$OUT/$m/train_fp32_fused"
done

# Big models: compiled from ONNX exported here, weights drawn on the GPU
# machine from the same module definition (examples/models.py). With RULES
# set, also train_RULE.cpp for each RULE in it: the same flags and one step
# schedule rule compiled otherwise (a program takes none of them at run time).
rule() {  # RULE -> its fuyou-compile flag
  case $1 in
    early_no) echo --early-rows no ;;        # a tied table's rows all updated at the step's end
    whole) echo --rows-first no ;;           # the token embedding's update whole
    group_waits) echo --param-waits no ;;    # the forward waits for each group's whole update
    *) echo "prepare.sh: no rule $1" >&2; return 1 ;;
  esac
}
big() {  # name batch seq layers heads d [fuyou-compile flags...]
  local dir=$OUT/$1 tmp r
  tmp=$(mktemp -d)
  mkdir -p "$dir"
  $PY "$ROOT/examples/export.py" --model gpt2 --out "$tmp/model.onnx" --batch $2 --seq $3 --vocab 50304 \
    --n-layer $4 --n-head $5 --d-model $6 --block-size 1024 >/dev/null
  $FC "$tmp/model.onnx" --target cuda --emit=cpp "${@:7}" > "$dir/train.cpp" 2>/dev/null
  $FC "$tmp/model.onnx" --target cuda --emit=plan "${@:7}" > "$dir/plan.txt" 2>/dev/null
  for r in ${RULES-}; do
    $FC "$tmp/model.onnx" --target cuda --emit=cpp "${@:7}" $(rule $r) > "$dir/train_$r.cpp" 2>/dev/null
  done
  cp "$tmp/model.onnx.json" "$dir/model.json"
  echo "$2 $3" > "$dir/shape"
  rm -rf "$tmp"
}
RULES="early_no whole group_waits" big gpt124 8 1024 12 12 768  # and those for bench/gpu/run.py rows
big gpt124f 8 1024 12 12 768 --precision fp16          # fp16 operands, dynamic loss scaling
big gpt124r 8 1024 12 12 768 --activations recompute  # what recomputing costs on the GPU
big gpt124sel 8 1024 12 12 768 --activations selective  # ... and recomputing what needs no product
big gpt124h 8 1024 12 12 768 --activations host       # and swapping to host memory
big gpt124h0 8 1024 12 12 768 --activations host --copy-window 0  # each copy waited for at once
big gpt124h1 8 1024 12 12 768 --activations host --copy-window 1  # ... or after one launch
big gpt124ha8 8 1024 12 12 768 --activations host --activation-prefetch 8  # copies back 8 launches ahead
big gpt124p 8 1024 12 12 768 --gpu-mem 8G --state memory  # the planner's choice (built-in H100 figures)
big gpt124s 8 1024 12 12 768 --params stream          # weights copied in per phase, right before use
big gpt124s4 8 1024 12 12 768 --params stream --param-prefetch 4  # ... 4 launches ahead
big gpt124s16 8 1024 12 12 768 --params stream --param-prefetch 16  # ... 16
big gpt124fused 8 1024 12 12 768 --fuse all  # attention and the loss fused: their time and memory
big gpt124half 8 1024 12 12 768 --fuse all --half-activations yes  # ... with activations in 16 bits
big gpt350 1 128 24 16 1024
big gpt350s 1 128 24 16 1024 --params stream  # no resident weights: copied in per phase
# The planner's configs, planned with the H100 profile (bench/gpu/planner.py).
$PY "$ROOT/bench/gpu/planner.py" prepare "${PLANNER_PROFILE:-$ROOT/bench/gpu/results/profile_h100_2026-11-27.json}" \
  "$OUT/planner"
# GPT-2 XL's shape, exported from the meta device by torch 2.x (make deps' environment).
TORCH2=${FUYOU_TORCH2_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/fuyou-compile/torch2-venv}/bin/python
if [ -x "$TORCH2" ]; then
  "$TORCH2" "$ROOT/bench/gpu/planner_xl.py" prepare \
    "${PLANNER_PROFILE:-$ROOT/bench/gpu/results/profile_h100_2026-11-27.json}" "$OUT/xl"
  # Ours against PyTorch eager and torch.compile (bench/gpu/headline.py).
  "$TORCH2" "$ROOT/bench/gpu/headline.py" prepare "$OUT/headline"
else
  echo "prepare.sh: no torch 2.x at $TORCH2 (make deps): .gpu/xl/ and .gpu/headline/ left out"
fi
du -sh "$OUT"
