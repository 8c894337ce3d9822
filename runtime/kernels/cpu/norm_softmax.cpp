// Normalisation (layer norm, RMS norm), softmax and softmax cross-entropy,
// forward and backward. Row statistics accumulate in double; each row is
// owned by one thread, and column sums (dscale, dbias) are split by column
// blocks, so results do not depend on the thread count.
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/detail.h"
#include "kernels/cpu/kernels.h"

namespace fy::cpu {
using namespace detail;

namespace {

struct Rows {
  int64_t rows, D;
};

Rows norm_rows(const View& x, int64_t axis, const char* op) {
  const int R = x.shape.rank;
  check(R >= 1, op, "input must have rank >= 1");
  const int a = int(norm_axis(axis, R, op));
  return {prod(x.shape, 0, a), prod(x.shape, a, R)};
}

// out[c] = sum_r f(r, c) over rows in order, columns split in blocks.
template <class T, class F> void column_sums(int64_t rows, int64_t D, T* out, F f) {
  constexpr int64_t kBlock = 64;
  const int64_t nblocks = (D + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (nblocks > 1 && rows * D >= kParallelMin)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * kBlock, c1 = c0 + kBlock < D ? c0 + kBlock : D;
    double acc[kBlock] = {};
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = c0; c < c1; ++c) acc[c - c0] += f(r, c);
    for (int64_t c = c0; c < c1; ++c) out[c] = T(acc[c - c0]);
  }
}

template <class F> void parallel_rows(int64_t rows, int64_t D, F&& f) {
#pragma omp parallel for schedule(static) if (rows > 1 && rows * D >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) f(r);
}

}  // namespace

void layer_norm(View x, View scale, View bias, View y, View mean, View inv_std, int64_t axis, double eps) {
  const char* op = "layer_norm";
  const Rows g = norm_rows(x, axis, op);
  check_shape(y, x.shape, op, "y");
  if (scale.data) check_numel(scale, g.D, op, "scale");
  if (bias.data) check_numel(bias, g.D, op, "bias");
  check_numel(mean, g.rows, op, "mean");
  check_numel(inv_std, g.rows, op, "inv_std");
  dispatch_float(x.dtype, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.as<T>();
    const T* ps = scale.data ? scale.as<T>() : nullptr;
    const T* pb = bias.data ? bias.as<T>() : nullptr;
    T* py = y.as<T>();
    T* pm = mean.as<T>();
    T* pr = inv_std.as<T>();
    const int64_t D = g.D;
    parallel_rows(g.rows, D, [&](int64_t r) {
      const T* xr = px + r * D;
      T* yr = py + r * D;
      double s = 0;
      for (int64_t i = 0; i < D; ++i) s += double(xr[i]);
      const double mu = s / double(D);
      double v = 0;
      for (int64_t i = 0; i < D; ++i) {
        const double d = double(xr[i]) - mu;
        v += d * d;
      }
      const double rstd = 1.0 / std::sqrt(v / double(D) + eps);
      for (int64_t i = 0; i < D; ++i) {
        T xh = T((double(xr[i]) - mu) * rstd);
        if (ps) xh *= ps[i];
        if (pb) xh += pb[i];
        yr[i] = xh;
      }
      pm[r] = T(mu);
      pr[r] = T(rstd);
    });
  });
}

