// Normalisation (layer norm, RMS norm), softmax and softmax cross-entropy,
// forward and backward, on F32 device data.
//
// Rows along the contiguous last axis take one of two paths:
//  - D <= 1024: one warp per row, the row held in registers (a lane holds
//    up to 32 floats), warp-shuffle reductions;
//  - D > 1024: one block per row, the row cached in shared memory when it
//    fits (re-read from global memory otherwise), block reductions.
// Both use 16-byte loads when D % 4 == 0 and every pointer is aligned.
// Softmax over another axis runs one thread per (outer, inner) lane.
// Reductions over rows (dscale, dbias, the loss) write per-block partials
// in double and sum them in a second kernel in a fixed order: no atomics,
// so results are deterministic.
#include <climits>
#include <cmath>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <type_traits>
#include <unordered_map>

#include "abi/sizes.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/norm16.h"
#include "kernels/cuda/kernels.h"

namespace fy::cuda {
using namespace detail;

namespace {

constexpr int kWarpRowsPerBlock = 8;  // warp path: 256 threads, a row per warp
constexpr int kWarpMaxD = 1024;       // warp path: at most 32 floats per lane
constexpr int kBlockMaxThreads = 1024;

template <int V> using IC = std::integral_constant<int, V>;

// ---- device helpers ----------------------------------------------------------

struct SumOp {
  template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Butterfly reduction: every lane ends with the same value, in a fixed order.
template <class T, class Op> __device__ __forceinline__ T warp_reduce(T v, Op op) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Every thread gets the result. blockDim.x is a multiple of 32.
template <class T, class Op> __device__ __forceinline__ T block_reduce(T v, Op op, T identity) {
  __shared__ T partial[32];
  v = warp_reduce(v, op);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // a previous call may still be reading `partial`
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < int(blockDim.x >> 5) ? partial[lane] : identity;
  return warp_reduce(v, op);
}
template <class T> __device__ __forceinline__ T block_sum(T v) { return block_reduce(v, SumOp(), T(0)); }
__device__ __forceinline__ float block_max(float v) { return block_reduce(v, MaxOp(), -INFINITY); }

__device__ __forceinline__ float* dyn_smem() {
  extern __shared__ float4 fy_norm_smem[];
  return reinterpret_cast<float*>(fy_norm_smem);
}

// W consecutive floats, moved with one 16-byte access when W == 4.
template <int W> struct Pack {
  float v[W];
};
template <int W> __device__ __forceinline__ Pack<W> ld(const float* p) {
  Pack<W> r;
  if constexpr (W == 4) {
    const float4 t = *reinterpret_cast<const float4*>(p);
    r.v[0] = t.x, r.v[1] = t.y, r.v[2] = t.z, r.v[3] = t.w;
  } else {
    r.v[0] = *p;
  }
  return r;
}
template <int W> __device__ __forceinline__ void st(float* p, const Pack<W>& r) {
  if constexpr (W == 4)
    *reinterpret_cast<float4*>(p) = make_float4(r.v[0], r.v[1], r.v[2], r.v[3]);
  else
    *p = r.v[0];
}

// Warp path: a lane holds NP packs of W floats; pack j starts at column
// (j * 32 + lane) * W, so a warp's loads are contiguous.
template <int W> __device__ __forceinline__ int wcol(int j, int lane) { return (j * 32 + lane) * W; }

template <int NP, int W>
__device__ __forceinline__ void wload(const float* p, int D, int lane, float (&v)[NP * W], float fill) {
#pragma unroll
  for (int j = 0; j < NP; ++j) {
    const int c = wcol<W>(j, lane);
    Pack<W> q;
    if (c < D) {
      q = ld<W>(p + c);
    } else {
#pragma unroll
      for (int k = 0; k < W; ++k) q.v[k] = fill;
    }
#pragma unroll
    for (int k = 0; k < W; ++k) v[j * W + k] = q.v[k];
  }
}

// ---- layer norm / RMS norm forward ----------------------------------------------
// LN: y = (x - mean) * rstd * scale + bias. RMS: y = x * rstd * scale, with
// rstd = 1 / sqrt(mean(x^2) + eps); mean is not written.
// The LN row sum is taken in double and the mean applied as two floats
// (x - hi) - lo: an fp32 mean would lose the digits of (x - mean) when the
// mean is large against the spread. The variance is a second pass over the
// centred values, in fp32.

template <bool RMS, int W>
__device__ __forceinline__ void norm_fwd_out(Pack<W>& o, const Pack<W>& xc, float r, const float* scale,
                                             const float* bias, int c) {
#pragma unroll
  for (int k = 0; k < W; ++k) o.v[k] = xc.v[k] * r;
  if (scale) {
    const Pack<W> s = ld<W>(scale + c);
#pragma unroll
    for (int k = 0; k < W; ++k) o.v[k] *= s.v[k];
  }
  if (!RMS && bias) {
    const Pack<W> b = ld<W>(bias + c);
#pragma unroll
    for (int k = 0; k < W; ++k) o.v[k] += b.v[k];
  }
}

struct SplitMean {
  float hi, lo;
};
__device__ __forceinline__ SplitMean split_mean(double sum, int D) {
  const double m = sum / double(D);
  const float hi = float(m);
  return {hi, float(m - double(hi))};
}

template <bool RMS, int NP, int W>
__global__ void __launch_bounds__(256)
    norm_fwd_warp(const float* x, const float* scale, const float* bias, float* y, float* mean, float* rstd,
                  int64_t rows, int D, float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kWarpRowsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;
  float v[NP * W];
  wload<NP, W>(x + row * D, D, lane, v, 0.f);
  SplitMean mu{0.f, 0.f};
  float q = 0.f;
  if constexpr (RMS) {
#pragma unroll
    for (int k = 0; k < NP * W; ++k) q += v[k] * v[k];
  } else {
    double s = 0;  // v is 0 past D
#pragma unroll
    for (int k = 0; k < NP * W; ++k) s += double(v[k]);
    mu = split_mean(warp_reduce(s, SumOp()), D);
#pragma unroll
    for (int j = 0; j < NP; ++j)
      if (wcol<W>(j, lane) < D) {
#pragma unroll
        for (int k = 0; k < W; ++k) {
          const float d = (v[j * W + k] - mu.hi) - mu.lo;
          v[j * W + k] = d;
          q += d * d;
        }
      }
  }
  const float r = 1.f / sqrtf(warp_reduce(q, SumOp()) / float(D) + eps);
  float* yr = y + row * D;
#pragma unroll
  for (int j = 0; j < NP; ++j) {
    const int c = wcol<W>(j, lane);
    if (c >= D) continue;
    Pack<W> xc, o;
#pragma unroll
    for (int k = 0; k < W; ++k) xc.v[k] = v[j * W + k];
    norm_fwd_out<RMS, W>(o, xc, r, scale, bias, c);
    st<W>(yr + c, o);
  }
  if (lane == 0) {
    if (!RMS) mean[row] = mu.hi;
    rstd[row] = r;
  }
}

template <bool RMS, int W>
__global__ void __launch_bounds__(kBlockMaxThreads)
    norm_fwd_block(const float* x, const float* scale, const float* bias, float* y, float* mean, float* rstd, int D,
                   float eps, bool cached) {
  float* cache = dyn_smem();  // x, then (LN) x - mean
  const int64_t row = blockIdx.x;
  const float* xr = x + row * D;
  const int n = D / W;
  // Each thread re-reads only the packs it cached itself: no barriers.
  float q = 0.f;
  double s = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const Pack<W> p = ld<W>(xr + i * W);
    if (cached) st<W>(cache + i * W, p);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      if (RMS)
        q += p.v[k] * p.v[k];
      else
        s += double(p.v[k]);
    }
  }
  SplitMean mu{0.f, 0.f};
  auto centred = [&](Pack<W> p) {
#pragma unroll
    for (int k = 0; k < W; ++k) p.v[k] = (p.v[k] - mu.hi) - mu.lo;
    return p;
  };
  if constexpr (!RMS) {
    mu = split_mean(block_sum(s), D);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      const Pack<W> p = centred(ld<W>((cached ? cache : xr) + i * W));
      if (cached) st<W>(cache + i * W, p);
#pragma unroll
      for (int k = 0; k < W; ++k) q += p.v[k] * p.v[k];
    }
  }
  const float r = 1.f / sqrtf(block_sum(q) / float(D) + eps);
  float* yr = y + row * D;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    Pack<W> p = ld<W>((cached ? cache : xr) + i * W), o;
    if (!RMS && !cached) p = centred(p);
    norm_fwd_out<RMS, W>(o, p, r, scale, bias, i * W);
    st<W>(yr + i * W, o);
  }
  if (threadIdx.x == 0) {
    if (!RMS) mean[row] = mu.hi;
    rstd[row] = r;
  }
}

