// Elementwise CUDA kernels: binary/unary ops (+ gradients), broadcasting
// copies, where, cast, fill, copy and dropout. Formula for formula the same
// as fy::cpu (kernels/cpu/elementwise.cpp); products are written with
// __fmul_rn & co. so nvcc cannot fuse them into FMAs the CPU does not use.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/half.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/unary.cuh"

namespace fy::cuda {
namespace {

namespace cd = ::fy::cpu::detail;
using detail::cf;
using detail::check;
using detail::check_dtype;
using detail::check_numel;
using detail::check_shape;
using detail::current_stream;
using detail::any16;
using detail::DevStrided;
using detail::FIn;
using detail::fin;
using detail::FOut;
using detail::fout;
using detail::grid_for;
using detail::mf;
using detail::aligned16;
using detail::host_shapes;
using detail::offsets;
using detail::unary_bwd;
using detail::unary_fwd;
using detail::bias_len;
using detail::with_unop;
using detail::add;
using detail::div;
using detail::mul;
using detail::sub;
using detail::thread_index;
using detail::thread_stride;

constexpr int kThreads = 256;





// f(off) for every point of the iteration space.
template <int K, class I, class F> __global__ void k_strided(DevStrided s, I n, F f) {
  for (I i = thread_index<I>(); i < n; i += thread_stride<I>()) {
    int64_t off[K];
    offsets<K>(s, i, off);
    f(off);
  }
}

template <int K, class F> void run_strided(const cd::Strided& it, F f) {
  const int64_t n = it.numel();
  if (n == 0) return;
  const DevStrided s(it);
  if (n <= INT32_MAX) {
    k_strided<K, uint32_t><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(s, uint32_t(n), f);
  } else {
    k_strided<K, int64_t><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(s, n, f);
  }
  FY_CUDA_LAUNCHED("k_strided");
}

// Calls f(Tag<T>{}) with an unsigned type of the element size (bit moves).
template <class F> void with_bits(DType dt, F&& f) {
  switch (dtype_size(dt)) {
    case 1: f(cd::Tag<uint8_t>{}); return;
    case 2: f(cd::Tag<uint16_t>{}); return;
    case 4: f(cd::Tag<uint32_t>{}); return;
    case 8: f(cd::Tag<uint64_t>{}); return;
    default: fail("fy::cuda: unsupported element size");
  }
}

[[noreturn]] void only_f32(const char* op, DType dt) {
  fail(std::string("fy::cuda::") + op + ": unsupported dtype " + dtype_name(dt) + " (the CUDA kernels take F32)");
}

// ---- binary ------------------------------------------------------------------

struct AddOp { template <class T> __device__ static T f(T x, T y) { return x + y; } };
struct SubOp { template <class T> __device__ static T f(T x, T y) { return x - y; } };
struct MulOp { template <class T> __device__ static T f(T x, T y) { return x * y; } };
struct DivOp { template <class T> __device__ static T f(T x, T y) { return x / y; } };
// Squares are exact, as on the CPU.
struct PowOp { __device__ static float f(float x, float y) { return y == 2.0f ? x * x : powf(x, y); } };

template <class Op, class T> struct BinaryF {
  const T* a;
  const T* b;
  T* o;
  __device__ void operator()(const int64_t* off) const { o[off[0]] = Op::f(a[off[1]], b[off[2]]); }
};

// 16-bit operands or out (half.cuh): the same fp32 arithmetic.
template <class Op> struct Binary16F {
  FIn a, b;
  FOut o;
  __device__ void operator()(const int64_t* off) const { o.set(off[0], Op::f(a[off[1]], b[off[2]])); }
};

__device__ __forceinline__ float4 splat4(float v) { return make_float4(v, v, v, v); }

// [rows, cols] spaces (rank <= 2, cols % 4 == 0, out contiguous) where each
// input steps by 1 along cols (vector load) or 0 (broadcast value): same
// shapes, scalars and bias-style rows/columns all land here.
template <class Op, class I>
__global__ void k_binary_vec4(const float* a, const float* b, float* o, I n4, I cols4, int64_t osa, int64_t osb,
                              bool va, bool vb) {
  for (I i = thread_index<I>(); i < n4; i += thread_stride<I>()) {
    const I r = i / cols4, c = (i - r * cols4) * 4;
    const float* pa = a + int64_t(r) * osa;
    const float* pb = b + int64_t(r) * osb;
    const float4 x = va ? *reinterpret_cast<const float4*>(pa + c) : splat4(pa[0]);
    const float4 y = vb ? *reinterpret_cast<const float4*>(pb + c) : splat4(pb[0]);
    reinterpret_cast<float4*>(o)[i] = make_float4(Op::f(x.x, y.x), Op::f(x.y, y.y), Op::f(x.z, y.z), Op::f(x.w, y.w));
  }
}

template <class Op> void binary_f32(const cd::Strided& it, const float* a, const float* b, float* o) {
  const int64_t n = it.numel();
  if (n == 0) return;
  const int R = it.rank;
  bool vec = R <= 2 && it.dims[R - 1] % 4 == 0 && aligned16(o);
  const float* ptr[3] = {o, a, b};
  int64_t os[3] = {0, 0, 0};
  for (int k = 1; k < 3 && vec; ++k) {
    const int64_t inner = it.stride[k][R - 1];
    os[k] = R == 2 ? it.stride[k][0] : 0;
    vec = it.base[k] == 0 && (inner == 0 || (inner == 1 && os[k] % 4 == 0 && aligned16(ptr[k])));
  }
  if (vec) {
    const int64_t n4 = n / 4, cols4 = it.dims[R - 1] / 4;
    const bool va = it.stride[1][R - 1] == 1, vb = it.stride[2][R - 1] == 1;
    if (n4 <= INT32_MAX) {
      k_binary_vec4<Op, uint32_t><<<grid_for(n4, kThreads), kThreads, 0, current_stream()>>>(
          a, b, o, uint32_t(n4), uint32_t(cols4), os[1], os[2], va, vb);
    } else {
      k_binary_vec4<Op, int64_t><<<grid_for(n4, kThreads), kThreads, 0, current_stream()>>>(a, b, o, n4, cols4, os[1],
                                                                                            os[2], va, vb);
    }
    FY_CUDA_LAUNCHED("k_binary_vec4");
    return;
  }
  run_strided<3>(it, BinaryF<Op, float>{a, b, o});
}

// ---- unary -------------------------------------------------------------------


// No __restrict__ here or below: outputs may alias inputs (in place).
template <UnOp OP> __global__ void k_unary(const float* x, float* y, int64_t n, bool vec) {
  if (vec) {
    for (int64_t i = thread_index<int64_t>(); i < n / 4; i += thread_stride<int64_t>()) {
      const float4 v = reinterpret_cast<const float4*>(x)[i];
      reinterpret_cast<float4*>(y)[i] = make_float4(unary_fwd<OP>(v.x), unary_fwd<OP>(v.y), unary_fwd<OP>(v.z),
                                                    unary_fwd<OP>(v.w));
    }
  } else {
    for (int64_t i = thread_index<int64_t>(); i < n; i += thread_stride<int64_t>()) y[i] = unary_fwd<OP>(x[i]);
  }
}

// x or y may be null (as on the CPU: x reads as 0, y is recomputed from x).
template <UnOp OP> __device__ __forceinline__ float grad_one(float xi, const float* yv, float yi_loaded, float dyi) {
  const float yi = yv ? yi_loaded : unary_fwd<OP>(xi);
  return unary_bwd<OP>(xi, yi, dyi);
}

template <UnOp OP> __global__ void k_unary_grad(const float* x, const float* y, const float* dy, float* dx, int64_t n,
                                                bool vec) {
  if (vec) {
    const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int64_t i = thread_index<int64_t>(); i < n / 4; i += thread_stride<int64_t>()) {
      const float4 xv = x ? reinterpret_cast<const float4*>(x)[i] : zero;
      const float4 yv = y ? reinterpret_cast<const float4*>(y)[i] : zero;
      const float4 g = reinterpret_cast<const float4*>(dy)[i];
      reinterpret_cast<float4*>(dx)[i] =
          make_float4(grad_one<OP>(xv.x, y, yv.x, g.x), grad_one<OP>(xv.y, y, yv.y, g.y),
                      grad_one<OP>(xv.z, y, yv.z, g.z), grad_one<OP>(xv.w, y, yv.w, g.w));
    }
  } else {
    for (int64_t i = thread_index<int64_t>(); i < n; i += thread_stride<int64_t>()) {
      const float xi = x ? x[i] : 0.0f;
      dx[i] = grad_one<OP>(xi, y, y ? y[i] : 0.0f, dy[i]);
    }
  }
}

// x + b with b along the last dim (nb wide): __fadd_rn rounds the sum as the
// add kernel's store does, so these give the unfused kernels' bits.
template <UnOp OP> __global__ void k_bias_unary(const float* x, const float* b, float* y, int64_t n, int64_t nb,
                                                bool vec) {
  if (vec) {
    for (int64_t i = thread_index<int64_t>(); i < n / 4; i += thread_stride<int64_t>()) {
      const float4 v = reinterpret_cast<const float4*>(x)[i];
      const float4 c = reinterpret_cast<const float4*>(b)[(i * 4 % nb) / 4];
      reinterpret_cast<float4*>(y)[i] =
          make_float4(unary_fwd<OP>(__fadd_rn(v.x, c.x)), unary_fwd<OP>(__fadd_rn(v.y, c.y)),
                      unary_fwd<OP>(__fadd_rn(v.z, c.z)), unary_fwd<OP>(__fadd_rn(v.w, c.w)));
    }
  } else {
    for (int64_t i = thread_index<int64_t>(); i < n; i += thread_stride<int64_t>())
      y[i] = unary_fwd<OP>(__fadd_rn(x[i], b[i % nb]));
  }
}

template <UnOp OP> __global__ void k_bias_unary_grad(const float* x, const float* b, const float* y, const float* dy,
                                                     float* dx, int64_t n, int64_t nb, bool vec) {
  if (vec) {
    for (int64_t i = thread_index<int64_t>(); i < n / 4; i += thread_stride<int64_t>()) {
      const float4 v = reinterpret_cast<const float4*>(x)[i];
      const float4 c = reinterpret_cast<const float4*>(b)[(i * 4 % nb) / 4];
      const float4 yv = reinterpret_cast<const float4*>(y)[i];
      const float4 g = reinterpret_cast<const float4*>(dy)[i];
      reinterpret_cast<float4*>(dx)[i] = make_float4(
          unary_bwd<OP>(__fadd_rn(v.x, c.x), yv.x, g.x), unary_bwd<OP>(__fadd_rn(v.y, c.y), yv.y, g.y),
          unary_bwd<OP>(__fadd_rn(v.z, c.z), yv.z, g.z), unary_bwd<OP>(__fadd_rn(v.w, c.w), yv.w, g.w));
    }
  } else {
    for (int64_t i = thread_index<int64_t>(); i < n; i += thread_stride<int64_t>())
      dx[i] = unary_bwd<OP>(__fadd_rn(x[i], b[i % nb]), y[i], dy[i]);
  }
}

// The unary kernels on 16-bit operands (half.cuh), element by element: the
// fp32 kernels' arithmetic, so their bits are those of casts around them.
template <UnOp OP> __global__ void k_unary16(FIn x, FOut y, int64_t n) {
  for (int64_t i = thread_index<int64_t>(); i < n; i += thread_stride<int64_t>()) y.set(i, unary_fwd<OP>(x[i]));
}
template <UnOp OP> __global__ void k_unary_grad16(FIn x, FIn y, FIn dy, FOut dx, int64_t n) {
  for (int64_t i = thread_index<int64_t>(); i < n; i += thread_stride<int64_t>()) {
    const float xi = x.p ? x[i] : 0.0f;
    dx.set(i, unary_bwd<OP>(xi, y.p ? y[i] : unary_fwd<OP>(xi), dy[i]));
  }
}
template <UnOp OP> __global__ void k_bias_unary16(FIn x, FIn b, FOut y, int64_t n, int64_t nb) {
  for (int64_t i = thread_index<int64_t>(); i < n; i += thread_stride<int64_t>())
    y.set(i, unary_fwd<OP>(__fadd_rn(x[i], b[i % nb])));
}
template <UnOp OP> __global__ void k_bias_unary_grad16(FIn x, FIn b, FIn y, FIn dy, FOut dx, int64_t n, int64_t nb) {
  for (int64_t i = thread_index<int64_t>(); i < n; i += thread_stride<int64_t>())
    dx.set(i, unary_bwd<OP>(__fadd_rn(x[i], b[i % nb]), y[i], dy[i]));
}

// ---- where / broadcast / equal / cast / fill ---------------------------------------

template <class T> struct WhereF {
  const uint8_t* c;
  const T* a;
  const T* b;
  T* o;
  __device__ void operator()(const int64_t* off) const { o[off[0]] = c[off[1]] ? a[off[2]] : b[off[3]]; }
};

template <class T> struct CopyF {
  const T* x;
  T* y;
  __device__ void operator()(const int64_t* off) const { y[off[0]] = x[off[1]]; }
};

template <class T> struct EqualF {
  const T* a;
  const T* b;
  uint8_t* o;
  __device__ void operator()(const int64_t* off) const { o[off[0]] = a[off[1]] == b[off[2]]; }
};

template <class To, class From> __device__ __forceinline__ To cast_one(From v) {
  if constexpr (std::is_same_v<To, uint8_t>) return v != From(0) ? 1 : 0;
  else return static_cast<To>(v);
}

template <class From, class To> __global__ void k_cast(const From* x, To* y, int64_t n) {
  for (int64_t i = thread_index<int64_t>(); i < n; i += thread_stride<int64_t>()) y[i] = cast_one<To>(x[i]);
}

// 16-bit floats (storage) to and from F32, to nearest even as on the CPU
// (core/half.h); bf16 (true) or fp16.
__global__ void k_widen16(const uint16_t* x, float* y, int64_t n, bool bf16) {
  for (int64_t i = thread_index<int64_t>(); i < n; i += thread_stride<int64_t>())
    y[i] = bf16 ? __bfloat162float(__ushort_as_bfloat16(x[i])) : __half2float(__ushort_as_half(x[i]));
}
__device__ __forceinline__ uint16_t narrow_one(float v, bool bf16) {
  return bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(v)) : __half_as_ushort(__float2half_rn(v));
}
// With vec (x 16-byte and y 8-byte aligned), four elements a thread and
// step, as matmul rounds its operands: a product's 16-bit copy is one.
__global__ void k_narrow16(const float* x, uint16_t* y, int64_t n, bool bf16, bool vec) {
  const int64_t n4 = vec ? n / 4 : 0;
  for (int64_t i = thread_index<int64_t>(); i < n4; i += thread_stride<int64_t>()) {
    const float4 v = reinterpret_cast<const float4*>(x)[i];
    const uint2 o = {uint32_t(narrow_one(v.x, bf16)) | uint32_t(narrow_one(v.y, bf16)) << 16,
                     uint32_t(narrow_one(v.z, bf16)) | uint32_t(narrow_one(v.w, bf16)) << 16};
    reinterpret_cast<uint2*>(y)[i] = o;
  }
  for (int64_t i = 4 * n4 + thread_index<int64_t>(); i < n; i += thread_stride<int64_t>()) y[i] = narrow_one(x[i], bf16);
}

