// Float operands stored as F32, BF16 or F16 (fy-half-activations' buffers)
// for the kernels that take them: values widen to fp32 exactly on load and
// fp32 results narrow to nearest even on store (as k_widen16 / k_narrow16),
// so such a kernel computes what it computes on fp32 operands. The format is
// a run-time field: one instantiation serves every mix of formats, and the
// branch on it is the same for every thread.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <initializer_list>

#include "core/tensor.h"
#include "kernels/cuda/common.cuh"

namespace fy::cuda::detail {

enum class Fmt : int { F32, BF16, F16 };

inline bool is16(const View& v) { return v.dtype == DType::BF16 || v.dtype == DType::F16; }
inline bool any16(std::initializer_list<View> views) {
  for (const View& v : views)
    if (is16(v)) return true;
  return false;
}

inline Fmt fmt_of(const View& v, const char* op, const char* name) {
  check(v.dtype == DType::F32 || is16(v), op,
        std::string(name) + " has dtype " + dtype_name(v.dtype) + ", expected F32, BF16 or F16");
  return v.dtype == DType::BF16 ? Fmt::BF16 : v.dtype == DType::F16 ? Fmt::F16 : Fmt::F32;
}

struct FIn {
  const void* p = nullptr;
  Fmt f = Fmt::F32;
  __device__ __forceinline__ float operator[](int64_t i) const {
    if (f == Fmt::F32) return static_cast<const float*>(p)[i];
    const unsigned short h = static_cast<const unsigned short*>(p)[i];
    return f == Fmt::BF16 ? __bfloat162float(__ushort_as_bfloat16(h)) : __half2float(__ushort_as_half(h));
  }
};

struct FOut {
  void* p = nullptr;
  Fmt f = Fmt::F32;
  __device__ __forceinline__ void set(int64_t i, float v) const {
    if (f == Fmt::F32)
      static_cast<float*>(p)[i] = v;
    else
      static_cast<unsigned short*>(p)[i] = f == Fmt::BF16 ? __bfloat16_as_ushort(__float2bfloat16_rn(v))
                                                          : __half_as_ushort(__float2half_rn(v));
  }
};

// Null views give null pointers (optional operands).
inline FIn fin(const View& v, const char* op, const char* name) {
  return v.data ? FIn{v.data, fmt_of(v, op, name)} : FIn{};
}
inline FOut fout(const View& v, const char* op, const char* name) {
  return v.data ? FOut{v.data, fmt_of(v, op, name)} : FOut{};
}

}  // namespace fy::cuda::detail
