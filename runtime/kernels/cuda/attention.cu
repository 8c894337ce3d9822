// Fused causal attention on the GPU, forward and backward, without a T x T
// tensor (FlashAttention-2's scheme): a tile of 32 query rows meets tiles of
// 32 keys in shared memory; the forward's online softmax keeps each row's
// log-sum-exp, from which the backward recomputes the probabilities a tile
// at a time. fp32 sums on the CUDA cores over operands stored in fp32 or,
// where fy-half-activations stores them so, 16 bits (half.cuh: widened as
// they are loaded into the tiles, results narrowed as they are stored); the
// log-sum-exp is fp32. These match the CPU's kernels (cpu/attention.cpp)
// within rounding.
//
// Deterministic: each output element is summed by one thread in a fixed
// order. The backward walks the tiles twice, by key tile for dk and dv
// (summed over the group's query heads, then their tiles, in order) and by
// query tile for dq, rather than adding dq's pieces atomically.
#include "abi/sizes.h"
#include "kernels/cuda/attention_geo.cuh"
#include "kernels/cuda/attention_tc.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/kernels.h"

namespace fy::cuda {
using namespace detail;

namespace {

constexpr int kTile = 32;      // query rows of a tile, and keys of a tile
constexpr int kThreads = 128;  // four a row: a thread's scores are the columns lane + 4 j
constexpr int kLanes = 4;
constexpr int kCols = kTile / kLanes;
constexpr int kMaxD = int(kAttentionMaxHeadDim);
constexpr int kLdS = kTile + 1;  // a score tile's row stride

// Rows [row0, row0 + kTile) of a head (starting at x's element `head`, its
// rows `rows` apart) into shared memory, rows padded to ld = D + 1 floats (a
// warp's eight rows fall in different banks); rows past T are zero.
__device__ void load_tile(float* s, FIn x, int64_t head, int64_t rows, int64_t row0, const Geo& g) {
  const int ld = g.D + 1;
  for (int e = threadIdx.x; e < kTile * g.D; e += kThreads) {
    const int r = e / g.D, c = e - r * g.D;
    s[r * ld + c] = row0 + r < g.T ? x[head + (row0 + r) * rows + c] : 0.f;
  }
}

// This thread's products of tile rows a[r] . b[c], r = its row, c = lane + 4 j, times `scale`.
__device__ __forceinline__ void tile_products(const float* a, const float* b, const Geo& g, float scale,
                                              float out[kCols]) {
  const int ld = g.D + 1, r = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;
  float acc[kCols] = {};
  for (int x = 0; x < g.D; ++x) {
    const float av = a[r * ld + x];
#pragma unroll
    for (int j = 0; j < kCols; ++j) acc[j] = fmaf(av, b[(lane + kLanes * j) * ld + x], acc[j]);
  }
#pragma unroll
  for (int j = 0; j < kCols; ++j) out[j] = acc[j] * scale;
}

// The sum over a row's four threads, in every one of them.
__device__ __forceinline__ float row_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
__device__ __forceinline__ float row_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

// delta = rowsum(dO * O) of query row i of the head at `head` (in all four
// threads of its row).
__device__ __forceinline__ float row_delta(FIn dout, FIn out, int64_t head, int64_t rows, int64_t i, const Geo& g) {
  const int lane = threadIdx.x % kLanes;
  float s = 0.f;
  if (i < g.T)
    for (int d = lane; d < g.D; d += kLanes) s = fmaf(dout[head + i * rows + d], out[head + i * rows + d], s);
  return row_sum(s);
}

// Shared memory of a kernel with `tiles` row tiles and `scores` score tiles.
size_t tiles_bytes(int D, int tiles, int scores) {
  return (size_t(tiles) * kTile * size_t(D + 1) + size_t(scores) * kTile * kLdS) * sizeof(float);
}


// A block's query tile (blockIdx.y) of head bh (blockIdx.x): its rows
// [i0, i1), this thread's row i, where head bh starts in q (out, dout, dq)
// and its key and value head in k and v, and their row strides.
struct QueryTile {
  int64_t bh, i0, i1, i, qoff, lq, lk, kvoff, ooff, lo;  // ooff, lo: out's and dout's
  FIn k, v;
};
__device__ __forceinline__ QueryTile query_tile(FIn k, FIn v, const Geo& g) {
  QueryTile t;
  t.bh = blockIdx.x;
  const int64_t b = t.bh / g.H, h = t.bh % g.H;
  t.qoff = g.qhead(b, h);
  t.lq = g.ldq();
  t.lk = g.ldk();
  t.kvoff = g.khead(b, h / (g.H / g.Hkv));
  t.ooff = g.head(b, h, g.H);
  t.lo = g.ld(g.H);
  t.k = k;
  t.v = v;
  t.i0 = int64_t(blockIdx.y) * kTile;
  t.i1 = min(g.T, t.i0 + kTile);
  t.i = t.i0 + threadIdx.x / kLanes;
  return t;
}

// The next key tile's keys and values, once every thread is done with the last.
__device__ __forceinline__ void load_keys(float* Ks, float* Vs, const QueryTile& t, int64_t j0, const Geo& g) {
  __syncthreads();
  load_tile(Ks, t.k, t.kvoff, t.lk, j0, g);
  load_tile(Vs, t.v, t.kvoff, t.lk, j0, g);
  __syncthreads();
}

// acc[kk] += sum over the tile's rows c of w[c * stride] X[c][lane + 4 kk]:
// a row of probabilities (stride 1) or a column of them (stride kLdS)
// times a tile.
template <int NK>
__device__ __forceinline__ void add_products(const float* w, int stride, const float* X, const Geo& g,
                                             float acc[NK]) {
  const int ld = g.D + 1, lane = threadIdx.x % kLanes;
  for (int c = 0; c < kTile; ++c) {
    const float p = w[c * stride];
#pragma unroll
    for (int kk = 0; kk < NK; ++kk) {
      const int d = lane + kLanes * kk;
      if (d < g.D) acc[kk] = fmaf(p, X[c * ld + d], acc[kk]);
    }
  }
}

// Shared memory: row tiles [kTile][D + 1] first, then score tiles [kTile][kLdS].
__device__ __forceinline__ float* row_tile(float* sm, int n, const Geo& g) { return sm + n * kTile * (g.D + 1); }
__device__ __forceinline__ float* score_tile(float* sm, int rows, int n, const Geo& g) {
  return row_tile(sm, rows, g) + n * kTile * kLdS;
}

// The backward's tile of query rows against keys from j0: this thread's
// probabilities P = exp(scores - lse) (into Ps when given) and dS = P (dP -
// delta), dP = dO V^T, into row r of the score tiles.
__device__ __forceinline__ void tile_grads(const float* Qs, const float* Ks, const float* dOs, const float* Vs,
                                           const Geo& g, int64_t i, int64_t j0, float lse, float delta, float* Ps,
                                           float* dSs) {
  const int r = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;
  float s[kCols], dp[kCols];
  tile_products(Qs, Ks, g, g.scale, s);
  tile_products(dOs, Vs, g, 1.f, dp);
#pragma unroll
  for (int j = 0; j < kCols; ++j) {
    const int c = lane + kLanes * j;
    const float p = sees(i, j0 + c, g) ? expf(s[j] - lse) : 0.f;
    if (Ps) Ps[r * kLdS + c] = p;
    dSs[r * kLdS + c] = p * (dp[j] - delta);
  }
}

// NK: a thread's accumulators, ceil(D / 4) at most (its columns lane + 4 k).
template <int NK>
__global__ void __launch_bounds__(kThreads)
    attention_fwd(FIn q, FIn k, FIn v, FOut out, float* lse, Geo g) {
  extern __shared__ float sm[];
  const int r = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;
  float *Qs = row_tile(sm, 0, g), *Ks = row_tile(sm, 1, g), *Vs = row_tile(sm, 2, g), *Ps = score_tile(sm, 3, 0, g);
  const QueryTile t = query_tile(k, v, g);
  const int64_t bh = t.bh, i = t.i;
  load_tile(Qs, q, t.qoff, t.lq, t.i0, g);
  float m = -INFINITY, l = 0.f, o[NK] = {};
  for (int64_t j0 = first_key(t.i0, g.window); j0 < t.i1; j0 += kTile) {
    load_keys(Ks, Vs, t, j0, g);
    float s[kCols];
    tile_products(Qs, Ks, g, g.scale, s);
    float mt = -INFINITY;
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      if (!sees(i, j0 + lane + kLanes * j, g)) s[j] = -INFINITY;
      mt = fmaxf(mt, s[j]);
    }
    const float mn = fmaxf(m, row_max(mt));
    // (No key seen yet: m and mn are -inf, and o and l are still 0.)
    const float alpha = mn == -INFINITY ? 1.f : expf(m - mn);
    float ps = 0.f;
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      const float p = s[j] == -INFINITY ? 0.f : expf(s[j] - mn);
      Ps[r * kLdS + lane + kLanes * j] = p;
      ps += p;
    }
    l = l * alpha + row_sum(ps);
    m = mn;
    __syncwarp();  // the row's probabilities, written by its four threads
#pragma unroll
    for (int kk = 0; kk < NK; ++kk) o[kk] *= alpha;
    add_products<NK>(Ps + r * kLdS, 1, Vs, g, o);
  }
  if (i >= g.T) return;
  const float inv = 1.f / l;
  const int64_t oh = t.ooff + i * t.lo;
#pragma unroll
  for (int kk = 0; kk < NK; ++kk) {
    const int d = lane + kLanes * kk;
    if (d < g.D) out.set(oh + d, o[kk] * inv);
  }
  if (lane == 0) lse[bh * g.T + i] = m + logf(l);
}

