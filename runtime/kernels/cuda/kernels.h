// CUDA kernels called by generated training programs on the CUDA target.
//
// The kernels of both targets (kernels/kernels.inc), with fy::cpu's
// argument order and semantics, on Views whose data is device memory; and
// the CUDA target's own (the stream, matmul precision, AdamW, table rows). Float data
// is F32 (no F64 on the device), or BF16 / F16 where fy-half-activations stores
// it so (matmul, cast, fill and the kernels that only move elements); indices
// I64; masks and booleans U8.
// Kernels are asynchronous: they are queued on the current stream
// (set_stream) and return at once; errors in a launch are reported by the
// next checked call. Results are deterministic: no atomics in reductions,
// every output element is reduced in a fixed order.
//
// This header needs no CUDA headers, so host code built by a plain C++
// compiler can call it.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/tensor.h"

namespace fy::cuda {

// ---- context ----------------------------------------------------------------
// The stream kernels are queued on (a cudaStream_t; null: the default stream).
void set_stream(void* stream);
void* stream();

// Precision of matrix products on F32 data. FP32: exact fp32 (no tensor
// cores). BF16: the tensor cores take inputs rounded to bf16 and accumulate
// in fp32 (cuBLAS's 32F_FAST_16BF), as PyTorch's bf16 autocast does for its
// matmuls. FP16 likewise with fp16 inputs (past 65504: inf; what dynamic
// loss scaling is for). TF32 likewise with tf32 inputs.
enum class MatmulPrecision { FP32, TF32, BF16, FP16 };
void set_matmul_precision(MatmulPrecision p);
MatmulPrecision matmul_precision();
// BF16 / FP16: one GEMM whose 16-bit operand copies do not fit the scratch
// runs in row blocks whose copies do, where b's copy leaves room for them (the
// default), else on fp32 operands at FAST_16BF / FAST_16F. Off: always the
// latter. For benchmarks that compare the two.
void set_matmul_blocks(bool on);
bool matmul_blocks();
// Device memory matmul takes per stream beyond its operands at precision p:
// cuBLASLt's workspace and, for BF16 and FP16, the operands' 16-bit copies.
size_t matmul_scratch_bytes(MatmulPrecision p);

// c = a b, or with `accumulate` c += a b, for rank-2 a and b: matmul's
// products at its precision (matmul is matmul_into(..., false)). Any of a,
// b and c may be BF16 (or all those F16): the product then has 16-bit
// operands whatever the precision, its fp32 ones rounded.
void matmul_into(View a, View b, View c, bool trans_a, bool trans_b, bool accumulate);
// How many matmul_bias calls added their bias in cuBLASLt's epilogue (the
// others add it after the product, a 16-bit c rounded twice): for tests.
size_t matmul_bias_epilogues();
// How many attention calls (forward or gradient, packed qkv or not) ran on
// the tensor cores (attention_tc.cu: 16-bit operands, or fp32 ones at a
// 16-bit matmul precision, head dim 64 or 128, compute capability 8.0 on):
// for tests.
size_t attention_tensor_core_calls();

// Blocks until every queued kernel on the current stream is done; fails
// with the first error a kernel raised.
void synchronize();

// ---- optimizer ---------------------------------------------------------------
// One AdamW step over F32 p, g, m, v of as many elements each, in place, bit
// for bit the CPU's (fy::adamw_step): the step's scalars as the CPU computes
// them (optim/adamw_kernels.h's Scalars, field for field).
struct AdamWScalars {
  float decay, beta1, one_m_b1, beta2, one_m_b2, neg_step_size, bc2_sqrt, eps, unscale, coef;
};
void adamw(const AdamWScalars& s, View p, View g, View m, View v);

#include "kernels/kernels.inc"

// ---- rows between a device table and the optimizer ------------------------------
// table[rows[i]] = values[i] for every i (rows distinct, in range): the
// background optimizer's updated rows into a device table. values [n, D]
// F32 and rows [n] I64 may be page-locked host memory, which the kernel
// reads over the bus. Queued on `stream`, not the current one: the
// optimizer's thread calls it while the program's kernels go on.
void scatter_rows(View values, View rows_i64, View table, void* stream);
// out[i] = table[rows[i]] for every i (rows in range): the rows of a
// gradient the background optimizer takes first. rows [n] I64 and out
// [n, D] F32 may be page-locked host memory, which the kernel reads and
// writes over the bus. Queued on `stream`, as scatter_rows.
void gather_rows(View table, View rows_i64, View out, void* stream);

}  // namespace fy::cuda