template <class U> __global__ void k_fill(U* p, int64_t n, U v) {
  for (int64_t i = thread_index<int64_t>(); i < n; i += thread_stride<int64_t>()) p[i] = v;
}

// Fills n elements with the bit pattern v: a memset when all its bytes agree.
template <class U> void fill_bits(void* p, int64_t n, U v) {
  unsigned char bytes[sizeof(U)];
  std::memcpy(bytes, &v, sizeof(U));
  bool same = true;
  for (size_t i = 1; i < sizeof(U); ++i) same = same && bytes[i] == bytes[0];
  if (same) {
    FY_CUDA_CHECK(cudaMemsetAsync(p, bytes[0], size_t(n) * sizeof(U), current_stream()));
    return;
  }
  k_fill<U><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(static_cast<U*>(p), n, v);
  FY_CUDA_LAUNCHED("k_fill");
}

template <class T> uint64_t bits_of(T v) {
  uint64_t u = 0;
  std::memcpy(&u, &v, sizeof(T));
  return u;
}

// ---- dropout -----------------------------------------------------------------------

__host__ __device__ __forceinline__ uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The CPU keeps element i when u = (h >> 11) * 2^-53 >= ratio. Both sides
// scale exactly by 2^53, so that is (h >> 11) >= ceil(ratio * 2^53) = thr.
__device__ __forceinline__ bool keep_at(uint64_t key, uint64_t thr, int64_t i) {
  return (splitmix64(key ^ splitmix64(uint64_t(i))) >> 11) >= thr;
}

