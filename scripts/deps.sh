#!/bin/sh
# Installs the Debian bookworm packages fuyou-compile needs, only those missing,
# then (once) a pinned Hugging Face transformers in BUILD/pydeps for the test
# of its models' exports: beside Debian's torch and numpy, never over them;
# and (once per machine) current PyTorch, onnx, onnxscript and transformers
# in a virtual environment outside the build tree (FUYOU_TORCH2_VENV, by
# default ~/.cache/fuyou-compile/torch2-venv): the exporter people use today.
# Its wheels are large (torch's CUDA build, which runs on the CPU too), so it
# is made once and kept across clean clones.
set -e
BUILD=${1:-build}
PKGS="cmake ninja-build g++ pkg-config libmlir-19-dev mlir-19-tools llvm-19-dev llvm-19-tools libonnx-dev \
libprotobuf-dev protobuf-compiler liburing-dev libopenblas-dev libgtest-dev python3-torch python3-onnx \
python3-numpy python3-pip python3-venv time"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  echo "deps: installing$missing"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
fi
PYDEPS="$BUILD/pydeps"
if [ ! -f "$PYDEPS/.complete" ]; then
  echo "deps: transformers 4.36.2 into $PYDEPS"
  rm -rf "$PYDEPS"
  /usr/bin/python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-deps --target "$PYDEPS" \
    transformers==4.36.2 tokenizers==0.15.2 huggingface-hub==0.20.3 safetensors==0.4.2 regex==2023.12.25 \
    fsspec==2023.12.2 filelock==3.13.1 tqdm==4.66.1 packaging==23.2 pyyaml==6.0.1 requests==2.31.0 \
    urllib3==2.1.0 idna==3.6 certifi==2023.11.17 charset-normalizer==3.3.2 typing-extensions==4.9.0
  touch "$PYDEPS/.complete"
fi
TORCH2_VENV=${FUYOU_TORCH2_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/fuyou-compile/torch2-venv}
TORCH2_PINS="torch==2.11.0 onnx==1.23.2 onnxscript==0.7.2 transformers==5.24.0 numpy"
if [ ! -f "$TORCH2_VENV/.complete" ] || [ "$(cat "$TORCH2_VENV/.complete")" != "$TORCH2_PINS" ]; then
  echo "deps: $TORCH2_PINS into $TORCH2_VENV (once per machine)"
  rm -rf "$TORCH2_VENV"
  mkdir -p "$(dirname "$TORCH2_VENV")"
  /usr/bin/python3 -m venv "$TORCH2_VENV"
  "$TORCH2_VENV/bin/pip" install -q --disable-pip-version-check $TORCH2_PINS
  echo "$TORCH2_PINS" > "$TORCH2_VENV/.complete"
fi
