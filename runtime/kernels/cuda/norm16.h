// Layer norm (rms: RMS norm) over rows of D whose x, y, dy and dx may be
// stored in 16 bits (norm16.cu); the arguments are the fp32 kernels'
// (norm_softmax.cu), checked there. mean is unused with rms.
#pragma once

#include <cstdint>

#include "kernels/cuda/half.cuh"

namespace fy::cuda::detail {

void norm16(bool rms, int64_t rows, int64_t D, FIn x, const float* scale, const float* bias, FOut y, float* mean,
            float* rstd, float eps);
// add: an addend of dx's shape (fy-fuse-norm-grad-add), or none (p null).
void norm16_grad(bool rms, int64_t rows, int64_t D, FIn dy, FIn x, const float* scale, const float* mean,
                 const float* rstd, FIn add, FOut dx, float* dscale, float* dbias);

}  // namespace fy::cuda::detail
