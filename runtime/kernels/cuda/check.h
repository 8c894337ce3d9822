// Checked CUDA runtime calls, for .cu and plain C++ files alike: a failure
// throws fy::Error naming the call, the error and where it was made.
#pragma once

#include <cuda_runtime_api.h>

#include "core/tensor.h"

namespace fy::cuda::detail {

[[noreturn]] void fail_cuda(const char* call, cudaError_t err, const char* file, int line);

}  // namespace fy::cuda::detail

#define FY_CUDA_CHECK(call)                                                                      \
  do {                                                                                           \
    cudaError_t fy_err_ = (call);                                                                \
    if (fy_err_ != cudaSuccess) ::fy::cuda::detail::fail_cuda(#call, fy_err_, __FILE__, __LINE__); \
  } while (0)