namespace {

// dx's element: the gradient rounded to T, then plus the addend's (a T add,
// as binary's), when there is one.
template <class T> T plus(T v, const T* addend, int64_t i) { return addend ? T(v + addend[i]) : v; }

void layer_norm_grad_impl(View dy, View x, View scale, View mean, View inv_std, View addend, View dx, View dscale,
                          View dbias, int64_t axis, const char* op) {
  const Rows g = norm_rows(x, axis, op);
  check_shape(dy, x.shape, op, "dy");
  check_shape(dx, x.shape, op, "dx");
  if (addend.data) check_shape(addend, x.shape, op, "addend");
  if (scale.data) check_numel(scale, g.D, op, "scale");
  if (dscale.data) check_numel(dscale, g.D, op, "dscale");
  if (dbias.data) check_numel(dbias, g.D, op, "dbias");
  check_numel(mean, g.rows, op, "mean");
  check_numel(inv_std, g.rows, op, "inv_std");
  dispatch_float(x.dtype, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pdy = dy.as<T>();
    const T* px = x.as<T>();
    const T* ps = scale.data ? scale.as<T>() : nullptr;
    const T* pm = mean.as<T>();
    const T* pr = inv_std.as<T>();
    const T* pa = addend.data ? addend.as<T>() : nullptr;
    T* pdx = dx.as<T>();
    const int64_t D = g.D;
    parallel_rows(g.rows, D, [&](int64_t r) {
      const T* xr = px + r * D;
      const T* dyr = pdy + r * D;
      const double mu = pm[r], rs = pr[r];
      double sg = 0, sgx = 0;
      for (int64_t i = 0; i < D; ++i) {
        const double gi = double(dyr[i]) * (ps ? double(ps[i]) : 1.0);
        sg += gi;
        sgx += gi * (double(xr[i]) - mu) * rs;
      }
      sg /= double(D);
      sgx /= double(D);
      T* dxr = pdx + r * D;
      for (int64_t i = 0; i < D; ++i) {
        const double gi = double(dyr[i]) * (ps ? double(ps[i]) : 1.0);
        const double xh = (double(xr[i]) - mu) * rs;
        dxr[i] = plus(T(rs * (gi - sg - xh * sgx)), pa, r * D + i);
      }
    });
    if (dscale.data)
      column_sums(g.rows, D, dscale.as<T>(), [&](int64_t r, int64_t c) {
        return double(pdy[r * D + c]) * (double(px[r * D + c]) - double(pm[r])) * double(pr[r]);
      });
    if (dbias.data) column_sums(g.rows, D, dbias.as<T>(), [&](int64_t r, int64_t c) { return double(pdy[r * D + c]); });
  });
}

void rms_norm_grad_impl(View dy, View x, View scale, View inv_rms, View addend, View dx, View dscale, int64_t axis,
                        const char* op) {
  const Rows g = norm_rows(x, axis, op);
  check_shape(dy, x.shape, op, "dy");
  check_shape(dx, x.shape, op, "dx");
  if (addend.data) check_shape(addend, x.shape, op, "addend");
  if (scale.data) check_numel(scale, g.D, op, "scale");
  if (dscale.data) check_numel(dscale, g.D, op, "dscale");
  check_numel(inv_rms, g.rows, op, "inv_rms");
  dispatch_float(x.dtype, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pdy = dy.as<T>();
    const T* px = x.as<T>();
    const T* ps = scale.data ? scale.as<T>() : nullptr;
    const T* pr = inv_rms.as<T>();
    const T* pa = addend.data ? addend.as<T>() : nullptr;
    T* pdx = dx.as<T>();
    const int64_t D = g.D;
    parallel_rows(g.rows, D, [&](int64_t r) {
      const T* xr = px + r * D;
      const T* dyr = pdy + r * D;
      const double rr = pr[r];
      double sgx = 0;
      for (int64_t i = 0; i < D; ++i)
        sgx += double(dyr[i]) * (ps ? double(ps[i]) : 1.0) * double(xr[i]) * rr;
      sgx /= double(D);
      T* dxr = pdx + r * D;
      for (int64_t i = 0; i < D; ++i) {
        const double gi = double(dyr[i]) * (ps ? double(ps[i]) : 1.0);
        dxr[i] = plus(T(rr * (gi - double(xr[i]) * rr * sgx)), pa, r * D + i);
      }
    });
    if (dscale.data)
      column_sums(g.rows, D, dscale.as<T>(), [&](int64_t r, int64_t c) {
        return double(pdy[r * D + c]) * double(px[r * D + c]) * double(pr[r]);
      });
  });
}

}  // namespace

void layer_norm_grad(View dy, View x, View scale, View mean, View inv_std, View dx, View dscale, View dbias,
                     int64_t axis) {
  layer_norm_grad_impl(dy, x, scale, mean, inv_std, View{}, dx, dscale, dbias, axis, "layer_norm_grad");
}
void layer_norm_grad_add(View dy, View x, View scale, View mean, View inv_std, View addend, View dx, View dscale,
                         View dbias, int64_t axis) {
  check(addend.data != nullptr, "layer_norm_grad_add", "addend is null");
  layer_norm_grad_impl(dy, x, scale, mean, inv_std, addend, dx, dscale, dbias, axis, "layer_norm_grad_add");
}
void rms_norm_grad(View dy, View x, View scale, View inv_rms, View dx, View dscale, int64_t axis) {
  rms_norm_grad_impl(dy, x, scale, inv_rms, View{}, dx, dscale, axis, "rms_norm_grad");
}
void rms_norm_grad_add(View dy, View x, View scale, View inv_rms, View addend, View dx, View dscale, int64_t axis) {
  check(addend.data != nullptr, "rms_norm_grad_add", "addend is null");
  rms_norm_grad_impl(dy, x, scale, inv_rms, addend, dx, dscale, axis, "rms_norm_grad_add");
}

