// The CUDA kernels' context: current stream, matmul precision, error checks.
#include <cstdio>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace fy::cuda {
namespace detail {

[[noreturn]] void fail_cuda(const char* call, cudaError_t err, const char* file, int line) {
  const char* base = file;
  for (const char* p = file; *p; ++p)
    if (*p == '/') base = p + 1;
  fail(std::string("CUDA: ") + call + " failed: " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) +
       ") at " + base + ":" + std::to_string(line));
}

namespace {
cudaStream_t g_stream = nullptr;
MatmulPrecision g_precision = MatmulPrecision::BF16;
bool g_blocks = true;
int* g_error = nullptr;  // one int of device memory, zeroed
}  // namespace

cudaStream_t current_stream() { return g_stream; }

int* device_error_flag() {
  if (!g_error) {
    FY_CUDA_CHECK(cudaMalloc(&g_error, sizeof(int)));
    // On the kernels' stream, so the kernel that may set it runs after.
    FY_CUDA_CHECK(cudaMemsetAsync(g_error, 0, sizeof(int), g_stream));
  }
  return g_error;
}

}  // namespace detail

void set_stream(void* s) { detail::g_stream = static_cast<cudaStream_t>(s); }
void* stream() { return detail::g_stream; }
void set_matmul_precision(MatmulPrecision p) { detail::g_precision = p; }
MatmulPrecision matmul_precision() { return detail::g_precision; }
void set_matmul_blocks(bool on) { detail::g_blocks = on; }
bool matmul_blocks() { return detail::g_blocks; }

void synchronize() {
  FY_CUDA_CHECK(cudaStreamSynchronize(detail::g_stream));
  if (!detail::g_error) return;
  int code = 0;
  FY_CUDA_CHECK(cudaMemcpy(&code, detail::g_error, sizeof(int), cudaMemcpyDeviceToHost));
  if (code == int(detail::DeviceError::None)) return;
  FY_CUDA_CHECK(cudaMemsetAsync(detail::g_error, 0, sizeof(int), detail::g_stream));
  if (code == int(detail::DeviceError::GatherIndex)) fail("gather: a token id is outside the embedding table");
  if (code == int(detail::DeviceError::LossLabel)) fail("softmax_cross_entropy: a label is outside [0, classes)");
  fail("a CUDA kernel reported error code " + std::to_string(code));
}

}  // namespace fy::cuda
