// Fused causal attention on the tensor cores: attention.cu's scheme
// (FlashAttention-2: tiles in shared memory, an online softmax, the
// log-sum-exp kept for the backward, no T x T tensor), with its products as
// 16 x 16 x 16 WMMA tiles over bf16 or fp16 operands and fp32 accumulation,
// as PyTorch's bf16 autocast runs scaled_dot_product_attention. The softmax,
// its statistics and the gradients' sums stay fp32; the probabilities and
// dS are rounded to the 16-bit format before their products, as
// FlashAttention does.
//
// A block is four warps over 64 query rows (64 keys in the backward's key
// pass); a warp owns 16 of them. Each warp's scores go through its own fp32
// tile in shared memory, where its lanes (two a row) apply the mask and the
// softmax: WMMA leaves a fragment's element-to-row map unspecified, so
// anything done by row happens in shared memory, not in fragments.
//
// Deterministic as attention.cu: every sum has one order; dq is its own pass
// over the key tiles rather than atomic adds.
#include <mma.h>

#include <algorithm>
#include <type_traits>

#include "abi/sizes.h"
#include "kernels/cuda/attention_tc.h"
#include "kernels/cuda/common.cuh"

namespace fy::cuda::detail {
namespace {

using namespace nvcuda;

constexpr int kRows = 64;  // a block's query rows, and a key tile's keys
constexpr int kWarps = 4;  // 16 rows each
constexpr int kThreads = 32 * kWarps;
constexpr int kLdF = kRows + 4;  // a warp's fp32 score tile's row stride
constexpr int kLdP = kRows + 8;  // its 16-bit probability (or dS) tile's
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

// A 16-bit row tile's row stride (rows stay 16-byte aligned, and off the
// banks' period), and an fp32 accumulator tile's.
template <int D> constexpr int ld16() { return D + 8; }
template <int D> constexpr int ldacc() { return D + 4; }

template <class T> __device__ __forceinline__ T to16(float x);
template <> __device__ __forceinline__ __nv_bfloat16 to16<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half to16<__half>(float x) { return __float2half_rn(x); }
template <class T> constexpr Fmt fmt16() { return std::is_same_v<T, __half> ? Fmt::F16 : Fmt::BF16; }

// Bytes of shared memory, each region a multiple of 128.
template <int D> constexpr size_t tile_bytes() { return size_t(kRows) * ld16<D>() * 2; }
constexpr size_t kScoreBytes = 16 * kLdF * sizeof(float);  // a warp's fp32 scores
constexpr size_t kProbBytes = 16 * kLdP * 2;               // a warp's 16-bit P or dS
template <int D> constexpr size_t acc_bytes() { return 16 * size_t(ldacc<D>()) * sizeof(float); }
template <int D> constexpr size_t fwd_bytes() { return 3 * tile_bytes<D>() + kWarps * (kScoreBytes + kProbBytes + acc_bytes<D>()); }
template <int D> constexpr size_t kv_bytes() {
  return 4 * tile_bytes<D>() + 2 * kRows * sizeof(float) + kWarps * (kScoreBytes + 2 * kProbBytes + 2 * acc_bytes<D>());
}
template <int D> constexpr size_t q_bytes() { return 4 * tile_bytes<D>() + kWarps * (kScoreBytes + kProbBytes + acc_bytes<D>()); }

// Bump allocation of the dynamic shared memory.
struct Carve {
  unsigned char* p;
  template <class U> __device__ U* take(size_t bytes) {
    U* r = reinterpret_cast<U*>(p);
    p += bytes;
    return r;
  }
};

// Rows [row0, row0 + 64) of a head (from x's element `head`, rows `rows`
// apart) into a 16-bit tile; rows past T are zero. Stored in T's format:
// 16-byte copies; otherwise rounded element by element.
template <class T, int D>
__device__ void load_rows(T* s, FIn x, int64_t head, int64_t rows, int64_t row0, int64_t T_) {
  constexpr int ld = ld16<D>();
  if (x.f == fmt16<T>()) {
    constexpr int per = D / 8;  // 16-byte pieces a row
    const T* src = static_cast<const T*>(x.p);
    for (int u = threadIdx.x; u < kRows * per; u += kThreads) {
      const int r = u / per, c = (u - r * per) * 8;
      uint4 val = make_uint4(0, 0, 0, 0);
      if (row0 + r < T_) val = *reinterpret_cast<const uint4*>(src + head + (row0 + r) * rows + c);
      *reinterpret_cast<uint4*>(s + r * ld + c) = val;
    }
  } else {
    for (int e = threadIdx.x; e < kRows * D; e += kThreads) {
      const int r = e / D, c = e - r * D;
      s[r * ld + c] = to16<T>(row0 + r < T_ ? x[head + (row0 + r) * rows + c] : 0.f);
    }
  }
}

template <class T> using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
template <class T> using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major>;
template <class T> using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// F[16][64] = A[16][D] B^T, B's 64 rows: a warp's scores (A its 16 rows of
// one tile, B a tile of 64 rows), into its fp32 tile F.
template <class T, int D> __device__ __forceinline__ void rows_by_rows(const T* A, const T* B, float* F) {
  constexpr int ld = ld16<D>();
  FragC c;
#pragma unroll
  for (int n = 0; n < kRows / 16; ++n) {
    wmma::fill_fragment(c, 0.f);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      FragA<T> a;
      FragBCol<T> b;
      wmma::load_matrix_sync(a, A + 16 * kk, ld);
      wmma::load_matrix_sync(b, B + 16 * n * ld + 16 * kk, ld);
      wmma::mma_sync(c, a, b, c);
    }
    wmma::store_matrix_sync(F + 16 * n, c, kLdF, wmma::mem_row_major);
  }
}

// Acc[16][D] += P[16][64] X, X a tile of 64 rows: into a warp's fp32
// accumulator tile.
template <class T, int D> __device__ __forceinline__ void add_product(const T* P, const T* X, float* Acc) {
  constexpr int ld = ld16<D>(), lda = ldacc<D>();
  FragC c;
#pragma unroll
  for (int n = 0; n < D / 16; ++n) {
    wmma::load_matrix_sync(c, Acc + 16 * n, lda, wmma::mem_row_major);
#pragma unroll
    for (int kk = 0; kk < kRows / 16; ++kk) {
      FragA<T> a;
      FragBRow<T> b;
      wmma::load_matrix_sync(a, P + 16 * kk, kLdP);
      wmma::load_matrix_sync(b, X + 16 * kk * ld + 16 * n, ld);
      wmma::mma_sync(c, a, b, c);
    }
    wmma::store_matrix_sync(Acc + 16 * n, c, lda, wmma::mem_row_major);
  }
}

template <int D> __device__ __forceinline__ void zero_acc(float* Acc) {
  for (int e = threadIdx.x % 32; e < 16 * ldacc<D>(); e += 32) Acc[e] = 0.f;
}

// The pair of lanes on a warp's row r: columns half + 2 t of its tiles (two
// lanes a row, interleaved: two-way bank conflicts at most).
struct Lane {
  int r, half;
  __device__ Lane() : r((threadIdx.x % 32) >> 1), half(threadIdx.x & 1) {}
};
__device__ __forceinline__ float pair_sum(float v) { return v + __shfl_xor_sync(0xffffffffu, v, 1); }
__device__ __forceinline__ float pair_max(float v) { return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1)); }

