#include "core/half.h"

#include <cmath>
#include <cstring>

namespace fy {
namespace {
uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
float float_of(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
}  // namespace

float round_to_bf16(float x) {
  const uint32_t u = bits_of(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return x;  // NaN stays NaN
  // Drop the low 16 bits, to nearest, ties to even; a carry into the
  // exponent is the next binade (or inf past bf16's largest value).
  return float_of((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
}

float round_to_fp16(float x) {
  const uint32_t u = bits_of(x), sign = u & 0x80000000u, a = u ^ sign;
  if (a >= 0x7f800000u) return x;                             // inf, NaN
  if (a >= 0x477ff000u) return float_of(sign | 0x7f800000u);  // >= 65520: rounds past 65504
  if (a >= 0x38800000u)                                       // normal in fp16 (>= 2^-14): 10 mantissa bits
    return float_of(sign | ((a + 0xfffu + ((a >> 13) & 1u)) & 0xffffe000u));
  // Subnormal in fp16: a multiple of 2^-24. Scaling by 2^24 is exact, and
  // nearbyint rounds ties to even in the default rounding mode.
  const float q = std::nearbyint(float_of(a) * 16777216.0f) * (1.0f / 16777216.0f);
  return float_of(sign | bits_of(q));
}

uint16_t bf16_bits(float x) {
  const uint32_t u = bits_of(round_to_bf16(x));
  // A NaN keeps its sign and becomes bf16's quiet NaN (its low bits may be all that marked it).
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x0040u);
  return uint16_t(u >> 16);
}

float bf16_value(uint16_t h) { return float_of(uint32_t(h) << 16); }

uint16_t fp16_bits(float x) {
  const uint32_t r = bits_of(round_to_fp16(x)), sign = (r >> 16) & 0x8000u, a = r & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
  if (a == 0x7f800000u) return uint16_t(sign | 0x7c00u);  // inf
  if (a >= 0x38800000u)                                   // normal: rebias the exponent (127 -> 15)
    return uint16_t(sign | (((a >> 23) - 112u) << 10) | ((a >> 13) & 0x3ffu));
  // Subnormal or zero: an exact count of 2^-24 steps.
  return uint16_t(sign | uint32_t(float_of(a) * 16777216.0f));
}

float fp16_value(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) return float_of(sign | bits_of(float(m) * (1.0f / 16777216.0f)));
  if (e == 31) return float_of(sign | 0x7f800000u | (m << 13));
  return float_of(sign | ((e + 112u) << 23) | (m << 13));
}

}  // namespace fy
