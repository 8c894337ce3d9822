// Fused attention on the tensor cores (attention_tc.cu): attention.cu's
// arguments, already checked there, with the products' 16-bit format f
// (BF16 or F16). Operands stored in f are read as they are (their pointers
// 16-byte aligned); others are rounded to f as they are loaded.
#pragma once

#include "kernels/cuda/attention_geo.cuh"
#include "kernels/cuda/half.cuh"

namespace fy::cuda::detail {

// Whether these kernels take head dim D (forward, or with the gradients) over
// `rows` = B H T query rows on the current device: D 64 or 128, compute
// capability 8.0 or later, the device's shared memory for their tiles (the
// backward's D 128 tiles need sm_90's), and the backward's delta within
// matmul's scratch. A forward here with a backward on the CUDA cores (or
// the other way) is the same attention within rounding: lse means the same.
bool attention_tc_fits(int D, int64_t rows, bool grad);

void attention_tc(const Geo& g, Fmt f, FIn q, FIn k, FIn v, FOut out, float* lse);
void attention_grad_tc(const Geo& g, Fmt f, FIn q, FIn k, FIn v, FIn out, const float* lse, FIn dout, FOut dq,
                       FOut dk, FOut dv);

}  // namespace fy::cuda::detail
