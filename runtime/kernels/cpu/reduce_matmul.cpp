// reduce_to (ReduceSum/ReduceMean and gradients of broadcasting ops) and
// matmul on top of OpenBLAS.
#include <cblas.h>
#include <omp.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/half.h"
#include "kernels/cpu/detail.h"
#include "kernels/cpu/kernels.h"

namespace fy::cpu {
using namespace detail;

void reduce_sum_cast(View x, View y, View x16) {
  reduce_to(x, y, false);
  cast(x, x16);
}

void bias_unary_grad_sum(UnOp op, View x, View b, View y, View dy, View db, View dx16) {
  std::vector<float> dx(size_t(x.numel()));
  const View d{dx.data(), x.shape, DType::F32};
  bias_unary_grad(op, x, b, y, dy, d);
  reduce_sum_cast(d, db, dx16);
}

void reduce_to(View x, View y, bool mean) {
  check(x.dtype == y.dtype, "reduce_to", "dtype mismatch");
  // x drives the iteration; y's strides are 0 along the reduced dims. This
  // also validates that y is x with some dims set to 1.
  Strided it = broadcast_iter(x.shape, {y.shape}, "reduce_to");
  const int64_t nx = x.numel(), ny = y.numel();
  dispatch_float(x.dtype, "reduce_to", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.as<T>();
    T* py = y.as<T>();
    std::vector<double> acc(size_t(ny), 0.0);
    if (nx > 0) {
      const int R = it.rank;
      const int64_t sy = it.stride[1][R - 1];
      // Rows are visited in increasing order for each y element, so the
      // summation order is fixed whatever the thread count.
      auto rows = [&](int64_t r0, int64_t r1) {
        int64_t off[Strided::kMaxOps];
        for (int64_t r = r0; r < r1; ++r) {
          it.row_offsets(r, off);
          const T* xr = px + off[0];
          double* ar = acc.data() + off[1];
          const int64_t n = it.inner();
          if (sy == 0) {
            double s = 0;
            for (int64_t i = 0; i < n; ++i) s += double(xr[i]);
            *ar += s;
          } else {
            for (int64_t i = 0; i < n; ++i) ar[i] += double(xr[i]);
          }
        }
      };
      const int64_t nrows = it.rows();
      if (R >= 2 && it.stride[1][0] != 0 && nx >= kParallelMin) {
        // The outermost dim is kept: its slices write disjoint parts of y.
        const int64_t d0 = it.dims[0], per = nrows / d0;
#pragma omp parallel for schedule(static)
        for (int64_t i0 = 0; i0 < d0; ++i0) rows(i0 * per, (i0 + 1) * per);
      } else {
        rows(0, nrows);
      }
    }
    const double div = mean && ny > 0 ? double(nx / (ny ? ny : 1)) : 1.0;
    for (int64_t i = 0; i < ny; ++i) py[i] = T(acc[size_t(i)] / div);
  });
}

namespace {
std::atomic<MatmulOperands> g_operands{MatmulOperands::FP32};
}  // namespace

void set_matmul_operands(MatmulOperands p) { g_operands.store(p); }
MatmulOperands matmul_operands() { return g_operands.load(); }

// Every CPU kernel shares OpenMP's one team of threads; OpenBLAS runs
// single-threaded inside it. With OpenBLAS's own pthreads beside OpenMP's,
// the two pools took turns spinning on two cores: a 256x128 layer norm took
// 39 us alone and 116 in a program. An OpenBLAS built on OpenMP already runs
// single-threaded inside a parallel region, and its set_num_threads would
// set OpenMP's count for every kernel: it is left alone.
void detail::blas_on_one_thread() {
  static const bool once = [] {
    if (openblas_get_parallel() == 1)  // pthreads
      openblas_set_num_threads(1);
    return true;
  }();
  (void)once;
}

void detail::round_operands(const float* x, float* y, int64_t n, bool team) {
  const MatmulOperands p = matmul_operands();
  const bool par = team && n >= kParallelMin;
  if (p == MatmulOperands::BF16) {
#pragma omp parallel for schedule(static) if (par)
    for (int64_t i = 0; i < n; ++i) y[i] = round_to_bf16(x[i]);
  } else if (p == MatmulOperands::FP16) {
#pragma omp parallel for schedule(static) if (par)
    for (int64_t i = 0; i < n; ++i) y[i] = round_to_fp16(x[i]);
  } else if (y != x) {
    std::memcpy(y, x, size_t(n) * sizeof(float));
  }
}

