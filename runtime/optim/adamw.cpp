// Mirrors torch 1.13 _single_tensor_adamw operation by operation so fp32
// results are bit-identical to PyTorch's (checked by adamw_test's torch
// oracle). Hyper-parameters are Python floats there, so scalar expressions
// are formed in double and rounded to float once, as PyTorch does when it
// applies a double scalar to a float tensor. PyTorch's AVX2 kernels fuse
// `a + s*b` (add_ with alpha, addcmul_) into one FMA, so those two updates
// use std::fma; everything else is contracted nowhere (-ffp-contract=off).
#include "optim/adamw.h"

#include <cmath>

#include "core/tensor.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace fy {

namespace {

struct Scalars {
  float decay, beta1, one_m_b1, beta2, one_m_b2, neg_step_size, bc2_sqrt, eps;
};

// Inlined into both the FMA-enabled and the generic clone below; std::fma
// gives the same (exactly rounded) result in both, only the speed differs.
__attribute__((always_inline)) inline void update(const Scalars& s, float* __restrict p, const float* __restrict g,
                                                  float* __restrict m, float* __restrict v, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    float pi = p[i] * s.decay;                                  // param.mul_(1 - lr * weight_decay)
    const float mi = std::fma(gi, s.one_m_b1, m[i] * s.beta1);  // exp_avg.mul_(beta1).add_(grad, alpha=1-beta1)
    const float vi = std::fma(s.one_m_b2 * gi, gi, v[i] * s.beta2);  // exp_avg_sq.mul_(b2).addcmul_(g, g, 1-b2)
    const float denom = std::sqrt(vi) / s.bc2_sqrt + s.eps;    // (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
    pi = pi + s.neg_step_size * mi / denom;                     // param.addcdiv_(exp_avg, denom, value=-step_size)
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
  }
}

__attribute__((target("avx2,fma"))) void update_fma(const Scalars& s, float* p, const float* g, float* m, float* v,
                                                   int64_t n) {
  update(s, p, g, m, v, n);
}
void update_generic(const Scalars& s, float* p, const float* g, float* m, float* v, int64_t n) {
  update(s, p, g, m, v, n);
}

}  // namespace

void adamw_step(float* p, const float* g, float* m, float* v, int64_t n, const AdamWConfig& cfg, int64_t step) {
  if (step < 1) fail("fy::adamw_step: step must start at 1, got " + std::to_string(step));
  const double lr = cfg.lr, b1 = cfg.beta1, b2 = cfg.beta2, wd = cfg.weight_decay;
  const double bc1 = 1.0 - std::pow(b1, double(step));
  const double bc2 = 1.0 - std::pow(b2, double(step));
  const Scalars s{float(1.0 - lr * wd), float(b1),          float(1.0 - b1),         float(b2),
                  float(1.0 - b2),      float(-(lr / bc1)), float(std::sqrt(bc2)), cfg.eps};
  static const bool has_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  auto run = has_fma ? update_fma : update_generic;
  // Elementwise: each thread takes one contiguous slice; results do not
  // depend on the split.
#ifdef _OPENMP
  if (n >= (1 << 16)) {
#pragma omp parallel
    {
      const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t lo = n * t / nt, hi = n * (t + 1) / nt;
      run(s, p + lo, g + lo, m + lo, v + lo, hi - lo);
    }
    return;
  }
#endif
  run(s, p, g, m, v, n);
}

}  // namespace fy