// A warp's accumulator tile to x: row rr (when row0 + rr < T) times
// `mul` of lane pair rr, at x's element at + (row0 + rr) * rows; the lanes
// along a row (coalesced).
template <int D>
__device__ __forceinline__ void store_rows(const float* Acc, float mul, FOut x, int64_t at, int64_t rows,
                                           int64_t row0, int64_t T) {
  const int lane = threadIdx.x % 32;
  for (int rr = 0; rr < 16; ++rr) {
    const float f = __shfl_sync(0xffffffffu, mul, 2 * rr);
    if (row0 + rr >= T) break;
    for (int d = lane; d < D; d += 32) x.set(at + (row0 + rr) * rows + d, Acc[rr * ldacc<D>() + d] * f);
  }
}

// delta = rowsum(dO * O) of the row at element `at` of both, over the warp's
// lanes (coalesced), in every lane.
__device__ __forceinline__ float warp_delta(FIn dout, FIn out, int64_t at, int D) {
  float s = 0.f;
  for (int d = threadIdx.x % 32; d < D; d += 32) s = fmaf(dout[at + d], out[at + d], s);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  return s;
}

// A block's 64 query rows (blockIdx.y) of one head (blockIdx.x, bh of B H):
// where the head starts in q (out, dout, dq) and its key/value head in k and
// v, their row strides, the rows [i0, i1), warp w's first row and the lane's.
struct QueryBlock {
  int64_t bh, qoff, lq, lk, kvoff, ooff, lo, i0, i1, wi0, i;  // ooff, lo: out's and dout's
  __device__ QueryBlock(const Geo& g, int w, const Lane& ln) {
    bh = blockIdx.x;
    const int64_t b = bh / g.H, h = bh % g.H;
    qoff = g.qhead(b, h);
    lq = g.ldq();
    lk = g.ldk();
    kvoff = g.khead(b, h / (g.H / g.Hkv));
    ooff = g.head(b, h, g.H);
    lo = g.ld(g.H);
    i0 = int64_t(blockIdx.y) * kRows;
    i1 = min(g.T, i0 + kRows);
    wi0 = i0 + 16 * w;
    i = wi0 + ln.r;
  }
};