// ---- layer norm / RMS norm backward: dx ------------------------------------------
// With an addend (fy-fuse-norm-grad-add), each element once rounded to fp32
// plus the addend's: __fadd_rn, so no multiply-add contracts across it and
// the bits are the add kernel's.
template <int W> __device__ __forceinline__ void plus(Pack<W>& o, const Pack<W>& a) {
#pragma unroll
  for (int k = 0; k < W; ++k) o.v[k] = __fadd_rn(o.v[k], a.v[k]);
}
// g = dy * scale, xh = (x - mean) * rstd (mean = 0 for RMS);
// LN: dx = rstd * (g - mean(g) - xh * mean(g * xh)); RMS drops mean(g).

template <bool RMS, int NP, int W>
__global__ void __launch_bounds__(256)
    norm_bwd_warp(const float* dy, const float* x, const float* scale, const float* mean, const float* rstd,
                  const float* add, float* dx, int64_t rows, int D) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kWarpRowsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;
  float g[NP * W], xv[NP * W];
  wload<NP, W>(dy + row * D, D, lane, g, 0.f);
  wload<NP, W>(x + row * D, D, lane, xv, 0.f);
  if (scale) {
#pragma unroll
    for (int j = 0; j < NP; ++j) {
      const int c = wcol<W>(j, lane);
      if (c >= D) continue;
      const Pack<W> s = ld<W>(scale + c);
#pragma unroll
      for (int k = 0; k < W; ++k) g[j * W + k] *= s.v[k];
    }
  }
  const float mu = RMS ? 0.f : mean[row], rs = rstd[row];
  float sg = 0.f, sgx = 0.f;  // g is 0 past D, so no mask
#pragma unroll
  for (int k = 0; k < NP * W; ++k) {
    xv[k] = (xv[k] - mu) * rs;
    sg += g[k];
    sgx += g[k] * xv[k];
  }
  sg = RMS ? 0.f : warp_reduce(sg, SumOp()) / float(D);
  sgx = warp_reduce(sgx, SumOp()) / float(D);
  float* dxr = dx + row * D;
#pragma unroll
  for (int j = 0; j < NP; ++j) {
    const int c = wcol<W>(j, lane);
    if (c >= D) continue;
    Pack<W> o;
#pragma unroll
    for (int k = 0; k < W; ++k) o.v[k] = rs * (g[j * W + k] - sg - xv[j * W + k] * sgx);
    if (add) plus(o, ld<W>(add + row * D + c));
    st<W>(dxr + c, o);
  }
}

template <bool RMS, int W>
__global__ void __launch_bounds__(kBlockMaxThreads)
    norm_bwd_block(const float* dy, const float* x, const float* scale, const float* mean, const float* rstd,
                   const float* add, float* dx, int D, bool cached) {
  float* cg = dyn_smem();  // g then xh, D floats each
  float* cx = cg + D;
  const int64_t row = blockIdx.x;
  const float* dyr = dy + row * D;
  const float* xr = x + row * D;
  const float mu = RMS ? 0.f : mean[row], rs = rstd[row];
  const int n = D / W;
  // g and xh of pack i (recomputed from global memory when not cached).
  auto load = [&](int i, Pack<W>& g, Pack<W>& xh) {
    g = ld<W>(dyr + i * W);
    xh = ld<W>(xr + i * W);
    if (scale) {
      const Pack<W> s = ld<W>(scale + i * W);
#pragma unroll
      for (int k = 0; k < W; ++k) g.v[k] *= s.v[k];
    }
#pragma unroll
    for (int k = 0; k < W; ++k) xh.v[k] = (xh.v[k] - mu) * rs;
  };
  float sg = 0.f, sgx = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    Pack<W> g, xh;
    load(i, g, xh);
    if (cached) {
      st<W>(cg + i * W, g);
      st<W>(cx + i * W, xh);
    }
#pragma unroll
    for (int k = 0; k < W; ++k) {
      sg += g.v[k];
      sgx += g.v[k] * xh.v[k];
    }
  }
  sg = RMS ? 0.f : block_sum(sg) / float(D);
  sgx = block_sum(sgx) / float(D);
  float* dxr = dx + row * D;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    Pack<W> g, xh, o;
    if (cached) {
      g = ld<W>(cg + i * W);
      xh = ld<W>(cx + i * W);
    } else {
      load(i, g, xh);
    }
#pragma unroll
    for (int k = 0; k < W; ++k) o.v[k] = rs * (g.v[k] - sg - xh.v[k] * sgx);
    if (add) plus(o, ld<W>(add + row * D + i * W));
    st<W>(dxr + i * W, o);
  }
}

// ---- layer norm / RMS norm backward: dscale, dbias --------------------------------
// Partials: block (x = column tile of 32 * W, y = row chunk); warp w walks
// the chunk's rows w, w + 8, ..., a lane owning W adjacent columns, in
// double; the 8 warp sums are added in warp order. Partials are [chunks, D].
// column_final then sums the chunks: 32 thread groups per column take
// chunks g, g + 32, ..., and their sums are added in group order.
constexpr int kParamThreads = 256;
constexpr int kParamWarps = kParamThreads / 32;

template <bool RMS, int W>
__global__ void __launch_bounds__(kParamThreads)
    norm_param_partials(const float* dy, const float* x, const float* mean, const float* rstd, double* pscale,
                        double* pbias, int64_t rows, int D, int64_t chunk_rows) {
  __shared__ double ss[kParamWarps][32 * W], sb[kParamWarps][32 * W];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int c = (blockIdx.x * 32 + lane) * W;
  const int64_t r0 = int64_t(blockIdx.y) * chunk_rows;
  const int64_t r1 = r0 + chunk_rows < rows ? r0 + chunk_rows : rows;
  double as[W] = {}, ab[W] = {};
  if (c < D) {
#pragma unroll 4
    for (int64_t r = r0 + w; r < r1; r += kParamWarps) {
      const Pack<W> d = ld<W>(dy + r * D + c);
      if (pscale) {
        const Pack<W> xv = ld<W>(x + r * D + c);
        const float mu = RMS ? 0.f : mean[r], rs = rstd[r];
#pragma unroll
        for (int k = 0; k < W; ++k) as[k] += double(d.v[k]) * double((xv.v[k] - mu) * rs);
      }
#pragma unroll
      for (int k = 0; k < W; ++k) ab[k] += double(d.v[k]);
    }
  }
#pragma unroll
  for (int k = 0; k < W; ++k) ss[w][lane * W + k] = as[k], sb[w][lane * W + k] = ab[k];
  __syncthreads();
  // Thread t of the first 32 * W finishes column t of the tile.
  const int t = threadIdx.x, col = blockIdx.x * 32 * W + t;
  if (t >= 32 * W || col >= D) return;
  double a = 0, b = 0;
#pragma unroll
  for (int v = 0; v < kParamWarps; ++v) a += ss[v][t], b += sb[v][t];
  const int64_t o = int64_t(blockIdx.y) * D + col;
  if (pscale) pscale[o] = a;
  if (pbias) pbias[o] = b;
}

