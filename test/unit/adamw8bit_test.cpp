// 8-bit AdamW: the dynamic maps, nearest-code encoding, the quantisation
// error per block on normal and heavy-tailed data, the update against an
// independent float64 implementation of 8-bit AdamW (same quantisation
// decisions), and the instruction sets and the thread pool against each
// other, bit for bit.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "optim/adamw.h"
#include "optim/adamw8bit.h"
#include "optim/adamw8bit_kernels.h"
#include "test_util.h"

namespace fyt {
namespace {

using fy::Q8Map;

std::vector<uint8_t> zero_state(int64_t n, int64_t block) {
  return std::vector<uint8_t>(fy::q8_state_bytes(n, block), 0);  // codes 0 = the map's smallest, fixed below
}

// A state whose moments are all zero: the zero code with absmax 0.
std::vector<uint8_t> initial_state(const Q8Map& map, int64_t n, int64_t block) {
  std::vector<uint8_t> s = zero_state(n, block);
  const uint8_t zero = fy::q8_encode(map, 0.f);
  std::memset(s.data(), zero, size_t(n));
  return s;
}

// Ties go toward zero.
int brute_nearest(const Q8Map& map, double x) {
  int best = 0;
  for (int k = 1; k < map.ncodes; ++k) {
    const double d = std::fabs(x - map.code[k]), db = std::fabs(x - map.code[best]);
    if (d < db || (d == db && std::fabs(map.code[k]) < std::fabs(map.code[best]))) best = k;
  }
  return best;
}

TEST(AdamW8bit, Maps) {
  const Q8Map &s = fy::q8_map_signed(), &u = fy::q8_map_unsigned();
  EXPECT_EQ(s.ncodes, 255);
  EXPECT_EQ(u.ncodes, 256);
  for (const Q8Map* m : {&s, &u}) {
    for (int k = 1; k < m->ncodes; ++k) EXPECT_LT(m->code[k - 1], m->code[k]) << k;
    EXPECT_EQ(m->code[m->ncodes - 1], 1.f);
    EXPECT_EQ(m->code[fy::q8_encode(*m, 0.f)], 0.f);
  }
  EXPECT_EQ(s.code[0], -1.f);
  for (int k = 0; k < s.ncodes; ++k) EXPECT_EQ(s.code[k], -s.code[s.ncodes - 1 - k]) << k;
  // Seven decades for m, eight for v: the smallest positive codes.
  EXPECT_FLOAT_EQ(s.code[128], 1e-6f);
  EXPECT_FLOAT_EQ(u.code[1], 1e-7f);
  // Decade 0 of m holds 64 evenly spaced values over (0.1, 1].
  EXPECT_NEAR(s.code[254] - s.code[253], 0.9 / 64, 1e-7);
}

TEST(AdamW8bit, EncodeIsNearestCode) {
  Rng rng(7);
  for (const Q8Map* m : {&fy::q8_map_signed(), &fy::q8_map_unsigned()}) {
    const double lo = m->code[0];
    std::vector<float> xs;
    for (int i = 0; i < 20000; ++i) xs.push_back(float(rng.uniform(lo, 1)));
    for (int i = 0; i < 20000; ++i) {  // log-uniform magnitudes, both signs where the map has them
      float x = float(std::pow(10.0, rng.uniform(-9, 0)));
      xs.push_back(lo < 0 && i % 2 ? -x : x);
    }
    for (int k = 0; k < m->ncodes; ++k) xs.push_back(m->code[k]);
    for (float x : xs) ASSERT_EQ(fy::q8_encode(*m, x), brute_nearest(*m, x)) << x;
  }
}

// Dequantised values are the nearest code times the block's absmax, and
// absmax itself survives: per element, the error is at most half the gap to
// the neighbouring code.
TEST(AdamW8bit, QuantisationErrorPerBlock) {
  const int64_t n = 1 << 16, block = 256;
  std::mt19937_64 gen(3);
  std::normal_distribution<double> normal(0, 1e-3);
  std::cauchy_distribution<double> cauchy(0, 1e-4);
  for (int dist = 0; dist < 2; ++dist) {
    // The moments after one update with zero decay reproduce g scaled: feed
    // them through a step with beta1 = 0 so m' = g exactly.
    std::vector<float> g(n), p(n, 0.f);
    for (auto& x : g) x = float(dist == 0 ? normal(gen) : cauchy(gen));
    std::vector<uint8_t> ms = initial_state(fy::q8_map_signed(), n, block),
                         vs = initial_state(fy::q8_map_unsigned(), n, block);
    fy::AdamWConfig cfg{1e-3f, 0.f, 0.f, 1e-8f, 0.f};
    fy::adamw8bit_step(p.data(), g.data(), ms.data(), vs.data(), n, block, cfg, 1);
    const Q8Map& map = fy::q8_map_signed();
    const float* am = reinterpret_cast<const float*>(ms.data() + fy::q8_codes_bytes(n));
    double worst_top = 0;  // relative error of elements within a decade of the absmax
    for (int64_t b = 0; b < n / block; ++b) {
      float amax = 0;
      for (int64_t i = b * block; i < (b + 1) * block; ++i) amax = std::max(amax, std::fabs(g[size_t(i)]));
      ASSERT_EQ(am[b], amax) << "block " << b;
      for (int64_t i = b * block; i < (b + 1) * block; ++i) {
        const int c = ms[size_t(i)];
        const double x = g[size_t(i)], deq = double(map.code[c]) * amax;
        if (std::fabs(x) == amax) {
          EXPECT_EQ(deq, x);
        }
        const double gap_lo = c > 0 ? map.code[c] - map.code[c - 1] : 0;
        const double gap_hi = c + 1 < map.ncodes ? map.code[c + 1] - map.code[c] : 0;
        ASSERT_LE(std::fabs(deq - x), 0.5 * std::max(gap_lo, gap_hi) * amax * (1 + 1e-6) + 1e-30) << i;
        if (std::fabs(x) >= 0.1 * amax) worst_top = std::max(worst_top, std::fabs(deq - x) / std::fabs(x));
      }
    }
    // 64 codes over (0.1, 1]: at most 0.9/128 of absmax off, 7% of a value at 0.1 absmax.
    EXPECT_LE(worst_top, 0.9 / 128 / 0.1 + 1e-6);
  }
}

// 8-bit AdamW in float64 from the same state, one step at a time: the codes
// must be the same except where the float32 value lies within rounding of a
// decision point, and parameters and absmax agree to float precision.
struct Reference {
  const Q8Map &ms = fy::q8_map_signed(), &mu = fy::q8_map_unsigned();
  static int decide(const Q8Map& map, double x) {  // nearest code, ties toward zero
    int idx = 0;
    for (int k = 0; k + 1 < map.ncodes; ++k) {
      const double mid = (double(map.code[k]) + double(map.code[k + 1])) / 2;
      idx += x > mid || (x == mid && mid < 0);
    }
    return idx;
  }
  static double margin(const Q8Map& map, double x) {  // distance to the nearest decision point
    double d = 1e300;
    for (int k = 0; k + 1 < map.ncodes; ++k) d = std::min(d, std::fabs(x - (double(map.code[k]) + double(map.code[k + 1])) / 2));
    return d;
  }
};

TEST(AdamW8bit, MatchesFloat64Reference) {
  const int64_t n = 4096 + 77, block = 128;  // a ragged last block
  const fy::AdamWConfig cfg{2e-3f, 0.9f, 0.99f, 1e-8f, 0.05f};
  Rng rng(11);
  std::vector<float> p(n), g(n);
  for (auto& x : p) x = float(rng.uniform(-1, 1));
  Reference ref;
  std::vector<uint8_t> ms = initial_state(ref.ms, n, block), vs = initial_state(ref.mu, n, block);
  const size_t off = fy::q8_codes_bytes(n);
  int64_t near_ties = 0, checked = 0;
  for (int64_t step = 1; step <= 12; ++step) {
    for (int64_t i = 0; i < n; ++i) g[size_t(i)] = float(rng.uniform(-1, 1) * std::pow(10.0, -rng.integer(0, 5)));
    // The reference's inputs: this step's state as the implementation holds it.
    std::vector<double> rp(p.begin(), p.end());
    std::vector<uint8_t> ms0 = ms, vs0 = vs;
    const float* am0 = reinterpret_cast<const float*>(ms0.data() + off);
    const float* av0 = reinterpret_cast<const float*>(vs0.data() + off);
    fy::adamw8bit_step(p.data(), g.data(), ms.data(), vs.data(), n, block, cfg, step);
    const float* am = reinterpret_cast<const float*>(ms.data() + off);
    const float* av = reinterpret_cast<const float*>(vs.data() + off);
    const double lr = cfg.lr, b1 = cfg.beta1, b2 = cfg.beta2, eps = cfg.eps, wd = cfg.weight_decay;
    const double bc1 = 1 - std::pow(b1, step), bc2 = 1 - std::pow(b2, step);
    for (int64_t b = 0; b * block < n; ++b) {
      const int64_t lo = b * block, hi = std::min(n, lo + block);
      std::vector<double> m(size_t(hi - lo)), v(size_t(hi - lo));
      double amax_m = 0, amax_v = 0;
      for (int64_t i = lo; i < hi; ++i) {
        const double gi = g[size_t(i)];
        double mi = double(ref.ms.code[ms0[size_t(i)]]) * am0[b], vi = double(ref.mu.code[vs0[size_t(i)]]) * av0[b];
        mi = b1 * mi + (1 - b1) * gi;
        vi = b2 * vi + (1 - b2) * gi * gi;
        rp[size_t(i)] = rp[size_t(i)] * (1 - lr * wd) - lr / bc1 * mi / (std::sqrt(vi) / std::sqrt(bc2) + eps);
        m[size_t(i - lo)] = mi, v[size_t(i - lo)] = vi;
        amax_m = std::max(amax_m, std::fabs(mi)), amax_v = std::max(amax_v, vi);
      }
      ASSERT_NEAR(am[b], amax_m, 1e-6 * amax_m) << "step " << step << " block " << b;
      ASSERT_NEAR(av[b], amax_v, 1e-6 * amax_v) << "step " << step << " block " << b;
      for (int64_t i = lo; i < hi; ++i) {
        for (int which = 0; which < 2; ++which) {
          const Q8Map& map = which ? ref.mu : ref.ms;
          const double x = which ? v[size_t(i - lo)] / amax_v : m[size_t(i - lo)] / amax_m;
          const int want = Reference::decide(map, x), got = which ? vs[size_t(i)] : ms[size_t(i)];
          ++checked;
          if (got == want) continue;
          // float32 arithmetic may fall on the other side of a decision point only within its rounding.
          ASSERT_LT(Reference::margin(map, x), 1e-6) << "step " << step << " element " << i << " code " << got
                                                      << " vs reference " << want;
          ++near_ties;
        }
        ASSERT_NEAR(p[size_t(i)], rp[size_t(i)], 1e-6 * (1 + std::fabs(rp[size_t(i)]))) << "step " << step << " element " << i;
      }
    }
  }
  EXPECT_LE(near_ties, checked / 10000) << near_ties << " of " << checked << " decisions fell within rounding";
}

TEST(AdamW8bit, InstructionSetsAndPoolAgreeBitForBit) {
  const int64_t n = 3 * fy::AdamWPool::kChunk + 1000, block = 256;
  const fy::AdamWConfig cfg{1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f};
  Rng rng(5);
  std::vector<float> p0(n), g(n);
  for (auto& x : p0) x = float(rng.uniform(-1, 1));
  for (auto& x : g) x = float(rng.uniform(-1, 1) * 1e-3);
  auto run = [&](int how, std::vector<float>& p, std::vector<uint8_t>& ms, std::vector<uint8_t>& vs) {
    p = p0;
    ms = initial_state(fy::q8_map_signed(), n, block);
    vs = initial_state(fy::q8_map_unsigned(), n, block);
    fy::AdamWPool pool(3);
    for (int64_t step = 1; step <= 3; ++step) {
      if (how == 0) fy::adamw8bit_step_isa(fy::AdamWIsa::Scalar, p.data(), g.data(), ms.data(), vs.data(), n, block, cfg, step);
      if (how == 1) fy::adamw8bit_step(p.data(), g.data(), ms.data(), vs.data(), n, block, cfg, step);
      if (how == 2) pool.wait(pool.submit_8bit(p.data(), g.data(), ms.data(), vs.data(), n, block, cfg, step));
    }
  };
  std::vector<float> pa, pb;
  std::vector<uint8_t> ma, va, mb, vb;
  run(0, pa, ma, va);
  for (int how : {1, 2}) {
    run(how, pb, mb, vb);
    EXPECT_EQ(0, std::memcmp(pa.data(), pb.data(), pa.size() * 4)) << how;
    EXPECT_EQ(ma, mb) << how;
    EXPECT_EQ(va, vb) << how;
  }
}

// The vector path computes codes and decisions instead of looking them up:
// it must agree with the scalar tables on every value, the awkward ones first
// (each code and midpoint and their float neighbours, zeros, the smallest and
// largest magnitudes, overshoot past 1, NaN, inf).
TEST(AdamW8bit, VectorCodecMatchesTables) {
  if (!fy::adamw_detail::q8_avx512_supported()) GTEST_SKIP() << "no AVX-512 F, BW, DQ and CD on this CPU";
  Rng rng(13);
  for (const Q8Map* m : {&fy::q8_map_signed(), &fy::q8_map_unsigned()}) {
    std::vector<float> xs = {0.f, -0.f, 1.f, -1.f, 1.0000001f, -1.0000001f, 1e-30f, -1e-30f, 2e-7f, 5e-8f,
                             __builtin_nanf(""), __builtin_inff(), -__builtin_inff()};
    for (int k = 0; k < m->ncodes; ++k) {
      for (float v : {m->code[k], k + 1 < m->ncodes ? m->pos_mid[(k >= m->zero ? k - m->zero : m->zero - 1 - k) % 256]
                                                    : m->code[k]}) {
        xs.push_back(v);
        xs.push_back(std::nextafter(v, 2.f));
        xs.push_back(std::nextafter(v, -2.f));
        xs.push_back(-v);
      }
    }
    for (int i = 0; i < 100000; ++i) xs.push_back(float(std::pow(10.0, rng.uniform(-9, 0.01)) * (i % 2 ? -1 : 1)));
    while (xs.size() % 16) xs.push_back(0.5f);
    std::vector<uint8_t> qs(xs.size()), qv(xs.size());
    fy::adamw_detail::q8_quant_scalar(*m, xs.data(), 1.f, qs.data(), int64_t(xs.size()));
    fy::adamw_detail::q8_quant_avx512(*m, xs.data(), 1.f, qv.data(), int64_t(xs.size()));
    for (size_t i = 0; i < xs.size(); ++i)
      ASSERT_EQ(int(qs[i]), int(qv[i])) << "x = " << xs[i] << " (signed map: " << m->is_signed << ")";
    // Every code decodes to its table value, times an absmax (an infinite
    // one too: the code 0 then gives NaN on both paths).
    std::vector<uint8_t> all(256);
    for (int k = 0; k < 256; ++k) all[size_t(k)] = uint8_t(k < m->ncodes ? k : m->zero);
    for (float absmax : {0.37f, 1.f, __builtin_inff()}) {
      std::vector<float> ds(256), dv(256);
      fy::adamw_detail::q8_dequant_scalar(*m, all.data(), absmax, ds.data(), 256);
      fy::adamw_detail::q8_dequant_avx512(*m, all.data(), absmax, dv.data(), 256);
      EXPECT_EQ(0, std::memcmp(ds.data(), dv.data(), 256 * 4)) << "absmax " << absmax;
    }
  }
}

// The vector encoder rounds a computed fractional index and hands lanes
// within Q8Map::enc_tol of a decision to the scalar encoder: densely around
// every decision point (64 floats either side, both signs, also through a
// scale, as the update quantises x * (1 / absmax)), across the decade
// boundaries, and over every decade at random, it must decide as q8_encode.
TEST(AdamW8bit, VectorEncoderNearEveryDecisionPoint) {
  if (!fy::adamw_detail::q8_avx512_supported()) GTEST_SKIP() << "no AVX-512 F, BW, DQ and CD on this CPU";
  Rng rng(17);
  for (const Q8Map* m : {&fy::q8_map_signed(), &fy::q8_map_unsigned()}) {
    ASSERT_GT(m->enc_tol, 0.f);
    ASSERT_LT(m->enc_tol, 1e-3f);  // the scalar fallback stays rare
    std::vector<float> xs;
    auto around = [&](float v) {
      float up = v, down = v;
      for (int i = 0; i < 64; ++i) {
        for (float x : {up, down}) {
          xs.push_back(x);
          xs.push_back(-x);
        }
        up = std::nextafter(up, 4.f);
        down = std::nextafter(down, 0.f);
      }
    };
    for (int j = 0; j + 1 < m->ncodes - m->zero; ++j) around(m->pos_mid[j]);
    for (int e = 0; e <= 8; ++e) around(fy::kQ8Pow10[e]);
    for (int e = -40; e <= 0; ++e) around(std::ldexp(1.f, e));  // the binades' edges
    // The top binade up to its end: x / absmax stays below 2 (the vector
    // encoder's domain).
    for (float top = std::nextafter(2.f, 0.f); top > 1.99999f; top = std::nextafter(top, 0.f)) {
      xs.push_back(top);
      xs.push_back(-top);
    }
    for (int i = 0; i < 200000; ++i) xs.push_back(float(std::pow(10.0, rng.uniform(-12, 0.1)) * (i % 2 ? -1 : 1)));
    const size_t n = xs.size();
    std::vector<uint8_t> qs(n), qv(n);
    for (float inv : {1.f, 1.f / 0.37f, 3.0e4f}) {
      std::vector<float> x = xs;
      if (inv != 1.f)
        for (float& v : x) v /= inv;  // near, not on, the points: x * inv rounds around them
      fy::adamw_detail::q8_quant_scalar(*m, x.data(), inv, qs.data(), int64_t(n));
      fy::adamw_detail::q8_quant_avx512(*m, x.data(), inv, qv.data(), int64_t(n));
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(int(qs[i]), int(qv[i])) << "x = " << x[i] << " inv = " << inv << " (signed map: " << m->is_signed
                                          << ")";
    }
  }
}

// Every block size takes the fused AVX-512 loop (its 64- and 16-lane encoder
// loops alike) and gives the scalar path's bits.
TEST(AdamW8bit, FusedBlocksMatchScalarAtEveryBlockSize) {
  if (!fy::adamw_detail::q8_avx512_supported()) GTEST_SKIP() << "no AVX-512 F, BW, DQ and CD on this CPU";
  const fy::AdamWConfig cfg{1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f};
  Rng rng(19);
  for (int64_t block = 32; block <= 4096; block *= 2) {
    const int64_t n = 3 * 4096 + 48;  // whole blocks and a ragged last one
    std::vector<float> p0(n), g(n);
    for (auto& x : p0) x = float(rng.uniform(-1, 1));
    for (auto& x : g) x = float(rng.uniform(-1, 1) * std::pow(10.0, -rng.integer(0, 6)));
    std::vector<float> pa = p0, pb = p0;
    std::vector<uint8_t> ma = initial_state(fy::q8_map_signed(), n, block), va = initial_state(fy::q8_map_unsigned(), n, block);
    std::vector<uint8_t> mb = ma, vb = va;
    for (int64_t step = 1; step <= 4; ++step) {
      fy::adamw8bit_step_isa(fy::AdamWIsa::Scalar, pa.data(), g.data(), ma.data(), va.data(), n, block, cfg, step);
      fy::adamw8bit_step_isa(fy::AdamWIsa::Avx512, pb.data(), g.data(), mb.data(), vb.data(), n, block, cfg, step);
    }
    EXPECT_EQ(0, std::memcmp(pa.data(), pb.data(), size_t(n) * 4)) << "block " << block;
    EXPECT_EQ(ma, mb) << "block " << block;
    EXPECT_EQ(va, vb) << "block " << block;
  }
}

TEST(AdamW8bit, RejectsBadBlocks) {
  std::vector<float> p(8), g(8);
  std::vector<uint8_t> s(1024);
  EXPECT_THROW(fy::adamw8bit_step(p.data(), g.data(), s.data(), s.data(), 8, 100, {}, 1), fy::Error);
  EXPECT_THROW(fy::adamw8bit_step(p.data(), g.data(), s.data(), s.data(), 8, 8192, {}, 1), fy::Error);
  EXPECT_EQ(fy::q8_state_bytes(1000, 256), size_t(1024 + 64));
}

}  // namespace
}  // namespace fyt
