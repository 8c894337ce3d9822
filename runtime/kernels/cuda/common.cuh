// Internal helpers for the CUDA kernels: checked calls, the current stream,
// launch geometry and a by-value strided iterator for broadcasting kernels.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/tensor.h"
#include "kernels/cuda/check.h"
#include "kernels/cpu/detail.h"

namespace fy::cuda::detail {

// After a launch: configuration errors show up here, not at the launch.
// cudaGetLastError also clears a launch error, so one failure is reported once.
#define FY_CUDA_LAUNCHED(name) FY_CUDA_CHECK(cudaGetLastError())

cudaStream_t current_stream();
// The current stream's scratch in which matmul rounds fp32 operands to 16
// bits (kMatmulConvertBytes, counted in matmul_scratch_bytes at 16-bit
// precisions): another kernel on the stream may use it between matmuls.
void* convert_scratch();

inline void check(bool ok, const char* op, const std::string& what) {
  if (!ok) fail(std::string("fy::cuda::") + op + ": " + what);
}
inline void check_dtype(const View& v, DType dt, const char* op, const char* name) {
  check(v.dtype == dt, op, std::string(name) + " has dtype " + dtype_name(v.dtype) + ", expected " + dtype_name(dt));
}
inline void check_shape(const View& v, const Shape& s, const char* op, const char* name) {
  check(v.shape == s, op, std::string(name) + " has shape " + v.shape.str() + ", expected " + s.str());
}
inline void check_numel(const View& v, int64_t n, const char* op, const char* name) {
  check(v.numel() == n, op,
        std::string(name) + " has " + std::to_string(v.numel()) + " elements, expected " + std::to_string(n));
}
// b's length, after checking it runs along x's last dim; with f32, every
// view F32 (the 16-bit kernels check each view's format as they take it).
inline int64_t bias_len(const char* who, View x, View b, std::initializer_list<View> same, bool f32 = true) {
  if (f32) {
    check_dtype(x, DType::F32, who, "x");
    check_dtype(b, DType::F32, who, "b");
  }
  const int64_t nb = b.numel();
  check(b.shape.rank == 1 && x.shape.rank >= 1 && x.shape[x.shape.rank - 1] == nb, who,
        "b must be 1-D with x's last dim, got " + b.shape.str() + " for " + x.shape.str());
  for (const View& v : same) {
    check_numel(v, x.numel(), who, "operand");
    if (f32) check_dtype(v, DType::F32, who, "operand");
  }
  return nb;
}

// A View's F32 data, read-only or to write.
inline const float* cf(const View& v) { return static_cast<const float*>(v.data); }
inline float* mf(const View& v) { return static_cast<float*>(v.data); }

// Blocks for an n-element grid-stride loop.
inline unsigned grid_for(int64_t n, int threads = 256) {
  int64_t b = (n + threads - 1) / threads;
  if (b > (1 << 20)) b = 1 << 20;  // grid-stride loops cover the rest
  return unsigned(b < 1 ? 1 : b);
}

// A cpu::detail::Strided passed to kernels by value: up to 4 operands over
// up to 8 coalesced dims (offsets() below walks it).
struct DevStrided {
  int rank = 0;
  int64_t dims[Shape::kMaxRank] = {};
  int64_t stride[cpu::detail::Strided::kMaxOps][Shape::kMaxRank] = {};
  int64_t base[cpu::detail::Strided::kMaxOps] = {};

  explicit DevStrided(const cpu::detail::Strided& s) : rank(s.rank) {
    for (int d = 0; d < s.rank; ++d) dims[d] = s.dims[d];
    for (int k = 0; k < s.nops; ++k) {
      base[k] = s.base[k];
      for (int d = 0; d < s.rank; ++d) stride[k][d] = s.stride[k][d];
    }
  }
};

// Operand offsets at linear index i of a DevStrided space. I = uint32_t
// when the space fits: 32-bit division is several times cheaper than 64-bit.
// The outermost dim needs no division, so rank-1 spaces need none.
template <int K, class I> __device__ __forceinline__ void offsets(const DevStrided& s, I i, int64_t* off) {
#pragma unroll
  for (int k = 0; k < K; ++k) off[k] = s.base[k];
  for (int d = s.rank - 1; d > 0; --d) {
    const I n = I(s.dims[d]);
    const I q = i / n, r = i - q * n;
    i = q;
#pragma unroll
    for (int k = 0; k < K; ++k) off[k] += int64_t(r) * s.stride[k][d];
  }
#pragma unroll
  for (int k = 0; k < K; ++k) off[k] += int64_t(i) * s.stride[k][0];
}

template <class I> __device__ __forceinline__ I thread_index() { return I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); }
template <class I> __device__ __forceinline__ I thread_stride() { return I(gridDim.x) * I(blockDim.x); }

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Runs host-side shape logic borrowed from the CPU kernels, whose errors say
// "fy::cpu::<op>: ...", and reports them as ours.
template <class F> auto host_shapes(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    std::string m = e.what();
    const std::string cpu = "fy::cpu::";
    if (m.compare(0, cpu.size(), cpu) == 0) m = "fy::cuda::" + m.substr(cpu.size());
    fail(m);
  }
}

// Kernels that find bad data (an index out of range) record it here; the
// next synchronize() reports it. Codes: see context.cu.
enum class DeviceError : int { None = 0, GatherIndex = 1, LossLabel = 2 };
int* device_error_flag();

}  // namespace fy::cuda::detail
