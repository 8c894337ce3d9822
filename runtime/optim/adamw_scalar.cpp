// Scalar AdamW loop (baseline x86-64 or any other target). See adamw_kernels.h
// for the operation order; std::fma is the exactly rounded fused multiply-add
// whether or not the CPU has an FMA instruction.
#include <cmath>

#include "optim/adamw_kernels.h"

namespace fy {
namespace adamw_detail {

void kernel_scalar(const Scalars& s, float* __restrict p, const float* __restrict g, float* __restrict m,
                   float* __restrict v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = (g[i] * s.unscale) * s.coef;
    const float pd = p[i] * s.decay;
    const float mi = std::fma(gi, s.one_m_b1, m[i] * s.beta1);
    const float vi = std::fma(s.one_m_b2 * gi, gi, v[i] * s.beta2);
    const float denom = std::sqrt(vi) / s.bc2_sqrt + s.eps;
    p[i] = pd + (s.neg_step_size * mi) / denom;
    m[i] = mi;
    v[i] = vi;
  }
}

}  // namespace adamw_detail
}  // namespace fy