// out[c] = sum over chunks of partial[chunk, c] (both outputs when given).
constexpr int kFinalGroups = 32;
__global__ void __launch_bounds__(32 * kFinalGroups)
    column_final(const double* ps, const double* pb, int64_t chunks, int D, float* dscale, float* dbias) {
  __shared__ double ss[kFinalGroups][33], sb[kFinalGroups][33];
  const int lane = threadIdx.x & 31, g = threadIdx.x >> 5;
  const int c = blockIdx.x * 32 + lane;
  double a = 0, b = 0;
  if (c < D) {
#pragma unroll 4
    for (int64_t k = g; k < chunks; k += kFinalGroups) {
      if (ps) a += ps[k * D + c];
      if (pb) b += pb[k * D + c];
    }
  }
  ss[g][lane] = a, sb[g][lane] = b;
  __syncthreads();
  if (g != 0 || c >= D) return;
  a = 0, b = 0;
#pragma unroll
  for (int v = 0; v < kFinalGroups; ++v) a += ss[v][lane], b += sb[v][lane];
  if (dscale) dscale[c] = float(a);
  if (dbias) dbias[c] = float(b);
}

// ---- softmax / log-softmax forward ----------------------------------------------------
// With labels (cross-entropy), also nll[row] = -log_prob[row, label] (0 when
// ignored or out of range; loss_partials flags the latter). The label's
// logit is read before any store, so log_prob may alias logits.

__device__ __forceinline__ float label_logit(const float* xr, int64_t lab, int64_t A, int64_t stride,
                                             int64_t ignore, bool& ok) {
  ok = lab != ignore && lab >= 0 && lab < A;
  return ok ? xr[lab * stride] : 0.f;
}

// Attention's scores (masked_softmax): where(mask, -inf, x * scale), with the
// product rounded to float first, as the mul kernel it stands for. No mask: x.
struct ScoreMask {
  const uint8_t* mask = nullptr;  // [rows % R, D]
  int64_t R = 1;
  float scale = 1.f;
  __device__ __forceinline__ const uint8_t* row(int64_t r, int D) const { return mask ? mask + (r % R) * D : nullptr; }
  template <int W> __device__ __forceinline__ void apply(const uint8_t* mr, int c, Pack<W>& p) const {
    if (!mr) return;
#pragma unroll
    for (int k = 0; k < W; ++k) p.v[k] = mr[c + k] ? -INFINITY : __fmul_rn(p.v[k], scale);
  }
};

template <bool LOG, int NP, int W>
__global__ void __launch_bounds__(256)
    softmax_fwd_warp(const float* x, float* y, int64_t rows, int D, const int64_t* labels, float* nll,
                     int64_t ignore, ScoreMask sm) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kWarpRowsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;
  const float* xr = x + row * D;
  bool ok = false;
  float xl = 0.f;
  if (labels && lane == 0) xl = label_logit(xr, labels[row], D, 1, ignore, ok);
  float v[NP * W];
  wload<NP, W>(xr, D, lane, v, -INFINITY);
  if (const uint8_t* mr = sm.row(row, D)) {
#pragma unroll
    for (int j = 0; j < NP; ++j) {
      const int c = wcol<W>(j, lane);
      if (c >= D) continue;
      Pack<W> p;
#pragma unroll
      for (int k = 0; k < W; ++k) p.v[k] = v[j * W + k];
      sm.apply<W>(mr, c, p);
#pragma unroll
      for (int k = 0; k < W; ++k) v[j * W + k] = p.v[k];
    }
  }
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < NP * W; ++k) m = fmaxf(m, v[k]);
  m = warp_reduce(m, MaxOp());
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < NP * W; ++k) {
    const float e = expf(v[k] - m);  // 0 past D (v = -inf)
    s += e;
    if (!LOG) v[k] = e;
  }
  s = warp_reduce(s, SumOp());
  const float ls = logf(s), inv = 1.f / s;
  __syncwarp();  // lane 0's label read happens before the stores
  float* yr = y + row * D;
#pragma unroll
  for (int j = 0; j < NP; ++j) {
    const int c = wcol<W>(j, lane);
    if (c >= D) continue;
    Pack<W> o;
#pragma unroll
    for (int k = 0; k < W; ++k) o.v[k] = LOG ? (v[j * W + k] - m) - ls : v[j * W + k] * inv;
    st<W>(yr + c, o);
  }
  if (labels && lane == 0) nll[row] = ok ? -((xl - m) - ls) : 0.f;
}

// Online (max, sum) update with one more value: a -inf max adds nothing yet.
__device__ __forceinline__ void online_add(float& m, float& s, float v) {
  if (v > m) {
    s = s * expf(m - v) + 1.f;
    m = v;
  } else if (m != -INFINITY || v != -INFINITY) {
    s += expf(v - m);
  }
}

// Cached: pass 1 caches the row and finds the max, pass 2 sums exp from
// shared memory. Not cached: one online (max, sum) pass over global memory.
template <bool LOG, int W>
__global__ void __launch_bounds__(kBlockMaxThreads)
    softmax_fwd_block(const float* x, float* y, int D, bool cached, const int64_t* labels, float* nll,
                      int64_t ignore, ScoreMask sm) {
  float* cache = dyn_smem();
  const int64_t row = blockIdx.x;
  const float* xr = x + row * D;
  const uint8_t* mr = sm.row(row, D);
  auto load = [&](int i) {
    Pack<W> p = ld<W>(xr + i * W);
    sm.apply<W>(mr, i * W, p);
    return p;
  };
  bool ok = false;
  float xl = 0.f;
  if (labels && threadIdx.x == 0) xl = label_logit(xr, labels[row], D, 1, ignore, ok);
  const int n = D / W;
  float m = -INFINITY, s = 0.f;
  if (cached) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      const Pack<W> p = load(i);
      st<W>(cache + i * W, p);
#pragma unroll
      for (int k = 0; k < W; ++k) m = fmaxf(m, p.v[k]);
    }
    m = block_max(m);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      Pack<W> p = ld<W>(cache + i * W);
#pragma unroll
      for (int k = 0; k < W; ++k) {
        p.v[k] = expf(p.v[k] - m);
        s += p.v[k];
      }
      if (!LOG) st<W>(cache + i * W, p);  // keep exp for the last pass
    }
  } else {
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      const Pack<W> p = load(i);
#pragma unroll
      for (int k = 0; k < W; ++k) online_add(m, s, p.v[k]);
    }
    const float bm = block_max(m);
    s = m == -INFINITY ? 0.f : s * expf(m - bm);
    m = bm;
  }
  s = block_sum(s);  // its barrier also orders the label read before the stores
  const float ls = logf(s), inv = 1.f / s;
  float* yr = y + row * D;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    Pack<W> p = cached ? ld<W>(cache + i * W) : load(i);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      if (LOG)
        p.v[k] = (p.v[k] - m) - ls;
      else
        p.v[k] = (cached ? p.v[k] : expf(p.v[k] - m)) * inv;
    }
    st<W>(yr + i * W, p);
  }
  if (labels && threadIdx.x == 0) nll[row] = ok ? -((xl - m) - ls) : 0.f;
}

// Softmax along a strided axis: a thread per lane (outer, inner); adjacent
// threads read adjacent inner positions. Online max/sum, then the write pass.
template <bool LOG>
__global__ void __launch_bounds__(256)
    softmax_fwd_strided(const float* x, float* y, int64_t lanes, int64_t A, int64_t inner, const int64_t* labels,
                        float* nll, int64_t ignore) {
  for (int64_t l = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; l < lanes; l += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (l / inner) * A * inner + l % inner;
    const float* xl = x + base;
    bool ok = false;
    float xlab = 0.f;
    if (labels) xlab = label_logit(xl, labels[l], A, inner, ignore, ok);
    float m = -INFINITY;
    double acc = 0;  // serial sum: double, as in softmax_bwd_strided
    for (int64_t i = 0; i < A; ++i) {
      const float v = xl[i * inner];
      if (v > m) {
        acc = acc * double(expf(m - v)) + 1.0;
        m = v;
      } else if (m != -INFINITY || v != -INFINITY) {  // leading -infs add nothing
        acc += double(expf(v - m));
      }
    }
    const float s = float(acc), ls = logf(s), inv = 1.f / s;
    float* yl = y + base;
    for (int64_t i = 0; i < A; ++i) {
      const float v = xl[i * inner];
      yl[i * inner] = LOG ? (v - m) - ls : expf(v - m) * inv;
    }
    if (labels) nll[l] = ok ? -((xlab - m) - ls) : 0.f;
  }
}