// dk and dv of a tile of keys of one key/value head: over the query heads of
// its group and the query tiles that see the keys.
template <int NK>
__global__ void __launch_bounds__(kThreads)
    attention_grad_kv(FIn q, FIn k, FIn v, FIn out, const float* lse, FIn dout, FOut dk, FOut dv, Geo g) {
  extern __shared__ float sm[];
  const int r = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;
  float *Ks = row_tile(sm, 0, g), *Vs = row_tile(sm, 1, g), *Qs = row_tile(sm, 2, g), *dOs = row_tile(sm, 3, g);
  float *Ps = score_tile(sm, 4, 0, g), *dSs = score_tile(sm, 4, 1, g);
  const int64_t bkv = blockIdx.x, b = bkv / g.Hkv, kvh = bkv % g.Hkv, group = g.H / g.Hkv;
  const int64_t j0 = int64_t(blockIdx.y) * kTile, j1 = min(g.T, j0 + kTile);
  const int64_t lq = g.ldq(), lk = g.ldk(), lo = g.ld(g.H), kvoff = g.khead(b, kvh);
  load_tile(Ks, k, kvoff, lk, j0, g);
  load_tile(Vs, v, kvoff, lk, j0, g);
  // The last query that sees a key of the tile.
  const int64_t q_end = g.window > 0 ? min(g.T, j1 - 1 + g.window) : g.T;
  float dka[NK] = {}, dva[NK] = {};
  for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
    const int64_t bh = b * g.H + h;
    const int64_t qoff = g.qhead(b, h), ooff = g.head(b, h, g.H);
    for (int64_t i0 = j0; i0 < q_end; i0 += kTile) {
      const int64_t i = i0 + r;
      __syncthreads();  // the last tile's rows and scores are read
      load_tile(Qs, q, qoff, lq, i0, g);
      load_tile(dOs, dout, ooff, lo, i0, g);
      const float delta = row_delta(dout, out, ooff, lo, i, g);
      const float l = i < g.T ? lse[bh * g.T + i] : 0.f;
      __syncthreads();
      tile_grads(Qs, Ks, dOs, Vs, g, i, j0, l, delta, Ps, dSs);
      __syncthreads();
      // This thread's key is the tile's row r: its sums over the query rows.
      add_products<NK>(Ps + r, kLdS, dOs, g, dva);
      add_products<NK>(dSs + r, kLdS, Qs, g, dka);
    }
  }
  const int64_t j = j0 + r;
  if (j >= g.T) return;
