// Elementwise kernels: binary/unary ops (+ gradients), broadcasting copies,
// where, cast, fill, copy and dropout.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/half.h"
#include "kernels/cpu/detail.h"
#include "kernels/cpu/kernels.h"

namespace fy::cpu {
namespace detail {

void contiguous_strides(const Shape& s, int64_t* st) {
  int64_t acc = 1;
  for (int i = s.rank - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= s.d[i];
  }
}

void Strided::coalesce() {
  // Pass 1: drop size-1 dims (their strides never matter).
  int r = 0;
  for (int i = 0; i < rank; ++i) {
    if (dims[i] == 1) continue;
    dims[r] = dims[i];
    for (int k = 0; k < nops; ++k) stride[k][r] = stride[k][i];
    ++r;
  }
  if (r == 0) {  // scalar iteration space
    dims[0] = 1;
    for (int k = 0; k < nops; ++k) stride[k][0] = 0;
    rank = 1;
    return;
  }
  rank = r;
  // Pass 2: merge dim i into dim i+1 when every operand steps through them
  // as one contiguous run.
  int out = rank - 1;
  for (int i = rank - 2; i >= 0; --i) {
    bool merge = true;
    for (int k = 0; k < nops; ++k)
      if (stride[k][i] != stride[k][out] * dims[out]) merge = false;
    if (merge) {
      dims[out] *= dims[i];
    } else {
      --out;
      dims[out] = dims[i];
      for (int k = 0; k < nops; ++k) stride[k][out] = stride[k][i];
    }
  }
  // Shift the merged dims to start at 0.
  int nr = rank - out;
  for (int i = 0; i < nr; ++i) {
    dims[i] = dims[i + out];
    for (int k = 0; k < nops; ++k) stride[k][i] = stride[k][i + out];
  }
  rank = nr;
}

Shape broadcast_shape(const Shape& a, const Shape& b, const char* op) {
  Shape s;
  s.rank = a.rank > b.rank ? a.rank : b.rank;
  for (int i = 0; i < s.rank; ++i) {
    int ia = i - (s.rank - a.rank), ib = i - (s.rank - b.rank);
    int64_t da = ia >= 0 ? a.d[ia] : 1, db = ib >= 0 ? b.d[ib] : 1;
    check(da == db || da == 1 || db == 1, op, "shapes " + a.str() + " and " + b.str() + " do not broadcast");
    s.d[i] = da == 1 ? db : da;
  }
  return s;
}

Strided broadcast_iter(const Shape& out, std::initializer_list<Shape> ins, const char* op) {
  Strided it;
  it.rank = out.rank;
  it.nops = 1 + int(ins.size());
  for (int i = 0; i < out.rank; ++i) it.dims[i] = out.d[i];
  contiguous_strides(out, it.stride[0]);
  int k = 1;
  for (const Shape& s : ins) {
    check(s.rank <= out.rank, op, "input shape " + s.str() + " has higher rank than output " + out.str());
    int64_t st[Shape::kMaxRank];
    contiguous_strides(s, st);
    for (int i = 0; i < out.rank; ++i) {
      int j = i - (out.rank - s.rank);
      if (j < 0 || s.d[j] == 1) {
        it.stride[k][i] = 0;
      } else {
        check(s.d[j] == out.d[i], op, "input shape " + s.str() + " does not broadcast to " + out.str());
        it.stride[k][i] = st[j];
      }
    }
    ++k;
  }
  it.coalesce();
  return it;
}

}  // namespace detail

using namespace detail;

namespace {

template <class T, class F>
void binary_loop(const Strided& it, const T* a, const T* b, T* o, F f) {
  const int64_t sa = it.stride[1][it.rank - 1], sb = it.stride[2][it.rank - 1];
  for_rows(it, [&](const int64_t* off, int64_t n) {
    T* po = o + off[0];
    const T* pa = a + off[1];
    const T* pb = b + off[2];
    if (sa == 1 && sb == 1) {
      for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], pb[i]);
    } else if (sa == 1 && sb == 0) {
      const T vb = pb[0];
      for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], vb);
    } else if (sa == 0 && sb == 1) {
      const T va = pa[0];
      for (int64_t i = 0; i < n; ++i) po[i] = f(va, pb[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i * sa], pb[i * sb]);
    }
  });
}

