// The CPU's cross-entropy of x w^T without the logits
// (kernels/cpu/cross_entropy.cpp) against the whole [N, V] logits in double:
// the loss (mean and sum, ignored labels), and its gradients for x and w,
// over more than one block of rows (a vocabulary of Llama 3's size, so a
// block is 256 rows) with N not a multiple of it; its bits whatever the
// thread count; and its memory, which must not grow with N x V.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "abi/sizes.h"
#include "kernels/cpu/kernels.h"
#include "test_util.h"

namespace k = fy::cpu;
using namespace fyt;

namespace {

constexpr int64_t kIgnore = -100;

struct Reference {
  double loss;
  std::vector<double> dx, dw;
};

Reference reference(const HostTensor& x, const HostTensor& w, const std::vector<int64_t>& labels, bool mean) {
  const int64_t N = int64_t(labels.size()), V = w.shape()[0], D = w.shape()[1];
  const float* px = x.as<float>();
  const float* pw = w.as<float>();
  Reference r{0, std::vector<double>(size_t(N * D), 0), std::vector<double>(size_t(V * D), 0)};
  int64_t count = 0;
  for (int64_t label : labels) count += label != kIgnore;
  const double factor = mean ? 1.0 / double(count) : 1.0;
  std::vector<double> l(static_cast<size_t>(V));
  for (int64_t i = 0; i < N; ++i) {
    if (labels[size_t(i)] == kIgnore) continue;
    double m = -INFINITY;
    for (int64_t v = 0; v < V; ++v) {
      double s = 0;
      for (int64_t d = 0; d < D; ++d) s += double(px[i * D + d]) * double(pw[v * D + d]);
      l[size_t(v)] = s;
      m = std::max(m, s);
    }
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(l[size_t(v)] - m);
    const double lse = m + std::log(sum);
    r.loss += (lse - l[size_t(labels[size_t(i)])]) * factor;
    for (int64_t v = 0; v < V; ++v) {
      const double g = (std::exp(l[size_t(v)] - lse) - (v == labels[size_t(i)] ? 1.0 : 0.0)) * factor;
      for (int64_t d = 0; d < D; ++d) {
        r.dx[size_t(i * D + d)] += g * double(pw[v * D + d]);
        r.dw[size_t(v * D + d)] += g * double(px[i * D + d]);
      }
    }
  }
  return r;
}

struct Case {
  HostTensor x, w, labels, loss, dx, dw, block;
};

Case make(int64_t B, int64_t T, int64_t D, int64_t V, uint64_t seed, const std::vector<int64_t>& ignored) {
  Rng rng(seed);
  Case r;
  r.x = rand_tensor(Shape{B, T, D}, DType::F32, rng);
  r.w = rand_tensor(Shape{V, D}, DType::F32, rng);
  std::vector<double> labels(size_t(B * T));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = double(rng.integer(0, V - 1));
  for (int64_t i : ignored) labels[size_t(i)] = double(kIgnore);
  r.labels = make_tensor(Shape{B * T}, DType::I64, labels);
  r.loss = HostTensor(Shape{}, DType::F32);
  r.dx = HostTensor(Shape{B, T, D}, DType::F32);
  r.dw = HostTensor(Shape{V, D}, DType::F32);
  r.block = HostTensor(Shape{fy::linear_cross_entropy_rows(B * T, V), V}, DType::F32);
  return r;
}

std::vector<int64_t> labels_of(const HostTensor& t) {
  const int64_t* p = t.as<int64_t>();
  return std::vector<int64_t>(p, p + t.numel());
}

void expect_near_all(const HostTensor& got, const std::vector<double>& want, double tol, const std::string& what) {
  ASSERT_EQ(size_t(got.numel()), want.size()) << what;
  int misses = 0;
  double worst = 0, scale = 0;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(double(got.as<float>()[i]) - want[i]) / scale;
    worst = std::max(worst, err);
    if (!(err <= tol) && ++misses <= 3)
      ADD_FAILURE() << what << " element " << i << ": " << got.as<float>()[i] << " vs " << want[i];
  }
  EXPECT_EQ(misses, 0) << what << ": worst error " << worst << " of the largest";
}

}  // namespace