#pragma unroll
  for (int kk = 0; kk < NK; ++kk) {
    const int d = lane + kLanes * kk;
    if (d >= g.D) continue;
    dk.set(kvoff + j * lk + d, dka[kk] * g.scale);
    dv.set(kvoff + j * lk + d, dva[kk]);
  }
}

// dq of a tile of query rows: over the key tiles they see.
template <int NK>
__global__ void __launch_bounds__(kThreads)
    attention_grad_q(FIn q, FIn k, FIn v, FIn out, const float* lse, FIn dout, FOut dq, Geo g) {
  extern __shared__ float sm[];
  const int r = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;
  float *Qs = row_tile(sm, 0, g), *dOs = row_tile(sm, 1, g), *Ks = row_tile(sm, 2, g), *Vs = row_tile(sm, 3, g);
  float* dSs = score_tile(sm, 4, 0, g);
  const QueryTile t = query_tile(k, v, g);
  const int64_t bh = t.bh, i = t.i;
  load_tile(Qs, q, t.qoff, t.lq, t.i0, g);
  load_tile(dOs, dout, t.ooff, t.lo, t.i0, g);
  const float delta = row_delta(dout, out, t.ooff, t.lo, i, g);
  const float l = i < g.T ? lse[bh * g.T + i] : 0.f;
  float dqa[NK] = {};
  for (int64_t j0 = first_key(t.i0, g.window); j0 < t.i1; j0 += kTile) {
    load_keys(Ks, Vs, t, j0, g);
    tile_grads(Qs, Ks, dOs, Vs, g, i, j0, l, delta, nullptr, dSs);
    __syncwarp();  // the row's dS, written by its four threads
    add_products<NK>(dSs + r * kLdS, 1, Ks, g, dqa);
  }
  if (i >= g.T) return;
#pragma unroll
  for (int kk = 0; kk < NK; ++kk) {
    const int d = lane + kLanes * kk;
    if (d < g.D) dq.set(t.qoff + i * t.lq + d, dqa[kk] * g.scale);
  }
}