// ---- softmax backward: dx = y * (dy - sum(y * dy)) -----------------------------------

template <int NP, int W>
__global__ void __launch_bounds__(256)
    softmax_bwd_warp(const float* y, const float* dy, float* dx, int64_t rows, int D, float scale) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kWarpRowsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;
  float yv[NP * W], gv[NP * W];
  wload<NP, W>(y + row * D, D, lane, yv, 0.f);
  wload<NP, W>(dy + row * D, D, lane, gv, 0.f);
  float dot = 0.f;
#pragma unroll
  for (int k = 0; k < NP * W; ++k) dot += yv[k] * gv[k];
  dot = warp_reduce(dot, SumOp());
  float* dxr = dx + row * D;
#pragma unroll
  for (int j = 0; j < NP; ++j) {
    const int c = wcol<W>(j, lane);
    if (c >= D) continue;
    Pack<W> o;
#pragma unroll
    for (int k = 0; k < W; ++k) o.v[k] = __fmul_rn(__fmul_rn(yv[j * W + k], gv[j * W + k] - dot), scale);
    st<W>(dxr + c, o);
  }
}

template <int W>
__global__ void __launch_bounds__(kBlockMaxThreads)
    softmax_bwd_block(const float* y, const float* dy, float* dx, int D, bool cached, float scale) {
  float* cy = dyn_smem();
  float* cg = cy + D;
  const int64_t row = blockIdx.x;
  const float* yr = y + row * D;
  const float* gr = dy + row * D;
  const int n = D / W;
  float dot = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const Pack<W> a = ld<W>(yr + i * W), b = ld<W>(gr + i * W);
    if (cached) {
      st<W>(cy + i * W, a);
      st<W>(cg + i * W, b);
    }
#pragma unroll
    for (int k = 0; k < W; ++k) dot += a.v[k] * b.v[k];
  }
  dot = block_sum(dot);
  const float* sy = cached ? cy : yr;
  const float* sg = cached ? cg : gr;
  float* dxr = dx + row * D;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const Pack<W> a = ld<W>(sy + i * W), b = ld<W>(sg + i * W);
    Pack<W> o;
#pragma unroll
    for (int k = 0; k < W; ++k) o.v[k] = __fmul_rn(__fmul_rn(a.v[k], b.v[k] - dot), scale);
    st<W>(dxr + i * W, o);
  }
}

__global__ void __launch_bounds__(256)
    softmax_bwd_strided(const float* y, const float* dy, float* dx, int64_t lanes, int64_t A, int64_t inner,
                        float scale) {
  for (int64_t l = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; l < lanes; l += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (l / inner) * A * inner + l % inner;
    double acc = 0;  // a serial sum over A: double keeps it as accurate as the row kernels' trees
    for (int64_t i = 0; i < A; ++i) acc += double(y[base + i * inner] * dy[base + i * inner]);
    const float dot = float(acc);
    for (int64_t i = 0; i < A; ++i) {
      const int64_t o = base + i * inner;
      dx[o] = __fmul_rn(__fmul_rn(y[o], dy[o] - dot), scale);
    }
  }
}

// ---- cross-entropy: loss reduction and gradient ------------------------------------------
// loss_partials: block b sums nll (when given) and counts non-ignored labels
// over lanes [b * kLossChunk, (b + 1) * kLossChunk); it also flags labels
// outside [0, C). loss_final (one block) adds the partials in order and
// writes the loss (mean or sum; 0 / 0 = NaN as PyTorch), or, given dloss,
// the gradient scale dloss / count (mean) or dloss (sum).
constexpr int kLossThreads = 256;
constexpr int64_t kLossChunk = 4096;

__global__ void __launch_bounds__(kLossThreads)
    loss_partials(const float* nll, const int64_t* labels, int64_t n, int64_t C, int64_t ignore, double* psum,
                  long long* pcount, int* err) {
  const int64_t b0 = int64_t(blockIdx.x) * kLossChunk;
  const int64_t b1 = b0 + kLossChunk < n ? b0 + kLossChunk : n;
  double s = 0;
  long long cnt = 0;
  bool bad = false;
  for (int64_t i = b0 + threadIdx.x; i < b1; i += blockDim.x) {
    const int64_t lab = labels[i];
    if (lab == ignore) continue;
    bad |= lab < 0 || lab >= C;
    ++cnt;
    if (nll) s += double(nll[i]);
  }
  if (bad) *err = int(DeviceError::LossLabel);
  s = block_sum(s);
  cnt = block_sum(cnt);
  if (threadIdx.x == 0) psum[blockIdx.x] = s, pcount[blockIdx.x] = cnt;
}

__global__ void __launch_bounds__(kLossThreads)
    loss_final(const double* psum, const long long* pcount, int64_t parts, bool mean, const float* dloss, float* out) {
  double s = 0;
  long long cnt = 0;
  for (int64_t i = threadIdx.x; i < parts; i += blockDim.x) s += psum[i], cnt += pcount[i];
  s = block_sum(s);
  cnt = block_sum(cnt);
  if (threadIdx.x != 0) return;
  const double div = mean ? double(cnt) : 1.0;
  *out = dloss ? float(double(*dloss) / div) : float(s / div);
}

// dlogits = exp(log_prob) * g, minus g at the label; 0 for ignored rows.
// `group` threads (32 or the block) share a row.
template <int W>
__global__ void __launch_bounds__(256)
    sce_grad_rows(const float* lp, const int64_t* labels, const float* gscale, float* d, int64_t rows, int D,
                  int group, int64_t ignore) {
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / group) + threadIdx.x / group;
  if (row >= rows) return;
  const int t = threadIdx.x % group;
  const int64_t lab = labels[row];
  const bool ign = lab == ignore;
  const float g = ign ? 0.f : *gscale;
  const float* lr = lp + row * D;
  float* dr = d + row * D;
  for (int i = t; i < D / W; i += group) {
    Pack<W> p = ld<W>(lr + i * W);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float e = expf(p.v[k]) * g;
      p.v[k] = ign ? 0.f : (i * W + k == lab ? e - g : e);
    }
    st<W>(dr + i * W, p);
  }
}

// The loss of rows of 16-bit logits (linear_cross_entropy's block at 16-bit
// precision, as autocast's logits): a block a row, the row read twice (an
// online max and sum, then the writes); each row's nll, and with gscale its
// gradient written over it in place, rounded to the row's format: softmax
// minus one at the label, times g, from fp32 log-probabilities as
// sce_grad_rows computes it.
constexpr int kXentThreads = 512;

__global__ void __launch_bounds__(kXentThreads)
    xent_rows16(FIn x, FOut d, const int64_t* labels, const float* gscale, float* nll, int D, int64_t ignore) {
  const int64_t row = blockIdx.x, base = row * D;
  const int64_t lab = labels[row];
  const bool ok = lab != ignore && lab >= 0 && lab < D;
  float m = -INFINITY, s = 0.f;
  for (int i = threadIdx.x; i < D; i += blockDim.x) online_add(m, s, x[base + i]);
  const float bm = block_max(m);
  s = m == -INFINITY ? 0.f : s * expf(m - bm);
  m = bm;
  const float xl = ok && threadIdx.x == 0 ? x[base + lab] : 0.f;
  s = block_sum(s);  // its barrier also orders the label's read before the stores
  const float ls = logf(s);
  if (threadIdx.x == 0) nll[row] = ok ? -((xl - m) - ls) : 0.f;
  if (!gscale) return;
  const bool ign = lab == ignore;
  const float g = ign ? 0.f : *gscale;
  for (int i = threadIdx.x; i < D; i += blockDim.x) {
    const float e = expf((x[base + i] - m) - ls) * g;
    d.set(base + i, ign ? 0.f : (i == lab ? e - g : e));
  }
}

__global__ void __launch_bounds__(256)
    sce_grad_strided(const float* lp, const int64_t* labels, const float* gscale, float* d, int64_t total, int64_t A,
                     int64_t inner, int64_t ignore) {
  const float g = *gscale;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = e / (A * inner), rem = e - n * A * inner;
    const int64_t c = rem / inner, i = rem - c * inner;
    const int64_t lab = labels[n * inner + i];
    if (lab == ignore) {
      d[e] = 0.f;
    } else {
      const float v = expf(lp[e]) * g;
      d[e] = c == lab ? v - g : v;
    }
  }
}

