// Internal helpers for the CPU kernels: dtype dispatch, shape checks and a
// strided N-d iterator that coalesces dims so inner loops stay long.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "core/tensor.h"

namespace fy::cpu::detail {

// Parallelise loops only above this many elements: below it thread start-up
// costs more than the work.
constexpr int64_t kParallelMin = 1 << 15;

template <class T> struct Tag { using type = T; };

// Calls f(Tag<T>{}) for T = float / double.
template <class F> void dispatch_float(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::F32: f(Tag<float>{}); return;
    case DType::F64: f(Tag<double>{}); return;
    default: fail(std::string("fy::cpu::") + op + ": unsupported dtype " + dtype_name(dt) + " (want F32 or F64)");
  }
}

// Calls f(Tag<T>{}) with an unsigned integer type of the element size, for
// kernels that only move bits.
template <class F> void dispatch_bits(DType dt, F&& f) {
  switch (dtype_size(dt)) {
    case 1: f(Tag<uint8_t>{}); return;
    case 2: f(Tag<uint16_t>{}); return;
    case 4: f(Tag<uint32_t>{}); return;
    case 8: f(Tag<uint64_t>{}); return;
    default: fail("fy::cpu: unsupported element size");
  }
}

// OpenBLAS on the calling thread alone: the kernels' threads are OpenMP's
// (reduce_matmul.cpp says why). Call before any BLAS call.
void blas_on_one_thread();
// y[i] = x[i] rounded as matmul rounds its operands at matmul_operands() (y
// may be x; FP32: a copy). `team`: the work shared by OpenMP's threads,
// else this thread's alone (inside a parallel region). kernels.h declares
// MatmulOperands.
void round_operands(const float* x, float* y, int64_t n, bool team);
// The same for `rows` rows of `cols` floats, ld apart in x, into y packed
// (cols apart); this thread's work alone, without a parallel region a row.
void round_operand_rows(const float* x, int64_t ld, float* y, int64_t rows, int64_t cols);
// matmul's product c [M, N] = op(a) op(b) of operands already rounded as
// matmul_operands() asks (so not again), the same pieces and bits.
void gemm_rounded(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* a, const float* b, float* c);

inline void check(bool ok, const char* op, const std::string& what) {
  if (!ok) fail(std::string("fy::cpu::") + op + ": " + what);
}
inline void check_dtype(const View& v, DType dt, const char* op, const char* name) {
  check(v.dtype == dt, op, std::string(name) + " has dtype " + dtype_name(v.dtype) + ", expected " + dtype_name(dt));
}
inline void check_shape(const View& v, const Shape& s, const char* op, const char* name) {
  check(v.shape == s, op, std::string(name) + " has shape " + v.shape.str() + ", expected " + s.str());
}
// Every view F32 and of the first's shape.
inline void check_same_f32(const char* op, std::initializer_list<View> views) {
  const View& first = *views.begin();
  for (const View& v : views) {
    check_dtype(v, DType::F32, op, "every operand");
    check(v.shape == first.shape, op, "operands of shapes " + first.shape.str() + " and " + v.shape.str());
  }
}
// swiglu_packed's F, after checking x is its half's shape with the last dim
// doubled (gate, then up).
inline int64_t swiglu_packed_half(const char* op, const View& x, const View& half) {
  check(x.shape.rank >= 1 && half.shape.rank == x.shape.rank, op, "x and its half need one rank");
  const int64_t F = half.shape[half.shape.rank - 1];
  check(x.shape[x.shape.rank - 1] == 2 * F && x.numel() == 2 * half.numel(), op,
        "x must be " + half.shape.str() + " with its last dim doubled, got " + x.shape.str());
  return F;
}
inline void check_numel(const View& v, int64_t n, const char* op, const char* name) {
  check(v.numel() == n, op,
        std::string(name) + " has " + std::to_string(v.numel()) + " elements, expected " + std::to_string(n));
}
// rope's geometry (both targets check it so; each its own dtypes): x as
// [outer, T, inner, D] around its dim seq_axis, `rows` rows of D.
struct RopeGeo {
  int64_t T = 0, inner = 1, D = 0, rows = 0;
};
inline RopeGeo rope_geo(const char* op, const View& x, const View& cos, const View& sin, const View& y, int64_t seq_axis) {
  const int r = x.shape.rank;
  check(r >= 2 && seq_axis >= 0 && seq_axis < r - 1, op,
        "seq_axis must be a dim of x other than its last, got " + std::to_string(seq_axis) + " of rank " +
            std::to_string(r));
  RopeGeo g;
  g.D = x.shape[r - 1];
  g.T = x.shape[int(seq_axis)];
  check(g.D % 2 == 0, op, "the last dim must be even, got " + std::to_string(g.D));
  check(y.shape == x.shape, op, "y must have x's shape " + x.shape.str() + ", got " + y.shape.str());
  for (const View* t : {&cos, &sin})
    check(t->shape == Shape{g.T, g.D}, op, "cos and sin must be [T, D] = " + Shape{g.T, g.D}.str() + ", got " +
                                               t->shape.str());
  for (int d = int(seq_axis) + 1; d < r - 1; ++d) g.inner *= x.shape[d];
  g.rows = g.D ? x.numel() / g.D : 0;
  return g;
}