__global__ void k_dropout(const float* x, float* y, uint8_t* m, int64_t n, uint64_t key, uint64_t thr, float scale,
                          bool vec) {
  if (vec) {
    for (int64_t i = thread_index<int64_t>(); i < n / 4; i += thread_stride<int64_t>()) {
      const float4 v = reinterpret_cast<const float4*>(x)[i];
      const bool k0 = keep_at(key, thr, 4 * i), k1 = keep_at(key, thr, 4 * i + 1);
      const bool k2 = keep_at(key, thr, 4 * i + 2), k3 = keep_at(key, thr, 4 * i + 3);
      reinterpret_cast<uchar4*>(m)[i] = make_uchar4(k0, k1, k2, k3);
      reinterpret_cast<float4*>(y)[i] = make_float4(k0 ? v.x * scale : 0.0f, k1 ? v.y * scale : 0.0f,
                                                    k2 ? v.z * scale : 0.0f, k3 ? v.w * scale : 0.0f);
    }
  } else {
    for (int64_t i = thread_index<int64_t>(); i < n; i += thread_stride<int64_t>()) {
      const bool k = keep_at(key, thr, i);
      m[i] = k;
      y[i] = k ? x[i] * scale : 0.0f;
    }
  }
}

__global__ void k_dropout_grad(const float* dy, const uint8_t* m, float* dx, int64_t n, float scale, bool vec) {
  if (vec) {
    for (int64_t i = thread_index<int64_t>(); i < n / 4; i += thread_stride<int64_t>()) {
      const float4 g = reinterpret_cast<const float4*>(dy)[i];
      const uchar4 k = reinterpret_cast<const uchar4*>(m)[i];
      reinterpret_cast<float4*>(dx)[i] = make_float4(k.x ? g.x * scale : 0.0f, k.y ? g.y * scale : 0.0f,
                                                     k.z ? g.z * scale : 0.0f, k.w ? g.w * scale : 0.0f);
    }
  } else {
    for (int64_t i = thread_index<int64_t>(); i < n; i += thread_stride<int64_t>()) dx[i] = m[i] ? dy[i] * scale : 0.0f;
  }
}

}  // namespace