// ---- host helpers ----------------------------------------------------------------------

int64_t norm_axis(int64_t axis, int rank, const char* op) {
  const int64_t a = axis < 0 ? axis + rank : axis;
  check(rank >= 1, op, "input must have rank >= 1");
  check(a >= 0 && a < rank, op, "axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank));
  return a;
}
int64_t prod(const Shape& s, int64_t from, int64_t to) {
  int64_t n = 1;
  for (int64_t i = from; i < to; ++i) n *= s.d[i];
  return n;
}
void check_f32(const View& v, const char* op, const char* name) { check_dtype(v, DType::F32, op, name); }

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }
// 16-byte accesses need whole float4s per row and aligned base pointers.
bool can_vec(int64_t D, std::initializer_list<const void*> ptrs) {
  if (D % 4 != 0) return false;
  for (const void* p : ptrs)
    if (p && !aligned16(p)) return false;
  return true;
}

// Calls f(IC<NP>, IC<W>): NP packs of W floats per lane, enough for D <= 1024.
template <class F> void dispatch_warp(int D, bool vec, F&& f) {
  auto go = [&](auto e) {
    constexpr int E = decltype(e)::value;
    if (vec)
      f(IC<E / 4>{}, IC<4>{});
    else
      f(IC<E>{}, IC<1>{});
  };
  if (D <= 128)
    go(IC<4>{});
  else if (D <= 256)
    go(IC<8>{});
  else if (D <= 512)
    go(IC<16>{});
  else
    go(IC<32>{});
}
unsigned warp_grid(int64_t rows) { return unsigned((rows + kWarpRowsPerBlock - 1) / kWarpRowsPerBlock); }

// Dynamic shared memory a block may use on the current device (opt-in limit,
// less room for the kernels' static reduction buffers).
size_t max_dyn_smem() {
  static std::unordered_map<int, size_t> per_device;
  int dev = 0;
  FY_CUDA_CHECK(cudaGetDevice(&dev));
  auto it = per_device.find(dev);
  if (it != per_device.end()) return it->second;
  int v = 0;
  FY_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  const size_t bytes = v > 1024 ? size_t(v) - 1024 : 0;
  per_device[dev] = bytes;
  return bytes;
}

// Raises a kernel's dynamic shared memory limit past the 48 KiB default
// (once per kernel and size class).
template <class K> void allow_smem(K* kern, size_t bytes) {
  if (bytes <= 48 * 1024) return;
  static std::unordered_map<const void*, size_t> raised;
  const void* key = reinterpret_cast<const void*>(kern);
  auto it = raised.find(key);
  if (it != raised.end() && it->second >= bytes) return;
  FY_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  raised[key] = bytes;
}

struct BlockCfg {
  unsigned threads;
  size_t smem;
  bool cached;
};
// About 16 floats per thread, 128..1024 threads; `arrays` row-sized arrays
// cached in shared memory when they fit.
BlockCfg block_cfg(int D, int arrays) {
  int t = 128;
  while (t < kBlockMaxThreads && int64_t(t) * 16 < D) t *= 2;
  const size_t bytes = size_t(arrays) * size_t(D) * sizeof(float);
  const bool cached = bytes <= max_dyn_smem();
  return {unsigned(t), cached ? bytes : 0, cached};
}

struct RowsD {
  int64_t rows;
  int D;
};
RowsD checked_rows(int64_t rows, int64_t D, const char* op) {
  check(D <= INT_MAX, op, "reduced size " + std::to_string(D) + " is too large");
  check(D <= kWarpMaxD || rows <= INT_MAX, op, "too many rows");
  return {rows, int(D)};
}
RowsD norm_rows(const View& x, int64_t axis, const char* op) {
  const int R = x.shape.rank;
  const int64_t a = norm_axis(axis, R, op);
  return checked_rows(prod(x.shape, 0, a), prod(x.shape, a, R), op);
}

// The reduced axis has A elements at stride `inner`; lanes are (outer, inner).
struct Lanes {
  int64_t outer, A, inner;
  int64_t count() const { return outer * inner; }
};
Lanes lanes_of(const Shape& s, int64_t axis, const char* op) {
  const int64_t a = norm_axis(axis, s.rank, op);
  return {prod(s, 0, a), s.d[a], prod(s, a + 1, s.rank)};
}