void detail::round_operand_rows(const float* x, int64_t ld, float* y, int64_t rows, int64_t cols) {
  const MatmulOperands p = matmul_operands();
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = x + r * ld;
    float* b = y + r * cols;
    if (p == MatmulOperands::BF16)
      for (int64_t i = 0; i < cols; ++i) b[i] = round_to_bf16(a[i]);
    else if (p == MatmulOperands::FP16)
      for (int64_t i = 0; i < cols; ++i) b[i] = round_to_fp16(a[i]);
    else
      std::memcpy(b, a, size_t(cols) * sizeof(float));
  }
}

namespace {
// Rounded copies of matmul's operands (per thread: kernels may run on more than one).
const float* rounded(const float* x, int64_t n, std::vector<float>& buf) {
  buf.resize(size_t(n));
  round_operands(x, buf.data(), n, true);
  return buf.data();
}

// One BLAS call on a block of C: ld* are the full operands' leading dims.
inline void blas(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                 int64_t ldb, float* C, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(M), int(N), int(K),
              1.0f, A, int(lda), B, int(ldb), 0.0f, C, int(ldc));
}
inline void blas(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, const double* B,
                 int64_t ldb, double* C, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(M), int(N), int(K),
              1.0, A, int(lda), B, int(ldb), 0.0, C, int(ldc));
}

// Below this many multiply-adds a product runs on one thread.
constexpr int64_t kGemmParallelMin = int64_t(1) << 18;

// C's longer side is cut into at most kGemmChunks pieces of at least
// kGemmChunkMin, a count that depends on the shape alone: each element is
// computed by a BLAS call of the same shape however many threads there are,
// so its bits are too, whichever kernel OpenBLAS picks for a shape on this
// CPU (on a Zen 5, OpenBLAS's Haswell kernels took another for the halves of
// a product than for the whole, when the halves were the threads').
constexpr int64_t kGemmChunks = 8, kGemmChunkMin = 64;

// C = op(A) op(B), C row-major M x N, in those pieces, which the team shares.
// Each piece's BLAS call packs all of the operand the cut leaves whole (B for
// rows, A for columns), so the cut is along the longer side (the logits'
// 256 x 50304 product: 254 GFLOP/s cut by rows, 291 by columns; OpenBLAS's
// own threads 296-306). Each element is one BLAS dot product over all of K.
template <class T> void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, const T* B, T* C) {
  blas_on_one_thread();
  const int64_t lda = ta ? M : K, ldb = tb ? K : N;
  if (M * N * K < kGemmParallelMin) return blas(ta, tb, M, N, K, A, lda, B, ldb, C, N);
  const bool rows = M >= N;
  const int64_t len = rows ? M : N;
  const int64_t pieces = std::max<int64_t>(1, std::min<int64_t>(kGemmChunks, len / kGemmChunkMin));
  auto piece = [&](int64_t p) {
    const int64_t b0 = len * p / pieces, b1 = len * (p + 1) / pieces;
    if (rows)
      blas(ta, tb, b1 - b0, N, K, ta ? A + b0 : A + b0 * K, lda, B, ldb, C + b0 * N, N);
    else
      blas(ta, tb, M, b1 - b0, K, A, lda, tb ? B + b0 * K : B + b0, ldb, C + b0, N);
  };
  if (omp_in_parallel() || pieces == 1 || omp_get_max_threads() == 1) {
    for (int64_t p = 0; p < pieces; ++p) piece(p);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < pieces; ++p) piece(p);
}
}  // namespace

void detail::gemm_rounded(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* a, const float* b,
                          float* c) {
  gemm(ta, tb, M, N, K, a, b, c);
}

