// Device memory the CUDA runtime keeps outside the plan's arena: the matrix
// products' cuBLASLt workspace and, at bf16 and fp16, 16-bit copies of both
// operands; the step's token ids, targets and loss. Plain C++ (no CUDA
// headers): the compiler counts it against --gpu-mem too.
#pragma once

#include <cstddef>

namespace fy::cuda {

constexpr size_t kMatmulWorkspaceBytes = size_t(32) << 20;
constexpr size_t kMatmulConvertBytes = size_t(128) << 20;

// Token ids and targets (int64, `tokens` each) and the fp32 loss, in the
// device's 64-byte granules.
constexpr size_t step_io_bytes(size_t tokens) { return 2 * ((tokens * 8 + 63) / 64 * 64) + 64; }

}  // namespace fy::cuda
