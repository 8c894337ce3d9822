// Where a head's rows lie in attention's operands and which keys a query row
// sees: shared by the CUDA-core kernels (attention.cu) and the tensor-core
// ones (attention_tc.cu).
#pragma once

#include <cstdint>

namespace fy::cuda::detail {

struct Geo {
  int64_t B, H, Hkv, T;
  int D;
  float scale;
  int64_t window;  // 0: causal
  bool seq_major;  // [B, T, heads, D], else [B, heads, T, D]
  // Packed (> 0): q, k and v (dq, dk, dv) are the heads of one [B, T, Hrow,
  // D] tensor, Hrow = H + 2 Hkv, each pointer at its own first head.
  int64_t Hrow = 0;
  // Row 0 of head h (of `heads`) of batch b, and the distance between rows:
  // out's and dout's with H heads.
  __host__ __device__ int64_t head(int64_t b, int64_t h, int64_t heads) const {
    return seq_major ? (b * T * heads + h) * D : (b * heads + h) * T * D;
  }
  __host__ __device__ int64_t ld(int64_t heads) const { return seq_major ? heads * D : D; }
  // The same in q's (dq's) tensor and in k's and v's (dk's, dv's).
  __host__ __device__ int64_t qhead(int64_t b, int64_t h) const { return head(b, h, Hrow ? Hrow : H); }
  __host__ __device__ int64_t khead(int64_t b, int64_t h) const { return head(b, h, Hrow ? Hrow : Hkv); }
  __host__ __device__ int64_t ldq() const { return ld(Hrow ? Hrow : H); }
  __host__ __device__ int64_t ldk() const { return ld(Hrow ? Hrow : Hkv); }
};

// The keys row i sees are [first_key(i), i].
__device__ __forceinline__ int64_t first_key(int64_t i, int64_t window) {
  return window > 0 && i - window + 1 > 0 ? i - window + 1 : 0;
}
__device__ __forceinline__ bool sees(int64_t i, int64_t j, const Geo& g) {
  return i < g.T && j <= i && j >= first_key(i, g.window);
}

}  // namespace fy::cuda::detail