// No row of the warp's 16 from wi0 sees a key of the tile from j0: nothing to add.
__device__ __forceinline__ bool sees_none(const Geo& g, int64_t wi0, int64_t j0) {
  return wi0 >= g.T || j0 > min(wi0 + 15, g.T - 1) || j0 + kRows - 1 < first_key(wi0, g.window);
}

// bf16 WMMA needs sm_80; attention_tc_fits keeps older devices off these.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define FY_TC_UNSUPPORTED 1
#endif

template <class T, int D>
__global__ void __launch_bounds__(kThreads) tc_fwd(FIn q, FIn k, FIn v, FOut out, float* lse, Geo g) {
#ifdef FY_TC_UNSUPPORTED
  __trap();
#else
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int ld = ld16<D>(), lda = ldacc<D>();
  const int w = threadIdx.x / 32;
  Carve cv{smem};
  T *Qs = cv.take<T>(tile_bytes<D>()), *Ks = cv.take<T>(tile_bytes<D>()), *Vs = cv.take<T>(tile_bytes<D>());
  cv.p += size_t(w) * (kScoreBytes + kProbBytes + acc_bytes<D>());
  float* S = cv.take<float>(kScoreBytes);
  T* P = cv.take<T>(kProbBytes);
  float* O = cv.take<float>(acc_bytes<D>());

  const Lane ln;
  const QueryBlock qb(g, w, ln);
  const int64_t bh = qb.bh, qoff = qb.qoff, lq = qb.lq, lk = qb.lk, kvoff = qb.kvoff, i0 = qb.i0, i1 = qb.i1;
  const int64_t wi0 = qb.wi0, i = qb.i;
  load_rows<T, D>(Qs, q, qoff, lq, i0, g.T);
  zero_acc<D>(O);
  const float sl2 = g.scale * kLog2e;  // scores in log2 units: exp2
  float m = -INFINITY, l = 0.f;
  for (int64_t j0 = first_key(i0, g.window); j0 < i1; j0 += kRows) {
    __syncthreads();  // Q is in; the last key tile is read
    load_rows<T, D>(Ks, k, kvoff, lk, j0, g.T);
    load_rows<T, D>(Vs, v, kvoff, lk, j0, g.T);
    __syncthreads();
    if (sees_none(g, wi0, j0)) continue;
    rows_by_rows<T, D>(Qs + 16 * w * ld, Ks, S);
    __syncwarp();
    float* srow = S + ln.r * kLdF;
    float mt = -INFINITY;
    for (int c = ln.half; c < kRows; c += 2) {
      const float s = sees(i, j0 + c, g) ? srow[c] * sl2 : -INFINITY;
      srow[c] = s;
      mt = fmaxf(mt, s);
    }
    const float mn = fmaxf(m, pair_max(mt));
    // (No key seen yet: m and mn are -inf, and O and l are still 0.)
    const float alpha = mn == -INFINITY ? 1.f : exp2f(m - mn);
    float ps = 0.f;
    T* prow = P + ln.r * kLdP;
    for (int c = ln.half; c < kRows; c += 2) {
      const float p = srow[c] == -INFINITY ? 0.f : exp2f(srow[c] - mn);
      prow[c] = to16<T>(p);
      ps += p;
    }
    l = l * alpha + pair_sum(ps);
    m = mn;
    for (int d = ln.half; d < D; d += 2) O[ln.r * lda + d] *= alpha;
    __syncwarp();
    add_product<T, D>(P, Vs, O);
    __syncwarp();
  }
  store_rows<D>(O, l > 0.f ? 1.f / l : 0.f, out, qb.ooff, qb.lo, wi0, g.T);
  if (ln.half == 0 && i < g.T) lse[bh * g.T + i] = (m + log2f(l)) * kLn2;
#endif
}