void matmul(View a, View b, View c, bool ta, bool tb) {
  // Operands stored in 16 bits (fy-half-activations) go in as F32 copies and
  // a 16-bit product comes back narrowed: the bits of cast launches around
  // an F32 product, without their buffers in the plan.
  auto is16 = [](const View& v) { return v.dtype == DType::BF16 || v.dtype == DType::F16; };
  if (is16(a) || is16(b) || is16(c)) {
    std::vector<float> wa, wb, wc;
    auto wide = [](const View& v, std::vector<float>& buf) {
      buf.resize(size_t(v.numel()));
      View w{buf.data(), v.shape, DType::F32};
      cast(v, w);
      return w;
    };
    const View fa = is16(a) ? wide(a, wa) : a, fb = is16(b) ? wide(b, wb) : b;
    View fc = c;
    if (is16(c)) {
      wc.resize(size_t(c.numel()));
      fc = View{wc.data(), c.shape, DType::F32};
    }
    matmul(fa, fb, fc, ta, tb);
    if (is16(c)) cast(fc, c);
    return;
  }
  check(a.dtype == b.dtype && a.dtype == c.dtype, "matmul", "dtype mismatch");
  const int ra = a.shape.rank, rb = b.shape.rank;
  check(ra >= 2 && rb >= 2, "matmul", "operands need rank >= 2, got " + a.shape.str() + " and " + b.shape.str());
  const int64_t M = ta ? a.shape[ra - 1] : a.shape[ra - 2];
  const int64_t K = ta ? a.shape[ra - 2] : a.shape[ra - 1];
  const int64_t Kb = tb ? b.shape[rb - 1] : b.shape[rb - 2];
  const int64_t N = tb ? b.shape[rb - 2] : b.shape[rb - 1];
  check(K == Kb, "matmul", "inner dims differ: a " + a.shape.str() + (ta ? "^T" : "") + " b " + b.shape.str() +
                               (tb ? "^T" : ""));
  const Shape ab(a.shape.d, ra - 2), bb(b.shape.d, rb - 2);
  Shape cs = broadcast_shape(ab, bb, "matmul");
  check(cs.rank + 2 <= Shape::kMaxRank, "matmul", "rank too large");
  cs.d[cs.rank++] = M;
  cs.d[cs.rank++] = N;
  check_shape(c, cs, "matmul", "c");
  if (c.numel() == 0) return;
  if (K == 0) return fill(c, 0.0);
  dispatch_float(a.dtype, "matmul", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pa = a.as<T>();
    const T* pb = b.as<T>();
    T* pc = c.as<T>();
    if constexpr (std::is_same_v<T, float>) {
      const MatmulOperands p = matmul_operands();
      if (p != MatmulOperands::FP32) {
        thread_local std::vector<float> ra, rb;
        pa = rounded(pa, a.numel(), ra);
        pb = rounded(pb, b.numel(), rb);
      }
    }
    const int64_t nbatch = c.numel() / (M * N);
    if (bb.numel() == 1 && !ta && ab.numel() == nbatch) {
      // x @ W with a shared W: stack a's batches into one tall GEMM.
      gemm(false, tb, nbatch * M, N, K, pa, pb, pc);
      return;
    }
    Shape cb(c.shape.d, c.shape.rank - 2);
    Strided it = broadcast_iter(cb, {ab, bb}, "matmul");
    const int R = it.rank - 1;
    const int64_t inner = it.inner(), count = it.rows() * inner;
    auto product = [&](int64_t n) {
      int64_t off[Strided::kMaxOps];
      it.row_offsets(n / inner, off);
      const int64_t i = n % inner, ic = off[0] + i * it.stride[0][R], ia = off[1] + i * it.stride[1][R],
                    ib = off[2] + i * it.stride[2][R];
      gemm(ta, tb, M, N, K, pa + ia * M * K, pb + ib * K * N, pc + ic * M * N);
    };
    // Small products (attention's heads) go one to a thread; each large one
    // splits its own rows. A parallel loop that spreads nothing is not
    // entered: a team started inside it would be a nested one, new threads.
    if (M * N * K < kGemmParallelMin && count * M * N * K >= kGemmParallelMin) {
#pragma omp parallel for schedule(static)
      for (int64_t n = 0; n < count; ++n) product(n);
    } else {
      for (int64_t n = 0; n < count; ++n) product(n);
    }
  });
}

void matmul_bias(View a, View b, View bias, View c, bool ta, bool tb) {
  const char* op = "matmul_bias";
  check_dtype(bias, DType::F32, op, "bias");
  check(bias.shape.rank == 1 && c.shape.rank >= 1 && bias.shape[0] == c.shape[c.shape.rank - 1], op,
        "bias must be 1-D with c's last dim, got " + bias.shape.str() + " for " + c.shape.str());
  // The product in fp32, its bias added in place, then a 16-bit c narrowed:
  // what matmul into an fp32 buffer, add and cast kernels write.
  if (c.dtype == DType::BF16 || c.dtype == DType::F16) {
    std::vector<float> wide(size_t(c.numel()));
    const View f{wide.data(), c.shape, DType::F32};
    matmul(a, b, f, ta, tb);
    binary(BinOp::Add, f, bias, f);
    return cast(f, c);
  }
  matmul(a, b, c, ta, tb);
  binary(BinOp::Add, c, bias, c);
}

}  // namespace fy::cpu