void rms_norm(View x, View scale, View y, View inv_rms, int64_t axis, double eps) {
  const char* op = "rms_norm";
  const Rows g = norm_rows(x, axis, op);
  check_shape(y, x.shape, op, "y");
  if (scale.data) check_numel(scale, g.D, op, "scale");
  check_numel(inv_rms, g.rows, op, "inv_rms");
  dispatch_float(x.dtype, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.as<T>();
    const T* ps = scale.data ? scale.as<T>() : nullptr;
    T* py = y.as<T>();
    T* pr = inv_rms.as<T>();
    const int64_t D = g.D;
    parallel_rows(g.rows, D, [&](int64_t r) {
      const T* xr = px + r * D;
      double ss = 0;
      for (int64_t i = 0; i < D; ++i) ss += double(xr[i]) * double(xr[i]);
      const double rr = 1.0 / std::sqrt(ss / double(D) + eps);
      T* yr = py + r * D;
      for (int64_t i = 0; i < D; ++i) {
        T v = T(double(xr[i]) * rr);
        yr[i] = ps ? v * ps[i] : v;
      }
      pr[r] = T(rr);
    });
  });
}

// ---- softmax ----------------------------------------------------------------

double detail::softmax_from_max(const float* x, float* y, int64_t n, float m) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) {
    y[i] = exp_nonpos(x[i] - m);
    s += double(y[i]);
  }
  const float inv = float(1.0 / s);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] *= inv;
  return s;
}

namespace {
// The reduced axis has A elements at stride `inner`; lanes are (outer, inner)
// pairs. Lane l starts at (l / inner) * A * inner + l % inner.
struct Lanes {
  int64_t outer, A, inner;
  int64_t count() const { return outer * inner; }
  int64_t start(int64_t l) const { return (l / inner) * A * inner + l % inner; }
};
Lanes lanes_of(const Shape& s, int64_t axis, const char* op) {
  const int a = int(norm_axis(axis, s.rank, op));
  check(s.rank >= 1, op, "rank must be >= 1");
  return {prod(s, 0, a), s.d[a], prod(s, a + 1, s.rank)};
}
template <class F> void parallel_lanes(const Lanes& L, F&& f) {
  const int64_t n = L.count();
#pragma omp parallel for schedule(static) if (n > 1 && n * L.A >= kParallelMin)
  for (int64_t l = 0; l < n; ++l) f(l);
}

// Writes log_softmax (log=true) or softmax of one lane whose element i is x(i).
template <class T, class X> void softmax_lane(X x, T* y, int64_t A, int64_t st, bool log) {
  T m = -std::numeric_limits<T>::infinity();
  for (int64_t i = 0; i < A; ++i) m = x(i) > m ? x(i) : m;
  double s = 0;
  for (int64_t i = 0; i < A; ++i) s += std::exp(double(x(i)) - double(m));
  if (log) {
    const double lse = double(m) + std::log(s);
    for (int64_t i = 0; i < A; ++i) y[i * st] = T(double(x(i)) - lse);
  } else {
    const double inv = 1.0 / s;
    for (int64_t i = 0; i < A; ++i) y[i * st] = T(std::exp(double(x(i)) - double(m)) * inv);
  }
}
template <class T> auto strided(const T* p, int64_t st) {
  return [p, st](int64_t i) { return p[i * st]; };
}

// The float lane of n contiguous elements (y may be x), vectorised: exp_vec
// in simd loops, the sum still in double. libm's exp of a double was ~10 ns
// an element, as much as the logits product on the CPU. Returns false,
// writing nothing, for a lane with a NaN or whose max is not finite:
// softmax_lane gives those their NaNs as before (loss scaling looks for them).
bool softmax_lane_vec(const float* x, float* y, int64_t n, bool log) {
  float m = -std::numeric_limits<float>::infinity();
  int nan = 0;
#pragma omp simd reduction(max : m) reduction(| : nan)
  for (int64_t i = 0; i < n; ++i) {
    m = x[i] > m ? x[i] : m;
    nan |= x[i] != x[i];
  }
  if (nan || !(std::abs(m) < std::numeric_limits<float>::infinity())) return false;
  double s = 0;
  if (log) {
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) s += double(exp_nonpos(x[i] - m));
    const double lse = double(m) + std::log(s);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = float(double(x[i]) - lse);
  } else {
    softmax_from_max(x, y, n, m);
  }
  return true;
}

