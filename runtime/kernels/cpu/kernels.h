// CPU kernels called by generated training programs: those of both targets
// (kernels/kernels.inc) and the CPU's own.
//
// Conventions: inputs first, then preallocated outputs, then attributes.
// Shapes meet with numpy broadcasting (right-aligned). Numeric kernels run
// on F32 (programs) and F64 (finite-difference tests). Results are
// deterministic: every output element is reduced by one thread in a fixed
// order, so they do not depend on the thread count (matmul cuts C into
// pieces by its shape alone, each one single-threaded OpenBLAS call over all
// of K, which the threads share).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/tensor.h"

namespace fy::cpu {

#include "kernels/kernels.inc"

// What F32 matmul does to its operands first: nothing (FP32), or round them
// to nearest, ties to even, to bf16 or fp16 values (fp16: past 65504 to
// inf), then multiply with fp32 accumulation. The arithmetic of the CUDA
// target's tensor cores at --precision bf16|fp16, for running those
// numerics (fp16's overflows included) without a GPU. Process-wide.
enum class MatmulOperands { FP32, BF16, FP16 };
void set_matmul_operands(MatmulOperands p);
MatmulOperands matmul_operands();

// Shorthands of the data movement kernels for tests and the runtime's own use.
void transpose(View x, View y, std::initializer_list<int64_t> perm);
void transpose(View x, View y, const int64_t* perm);
void slice(View x, View y, std::initializer_list<int64_t> starts, std::initializer_list<int64_t> steps);
void slice_grad(View dy, View dx, std::initializer_list<int64_t> starts, std::initializer_list<int64_t> steps);
void concat(std::initializer_list<View> ins, View out, int64_t axis);

}  // namespace fy::cpu
