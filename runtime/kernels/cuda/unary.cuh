// The unary ops' arithmetic on the device, shared by the elementwise kernels
// and those that fuse one into another kernel (a bias's gradient summed as it
// is computed): the CPU's formulas in its evaluation order, products and sums
// written with __fmul_rn & co. so nvcc cannot contract them into FMAs the CPU
// does not use.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace fy::cuda::detail {

constexpr float kSqrt1_2 = float(0.70710678118654752440);      // 1/sqrt(2)
constexpr float kInvSqrt2Pi = float(0.39894228040143267794);   // 1/sqrt(2*pi)
constexpr float k2InvSqrtPi = float(1.12837916709551257390);   // 2/sqrt(pi)
constexpr float kSqrt2OverPi = float(0.79788456080286535588);  // sqrt(2/pi)
constexpr float kGeluC = float(0.044715);

__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float sub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ float div(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ float sigmoid(float x) { return div(1.0f, add(1.0f, expf(-x))); }

template <UnOp OP> __device__ __forceinline__ float unary_fwd(float x) {
  switch (OP) {
    case UnOp::Neg: return -x;
    case UnOp::Sqrt: return __fsqrt_rn(x);
    case UnOp::Reciprocal: return div(1.0f, x);
    case UnOp::Exp: return expf(x);
    case UnOp::Tanh: return tanhf(x);
    case UnOp::Erf: return erff(x);
    case UnOp::Sigmoid: return sigmoid(x);
    case UnOp::Gelu: return mul(mul(0.5f, x), add(1.0f, erff(mul(x, kSqrt1_2))));
    case UnOp::GeluTanh: {
      const float cube = mul(mul(mul(kGeluC, x), x), x);
      return mul(mul(0.5f, x), add(1.0f, tanhf(mul(kSqrt2OverPi, add(x, cube)))));
    }
    case UnOp::Silu: return mul(x, sigmoid(x));
    case UnOp::Identity: return x;
  }
  return x;
}

// dy * f'(x), y = f(x); the CPU's unary_bwd with its evaluation order.
template <UnOp OP> __device__ __forceinline__ float unary_bwd(float x, float y, float dy) {
  switch (OP) {
    case UnOp::Neg: return -dy;
    case UnOp::Sqrt: return div(mul(dy, 0.5f), y);
    case UnOp::Reciprocal: return mul(mul(-dy, y), y);
    case UnOp::Exp: return mul(dy, y);
    case UnOp::Tanh: return mul(dy, sub(1.0f, mul(y, y)));
    case UnOp::Erf: return mul(mul(dy, k2InvSqrtPi), expf(mul(-x, x)));
    case UnOp::Sigmoid: return mul(mul(dy, y), sub(1.0f, y));
    case UnOp::Gelu: {
      const float cdf = mul(0.5f, add(1.0f, erff(mul(x, kSqrt1_2))));
      const float pdf = mul(kInvSqrt2Pi, expf(mul(mul(-0.5f, x), x)));
      return mul(dy, add(cdf, mul(x, pdf)));
    }
    case UnOp::GeluTanh: {
      const float x2 = mul(x, x);
      const float t = tanhf(mul(kSqrt2OverPi, add(x, mul(mul(kGeluC, x2), x))));
      const float dinner = mul(kSqrt2OverPi, add(1.0f, mul(mul(3.0f, kGeluC), x2)));
      return mul(dy, add(mul(0.5f, add(1.0f, t)), mul(mul(mul(0.5f, x), sub(1.0f, mul(t, t))), dinner)));
    }
    case UnOp::Silu: {
      const float s = sigmoid(x);
      return mul(mul(dy, s), add(1.0f, mul(x, sub(1.0f, s))));
    }
    case UnOp::Identity: return dy;
  }
  return dy;
}

// Calls f(std::integral_constant<UnOp, op>): a kernel instantiated per op.
template <class F> void with_unop(UnOp op, F&& f) {
  switch (op) {
    case UnOp::Neg: return f(std::integral_constant<UnOp, UnOp::Neg>{});
    case UnOp::Sqrt: return f(std::integral_constant<UnOp, UnOp::Sqrt>{});
    case UnOp::Reciprocal: return f(std::integral_constant<UnOp, UnOp::Reciprocal>{});
    case UnOp::Exp: return f(std::integral_constant<UnOp, UnOp::Exp>{});
    case UnOp::Tanh: return f(std::integral_constant<UnOp, UnOp::Tanh>{});
    case UnOp::Erf: return f(std::integral_constant<UnOp, UnOp::Erf>{});
    case UnOp::Sigmoid: return f(std::integral_constant<UnOp, UnOp::Sigmoid>{});
    case UnOp::Gelu: return f(std::integral_constant<UnOp, UnOp::Gelu>{});
    case UnOp::GeluTanh: return f(std::integral_constant<UnOp, UnOp::GeluTanh>{});
    case UnOp::Silu: return f(std::integral_constant<UnOp, UnOp::Silu>{});
    case UnOp::Identity: return f(std::integral_constant<UnOp, UnOp::Identity>{});
  }
  fail("fy::cuda::unary: unknown op");
}

}  // namespace fy::cuda::detail
