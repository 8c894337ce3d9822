// AVX-512 (F, BW, DQ, CD) codec and fused block loop for the 8-bit AdamW state,
// 16 lanes. Gathers cost about 40 cycles each on the machines we measured,
// so nothing here looks up memory per lane: decoding computes a code from
// its decade's line (q8_decode_pos), encoding computes the nearest code's
// index from the decade's line (Q8Map::enc_a, enc_c) with register-sized
// tables, and the few lanes within rounding of a decision point go to the
// scalar q8_encode. Same values and decisions as the scalar loops
// (adamw8bit_kernels.h).
#if defined(__x86_64__) || defined(__i386__)
// GCC 12 flags the intrinsics' undefined pass-through vectors; they are undefined on purpose.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "optim/adamw8bit_kernels.h"
#include "optim/adamw_avx512_step.h"

namespace fy {
namespace adamw_detail {

#define FY_Q8 __attribute__((target("avx512f,avx512bw,avx512dq,avx512cd")))

bool q8_avx512_supported() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512cd");
}

namespace {

template <bool Signed>
struct Decoder {
  __m512 a, b;
  __m512i zero;
  FY_Q8 explicit Decoder(const Q8Map& map)
      : a(_mm512_loadu_ps(map.dec_a)), b(_mm512_loadu_ps(map.dec_b)), zero(_mm512_set1_epi32(map.zero)) {}

  // map.code[q] for 16 codes (the caller multiplies by absmax). t = q - zero
  // is +-c; c's leading zero count picks its decade's line (the code 0's slot
  // holds a zero line), one fma gives the code as q8_decode_pos does, then
  // t's sign.
  FY_Q8 __m512 operator()(const uint8_t* q) const {
    const __m512i q32 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
    const __m512i t = Signed ? _mm512_sub_epi32(q32, zero) : q32, c = Signed ? _mm512_abs_epi32(t) : t;
    const __m512i lz = _mm512_lzcnt_epi32(c);
    __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(c), _mm512_permutexvar_ps(lz, a), _mm512_permutexvar_ps(lz, b));
    if (Signed)  // v ^ (t & sign)
      v = _mm512_castsi512_ps(_mm512_ternarylogic_epi32(_mm512_castps_si512(v), t,
                                                         _mm512_set1_epi32(int(0x80000000u)), 0x78));
    return v;
  }
};

// NonNeg: the inputs are known to be >= 0 or NaN (no |x| to take).
template <bool Signed, bool NonNeg = false>
struct Encoder {
  __m512 thr_lo, thr_hi, a, c, band, abs_mask;
  __m512i dec_lo, dec_hi, min_bin, twice_zero;
  FY_Q8 explicit Encoder(const Q8Map& map)
      : thr_lo(_mm512_loadu_ps(map.enc_thr)),
        thr_hi(_mm512_loadu_ps(map.enc_thr + 16)),
        a(_mm512_loadu_ps(map.enc_a)),
        c(_mm512_loadu_ps(map.enc_c)),
        band(_mm512_set1_ps(2 * map.enc_tol)),
        abs_mask(_mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff))),
        dec_lo(_mm512_loadu_si512(map.enc_decade)),
        dec_hi(_mm512_loadu_si512(map.enc_decade + 16)),
        min_bin(_mm512_set1_epi32(96)),
        twice_zero(_mm512_set1_epi32(2 * map.zero)) {}

  // Code indices of x * inv (16 lanes), where |x * inv| < 2 or is not
  // finite (x / absmax is at most 1 + 2^-23); `amb` gets the lanes to redo
  // exactly (w in a decision point's band, or x not finite: their w is NaN).
  FY_Q8 __m512i operator()(__m512 x, __m512 inv, __mmask16& amb) const {
    const __m512 prod = _mm512_mul_ps(x, inv);
    const __m512 y = NonNeg ? prod : _mm512_and_ps(prod, abs_mask);
    // Binade slot: exponents 96 .. 127 (2^-31 .. 2^0); smaller ones are all decade B.
    const __m512i bin = _mm512_max_epi32(_mm512_srli_epi32(_mm512_castps_si512(y), 23), min_bin);
    __m512i dec = _mm512_permutex2var_epi32(dec_lo, bin, dec_hi);
    const __mmask16 up = _mm512_cmp_ps_mask(y, _mm512_permutex2var_ps(thr_lo, bin, thr_hi), _CMP_GT_OQ);
    dec = _mm512_mask_sub_epi32(dec, up, dec, _mm512_set1_epi32(1));
    const __m512 w = _mm512_fmadd_ps(y, _mm512_permutexvar_ps(dec, a), _mm512_permutexvar_ps(dec, c));
    __m512i idx = _mm512_cvt_roundps_epi32(w, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    // w - floor(w), exact; below the band or NaN: redo.
    amb = _mm512_cmp_ps_mask(_mm512_reduce_ps(w, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC), band, _CMP_NGE_UQ);
    // Negative x: the mirror image about the zero code.
    if (Signed) idx = _mm512_mask_sub_epi32(idx, _mm512_movepi32_mask(_mm512_castps_si512(prod)), twice_zero, idx);
    return idx;
  }
};