// ---- entry points ------------------------------------------------------------------

void binary(BinOp op, View a, View b, View out) {
  check_shape(out, host_shapes([&] { return cd::broadcast_shape(a.shape, b.shape, "binary"); }), "binary", "out");
  const cd::Strided it = host_shapes([&] { return cd::broadcast_iter(out.shape, {a.shape, b.shape}, "binary"); });
  if (any16({a, b, out})) {
    const FIn fa = fin(a, "binary", "a"), fb = fin(b, "binary", "b");
    const FOut fo = fout(out, "binary", "out");
    switch (op) {
      case BinOp::Add: return run_strided<3>(it, Binary16F<AddOp>{fa, fb, fo});
      case BinOp::Sub: return run_strided<3>(it, Binary16F<SubOp>{fa, fb, fo});
      case BinOp::Mul: return run_strided<3>(it, Binary16F<MulOp>{fa, fb, fo});
      case BinOp::Div: return run_strided<3>(it, Binary16F<DivOp>{fa, fb, fo});
      case BinOp::Pow: return run_strided<3>(it, Binary16F<PowOp>{fa, fb, fo});
    }
    return;
  }
  check(a.dtype == b.dtype && a.dtype == out.dtype, "binary", "dtype mismatch");
  switch (a.dtype) {
    case DType::F32: {
      const float* pa = static_cast<const float*>(a.data);
      const float* pb = static_cast<const float*>(b.data);
      float* po = static_cast<float*>(out.data);
      switch (op) {
        case BinOp::Add: return binary_f32<AddOp>(it, pa, pb, po);
        case BinOp::Sub: return binary_f32<SubOp>(it, pa, pb, po);
        case BinOp::Mul: return binary_f32<MulOp>(it, pa, pb, po);
        case BinOp::Div: return binary_f32<DivOp>(it, pa, pb, po);
        case BinOp::Pow: return binary_f32<PowOp>(it, pa, pb, po);
      }
      return;
    }
    case DType::I64: {
      const int64_t* pa = static_cast<const int64_t*>(a.data);
      const int64_t* pb = static_cast<const int64_t*>(b.data);
      int64_t* po = static_cast<int64_t*>(out.data);
      switch (op) {
        case BinOp::Add: return run_strided<3>(it, BinaryF<AddOp, int64_t>{pa, pb, po});
        case BinOp::Sub: return run_strided<3>(it, BinaryF<SubOp, int64_t>{pa, pb, po});
        case BinOp::Mul: return run_strided<3>(it, BinaryF<MulOp, int64_t>{pa, pb, po});
        case BinOp::Div: {
          // As on the CPU a zero divisor fails here, not with garbage: read b
          // back (this waits for the stream; I64 division is rare and small).
          std::vector<int64_t> hb(size_t(b.numel()));
          if (!hb.empty()) {
            FY_CUDA_CHECK(cudaMemcpyAsync(hb.data(), pb, b.nbytes(), cudaMemcpyDeviceToHost, current_stream()));
            FY_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
          }
          for (int64_t v : hb) check(v != 0, "binary", "integer division by zero");
          return run_strided<3>(it, BinaryF<DivOp, int64_t>{pa, pb, po});
        }
        case BinOp::Pow: fail("fy::cuda::binary: Pow is not supported for I64");
      }
      return;
    }
    default: fail(std::string("fy::cuda::binary: unsupported dtype ") + dtype_name(a.dtype));
  }
}