// Shared memory beyond the default 48 KiB (a host-side setting, cheap to repeat).
template <class Kernel>
void allow_smem(Kernel* kern, size_t bytes) {
  if (bytes > 48 * 1024)
    FY_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

// The common limits of both layouts' geometry.
void check_geo(const char* op, const Geo& g) {
  check(g.D >= 1 && g.D <= kMaxD, op, "head dims up to " + std::to_string(kMaxD) + ", got " + std::to_string(g.D));
  check(g.Hkv > 0 && g.H % g.Hkv == 0, op, "q's heads must be a multiple of k's (grouped-query heads)");
  check(g.window >= 0, op, "the window must be 0 (causal) or positive");
  // (Heads on the grid's x, tiles on its y, whose limit is 65535.)
  check((g.T + kTile - 1) / kTile <= 65535, op, "T must be at most " + std::to_string(65535 * kTile));
}

Geo check_dims(const char* op, const View& q, const View& k, const View& v, const View& out, const View& lse,
               double scale, int64_t window, bool seq_major) {
  for (const View* t : {&q, &k, &v, &out}) fmt_of(*t, op, "each of q, k, v and out");
  check_dtype(lse, DType::F32, op, "lse");
  check(q.shape.rank == 4 && k.shape.rank == 4 && v.shape.rank == 4, op,
        seq_major ? "q, k, v must be [B, T, H, D]" : "q, k, v must be [B, H, T, D]");
  const int h = seq_major ? 2 : 1, t = seq_major ? 1 : 2;
  Geo g{q.shape[0], q.shape[h], k.shape[h], q.shape[t], int(q.shape[3]), float(scale), window, seq_major};
  check(k.shape == v.shape && k.shape[0] == g.B && k.shape[t] == g.T && k.shape[3] == g.D, op,
        "k and v must have q's B, T and D, with Hkv heads");
  check(out.shape == q.shape, op, "out must have q's shape");
  check(lse.shape.rank == 3 && lse.shape[0] == g.B && lse.shape[1] == g.H && lse.shape[2] == g.T, op,
        "lse must be [B, H, T]");
  check_geo(op, g);
  return g;
}

dim3 grid(int64_t T, int64_t heads) { return dim3(unsigned(heads), unsigned((T + kTile - 1) / kTile)); }

// The 16-bit format attention_tc runs these operands' products in, or F32
// where it does not take them (these kernels then run): their one 16-bit
// format where some are stored in 16 bits, else the matmuls' precision's
// when that is BF16 or FP16 (autocast runs attention so).
Fmt tc_format(std::initializer_list<const View*> views, const Geo& g, bool grad) {
  if (!attention_tc_fits(g.D, g.B * g.H * g.T, grad)) return Fmt::F32;
  Fmt f = Fmt::F32;
  for (const View* v : views) {
    if (!is16(*v)) continue;
    const Fmt x = v->dtype == DType::BF16 ? Fmt::BF16 : Fmt::F16;
    // Mixed formats, or a 16-bit operand its 16-byte loads cannot take.
    if ((f != Fmt::F32 && f != x) || reinterpret_cast<uintptr_t>(v->data) % 16 != 0) return Fmt::F32;
    f = x;
  }
  if (f != Fmt::F32) return f;
  const MatmulPrecision p = matmul_precision();
  return p == MatmulPrecision::BF16 ? Fmt::BF16 : p == MatmulPrecision::FP16 ? Fmt::F16 : Fmt::F32;
}

size_t tc_calls = 0;

// The forward and the backward over operands laid out as g says, on the
// tensor cores in format f, or (F32) on the CUDA cores.
void forward(const Geo& g, Fmt f, FIn q, FIn k, FIn v, FOut out, float* lse) {
  if (g.T == 0 || g.B * g.H == 0) return;
  if (f != Fmt::F32) {
    attention_tc(g, f, q, k, v, out, lse);
    ++tc_calls;
    FY_CUDA_LAUNCHED("attention");
    return;
  }
  const size_t bytes = tiles_bytes(g.D, 3, 1);
  auto go = [&](auto kern) {
    allow_smem(kern, bytes);
    kern<<<grid(g.T, g.B * g.H), kThreads, bytes, current_stream()>>>(q, k, v, out, lse, g);
  };
  if (g.D <= 64)
    go(attention_fwd<16>);
  else
    go(attention_fwd<32>);
  FY_CUDA_LAUNCHED("attention");
}

void backward(const Geo& g, Fmt f, FIn q, FIn k, FIn v, FIn out, const float* lse, FIn dout, FOut dq, FOut dk,
              FOut dv) {
  if (g.T == 0 || g.B * g.H == 0) return;
  if (f != Fmt::F32) {
    attention_grad_tc(g, f, q, k, v, out, lse, dout, dq, dk, dv);
    ++tc_calls;
    FY_CUDA_LAUNCHED("attention_grad");
    return;
  }
  cudaStream_t s = current_stream();
  const size_t kv_bytes = tiles_bytes(g.D, 4, 2), q_bytes = tiles_bytes(g.D, 4, 1);
  auto go = [&](auto kv, auto qk) {
    allow_smem(kv, kv_bytes);
    allow_smem(qk, q_bytes);
    kv<<<grid(g.T, g.B * g.Hkv), kThreads, kv_bytes, s>>>(q, k, v, out, lse, dout, dk, dv, g);
    FY_CUDA_LAUNCHED("attention_grad");
    qk<<<grid(g.T, g.B * g.H), kThreads, q_bytes, s>>>(q, k, v, out, lse, dout, dq, g);
  };
  if (g.D <= 64)
    go(attention_grad_kv<16>, attention_grad_q<16>);
  else
    go(attention_grad_kv<32>, attention_grad_q<32>);
  FY_CUDA_LAUNCHED("attention_grad");
}

// x's element n on: the heads of a packed qkv after its first.
FIn shifted(FIn x, int64_t n) {
  x.p = static_cast<const char*>(x.p) + n * (x.f == Fmt::F32 ? 4 : 2);
  return x;
}
FOut shifted(FOut x, int64_t n) {
  x.p = static_cast<char*>(x.p) + n * (x.f == Fmt::F32 ? 4 : 2);
  return x;
}

// The geometry of a packed qkv [B, T, H + 2 Hkv, D] beside out [B, T, H, D],
// and its sizes in p.
Geo packed_geo(const char* op, const View& qkv, const View& out, const View& lse, int64_t kv_heads, double scale,
               int64_t window, cpu::detail::PackedQKV& p) {
  fmt_of(qkv, op, "qkv");
  fmt_of(out, op, "out");
  check_dtype(lse, DType::F32, op, "lse");
  p = host_shapes([&] { return cpu::detail::packed_qkv(op, qkv, out, lse, kv_heads, window); });
  Geo g{p.B, p.H, p.Hkv, p.T, int(p.D), float(scale), window, true, p.Hrow};
  check_geo(op, g);
  return g;
}

}  // namespace