// delta = rowsum(dO * O) of every query row, [B, H, T] as lse: a warp a row.
__global__ void __launch_bounds__(kThreads) tc_delta(FIn dout, FIn out, float* delta, Geo g) {
  const int64_t row = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row >= g.B * g.H * g.T) return;
  const int64_t bh = row / g.T, i = row % g.T, b = bh / g.H, h = bh % g.H;
  const float d = warp_delta(dout, out, g.head(b, h, g.H) + i * g.ld(g.H), g.D);
  if (threadIdx.x % 32 == 0) delta[row] = d;
}

// dk and dv of 64 keys of one key/value head (a warp's 16 each): over the
// query heads of its group and the query tiles that see the keys.
template <class T, int D>
__global__ void __launch_bounds__(kThreads)
    tc_grad_kv(FIn q, FIn k, FIn v, const float* lse, const float* delta, FIn dout, FOut dk, FOut dv, Geo g) {
#ifdef FY_TC_UNSUPPORTED
  __trap();
#else
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int ld = ld16<D>();
  const int w = threadIdx.x / 32;
  Carve cv{smem};
  T *Ks = cv.take<T>(tile_bytes<D>()), *Vs = cv.take<T>(tile_bytes<D>()), *Qs = cv.take<T>(tile_bytes<D>()),
    *dOs = cv.take<T>(tile_bytes<D>());
  float *lse_s = cv.take<float>(kRows * sizeof(float)), *delta_s = cv.take<float>(kRows * sizeof(float));
  cv.p += size_t(w) * (kScoreBytes + 2 * kProbBytes + 2 * acc_bytes<D>());
  float* F = cv.take<float>(kScoreBytes);
  T *Pt = cv.take<T>(kProbBytes), *dSt = cv.take<T>(kProbBytes);
  float *dKa = cv.take<float>(acc_bytes<D>()), *dVa = cv.take<float>(acc_bytes<D>());

  const int64_t bkv = blockIdx.x, b = bkv / g.Hkv, kvh = bkv % g.Hkv, group = g.H / g.Hkv;
  const int64_t j0 = int64_t(blockIdx.y) * kRows, j1 = min(g.T, j0 + kRows);
  const int64_t lq = g.ldq(), lk = g.ldk(), lo = g.ld(g.H), kvoff = g.khead(b, kvh);
  const Lane ln;
  const int64_t wj0 = j0 + 16 * w, j = wj0 + ln.r;  // the warp's first key, this lane's
  load_rows<T, D>(Ks, k, kvoff, lk, j0, g.T);
  load_rows<T, D>(Vs, v, kvoff, lk, j0, g.T);
  zero_acc<D>(dKa);
  zero_acc<D>(dVa);
  const float sl2 = g.scale * kLog2e;
  // The last query that sees a key of the tile.
  const int64_t q_end = g.window > 0 ? min(g.T, j1 - 1 + g.window) : g.T;
  for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
    const int64_t bh = b * g.H + h, qoff = g.qhead(b, h), ooff = g.head(b, h, g.H);
    for (int64_t i0 = j0; i0 < q_end; i0 += kRows) {
      __syncthreads();  // the last query tile is read
      load_rows<T, D>(Qs, q, qoff, lq, i0, g.T);
      load_rows<T, D>(dOs, dout, ooff, lo, i0, g.T);
      // The tile's rows' statistics (lse in log2 units).
      if (threadIdx.x < kRows) {
        const int64_t qi = i0 + threadIdx.x;
        delta_s[threadIdx.x] = qi < g.T ? delta[bh * g.T + qi] : 0.f;
        lse_s[threadIdx.x] = qi < g.T ? lse[bh * g.T + qi] * kLog2e : 0.f;
      }
      __syncthreads();
      // No query of the tile sees a key of this warp's: nothing to add
      // (causally the tile's queries, from j0 on, always see some; a window
      // may end before them).
      if (wj0 >= g.T || (g.window > 0 && i0 > wj0 + 15 + g.window - 1)) continue;
      // P^T = exp(K Q^T scale - lse): rows the warp's keys, columns the queries.
      rows_by_rows<T, D>(Ks + 16 * w * ld, Qs, F);
      __syncwarp();
      float p[kRows / 2];
#pragma unroll
      for (int t = 0; t < kRows / 2; ++t) {
        const int c = ln.half + 2 * t;
        p[t] = sees(i0 + c, j, g) ? exp2f(F[ln.r * kLdF + c] * sl2 - lse_s[c]) : 0.f;
        Pt[ln.r * kLdP + c] = to16<T>(p[t]);
      }
      __syncwarp();
      // dP^T = V dO^T, and dS^T = P^T (dP^T - delta).
      rows_by_rows<T, D>(Vs + 16 * w * ld, dOs, F);
      __syncwarp();
#pragma unroll
      for (int t = 0; t < kRows / 2; ++t) {
        const int c = ln.half + 2 * t;
        dSt[ln.r * kLdP + c] = to16<T>(p[t] * (F[ln.r * kLdF + c] - delta_s[c]));
      }
      __syncwarp();
      add_product<T, D>(Pt, dOs, dVa);  // dV += P^T dO
      add_product<T, D>(dSt, Qs, dKa);  // dK += dS^T Q
      __syncwarp();
    }
  }
  store_rows<D>(dKa, g.scale, dk, kvoff, lk, wj0, g.T);
  store_rows<D>(dVa, 1.f, dv, kvoff, lk, wj0, g.T);