// Four vectors of indices 0 .. 255 to 64 bytes in order: the packs
// interleave 128-bit lanes, one dword permute puts them back.
FY_Q8 inline __m512i pack64(__m512i a, __m512i b, __m512i c, __m512i d) {
  const __m512i w = _mm512_packus_epi16(_mm512_packus_epi32(a, b), _mm512_packus_epi32(c, d));
  return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), w);
}

// Lanes of `amb` (bit i = element i) redone by the scalar encoder.
inline void redo(const Q8Map& map, const float* x, float inv, uint8_t* q, uint64_t amb) {
  for (; amb; amb &= amb - 1) {
    const int i = __builtin_ctzll(amb);
    q[i] = q8_encode(map, x[i] * inv);
  }
}

// The encoder is taken by value: a local copy, which the byte stores cannot
// alias, stays in registers.
template <bool Signed, bool NonNeg>
FY_Q8 inline __attribute__((always_inline)) void quant(const Q8Map& map, const Encoder<Signed, NonNeg> enc, const float* x,
                                                        float inv, uint8_t* q, int64_t n) {
  const __m512 s = _mm512_set1_ps(inv);
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __mmask16 k0, k1, k2, k3;
    const __m512i a = enc(_mm512_loadu_ps(x + i), s, k0), b = enc(_mm512_loadu_ps(x + i + 16), s, k1),
                  c = enc(_mm512_loadu_ps(x + i + 32), s, k2), d = enc(_mm512_loadu_ps(x + i + 48), s, k3);
    _mm512_storeu_si512(q + i, pack64(a, b, c, d));
    // One test in mask registers; the lanes only when some are set (rare).
    if (__builtin_expect(!_kortestz_mask16_u8(_kor_mask16(k0, k1), _kor_mask16(k2, k3)), 0))
      redo(map, x + i, inv, q + i, uint64_t(k0) | uint64_t(k1) << 16 | uint64_t(k2) << 32 | uint64_t(k3) << 48);
  }
  for (; i + 16 <= n; i += 16) {
    __mmask16 k;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), _mm512_cvtepi32_epi8(enc(_mm512_loadu_ps(x + i), s, k)));
    if (__builtin_expect(k != 0, 0)) redo(map, x + i, inv, q + i, k);
  }
  for (; i < n; ++i) q[i] = q8_encode(map, x[i] * inv);
}

}  // namespace

FY_Q8 void q8_dequant_avx512(const Q8Map& map, const uint8_t* q, float absmax, float* out, int64_t n) {
  int64_t i = 0;
  const __m512 a = _mm512_set1_ps(absmax);
  if (map.is_signed) {
    const Decoder<true> dec(map);
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, _mm512_mul_ps(dec(q + i), a));
  } else {
    const Decoder<false> dec(map);
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, _mm512_mul_ps(dec(q + i), a));
  }
  for (; i < n; ++i) out[i] = map.code[q[i]] * absmax;
}

FY_Q8 void q8_quant_avx512(const Q8Map& map, const float* x, float inv, uint8_t* q, int64_t n) {
  if (map.is_signed)
    quant(map, Encoder<true>(map), x, inv, q, n);
  else
    quant(map, Encoder<false>(map), x, inv, q, n);
}