template <class T> void binary_typed(BinOp op, const Strided& it, const T* a, const T* b, T* o) {
  switch (op) {
    case BinOp::Add: binary_loop(it, a, b, o, [](T x, T y) { return x + y; }); return;
    case BinOp::Sub: binary_loop(it, a, b, o, [](T x, T y) { return x - y; }); return;
    case BinOp::Mul: binary_loop(it, a, b, o, [](T x, T y) { return x * y; }); return;
    case BinOp::Div:
      if constexpr (std::is_integral_v<T>) {
        binary_loop(it, a, b, o, [](T x, T y) { return x / y; });
      } else {
        binary_loop(it, a, b, o, [](T x, T y) { return x / y; });
      }
      return;
    case BinOp::Pow:
      if constexpr (std::is_integral_v<T>) {
        fail("fy::cpu::binary: Pow is not supported for I64");
      } else {
        // Squares are common (variance, l2); keep them exact and fast.
        binary_loop(it, a, b, o, [](T x, T y) { return y == T(2) ? x * x : std::pow(x, y); });
      }
      return;
  }
}

}  // namespace

void binary(BinOp op, View a, View b, View out) {
  check(a.dtype == b.dtype && a.dtype == out.dtype, "binary", "dtype mismatch");
  check_shape(out, broadcast_shape(a.shape, b.shape, "binary"), "binary", "out");
  Strided it = broadcast_iter(out.shape, {a.shape, b.shape}, "binary");
  switch (a.dtype) {
    case DType::F32: binary_typed(op, it, a.as<float>(), b.as<float>(), out.as<float>()); return;
    case DType::F64: binary_typed(op, it, a.as<double>(), b.as<double>(), out.as<double>()); return;
    case DType::I64: {
      // Integer division by zero would trap (and exceptions cannot leave an
      // OpenMP region): check serially first.
      if (op == BinOp::Div)
        for (int64_t i = 0, n = b.numel(); i < n; ++i)
          check(b.as<int64_t>()[i] != 0, "binary", "integer division by zero");
      binary_typed(op, it, a.as<int64_t>(), b.as<int64_t>(), out.as<int64_t>());
      return;
    }
    default: fail(std::string("fy::cpu::binary: unsupported dtype ") + dtype_name(a.dtype));
  }
}

void equal(View a, View b, View out) {
  check(a.dtype == b.dtype, "equal", "dtype mismatch");
  check_dtype(out, DType::U8, "equal", "out");
  check_shape(out, broadcast_shape(a.shape, b.shape, "equal"), "equal", "out");
  Strided it = broadcast_iter(out.shape, {a.shape, b.shape}, "equal");
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pa = static_cast<const T*>(a.data);
    const T* pb = static_cast<const T*>(b.data);
    uint8_t* po = static_cast<uint8_t*>(out.data);
    const int64_t sa = it.stride[1][it.rank - 1], sb = it.stride[2][it.rank - 1];
    for_rows(it, [&](const int64_t* off, int64_t n) {
      for (int64_t i = 0; i < n; ++i) po[off[0] + i] = pa[off[1] + i * sa] == pb[off[2] + i * sb];
    });
  };
  switch (a.dtype) {
    case DType::F32: run(Tag<float>{}); return;
    case DType::F64: run(Tag<double>{}); return;
    case DType::I64: run(Tag<int64_t>{}); return;
    case DType::U8: run(Tag<uint8_t>{}); return;
    default: fail(std::string("fy::cpu::equal: unsupported dtype ") + dtype_name(a.dtype));
  }
}

// ---- unary -----------------------------------------------------------------

