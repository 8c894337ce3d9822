// Layer norm and RMS norm whose rows are stored in 16 bits
// (fy-half-activations' buffers, half.cuh): x, y, dy and dx in any float
// format; scale, bias, the mean and the inverse deviation fp32, as are the
// parameters' gradients. The fp32 kernels' formulas (norm_softmax.cu): the
// row sum in double and the mean applied as two floats, the variance over
// the centred values in fp32. A block per row, re-reading the row from
// global memory (which L2 holds) instead of caching it; the parameters'
// gradients in double, in row chunks of a fixed split, then summed in chunk
// order, so every result is deterministic.
#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>

#include <climits>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/norm16.h"

namespace fy::cuda::detail {
namespace {

constexpr int kThreads = 256;

// The block's sum, on every thread.
template <class T> __device__ T row_sum(T v) {
  using Reduce = cub::BlockReduce<T, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  __shared__ T total;
  const T s = Reduce(tmp).Sum(v);
  if (threadIdx.x == 0) total = s;
  __syncthreads();
  const T r = total;
  __syncthreads();  // tmp and total are used again by the next sum
  return r;
}

template <bool RMS>
__global__ void __launch_bounds__(kThreads)
    k_norm16(FIn x, const float* scale, const float* bias, FOut y, float* mean, float* rstd, int64_t D, float eps) {
  const int64_t base = int64_t(blockIdx.x) * D;
  float hi = 0.f, lo = 0.f, q = 0.f;
  if constexpr (RMS) {
    for (int64_t c = threadIdx.x; c < D; c += kThreads) {
      const float v = x[base + c];
      q += v * v;
    }
  } else {
    double s = 0;
    for (int64_t c = threadIdx.x; c < D; c += kThreads) s += double(x[base + c]);
    const double m = row_sum(s) / double(D);
    hi = float(m);
    lo = float(m - double(hi));
    for (int64_t c = threadIdx.x; c < D; c += kThreads) {
      const float d = (x[base + c] - hi) - lo;
      q += d * d;
    }
  }
  const float r = 1.f / sqrtf(row_sum(q) / float(D) + eps);
  for (int64_t c = threadIdx.x; c < D; c += kThreads) {
    float o = ((x[base + c] - hi) - lo) * r;
    if (scale) o *= scale[c];
    if (!RMS && bias) o += bias[c];
    y.set(base + c, o);
  }
  if (threadIdx.x == 0) {
    if (!RMS) mean[blockIdx.x] = hi;
    rstd[blockIdx.x] = r;
  }
}

// dx = rstd * (g - mean(g) - xh * mean(g * xh)), g = dy * scale,
// xh = (x - mean) * rstd; RMS drops mean(g). A thread reads an element
// before it writes it, so dx may alias dy or x. With an addend (add.p not
// null), each element rounded to fp32 plus the addend's, an add that no
// multiply-add contracts (the add kernel's bits), then stored.
template <bool RMS>
__global__ void __launch_bounds__(kThreads)
    k_norm16_grad(FIn dy, FIn x, const float* scale, const float* mean, const float* rstd, FIn add, FOut dx,
                  int64_t D) {
  const int64_t base = int64_t(blockIdx.x) * D;
  const float mu = RMS ? 0.f : mean[blockIdx.x], rs = rstd[blockIdx.x];
  float sg = 0.f, sgx = 0.f;
  for (int64_t c = threadIdx.x; c < D; c += kThreads) {
    const float g = scale ? dy[base + c] * scale[c] : dy[base + c];
    sg += g;
    sgx += g * ((x[base + c] - mu) * rs);
  }
  sg = RMS ? 0.f : row_sum(sg) / float(D);
  sgx = row_sum(sgx) / float(D);
  for (int64_t c = threadIdx.x; c < D; c += kThreads) {
    const float g = scale ? dy[base + c] * scale[c] : dy[base + c];
    const float xh = (x[base + c] - mu) * rs;
    const float v = rs * (g - sg - xh * sgx);
    dx.set(base + c, add.p ? __fadd_rn(v, add[base + c]) : v);
  }
}

// Partials [chunks, D] of dscale (sum of dy * xh) and dbias (sum of dy), a
// thread a column of a chunk of rows.
template <bool RMS>
__global__ void __launch_bounds__(kThreads)
    k_norm16_param_partials(FIn dy, FIn x, const float* mean, const float* rstd, double* ps, double* pb,
                            int64_t rows, int64_t D, int64_t chunk_rows) {
  const int64_t c = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= D) return;
  const int64_t r0 = int64_t(blockIdx.y) * chunk_rows, r1 = min(r0 + chunk_rows, rows);
  double a = 0, b = 0;
  for (int64_t r = r0; r < r1; ++r) {
    const float d = dy[r * D + c];
    if (ps) a += double(d) * double((x[r * D + c] - (RMS ? 0.f : mean[r])) * rstd[r]);
    b += double(d);
  }
  const int64_t o = int64_t(blockIdx.y) * D + c;
  if (ps) ps[o] = a;
  if (pb) pb[o] = b;
}

__global__ void k_norm16_param_final(const double* ps, const double* pb, int64_t chunks, int64_t D, float* dscale,
                                     float* dbias) {
  const int64_t c = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= D) return;
  double a = 0, b = 0;
  for (int64_t k = 0; k < chunks; ++k) {
    if (ps) a += ps[k * D + c];
    if (pb) b += pb[k * D + c];
  }
  if (dscale) dscale[c] = float(a);
  if (dbias) dbias[c] = float(b);
}