void equal(View a, View b, View out) {
  check(a.dtype == b.dtype, "equal", "dtype mismatch");
  check_dtype(out, DType::U8, "equal", "out");
  check_shape(out, host_shapes([&] { return cd::broadcast_shape(a.shape, b.shape, "equal"); }), "equal", "out");
  const cd::Strided it = host_shapes([&] { return cd::broadcast_iter(out.shape, {a.shape, b.shape}, "equal"); });
  uint8_t* po = static_cast<uint8_t*>(out.data);
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    run_strided<3>(it, EqualF<T>{static_cast<const T*>(a.data), static_cast<const T*>(b.data), po});
  };
  switch (a.dtype) {
    case DType::F32: return run(cd::Tag<float>{});
    case DType::I64: return run(cd::Tag<int64_t>{});
    case DType::U8: return run(cd::Tag<uint8_t>{});
    default: fail(std::string("fy::cuda::equal: unsupported dtype ") + dtype_name(a.dtype));
  }
}

void unary(UnOp op, View x, View y) {
  check_numel(y, x.numel(), "unary", "y");
  if (any16({x, y}) && (op != UnOp::Identity || x.dtype != y.dtype)) {
    const FIn fx = fin(x, "unary", "x");
    const FOut fy = fout(y, "unary", "y");
    const int64_t n = x.numel();
    if (n == 0) return;
    return with_unop(op, [&](auto c) {
      k_unary16<decltype(c)::value><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(fx, fy, n);
      FY_CUDA_LAUNCHED("k_unary16");
    });
  }
  check(x.dtype == y.dtype, "unary", "dtype mismatch");
  if (op == UnOp::Identity) return copy(x, y);
  if (x.dtype != DType::F32) only_f32("unary", x.dtype);
  const int64_t n = x.numel();
  if (n == 0) return;
  const float* px = static_cast<const float*>(x.data);
  float* py = static_cast<float*>(y.data);
  const bool vec = n % 4 == 0 && aligned16(px) && aligned16(py);
  with_unop(op, [&](auto c) {
    k_unary<decltype(c)::value><<<grid_for(vec ? n / 4 : n, kThreads), kThreads, 0, current_stream()>>>(px, py, n, vec);
    FY_CUDA_LAUNCHED("k_unary");
  });
}

void unary_grad(UnOp op, View x, View y, View dy, View dx) {
  const int64_t n = x.numel();
  check_numel(dy, n, "unary_grad", "dy");
  check_numel(dx, n, "unary_grad", "dx");
  if (any16({x, y, dy, dx})) {
    if (y.data) check_numel(y, n, "unary_grad", "y");
    check(x.data || y.data, "unary_grad", "needs x or y");
    const FIn fx = fin(x, "unary_grad", "x"), fy = fin(y, "unary_grad", "y"), fdy = fin(dy, "unary_grad", "dy");
    const FOut fdx = fout(dx, "unary_grad", "dx");
    if (n == 0) return;
    return with_unop(op, [&](auto c) {
      k_unary_grad16<decltype(c)::value><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(fx, fy, fdy, fdx, n);
      FY_CUDA_LAUNCHED("k_unary_grad16");
    });
  }
  check(x.dtype == dy.dtype && x.dtype == dx.dtype, "unary_grad", "dtype mismatch");
  if (y.data) check_numel(y, n, "unary_grad", "y");
  if (x.dtype != DType::F32) only_f32("unary_grad", x.dtype);
  if (y.data) check_dtype(y, DType::F32, "unary_grad", "y");
  check(x.data || y.data, "unary_grad", "needs x or y");
  if (n == 0) return;
  const float* px = static_cast<const float*>(x.data);
  const float* py = static_cast<const float*>(y.data);
  const float* pdy = static_cast<const float*>(dy.data);
  float* pdx = static_cast<float*>(dx.data);
  const bool vec = n % 4 == 0 && (!px || aligned16(px)) && (!py || aligned16(py)) && aligned16(pdy) && aligned16(pdx);
  with_unop(op, [&](auto c) {
    k_unary_grad<decltype(c)::value><<<grid_for(vec ? n / 4 : n, kThreads), kThreads, 0, current_stream()>>>(
        px, py, pdy, pdx, n, vec);
    FY_CUDA_LAUNCHED("k_unary_grad");
  });
}


void bias_unary(UnOp op, View x, View b, View y) {
  if (any16({x, b, y})) {
    const int64_t nb = bias_len("bias_unary", x, b, {y}, false), n = x.numel();
    const FIn fx = fin(x, "bias_unary", "x"), fb = fin(b, "bias_unary", "b");
    const FOut fy = fout(y, "bias_unary", "y");
    if (n == 0) return;
    return with_unop(op, [&](auto c) {
      k_bias_unary16<decltype(c)::value><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(fx, fb, fy, n, nb);
      FY_CUDA_LAUNCHED("k_bias_unary16");
    });
  }
  const int64_t nb = bias_len("bias_unary", x, b, {y}), n = x.numel();
  if (n == 0) return;
  const float *px = static_cast<const float*>(x.data), *pb = static_cast<const float*>(b.data);
  float* py = static_cast<float*>(y.data);
  const bool vec = nb % 4 == 0 && aligned16(px) && aligned16(pb) && aligned16(py);
  with_unop(op, [&](auto c) {
    k_bias_unary<decltype(c)::value><<<grid_for(vec ? n / 4 : n, kThreads), kThreads, 0, current_stream()>>>(
        px, pb, py, n, nb, vec);
    FY_CUDA_LAUNCHED("k_bias_unary");
  });
}