size_t attention_tensor_core_calls() { return tc_calls; }

void attention(View q, View k, View v, View out, View lse, double scale, int64_t window, bool seq_major) {
  const char* op = "attention";
  const Geo g = check_dims(op, q, k, v, out, lse, scale, window, seq_major);
  forward(g, tc_format({&q, &k, &v, &out}, g, false), fin(q, op, "q"), fin(k, op, "k"), fin(v, op, "v"),
          fout(out, op, "out"), mf(lse));
}

void attention_grad(View q, View k, View v, View out, View lse, View dout, View dq, View dk, View dv, double scale,
                    int64_t window, bool seq_major) {
  const char* op = "attention_grad";
  const Geo g = check_dims(op, q, k, v, out, lse, scale, window, seq_major);
  for (const View* t : {&dout, &dq, &dk, &dv}) fmt_of(*t, op, "each of dout, dq, dk and dv");
  check(dout.shape == q.shape && dq.shape == q.shape && dk.shape == k.shape && dv.shape == v.shape, op,
        "dout and dq must have q's shape, dk and dv k's");
  backward(g, tc_format({&q, &k, &v, &out, &dout, &dq, &dk, &dv}, g, true), fin(q, op, "q"), fin(k, op, "k"),
           fin(v, op, "v"), fin(out, op, "out"), cf(lse), fin(dout, op, "dout"), fout(dq, op, "dq"),
           fout(dk, op, "dk"), fout(dv, op, "dv"));
}

