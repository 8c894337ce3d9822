// Device memory the CUDA matrix products keep outside the plan's arena:
// cuBLASLt's workspace and, at bf16 and fp16, 16-bit copies of both operands.
// Plain C++ (no CUDA headers): the compiler counts it against --gpu-mem too.
#pragma once

#include <cstddef>

namespace fy::cuda {

constexpr size_t kMatmulWorkspaceBytes = size_t(32) << 20;
constexpr size_t kMatmulConvertBytes = size_t(128) << 20;

}  // namespace fy::cuda
