// AVX2+FMA AdamW loop: 8 floats per vector, two vectors per iteration, the
// tail (n mod 8) in scalar FMA instructions of the same operation order (see
// adamw_kernels.h). Compiled for any x86-64 through the target attribute and
// only called when cpuid reports avx2 and fma.
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include <cmath>

#include "optim/adamw_kernels.h"

namespace fy {
namespace adamw_detail {

#define FY_AVX2 __attribute__((target("avx2,fma")))

namespace {

struct Vec8 {
  __m256 decay, beta1, one_m_b1, beta2, one_m_b2, nss, bc2_sqrt, eps, unscale, coef;
};

FY_AVX2 inline void step8(const Vec8& c, float* p, const float* g, float* m, float* v) {
  const __m256 gi = _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(g), c.unscale), c.coef);
  const __m256 pd = _mm256_mul_ps(_mm256_loadu_ps(p), c.decay);
  const __m256 mi = _mm256_fmadd_ps(gi, c.one_m_b1, _mm256_mul_ps(_mm256_loadu_ps(m), c.beta1));
  const __m256 vi = _mm256_fmadd_ps(_mm256_mul_ps(c.one_m_b2, gi), gi, _mm256_mul_ps(_mm256_loadu_ps(v), c.beta2));
  const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), c.bc2_sqrt), c.eps);
  _mm256_storeu_ps(p, _mm256_add_ps(pd, _mm256_div_ps(_mm256_mul_ps(c.nss, mi), denom)));
  _mm256_storeu_ps(m, mi);
  _mm256_storeu_ps(v, vi);
}

}  // namespace

FY_AVX2 void kernel_avx2(const Scalars& s, float* __restrict p, const float* __restrict g, float* __restrict m,
                         float* __restrict v, int64_t n) {
  const Vec8 c{_mm256_set1_ps(s.decay),    _mm256_set1_ps(s.beta1),         _mm256_set1_ps(s.one_m_b1),
               _mm256_set1_ps(s.beta2),    _mm256_set1_ps(s.one_m_b2),      _mm256_set1_ps(s.neg_step_size),
               _mm256_set1_ps(s.bc2_sqrt), _mm256_set1_ps(s.eps),           _mm256_set1_ps(s.unscale),
               _mm256_set1_ps(s.coef)};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    step8(c, p + i, g + i, m + i, v + i);
    step8(c, p + i + 8, g + i + 8, m + i + 8, v + i + 8);
  }
  for (; i + 8 <= n; i += 8) step8(c, p + i, g + i, m + i, v + i);
  for (; i < n; ++i) {  // scalar SSE/FMA instructions: same rounding as the lanes above
    const float gi = (g[i] * s.unscale) * s.coef;
    const float pd = p[i] * s.decay;
    const float mi = __builtin_fmaf(gi, s.one_m_b1, m[i] * s.beta1);
    const float vi = __builtin_fmaf(s.one_m_b2 * gi, gi, v[i] * s.beta2);
    const float denom = __builtin_sqrtf(vi) / s.bc2_sqrt + s.eps;
    p[i] = pd + (s.neg_step_size * mi) / denom;
    m[i] = mi;
    v[i] = vi;
  }
}

}  // namespace adamw_detail
}  // namespace fy

#else
#include "optim/adamw_kernels.h"
namespace fy {
namespace adamw_detail {
// Never selected off x86 (adamw_isa_supported is false there).
void kernel_avx2(const Scalars& s, float* p, const float* g, float* m, float* v, int64_t n) {
  kernel_scalar(s, p, g, m, v, n);
}
}  // namespace adamw_detail
}  // namespace fy
#endif
