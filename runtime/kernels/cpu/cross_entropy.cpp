// The cross-entropy of a linear layer's output against labels, with its
// gradients, on the CPU, without the [N, V] logits: a block of rows at a
// time, its logits x_b w^T are formed (in the caller's `block`, which the
// memory plan places), turned into the rows' loss terms and
// then, in place, into their gradient (softmax minus the label's one, times
// the reduction's factor), and multiplied back out into dx's rows and dw's
// sum over blocks before the next block reuses the buffer. Three products
// of N x V x D, as the unfused forward and backward make; the logits'
// memory is one block's.
//
// Deterministic whatever the thread count: blocks are cut by the shape
// alone and taken in order; the logits' product is the matmul kernel's (cut
// by shape), the gradients' are cut by shape here; the loss is summed in row
// order.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/detail.h"
#include "kernels/cpu/kernels.h"

namespace fy::cpu {
using namespace detail;

namespace {

struct Dims {
  int64_t N, D, V;
};

Dims check_dims(const View& x, const View& w, const View& labels, const View& loss, const View& dx, const View& dw,
                bool grads) {
  const char* op = "linear_cross_entropy";
  check(x.dtype == DType::F32 && w.dtype == DType::F32 && loss.dtype == DType::F32, op, "wants F32 x, w and loss");
  check_dtype(labels, DType::I64, op, "labels");
  check(x.shape.rank >= 2 && w.shape.rank == 2, op, "x must be [..., D] and w [V, D]");
  Dims d{x.numel() / std::max<int64_t>(1, x.shape[x.shape.rank - 1]), x.shape[x.shape.rank - 1], w.shape[0]};
  check(w.shape[1] == d.D, op, "w " + w.shape.str() + " must be [V, D] with x's D " + std::to_string(d.D));
  check_numel(labels, d.N, op, "labels");
  check_numel(loss, 1, op, "loss");
  if (grads) {
    check(dx.dtype == DType::F32 && dx.shape == x.shape, op, "dx must have x's shape");
    check(dw.dtype == DType::F32 && dw.shape == w.shape, op, "dw must have w's shape");
  }
  return d;
}

// A block's gradient products, from its logits' gradient g [R, V]: dx's rows
// dxb [R, D] = g w, and dw [V, D] (+)= g^T xb (`accumulate` false
// overwrites). V is cut into pieces by the shape alone, which the team
// shares: a piece's share of dw is its own rows, and of dx a partial product
// over its part of V, the partials summed in piece order. Each BLAS call
// packs only its piece of w and g, so w is read once a block (a cut of dx
// by rows would pack all of w once a piece).
void block_grads(const float* g, const float* xb, const float* w, float* dxb, float* dw, const Dims& d, int64_t R,
                 bool accumulate) {
  const int64_t pieces = std::max<int64_t>(1, std::min<int64_t>(8, d.V / 64));
  thread_local std::vector<float> partials;
  partials.resize(size_t(pieces * R * d.D));
  float* partial = partials.data();  // (the team's threads have their own thread_locals)
  auto piece = [&](int64_t p) {
    const int64_t v0 = d.V * p / pieces, v1 = d.V * (p + 1) / pieces;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(R), int(d.D), int(v1 - v0), 1.0f, g + v0, int(d.V),
                w + v0 * d.D, int(d.D), 0.0f, partial + p * R * d.D, int(d.D));
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(v1 - v0), int(d.D), int(R), 1.0f, g + v0, int(d.V), xb,
                int(d.D), accumulate ? 1.0f : 0.0f, dw + v0 * d.D, int(d.D));
  };
  if (pieces == 1 || omp_get_max_threads() == 1) {
    for (int64_t p = 0; p < pieces; ++p) piece(p);
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < pieces; ++p) piece(p);
  }
  const float* pp = partial;
  const int64_t n = R * d.D;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    float s = pp[i];
    for (int64_t p = 1; p < pieces; ++p) s += pp[p * n + i];
    dxb[i] = s;
  }
}

}  // namespace

void linear_cross_entropy(View x, View w, View labels, View loss, View dx, View dw, View block, int64_t ignore_index,
                          bool mean, bool grads) {
  const char* op = "linear_cross_entropy";
  const Dims d = check_dims(x, w, labels, loss, dx, dw, grads);
  check(block.dtype == DType::F32 && block.shape.rank == 2 && block.shape[1] == d.V && block.shape[0] >= 1, op,
        "block must be [R, V] F32, got " + block.shape.str());
  const int64_t* pl = labels.as<int64_t>();
  int64_t count = 0;
  for (int64_t i = 0; i < d.N; ++i) {
    if (pl[i] == ignore_index) continue;
    check(pl[i] >= 0 && pl[i] < d.V, op,
          "label " + std::to_string(pl[i]) + " at position " + std::to_string(i) + " is out of range for " +
              std::to_string(d.V) + " classes");
    ++count;
  }
  const float* px = x.as<float>();
  // The gradient of each row's term: 1/count (mean; 0/0 below as PyTorch's
  // NaN loss) or 1 (sum).
  const float factor = mean ? float(1.0 / double(count)) : 1.f;
  blas_on_one_thread();
  const int64_t R = block.shape[0];
  std::vector<double> terms(size_t(d.N), 0.0);
  // At a 16-bit matmul_operands() the products round their operands as
  // matmul does: w once, and each block's rows of x and its logits' gradient.
  const bool round = matmul_operands() != MatmulOperands::FP32;
  std::vector<float> wr, xr;
  const float* pw = w.as<float>();
  if (round) {
    wr.resize(size_t(w.numel()));
    round_operands(pw, wr.data(), w.numel(), true);
    pw = wr.data();
  }
  for (int64_t r0 = 0; r0 < d.N; r0 += R) {
    const int64_t rows = std::min(R, d.N - r0);
    float* g = block.as<float>();
    const float* xb = px + r0 * d.D;  // this block's rows of x, as the products take them
    if (round) {
      xr.resize(size_t(rows * d.D));
      round_operands(xb, xr.data(), rows * d.D, true);
      xb = xr.data();
    }
    gemm_rounded(false, true, rows, d.V, d.D, xb, pw, g);
#pragma omp parallel for schedule(static) if (rows * d.V >= kParallelMin)
    for (int64_t r = 0; r < rows; ++r) {
      float* l = g + r * d.V;
      const int64_t label = pl[r0 + r];
      float m = l[0];
#pragma omp simd reduction(max : m)
      for (int64_t j = 1; j < d.V; ++j) m = std::max(m, l[j]);
      const float picked = label == ignore_index ? 0.f : l[label];
      const double sum = softmax_from_max(l, l, d.V, m);  // l: the row's probabilities
      if (label == ignore_index) {
        std::fill(l, l + d.V, 0.f);
        continue;
      }
      terms[size_t(r0 + r)] = double(m) + std::log(sum) - double(picked);
      if (!grads) continue;
#pragma omp simd
      for (int64_t j = 0; j < d.V; ++j) l[j] *= factor;
      l[label] -= factor;
    }
    if (!grads) continue;
    if (round) round_operands(g, g, rows * d.V, true);
    block_grads(g, xb, pw, dx.as<float>() + r0 * d.D, dw.as<float>(), d, rows, r0 > 0);
  }
  double sum = 0;
  for (int64_t i = 0; i < d.N; ++i) sum += terms[size_t(i)];
  loss.as<float>()[0] = float(mean ? sum / double(count) : sum);
}

}  // namespace fy::cpu