TEST(LinearCrossEntropy, MatchesTheWholeLogitsInDouble) {
  // 300 rows of 256 a block: two blocks, the last of 44.
  for (bool mean : {true, false}) {
    SCOPED_TRACE(mean ? "mean" : "sum");
    Case r = make(3, 100, 16, 128256, 7, {0, 5, 150, 299});
    k::linear_cross_entropy(r.x, r.w, r.labels, r.loss, r.dx, r.dw, r.block, kIgnore, mean, true);
    Reference want = reference(r.x, r.w, labels_of(r.labels), mean);
    EXPECT_NEAR(r.loss.as<float>()[0], want.loss, 2e-6 * std::fabs(want.loss));
    expect_near_all(r.dx, want.dx, 1e-5, "dx");
    expect_near_all(r.dw, want.dw, 1e-5, "dw");
    for (int64_t d = 0; d < 16; ++d) EXPECT_EQ(r.dx.as<float>()[5 * 16 + d], 0.f) << "an ignored row's dx";
  }
}

TEST(LinearCrossEntropy, OneBlockAndNoGradients) {
  // A small vocabulary: all rows in one block; without gradients the loss is
  // the same and dx, dw are not written.
  Case r = make(2, 33, 24, 1000, 3, {7});
  k::linear_cross_entropy(r.x, r.w, r.labels, r.loss, r.dx, r.dw, r.block, kIgnore, true, true);
  Reference want = reference(r.x, r.w, labels_of(r.labels), true);
  EXPECT_NEAR(r.loss.as<float>()[0], want.loss, 2e-6 * std::fabs(want.loss));
  expect_near_all(r.dx, want.dx, 1e-5, "dx");
  expect_near_all(r.dw, want.dw, 1e-5, "dw");
  HostTensor loss(Shape{}, DType::F32), dx(Shape{2, 33, 24}, DType::F32), dw(Shape{1000, 24}, DType::F32);
  k::fill(dx, 3.0);
  k::linear_cross_entropy(r.x, r.w, r.labels, loss, dx, dw, r.block, kIgnore, true, false);
  EXPECT_EQ(loss.as<float>()[0], r.loss.as<float>()[0]);
  EXPECT_EQ(dx.as<float>()[0], 3.f);
}

TEST(LinearCrossEntropy, EveryLabelIgnoredIsNaNAsPyTorch) {
  Case r = make(1, 4, 8, 50, 1, {0, 1, 2, 3});
  k::linear_cross_entropy(r.x, r.w, r.labels, r.loss, r.dx, r.dw, r.block, kIgnore, true, true);
  EXPECT_TRUE(std::isnan(r.loss.as<float>()[0]));
  for (int64_t i = 0; i < r.dw.numel(); ++i) ASSERT_EQ(r.dw.as<float>()[i], 0.f);
}

TEST(LinearCrossEntropy, RefusesALabelOutOfRange) {
  Case r = make(1, 4, 8, 50, 1, {});
  r.labels.as<int64_t>()[2] = 50;
  try {
    k::linear_cross_entropy(r.x, r.w, r.labels, r.loss, r.dx, r.dw, r.block, kIgnore, true, true);
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("label 50 at position 2 is out of range for 50 classes"), std::string::npos)
        << e.what();
  }
}

TEST(LinearCrossEntropy, SameBitsWhateverTheThreadCount) {
  const int threads = omp_get_max_threads();
  Case one = make(2, 150, 32, 128256, 9, {3});
  Case three = make(2, 150, 32, 128256, 9, {3});
  omp_set_num_threads(1);
  k::linear_cross_entropy(one.x, one.w, one.labels, one.loss, one.dx, one.dw, one.block, kIgnore, true, true);
  omp_set_num_threads(3);
  k::linear_cross_entropy(three.x, three.w, three.labels, three.loss, three.dx, three.dw, three.block, kIgnore, true, true);
  omp_set_num_threads(threads);
  EXPECT_TRUE(same_bits(one.loss, three.loss));
  EXPECT_TRUE(same_bits(one.dx, three.dx));
  EXPECT_TRUE(same_bits(one.dw, three.dw));
}

