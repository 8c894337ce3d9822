// reduce_to on the device: sum (or mean) of x over the dims where y has 1.
// Deterministic without atomics: each output is summed in an order fixed by
// the shapes alone (per-thread runs, then fixed trees). Sums are kept in
// double, as on the CPU, so results nearly always round to the CPU's floats.
#include <cstdint>
#include <limits>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/unary.cuh"

namespace fy::cuda {
namespace {

namespace cd = ::fy::cpu::detail;
using detail::check;
using detail::check_dtype;
using detail::bias_len;
using detail::check_numel;
using detail::current_stream;
using detail::grid_for;
using detail::aligned16;
using detail::host_shapes;
using detail::FIn;
using detail::fin;
using detail::FOut;
using detail::fout;
using detail::unary_bwd;
using detail::with_unop;

constexpr int kThreads = 256;
constexpr unsigned kFull = 0xffffffffu;


inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(kFull, v, off);
  return v;  // lane 0 holds the total
}

__device__ __forceinline__ int64_t global_warp() { return (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; }
__device__ __forceinline__ int64_t warp_count() { return (int64_t(gridDim.x) * blockDim.x) >> 5; }

// ---- rows: x as [B, N] -> y [B] ----------------------------------------------------
// One warp per (row, chunk of the row); lanes take elements (or float4s)
// round-robin, then a shuffle tree. With several chunks per row the warp's
// sum goes to part[row * nchunk + chunk] for k_combine.
template <int V>
__global__ void k_rows(const float* x, int64_t B, int64_t N, int64_t chunk, int64_t nchunk, double* part, float* y,
                       double div) {
  const int lane = threadIdx.x & 31;
  for (int64_t w = global_warp(); w < B * nchunk; w += warp_count()) {
    const int64_t b = w / nchunk, k = w - b * nchunk;
    const int64_t start = k * chunk, end = start + chunk < N ? start + chunk : N;
    const float* row = x + b * N;
    double acc = 0.0;
    if constexpr (V == 4) {
      for (int64_t i = start + 4 * lane; i < end; i += 128) {
        const float4 v = *reinterpret_cast<const float4*>(row + i);
        acc += double(v.x);
        acc += double(v.y);
        acc += double(v.z);
        acc += double(v.w);
      }
    } else {
      for (int64_t i = start + lane; i < end; i += 32) acc += double(row[i]);
    }
    acc = warp_sum(acc);
    if (lane == 0) {
      if (part) part[w] = acc;
      else y[b] = float(acc / div);
    }
  }
}

// V consecutive floats, loaded in one instruction.
template <int V> struct VecT { using type = float; };
template <> struct VecT<4> { using type = float4; };
template <int V> using Vec = typename VecT<V>::type;
template <int V> __device__ __forceinline__ Vec<V> load(const float* p) { return *reinterpret_cast<const Vec<V>*>(p); }
__device__ __forceinline__ void accumulate(double* acc, float v) { acc[0] += double(v); }
__device__ __forceinline__ void accumulate(double* acc, float4 v) {
  acc[0] += double(v.x);
  acc[1] += double(v.y);
  acc[2] += double(v.z);
  acc[3] += double(v.w);
}
// x's elements at i.. narrowed into the copy (reduce_sum_cast), if any.
__device__ __forceinline__ void narrow(const FOut& copy, int64_t i, float v) {
  if (copy.p) copy.set(i, v);
}
__device__ __forceinline__ void narrow(const FOut& copy, int64_t i, float4 v) {
  if (!copy.p) return;
  copy.set(i, v.x);
  copy.set(i + 1, v.y);
  copy.set(i + 2, v.z);
  copy.set(i + 3, v.w);
}

// Where k_cols reads x's elements, V at a time from element i: an fp32
// buffer, or (BiasGrad) a bias's gradient computed as it is read.
struct F32Src {
  const float* x;
  template <int V> __device__ __forceinline__ Vec<V> at(int64_t i) const { return load<V>(x + i); }
};
// dy * f'(x + b) of bias_unary_grad: the same expression, so the same values.
template <UnOp OP> struct BiasGrad {
  FIn x, b, y, dy;
  int64_t nb;
  __device__ __forceinline__ float one(int64_t i) const {
    return unary_bwd<OP>(__fadd_rn(x[i], b[i % nb]), y[i], dy[i]);
  }
  template <int V> __device__ __forceinline__ Vec<V> at(int64_t i) const {
    if constexpr (V == 4)
      return make_float4(one(i), one(i + 1), one(i + 2), one(i + 3));
    else
      return one(i);
  }
};

// ---- columns: x as [B, N, C] -> y [B, C] ---------------------------------------------
// A 32x8 block covers 32*V columns of one (b, chunk of rows): thread (tx, ty)
// sums rows ty, ty+8, ... of the chunk, then the 8 sums are added in ty
// order. With several chunks the sums go to part[(b * nchunk + chunk) * C + c].
// Each element is loaded once, so a copy narrowed to 16 bits (copy.p not
// null) comes with it.
template <int V, class Src>
__global__ void k_cols(Src x, int64_t B, int64_t N, int64_t C, int64_t rows_per, int64_t nchunk,
                       int64_t ctiles, double* part, float* y, double div, FOut copy) {
  __shared__ double sm[8][32 * V];
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 32 + tx;
  for (int64_t t = blockIdx.x; t < B * nchunk * ctiles; t += gridDim.x) {
    const int64_t ct = t % ctiles, bk = t / ctiles, k = bk % nchunk, b = bk / nchunk;
    const int64_t c0 = ct * 32 * V + tx * V;
    const int64_t r0 = k * rows_per, r1 = r0 + rows_per < N ? r0 + rows_per : N;
    double acc[V];
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = 0.0;
    if (c0 < C) {
      int64_t i = (b * N + r0 + ty) * C + c0;
      int64_t n = r0 + ty;
      // Four rows per step so four loads are in flight; still added in row order.
      for (; n + 24 < r1; n += 32, i += 32 * C) {
        const Vec<V> v0 = x.template at<V>(i), v1 = x.template at<V>(i + 8 * C), v2 = x.template at<V>(i + 16 * C),
                     v3 = x.template at<V>(i + 24 * C);
        accumulate(acc, v0);
        accumulate(acc, v1);
        accumulate(acc, v2);
        accumulate(acc, v3);
        narrow(copy, i, v0);
        narrow(copy, i + 8 * C, v1);
        narrow(copy, i + 16 * C, v2);
        narrow(copy, i + 24 * C, v3);
      }
      for (; n < r1; n += 8, i += 8 * C) {
        const Vec<V> v = x.template at<V>(i);
        accumulate(acc, v);
        narrow(copy, i, v);
      }
    }
#pragma unroll
    for (int j = 0; j < V; ++j) sm[ty][tx * V + j] = acc[j];
    __syncthreads();
    for (int col = tid; col < 32 * V; col += 256) {
      const int64_t c = ct * 32 * V + col;
      if (c < C) {
        double s = sm[0][col];
#pragma unroll
        for (int q = 1; q < 8; ++q) s += sm[q][col];
        if (part) part[(b * nchunk + k) * C + c] = s;
        else y[b * C + c] = float(s / div);
      }
    }
    __syncthreads();
  }
}

// ---- second pass: y[b, c] = sum over k of part[(b * K + k) * C + c] -----------------
// part is a [B, K, C] column reduction of its own, often with few columns
// and many k, so 32x32 blocks: thread (tx, ty) adds k = ty, ty+32, ...,
// then the 32 sums are added in ty order.
__global__ void k_combine_cols(const double* part, int64_t B, int64_t K, int64_t C, float* y, double div) {
  __shared__ double sm[32][33];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t ctiles = (C + 31) / 32;
  for (int64_t t = blockIdx.x; t < B * ctiles; t += gridDim.x) {
    const int64_t ct = t % ctiles, b = t / ctiles, c = ct * 32 + tx;
    double s = 0.0;
    if (c < C) {
      const double* p = part + b * K * C + c;
      int64_t k = ty;
      for (; k + 32 < K; k += 64) {  // two loads in flight, added in k order
        const double v0 = p[k * C], v1 = p[(k + 32) * C];
        s += v0;
        s += v1;
      }
      for (; k < K; k += 32) s += p[k * C];
    }
    sm[ty][tx] = s;
    __syncthreads();
    if (ty == 0 && c < C) {
      double total = sm[0][tx];
      for (int q = 1; q < 32; ++q) total += sm[q][tx];
      y[b * C + c] = float(total / div);
    }
    __syncthreads();
  }
}

// C < 32: a block per output; threads stride k, then a fixed shared tree.
__global__ void k_combine_block(const double* part, int64_t B, int64_t K, int64_t C, float* y, double div) {
  __shared__ double sm[kThreads];
  const int tid = threadIdx.x;
  for (int64_t o = blockIdx.x; o < B * C; o += gridDim.x) {
    const int64_t b = o / C, c = o - b * C;
    double s = 0.0;
    for (int64_t k = tid; k < K; k += kThreads) s += part[(b * K + k) * C + c];
    sm[tid] = s;
    __syncthreads();
    for (int w = kThreads / 2; w > 0; w >>= 1) {
      if (tid < w) sm[tid] += sm[tid + w];
      __syncthreads();
    }
    if (tid == 0) y[o] = float(sm[0] / div);
    __syncthreads();
  }
}

// ---- any other pattern ----------------------------------------------------------------
// Kept dims (those of y, in order, so output j is y[j]) and reduced dims,
// each with x's strides.
struct Split {
  int nk = 0, nr = 0;
  int64_t kdim[Shape::kMaxRank] = {}, kstr[Shape::kMaxRank] = {};
  int64_t rdim[Shape::kMaxRank] = {}, rstr[Shape::kMaxRank] = {};
  int64_t nred = 1;
};

__device__ __forceinline__ int64_t split_offset(int n, const int64_t* dim, const int64_t* str, int64_t i) {
  int64_t off = 0;
  for (int d = n - 1; d >= 0; --d) {
    const int64_t q = i / dim[d];
    off += (i - q * dim[d]) * str[d];
    i = q;
  }
  return off;
}

// WARP: a warp per output, lanes stride the reduced index, then a tree;
// otherwise a thread per output, in index order (short reductions).
template <bool WARP> __global__ void k_general(const float* x, Split s, int64_t ny, float* y, double div) {
  if constexpr (WARP) {
    const int lane = threadIdx.x & 31;
    for (int64_t o = global_warp(); o < ny; o += warp_count()) {
      const float* base = x + split_offset(s.nk, s.kdim, s.kstr, o);
      double acc = 0.0;
      for (int64_t r = lane; r < s.nred; r += 32) acc += double(base[split_offset(s.nr, s.rdim, s.rstr, r)]);
      acc = warp_sum(acc);
      if (lane == 0) y[o] = float(acc / div);
    }
  } else {
    for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < ny; o += int64_t(gridDim.x) * blockDim.x) {
      const float* base = x + split_offset(s.nk, s.kdim, s.kstr, o);
      double acc = 0.0;
      for (int64_t r = 0; r < s.nred; ++r) acc += double(base[split_offset(s.nr, s.rdim, s.rstr, r)]);
      y[o] = float(acc / div);
    }
  }
}

// Partial sums in stream-ordered scratch memory, freed after the last pass.
struct Scratch {
  double* p = nullptr;
  explicit Scratch(int64_t n) {
    FY_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&p), size_t(n) * sizeof(double), current_stream()));
  }
  ~Scratch() {
    if (p) cudaFreeAsync(p, current_stream());  // errors surface at the next checked call
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

void combine(const double* part, int64_t B, int64_t K, int64_t C, float* y, double div) {
  if (C >= 32) {
    const int64_t tiles = B * ((C + 31) / 32);
    const unsigned grid = unsigned(tiles < (1 << 20) ? tiles : (1 << 20));
    k_combine_cols<<<grid, dim3(32, 32), 0, current_stream()>>>(part, B, K, C, y, div);
  } else {
    const unsigned grid = unsigned(B * C < (1 << 20) ? B * C : (1 << 20));
    k_combine_block<<<grid, kThreads, 0, current_stream()>>>(part, B, K, C, y, div);
  }
  FY_CUDA_LAUNCHED("k_combine");
}

void reduce_rows(const float* x, int64_t B, int64_t N, float* y, double div) {
  // Split long rows when there are few of them, so enough warps run.
  const int64_t chunk = N > 4096 && B < 2048 ? 4096 : N;
  const int64_t nchunk = ceil_div(N, chunk);
  const bool vec = N % 4 == 0 && aligned16(x);
  auto launch = [&](double* part) {
    const unsigned grid = grid_for(B * nchunk * 32, kThreads);
    if (vec) k_rows<4><<<grid, kThreads, 0, current_stream()>>>(x, B, N, chunk, nchunk, part, y, div);
    else k_rows<1><<<grid, kThreads, 0, current_stream()>>>(x, B, N, chunk, nchunk, part, y, div);
    FY_CUDA_LAUNCHED("k_rows");
  };
  if (nchunk == 1) return launch(nullptr);
  Scratch part(B * nchunk);
  launch(part.p);
  combine(part.p, B, nchunk, 1, y, div);
}

// (aligned: whether x's loads may be 16 bytes; the split into blocks and
// so the order of the sums follows from it and the shape.)
template <class Src>
void reduce_cols(Src x, bool aligned, int64_t B, int64_t N, int64_t C, float* y, double div, FOut copy = {}) {
  const int V = C % 4 == 0 && aligned ? 4 : 1;
  const int64_t ctiles = ceil_div(C, 32 * V);
  // About 2048 blocks in all (a few waves on any GPU), each thread at least
  // 16 rows; the split depends on the shape only, so the order is fixed.
  int64_t nchunk = ceil_div(2048, B * ctiles);
  if (nchunk > ceil_div(N, 128)) nchunk = ceil_div(N, 128);
  if (nchunk < 1) nchunk = 1;
  const int64_t rows_per = ceil_div(ceil_div(N, nchunk), 8) * 8;
  nchunk = ceil_div(N, rows_per);
  auto launch = [&](double* part) {
    const int64_t tiles = B * nchunk * ctiles;
    const unsigned grid = unsigned(tiles < (1 << 20) ? tiles : (1 << 20));
    const dim3 block(32, 8);
    if (V == 4) k_cols<4><<<grid, block, 0, current_stream()>>>(x, B, N, C, rows_per, nchunk, ctiles, part, y, div, copy);
    else k_cols<1><<<grid, block, 0, current_stream()>>>(x, B, N, C, rows_per, nchunk, ctiles, part, y, div, copy);
    FY_CUDA_LAUNCHED("k_cols");
  };
  if (nchunk == 1) return launch(nullptr);
  Scratch part(B * nchunk * C);
  launch(part.p);
  combine(part.p, B, nchunk, C, y, div);
}

// reduce_to, and where it sums x's columns (reduce_cols) a 16-bit copy of x
// (copy.p not null) from the same loads; true when it wrote the copy.
bool reduce(View x, View y, bool mean, FOut copy) {
  check(x.dtype == y.dtype, "reduce_to", "dtype mismatch");
  // x drives the iteration; y's strides are 0 along the reduced dims. This
  // also validates that y is x with some dims set to 1.
  const cd::Strided it = host_shapes([&] { return cd::broadcast_iter(x.shape, {y.shape}, "reduce_to"); });
  if (x.dtype != DType::F32)
    fail(std::string("fy::cuda::reduce_to: unsupported dtype ") + dtype_name(x.dtype) + " (the CUDA kernels take F32)");
  const int64_t nx = x.numel(), ny = y.numel();
  if (ny == 0) return false;
  // An empty sum is 0; an empty mean 0/0, as on the CPU.
  if (nx == 0) {
    fill(y, mean ? std::numeric_limits<double>::quiet_NaN() : 0.0);
    return false;
  }
  const double div = mean ? double(nx / ny) : 1.0;
  const float* px = static_cast<const float*>(x.data);
  float* py = static_cast<float*>(y.data);
  if (nx == ny) {  // nothing reduced (only size-1 dims): x / 1 is x
    if (px != py) FY_CUDA_CHECK(cudaMemcpyAsync(py, px, x.nbytes(), cudaMemcpyDeviceToDevice, current_stream()));
    return false;
  }
  // After coalescing, kept and reduced dims alternate.
  Split s;
  s.nred = nx / ny;
  for (int d = 0; d < it.rank; ++d) {
    if (it.stride[1][d] != 0) {
      s.kdim[s.nk] = it.dims[d];
      s.kstr[s.nk++] = it.stride[0][d];
    } else {
      s.rdim[s.nr] = it.dims[d];
      s.rstr[s.nr++] = it.stride[0][d];
    }
  }
  const int R = it.rank;
  const bool red0 = it.stride[1][0] == 0;
  if (s.nred > 32) {
    if (R == 1) return reduce_rows(px, 1, nx, py, div), false;                          // [N] -> [1]
    if (R == 2 && !red0) return reduce_rows(px, it.dims[0], it.dims[1], py, div), false;  // [B, N] -> [B, 1]
    if (R == 2 && red0)  // [N, C] -> [1, C]
      return reduce_cols(F32Src{px}, aligned16(px), 1, it.dims[0], it.dims[1], py, div, copy), copy.p;
    if (R == 3 && !red0)  // [B, N, C] -> [B, 1, C]
      return reduce_cols(F32Src{px}, aligned16(px), it.dims[0], it.dims[1], it.dims[2], py, div, copy), copy.p;
    k_general<true><<<grid_for(ny * 32, kThreads), kThreads, 0, current_stream()>>>(px, s, ny, py, div);
  } else {
    k_general<false><<<grid_for(ny, kThreads), kThreads, 0, current_stream()>>>(px, s, ny, py, div);
  }
  FY_CUDA_LAUNCHED("k_general");
  return false;
}

}  // namespace