#endif
}

// dq of 64 query rows (a warp's 16 each): over the key tiles they see.
template <class T, int D>
__global__ void __launch_bounds__(kThreads)
    tc_grad_q(FIn q, FIn k, FIn v, const float* lse, const float* delta_g, FIn dout, FOut dq, Geo g) {
#ifdef FY_TC_UNSUPPORTED
  __trap();
#else
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int ld = ld16<D>();
  const int w = threadIdx.x / 32;
  Carve cv{smem};
  T *Qs = cv.take<T>(tile_bytes<D>()), *dOs = cv.take<T>(tile_bytes<D>()), *Ks = cv.take<T>(tile_bytes<D>()),
    *Vs = cv.take<T>(tile_bytes<D>());
  cv.p += size_t(w) * (kScoreBytes + kProbBytes + acc_bytes<D>());
  float* F = cv.take<float>(kScoreBytes);
  T* dS = cv.take<T>(kProbBytes);
  float* dQa = cv.take<float>(acc_bytes<D>());

  const Lane ln;
  const QueryBlock qb(g, w, ln);
  const int64_t bh = qb.bh, qoff = qb.qoff, lq = qb.lq, lk = qb.lk, kvoff = qb.kvoff, i0 = qb.i0, i1 = qb.i1;
  const int64_t wi0 = qb.wi0, i = qb.i;
  load_rows<T, D>(Qs, q, qoff, lq, i0, g.T);
  load_rows<T, D>(dOs, dout, qb.ooff, qb.lo, i0, g.T);
  zero_acc<D>(dQa);
  const float delta = i < g.T ? delta_g[bh * g.T + i] : 0.f;
  const float lse2 = i < g.T ? lse[bh * g.T + i] * kLog2e : 0.f;
  const float sl2 = g.scale * kLog2e;
  for (int64_t j0 = first_key(i0, g.window); j0 < i1; j0 += kRows) {
    __syncthreads();
    load_rows<T, D>(Ks, k, kvoff, lk, j0, g.T);
    load_rows<T, D>(Vs, v, kvoff, lk, j0, g.T);
    __syncthreads();
    if (sees_none(g, wi0, j0)) continue;
    rows_by_rows<T, D>(Qs + 16 * w * ld, Ks, F);  // S = Q K^T
    __syncwarp();
    float p[kRows / 2];
#pragma unroll
    for (int t = 0; t < kRows / 2; ++t) {
      const int c = ln.half + 2 * t;
      p[t] = sees(i, j0 + c, g) ? exp2f(F[ln.r * kLdF + c] * sl2 - lse2) : 0.f;
    }
    __syncwarp();
    rows_by_rows<T, D>(dOs + 16 * w * ld, Vs, F);  // dP = dO V^T
    __syncwarp();
#pragma unroll
    for (int t = 0; t < kRows / 2; ++t) {
      const int c = ln.half + 2 * t;
      dS[ln.r * kLdP + c] = to16<T>(p[t] * (F[ln.r * kLdF + c] - delta));
    }
    __syncwarp();
    add_product<T, D>(dS, Ks, dQa);  // dQ += dS K
    __syncwarp();
  }
  store_rows<D>(dQa, g.scale, dq, qoff, lq, wi0, g.T);
#endif
}

