// AdamW on the GPU, bit for bit the CPU's (optim/adamw_kernels.h): the same
// operations in the same order, each an explicitly rounded intrinsic, so that
// nvcc contracts nothing into a multiply-add the CPU does not do, and the
// division and square root are the IEEE ones whatever the flags.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace fy::cuda {
namespace {

__global__ void adamw_kernel(AdamWScalars s, float* __restrict__ p, const float* __restrict__ g,
                             float* __restrict__ m, float* __restrict__ v, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float gi = __fmul_rn(__fmul_rn(g[i], s.unscale), s.coef);
    const float pd = __fmul_rn(p[i], s.decay);
    const float mi = __fmaf_rn(gi, s.one_m_b1, __fmul_rn(m[i], s.beta1));
    const float vi = __fmaf_rn(__fmul_rn(s.one_m_b2, gi), gi, __fmul_rn(v[i], s.beta2));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.bc2_sqrt), s.eps);
    p[i] = __fadd_rn(pd, __fdiv_rn(__fmul_rn(s.neg_step_size, mi), denom));
    m[i] = mi;
    v[i] = vi;
  }
}

}  // namespace

void adamw(const AdamWScalars& s, View p, View g, View m, View v) {
  const char* op = "adamw";
  for (auto [x, name] : {std::pair{&p, "p"}, {&g, "g"}, {&m, "m"}, {&v, "v"}}) {
    detail::check_dtype(*x, DType::F32, op, name);
    detail::check_numel(*x, p.numel(), op, name);
  }
  const int64_t n = p.numel();
  if (n == 0) return;
  adamw_kernel<<<detail::grid_for(n), 256, 0, detail::current_stream()>>>(
      s, p.as<float>(), g.as<float>(), m.as<float>(), v.as<float>(), n);
  FY_CUDA_LAUNCHED(op);
}

}  // namespace fy::cuda