// 2,048 rows of a 128,256 vocabulary: their logits would be 1 GiB in fp32;
// the caller's block holds 256 rows of them (125 MiB), and the kernel adds
// nothing of that order.
TEST(LinearCrossEntropy, NoNxVBuffer) {
  Case r = make(2, 1024, 16, 128256, 2, {});
  EXPECT_EQ(r.block.shape()[0], 256);
  const int64_t before = peak_kb(true);
  if (before < 0) GTEST_SKIP() << "no VmHWM in /proc/self/status";
  k::linear_cross_entropy(r.x, r.w, r.labels, r.loss, r.dx, r.dw, r.block, kIgnore, true, true);
  const int64_t grew = peak_kb(false) - before;
  const int64_t logits_kb = 2048 * 128256 * 4 / 1024;
  EXPECT_LT(grew, logits_kb / 4) << "peak resident memory grew by " << grew << " kB; the logits are " << logits_kb
                                 << " kB";
  EXPECT_TRUE(std::isfinite(r.loss.as<float>()[0]));
}

// At a 16-bit matmul_operands() (--precision bf16 on the CPU target) the
// loss's products round their operands as matmul does: the unfused graph's
// numbers (matmul, softmax_cross_entropy and its gradient, matmul), within
// the sums' order, and not the fp32 products'.
TEST(LinearCrossEntropy, SixteenBitProductsAreTheUnfusedGraphs) {
  Case r = make(2, 150, 32, 5000, 21, {4});
  const std::vector<int64_t> labels = labels_of(r.labels);
  const int64_t N = 300, D = 32, V = 5000;
  HostTensor fp32_dw(Shape{V, D}, DType::F32);
  k::linear_cross_entropy(r.x, r.w, r.labels, r.loss, r.dx, fp32_dw, r.block, kIgnore, true, true);
  k::set_matmul_operands(k::MatmulOperands::BF16);
  k::linear_cross_entropy(r.x, r.w, r.labels, r.loss, r.dx, r.dw, r.block, kIgnore, true, true);
  const View x2{r.x.view().data, Shape{N, D}, DType::F32};
  HostTensor logits(Shape{N, V}, DType::F32), lp(Shape{N, V}, DType::F32), loss(Shape{}, DType::F32),
      one = make_tensor(Shape{}, DType::F32, {1.0}), g(Shape{N, V}, DType::F32), dx(Shape{N, D}, DType::F32),
      dw(Shape{V, D}, DType::F32);
  k::matmul(x2, r.w, logits, false, true);
  k::softmax_cross_entropy(logits, r.labels, loss, lp, kIgnore, true);
  k::softmax_cross_entropy_grad(one, lp, r.labels, g, kIgnore, true);
  k::matmul(g, r.w, dx, false, false);
  k::matmul(g, x2, dw, true, false);
  k::set_matmul_operands(k::MatmulOperands::FP32);
  EXPECT_NEAR(r.loss.as<float>()[0], loss.as<float>()[0], 1e-6 * std::fabs(loss.as<float>()[0]));
  auto as_double = [](const HostTensor& t) {
    std::vector<double> v(size_t(t.numel()));
    for (size_t i = 0; i < v.size(); ++i) v[i] = t.as<float>()[i];
    return v;
  };
  expect_near_all(r.dx, as_double(dx), 1e-5, "dx");
  expect_near_all(r.dw, as_double(dw), 1e-5, "dw");
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < V * D; ++i) {
    diff = std::max(diff, double(std::fabs(r.dw.as<float>()[i] - fp32_dw.as<float>()[i])));
    scale = std::max(scale, double(std::fabs(fp32_dw.as<float>()[i])));
  }
  EXPECT_GT(diff, 1e-4 * scale) << "dw's products at bf16 gave the fp32 products' numbers";
}