// Softmax (log=true: log-softmax) of lane l: the vectorised float lane when
// the lanes are contiguous, else (or for a lane it declines) softmax_lane.
template <class T> void softmax_lane_any(const T* px, T* py, const Lanes& L, int64_t l, bool log) {
  const int64_t s = L.start(l);
  if constexpr (std::is_same_v<T, float>)
    if (L.inner == 1 && softmax_lane_vec(px + s, py + s, L.A, log)) return;
  softmax_lane(strided(px + s, L.inner), py + s, L.A, L.inner, log);
}
}  // namespace

void softmax(View x, View y, int64_t axis) {
  check_shape(y, x.shape, "softmax", "y");
  const Lanes L = lanes_of(x.shape, axis, "softmax");
  dispatch_float(x.dtype, "softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.as<T>();
    T* py = y.as<T>();
    parallel_lanes(L, [&](int64_t l) { softmax_lane_any(px, py, L, l, false); });
  });
}

void masked_softmax(View x, View mask, View y, float scale) {
  const char* op = "masked_softmax";
  check_shape(y, x.shape, op, "y");
  check_dtype(mask, DType::U8, op, "mask");
  check(x.shape.rank >= 1, op, "rank must be >= 1");
  const Lanes L = lanes_of(x.shape, -1, op);
  const int64_t R = L.A > 0 ? mask.numel() / L.A : 0;
  check(mask.shape.rank >= 1 && mask.shape[mask.shape.rank - 1] == L.A && R * L.A == mask.numel() &&
            (R == 1 || (x.shape.rank >= 2 && R == x.shape[x.shape.rank - 2])),
        op, "mask " + mask.shape.str() + " does not mask the rows of " + x.shape.str());
  const uint8_t* pm = mask.as<uint8_t>();
  dispatch_float(x.dtype, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.as<T>();
    T* py = y.as<T>();
    const T sc = T(scale), ninf = -std::numeric_limits<T>::infinity();
    parallel_lanes(L, [&](int64_t l) {
      const T* xr = px + l * L.A;
      const uint8_t* mr = pm + (l % R) * L.A;
      // x * scale rounded to T first, as the mul kernel it replaces.
      auto masked = [&](int64_t i) { return mr[i] ? ninf : T(xr[i] * sc); };
      T* yr = py + l * L.A;
      if constexpr (std::is_same_v<T, float>) {
        const float s = sc, masked_out = ninf;  // locals: stores to yr cannot change them
#pragma omp simd
        for (int64_t i = 0; i < L.A; ++i) {
          const float v = xr[i] * s;
          yr[i] = mr[i] ? masked_out : v;
        }
        if (softmax_lane_vec(yr, yr, L.A, false)) return;
      }
      softmax_lane(masked, yr, L.A, 1, false);
    });
  });
}

void softmax_grad(View y, View dy, View dx, int64_t axis, float scale) {
  check_shape(dy, y.shape, "softmax_grad", "dy");
  check_shape(dx, y.shape, "softmax_grad", "dx");
  const Lanes L = lanes_of(y.shape, axis, "softmax_grad");
  dispatch_float(y.dtype, "softmax_grad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* py = y.as<T>();
    const T* pdy = dy.as<T>();
    T* pdx = dx.as<T>();
    const T sc = T(scale);
    const int64_t st = L.inner;
    parallel_lanes(L, [&](int64_t l) {
      const int64_t s = L.start(l);
      double dot = 0;
      for (int64_t i = 0; i < L.A; ++i) dot += double(py[s + i * st]) * double(pdy[s + i * st]);
      for (int64_t i = 0; i < L.A; ++i) {
        const T g = T(double(py[s + i * st]) * (double(pdy[s + i * st]) - dot));
        pdx[s + i * st] = scale == 1.f ? g : T(g * sc);  // rounded twice, as softmax_grad then mul
      }
    });
  });
}

