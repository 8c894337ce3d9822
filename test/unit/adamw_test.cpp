// AdamW against an independent double-precision evaluation of the PyTorch
// AdamW formula, against hand-computed first-step values and against torch;
// the instruction-set paths and the thread pool against each other, bit for
// bit.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "optim/adamw.h"
#include "optim/adamw8bit.h"
#include "optim/lr_schedule.h"
#include "test_util.h"

namespace fyt {
namespace {

TEST(AdamW, MatchesDoubleReferenceOverSteps) {
  Rng rng(1);
  const int64_t n = 1000;
  fy::AdamWConfig cfg{3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
  std::vector<float> p(n), m(n, 0), v(n, 0), g(n);
  std::vector<double> rp(n), rm(n, 0), rv(n, 0);
  for (int64_t i = 0; i < n; ++i) rp[size_t(i)] = p[size_t(i)] = float(rng.uniform(-1, 1));
  for (int64_t step = 1; step <= 20; ++step) {
    for (int64_t i = 0; i < n; ++i) g[size_t(i)] = float(rng.uniform(-1, 1) * (i % 7 == 0 ? 1e-4 : 1.0));
    fy::adamw_step(p.data(), g.data(), m.data(), v.data(), n, cfg, step);
    const double lr = cfg.lr, b1 = cfg.beta1, b2 = cfg.beta2, eps = cfg.eps, wd = cfg.weight_decay;
    for (size_t i = 0; i < size_t(n); ++i) {
      const double gi = g[i];
      rp[i] *= 1 - lr * wd;
      rm[i] = b1 * rm[i] + (1 - b1) * gi;
      rv[i] = b2 * rv[i] + (1 - b2) * gi * gi;
      const double mhat = rm[i] / (1 - std::pow(b1, step)), vhat = rv[i] / (1 - std::pow(b2, step));
      rp[i] -= lr * mhat / (std::sqrt(vhat) + eps);
    }
  }
  double max_err = 0;
  for (size_t i = 0; i < size_t(n); ++i) {
    max_err = std::max(max_err, std::fabs(p[i] - rp[i]));
    EXPECT_NEAR(m[i], rm[i], 1e-6 + 1e-5 * std::fabs(rm[i]));
    EXPECT_NEAR(v[i], rv[i], 1e-9 + 1e-5 * std::fabs(rv[i]));
  }
  // fp32 state over 20 steps of size ~lr: rounding stays far below lr.
  EXPECT_LT(max_err, 1e-5);
}

TEST(AdamW, FirstStepIsSignTimesLr) {
  // Step 1 with zero state: mhat = g, vhat = g^2, so the update is
  // lr * g/(|g| + eps) ~ lr * sign(g), after decoupled decay.
  fy::AdamWConfig cfg{0.01f, 0.9f, 0.999f, 1e-8f, 0.5f};
  std::vector<float> p = {1.0f, -2.0f, 0.5f}, g = {0.3f, -4.0f, 0.0f}, m(3, 0), v(3, 0);
  fy::adamw_step(p.data(), g.data(), m.data(), v.data(), 3, cfg, 1);
  EXPECT_NEAR(p[0], 1.0 * (1 - 0.005) - 0.01, 1e-6);
  EXPECT_NEAR(p[1], -2.0 * (1 - 0.005) + 0.01, 1e-6);
  EXPECT_NEAR(p[2], 0.5 * (1 - 0.005), 1e-7);  // zero gradient: decay only
  // Hyper-parameters are floats: 1 - 0.999f is not exactly 0.001.
  EXPECT_NEAR(m[1], (1 - double(0.9f)) * -4.0, 1e-7);
  EXPECT_NEAR(v[1], (1 - double(0.999f)) * 16.0, 1e-9);
}

#ifdef FY_ADAMW_TORCH_REF
// Optional oracle: Debian's /usr/bin/python3 with torch 1.13. Skips when it
// is not there. Expect (near) bit equality: same fp32 operation order.
TEST(AdamW, MatchesTorch) {
  if (std::system("/usr/bin/python3 -c 'import torch, numpy' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "/usr/bin/python3 with torch not available";
  Rng rng(3);
  const int64_t n = 4096, steps = 10;
  fy::AdamWConfig cfg{6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f};
  std::vector<float> in = {float(n), float(steps), float(cfg.lr), cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay};
  std::vector<float> p(n), m(n, 0), v(n, 0);
  for (auto& x : p) x = float(rng.uniform(-1, 1));
  in.insert(in.end(), p.begin(), p.end());
  std::vector<float> grads(size_t(n * steps));
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = float(rng.uniform(-1, 1) * (i % 5 == 0 ? 1e-3 : 1.0));
  in.insert(in.end(), grads.begin(), grads.end());
  const std::string base = ::testing::TempDir() + "fy_adamw_" + std::to_string(::getpid());
  {
    std::ofstream f(base + ".in", std::ios::binary);
    f.write(reinterpret_cast<const char*>(in.data()), std::streamsize(in.size() * 4));
  }
  const std::string cmd = std::string("/usr/bin/python3 ") + FY_ADAMW_TORCH_REF + " " + base + ".in " + base + ".out";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::vector<float> ref(size_t(3 * n));
  {
    std::ifstream f(base + ".out", std::ios::binary);
    f.read(reinterpret_cast<char*>(ref.data()), std::streamsize(ref.size() * 4));
    ASSERT_TRUE(f.good());
  }
  std::remove((base + ".in").c_str());
  std::remove((base + ".out").c_str());
  for (int64_t s = 0; s < steps; ++s) fy::adamw_step(p.data(), grads.data() + s * n, m.data(), v.data(), n, cfg, s + 1);
  int64_t exact = 0;
  double max_rel = 0;
  for (int64_t i = 0; i < n; ++i) {
    exact += p[size_t(i)] == ref[size_t(i)];
    // Relative to the parameter, or to what the steps can move it by (their
    // learning rates), whichever is larger: a parameter near 0 is all update.
    max_rel = std::max(max_rel, std::fabs(double(p[size_t(i)]) - ref[size_t(i)]) /
                                    std::max(double(steps) * cfg.lr, std::fabs(double(ref[size_t(i)]))));
    EXPECT_NEAR(m[size_t(i)], ref[size_t(n + i)], 1e-7 + 1e-6 * std::fabs(ref[size_t(n + i)]));
    EXPECT_NEAR(v[size_t(i)], ref[size_t(2 * n + i)], 1e-10 + 1e-6 * std::fabs(ref[size_t(2 * n + i)]));
  }
  RecordProperty("bit_exact_params", std::to_string(exact) + "/" + std::to_string(n));
  std::printf("AdamW vs torch: %lld/%lld params bit-exact, max rel diff %.3g\n", (long long)exact, (long long)n, max_rel);
  EXPECT_LT(max_rel, 1e-6);
  // Bit identity of p, m and v, where torch runs its FMA-fusing vector
  // kernels (AVX2 or AVX-512 capability): every x86 machine with AVX2 and
  // FMA, unless ATEN_CPU_CAPABILITY holds torch to its scalar ones.
  const char* cap = std::getenv("ATEN_CPU_CAPABILITY");
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || (cap && std::string(cap) == "default"))
    GTEST_SKIP() << "torch runs its scalar AdamW here: within 1e-6, not bit for bit";
  EXPECT_EQ(exact, n);
  EXPECT_EQ(std::memcmp(m.data(), ref.data() + n, size_t(n) * 4), 0) << "exp_avg not bit-identical to torch";
  EXPECT_EQ(std::memcmp(v.data(), ref.data() + 2 * n, size_t(n) * 4), 0) << "exp_avg_sq not bit-identical to torch";
}
#endif

TEST(AdamW, RejectsStepZero) {
  float p = 0, g = 0, m = 0, v = 0;
  EXPECT_THROW(fy::adamw_step(&p, &g, &m, &v, 1, fy::AdamWConfig{}, 0), fy::Error);
  EXPECT_THROW(fy::adamw_step(&p, &g, &m, &v, -1, fy::AdamWConfig{}, 1), fy::Error);
  fy::AdamWPool pool(1);
  EXPECT_THROW(pool.submit(&p, &g, &m, &v, 1, fy::AdamWConfig{}, 0), fy::Error);
  EXPECT_THROW(pool.update(&p, &g, &m, &v, 1, fy::AdamWConfig{}, 0), fy::Error);
}

// Optimizer state of n parameters with awkward values mixed in: zero and
// tiny gradients, zero second moments (denominator = eps), large values.
struct State {
  std::vector<float> p, g, m, v;
  State(int64_t n, uint64_t seed) : p(size_t(n)), g(size_t(n)), m(size_t(n)), v(size_t(n)) {
    Rng rng(seed);
    for (size_t i = 0; i < size_t(n); ++i) {
      p[i] = float(rng.uniform(-2, 2));
      const int64_t kind = rng.integer(0, 9);
      g[i] = kind == 0 ? 0.0f : kind == 1 ? float(rng.uniform(-1e-20, 1e-20)) : kind == 2 ? float(rng.uniform(-1e4, 1e4))
                                                                                        : float(rng.uniform(-1, 1));
      m[i] = float(rng.uniform(-0.1, 0.1));
      v[i] = kind == 3 ? 0.0f : float(rng.uniform(0, 0.01));
    }
  }
  bool same_bits(const State& o) const {
    auto eq = [](const std::vector<float>& a, const std::vector<float>& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    };
    return eq(p, o.p) && eq(g, o.g) && eq(m, o.m) && eq(v, o.v);
  }
};

std::vector<fy::AdamWIsa> supported_isas() {
  std::vector<fy::AdamWIsa> out;
  for (auto isa : {fy::AdamWIsa::Scalar, fy::AdamWIsa::Avx2, fy::AdamWIsa::Avx512})
    if (fy::adamw_isa_supported(isa)) out.push_back(isa);
  return out;
}

// Every instruction set this CPU has gives the scalar loop's bits, for
// lengths around the vector widths (8, 16, unrolled 16, 32) and at unaligned
// addresses, over several steps (bias corrections change with the step).
TEST(AdamW, InstructionSetsAreBitIdentical) {
  std::string tested;
  for (auto isa : supported_isas()) tested += std::string(tested.empty() ? "" : ",") + fy::adamw_isa_name(isa);
  RecordProperty("isas", tested);
  std::printf("AdamW paths on this CPU: %s (best: %s)\n", tested.c_str(), fy::adamw_isa_name(fy::adamw_best_isa()));
  const fy::AdamWConfig cfgs[] = {{6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f}, {1e-2f, 0.8f, 0.999f, 0.0f, 0.0f}};
  for (int64_t n : {0, 1, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 63, 64, 65, 100, 1000, 4099}) {
    for (int64_t offset : {0, 1, 5}) {  // floats; 1 and 5 leave every vector load unaligned
      for (const auto& cfg : cfgs) {
        State ref(n + offset, uint64_t(n * 31 + offset));
        std::vector<State> got(3, ref);
        for (int64_t step : {1, 2, 1000}) {
          fy::adamw_step_isa(fy::AdamWIsa::Scalar, ref.p.data() + offset, ref.g.data() + offset,
                             ref.m.data() + offset, ref.v.data() + offset, n, cfg, step);
          for (auto isa : supported_isas()) {
            State& s = got[size_t(isa)];
            fy::adamw_step_isa(isa, s.p.data() + offset, s.g.data() + offset, s.m.data() + offset,
                               s.v.data() + offset, n, cfg, step);
          }
        }
        for (auto isa : supported_isas())
          EXPECT_TRUE(got[size_t(isa)].same_bits(ref))
              << fy::adamw_isa_name(isa) << " differs from scalar: n=" << n << " offset=" << offset
              << " eps=" << cfg.eps;
      }
    }
  }
}

// The gradient multipliers (loss-scale unscaling, the clipping coefficient)
// are the update of the gradient multiplied beforehand, (g * a) * b, in every
// instruction set, for fp32 and 8-bit moments; at 1 they change nothing.
TEST(AdamW, GradientMultipliersAreThePremultipliedGradient) {
  const int64_t n = 4099, block = 256;
  const float a = 1.f / 65536, b = 0.37f;
  for (auto isa : supported_isas()) {
    State scaled(n, 21), ref = scaled;
    for (size_t i = 0; i < ref.g.size(); ++i) ref.g[i] = (ref.g[i] * a) * b;
    fy::AdamWConfig cfg{6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f}, plain = cfg;
    cfg.grad_unscale = a;
    cfg.grad_coef = b;
    std::vector<uint8_t> ms(fy::q8_state_bytes(n, block)), vs = ms, mr = ms, vr = ms;
    std::vector<float> p8 = scaled.p, r8 = scaled.p;
    for (int64_t step : {1, 2, 3}) {
      fy::adamw_step_isa(isa, scaled.p.data(), scaled.g.data(), scaled.m.data(), scaled.v.data(), n, cfg, step);
      fy::adamw_step_isa(isa, ref.p.data(), ref.g.data(), ref.m.data(), ref.v.data(), n, plain, step);
      fy::adamw8bit_step_isa(isa, p8.data(), scaled.g.data(), ms.data(), vs.data(), n, block, cfg, step);
      fy::adamw8bit_step_isa(isa, r8.data(), ref.g.data(), mr.data(), vr.data(), n, block, plain, step);
    }
    EXPECT_EQ(0, std::memcmp(scaled.g.data(), State(n, 21).g.data(), scaled.g.size() * sizeof(float)))
        << "the gradient is read, not changed";
    scaled.g = ref.g;
    EXPECT_TRUE(scaled.same_bits(ref)) << fy::adamw_isa_name(isa);
    EXPECT_EQ(0, std::memcmp(p8.data(), r8.data(), p8.size() * sizeof(float))) << fy::adamw_isa_name(isa) << " 8-bit";
    EXPECT_EQ(ms, mr) << fy::adamw_isa_name(isa) << " 8-bit";
    EXPECT_EQ(vs, vr) << fy::adamw_isa_name(isa) << " 8-bit";
  }
}

TEST(AdamW, DefaultPathIsBestIsa) {
  State a(1000, 5), b = a;
  const fy::AdamWConfig cfg;
  fy::adamw_step(a.p.data(), a.g.data(), a.m.data(), a.v.data(), 1000, cfg, 3);
  fy::adamw_step_isa(fy::adamw_best_isa(), b.p.data(), b.g.data(), b.m.data(), b.v.data(), 1000, cfg, 3);
  EXPECT_TRUE(a.same_bits(b));
}

// The pool only splits the range: any thread count gives adamw_step's bits,
// with sizes that leave a partial last chunk and a partial last vector.
TEST(AdamWPool, UpdateMatchesSingleThread) {
  const fy::AdamWConfig cfg{3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
  for (int64_t n : {int64_t(5), fy::AdamWPool::kChunk, fy::AdamWPool::kChunk + 1, 5 * fy::AdamWPool::kChunk + 123}) {
    State ref(n, uint64_t(n));
    for (int64_t step = 1; step <= 3; ++step) fy::adamw_step(ref.p.data(), ref.g.data(), ref.m.data(), ref.v.data(), n, cfg, step);
    for (int threads : {1, 2, 3, 0}) {
      fy::AdamWPool pool(threads);
      EXPECT_GE(pool.threads(), 1);
      State s(n, uint64_t(n));
      for (int64_t step = 1; step <= 3; ++step) pool.update(s.p.data(), s.g.data(), s.m.data(), s.v.data(), n, cfg, step);
      EXPECT_TRUE(s.same_bits(ref)) << "n=" << n << " threads=" << threads;
    }
  }
}

// Asynchronous submission: many updates in flight (as the out-of-core
// optimizer submits layer groups), waited for in another order, each equal
// to its single-threaded result; wait_all and the destructor drain the rest.
TEST(AdamWPool, SubmitWaitManyGroups) {
  const fy::AdamWConfig cfg{1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f};
  const int groups = 12;
  std::vector<State> ref, got;
  for (int i = 0; i < groups; ++i) {
    const int64_t n = (i % 3 == 0) ? 17 : int64_t(i) * 40000 + 7;  // some below, some above a chunk
    ref.emplace_back(n, uint64_t(100 + i));
    fy::adamw_step(ref.back().p.data(), ref.back().g.data(), ref.back().m.data(), ref.back().v.data(), n, cfg, 4);
  }
  fy::AdamWPool pool(2);
  for (int round = 0; round < 2; ++round) {
    got.clear();
    for (int i = 0; i < groups; ++i) got.emplace_back(int64_t(ref[size_t(i)].p.size()), uint64_t(100 + i));
    std::vector<fy::AdamWPool::Handle> hs;
    for (auto& s : got) hs.push_back(pool.submit(s.p.data(), s.g.data(), s.m.data(), s.v.data(), int64_t(s.p.size()), cfg, 4));
    if (round == 0) {
      for (int i = groups - 1; i >= 0; --i) {
        pool.wait(hs[size_t(i)]);
        EXPECT_TRUE(pool.done(hs[size_t(i)]));
      }
    } else {
      pool.wait_all();
      for (auto& h : hs) EXPECT_TRUE(pool.done(h));
    }
    for (int i = 0; i < groups; ++i) EXPECT_TRUE(got[size_t(i)].same_bits(ref[size_t(i)])) << "group " << i << " round " << round;
  }
  fy::AdamWPool::Handle empty;
  EXPECT_FALSE(empty.valid());
  pool.wait(empty);
  EXPECT_TRUE(pool.done(empty));
  float x = 0;
  auto h0 = pool.submit(&x, &x, &x, &x, 0, cfg, 1);  // nothing to do: done at once
  EXPECT_TRUE(pool.done(h0));
}

TEST(AdamWPool, DestructorFinishesSubmittedWork) {
  const fy::AdamWConfig cfg;
  const int64_t n = 3 * fy::AdamWPool::kChunk + 11;
  State ref(n, 9), got(n, 9);
  fy::adamw_step(ref.p.data(), ref.g.data(), ref.m.data(), ref.v.data(), n, cfg, 1);
  {
    fy::AdamWPool pool(2);
    pool.submit(got.p.data(), got.g.data(), got.m.data(), got.v.data(), n, cfg, 1);
  }
  EXPECT_TRUE(got.same_bits(ref));
}

TEST(AdamWPool, ForChunksVisitsEachElementOnceInFixedChunks) {
  const int64_t C = fy::AdamWPool::kChunk, n = 5 * C + 123;
  std::vector<int64_t> lens;
  for (int threads : {1, 3}) {
    fy::AdamWPool pool(threads);
    std::vector<int> visits(size_t(n), 0);
    std::vector<int64_t> got(6, -1);  // each chunk's length, by its start
    pool.wait(pool.for_chunks(n, [&](int64_t lo, int64_t len) {
      EXPECT_EQ(lo % C, 0);
      got[size_t(lo / C)] = len;
      for (int64_t k = lo; k < lo + len; ++k) ++visits[size_t(k)];
    }));
    EXPECT_EQ(std::count(visits.begin(), visits.end(), 1), n) << threads << " threads";
    EXPECT_EQ(got, (std::vector<int64_t>{C, C, C, C, C, 123})) << threads << " threads";
    auto h = pool.for_chunks(0, [](int64_t, int64_t) { ADD_FAILURE() << "a chunk of nothing"; });
    EXPECT_TRUE(pool.done(h));
  }
}

// Values worked by hand from the definition: warmup lr*s/W, then
// min + (lr - min) * shape(t), t = (s - W) / (D - W).
TEST(LrSchedule, WarmupThenDecayToTheFloor) {
  using K = fy::LrSchedule::Kind;
  fy::LrSchedule cos{K::Cosine, 4, 12, 1e-4};
  EXPECT_DOUBLE_EQ(cos.at(1e-3, 1), 2.5e-4);
  EXPECT_DOUBLE_EQ(cos.at(1e-3, 4), 1e-3);
  EXPECT_NEAR(cos.at(1e-3, 6), 8.681980515339464e-4, 1e-18);  // t = 1/4: (1 + cos(pi/4)) / 2
  EXPECT_NEAR(cos.at(1e-3, 8), 5.5e-4, 1e-18);                // t = 1/2: halfway
  EXPECT_NEAR(cos.at(1e-3, 12), 1e-4, 1e-18);
  EXPECT_NEAR(cos.at(1e-3, 1000), 1e-4, 1e-18);               // stays at the floor
  fy::LrSchedule lin{K::Linear, 4, 12, 1e-4};
  EXPECT_NEAR(lin.at(1e-3, 6), 7.75e-4, 1e-18);
  EXPECT_NEAR(lin.at(1e-3, 12), 1e-4, 1e-18);
  fy::LrSchedule flat{K::Constant, 2, 0, 0};
  EXPECT_DOUBLE_EQ(flat.at(1e-3, 1), 5e-4);
  EXPECT_DOUBLE_EQ(flat.at(1e-3, 2), 1e-3);
  EXPECT_DOUBLE_EQ(flat.at(1e-3, 500), 1e-3);
  EXPECT_DOUBLE_EQ(fy::LrSchedule{}.at(3e-4, 1), 3e-4);
  fy::LrSchedule nowarm{K::Cosine, 0, 10, 0};
  EXPECT_DOUBLE_EQ(nowarm.at(1e-3, 10), 0.0);
  EXPECT_NEAR(nowarm.at(1e-3, 5), 5e-4, 1e-18);
}

TEST(LrSchedule, RefusesADecayThatCannotRun) {
  using K = fy::LrSchedule::Kind;
  EXPECT_EQ(fy::LrSchedule({K::Cosine, 4, 12, 1e-4}).invalid(1e-3), "");
  EXPECT_NE(fy::LrSchedule({K::Cosine, 12, 12, 0}).invalid(1e-3), "");  // ends where the warmup ends
  EXPECT_NE(fy::LrSchedule({K::Linear, 0, 10, 2e-3}).invalid(1e-3), "");  // floor above the peak
  EXPECT_EQ(fy::LrSchedule({K::Constant, 50, 10, 0}).invalid(1e-3), "");  // no decay: any warmup
  fy::LrSchedule::Kind k;
  EXPECT_TRUE(fy::parse_lr_schedule_kind("linear", &k));
  EXPECT_EQ(k, K::Linear);
  EXPECT_FALSE(fy::parse_lr_schedule_kind("Cosine", &k));
}

}  // namespace
}  // namespace fyt
