// CPU kernels called by generated training programs.
//
// Conventions: inputs first, then preallocated outputs, then attributes.
// Shapes meet with numpy broadcasting (right-aligned). Numeric kernels run
// on F32 (programs) and F64 (finite-difference tests). Results are
// deterministic: every output element is reduced by one thread in a fixed
// order, so they do not depend on the thread count (matmul's threads split
// C and each runs single-threaded OpenBLAS over all of K).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/tensor.h"

namespace fy::cpu {

// ---- elementwise -----------------------------------------------------------
enum class BinOp { Add, Sub, Mul, Div, Pow };
// F32/F64 (all ops) and I64 (Add/Sub/Mul/Div). out has the broadcast shape.
void binary(BinOp op, View a, View b, View out);
// out_u8 = (a == b) with broadcasting; a, b: F32, F64, I64 or U8.
void equal(View a, View b, View out_u8);

enum class UnOp { Neg, Sqrt, Reciprocal, Exp, Tanh, Erf, Sigmoid, Gelu /*erf form*/, GeluTanh, Silu, Identity };
void unary(UnOp op, View x, View y);
// dx = dy * f'(x). y = f(x) is used where cheaper; y.data may be null, then
// it is recomputed from x.
void unary_grad(UnOp op, View x, View y, View dy, View dx);
// The same of x + b, b a vector along x's last dim: the sum is rounded to
// float first, so the bits are add's then unary's (unary_grad's).
void bias_unary(UnOp op, View x, View b, View y);
void bias_unary_grad(UnOp op, View x, View b, View y, View dy, View dx);

// ---- reductions / broadcasting ----------------------------------------------
// y's shape is x's with some dims set to 1 (after left-padding with 1s): sum
// (or mean) of x over those dims. Accumulates in double.
void reduce_to(View x, View y, bool mean);
// Expand: y = x broadcast to y's shape. Any dtype.
void broadcast_to(View x, View y);

// ---- linear algebra ----------------------------------------------------------
// numpy matmul, ranks >= 2, leading batch dims broadcast. trans_a / trans_b
// transpose the last two dims of a / b. c is overwritten.
void matmul(View a, View b, View c, bool trans_a, bool trans_b);
// What F32 matmul does to its operands first: nothing (FP32), or round them
// to nearest, ties to even, to bf16 or fp16 values (fp16: past 65504 to
// inf), then multiply with fp32 accumulation. The arithmetic of the CUDA
// target's tensor cores at --precision bf16|fp16, for running those
// numerics (fp16's overflows included) without a GPU. Process-wide.
enum class MatmulOperands { FP32, BF16, FP16 };
void set_matmul_operands(MatmulOperands p);
MatmulOperands matmul_operands();
float round_to_bf16(float x);
float round_to_fp16(float x);

// ---- data movement (any dtype) -------------------------------------------------
// y.shape[i] == x.shape[perm[i]].
void transpose(View x, View y, std::initializer_list<int64_t> perm);
void transpose(View x, View y, const std::vector<int64_t>& perm);
void transpose(View x, View y, const int64_t* perm);
// y[i] = x[starts + i*steps] per axis (one entry per axis of x; negative
// starts count from the end; steps > 0); y's shape gives the extent.
void slice(View x, View y, std::initializer_list<int64_t> starts, std::initializer_list<int64_t> steps);
void slice(View x, View y, const std::vector<int64_t>& starts, const std::vector<int64_t>& steps);
// Zero-fills dx, then writes dy into the slice (dx has x's shape).
void slice_grad(View dy, View dx, std::initializer_list<int64_t> starts, std::initializer_list<int64_t> steps);
void slice_grad(View dy, View dx, const std::vector<int64_t>& starts, const std::vector<int64_t>& steps);
// Negative axis counts from the end.
void concat(std::initializer_list<View> ins, View out, int64_t axis);
void concat(const std::vector<View>& ins, View out, int64_t axis);
// out = cond ? a : b with broadcasting over all three.
void where(View cond_u8, View a, View b, View out);
// Any dtype to any dtype; float -> int truncates, anything -> U8 is (x != 0).
void cast(View x, View y);
// out[i..., :] = table[idx[i...], :]; out shape = idx.shape + table.shape[1:].
// An index outside [0, rows) fails, naming the index and the table size.
void gather(View table, View idx_i64, View out);
// dtable = 0, then dtable[idx[i]] += dy[i] in index order.
void gather_grad(View idx_i64, View dy, View dtable);
// dtable = base, except that each row r the indices name is base[r] plus
// the sum of r's dy rows in index order: add(base, gather_grad) without the
// + 0.0 on the other rows. dtable and base are different buffers.
void gather_grad_add(View base, View idx_i64, View dy, View dtable);

// ---- normalisation ---------------------------------------------------------------
// Normalises over dims [axis, rank). scale (and bias) have x.shape[axis:]
// elements; bias.data / scale.data may be null. mean and inv_std have shape
// x.shape[:axis] + [1]*(rank-axis) (any shape with that many elements).
void layer_norm(View x, View scale, View bias, View y, View mean, View inv_std, int64_t axis, double eps);
// dbias.data / dscale.data may be null (not wanted).
void layer_norm_grad(View dy, View x, View scale, View mean, View inv_std, View dx, View dscale, View dbias,
                     int64_t axis);
// y = x / sqrt(mean(x^2) + eps) * scale; inv_rms shaped like layer_norm's mean.
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
// ONNX SoftmaxCrossEntropyLoss without weights: logits [N,C] or [N,C,d1..]
// (class dim 1), labels [N] or [N,d1..]. log_prob = log_softmax(logits, 1).
// loss (one element) = mean over targets != ignore_index (NaN if none, as
// PyTorch) or their sum. A label outside [0, C) that is not ignored fails.
void softmax_cross_entropy(View logits, View labels_i64, View loss_scalar, View log_prob, int64_t ignore_index,
                           bool mean);
void softmax_cross_entropy_grad(View dloss, View log_prob, View labels_i64, View dlogits, int64_t ignore_index,
                                bool mean);

// ---- dropout -------------------------------------------------------------------------
// Inverted dropout: keep with probability 1-ratio, scale kept by 1/(1-ratio).
// Element i's draw is splitmix64(seed, i), so results are reproducible and
// independent of threading. ratio 0 copies and sets the mask to 1.
void dropout(View x, View y, View mask_u8, double ratio, uint64_t seed);
void dropout_grad(View dy, View mask_u8, View dx, double ratio);

// ---- misc ----------------------------------------------------------------------------
void fill(View y, double value);   // any dtype
void copy(View x, View y);         // same dtype and numel, any shapes

}  // namespace fy::cpu