// Packed attention's sizes (both targets check them so; each its own
// dtypes): qkv [B, T, H + 2 Hkv, D] holding out's [B, T, H, D] heads, then
// k's and v's kv_heads each; lse [B, H, T].
struct PackedQKV {
  int64_t B = 0, T = 0, H = 0, Hkv = 0, D = 0, Hrow = 0;
  int64_t k0() const { return H * D; }          // k's first element in a row of qkv
  int64_t v0() const { return (H + Hkv) * D; }  // v's
};
inline PackedQKV packed_qkv(const char* op, const View& qkv, const View& out, const View& lse, int64_t kv_heads,
                            int64_t window) {
  check(qkv.shape.rank == 4 && out.shape.rank == 4, op, "qkv must be [B, T, H + 2 Hkv, D] and out [B, T, H, D]");
  PackedQKV p{out.shape[0], out.shape[1], out.shape[2], kv_heads, out.shape[3], qkv.shape[2]};
  check(qkv.shape[0] == p.B && qkv.shape[1] == p.T && qkv.shape[3] == p.D && p.Hrow == p.H + 2 * p.Hkv, op,
        "qkv " + qkv.shape.str() + " must hold out's " + out.shape.str() + " heads and twice " +
            std::to_string(kv_heads) + " key/value heads");
  check(p.Hkv > 0 && p.H % p.Hkv == 0, op, "q's heads must be a multiple of k's (grouped-query heads)");
  check(lse.shape == Shape{p.B, p.H, p.T}, op, "lse must be [B, H, T]");
  check(window >= 0, op, "the window must be 0 (causal) or positive");
  return p;
}

inline int64_t norm_axis(int64_t axis, int rank, const char* op) {
  int64_t a = axis < 0 ? axis + rank : axis;
  check(a >= 0 && a < (rank == 0 ? 1 : rank), op, "axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank));
  return a;
}
inline int64_t prod(const Shape& s, int from, int to) {
  int64_t n = 1;
  for (int i = from; i < to; ++i) n *= s.d[i];
  return n;
}

// Up to kMaxOps operands walked together over one iteration space. Operand 0
// is usually the output. Strides are in elements, 0 for broadcast dims.
struct Strided {
  static constexpr int kMaxOps = 4;
  int rank = 0;
  int nops = 0;
  int64_t dims[Shape::kMaxRank] = {};
  int64_t stride[kMaxOps][Shape::kMaxRank] = {};
  int64_t base[kMaxOps] = {};

  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= dims[i];
    return n;
  }
  // Drops size-1 dims and merges dims that are contiguous for every operand.
  void coalesce();
  int64_t inner() const { return dims[rank - 1]; }
  int64_t rows() const { return numel() / inner(); }
  // Offsets of every operand at the start of row r (row = all but last dim).
  void row_offsets(int64_t r, int64_t* off) const {
    for (int k = 0; k < nops; ++k) off[k] = base[k];
    for (int d = rank - 2; d >= 0; --d) {
      int64_t i = r % dims[d];
      r /= dims[d];
      for (int k = 0; k < nops; ++k) off[k] += i * stride[k][d];
    }
  }
};