void bias_unary_grad(UnOp op, View x, View b, View y, View dy, View dx) {
  if (any16({x, b, y, dy, dx})) {
    const char* who = "bias_unary_grad";
    const int64_t nb = bias_len(who, x, b, {y, dy, dx}, false), n = x.numel();
    const FIn fx = fin(x, who, "x"), fb = fin(b, who, "b"), fy = fin(y, who, "y"), fdy = fin(dy, who, "dy");
    const FOut fdx = fout(dx, who, "dx");
    if (n == 0) return;
    return with_unop(op, [&](auto c) {
      k_bias_unary_grad16<decltype(c)::value><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(
          fx, fb, fy, fdy, fdx, n, nb);
      FY_CUDA_LAUNCHED("k_bias_unary_grad16");
    });
  }
  const int64_t nb = bias_len("bias_unary_grad", x, b, {y, dy, dx}), n = x.numel();
  if (n == 0) return;
  const float *px = static_cast<const float*>(x.data), *pb = static_cast<const float*>(b.data);
  const float *py = static_cast<const float*>(y.data), *pdy = static_cast<const float*>(dy.data);
  float* pdx = static_cast<float*>(dx.data);
  const bool vec = nb % 4 == 0 && aligned16(px) && aligned16(pb) && aligned16(py) && aligned16(pdy) && aligned16(pdx);
  with_unop(op, [&](auto c) {
    k_bias_unary_grad<decltype(c)::value><<<grid_for(vec ? n / 4 : n, kThreads), kThreads, 0, current_stream()>>>(
        px, pb, py, pdy, pdx, n, nb, vec);
    FY_CUDA_LAUNCHED("k_bias_unary_grad");
  });
}

namespace {
// swiglu: silu(g) * u, its silu as unary's; the gradient's products as
// binary's mul and unary_grad's silu, so the bits are the unfused kernels'.
__global__ void k_swiglu(const float* g, const float* u, float* y, int64_t n) {
  for (int64_t i = thread_index<int64_t>(); i < n; i += thread_stride<int64_t>())
    y[i] = mul(unary_fwd<UnOp::Silu>(g[i]), u[i]);
}
__global__ void k_swiglu_grad(const float* g, const float* u, const float* dy, float* dg, float* du, int64_t n) {
  for (int64_t i = thread_index<int64_t>(); i < n; i += thread_stride<int64_t>()) {
    const float gi = g[i], d = dy[i];
    du[i] = mul(d, unary_fwd<UnOp::Silu>(gi));
    dg[i] = unary_bwd<UnOp::Silu>(gi, 0.0f, mul(d, u[i]));
  }
}
}  // namespace

namespace {
__global__ void k_swiglu16(FIn g, FIn u, FOut y, int64_t n) {
  for (int64_t i = thread_index<int64_t>(); i < n; i += thread_stride<int64_t>())
    y.set(i, mul(unary_fwd<UnOp::Silu>(g[i]), u[i]));
}
__global__ void k_swiglu_grad16(FIn g, FIn u, FIn dy, FOut dg, FOut du, int64_t n) {
  for (int64_t i = thread_index<int64_t>(); i < n; i += thread_stride<int64_t>()) {
    const float gi = g[i], d = dy[i];
    du.set(i, mul(d, unary_fwd<UnOp::Silu>(gi)));
    dg.set(i, unary_bwd<UnOp::Silu>(gi, 0.0f, mul(d, u[i])));
  }
}
// Every operand of the first's shape (any float format).
void check_same_shape(const char* op, std::initializer_list<View> views) {
  for (const View& v : views)
    check(v.shape == views.begin()->shape, op,
          "operands of shapes " + views.begin()->shape.str() + " and " + v.shape.str());
}
}  // namespace

void swiglu(View gate, View up, View y) {
  if (any16({gate, up, y})) {
    check_same_shape("swiglu", {gate, up, y});
    const int64_t n = gate.numel();
    const FIn g = fin(gate, "swiglu", "gate"), u = fin(up, "swiglu", "up");
    const FOut o = fout(y, "swiglu", "y");
    if (n == 0) return;
    k_swiglu16<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(g, u, o, n);
    FY_CUDA_LAUNCHED("k_swiglu16");
    return;
  }
  host_shapes([&] { cd::check_same_f32("swiglu", {gate, up, y}); });
  const int64_t n = gate.numel();
  if (n == 0) return;
  k_swiglu<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(cf(gate), cf(up), mf(y), n);
  FY_CUDA_LAUNCHED("k_swiglu");
}

void swiglu_grad(View gate, View up, View dy, View dgate, View dup) {
  if (any16({gate, up, dy, dgate, dup})) {
    const char* who = "swiglu_grad";
    check_same_shape(who, {gate, up, dy, dgate, dup});
    const int64_t n = gate.numel();
    const FIn g = fin(gate, who, "gate"), u = fin(up, who, "up"), d = fin(dy, who, "dy");
    const FOut dg = fout(dgate, who, "dgate"), du = fout(dup, who, "dup");
    if (n == 0) return;
    k_swiglu_grad16<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(g, u, d, dg, du, n);
    FY_CUDA_LAUNCHED("k_swiglu_grad16");
    return;
  }
  host_shapes([&] { cd::check_same_f32("swiglu_grad", {gate, up, dy, dgate, dup}); });
  const int64_t n = gate.numel();
  if (n == 0) return;
  k_swiglu_grad<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(cf(gate), cf(up), cf(dy), mf(dgate),
                                                                          mf(dup), n);
  FY_CUDA_LAUNCHED("k_swiglu_grad");
}

namespace {
// swiglu of packed rows [gate | up] (F each): k_swiglu16's and
// k_swiglu_grad16's arithmetic, element i of the half at row i / F.
__global__ void k_swiglu_packed(FIn x, FOut y, int64_t n, int64_t F) {
  for (int64_t i = thread_index<int64_t>(); i < n; i += thread_stride<int64_t>()) {
    const int64_t g = i / F * 2 * F + i % F;
    y.set(i, mul(unary_fwd<UnOp::Silu>(x[g]), x[g + F]));
  }
}
__global__ void k_swiglu_packed_grad(FIn x, FIn dy, FOut dx, int64_t n, int64_t F) {
  for (int64_t i = thread_index<int64_t>(); i < n; i += thread_stride<int64_t>()) {
    const int64_t g = i / F * 2 * F + i % F;
    const float gi = x[g], d = dy[i];
    dx.set(g + F, mul(d, unary_fwd<UnOp::Silu>(gi)));
    dx.set(g, unary_bwd<UnOp::Silu>(gi, 0.0f, mul(d, x[g + F])));
  }
}
}  // namespace