// Opt-in shared memory per block, and compute capability, of the current device.
struct DeviceCaps {
  int smem = 0, major = 0;
};
DeviceCaps caps() {
  int dev = 0;
  FY_CUDA_CHECK(cudaGetDevice(&dev));
  DeviceCaps c;
  FY_CUDA_CHECK(cudaDeviceGetAttribute(&c.smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  FY_CUDA_CHECK(cudaDeviceGetAttribute(&c.major, cudaDevAttrComputeCapabilityMajor, dev));
  return c;
}

template <class Kernel> void allow_smem(Kernel* kern, size_t bytes) {
  FY_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

dim3 grid(int64_t T, int64_t heads) { return dim3(unsigned(heads), unsigned((T + kRows - 1) / kRows)); }

template <class T> struct Tag {
  using type = T;
};

// Calls go(Tag<T>, D) with the kernels' instantiation for f and D.
template <class Go> void dispatch(Fmt f, int D, Go&& go) {
  auto by_d = [&](auto tag) {
    if (D == 64)
      go(tag, std::integral_constant<int, 64>{});
    else
      go(tag, std::integral_constant<int, 128>{});
  };
  if (f == Fmt::F16)
    by_d(Tag<__half>{});
  else
    by_d(Tag<__nv_bfloat16>{});
}

}  // namespace

bool attention_tc_fits(int D, int64_t rows, bool grad) {
  if (D != 64 && D != 128) return false;
  // The backward's delta, a float a query row, goes in matmul's scratch.
  if (grad && rows * int64_t(sizeof(float)) > int64_t(kMatmulConvertBytes)) return false;
  static const DeviceCaps c = caps();
  if (c.major < 8) return false;
  const size_t need = D == 64 ? (grad ? std::max(kv_bytes<64>(), q_bytes<64>()) : fwd_bytes<64>())
                              : (grad ? std::max(kv_bytes<128>(), q_bytes<128>()) : fwd_bytes<128>());
  return need <= size_t(c.smem);
}

void attention_tc(const Geo& g, Fmt f, FIn q, FIn k, FIn v, FOut out, float* lse) {
  dispatch(f, g.D, [&](auto t, auto d) {
    using T = typename decltype(t)::type;
    constexpr int D = decltype(d)::value;
    auto kern = tc_fwd<T, D>;
    allow_smem(kern, fwd_bytes<D>());
    kern<<<grid(g.T, g.B * g.H), kThreads, fwd_bytes<D>(), current_stream()>>>(q, k, v, out, lse, g);
  });
}

void attention_grad_tc(const Geo& g, Fmt f, FIn q, FIn k, FIn v, FIn out, const float* lse, FIn dout, FOut dq,
                       FOut dk, FOut dv) {
  dispatch(f, g.D, [&](auto t, auto d) {
    using T = typename decltype(t)::type;
    constexpr int D = decltype(d)::value;
    auto kv = tc_grad_kv<T, D>;
    auto qk = tc_grad_q<T, D>;
    allow_smem(kv, kv_bytes<D>());
    allow_smem(qk, q_bytes<D>());
    // delta once into the stream's scratch (attention_tc_fits checked its size).
    float* delta = static_cast<float*>(convert_scratch());
    const int64_t rows = g.B * g.H * g.T;
    tc_delta<<<unsigned((rows + kWarps - 1) / kWarps), kThreads, 0, current_stream()>>>(dout, out, delta, g);
    FY_CUDA_LAUNCHED("attention_grad");
    kv<<<grid(g.T, g.B * g.Hkv), kThreads, kv_bytes<D>(), current_stream()>>>(q, k, v, lse, delta, dout, dk, dv, g);
    FY_CUDA_LAUNCHED("attention_grad");
    qk<<<grid(g.T, g.B * g.H), kThreads, q_bytes<D>(), current_stream()>>>(q, k, v, lse, delta, dout, dq, g);
  });
}

}  // namespace fy::cuda::detail
