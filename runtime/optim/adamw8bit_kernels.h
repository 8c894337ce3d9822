// Internal to runtime/optim: the 8-bit state's (de)quantisation loops, per
// instruction set. Decisions compare fl(x * fl(1 / absmax)) with the map's
// midpoints; every path makes the same decisions.
#pragma once

#include <cstdint>

#include "optim/adamw8bit.h"

namespace fy {
namespace adamw_detail {

// The AVX-512 loops below need F, BW, DQ and CD (every AVX-512 CPU but Xeon Phi).
bool q8_avx512_supported();
// out[i] = map.code[q[i]] * absmax
void q8_dequant_scalar(const Q8Map& map, const uint8_t* q, float absmax, float* out, int64_t n);
void q8_dequant_avx512(const Q8Map& map, const uint8_t* q, float absmax, float* out, int64_t n);
// q[i] = nearest code of x[i] * inv; returns nothing (absmax is the caller's).
// The vector loop needs |x[i] * inv| < 2 or not finite, as for inv = 1 / absmax.
void q8_quant_scalar(const Q8Map& map, const float* x, float inv, uint8_t* q, int64_t n);
void q8_quant_avx512(const Q8Map& map, const float* x, float inv, uint8_t* q, int64_t n);
// max |x[i]| (exact in any order)
float absmax_scalar(const float* x, int64_t n);
float absmax_avx512(const float* x, int64_t n);

}  // namespace adamw_detail
}  // namespace fy

namespace fy {
namespace adamw_detail {

struct Scalars;
// nblocks whole blocks of the 8-bit update, fused (block a multiple of 16):
// codes mq/vq with absmaxes am/av in, new codes and absmaxes out; mt and vt
// (64-byte aligned, block floats) hold a block's new moments in between.
void q8_blocks_avx512(const Scalars& s, float* p, const float* g, uint8_t* mq, uint8_t* vq, float* am, float* av,
                      int64_t nblocks, int64_t block, float* mt, float* vt);
// Elements [lo, lo + len) of an 8-bit update (lo a multiple of block) over
// states laid out for n elements; the pool runs one chunk per call.
void q8_range(AdamWIsa isa, const Scalars& s, float* p, const float* g, uint8_t* m_state, uint8_t* v_state,
              int64_t n, int64_t lo, int64_t len, int64_t block);

}  // namespace adamw_detail
}  // namespace fy