FY_Q8 float absmax_avx512(const float* x, int64_t n) {
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

// Whole blocks (block a multiple of 16), each in two passes over registers
// and L1: decode both moments, update, store p and the new moments to mt/vt
// while taking their absmax; then encode both against the new absmax.
// Elements ahead that the block loop prefetches.
constexpr int64_t kAhead = 1024;

FY_Q8 void q8_blocks_avx512(const Scalars& s, float* p, const float* g, uint8_t* mq, uint8_t* vq, float* am,
                            float* av, int64_t nblocks, int64_t block, float* mt, float* vt) {
  const Q8Map &ms = q8_map_signed(), &mu = q8_map_unsigned();
  const Vec16 c = vec16_of(s);
  const Encoder<true> em(ms);
  const Encoder<false, true> ev(mu);
  const Decoder<true> dm(ms);
  const Decoder<false> dv(mu);
  // Codes are decoded one vector ahead, the next block's first at a block's
  // last: the update's long chain (square root, two divisions) then starts
  // from ready inputs, which leaves the scheduler room for the next vector
  // (4% faster, measured). The absmax multiply waits for the vector's turn.
  __m512 mn = dm(mq), vn = dv(vq);
  for (int64_t b = 0; b < nblocks; ++b, p += block, g += block, mq += block, vq += block) {
    const __m512 amb = _mm512_set1_ps(am[b]), avb = _mm512_set1_ps(av[b]);
    // Past the last vector of the last block there is nothing to decode: it decodes itself again, unused.
    const int64_t end = b + 1 < nblocks ? block : block - 16;
    __m512 xm = _mm512_setzero_ps(), xv = _mm512_setzero_ps();
    for (int64_t i = 0; i < block; i += 16) {
      __m512 po, mo, vo;
      const __m512 mc = _mm512_mul_ps(mn, amb), vc = _mm512_mul_ps(vn, avb);
      const int64_t j = i < end ? i + 16 : i;
      mn = dm(mq + j);
      vn = dv(vq + j);
      // The stream of p and g runs ahead of the arithmetic (a prefetch does
      // not fault past the end); the codes are 4x smaller, one line in 4.
      _mm_prefetch(reinterpret_cast<const char*>(p + i + kAhead), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(g + i + kAhead), _MM_HINT_T0);
      if ((i & 63) == 0) {
        _mm_prefetch(reinterpret_cast<const char*>(mq + i + kAhead), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(vq + i + kAhead), _MM_HINT_T0);
      }
      compute16_halves(c, _mm512_loadu_ps(p + i), _mm512_loadu_ps(g + i), mc, vc, po, mo, vo);
      _mm512_storeu_ps(p + i, po);
      // v >= +0 or NaN here (decoded codes and absmaxes are, and beta2 v +
      // (1 - beta2) g g keeps them so), so it is its own absolute value; a
      // NaN lane's sign cannot matter (vmaxps keeps xv, the encoder redoes it).
      _mm512_store_ps(mt + i, mo);
      _mm512_store_ps(vt + i, vo);
      xm = _mm512_max_ps(_mm512_abs_ps(mo), xm);  // NaN lanes keep the max, as absmax_scalar
      xv = _mm512_max_ps(vo, xv);
    }
    const float amk = _mm512_reduce_max_ps(xm), avk = _mm512_reduce_max_ps(xv);
    // 1 / 0 would make 0 * inf = NaN codes: an all-zero block encodes zeros.
    quant(ms, em, mt, amk > 0.f ? 1.f / amk : 0.f, mq, block);
    quant(mu, ev, vt, avk > 0.f ? 1.f / avk : 0.f, vq, block);
    am[b] = amk;
    av[b] = avk;
  }
}

}  // namespace adamw_detail
}  // namespace fy

#else
#include "optim/adamw8bit_kernels.h"
namespace fy {
namespace adamw_detail {
// Never selected off x86.
bool q8_avx512_supported() { return false; }
void q8_dequant_avx512(const Q8Map& m, const uint8_t* q, float a, float* o, int64_t n) { q8_dequant_scalar(m, q, a, o, n); }
void q8_quant_avx512(const Q8Map& m, const float* x, float inv, uint8_t* q, int64_t n) { q8_quant_scalar(m, x, inv, q, n); }
float absmax_avx512(const float* x, int64_t n) { return absmax_scalar(x, n); }
void q8_blocks_avx512(const Scalars&, float*, const float*, uint8_t*, uint8_t*, float*, float*, int64_t, int64_t, float*,
                      float*) {}
}  // namespace adamw_detail
}  // namespace fy
#endif
