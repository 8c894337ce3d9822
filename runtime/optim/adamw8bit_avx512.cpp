// AVX-512 (de)quantisation for the 8-bit AdamW state, 16 lanes. Gathers cost
// about 40 cycles each on the machines we measured, so decoding computes a
// code from its bit structure (q8_decode_pos) instead of looking it up;
// encoding still takes two gathers (computing it measured slower). The same
// values and decisions as the scalar loops (adamw8bit_kernels.h).
#if defined(__x86_64__) || defined(__i386__)
// GCC 12 flags the intrinsics' undefined pass-through vectors; they are undefined on purpose.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "optim/adamw8bit_kernels.h"

namespace fy {
namespace adamw_detail {

#define FY_AVX512 __attribute__((target("avx512f")))

namespace {

// q8_decode_pos on 16 lanes, in the same float operations (c = 0 gives 0).
FY_AVX512 inline __m512 decode_pos(__m512i c, __m512i B, __m512 pow10) {
  const __m512i one = _mm512_set1_epi32(1);
  // L = floor(log2 c) from the exponent of float(c) (exact below 2^24).
  const __m512i L =
      _mm512_sub_epi32(_mm512_srli_epi32(_mm512_castps_si512(_mm512_cvtepi32_ps(c)), 23), _mm512_set1_epi32(127));
  const __m512i k1 = _mm512_add_epi32(_mm512_sub_epi32(c, _mm512_sllv_epi32(one, L)), one);
  const __m512 inv2l = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_sub_epi32(_mm512_set1_epi32(127), L), 23));
  const __m512 x = _mm512_mul_ps(_mm512_cvtepi32_ps(k1), inv2l);
  const __m512 frac = _mm512_add_ps(_mm512_set1_ps(0.1f), _mm512_mul_ps(_mm512_set1_ps(0.9f), x));
  const __m512 v = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_sub_epi32(B, L), pow10), frac);
  return _mm512_maskz_mov_ps(_mm512_test_epi32_mask(c, c), v);
}

}  // namespace

FY_AVX512 void q8_dequant_avx512(const Q8Map& map, const uint8_t* q, float absmax, float* out, int64_t n) {
  const __m512 a = _mm512_set1_ps(absmax), pow10 = _mm512_loadu_ps(kQ8Pow10);
  const __m512i B = _mm512_set1_epi32(map.bits), zero = _mm512_set1_epi32(map.zero);
  const __m512i sign = _mm512_set1_epi32(int(0x80000000u));
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i)));
    // Codes below the zero are the negated positive ones.
    const __mmask16 neg = _mm512_cmplt_epi32_mask(idx, zero);
    const __m512i c = _mm512_abs_epi32(_mm512_sub_epi32(idx, zero));
    __m512i v = _mm512_castps_si512(decode_pos(c, B, pow10));
    v = _mm512_mask_xor_epi32(v, neg, v, sign);
    _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_castsi512_ps(v), a));
  }
  for (; i < n; ++i) out[i] = map.code[q[i]] * absmax;
}

// Nearest code: the bucket of |x| (one gather), then its one decision point
// (a second); see Q8Map.
FY_AVX512 void q8_quant_avx512(const Q8Map& map, const float* x, float inv, uint8_t* q, int64_t n) {
  const __m512 s = _mm512_set1_ps(inv);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), zero = _mm512_set1_epi32(map.zero);
  const __m512i e_bias = _mm512_set1_epi32(127 - 32), last = _mm512_set1_epi32(Q8Map::kBuckets - 1);
  const __m512i m255 = _mm512_set1_epi32(255), one = _mm512_set1_epi32(1);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i bits = _mm512_castps_si512(_mm512_mul_ps(_mm512_loadu_ps(x + i), s));
    const __m512i ab = _mm512_and_si512(bits, abs_mask);
    // q8_bucket, lane-wise: clamp below to bucket 0, above to the last.
    const __m512i e = _mm512_sub_epi32(_mm512_srli_epi32(ab, 23), e_bias);
    __m512i b = _mm512_add_epi32(_mm512_slli_epi32(e, 8), _mm512_and_si512(_mm512_srli_epi32(ab, 15), m255));
    b = _mm512_mask_mov_epi32(b, _mm512_cmplt_epi32_mask(e, _mm512_setzero_si512()), _mm512_setzero_si512());
    b = _mm512_min_epi32(b, last);
    __m512i c = _mm512_and_si512(_mm512_i32gather_epi32(b, map.bucket, 1), m255);
    const __mmask16 up = _mm512_cmp_ps_mask(_mm512_castsi512_ps(ab), _mm512_i32gather_ps(c, map.pos_mid, 4), _CMP_GT_OQ);
    c = _mm512_mask_add_epi32(c, up, c, one);
    c = _mm512_maskz_mov_epi32(_mm512_cmp_ps_mask(_mm512_castsi512_ps(ab), _mm512_castsi512_ps(ab), _CMP_ORD_Q), c);  // NaN: 0
    __m512i idx = _mm512_add_epi32(zero, c);
    if (map.is_signed) {
      const __mmask16 neg = _mm512_cmplt_epi32_mask(bits, _mm512_setzero_si512());
      idx = _mm512_mask_sub_epi32(idx, neg, zero, c);
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), _mm512_cvtepi32_epi8(idx));
  }
  for (; i < n; ++i) q[i] = q8_encode(map, x[i] * inv);
}

FY_AVX512 float absmax_avx512(const float* x, int64_t n) {
  __m512 a = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) a = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + i)), a);  // NaN lanes keep a
  float r = _mm512_reduce_max_ps(a);
  for (; i < n; ++i) {
    const float ax = x[i] < 0 ? -x[i] : x[i];
    r = ax > r ? ax : r;
  }
  return r;
}

}  // namespace adamw_detail
}  // namespace fy

#else
#include "optim/adamw8bit_kernels.h"
namespace fy {
namespace adamw_detail {
// Never selected off x86.
void q8_dequant_avx512(const Q8Map& m, const uint8_t* q, float a, float* o, int64_t n) { q8_dequant_scalar(m, q, a, o, n); }
void q8_quant_avx512(const Q8Map& m, const float* x, float inv, uint8_t* q, int64_t n) { q8_quant_scalar(m, x, inv, q, n); }
float absmax_avx512(const float* x, int64_t n) { return absmax_scalar(x, n); }
}  // namespace adamw_detail
}  // namespace fy
#endif