namespace {

template <class T> struct Consts {
  static constexpr T kSqrt1_2 = T(0.70710678118654752440);     // 1/sqrt(2)
  static constexpr T kInvSqrt2Pi = T(0.39894228040143267794);  // 1/sqrt(2*pi)
  static constexpr T k2InvSqrtPi = T(1.12837916709551257390);  // 2/sqrt(pi)
  static constexpr T kSqrt2OverPi = T(0.79788456080286535588); // sqrt(2/pi)
  static constexpr T kGeluC = T(0.044715);
};

template <class T> T sigmoid(T x) { return T(1) / (T(1) + std::exp(-x)); }

template <class T> T unary_fwd(UnOp op, T x) {
  using C = Consts<T>;
  switch (op) {
    case UnOp::Neg: return -x;
    case UnOp::Sqrt: return std::sqrt(x);
    case UnOp::Reciprocal: return T(1) / x;
    case UnOp::Exp: return std::exp(x);
    case UnOp::Tanh: return std::tanh(x);
    case UnOp::Erf: return std::erf(x);
    case UnOp::Sigmoid: return sigmoid(x);
    case UnOp::Gelu: return T(0.5) * x * (T(1) + std::erf(x * C::kSqrt1_2));
    case UnOp::GeluTanh: return T(0.5) * x * (T(1) + std::tanh(C::kSqrt2OverPi * (x + C::kGeluC * x * x * x)));
    case UnOp::Silu: return x * sigmoid(x);
    case UnOp::Identity: return x;
  }
  return x;
}

// f'(x) times dy; y = f(x).
template <class T> T unary_bwd(UnOp op, T x, T y, T dy) {
  using C = Consts<T>;
  switch (op) {
    case UnOp::Neg: return -dy;
    case UnOp::Sqrt: return dy * T(0.5) / y;
    case UnOp::Reciprocal: return -dy * y * y;
    case UnOp::Exp: return dy * y;
    case UnOp::Tanh: return dy * (T(1) - y * y);
    case UnOp::Erf: return dy * C::k2InvSqrtPi * std::exp(-x * x);
    case UnOp::Sigmoid: return dy * y * (T(1) - y);
    case UnOp::Gelu: {
      T cdf = T(0.5) * (T(1) + std::erf(x * C::kSqrt1_2));
      T pdf = C::kInvSqrt2Pi * std::exp(T(-0.5) * x * x);
      return dy * (cdf + x * pdf);
    }
    case UnOp::GeluTanh: {
      T x2 = x * x;
      T t = std::tanh(C::kSqrt2OverPi * (x + C::kGeluC * x2 * x));
      T dinner = C::kSqrt2OverPi * (T(1) + T(3) * C::kGeluC * x2);
      return dy * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * dinner);
    }
    case UnOp::Silu: {
      T s = sigmoid(x);
      return dy * s * (T(1) + x * (T(1) - s));
    }
    case UnOp::Identity: return dy;
  }
  return dy;
}

template <class F> void parallel_n(int64_t n, F&& f) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) f(i);
}

// 1 / (1 + e^-z): tanh-GELU is x * sigmoid(2u), as 0.5 (1 + tanh u) = sigmoid(2u).
inline float sigmoid_vec(float z) { return 1.f / (1.f + exp_vec(-z)); }

inline float gelu_tanh_inner(float x) {
  using C = Consts<float>;
  return C::kSqrt2OverPi * (x + C::kGeluC * x * x * x);
}

// tanh-GELU and its derivative, d/dx x s(2u) = s + x * 2 s (1 - s) u'.
inline float gelu_tanh_vec(float v) { return v * sigmoid_vec(2.f * gelu_tanh_inner(v)); }
inline float gelu_tanh_grad_vec(float v) {
  using C = Consts<float>;
  const float s = sigmoid_vec(2.f * gelu_tanh_inner(v));
  return s + 2.f * v * s * (1.f - s) * (C::kSqrt2OverPi * (1.f + 3.f * C::kGeluC * v * v));
}

// SiLU and its derivative.
inline float silu_vec(float v) { return v * sigmoid_vec(v); }
inline float silu_grad_vec(float v) {
  const float s = sigmoid_vec(v);
  return s * (1.f + v * (1.f - s));
}

// y[i] = f(x[i]) (or f(x[i], y[i]) for two inputs), vectorised: f is a
// lambda over one of the call-free functions above, so each op gets its own
// simd loop (a function pointer stays a call, and the loop scalar: tanh-GELU
// ran at 3.4e8 elements/s against its fused bias form's 9.6e8).
template <class F> void map_vec(const float* x, float* y, int64_t n, F f) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
}
template <class F> void map2_vec(const float* x, const float* dy, float* dx, int64_t n, F f) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * f(x[i]);
}

// Float tanh-GELU, sigmoid and SiLU over whole buffers; false for any other
// op (the generic loop runs).
bool unary_vec(UnOp op, const float* x, float* y, int64_t n) {
  switch (op) {
    case UnOp::GeluTanh: map_vec(x, y, n, [](float v) { return gelu_tanh_vec(v); }); return true;
    case UnOp::Silu: map_vec(x, y, n, [](float v) { return silu_vec(v); }); return true;
    case UnOp::Sigmoid: map_vec(x, y, n, [](float v) { return sigmoid_vec(v); }); return true;
    default: return false;
  }
}