void attention_qkv(View qkv, View out, View lse, int64_t kv_heads, double scale, int64_t window) {
  const char* op = "attention_qkv";
  cpu::detail::PackedQKV p;
  const Geo g = packed_geo(op, qkv, out, lse, kv_heads, scale, window, p);
  const FIn q = fin(qkv, op, "qkv");
  forward(g, tc_format({&qkv, &out}, g, false), q, shifted(q, p.k0()), shifted(q, p.v0()), fout(out, op, "out"),
          mf(lse));
}

void attention_qkv_grad(View qkv, View out, View lse, View dout, View dqkv, int64_t kv_heads, double scale,
                        int64_t window) {
  const char* op = "attention_qkv_grad";
  cpu::detail::PackedQKV p;
  const Geo g = packed_geo(op, qkv, out, lse, kv_heads, scale, window, p);
  fmt_of(dout, op, "dout");
  fmt_of(dqkv, op, "dqkv");
  check(dout.shape == out.shape && dqkv.shape == qkv.shape, op, "dout must have out's shape, dqkv qkv's");
  const FIn q = fin(qkv, op, "qkv");
  const FOut dq = fout(dqkv, op, "dqkv");
  backward(g, tc_format({&qkv, &out, &dout, &dqkv}, g, true), q, shifted(q, p.k0()), shifted(q, p.v0()),
           fin(out, op, "out"), cf(lse), fin(dout, op, "dout"), dq, shifted(dq, p.k0()), shifted(dq, p.v0()));
}

}  // namespace fy::cuda
