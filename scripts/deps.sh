#!/bin/sh
# Installs the Debian bookworm packages fuyou-compile needs, only those missing.
set -e
PKGS="cmake ninja-build g++ pkg-config libmlir-19-dev mlir-19-tools llvm-19-dev llvm-19-tools libonnx-dev \
libprotobuf-dev protobuf-compiler liburing-dev libopenblas-dev libgtest-dev python3-torch python3-onnx \
python3-numpy time"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
echo "deps: installing$missing"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
