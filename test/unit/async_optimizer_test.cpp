// The background optimizer (exec/async_optimizer.h) must give the very bits
// of the inline one, free the caller's gradients at once, and report a
// failure at the next wait.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "exec/runtime.h"

namespace {

// Two parameters with the same random start; returns the runtime.
void declare(fy::Runtime& rt, uint32_t seed) {
  rt.declare_param("a", fy::Shape{33, 7}, fy::DType::F32, true);
  rt.declare_param("b", fy::Shape{129}, fy::DType::F32, true);
  std::mt19937 gen(seed);
  std::normal_distribution<float> nd;
  for (int64_t i = 0; i < rt.num_params(); ++i) {
    fy::View v = rt.param(i).value;
    for (int64_t k = 0; k < v.numel(); ++k) v.as<float>()[k] = nd(gen);
  }
}

std::vector<float> random_grad(int64_t n, std::mt19937& gen) {
  std::normal_distribution<float> nd;
  std::vector<float> g(static_cast<size_t>(n));
  for (auto& x : g) x = nd(gen);
  return g;
}

TEST(AsyncOptimizer, BitIdenticalToInline) {
  fy::Runtime inline_rt, async_rt;
  declare(inline_rt, 7);
  declare(async_rt, 7);
  int64_t group = async_rt.async_optimizer().declare_group({0, 1});
  std::mt19937 gen(11);
  for (int64_t step = 1; step <= 5; ++step) {
    inline_rt.set_step(step);
    async_rt.set_step(step);
    std::vector<std::vector<float>> grads;
    for (int64_t i = 0; i < 2; ++i) grads.push_back(random_grad(inline_rt.param(i).value.numel(), gen));
    std::vector<fy::View> views;
    for (int64_t i = 0; i < 2; ++i) {
      fy::View g = inline_rt.param(i).value;
      g.data = grads[size_t(i)].data();
      inline_rt.adamw(i, g);
      views.push_back(g);
    }
    async_rt.async_optimizer().wait(group);
    async_rt.async_optimizer().start(group, views.data(), views.size());
    // The gradients were copied: scribbling on them now changes nothing.
    for (auto& g : grads) std::fill(g.begin(), g.end(), 1e30f);
  }
  async_rt.async_optimizer().wait_all();
  for (int64_t i = 0; i < 2; ++i) {
    const fy::View a = inline_rt.param(i).value, b = async_rt.param(i).value;
    EXPECT_EQ(0, std::memcmp(a.data, b.data, size_t(a.nbytes()))) << "parameter " << i;
  }
  EXPECT_GT(async_rt.async_optimizer().busy_seconds(), 0.0);
}

TEST(AsyncOptimizer, WrongGradientFailsClearly) {
  fy::Runtime rt;
  declare(rt, 3);
  rt.set_step(1);
  int64_t group = rt.async_optimizer().declare_group({0, 1});
  std::vector<float> small(4);
  fy::View g{small.data(), fy::Shape{4}, fy::DType::F32};
  fy::View both[2] = {g, g};
  try {
    rt.async_optimizer().start(group, both, 2);
    FAIL() << "expected an error";
  } catch (const fy::Error& e) {
    EXPECT_NE(std::string(e.what()).find("gradient of 'a'"), std::string::npos) << e.what();
  }
}

TEST(AsyncOptimizer, FrozenParameterRefused) {
  fy::Runtime rt;
  rt.declare_param("frozen", fy::Shape{4}, fy::DType::F32, false);
  EXPECT_THROW(rt.async_optimizer().declare_group({0}), fy::Error);
}

}  // namespace