void reduce_to(View x, View y, bool mean) { reduce(x, y, mean, {}); }

void reduce_sum_cast(View x, View y, View x16) {
  check(x16.numel() == x.numel(), "reduce_sum_cast", "x16 has " + std::to_string(x16.numel()) + " elements, x " +
                                                         std::to_string(x.numel()));
  check(x16.dtype == DType::BF16 || x16.dtype == DType::F16, "reduce_sum_cast",
        std::string("x16 must be BF16 or F16, not ") + dtype_name(x16.dtype));
  if (!reduce(x, y, false, detail::fout(x16, "reduce_sum_cast", "x16"))) cast(x, x16);
}

void bias_unary_grad_sum(UnOp op, View x, View b, View y, View dy, View db, View dx16) {
  const char* who = "bias_unary_grad_sum";
  const int64_t C = bias_len(who, x, b, {y, dy, dx16}, false), n = x.numel(), N = C > 0 ? n / C : 0;
  check(y.data != nullptr, who, "y (the forward's result) is required");
  check_numel(db, C, who, "db");
  check_dtype(db, DType::F32, who, "db");
  check(dx16.dtype == DType::BF16 || dx16.dtype == DType::F16, who,
        std::string("dx16 must be BF16 or F16, not ") + dtype_name(dx16.dtype));
  const FIn fx = fin(x, who, "x"), fb = fin(b, who, "b"), fy = fin(y, who, "y"), fdy = fin(dy, who, "dy");
  const FOut copy = fout(dx16, who, "dx16");
  if (C == 0) return;
  if (N == 0) return fill(db, 0.0);
  // (Aligned as the fp32 buffer reduce_to would read: the plan's are.)
  with_unop(op, [&](auto c) {
    reduce_cols(BiasGrad<decltype(c)::value>{fx, fb, fy, fdy, C}, true, 1, N, C, static_cast<float*>(db.data), 1.0,
                copy);
  });
}

}  // namespace fy::cuda
