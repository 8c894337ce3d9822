// 8-bit AdamW state: m and v stored block-wise dynamically quantised
// (Dettmers et al., "8-bit Optimizers via Block-wise Quantization", arXiv
// 2110.02861). Each block of `block` consecutive elements keeps its absolute
// maximum in fp32 and one byte per element: the index of the nearest value of
// a dynamic ("tree") map of numbers in [-1, 1] (m) or [0, 1] (v) that is dense
// near 0 and spans seven decades, so small moments keep their relative
// precision. The update dequantises a block, runs the fp32 AdamW arithmetic
// of adamw_kernels.h on it (the new parameter uses the exact new moments),
// then quantises the new moments against their new absmax.
//
// Bytes per moment of n elements: n (codes, padded to 64) + 4 per block, about
// a quarter of fp32's.
#pragma once

#include <cstddef>
#include <cstdint>

#include "optim/adamw.h"

namespace fy {

// A dynamic map: codes sorted ascending, symmetric about 0 when signed.
// Encoding works on |x| over the non-negative half: the decision points
// (pos_mid[k] = midpoint of the k-th and (k+1)-th non-negative codes, +inf
// past the last) split it, and `bucket` gives, for |x| in each 1/256 of a
// binade from 2^-32 to 2, how many decision points lie below the bucket's
// start. The codes are at least 0.7% apart relative to their size and the
// buckets at most 0.4% wide, so at most one decision point falls inside a
// bucket and one comparison finishes the search: two table lookups per
// element (the scalar encoder; the vector one computes, see below).
struct Q8Map {
  static constexpr int kBinades = 33, kBuckets = kBinades * 256;
  int ncodes;
  int zero;  // index of the code 0
  bool is_signed;
  int bits;  // B: magnitude bits after the indicator's decade (6 for m, 7 for v)
  float code[256];
  float pos_mid[256];
  uint8_t bucket[kBuckets + 4];  // bytes keep it in L1; +4: a 4-byte gather at the end stays inside
  // The vector codec's tables (adamw8bit_avx512.cpp), small enough for
  // registers. Decoding: the leading zero count of the positive index c
  // (31 - L, or 32 for the code 0) modulo 16 picks its decade's line, and
  // the code is fma(c, dec_a, dec_b) (both 0 in the code 0's slot).
  float dec_a[16], dec_b[16];
  // Encoding: along decade E the codes lie on a line, so y = |x| maps to
  // w = y * enc_a[E] + enc_c[E], the fractional index (the zero code's
  // included) plus 1/2 + enc_tol; between decades the lines meet at the
  // decade's top code. floor(w) is the nearest code's index wherever w's
  // fraction is at least 2 enc_tol, a band that holds every decision point's
  // w (measured when the map is built). The decade of y is enc_decade of
  // its binade (exponent 2^-31 .. 2^0, smaller ones clamped to the first)
  // less one if y > enc_thr, the decade boundary inside the binade if any
  // (both lines give the boundary's code). The binade [1, 2) is the top code,
  // a flat line E = B + 1.
  int32_t enc_decade[32];
  float enc_thr[32], enc_a[16], enc_c[16];
  float enc_tol;
};
// m: sign, then the count of leading zero bits is the decade (1 .. 1e-6), then
// an indicator bit, then a linear fraction over (0.1, 1]: 255 codes with 0 and
// +-1 among them. v: the same without the sign bit over eight decades: 256
// codes from 0 to 1.
const Q8Map& q8_map_signed();
const Q8Map& q8_map_unsigned();
// Bucket of |x| (bits of a non-negative float): 1/256 of a binade, clamped
// to the table (below 2^-32: the first; 2 and above, inf, NaN: the last).
inline int q8_bucket(uint32_t abs_bits) {
  const int e = int(abs_bits >> 23) - (127 - 32);
  if (e < 0) return 0;
  if (e >= Q8Map::kBinades) return Q8Map::kBuckets - 1;
  return e * 256 + int((abs_bits >> 15) & 255);
}
// The non-negative code of positive index c (0 .. 2^(B+1) - 1): c = 2^L + k
// with k < 2^L lies in decade E = B - L, at 10^-E (0.1 + 0.9 (k + 1) / 2^L)
// to within an ulp: one fma along the decade's line, whose constant term is
// fitted so that the top code 2^(L+1) - 1 is exactly kQ8Pow10[E]. The maps'
// tables hold these values; the vector decoder computes the same fma.
extern const float kQ8Pow10[16];     // float(10^-e), e = 0 .. 8
float q8_decode_pos(int c, int B);
// Index of the code nearest x (ties toward zero; NaN to the zero code).
uint8_t q8_encode(const Q8Map& map, float x);

// Layout of one 8-bit moment: n code bytes padded to 64, then one fp32 absmax
// per block. Blocks are powers of two from 32 to 4096 (they divide the pool's
// chunks, so threads split the work on block boundaries).
bool q8_block_ok(int64_t block);
size_t q8_codes_bytes(int64_t n);
size_t q8_state_bytes(int64_t n, int64_t block);

// One 8-bit AdamW step over n parameters on the calling thread, with the
// moments' states (q8_state_bytes each) in m_state and v_state; a zeroed
// state is AdamW's initial zero moment. Same scalars as adamw_step.
void adamw8bit_step(float* p, const float* g, void* m_state, void* v_state, int64_t n, int64_t block,
                    const AdamWConfig& cfg, int64_t step);
// The same in a given instruction set (tests): every ISA gives the same bits.
void adamw8bit_step_isa(AdamWIsa isa, float* p, const float* g, void* m_state, void* v_state, int64_t n,
                        int64_t block, const AdamWConfig& cfg, int64_t step);

}  // namespace fy
