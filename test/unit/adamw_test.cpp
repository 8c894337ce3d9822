// AdamW against an independent double-precision evaluation of the PyTorch
// AdamW formula, and against hand-computed first-step values.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "optim/adamw.h"
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
  std::vector<float> in = {float(n), float(steps), cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay};
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
    max_rel = std::max(max_rel, std::fabs(double(p[size_t(i)]) - ref[size_t(i)]) / std::max(1e-6, std::fabs(double(ref[size_t(i)]))));
    EXPECT_NEAR(m[size_t(i)], ref[size_t(n + i)], 1e-7 + 1e-6 * std::fabs(ref[size_t(n + i)]));
    EXPECT_NEAR(v[size_t(i)], ref[size_t(2 * n + i)], 1e-10 + 1e-6 * std::fabs(ref[size_t(2 * n + i)]));
  }
  RecordProperty("bit_exact_params", std::to_string(exact) + "/" + std::to_string(n));
  std::printf("AdamW vs torch: %lld/%lld params bit-exact, max rel diff %.3g\n", (long long)exact, (long long)n, max_rel);
  EXPECT_LT(max_rel, 1e-6);
}
#endif

TEST(AdamW, RejectsStepZero) {
  float p = 0, g = 0, m = 0, v = 0;
  EXPECT_THROW(fy::adamw_step(&p, &g, &m, &v, 1, fy::AdamWConfig{}, 0), fy::Error);
}

}  // namespace
}  // namespace fyt