// Device scratch memory on the current stream, released after the queued work.
struct Scratch {
  void* p = nullptr;
  explicit Scratch(size_t bytes) { FY_CUDA_CHECK(cudaMallocAsync(&p, bytes ? bytes : 1, current_stream())); }
  ~Scratch() noexcept(false) {
    const cudaError_t err = cudaFreeAsync(p, current_stream());
    if (err != cudaSuccess && std::uncaught_exceptions() == 0) fail_cuda("cudaFreeAsync", err, __FILE__, __LINE__);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};
size_t round_up(size_t n) { return (n + 255) & ~size_t(255); }

// ---- launchers ---------------------------------------------------------------------------

template <bool RMS>
void launch_norm_fwd(RowsD g, const float* x, const float* scale, const float* bias, float* y, float* mean,
                     float* rstd, float eps) {
  if (g.rows == 0) return;
  cudaStream_t s = current_stream();
  const bool vec = can_vec(g.D, {x, scale, bias, y});
  if (g.D <= kWarpMaxD) {
    dispatch_warp(g.D, vec, [&](auto np, auto w) {
      norm_fwd_warp<RMS, decltype(np)::value, decltype(w)::value>
          <<<warp_grid(g.rows), 256, 0, s>>>(x, scale, bias, y, mean, rstd, g.rows, g.D, eps);
    });
  } else {
    const BlockCfg cfg = block_cfg(g.D, 1);
    auto go = [&](auto kern) {
      allow_smem(kern, cfg.smem);
      kern<<<unsigned(g.rows), cfg.threads, cfg.smem, s>>>(x, scale, bias, y, mean, rstd, g.D, eps, cfg.cached);
    };
    if (vec)
      go(norm_fwd_block<RMS, 4>);
    else
      go(norm_fwd_block<RMS, 1>);
  }
  FY_CUDA_LAUNCHED(RMS ? "rms_norm" : "layer_norm");
}

template <bool RMS>
void launch_norm_bwd(RowsD g, const float* dy, const float* x, const float* scale, const float* mean,
                     const float* rstd, const float* add, float* dx, float* dscale, float* dbias) {
  cudaStream_t s = current_stream();
  // Parameter gradients first: dx may alias dy or x.
  if ((dscale || dbias) && g.D > 0) {
    const bool pvec = can_vec(g.D, {dy, x});
    const int cols = pvec ? 128 : 32;
    const int64_t tiles = (g.D + cols - 1) / cols;
    // About 1024 blocks, each warp taking at least 4 rows; the split depends
    // only on the shape, so the summation order is fixed.
    int64_t chunks = (1024 + tiles - 1) / tiles;
    const int64_t max_chunks = (g.rows + 4 * kParamWarps - 1) / (4 * kParamWarps);
    if (chunks > max_chunks) chunks = max_chunks;
    if (chunks > 65535) chunks = 65535;
    if (chunks < 1) chunks = 1;
    const int64_t chunk_rows = (g.rows + chunks - 1) / chunks;
    if (chunk_rows > 0) chunks = (g.rows + chunk_rows - 1) / chunk_rows;
    if (chunks < 1) chunks = 1;
    const size_t per = round_up(size_t(chunks) * size_t(g.D) * sizeof(double));
    Scratch tmp(per * (size_t(dscale != nullptr) + size_t(dbias != nullptr)));
    double* ps = dscale ? static_cast<double*>(tmp.p) : nullptr;
    double* pb = dbias ? reinterpret_cast<double*>(static_cast<char*>(tmp.p) + (dscale ? per : 0)) : nullptr;
    const dim3 grid{unsigned(tiles), unsigned(chunks)};
    if (pvec)
      norm_param_partials<RMS, 4><<<grid, kParamThreads, 0, s>>>(dy, x, mean, rstd, ps, pb, g.rows, g.D, chunk_rows);
    else
      norm_param_partials<RMS, 1><<<grid, kParamThreads, 0, s>>>(dy, x, mean, rstd, ps, pb, g.rows, g.D, chunk_rows);
    FY_CUDA_LAUNCHED("norm_param_partials");
    column_final<<<unsigned((g.D + 31) / 32), 32 * kFinalGroups, 0, s>>>(ps, pb, chunks, g.D, dscale, dbias);
    FY_CUDA_LAUNCHED("column_final");
  }
  if (g.rows == 0 || g.D == 0) return;
  const bool vec = can_vec(g.D, {dy, x, scale, add, dx});
  if (g.D <= kWarpMaxD) {
    dispatch_warp(g.D, vec, [&](auto np, auto w) {
      norm_bwd_warp<RMS, decltype(np)::value, decltype(w)::value>
          <<<warp_grid(g.rows), 256, 0, s>>>(dy, x, scale, mean, rstd, add, dx, g.rows, g.D);
    });
  } else {
    const BlockCfg cfg = block_cfg(g.D, 2);
    auto go = [&](auto kern) {
      allow_smem(kern, cfg.smem);
      kern<<<unsigned(g.rows), cfg.threads, cfg.smem, s>>>(dy, x, scale, mean, rstd, add, dx, g.D, cfg.cached);
    };
    if (vec)
      go(norm_bwd_block<RMS, 4>);
    else
      go(norm_bwd_block<RMS, 1>);
  }
  FY_CUDA_LAUNCHED(RMS ? "rms_norm_grad" : "layer_norm_grad");
}

// Softmax (LOG: log-softmax) over the lanes of L; labels/nll for cross-entropy.
template <bool LOG>
void launch_softmax_fwd(const Lanes& L, const float* x, float* y, const int64_t* labels, float* nll,
                        int64_t ignore, const char* op, ScoreMask sm = {}) {
  if (L.count() == 0) return;
  cudaStream_t s = current_stream();
  if (L.inner != 1) {
    softmax_fwd_strided<LOG><<<grid_for(L.count()), 256, 0, s>>>(x, y, L.count(), L.A, L.inner, labels, nll, ignore);
    FY_CUDA_LAUNCHED(op);
    return;
  }
  const RowsD g = checked_rows(L.outer, L.A, op);
  const bool vec = can_vec(g.D, {x, y});
  if (g.D <= kWarpMaxD) {
    dispatch_warp(g.D, vec, [&](auto np, auto w) {
      softmax_fwd_warp<LOG, decltype(np)::value, decltype(w)::value>
          <<<warp_grid(g.rows), 256, 0, s>>>(x, y, g.rows, g.D, labels, nll, ignore, sm);
    });
  } else {
    const BlockCfg cfg = block_cfg(g.D, 1);
    auto go = [&](auto kern) {
      allow_smem(kern, cfg.smem);
      kern<<<unsigned(g.rows), cfg.threads, cfg.smem, s>>>(x, y, g.D, cfg.cached, labels, nll, ignore, sm);
    };
    if (vec)
      go(softmax_fwd_block<LOG, 4>);
    else
      go(softmax_fwd_block<LOG, 1>);
  }
  FY_CUDA_LAUNCHED(op);
}

// dlogits = softmax's gradient of contiguous rows of log-probabilities
// (sce_grad_rows); lp and d may be the same buffer.
void launch_sce_grad_rows(const float* lp, const int64_t* labels, const float* gscale, float* d, int64_t rows,
                          int64_t D, int64_t ignore, const char* op) {
  const RowsD g = checked_rows(rows, D, op);
  const int group = g.D <= kWarpMaxD ? 32 : 256;
  const int64_t per_block = 256 / group;
  const int64_t blocks = (g.rows + per_block - 1) / per_block;
  check(blocks <= INT_MAX, op, "too many rows");
  cudaStream_t s = current_stream();
  if (can_vec(g.D, {lp, d}))
    sce_grad_rows<4><<<unsigned(blocks), 256, 0, s>>>(lp, labels, gscale, d, g.rows, g.D, group, ignore);
  else
    sce_grad_rows<1><<<unsigned(blocks), 256, 0, s>>>(lp, labels, gscale, d, g.rows, g.D, group, ignore);
  FY_CUDA_LAUNCHED(op);
}

// Sums over the labels (and nll when given) into *out: the loss, or with
// dloss the gradient scale. Scratch is taken from `tmp` past `off` bytes.
void launch_loss(const float* nll, const int64_t* labels, int64_t n, int64_t C, int64_t ignore, bool mean,
                 const float* dloss, float* out, char* tmp) {
  cudaStream_t s = current_stream();
  const int64_t parts = n > 0 ? (n + kLossChunk - 1) / kLossChunk : 1;
  check(parts <= INT_MAX, "softmax_cross_entropy", "too many labels");
  double* psum = reinterpret_cast<double*>(tmp);
  long long* pcount = reinterpret_cast<long long*>(tmp + round_up(size_t(parts) * sizeof(double)));
  loss_partials<<<unsigned(parts), kLossThreads, 0, s>>>(nll, labels, n, C, ignore, psum, pcount,
                                                         device_error_flag());
  FY_CUDA_LAUNCHED("loss_partials");
  loss_final<<<1, kLossThreads, 0, s>>>(psum, pcount, parts, mean, dloss, out);
  FY_CUDA_LAUNCHED("loss_final");
}
size_t loss_scratch(int64_t n) {
  const int64_t parts = n > 0 ? (n + kLossChunk - 1) / kLossChunk : 1;
  return 2 * round_up(size_t(parts) * sizeof(double));
}

// Shapes as the CPU's check_sce; returns the lanes over the class dim.
Lanes check_sce(const char* op, const View& logits, const View& labels, const View& lp) {
  check(logits.shape.rank >= 2, op, "logits need rank >= 2 ([N,C,...]), got " + logits.shape.str());
  check_f32(logits, op, "logits");
  check_dtype(labels, DType::I64, op, "labels");
  check_f32(lp, op, "log_prob");
  check_shape(lp, logits.shape, op, "log_prob");
  Shape ls;
  ls.rank = logits.shape.rank - 1;
  ls.d[0] = logits.shape[0];
  for (int i = 2; i < logits.shape.rank; ++i) ls.d[i - 1] = logits.shape[i];
  check_shape(labels, ls, op, "labels");
  return lanes_of(logits.shape, 1, op);
}

}  // namespace

// ---- entry points ---------------------------------------------------------------------------

void layer_norm(View x, View scale, View bias, View y, View mean, View inv_std, int64_t axis, double eps) {
  const char* op = "layer_norm";
  const RowsD g = norm_rows(x, axis, op);
  const bool h = detail::any16({x, y});
  if (!h) check_f32(x, op, "x"), check_f32(y, op, "y");
  check_shape(y, x.shape, op, "y");
  if (scale.data) check_f32(scale, op, "scale"), check_numel(scale, g.D, op, "scale");
  if (bias.data) check_f32(bias, op, "bias"), check_numel(bias, g.D, op, "bias");
  check_f32(mean, op, "mean");
  check_f32(inv_std, op, "inv_std");
  check_numel(mean, g.rows, op, "mean");
  check_numel(inv_std, g.rows, op, "inv_std");
  if (h)
    return detail::norm16(false, g.rows, g.D, detail::fin(x, op, "x"), cf(scale), cf(bias), detail::fout(y, op, "y"),
                          mf(mean), mf(inv_std), float(eps));
  launch_norm_fwd<false>(g, cf(x), cf(scale), cf(bias), mf(y), mf(mean), mf(inv_std), float(eps));
}

