// 8-bit AdamW: the dynamic maps, the block loop and the scalar
// (de)quantisation. See adamw8bit.h.
#include "optim/adamw8bit.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "optim/adamw8bit_kernels.h"
#include "optim/adamw_kernels.h"

namespace fy {

namespace ad = adamw_detail;

namespace {

constexpr int64_t kMaxBlock = 4096;

}  // namespace

const float kQ8Pow10[16] = {1e0f, 1e-1f, 1e-2f, 1e-3f, 1e-4f, 1e-5f, 1e-6f, 1e-7f, 1e-8f};

namespace {

// Decade E = B - L's line: code(c) = fma(c, a, b) for c = 2^L .. 2^(L+1) - 1.
// The slope puts 2^L codes evenly over (0.1, 1] x 10^-E; b is fitted so that
// the decade's top code is exactly float(10^-E) (so the absmax element
// decodes to itself), nudged by an ulp where one rounding misses it.
struct Line {
  float a, b;
};
Line decade_line(int L, int B) {
  const float top = kQ8Pow10[B - L];
  const double c_top = std::ldexp(1.0, L + 1) - 1;
  Line l;
  l.a = float(0.9 * double(top) / std::ldexp(1.0, L));
  l.b = float(double(top) - c_top * double(l.a));  // c_top * a is exact in double
  for (int i = 0; i < 4 && std::fma(float(c_top), l.a, l.b) != top; ++i)
    l.b = std::nextafter(l.b, std::fma(float(c_top), l.a, l.b) < top ? 1.f : -1.f);
  return l;
}

}  // namespace

float q8_decode_pos(int c, int B) {
  if (c == 0) return 0.f;
  const Line l = decade_line(31 - __builtin_clz(unsigned(c)), B);
  return std::fma(float(c), l.a, l.b);
}

namespace {

// The tables of Q8Map's vector codec, and enc_tol measured on every
// decision point with the very float operations of the vector encoder.
void build_vector_tables(Q8Map& m) {
  const int B = m.bits;
  // Slot lzcnt(c) & 15: 31 - L for c > 0, 32 (slot 0: code 0) for c = 0.
  for (int L = 0; L <= B; ++L) {
    const Line l = decade_line(L, B);
    m.dec_a[(31 - L) & 15] = l.a;
    m.dec_b[(31 - L) & 15] = l.b;
  }
  // Decade E holds y in [10^-(E+1), 10^-E) as floats (E = B: everything
  // below, E = 0: everything above). Its codes 2^L + k lie on its decode
  // line, inverted here: c = (y - b) / a, on which the lower decade's top
  // (10^-(E+1)) is c = 2^L - 1; decade B's codes are 0 and 10^-B.
  double c_line[16] = {};
  for (int E = 0; E <= B; ++E) {
    const Line l = decade_line(B - E, B);
    m.enc_a[E] = float(E == B ? 1 / double(kQ8Pow10[B]) : 1 / double(l.a));
    c_line[E] = E == B ? m.zero : m.zero - double(l.b) / double(l.a);
  }
  auto decade = [&](float y) {
    int E = 0;
    for (int e = 1; e <= B; ++e) E += y < kQ8Pow10[e];
    return E;
  };
  for (int s = 0; s < 32; ++s) {  // binade [2^(s-31), 2^(s-30))
    const float lo = std::ldexp(1.f, s - 31), hi = std::ldexp(1.f, s - 30);
    m.enc_decade[s] = decade(lo);
    const int E = m.enc_decade[s];
    m.enc_thr[s] = E > 0 && kQ8Pow10[E] < hi ? kQ8Pow10[E] : std::numeric_limits<float>::infinity();
  }
  // [1, 2) is all the top code (x / absmax rounds up to 1 + 2^-23): a flat
  // line there lets the vector encoder skip clamping y to 1.
  m.enc_decade[31] = B + 1;
  m.enc_a[B + 1] = 0.f;
  c_line[B + 1] = m.ncodes - 1;
  // The vector encoder takes floor(w), w = y * enc_a + enc_c in float, where
  // enc_c is the line's constant + 1/2 + enc_tol: the index boundary K = zero
  // + j + 1 of decision point j then lies in the band [K, K + 2 enc_tol) of w,
  // whose lanes go to the scalar encoder. The band widens until pos_mid[j]
  // (code j) has w < K + 2 enc_tol and the next float (code j + 1) w >= K at
  // every decision point; w grows with y, so that covers every y.
  auto w_of = [&](float y) {
    uint32_t bits;
    std::memcpy(&bits, &y, 4);
    const int s = int(std::max<uint32_t>(bits >> 23, 96) & 31);
    const int E = m.enc_decade[s] - (y > m.enc_thr[s]);
    return double(std::fma(y, m.enc_a[E], m.enc_c[E]));
  };
  for (double tol = std::ldexp(1.0, -20);; tol *= 2) {
    if (tol > 1e-3) fail("8-bit AdamW: the vector encoder's tables cannot separate the codes (a bug)");
    for (int E = 0; E <= B + 1; ++E) m.enc_c[E] = float(c_line[E] + 0.5 + tol);
    bool ok = true;
    for (int j = 0; ok && j + 1 < m.ncodes - m.zero; ++j) {
      const double K = m.zero + j + 1;
      const float y0 = m.pos_mid[j], y1 = std::nextafter(y0, 2.f);
      ok = w_of(y0) < K + 2 * tol && w_of(y1) >= K;
    }
    if (ok) {
      m.enc_tol = float(tol);
      return;
    }
  }
}

Q8Map build(bool is_signed) {
  // Positive index c = 2^L + k (k < 2^L) is decade E = B - L, fraction k.
  const int B = is_signed ? 6 : 7;
  std::vector<double> codes;
  for (int c = 1; c < (2 << B); ++c) {
    codes.push_back(q8_decode_pos(c, B));
    if (is_signed) codes.push_back(-q8_decode_pos(c, B));
  }
  codes.push_back(0.0);
  std::sort(codes.begin(), codes.end());
  Q8Map m{};
  m.ncodes = int(codes.size());
  m.is_signed = is_signed;
  m.bits = B;
  m.zero = int(std::find(codes.begin(), codes.end(), 0.0) - codes.begin());
  for (int k = 0; k < 256; ++k) m.code[k] = k < m.ncodes ? float(codes[size_t(k)]) : 0.f;
  const int npos = m.ncodes - m.zero;  // 0 and the positive codes
  for (int k = 0; k < 256; ++k)
    m.pos_mid[k] = k + 1 < npos ? float((codes[size_t(m.zero + k)] + codes[size_t(m.zero + k + 1)]) / 2)
                                : std::numeric_limits<float>::infinity();
  for (int b = 0; b < Q8Map::kBuckets; ++b) {
    const float lo = std::ldexp(1.f + float(b % 256) / 256.f, b / 256 - 32);
    int c = 0;
    while (m.pos_mid[c] < lo) ++c;
    m.bucket[b] = uint8_t(c);
  }
  build_vector_tables(m);
  return m;
}

}  // namespace

const Q8Map& q8_map_signed() {
  static const Q8Map m = build(true);
  return m;
}
const Q8Map& q8_map_unsigned() {
  static const Q8Map m = build(false);
  return m;
}

uint8_t q8_encode(const Q8Map& map, float x) {
  if (x != x) return uint8_t(map.zero);
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const uint32_t abs_bits = bits & 0x7fffffffu;
  float ax;
  std::memcpy(&ax, &abs_bits, 4);
  int c = map.bucket[q8_bucket(abs_bits)];
  c += ax > map.pos_mid[c];  // the one decision point a bucket may hold
  return uint8_t(map.is_signed && (bits >> 31) ? map.zero - c : map.zero + c);
}

bool q8_block_ok(int64_t block) { return block >= 32 && block <= kMaxBlock && (block & (block - 1)) == 0; }
size_t q8_codes_bytes(int64_t n) { return size_t((n + 63) / 64 * 64); }
size_t q8_state_bytes(int64_t n, int64_t block) {
  const size_t nb = size_t((n + block - 1) / block);
  return (q8_codes_bytes(n) + 4 * nb + 63) / 64 * 64;
}

namespace adamw_detail {

void q8_dequant_scalar(const Q8Map& map, const uint8_t* q, float absmax, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = map.code[q[i]] * absmax;
}

void q8_quant_scalar(const Q8Map& map, const float* x, float inv, uint8_t* q, int64_t n) {
  for (int64_t i = 0; i < n; ++i) q[i] = q8_encode(map, x[i] * inv);
}

float absmax_scalar(const float* x, int64_t n) {
  float a = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    a = ax > a ? ax : a;  // NaN is skipped, as by the vector path
  }
  return a;
}

void q8_range(AdamWIsa isa, const Scalars& s, float* p, const float* g, uint8_t* m_state, uint8_t* v_state,
              int64_t n, int64_t lo, int64_t len, int64_t block) {
  static const bool q8_wide = q8_avx512_supported();
  const bool wide = isa == AdamWIsa::Avx512 && q8_wide;  // else the fp32 update alone in AVX-512
  auto dequant = wide ? q8_dequant_avx512 : q8_dequant_scalar;
  auto quant = wide ? q8_quant_avx512 : q8_quant_scalar;
  auto amax = wide ? absmax_avx512 : absmax_scalar;
  const Kernel update = kernel_of(isa);
  const Q8Map &ms = q8_map_signed(), &mu = q8_map_unsigned();
  float* am = reinterpret_cast<float*>(m_state + q8_codes_bytes(n));
  float* av = reinterpret_cast<float*>(v_state + q8_codes_bytes(n));
  alignas(64) float mt[kMaxBlock], vt[kMaxBlock];
  int64_t b0 = lo;
  if (wide) {  // the whole blocks fused; a ragged last one below
    const int64_t nb = len / block;
    q8_blocks_avx512(s, p + b0, g + b0, m_state + b0, v_state + b0, am + b0 / block, av + b0 / block, nb, block, mt,
                     vt);
    b0 += nb * block;
  }
  for (; b0 < lo + len; b0 += block) {
    const int64_t k = b0 / block, w = std::min(block, lo + len - b0);
    dequant(ms, m_state + b0, am[k], mt, w);
    dequant(mu, v_state + b0, av[k], vt, w);
    update(s, p + b0, g + b0, mt, vt, w);
    const float amk = amax(mt, w), avk = amax(vt, w);
    // 1 / 0 would make 0 * inf = NaN codes: an all-zero block encodes zeros.
    quant(ms, mt, amk > 0.f ? 1.f / amk : 0.f, m_state + b0, w);
    quant(mu, vt, avk > 0.f ? 1.f / avk : 0.f, v_state + b0, w);
    am[k] = amk;
    av[k] = avk;
  }
}

}  // namespace adamw_detail

void adamw8bit_step_isa(AdamWIsa isa, float* p, const float* g, void* m_state, void* v_state, int64_t n,
                        int64_t block, const AdamWConfig& cfg, int64_t step) {
  if (step < 1) fail("fy::adamw8bit_step: step must start at 1, got " + std::to_string(step));
  if (n < 0) fail("fy::adamw8bit_step: negative element count " + std::to_string(n));
  if (!q8_block_ok(block)) fail("fy::adamw8bit_step: block size " + std::to_string(block) + " is not a power of two in [32, 4096]");
  if (!adamw_isa_supported(isa)) fail(std::string("fy::adamw8bit_step: this CPU lacks ") + adamw_isa_name(isa));
  ad::q8_range(isa, ad::make_scalars(cfg, step), p, g, static_cast<uint8_t*>(m_state),
               static_cast<uint8_t*>(v_state), n, 0, n, block);
}

void adamw8bit_step(float* p, const float* g, void* m_state, void* v_state, int64_t n, int64_t block,
                    const AdamWConfig& cfg, int64_t step) {
  adamw8bit_step_isa(adamw_best_isa(), p, g, m_state, v_state, n, block, cfg, step);
}

}  // namespace fy
