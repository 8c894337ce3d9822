// Figures the compiler and the runtime must agree on, in plain C++ (no CUDA,
// no MLIR): the compiler counts and prices by them what the runtime does.
// Part of the declared compiler-runtime interface (runtime/abi/).
#pragma once

#include <cstddef>
#include <cstdint>

namespace fy::cuda {

// Device memory the CUDA runtime keeps outside the plan's arena, counted
// against --gpu-mem: the matrix products' cuBLASLt workspace and, at bf16
// and fp16, 16-bit copies of both operands.
constexpr size_t kMatmulWorkspaceBytes = size_t(32) << 20;
constexpr size_t kMatmulConvertBytes = size_t(128) << 20;

// Where in that scratch b's 16-bit copy starts: after a's (a_elems, 0 for
// none), at the next 256-byte boundary.
constexpr size_t matmul_copy_b_offset(size_t a_elems) { return (a_elems * 2 + 255) / 256 * 256; }

// Whether a product's fp32 operands (a_elems and b_elems of them, 0 for one
// stored in 16 bits) are rounded whole into that scratch, a's copy first;
// larger ones run in blocks or on fp32 operands.
constexpr bool matmul_copies_fit(size_t a_elems, size_t b_elems) {
  return matmul_copy_b_offset(a_elems) + b_elems * 2 <= kMatmulConvertBytes;
}

// ... and the step's token ids and targets (int64, `tokens` each) and its
// fp32 loss, in the device's 64-byte granules.
constexpr size_t step_io_bytes(size_t tokens) { return 2 * ((tokens * 8 + 63) / 64 * 64) + 64; }

// The largest head dim the fused attention kernel's tiles take: the compiler
// forms fygraph.attention for the CUDA target only up to it.
constexpr int64_t kAttentionMaxHeadDim = 128;

}  // namespace fy::cuda

namespace fy {

// Elements of an fp32 update the layer-group optimizer hands its pool at a
// time and reports when done (16 MiB of each array): a GPU copies each piece
// up as it is reported, and the cost model prices that upload so.
constexpr int64_t kUpdatePieceElems = int64_t(4) << 20;

// linear_cross_entropy's block of rows, whose logits its kernel holds at a
// time, `elem_bytes` each (4, or 2 where they are 16-bit): as many as about
// 128 MiB holds, a multiple of 512 where that is at least 512 (the matmul
// kernel then cuts each product's rows into 8 equal pieces, as many as 1, 2,
// 4 or 8 threads share evenly), else of 64. The cost model prices its
// products at the block's size and counts dw's rewrite once a block.
constexpr int64_t linear_cross_entropy_rows(int64_t N, int64_t V, int64_t elem_bytes = 4) {
  const int64_t fit = (int64_t(128) << 20) / (elem_bytes * (V > 0 ? V : 1));
  const int64_t rows = fit >= 512 ? fit / 512 * 512 : fit >= 64 ? fit / 64 * 64 : 64;
  return rows < N ? rows : N;
}

}  // namespace fy