namespace {

// Both norms' input gradients (rms: no mean, no dbias), with an addend or
// none (add.data null).
void norm_grad(bool rms, View dy, View x, View scale, View mean, View inv, View add, View dx, View dscale,
               View dbias, int64_t axis, const char* op) {
  const RowsD g = norm_rows(x, axis, op);
  // With an addend, the kernel the unfused gradient ran on its fp32 buffer:
  // chosen by dy and x alone. fp32 rows with a 16-bit addend or result
  // (the norm's input in fp32 at 16-bit activations, which pre-norm models
  // do not make) run as the unfused pair: the gradient, then the add.
  const bool h = detail::any16({dy, x}) || (!add.data && detail::is16(dx));
  check_shape(dy, x.shape, op, "dy");
  check_shape(dx, x.shape, op, "dx");
  if (add.data) check_shape(add, x.shape, op, "addend");
  if (add.data && !h && detail::any16({add, dx})) {
    Scratch sum(size_t(dx.numel()) * sizeof(float));
    const View d{sum.p, dx.shape, DType::F32};
    norm_grad(rms, dy, x, scale, mean, inv, View{}, d, dscale, dbias, axis, op);
    return binary(BinOp::Add, d, add, dx);
  }
  if (!h) {
    check_f32(x, op, "x"), check_f32(dy, op, "dy"), check_f32(dx, op, "dx");
    if (add.data) check_f32(add, op, "addend");
  }
  if (scale.data) check_f32(scale, op, "scale"), check_numel(scale, g.D, op, "scale");
  if (dscale.data) check_f32(dscale, op, "dscale"), check_numel(dscale, g.D, op, "dscale");
  if (dbias.data) check_f32(dbias, op, "dbias"), check_numel(dbias, g.D, op, "dbias");
  const char* stat = rms ? "inv_rms" : "inv_std";
  if (!rms) check_f32(mean, op, "mean"), check_numel(mean, g.rows, op, "mean");
  check_f32(inv, op, stat);
  check_numel(inv, g.rows, op, stat);
  if (h)
    return detail::norm16_grad(rms, g.rows, g.D, detail::fin(dy, op, "dy"), detail::fin(x, op, "x"), cf(scale),
                               cf(mean), cf(inv), detail::fin(add, op, "addend"), detail::fout(dx, op, "dx"),
                               mf(dscale), mf(dbias));
  if (rms) return launch_norm_bwd<true>(g, cf(dy), cf(x), cf(scale), nullptr, cf(inv), cf(add), mf(dx), mf(dscale), nullptr);
  launch_norm_bwd<false>(g, cf(dy), cf(x), cf(scale), cf(mean), cf(inv), cf(add), mf(dx), mf(dscale), mf(dbias));
}

}  // namespace

void layer_norm_grad(View dy, View x, View scale, View mean, View inv_std, View dx, View dscale, View dbias,
                     int64_t axis) {
  norm_grad(false, dy, x, scale, mean, inv_std, View{}, dx, dscale, dbias, axis, "layer_norm_grad");
}
void layer_norm_grad_add(View dy, View x, View scale, View mean, View inv_std, View addend, View dx, View dscale,
                         View dbias, int64_t axis) {
  check(addend.data != nullptr, "layer_norm_grad_add", "addend is null");
  norm_grad(false, dy, x, scale, mean, inv_std, addend, dx, dscale, dbias, axis, "layer_norm_grad_add");
}

void rms_norm(View x, View scale, View y, View inv_rms, int64_t axis, double eps) {
  const char* op = "rms_norm";
  const RowsD g = norm_rows(x, axis, op);
  const bool h = detail::any16({x, y});
  if (!h) check_f32(x, op, "x"), check_f32(y, op, "y");
  check_shape(y, x.shape, op, "y");
  if (scale.data) check_f32(scale, op, "scale"), check_numel(scale, g.D, op, "scale");
  check_f32(inv_rms, op, "inv_rms");
  check_numel(inv_rms, g.rows, op, "inv_rms");
  if (h)
    return detail::norm16(true, g.rows, g.D, detail::fin(x, op, "x"), cf(scale), nullptr, detail::fout(y, op, "y"),
                          nullptr, mf(inv_rms), float(eps));
  launch_norm_fwd<true>(g, cf(x), cf(scale), nullptr, mf(y), nullptr, mf(inv_rms), float(eps));
}

void rms_norm_grad(View dy, View x, View scale, View inv_rms, View dx, View dscale, int64_t axis) {
  norm_grad(true, dy, x, scale, View{}, inv_rms, View{}, dx, dscale, View{}, axis, "rms_norm_grad");
}
void rms_norm_grad_add(View dy, View x, View scale, View inv_rms, View addend, View dx, View dscale, int64_t axis) {
  check(addend.data != nullptr, "rms_norm_grad_add", "addend is null");
  norm_grad(true, dy, x, scale, View{}, inv_rms, addend, dx, dscale, View{}, axis, "rms_norm_grad_add");
}

void softmax(View x, View y, int64_t axis) {
  const char* op = "softmax";
  check_f32(x, op, "x");
  check_f32(y, op, "y");
  check_shape(y, x.shape, op, "y");
  const Lanes L = lanes_of(x.shape, axis, op);
  if (x.numel() == 0) return;
  launch_softmax_fwd<false>(L, cf(x), mf(y), nullptr, nullptr, 0, op);
}

void masked_softmax(View x, View mask, View y, float scale) {
  const char* op = "masked_softmax";
  check_f32(x, op, "x");
  check_f32(y, op, "y");
  check_shape(y, x.shape, op, "y");
  check_dtype(mask, DType::U8, op, "mask");
  const Lanes L = lanes_of(x.shape, -1, op);
  const int64_t R = L.A > 0 ? mask.numel() / L.A : 0;
  check(mask.shape.rank >= 1 && mask.shape[mask.shape.rank - 1] == L.A && R * L.A == mask.numel() &&
            (R == 1 || (x.shape.rank >= 2 && R == x.shape[x.shape.rank - 2])),
        op, "mask " + mask.shape.str() + " does not mask the rows of " + x.shape.str());
  if (x.numel() == 0) return;
  launch_softmax_fwd<false>(L, cf(x), mf(y), nullptr, nullptr, 0, op, ScoreMask{mask.as<uint8_t>(), R, scale});
}

void softmax_grad(View y, View dy, View dx, int64_t axis, float scale) {
  const char* op = "softmax_grad";
  check_f32(y, op, "y");
  check_f32(dy, op, "dy");
  check_f32(dx, op, "dx");
  check_shape(dy, y.shape, op, "dy");
  check_shape(dx, y.shape, op, "dx");
  const Lanes L = lanes_of(y.shape, axis, op);
  if (y.numel() == 0) return;
  cudaStream_t s = current_stream();
  const float *py = cf(y), *pdy = cf(dy);
  float* pdx = mf(dx);
  if (L.inner != 1) {
    softmax_bwd_strided<<<grid_for(L.count()), 256, 0, s>>>(py, pdy, pdx, L.count(), L.A, L.inner, scale);
    FY_CUDA_LAUNCHED(op);
    return;
  }
  const RowsD g = checked_rows(L.outer, L.A, op);
  const bool vec = can_vec(g.D, {py, pdy, pdx});
  if (g.D <= kWarpMaxD) {
    dispatch_warp(g.D, vec, [&](auto np, auto w) {
      softmax_bwd_warp<decltype(np)::value, decltype(w)::value>
          <<<warp_grid(g.rows), 256, 0, s>>>(py, pdy, pdx, g.rows, g.D, scale);
    });
  } else {
    const BlockCfg cfg = block_cfg(g.D, 2);
    auto go = [&](auto kern) {
      allow_smem(kern, cfg.smem);
      kern<<<unsigned(g.rows), cfg.threads, cfg.smem, s>>>(py, pdy, pdx, g.D, cfg.cached, scale);
    };
    if (vec)
      go(softmax_bwd_block<4>);
    else
      go(softmax_bwd_block<1>);
  }
  FY_CUDA_LAUNCHED(op);
}

void softmax_cross_entropy(View logits, View labels, View loss, View log_prob, int64_t ignore_index, bool mean) {
  const char* op = "softmax_cross_entropy";
  const Lanes L = check_sce(op, logits, labels, log_prob);
  check_f32(loss, op, "loss");
  check_numel(loss, 1, op, "loss");
  const int64_t n = L.count();
  const size_t nll_bytes = round_up(size_t(n) * sizeof(float));
  Scratch tmp(nll_bytes + loss_scratch(n));
  float* nll = static_cast<float*>(tmp.p);
  const int64_t* pl = static_cast<const int64_t*>(labels.data);
  launch_softmax_fwd<true>(L, cf(logits), mf(log_prob), pl, nll, ignore_index, op);
  launch_loss(nll, pl, n, L.A, ignore_index, mean, nullptr, mf(loss), static_cast<char*>(tmp.p) + nll_bytes);
}