// Their gradients from x.
bool unary_grad_vec(UnOp op, const float* x, const float* dy, float* dx, int64_t n) {
  if (!x) return false;
  switch (op) {
    case UnOp::GeluTanh: map2_vec(x, dy, dx, n, [](float v) { return gelu_tanh_grad_vec(v); }); return true;
    case UnOp::Silu: map2_vec(x, dy, dx, n, [](float v) { return silu_grad_vec(v); }); return true;
    case UnOp::Sigmoid:
      map2_vec(x, dy, dx, n, [](float v) {
        const float s = sigmoid_vec(v);
        return s * (1.f - s);
      });
      return true;
    default: return false;
  }
}

}  // namespace

void unary(UnOp op, View x, View y) {
  check_numel(y, x.numel(), "unary", "y");
  check(x.dtype == y.dtype, "unary", "dtype mismatch");
  if (op == UnOp::Identity) return copy(x, y);
  dispatch_float(x.dtype, "unary", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.as<T>();
    T* py = y.as<T>();
    if constexpr (std::is_same_v<T, float>)
      if (unary_vec(op, px, py, x.numel())) return;
    parallel_n(x.numel(), [&](int64_t i) { py[i] = unary_fwd(op, px[i]); });
  });
}

void unary_grad(UnOp op, View x, View y, View dy, View dx) {
  const int64_t n = x.numel();
  check_numel(dy, n, "unary_grad", "dy");
  check_numel(dx, n, "unary_grad", "dx");
  check(x.dtype == dy.dtype && x.dtype == dx.dtype, "unary_grad", "dtype mismatch");
  if (y.data) check_numel(y, n, "unary_grad", "y");
  dispatch_float(x.dtype, "unary_grad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data ? x.as<T>() : nullptr;
    const T* py = y.data ? y.as<T>() : nullptr;
    const T* pdy = dy.as<T>();
    T* pdx = dx.as<T>();
    check(px || py, "unary_grad", "needs x or y");
    if constexpr (std::is_same_v<T, float>)
      if (unary_grad_vec(op, px, pdy, pdx, n)) return;
    parallel_n(n, [&](int64_t i) {
      T xi = px ? px[i] : T(0);
      T yi = py ? py[i] : unary_fwd(op, xi);
      pdx[i] = unary_bwd(op, xi, yi, pdy[i]);
    });
  });
}

namespace {

// b's length, after checking it runs along x's last dim.
int64_t bias_len(const char* who, View x, View b) {
  check_dtype(x, DType::F32, who, "x");
  check_dtype(b, DType::F32, who, "b");
  const int64_t n = b.numel();
  check(b.shape.rank == 1 && x.shape.rank >= 1 && x.shape[x.shape.rank - 1] == n, who,
        "b must be 1-D with x's last dim, got " + b.shape.str() + " for " + x.shape.str());
  return n;
}

// f(i, x[i] + b[i % n]) for every element, row by row. The sum is a float,
// as add's output is, and f is the unfused kernel's element function, so the
// bits are add's then unary's.
template <class F> void for_bias_sums(View x, const float* b, int64_t n, F f) {
  const float* px = x.as<float>();
  const int64_t rows = n > 0 ? x.numel() / n : 0;
#pragma omp parallel for schedule(static) if (x.numel() >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) f(r * n + j, px[r * n + j] + b[j]);
  }
}

}  // namespace

void bias_unary(UnOp op, View x, View b, View y) {
  const int64_t n = bias_len("bias_unary", x, b);
  check_numel(y, x.numel(), "bias_unary", "y");
  check_dtype(y, DType::F32, "bias_unary", "y");
  float* py = y.as<float>();
  if (op == UnOp::GeluTanh)  // unary_vec's function
    for_bias_sums(x, b.as<float>(), n, [py](int64_t i, float t) { py[i] = gelu_tanh_vec(t); });
  else
    for_bias_sums(x, b.as<float>(), n, [py, op](int64_t i, float t) { py[i] = unary_fwd(op, t); });
}

