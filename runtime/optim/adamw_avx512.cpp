// AVX-512F AdamW loop: 16 floats per vector, two vectors per iteration, the
// tail (n mod 16) through masked loads and stores (masked-off lanes are
// neither read nor written). Same operation order as adamw_kernels.h.
// Compiled for any x86-64 through the target attribute and only called when
// cpuid reports avx512f.
#if defined(__x86_64__) || defined(__i386__)
// GCC 12 flags _mm512_undefined_ps (the pass-through of unmasked sqrt/div)
// as maybe-uninitialized; it is undefined on purpose.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "optim/adamw_avx512_step.h"
#include "optim/adamw_kernels.h"

namespace fy {
namespace adamw_detail {

#define FY_AVX512 __attribute__((target("avx512f")))

namespace {

FY_AVX512 inline void step16(const Vec16& c, float* p, const float* g, float* m, float* v) {
  __m512 po, mo, vo;
  compute16(c, _mm512_loadu_ps(p), _mm512_loadu_ps(g), _mm512_loadu_ps(m), _mm512_loadu_ps(v), po, mo, vo);
  _mm512_storeu_ps(p, po);
  _mm512_storeu_ps(m, mo);
  _mm512_storeu_ps(v, vo);
}

}  // namespace

FY_AVX512 void kernel_avx512(const Scalars& s, float* __restrict p, const float* __restrict g, float* __restrict m,
                             float* __restrict v, int64_t n) {
  const Vec16 c = vec16_of(s);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    step16(c, p + i, g + i, m + i, v + i);
    step16(c, p + i + 16, g + i + 16, m + i + 16, v + i + 16);
  }
  for (; i + 16 <= n; i += 16) step16(c, p + i, g + i, m + i, v + i);
  if (i < n) {
    const __mmask16 k = __mmask16((1u << (n - i)) - 1);
    __m512 po, mo, vo;
    // Masked-off lanes compute on zeros (floating-point exceptions are
    // masked, so even 0/0 with eps = 0 is harmless) and are never stored.
    compute16(c, _mm512_maskz_loadu_ps(k, p + i), _mm512_maskz_loadu_ps(k, g + i), _mm512_maskz_loadu_ps(k, m + i),
              _mm512_maskz_loadu_ps(k, v + i), po, mo, vo);
    _mm512_mask_storeu_ps(p + i, k, po);
    _mm512_mask_storeu_ps(m + i, k, mo);
    _mm512_mask_storeu_ps(v + i, k, vo);
  }
}

}  // namespace adamw_detail
}  // namespace fy

#else
#include "optim/adamw_kernels.h"
namespace fy {
namespace adamw_detail {
// Never selected off x86 (adamw_isa_supported is false there).
void kernel_avx512(const Scalars& s, float* p, const float* g, float* m, float* v, int64_t n) {
  kernel_scalar(s, p, g, m, v, n);
}
}  // namespace adamw_detail
}  // namespace fy
#endif
