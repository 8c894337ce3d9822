// Internal to runtime/optim: the per-ISA AdamW loops. Each lives in its own
// file, compiled with -ffp-contract=off so that no multiply-add is fused
// except the explicit ones (GCC lowers intrinsics to generic vector
// arithmetic, which it would otherwise be free to contract).
//
// Per element, every kernel computes exactly (f32, IEEE round-to-nearest):
//   g  = (g * unscale) * coef                        GradScaler.unscale_, clip coefficient
//   p' = p * decay                                   param.mul_(1 - lr*wd)
//   m' = fma(g, one_m_b1, m * beta1)                 exp_avg.mul_(b1).add_(g, alpha=1-b1)
//   v' = fma(one_m_b2 * g, g, v * beta2)             exp_avg_sq.mul_(b2).addcmul_(g, g, value=1-b2)
//   d  = sqrt(v') / bc2_sqrt + eps                   (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
//   p  = p' + (neg_step_size * m') / d               param.addcdiv_(exp_avg, d, value=-step_size)
// which is torch 1.13's _single_tensor_adamw on its AVX2 CPU kernels (they
// fuse add_ with alpha and addcmul_ into one FMA). mul, fma, sqrt and div are
// correctly rounded in scalar and vector form alike, so all paths agree bit
// for bit. The scalars are computed once, in adamw.cpp, for every path.
#pragma once

#include <cstdint>

#include "optim/adamw.h"

namespace fy {
namespace adamw_detail {

struct Scalars {
  float decay, beta1, one_m_b1, beta2, one_m_b2, neg_step_size, bc2_sqrt, eps, unscale, coef;
};

using Kernel = void (*)(const Scalars& s, float* p, const float* g, float* m, float* v, int64_t n);

void kernel_scalar(const Scalars& s, float* p, const float* g, float* m, float* v, int64_t n);
void kernel_avx2(const Scalars& s, float* p, const float* g, float* m, float* v, int64_t n);
void kernel_avx512(const Scalars& s, float* p, const float* g, float* m, float* v, int64_t n);

// The step's scalars (adamw.cpp) and the loop of an instruction set.
Scalars make_scalars(const AdamWConfig& cfg, int64_t step);
Kernel kernel_of(AdamWIsa isa);

}  // namespace adamw_detail
}  // namespace fy