unsigned grid_rows(int64_t rows, const char* op) {
  check(rows <= INT_MAX, op, "too many rows");
  return unsigned(rows);
}

}  // namespace

void norm16(bool rms, int64_t rows, int64_t D, FIn x, const float* scale, const float* bias, FOut y, float* mean,
            float* rstd, float eps) {
  if (rows == 0) return;
  const char* op = rms ? "rms_norm" : "layer_norm";
  cudaStream_t s = current_stream();
  if (rms)
    k_norm16<true><<<grid_rows(rows, op), kThreads, 0, s>>>(x, scale, bias, y, mean, rstd, D, eps);
  else
    k_norm16<false><<<grid_rows(rows, op), kThreads, 0, s>>>(x, scale, bias, y, mean, rstd, D, eps);
  FY_CUDA_LAUNCHED(op);
}

void norm16_grad(bool rms, int64_t rows, int64_t D, FIn dy, FIn x, const float* scale, const float* mean,
                 const float* rstd, FIn add, FOut dx, float* dscale, float* dbias) {
  const char* op = rms ? "rms_norm_grad" : "layer_norm_grad";
  cudaStream_t s = current_stream();
  // Parameter gradients first: dx may alias dy or x. About 64 chunks of
  // rows, a split fixed by the shape.
  if ((dscale || dbias) && D > 0) {
    const int64_t chunk_rows = rows > 0 ? (rows + 63) / 64 : 1;
    const int64_t chunks = rows > 0 ? (rows + chunk_rows - 1) / chunk_rows : 1;
    const size_t per = size_t(chunks) * size_t(D) * sizeof(double);
    void* tmp = nullptr;
    FY_CUDA_CHECK(cudaMallocAsync(&tmp, 2 * per, s));
    double* ps = dscale ? static_cast<double*>(tmp) : nullptr;
    double* pb = dbias ? static_cast<double*>(tmp) + size_t(chunks) * size_t(D) : nullptr;
    const unsigned cols = unsigned((D + kThreads - 1) / kThreads);
    if (rows == 0) {
      FY_CUDA_CHECK(cudaMemsetAsync(tmp, 0, 2 * per, s));
    } else {
      check(chunks <= 65535, op, "too many row chunks");
      const dim3 grid{cols, unsigned(chunks)};
      if (rms)
        k_norm16_param_partials<true><<<grid, kThreads, 0, s>>>(dy, x, mean, rstd, ps, pb, rows, D, chunk_rows);
      else
        k_norm16_param_partials<false><<<grid, kThreads, 0, s>>>(dy, x, mean, rstd, ps, pb, rows, D, chunk_rows);
      FY_CUDA_LAUNCHED("norm16_param_partials");
    }
    k_norm16_param_final<<<cols, kThreads, 0, s>>>(ps, pb, chunks, D, dscale, dbias);
    FY_CUDA_LAUNCHED("norm16_param_final");
    FY_CUDA_CHECK(cudaFreeAsync(tmp, s));
  }
  if (rows == 0 || D == 0) return;
  if (rms)
    k_norm16_grad<true><<<grid_rows(rows, op), kThreads, 0, s>>>(dy, x, scale, mean, rstd, add, dx, D);
  else
    k_norm16_grad<false><<<grid_rows(rows, op), kThreads, 0, s>>>(dy, x, scale, mean, rstd, add, dx, D);
  FY_CUDA_LAUNCHED(op);
}

}  // namespace fy::cuda::detail