void bias_unary_grad(UnOp op, View x, View b, View y, View dy, View dx) {
  const int64_t n = bias_len("bias_unary_grad", x, b), total = x.numel();
  check_numel(y, total, "bias_unary_grad", "y");
  check_numel(dy, total, "bias_unary_grad", "dy");
  check_numel(dx, total, "bias_unary_grad", "dx");
  check(y.dtype == DType::F32 && dy.dtype == DType::F32 && dx.dtype == DType::F32, "bias_unary_grad",
        "y, dy and dx must be F32");
  const float* py = y.as<float>();
  const float* pdy = dy.as<float>();
  float* pdx = dx.as<float>();
  if (op == UnOp::GeluTanh)  // unary_grad_vec's function
    for_bias_sums(x, b.as<float>(), n, [=](int64_t i, float t) { pdx[i] = pdy[i] * gelu_tanh_grad_vec(t); });
  else
    for_bias_sums(x, b.as<float>(), n, [=](int64_t i, float t) { pdx[i] = unary_bwd(op, t, py[i], pdy[i]); });
}

// swiglu's products round as the unfused kernels' do: silu_vec is
// unary_vec's SiLU and silu_grad_vec unary_grad_vec's factor.
void swiglu(View gate, View up, View y) {
  check_same_f32("swiglu", {gate, up, y});
  const float* g = gate.as<float>();
  const float* u = up.as<float>();
  float* py = y.as<float>();
  const int64_t n = gate.numel();
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) py[i] = silu_vec(g[i]) * u[i];
}

void swiglu_grad(View gate, View up, View dy, View dgate, View dup) {
  check_same_f32("swiglu_grad", {gate, up, dy, dgate, dup});
  const float* g = gate.as<float>();
  const float* u = up.as<float>();
  const float* d = dy.as<float>();
  float* dg = dgate.as<float>();
  float* du = dup.as<float>();
  const int64_t n = gate.numel();
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float ds = d[i] * u[i];
    du[i] = d[i] * silu_vec(g[i]);
    dg[i] = ds * silu_grad_vec(g[i]);
  }
}

namespace {
// The halves of packed rows, apart.
void split_rows(const float* x, int64_t rows, int64_t F, float* g, float* u) {
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(g + r * F, x + r * 2 * F, size_t(F) * sizeof(float));
    std::memcpy(u + r * F, x + r * 2 * F + F, size_t(F) * sizeof(float));
  }
}
}  // namespace

void swiglu_packed(View x, View y) {
  check_dtype(x, DType::F32, "swiglu_packed", "x");
  check_dtype(y, DType::F32, "swiglu_packed", "y");
  const int64_t F = swiglu_packed_half("swiglu_packed", x, y), rows = F > 0 ? y.numel() / F : 0;
  std::vector<float> g(size_t(y.numel())), u(g.size());
  split_rows(x.as<float>(), rows, F, g.data(), u.data());
  swiglu(View{g.data(), y.shape, DType::F32}, View{u.data(), y.shape, DType::F32}, y);
}

void swiglu_packed_grad(View x, View dy, View dx) {
  check_same_f32("swiglu_packed_grad", {x, dx});
  check_dtype(dy, DType::F32, "swiglu_packed_grad", "dy");
  const int64_t F = swiglu_packed_half("swiglu_packed_grad", x, dy), rows = F > 0 ? dy.numel() / F : 0;
  const size_t n = size_t(dy.numel());
  std::vector<float> g(n), u(n), dg(n), du(n);
  split_rows(x.as<float>(), rows, F, g.data(), u.data());
  const View gv{g.data(), dy.shape, DType::F32}, uv{u.data(), dy.shape, DType::F32};
  swiglu_grad(gv, uv, dy, View{dg.data(), dy.shape, DType::F32}, View{du.data(), dy.shape, DType::F32});
  float* d = dx.as<float>();
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(d + r * 2 * F, dg.data() + r * F, size_t(F) * sizeof(float));
    std::memcpy(d + r * 2 * F + F, du.data() + r * F, size_t(F) * sizeof(float));
  }
}

void rope(View x, View cos, View sin, View y, int64_t seq_axis, bool transposed) {
  check_same_f32("rope", {x, y});
  check_dtype(cos, DType::F32, "rope", "cos");
  check_dtype(sin, DType::F32, "rope", "sin");
  const detail::RopeGeo g = detail::rope_geo("rope", x, cos, sin, y, seq_axis);
  const float* px = x.as<float>();
  const float* pc = cos.as<float>();
  const float* ps = sin.as<float>();
  float* py = y.as<float>();
  const int64_t h = g.D / 2;
  // Each product rounded to float, then the sum (no FMA: -ffp-contract=off),
  // as the unfused kernels; x may be y.
#pragma omp parallel for schedule(static) if (x.numel() >= kParallelMin)
  for (int64_t row = 0; row < g.rows; ++row) {
    const int64_t t = (row / g.inner) % g.T;
    const float *xr = px + row * g.D, *c = pc + t * g.D, *s = ps + t * g.D;
    float* yr = py + row * g.D;
    for (int64_t d = 0; d < h; ++d) {
      const float a = xr[d], b = xr[d + h];
      if (!transposed) {
        yr[d] = a * c[d] + -b * s[d];
        yr[d + h] = b * c[d + h] + a * s[d + h];
      } else {
        yr[d] = a * c[d] + b * s[d + h];
        yr[d + h] = b * c[d + h] + -a * s[d];
      }
    }
  }
}