void swiglu_packed(View x, View y) {
  const char* who = "swiglu_packed";
  const int64_t F = host_shapes([&] { return cd::swiglu_packed_half(who, x, y); }), n = y.numel();
  const FIn fx = fin(x, who, "x");
  const FOut fy = fout(y, who, "y");
  if (n == 0) return;
  k_swiglu_packed<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(fx, fy, n, F);
  FY_CUDA_LAUNCHED("k_swiglu_packed");
}

void swiglu_packed_grad(View x, View dy, View dx) {
  const char* who = "swiglu_packed_grad";
  const int64_t F = host_shapes([&] { return cd::swiglu_packed_half(who, x, dy); }), n = dy.numel();
  check(dx.shape == x.shape, who, "dx must have x's shape");
  const FIn fx = fin(x, who, "x"), fdy = fin(dy, who, "dy");
  const FOut fdx = fout(dx, who, "dx");
  if (n == 0) return;
  k_swiglu_packed_grad<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(fx, fdy, fdx, n, F);
  FY_CUDA_LAUNCHED("k_swiglu_packed_grad");
}

namespace {
// rope: a thread per pair (d, d + D/2) of a row; each product rounded, then
// the sum, as the unfused kernels (and the CPU's rope).
// I: uint32_t where x fits (32-bit division is several times cheaper).
template <class I>
__global__ void k_rope(FIn x, FIn c, FIn s, FOut y, I pairs, I h, I inner, I T, bool transposed) {
  for (I i = thread_index<I>(); i < pairs; i += thread_stride<I>()) {
    const I row = i / h, d = i - row * h, t = (row / inner) % T;
    const int64_t at = int64_t(row) * 2 * h + d, tab = int64_t(t) * 2 * h + d;
    const float a = x[at], b = x[at + h];
    if (!transposed) {
      y.set(at, add(mul(a, c[tab]), mul(-b, s[tab])));
      y.set(at + h, add(mul(b, c[tab + h]), mul(a, s[tab + h])));
    } else {
      y.set(at, add(mul(a, c[tab]), mul(b, s[tab + h])));
      y.set(at + h, add(mul(b, c[tab + h]), mul(-a, s[tab])));
    }
  }
}
}  // namespace

void rope(View x, View cos, View sin, View y, int64_t seq_axis, bool transposed) {
  const cd::RopeGeo g = host_shapes([&] { return cd::rope_geo("rope", x, cos, sin, y, seq_axis); });
  // (Tables a kernel computed may be stored in 16 bits, as activations.)
  const FIn in = fin(x, "rope", "x"), c = fin(cos, "rope", "cos"), s = fin(sin, "rope", "sin");
  const FOut out = fout(y, "rope", "y");
  const int64_t pairs = g.rows * (g.D / 2);
  if (pairs == 0) return;
  if (2 * pairs < (int64_t(1) << 31))
    k_rope<uint32_t><<<grid_for(pairs, kThreads), kThreads, 0, current_stream()>>>(
        in, c, s, out, uint32_t(pairs), uint32_t(g.D / 2), uint32_t(g.inner), uint32_t(g.T), transposed);
  else
    k_rope<int64_t><<<grid_for(pairs, kThreads), kThreads, 0, current_stream()>>>(in, c, s, out, pairs, g.D / 2,
                                                                                 g.inner, g.T, transposed);
  FY_CUDA_LAUNCHED("k_rope");
}

void broadcast_to(View x, View y) {
  check(x.dtype == y.dtype, "broadcast_to", "dtype mismatch");
  const cd::Strided it = host_shapes([&] { return cd::broadcast_iter(y.shape, {x.shape}, "broadcast_to"); });
  with_bits(x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    run_strided<2>(it, CopyF<T>{static_cast<const T*>(x.data), static_cast<T*>(y.data)});
  });
}

void where(View cond, View a, View b, View out) {
  check_dtype(cond, DType::U8, "where", "cond");
  check(a.dtype == b.dtype && a.dtype == out.dtype, "where", "dtype mismatch");
  const Shape s = host_shapes([&] {
    return cd::broadcast_shape(cd::broadcast_shape(cond.shape, a.shape, "where"), b.shape, "where");
  });
  check_shape(out, s, "where", "out");
  const cd::Strided it =
      host_shapes([&] { return cd::broadcast_iter(out.shape, {cond.shape, a.shape, b.shape}, "where"); });
  with_bits(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    run_strided<4>(it, WhereF<T>{static_cast<const uint8_t*>(cond.data), static_cast<const T*>(a.data),
                                 static_cast<const T*>(b.data), static_cast<T*>(out.data)});
  });
}