void softmax_cross_entropy_grad(View dloss, View log_prob, View labels, View dlogits, int64_t ignore_index,
                                bool mean) {
  const char* op = "softmax_cross_entropy_grad";
  const Lanes L = check_sce(op, log_prob, labels, dlogits);
  check_f32(dloss, op, "dloss");
  check_numel(dloss, 1, op, "dloss");
  const int64_t n = L.count();
  const size_t g_bytes = 256;
  Scratch tmp(g_bytes + loss_scratch(n));
  float* gscale = static_cast<float*>(tmp.p);
  const int64_t* pl = static_cast<const int64_t*>(labels.data);
  launch_loss(nullptr, pl, n, L.A, ignore_index, mean, cf(dloss), gscale, static_cast<char*>(tmp.p) + g_bytes);
  const int64_t total = dlogits.numel();
  if (total == 0) return;
  cudaStream_t s = current_stream();
  const float* plp = cf(log_prob);
  float* pd = mf(dlogits);
  if (L.inner != 1) {
    sce_grad_strided<<<grid_for(total), 256, 0, s>>>(plp, pl, gscale, pd, total, L.A, L.inner, ignore_index);
    FY_CUDA_LAUNCHED(op);
  } else {
    launch_sce_grad_rows(plp, pl, gscale, pd, L.outer, L.A, ignore_index, op);
  }
}

// The loss of the logits x w^T a block of rows at a time, in `block`
// (kernels/cpu/cross_entropy.cpp says why): each block's logits, their
// log-softmax in place, then in place their gradient, which the products
// take to dx's rows and, added up over the blocks, dw.
void linear_cross_entropy(View x, View w, View labels, View loss, View dx, View dw, View block, int64_t ignore_index,
                          bool mean, bool grads) {
  const char* op = "linear_cross_entropy";
  check_f32(loss, op, "loss");
  check_dtype(labels, DType::I64, op, "labels");
  check(w.shape.rank == 2 && x.shape.rank >= 2 && x.shape[x.shape.rank - 1] == w.shape[1], op,
        "x must be [..., D] and w [V, D], got " + x.shape.str() + " and " + w.shape.str());
  const int64_t V = w.shape[0], D = w.shape[1], N = labels.numel();
  check(x.numel() == N * D, op, "labels must be [N], one for each of x's rows");
  check(block.shape.rank == 2 && block.shape[1] == V && block.shape[0] >= 1, op, "block must be [R, V]");
  check_numel(loss, 1, op, "loss");
  // A 16-bit block holds the logits as autocast's are, and then their
  // gradient in their place; x, w and dx may be 16-bit beside it (the
  // products take them so). An fp32 block: x, w, dx fp32 too.
  const bool b16 = is16(block);
  if (b16) {
    auto f32_or_block = [&](const View& v, const char* name) {
      check(!v.data || v.dtype == DType::F32 || v.dtype == block.dtype, op,
            std::string(name) + " has dtype " + dtype_name(v.dtype) + ", expected F32 or the block's " +
                dtype_name(block.dtype));
    };
    f32_or_block(x, "x");
    f32_or_block(w, "w");
    f32_or_block(dx, "dx");
  } else {
    check_f32(x, op, "x");
    check_f32(w, op, "w");
    check_f32(block, op, "block");
  }
  if (grads) {
    if (!b16) check_f32(dx, op, "dx");
    check_f32(dw, op, "dw");
    check_shape(dx, x.shape, op, "dx");
    check_shape(dw, w.shape, op, "dw");
  }
  const int64_t R = block.shape[0];
  const size_t nll_bytes = round_up(size_t(N) * sizeof(float)), g_bytes = 256;
  Scratch tmp(nll_bytes + 2 * g_bytes + loss_scratch(N));
  char* t = static_cast<char*>(tmp.p);
  float* nll = reinterpret_cast<float*>(t);
  float* one = reinterpret_cast<float*>(t + nll_bytes);
  float* gscale = reinterpret_cast<float*>(t + nll_bytes + g_bytes);
  char* sums = t + nll_bytes + 2 * g_bytes;
  const int64_t* pl = static_cast<const int64_t*>(labels.data);
  if (grads) {
    // Each row's gradient factor: a gradient of 1 on the loss over the count
    // of labels (mean) or 1 (sum).
    fill(View{one, Shape{1}, DType::F32}, 1.0);
    launch_loss(nullptr, pl, N, V, ignore_index, mean, one, gscale, sums);
  }
  if (b16) {
    // fp32 x and w rounded once into the products' scratch, which then holds
    // them for every block (their products read only 16-bit operands and so
    // leave it alone), instead of by each product: the same values (both
    // round to nearest even), where the products' precision is the block's
    // format and the copies fit.
    const MatmulPrecision p = matmul_precision();
    const bool same = block.dtype == DType::BF16 ? p == MatmulPrecision::BF16 : p == MatmulPrecision::FP16;
    const size_t xe = x.dtype == DType::F32 ? size_t(x.numel()) : 0, we = w.dtype == DType::F32 ? size_t(w.numel()) : 0;
    if (same && xe + we > 0 && matmul_copies_fit(xe, we)) {
      char* sc = static_cast<char*>(convert_scratch());
      if (xe) {
        const View x16{sc, x.shape, block.dtype};
        cast(x, x16);
        x = x16;
      }
      if (we) {
        const View w16{sc + matmul_copy_b_offset(xe), w.shape, block.dtype};
        cast(w, w16);
        w = w16;
      }
    }
  }
  // An fp32 x left (its copy and w's too large for the scratch together):
  // each block's rows rounded into a scratch of their own, so that every
  // product has a 16-bit operand beside the 16-bit block; an fp32 w then
  // goes through the products' scratch in pieces (a product writing 16 bits
  // has no fp32 operands to fall back on).
  const bool x_rows16 = b16 && x.dtype == DType::F32;
  Scratch xrows(x_rows16 ? size_t(std::min(R, N) * D) * 2 : 0);
  const size_t xes = dtype_size(x.dtype), des = dx.data ? dtype_size(dx.dtype) : 0;
  const char* px = static_cast<const char*>(x.data);
  for (int64_t r0 = 0; r0 < N; r0 += R) {
    const int64_t rows = std::min(R, N - r0);
    View xb{const_cast<char*>(px + size_t(r0 * D) * xes), Shape{rows, D}, x.dtype};
    if (x_rows16) {
      const View x16{xrows.p, xb.shape, block.dtype};
      cast(xb, x16);
      xb = x16;
    }
    const View lb{block.data, Shape{rows, V}, block.dtype};
    matmul(xb, w, lb, false, true);
    if (b16) {
      check(V <= INT_MAX && rows <= INT_MAX, op, "too many classes or rows");
      xent_rows16<<<unsigned(rows), kXentThreads, 0, current_stream()>>>(
          fin(lb, op, "block"), fout(lb, op, "block"), pl + r0, grads ? gscale : nullptr, nll + r0, int(V),
          ignore_index);
      FY_CUDA_LAUNCHED(op);
    } else {
      // In place: each row's label logit is read before its log-probabilities are stored.
      launch_softmax_fwd<true>(Lanes{rows, V, 1}, cf(lb), mf(lb), pl + r0, nll + r0, ignore_index, op);
      if (grads) launch_sce_grad_rows(cf(lb), pl + r0, gscale, mf(lb), rows, V, ignore_index, op);
    }
    if (!grads) continue;
    matmul(lb, w, View{static_cast<char*>(dx.data) + size_t(r0 * D) * des, Shape{rows, D}, dx.dtype}, false, false);
    matmul_into(lb, xb, dw, true, false, r0 > 0);
  }
  launch_loss(nll, pl, N, V, ignore_index, mean, nullptr, mf(loss), sums);
}

}  // namespace fy::cuda
