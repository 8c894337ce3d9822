// CUDA kernels called by generated training programs on the CUDA target.
//
// The same entry points, argument order and semantics as fy::cpu (see
// kernels/cpu/kernels.h), on Views whose data is device memory. Float data
// is F32 (no F64 on the device); indices I64; masks and booleans U8.
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

// ---- elementwise -----------------------------------------------------------
enum class BinOp { Add, Sub, Mul, Div, Pow };
// F32 (all ops) and I64 (Add/Sub/Mul/Div). out has the broadcast shape.
void binary(BinOp op, View a, View b, View out);
// out_u8 = (a == b) with broadcasting; a, b: F32, I64 or U8.
void equal(View a, View b, View out_u8);

enum class UnOp { Neg, Sqrt, Reciprocal, Exp, Tanh, Erf, Sigmoid, Gelu /*erf form*/, GeluTanh, Silu, Identity };
void unary(UnOp op, View x, View y);
// dx = dy * f'(x); y = f(x) may have null data, then it is recomputed from x.
void unary_grad(UnOp op, View x, View y, View dy, View dx);
// The same of x + b, b along x's last dim, the sum rounded as add's (y given).
void bias_unary(UnOp op, View x, View b, View y);
void bias_unary_grad(UnOp op, View x, View b, View y, View dy, View dx);

// ---- reductions / broadcasting ----------------------------------------------
// y's shape is x's with some dims set to 1: sum (or mean) of x over those dims.
void reduce_to(View x, View y, bool mean);
// y = x broadcast to y's shape. Any dtype.
void broadcast_to(View x, View y);

// ---- linear algebra (cuBLASLt) ---------------------------------------------------
// numpy matmul, ranks >= 2, leading batch dims broadcast; trans_a / trans_b
// transpose the last two dims. F32 in and out, at matmul_precision().
void matmul(View a, View b, View c, bool trans_a, bool trans_b);

// ---- data movement (any dtype) -------------------------------------------------
void transpose(View x, View y, const std::vector<int64_t>& perm);
void slice(View x, View y, const std::vector<int64_t>& starts, const std::vector<int64_t>& steps);
void slice_grad(View dy, View dx, const std::vector<int64_t>& starts, const std::vector<int64_t>& steps);
void concat(const std::vector<View>& ins, View out, int64_t axis);
void where(View cond_u8, View a, View b, View out);
void cast(View x, View y);
// An index outside [0, rows) fails at the next synchronize(), naming the problem.
void gather(View table, View idx_i64, View out);
// dtable = 0, then dtable[idx[i]] += dy[i], rows summed in index order.
void gather_grad(View idx_i64, View dy, View dtable);
// dtable = base, except that each row r the indices name is base[r] plus
// the sum of r's dy rows in index order (the CPU's bits); dtable and base are different buffers.
void gather_grad_add(View base, View idx_i64, View dy, View dtable);
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

// ---- normalisation ---------------------------------------------------------------
void layer_norm(View x, View scale, View bias, View y, View mean, View inv_std, int64_t axis, double eps);
void layer_norm_grad(View dy, View x, View scale, View mean, View inv_std, View dx, View dscale, View dbias,
                     int64_t axis);
void rms_norm(View x, View scale, View y, View inv_rms, int64_t axis, double eps);
void rms_norm_grad(View dy, View x, View scale, View inv_rms, View dx, View dscale, int64_t axis);

// ---- softmax / loss ----------------------------------------------------------------
void softmax(View x, View y, int64_t axis);
// dx = (y * (dy - sum(dy * y, axis))) * scale.
void softmax_grad(View y, View dy, View dx, int64_t axis, float scale = 1.f);
// y = softmax(where(mask, -inf, x * scale)) over the last dim, bit for bit as
// those three kernels. mask (U8) is [.., R, D]: R*D elements, R 1 or the dim
// before the last of x; row r of x (over all leading dims) takes mask row r % R.
void masked_softmax(View x, View mask, View y, float scale);
void softmax_cross_entropy(View logits, View labels_i64, View loss_scalar, View log_prob, int64_t ignore_index,
                           bool mean);
void softmax_cross_entropy_grad(View dloss, View log_prob, View labels_i64, View dlogits, int64_t ignore_index,
                                bool mean);

// ---- dropout -------------------------------------------------------------------------
// The same draws as fy::cpu::dropout (splitmix64(seed, i)): identical masks.
void dropout(View x, View y, View mask_u8, double ratio, uint64_t seed);
void dropout_grad(View dy, View mask_u8, View dx, double ratio);

// ---- misc ----------------------------------------------------------------------------
void fill(View y, double value);   // any dtype
void copy(View x, View y);         // same dtype and numel, device to device

}  // namespace fy::cuda