void cast(View x, View y) {
  const int64_t n = x.numel();
  check_numel(y, n, "cast", "y");
  if (n == 0) return;
  // Same dtype is a plain copy, except U8 -> U8, which maps nonzero to 1.
  if (x.dtype == y.dtype && x.dtype != DType::U8) return copy(x, y);
  const bool x16 = x.dtype == DType::BF16 || x.dtype == DType::F16, y16 = y.dtype == DType::BF16 || y.dtype == DType::F16;
  if (x16 || y16) {
    check((x16 && y.dtype == DType::F32) || (y16 && x.dtype == DType::F32), "cast",
          std::string("a 16-bit float casts to or from F32 only, not ") + dtype_name(x.dtype) + " to " +
              dtype_name(y.dtype));
    if (x16)
      k_widen16<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(static_cast<const uint16_t*>(x.data),
                                                                           mf(y), n, x.dtype == DType::BF16);
    if (y16) {
      const bool vec = aligned16(x.data) && reinterpret_cast<uintptr_t>(y.data) % 8 == 0;
      k_narrow16<<<grid_for(vec ? n / 4 + 1 : n, kThreads), kThreads, 0, current_stream()>>>(
          cf(x), static_cast<uint16_t*>(y.data), n, y.dtype == DType::BF16, vec);
    }
    FY_CUDA_LAUNCHED("k_cast16");
    return;
  }
  auto to = [&](auto from_tag) {
    using From = typename decltype(from_tag)::type;
    auto run = [&](auto to_tag) {
      using To = typename decltype(to_tag)::type;
      k_cast<From, To><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(static_cast<const From*>(x.data),
                                                                                static_cast<To*>(y.data), n);
      FY_CUDA_LAUNCHED("k_cast");
    };
    switch (y.dtype) {
      case DType::F32: return run(cd::Tag<float>{});
      case DType::F64: return run(cd::Tag<double>{});
      case DType::I64: return run(cd::Tag<int64_t>{});
      case DType::U8: return run(cd::Tag<uint8_t>{});
      case DType::BF16: case DType::F16: break;  // above
    }
  };
  switch (x.dtype) {
    case DType::F32: return to(cd::Tag<float>{});
    case DType::F64: return to(cd::Tag<double>{});
    case DType::I64: return to(cd::Tag<int64_t>{});
    case DType::U8: return to(cd::Tag<uint8_t>{});
    case DType::BF16: case DType::F16: break;  // above
  }
}

void fill(View y, double value) {
  const int64_t n = y.numel();
  if (n == 0) return;
  // The value is converted on the host exactly as the CPU converts it.
  switch (y.dtype) {
    case DType::F32: return fill_bits<uint32_t>(y.data, n, uint32_t(bits_of(static_cast<float>(value))));
    case DType::F64: return fill_bits<uint64_t>(y.data, n, bits_of(value));
    case DType::I64: return fill_bits<uint64_t>(y.data, n, bits_of(static_cast<int64_t>(value)));
    case DType::U8: return fill_bits<uint8_t>(y.data, n, static_cast<uint8_t>(value));
    case DType::BF16: return fill_bits<uint16_t>(y.data, n, bf16_bits(float(value)));
    case DType::F16: return fill_bits<uint16_t>(y.data, n, fp16_bits(float(value)));
  }
}

void copy(View x, View y) {
  check(x.dtype == y.dtype, "copy", "dtype mismatch");
  check_numel(y, x.numel(), "copy", "y");
  if (x.data != y.data && x.nbytes())
    FY_CUDA_CHECK(cudaMemcpyAsync(y.data, x.data, x.nbytes(), cudaMemcpyDeviceToDevice, current_stream()));
}

void dropout(View x, View y, View mask, double ratio, uint64_t seed) {
  const int64_t n = x.numel();
  check_numel(y, n, "dropout", "y");
  check_numel(mask, n, "dropout", "mask");
  check_dtype(mask, DType::U8, "dropout", "mask");
  check(x.dtype == y.dtype, "dropout", "dtype mismatch");
  check(ratio >= 0 && ratio <= 1, "dropout", "ratio " + std::to_string(ratio) + " outside [0, 1]");
  if (ratio == 0) {
    copy(x, y);
    if (n) FY_CUDA_CHECK(cudaMemsetAsync(mask.data, 1, size_t(n), current_stream()));
    return;
  }
  if (x.dtype != DType::F32) only_f32("dropout", x.dtype);
  if (n == 0) return;
  const float scale = ratio >= 1 ? 0.0f : float(1.0 / (1.0 - ratio));
  // ratio in (0, 1]: thr in [1, 2^53]; 2^53 keeps nothing, as u < 1 always.
  const uint64_t thr = uint64_t(std::ceil(ratio * 0x1.0p53));
  const uint64_t key = splitmix64(seed);
  const float* px = static_cast<const float*>(x.data);
  float* py = static_cast<float*>(y.data);
  uint8_t* pm = static_cast<uint8_t*>(mask.data);
  const bool vec = n % 4 == 0 && aligned16(px) && aligned16(py) && (reinterpret_cast<uintptr_t>(pm) & 3) == 0;
  k_dropout<<<grid_for(vec ? n / 4 : n, kThreads), kThreads, 0, current_stream()>>>(px, py, pm, n, key, thr, scale,
                                                                                    vec);
  FY_CUDA_LAUNCHED("k_dropout");
}

void dropout_grad(View dy, View mask, View dx, double ratio) {
  const int64_t n = dy.numel();
  check_numel(mask, n, "dropout_grad", "mask");
  check_numel(dx, n, "dropout_grad", "dx");
  check_dtype(mask, DType::U8, "dropout_grad", "mask");
  check(dy.dtype == dx.dtype, "dropout_grad", "dtype mismatch");
  if (dy.dtype != DType::F32) only_f32("dropout_grad", dy.dtype);
  if (n == 0) return;
  const float scale = ratio >= 1 ? 0.0f : float(1.0 / (1.0 - ratio));
  const float* pdy = static_cast<const float*>(dy.data);
  const uint8_t* pm = static_cast<const uint8_t*>(mask.data);
  float* pdx = static_cast<float*>(dx.data);
  const bool vec = n % 4 == 0 && aligned16(pdy) && aligned16(pdx) && (reinterpret_cast<uintptr_t>(pm) & 3) == 0;
  k_dropout_grad<<<grid_for(vec ? n / 4 : n, kThreads), kThreads, 0, current_stream()>>>(pdy, pm, pdx, n, scale, vec);
  FY_CUDA_LAUNCHED("k_dropout_grad");
}

}  // namespace fy::cuda