namespace {
// Checks shapes and labels; returns the lanes over the class dim.
Lanes check_sce(const char* op, const View& logits, const View& labels, const View& lp) {
  check(logits.shape.rank >= 2, op, "logits need rank >= 2 ([N,C,...]), got " + logits.shape.str());
  check_dtype(labels, DType::I64, op, "labels");
  check_shape(lp, logits.shape, op, "log_prob");
  Shape ls;
  ls.rank = logits.shape.rank - 1;
  ls.d[0] = logits.shape[0];
  for (int i = 2; i < logits.shape.rank; ++i) ls.d[i - 1] = logits.shape[i];
  check_shape(labels, ls, op, "labels");
  return lanes_of(logits.shape, 1, op);
}
void check_labels(const char* op, const View& labels, int64_t C, int64_t ignore_index) {
  const int64_t* pl = labels.as<int64_t>();
  for (int64_t i = 0, n = labels.numel(); i < n; ++i)
    if (pl[i] != ignore_index && (pl[i] < 0 || pl[i] >= C))
      fail(std::string("fy::cpu::") + op + ": label " + std::to_string(pl[i]) + " at position " + std::to_string(i) +
           " is out of range for " + std::to_string(C) + " classes");
}
}  // namespace

void softmax_cross_entropy(View logits, View labels, View loss, View log_prob, int64_t ignore_index, bool mean) {
  const char* op = "softmax_cross_entropy";
  const Lanes L = check_sce(op, logits, labels, log_prob);
  check_numel(loss, 1, op, "loss");
  check_labels(op, labels, L.A, ignore_index);
  dispatch_float(logits.dtype, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = logits.as<T>();
    T* plp = log_prob.as<T>();
    const int64_t* pl = labels.as<int64_t>();
    parallel_lanes(L, [&](int64_t l) { softmax_lane_any(px, plp, L, l, true); });
    // Serial, in label order: the loss is one number and must not depend on
    // the thread count.
    double sum = 0;
    int64_t count = 0;
    for (int64_t l = 0; l < L.count(); ++l) {
      if (pl[l] == ignore_index) continue;
      sum -= double(plp[L.start(l) + pl[l] * L.inner]);
      ++count;
    }
    loss.as<T>()[0] = T(mean ? sum / double(count) : sum);  // 0/0 = NaN as PyTorch
  });
}

void softmax_cross_entropy_grad(View dloss, View log_prob, View labels, View dlogits, int64_t ignore_index, bool mean) {
  const char* op = "softmax_cross_entropy_grad";
  const Lanes L = check_sce(op, log_prob, labels, dlogits);
  check_numel(dloss, 1, op, "dloss");
  check_labels(op, labels, L.A, ignore_index);
  dispatch_float(log_prob.dtype, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* plp = log_prob.as<T>();
    const int64_t* pl = labels.as<int64_t>();
    T* pd = dlogits.as<T>();
    int64_t count = 0;
    for (int64_t l = 0; l < L.count(); ++l) count += pl[l] != ignore_index;
    const double g = double(dloss.as<T>()[0]) / (mean ? double(count) : 1.0);
    const int64_t st = L.inner;
    parallel_lanes(L, [&](int64_t l) {
      const int64_t s = L.start(l);
      if (pl[l] == ignore_index) {
        for (int64_t i = 0; i < L.A; ++i) pd[s + i * st] = T(0);
        return;
      }
      if constexpr (std::is_same_v<T, float>)
        if (st == 1) {
          // log-probabilities are <= 0; a NaN goes through libm below.
          const float* lp = plp + s;
          float* d = pd + s;
          int nan = 0;
#pragma omp simd reduction(| : nan)
          for (int64_t i = 0; i < L.A; ++i) {
            d[i] = float(double(exp_nonpos(lp[i])) * g);
            nan |= lp[i] != lp[i];
          }
          if (!nan) {
            d[pl[l]] = float(double(exp_nonpos(lp[pl[l]])) * g - g);
            return;
          }
        }
      for (int64_t i = 0; i < L.A; ++i) pd[s + i * st] = T(std::exp(double(plp[s + i * st])) * g);
      pd[s + pl[l] * st] = T(std::exp(double(plp[s + pl[l] * st])) * g - g);
    });
  });
}

}  // namespace fy::cpu