// Iteration over `out` with the given inputs broadcast to it. Fails (naming
// op) when an input is not broadcastable to out.
Strided broadcast_iter(const Shape& out, std::initializer_list<Shape> ins, const char* op);
// y = x transposed by perm (y.shape[i] == x.shape[perm[i]]; negative axes
// count from the end): operand 0 walks y, operand 1 x. Fails on a bad perm.
Strided transpose_iter(const View& x, const View& y, const int64_t* perm);
// A slice of `part`'s shape out of `full` (one start and step per axis;
// negative starts count from the end, steps > 0): operand 0 walks the
// contiguous slice, operand 1 its positions in the full tensor. Fails, naming
// op, when the slice leaves the tensor.
Strided slice_iter(const Shape& full, const Shape& part, const int64_t* starts, size_t nstarts, const int64_t* steps,
                   size_t nsteps, const char* op);
// Checks a concat of `ins` into `out` along `axis`; returns the axis in [0, rank).
int concat_axis(const std::vector<View>& ins, const View& out, int64_t axis);
// Broadcast shape of a and b; fails if incompatible.
Shape broadcast_shape(const Shape& a, const Shape& b, const char* op);
// Row-major strides of a shape.
void contiguous_strides(const Shape& s, int64_t* st);

// float exp with no calls and no branches, so loops over it vectorise (libm's
// expf is a call per element: tanh-GELU took ~20 ns an element). x = n ln2 +
// r with |r| <= ln2/2 (ln2 split in two so n ln2 is exact), e^r by its
// Taylor series to r^7 (truncation < 1e-8 relative), 2^n from the exponent
// bits. Inputs are clamped to [-87.3, 88.7], where the result stays a normal
// float (NaN becomes -87.3; callers carry x's NaN through otherwise).
inline float exp_vec(float x) {
  x = x > -87.3f ? x : -87.3f;
  x = x < 88.7f ? x : 88.7f;
  const float kRound = 12582912.f;  // 1.5 * 2^23: adding it rounds to an integer
  const float n = (x * 1.44269504f + kRound) - kRound;
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.f / 5040;
  p = p * r + 1.f / 720;
  p = p * r + 1.f / 120;
  p = p * r + 1.f / 24;
  p = p * r + 1.f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  const float scale = __builtin_bit_cast(float, (int32_t(n) + 127) << 23);
  return p * scale;
}

// e^d for d <= 0 in simd loops; below exp_vec's range the result is 0, as
// a -inf (masked) input needs. Computed first, then selected: a branch
// around exp_vec keeps the loop scalar.
inline float exp_nonpos(float d) {
  const float e = exp_vec(d);
  return d < -87.3f ? 0.f : e;
}

// y = e^(x - m) / their sum over n contiguous floats (y may be x), m their
// finite max, vectorised (exp_nonpos, the sum in double); returns the sum.
double softmax_from_max(const float* x, float* y, int64_t n, float m);

// Runs f(off, n) for every row, in parallel when large. f must only write
// locations owned by its row (true for elementwise outputs).
template <class F> void for_rows(const Strided& it, F&& f) {
  const int64_t rows = it.rows(), n = it.inner();
  if (rows * n == 0) return;
#pragma omp parallel for schedule(static) if (rows > 1 && rows * n >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t off[Strided::kMaxOps];
    it.row_offsets(r, off);
    f(off, n);
  }
}

}  // namespace fy::cpu::detail