// ---- data movement ---------------------------------------------------------

void broadcast_to(View x, View y) {
  check(x.dtype == y.dtype, "broadcast_to", "dtype mismatch");
  Strided it = broadcast_iter(y.shape, {x.shape}, "broadcast_to");
  dispatch_bits(x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = static_cast<const T*>(x.data);
    T* py = static_cast<T*>(y.data);
    const int64_t sx = it.stride[1][it.rank - 1];
    for_rows(it, [&](const int64_t* off, int64_t n) {
      for (int64_t i = 0; i < n; ++i) py[off[0] + i] = px[off[1] + i * sx];
    });
  });
}

void where(View cond, View a, View b, View out) {
  check_dtype(cond, DType::U8, "where", "cond");
  check(a.dtype == b.dtype && a.dtype == out.dtype, "where", "dtype mismatch");
  Shape s = broadcast_shape(broadcast_shape(cond.shape, a.shape, "where"), b.shape, "where");
  check_shape(out, s, "where", "out");
  Strided it = broadcast_iter(out.shape, {cond.shape, a.shape, b.shape}, "where");
  dispatch_bits(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const uint8_t* pc = static_cast<const uint8_t*>(cond.data);
    const T* pa = static_cast<const T*>(a.data);
    const T* pb = static_cast<const T*>(b.data);
    T* po = static_cast<T*>(out.data);
    const int R = it.rank - 1;
    const int64_t sc = it.stride[1][R], sa = it.stride[2][R], sb = it.stride[3][R];
    for_rows(it, [&](const int64_t* off, int64_t n) {
      for (int64_t i = 0; i < n; ++i)
        po[off[0] + i] = pc[off[1] + i * sc] ? pa[off[2] + i * sa] : pb[off[3] + i * sb];
    });
  });
}

namespace {
template <class To, class From> To cast_one(From v) {
  if constexpr (std::is_same_v<To, uint8_t>) return v != From(0) ? 1 : 0;
  else return static_cast<To>(v);
}
template <class From> void cast_from(const From* src, View y, int64_t n) {
  auto run = [&](auto tag) {
    using To = typename decltype(tag)::type;
    To* dst = static_cast<To*>(y.data);
    parallel_n(n, [&](int64_t i) { dst[i] = cast_one<To>(src[i]); });
  };
  switch (y.dtype) {
    case DType::F32: run(Tag<float>{}); return;
    case DType::F64: run(Tag<double>{}); return;
    case DType::I64: run(Tag<int64_t>{}); return;
    case DType::U8: run(Tag<uint8_t>{}); return;
    default: fail(std::string("fy::cpu::cast: unsupported dtype ") + dtype_name(y.dtype));
  }
}

// 16-bit floats are storage (core/half.h): they widen to F32 and narrow
// from it, to nearest even.
void cast16(View x, View y, int64_t n) {
  const bool x16 = x.dtype == DType::BF16 || x.dtype == DType::F16, y16 = y.dtype == DType::BF16 || y.dtype == DType::F16;
  check((x16 && y.dtype == DType::F32) || (y16 && x.dtype == DType::F32) || x.dtype == y.dtype, "cast",
        std::string("a 16-bit float casts to or from F32 only, not ") + dtype_name(x.dtype) + " to " +
            dtype_name(y.dtype));
  auto load = [&](int64_t i) {
    if (!x16) return x.as<float>()[i];
    const uint16_t h = static_cast<const uint16_t*>(x.data)[i];
    return x.dtype == DType::BF16 ? bf16_value(h) : fp16_value(h);
  };
  if (!y16) {
    float* dst = y.as<float>();
    parallel_n(n, [&](int64_t i) { dst[i] = load(i); });
  } else {
    uint16_t* dst = static_cast<uint16_t*>(y.data);
    const bool bf = y.dtype == DType::BF16;
    parallel_n(n, [&](int64_t i) { dst[i] = bf ? bf16_bits(load(i)) : fp16_bits(load(i)); });
  }
}
}  // namespace

