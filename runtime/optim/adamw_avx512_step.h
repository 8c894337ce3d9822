// Internal to runtime/optim: AdamW's per-element arithmetic on 16 AVX-512
// lanes (the operation order of adamw_kernels.h), for the fp32 loop and the
// 8-bit block loop alike. Include only from files compiled with
// -ffp-contract=off; callers need target("avx512f").
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "optim/adamw_kernels.h"

namespace fy {
namespace adamw_detail {

struct Vec16 {
  __m512 decay, beta1, one_m_b1, beta2, one_m_b2, nss, bc2_sqrt, eps, unscale, coef;
};

__attribute__((target("avx512f"))) inline Vec16 vec16_of(const Scalars& s) {
  return Vec16{_mm512_set1_ps(s.decay),    _mm512_set1_ps(s.beta1),         _mm512_set1_ps(s.one_m_b1),
               _mm512_set1_ps(s.beta2),    _mm512_set1_ps(s.one_m_b2),      _mm512_set1_ps(s.neg_step_size),
               _mm512_set1_ps(s.bc2_sqrt), _mm512_set1_ps(s.eps),           _mm512_set1_ps(s.unscale),
               _mm512_set1_ps(s.coef)};
}

__attribute__((target("avx512f"))) inline void compute16(const Vec16& c, __m512 pin, __m512 graw, __m512 min,
                                                          __m512 vin, __m512& pout, __m512& mout, __m512& vout) {
  const __m512 gi = _mm512_mul_ps(_mm512_mul_ps(graw, c.unscale), c.coef);
  const __m512 pd = _mm512_mul_ps(pin, c.decay);
  mout = _mm512_fmadd_ps(gi, c.one_m_b1, _mm512_mul_ps(min, c.beta1));
  vout = _mm512_fmadd_ps(_mm512_mul_ps(c.one_m_b2, gi), gi, _mm512_mul_ps(vin, c.beta2));
  const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vout), c.bc2_sqrt), c.eps);
  pout = _mm512_add_ps(pd, _mm512_div_ps(_mm512_mul_ps(c.nss, mout), denom));
}

// The same arithmetic with the square root and divisions on 256-bit halves.
// On Skylake-SP a 512-bit divide or square root keeps port 0 from other
// 512-bit work while it runs (measured: 2 divides and a square root on 16
// lanes next to 64 independent multiplies took 53 cycles in 512 bits, 44 on
// halves, 30 and 34 alone), which the 8-bit loop, busy with its codec,
// feels; the fp32 loop waits on memory either way.
__attribute__((target("avx512f,avx512dq"))) inline void compute16_halves(const Vec16& c, __m512 pin, __m512 graw,
                                                                         __m512 min, __m512 vin, __m512& pout,
                                                                         __m512& mout, __m512& vout) {
  const __m512 gi = _mm512_mul_ps(_mm512_mul_ps(graw, c.unscale), c.coef);
  const __m512 pd = _mm512_mul_ps(pin, c.decay);
  mout = _mm512_fmadd_ps(gi, c.one_m_b1, _mm512_mul_ps(min, c.beta1));
  vout = _mm512_fmadd_ps(_mm512_mul_ps(c.one_m_b2, gi), gi, _mm512_mul_ps(vin, c.beta2));
  const __m512 num = _mm512_mul_ps(c.nss, mout);
  const __m256 bc2 = _mm512_castps512_ps256(c.bc2_sqrt), eps = _mm512_castps512_ps256(c.eps);
  const __m256 lo = _mm256_div_ps(_mm512_castps512_ps256(num),
                                  _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(_mm512_castps512_ps256(vout)), bc2), eps));
  const __m256 hi = _mm256_div_ps(_mm512_extractf32x8_ps(num, 1),
                                  _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(_mm512_extractf32x8_ps(vout, 1)), bc2), eps));
  pout = _mm512_add_ps(pd, _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1));
}

}  // namespace adamw_detail
}  // namespace fy
#endif