void cast(View x, View y) {
  const int64_t n = x.numel();
  check_numel(y, n, "cast", "y");
  if (x.dtype == DType::BF16 || x.dtype == DType::F16 || y.dtype == DType::BF16 || y.dtype == DType::F16)
    return cast16(x, y, n);
  switch (x.dtype) {
    case DType::F32: cast_from(x.as<float>(), y, n); return;
    case DType::F64: cast_from(x.as<double>(), y, n); return;
    case DType::I64: cast_from(x.as<int64_t>(), y, n); return;
    case DType::U8: cast_from(x.as<uint8_t>(), y, n); return;
    default: fail(std::string("fy::cpu::cast: unsupported dtype ") + dtype_name(x.dtype));
  }
}

void fill(View y, double value) {
  const int64_t n = y.numel();
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = static_cast<T*>(y.data);
    const T v = static_cast<T>(value);
    parallel_n(n, [&](int64_t i) { p[i] = v; });
  };
  switch (y.dtype) {
    case DType::F32: run(Tag<float>{}); return;
    case DType::F64: run(Tag<double>{}); return;
    case DType::I64: run(Tag<int64_t>{}); return;
    case DType::U8: run(Tag<uint8_t>{}); return;
    case DType::BF16: case DType::F16: {
      uint16_t* p = static_cast<uint16_t*>(y.data);
      const uint16_t v = y.dtype == DType::BF16 ? bf16_bits(float(value)) : fp16_bits(float(value));
      parallel_n(n, [&](int64_t i) { p[i] = v; });
      return;
    }
  }
}

void copy(View x, View y) {
  check(x.dtype == y.dtype, "copy", "dtype mismatch");
  check_numel(y, x.numel(), "copy", "y");
  if (x.data != y.data && x.nbytes()) std::memcpy(y.data, x.data, x.nbytes());
}

// ---- dropout ---------------------------------------------------------------

namespace {
inline uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace

void dropout(View x, View y, View mask, double ratio, uint64_t seed) {
  const int64_t n = x.numel();
  check_numel(y, n, "dropout", "y");
  check_numel(mask, n, "dropout", "mask");
  check_dtype(mask, DType::U8, "dropout", "mask");
  check(x.dtype == y.dtype, "dropout", "dtype mismatch");
  check(ratio >= 0 && ratio <= 1, "dropout", "ratio " + std::to_string(ratio) + " outside [0, 1]");
  uint8_t* pm = mask.as<uint8_t>();
  if (ratio == 0) {
    copy(x, y);
    std::memset(pm, 1, size_t(n));
    return;
  }
  dispatch_float(x.dtype, "dropout", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.as<T>();
    T* py = y.as<T>();
    const T scale = ratio >= 1 ? T(0) : T(1.0 / (1.0 - ratio));
    // Hash the seed once so nearby seeds give unrelated streams.
    const uint64_t key = splitmix64(seed);
    parallel_n(n, [&](int64_t i) {
      uint64_t h = splitmix64(key ^ splitmix64(uint64_t(i)));
      double u = double(h >> 11) * 0x1.0p-53;  // uniform in [0, 1)
      uint8_t keep = u >= ratio;
      pm[i] = keep;
      py[i] = keep ? px[i] * scale : T(0);
    });
  });
}

void dropout_grad(View dy, View mask, View dx, double ratio) {
  const int64_t n = dy.numel();
  check_numel(mask, n, "dropout_grad", "mask");
  check_numel(dx, n, "dropout_grad", "dx");
  check_dtype(mask, DType::U8, "dropout_grad", "mask");
  check(dy.dtype == dx.dtype, "dropout_grad", "dtype mismatch");
  dispatch_float(dy.dtype, "dropout_grad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pdy = dy.as<T>();
    const uint8_t* pm = mask.as<uint8_t>();
    T* pdx = dx.as<T>();
    const T scale = ratio >= 1 ? T(0) : T(1.0 / (1.0 - ratio));
    parallel_n(n, [&](int64_t i) { pdx[i] = pm[i] ? pdy[i] * scale : T(0); });
  });
}

}  // namespace fy::cpu
