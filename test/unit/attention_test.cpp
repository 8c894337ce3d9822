// The CPU's fused causal attention (kernels/cpu/attention.cpp) against a
// reference in double that forms the whole T x T score matrix: outputs,
// log-sum-exps and the three gradients, for causal and sliding-window masks,
// grouped-query heads, T not a multiple of the kernel's block, head dims 64
// and 128; its bits whatever the thread count; and its memory, which must
// not grow with T x T.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "core/half.h"
#include "kernels/cpu/kernels.h"
#include "test_util.h"

namespace k = fy::cpu;
using namespace fyt;

namespace {

struct Case {
  int64_t B, H, Hkv, T, D, window;
  std::string name() const {
    return "B" + std::to_string(B) + " H" + std::to_string(H) + " Hkv" + std::to_string(Hkv) + " T" +
           std::to_string(T) + " D" + std::to_string(D) + " window " + std::to_string(window);
  }
};

struct Reference {
  std::vector<double> out, lse, dq, dk, dv;
};

// The textbook formulas over the whole matrix, in double.
Reference reference(const Case& c, const HostTensor& q, const HostTensor& k, const HostTensor& v,
                    const HostTensor& dout, double scale) {
  const int64_t T = c.T, D = c.D, group = c.H / c.Hkv;
  Reference r;
  r.out.assign(size_t(c.B * c.H * T * D), 0);
  r.lse.assign(size_t(c.B * c.H * T), 0);
  r.dq.assign(r.out.size(), 0);
  r.dk.assign(size_t(c.B * c.Hkv * T * D), 0);
  r.dv.assign(r.dk.size(), 0);
  std::vector<double> P(size_t(T * T)), dS(size_t(T * T));
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h) {
      const int64_t qo = (b * c.H + h) * T * D, ko = (b * c.Hkv + h / group) * T * D;
      auto Q = [&](int64_t i, int64_t x) { return double(q.as<float>()[qo + i * D + x]); };
      auto K = [&](int64_t j, int64_t x) { return double(k.as<float>()[ko + j * D + x]); };
      auto V = [&](int64_t j, int64_t x) { return double(v.as<float>()[ko + j * D + x]); };
      auto dO = [&](int64_t i, int64_t x) { return double(dout.as<float>()[qo + i * D + x]); };
      for (int64_t i = 0; i < T; ++i) {
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < T; ++j) {
          const bool sees = j <= i && (c.window == 0 || j > i - c.window);
          double s = 0;
          for (int64_t x = 0; x < D; ++x) s += Q(i, x) * K(j, x);
          P[size_t(i * T + j)] = sees ? s * scale : -std::numeric_limits<double>::infinity();
          m = std::max(m, P[size_t(i * T + j)]);
        }
        double sum = 0;
        for (int64_t j = 0; j < T; ++j) sum += (P[size_t(i * T + j)] = std::exp(P[size_t(i * T + j)] - m));
        for (int64_t j = 0; j < T; ++j) P[size_t(i * T + j)] /= sum;
        r.lse[size_t((b * c.H + h) * T + i)] = m + std::log(sum);
        for (int64_t x = 0; x < D; ++x) {
          double o = 0;
          for (int64_t j = 0; j < T; ++j) o += P[size_t(i * T + j)] * V(j, x);
          r.out[size_t(qo + i * D + x)] = o;
        }
      }
      for (int64_t i = 0; i < T; ++i) {
        double delta = 0;
        for (int64_t j = 0; j < T; ++j) {
          double dp = 0;
          for (int64_t x = 0; x < D; ++x) dp += dO(i, x) * V(j, x);
          dS[size_t(i * T + j)] = dp;
          delta += dp * P[size_t(i * T + j)];
        }
        for (int64_t j = 0; j < T; ++j) dS[size_t(i * T + j)] = P[size_t(i * T + j)] * (dS[size_t(i * T + j)] - delta);
      }
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < T; ++j)
          for (int64_t x = 0; x < D; ++x) {
            r.dq[size_t(qo + i * D + x)] += scale * dS[size_t(i * T + j)] * K(j, x);
            r.dk[size_t(ko + j * D + x)] += scale * dS[size_t(i * T + j)] * Q(i, x);
            r.dv[size_t(ko + j * D + x)] += P[size_t(i * T + j)] * dO(i, x);
          }
    }
  return r;
}

void expect_near_all(const HostTensor& got, const std::vector<double>& want, double tol, const std::string& what) {
  ASSERT_EQ(size_t(got.numel()), want.size()) << what;
  int misses = 0;
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = got.as<float>()[i], err = std::fabs(g - want[i]) / (1 + std::fabs(want[i]));
    worst = std::max(worst, err);
    if (!(err <= tol) && ++misses <= 3) ADD_FAILURE() << what << " element " << i << ": " << g << " vs " << want[i];
  }
  EXPECT_EQ(misses, 0) << what << ": worst error " << worst;
}

struct Outputs {
  HostTensor q, k, v, dout, out, lse, dq, dk, dv;
};

Outputs run(const Case& c, uint64_t seed) {
  Rng rng(seed);
  Outputs r;
  r.q = rand_tensor(Shape{c.B, c.H, c.T, c.D}, DType::F32, rng);
  r.k = rand_tensor(Shape{c.B, c.Hkv, c.T, c.D}, DType::F32, rng);
  r.v = rand_tensor(Shape{c.B, c.Hkv, c.T, c.D}, DType::F32, rng);
  r.dout = rand_tensor(Shape{c.B, c.H, c.T, c.D}, DType::F32, rng);
  r.out = HostTensor(Shape{c.B, c.H, c.T, c.D}, DType::F32);
  r.lse = HostTensor(Shape{c.B, c.H, c.T}, DType::F32);
  r.dq = HostTensor(Shape{c.B, c.H, c.T, c.D}, DType::F32);
  r.dk = HostTensor(Shape{c.B, c.Hkv, c.T, c.D}, DType::F32);
  r.dv = HostTensor(Shape{c.B, c.Hkv, c.T, c.D}, DType::F32);
  const double scale = 1 / std::sqrt(double(c.D));
  k::attention(r.q, r.k, r.v, r.out, r.lse, scale, c.window);
  k::attention_grad(r.q, r.k, r.v, r.out, r.lse, r.dout, r.dq, r.dk, r.dv, scale, c.window);
  return r;
}

}  // namespace

TEST(Attention, MatchesTheWholeMatrixInDouble) {
  const Case cases[] = {
      {2, 4, 4, 77, 64, 0},    // causal, T not a multiple of the block
      {1, 8, 2, 130, 64, 0},   // grouped-query heads: 4 query heads a key/value head
      {1, 2, 2, 150, 64, 32},  // a sliding window
      {1, 2, 1, 70, 128, 0},   // head dim 128, one key/value head
      {1, 4, 2, 200, 128, 50}, // window and grouped heads
      {1, 1, 1, 5, 64, 0},     // shorter than a block
      {1, 2, 2, 64, 64, 1},    // a window of one: each row sees itself
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name());
    Outputs r = run(c, 11);
    Reference want = reference(c, r.q, r.k, r.v, r.dout, 1 / std::sqrt(double(c.D)));
    expect_near_all(r.out, want.out, 2e-6, "out");
    expect_near_all(r.lse, want.lse, 2e-6, "lse");
    expect_near_all(r.dq, want.dq, 2e-5, "dq");
    expect_near_all(r.dk, want.dk, 2e-5, "dk");
    expect_near_all(r.dv, want.dv, 2e-5, "dv");
  }
}

// q, k, v, out and their gradients with the heads inside the tokens
// ([B, T, heads, D], seq_major, as a Linear's output is split into heads):
// the same values as the [B, heads, T, D] layout's, transposed.
TEST(Attention, SeqMajorIsTheSameAttentionTransposed) {
  const Case cases[] = {{2, 4, 2, 77, 64, 0}, {1, 2, 2, 150, 64, 32}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name());
    Outputs r = run(c, 13);
    auto seq = [](const HostTensor& t) {  // [B, heads, T, D] -> [B, T, heads, D]
      HostTensor y(Shape{t.shape()[0], t.shape()[2], t.shape()[1], t.shape()[3]}, DType::F32);
      k::transpose(t, y, {0, 2, 1, 3});
      return y;
    };
    HostTensor q = seq(r.q), kk = seq(r.k), v = seq(r.v), dout = seq(r.dout);
    HostTensor out(q.shape(), DType::F32), lse(r.lse.shape(), DType::F32), dq(q.shape(), DType::F32),
        dk(kk.shape(), DType::F32), dv(kk.shape(), DType::F32);
    const double scale = 1 / std::sqrt(double(c.D));
    k::attention(q, kk, v, out, lse, scale, c.window, true);
    k::attention_grad(q, kk, v, out, lse, dout, dq, dk, dv, scale, c.window, true);
    auto near = [](const HostTensor& got, const HostTensor& want, const char* what) {
      std::vector<double> w(size_t(want.numel()));
      for (size_t i = 0; i < w.size(); ++i) w[i] = want.as<float>()[i];
      expect_near_all(got, w, 1e-6, what);
    };
    near(out, seq(r.out), "out");
    near(lse, r.lse, "lse");
    near(dq, seq(r.dq), "dq");
    near(dk, seq(r.dk), "dk");
    near(dv, seq(r.dv), "dv");
  }
}

TEST(Attention, SameBitsWhateverTheThreadCount) {
  const Case c{2, 4, 2, 300, 64, 100};
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  Outputs one = run(c, 5);
  omp_set_num_threads(3);
  Outputs three = run(c, 5);
  omp_set_num_threads(threads);
  EXPECT_TRUE(same_bits(one.out, three.out));
  EXPECT_TRUE(same_bits(one.lse, three.lse));
  EXPECT_TRUE(same_bits(one.dq, three.dq));
  EXPECT_TRUE(same_bits(one.dk, three.dk));
  EXPECT_TRUE(same_bits(one.dv, three.dv));
}

// At T = 4096 the scores of one head would be 64 MiB in fp32; forward and
// backward together must stay far below that (a block of rows a thread).
TEST(Attention, NoTxTBuffer) {
  const Case c{1, 1, 1, 4096, 64, 0};
  Rng rng(1);
  HostTensor q = rand_tensor(Shape{1, 1, c.T, c.D}, DType::F32, rng), kk = rand_tensor(Shape{1, 1, c.T, c.D}, DType::F32, rng),
             v = rand_tensor(Shape{1, 1, c.T, c.D}, DType::F32, rng), dout = rand_tensor(Shape{1, 1, c.T, c.D}, DType::F32, rng);
  HostTensor out(Shape{1, 1, c.T, c.D}, DType::F32), lse(Shape{1, 1, c.T}, DType::F32), dq(Shape{1, 1, c.T, c.D}, DType::F32),
      dk(Shape{1, 1, c.T, c.D}, DType::F32), dv(Shape{1, 1, c.T, c.D}, DType::F32);
  // Two threads, each with a block's scores (a machine's every core would
  // add a block's worth each).
  const int threads = omp_get_max_threads();
  omp_set_num_threads(2);
  const int64_t before = peak_kb(true);
  if (before < 0) GTEST_SKIP() << "no VmHWM in /proc/self/status";
  k::attention(q, kk, v, out, lse, 0.125, 0);
  k::attention_grad(q, kk, v, out, lse, dout, dq, dk, dv, 0.125, 0);
  const int64_t grew = peak_kb(false) - before;
  omp_set_num_threads(threads);
  const int64_t matrix_kb = c.T * c.T * 4 / 1024;
  EXPECT_LT(grew, matrix_kb / 4) << "the peak grew by " << grew << " kB; one T x T matrix is " << matrix_kb << " kB";
  RecordProperty("peak_growth_kb", std::to_string(grew));
}

namespace fyt {
namespace {

// q, k and v as the heads of one packed qkv [B, T, H + 2 Hkv, D] (a fused
// qkv Linear's output): the bits of attention on the three slices
// (seq_major), and the gradient the three gradients side by side.
TEST(Attention, PackedQKVIsTheSlicesAttention) {
  for (const Case& c : {Case{2, 4, 4, 77, 64, 0}, Case{1, 8, 2, 130, 64, 32}}) {
    SCOPED_TRACE(c.name());
    Rng rng(17);
    const int64_t Hrow = c.H + 2 * c.Hkv;
    const Shape ps{c.B, c.T, Hrow, c.D}, qs{c.B, c.T, c.H, c.D}, ks{c.B, c.T, c.Hkv, c.D}, ls{c.B, c.H, c.T};
    HostTensor qkv = rand_tensor(ps, DType::F32, rng), dout = rand_tensor(qs, DType::F32, rng);
    // The slices, as fy-recompose finds them: q's heads, then k's and v's.
    HostTensor q(qs, DType::F32), kk(ks, DType::F32), v(ks, DType::F32);
    k::slice(qkv, q, {0, 0, 0, 0}, {1, 1, 1, 1});
    k::slice(qkv, kk, {0, 0, c.H, 0}, {1, 1, 1, 1});
    k::slice(qkv, v, {0, 0, c.H + c.Hkv, 0}, {1, 1, 1, 1});
    const double scale = 1 / std::sqrt(double(c.D));
    HostTensor out(qs, DType::F32), lse(ls, DType::F32), dq(qs, DType::F32), dk(ks, DType::F32), dv(ks, DType::F32);
    k::attention(q, kk, v, out, lse, scale, c.window, true);
    k::attention_grad(q, kk, v, out, lse, dout, dq, dk, dv, scale, c.window, true);
    HostTensor pout(qs, DType::F32), plse(ls, DType::F32), dqkv(ps, DType::F32), want(ps, DType::F32);
    k::attention_qkv(qkv, pout, plse, c.Hkv, scale, c.window);
    k::attention_qkv_grad(qkv, pout, plse, dout, dqkv, c.Hkv, scale, c.window);
    k::concat({dq, dk, dv}, want, 2);
    EXPECT_TRUE(same_bits(pout, out));
    EXPECT_TRUE(same_bits(plse, lse));
    EXPECT_TRUE(same_bits(dqkv, want));
  }
  HostTensor qkv(Shape{1, 8, 10, 64}, DType::F32), out(Shape{1, 8, 4, 64}, DType::F32), lse(Shape{1, 4, 8}, DType::F32);
  EXPECT_THROW(k::attention_qkv(qkv, out, lse, 2, 0.125, 0), fy::Error);  // 4 + 2 x 2 heads, not 10
}

}  // namespace
}  // namespace fyt

namespace fyt {
namespace {

// ||got - want|| / ||want|| over a whole tensor.
double rel_norm(const HostTensor& got, const HostTensor& want) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double d = double(got.as<float>()[i]) - double(want.as<float>()[i]);
    num += d * d;
    den += double(want.as<float>()[i]) * want.as<float>()[i];
  }
  return std::sqrt(num / den);
}

// At a 16-bit matmul_operands() (--precision bf16 on the CPU target) the
// products round their operands as matmul does (q, k, v, dout, and the
// probabilities and dS before theirs): the numbers of the unfused graph's
// kernels at bf16 (matmul, masked_softmax, matmul; back through matmul,
// softmax_grad with the scale, matmul), within the sums' order, and not the
// fp32 kernel's. Compared by norm: a sum's order moves the odd probability
// across a rounding boundary; a missing rounding moves them all.
TEST(Attention, SixteenBitProductsAreTheUnfusedGraphs) {
  // D 32: a scale that is no power of two, so dS rounded before or after it differ.
  const Case c{2, 3, 3, 130, 32, 0};
  const float scale = float(1 / std::sqrt(double(c.D)));
  Outputs fp32 = run(c, 23);
  k::set_matmul_operands(k::MatmulOperands::BF16);
  Outputs r = run(c, 23);
  const Shape qs{c.B, c.H, c.T, c.D}, ss{c.B, c.H, c.T, c.T};
  HostTensor mask(Shape{1, 1, c.T, c.T}, DType::U8);
  for (int64_t i = 0; i < c.T; ++i)
    for (int64_t j = 0; j < c.T; ++j) mask.as<uint8_t>()[i * c.T + j] = j > i;
  HostTensor S(ss, DType::F32), P(ss, DType::F32), out(qs, DType::F32), dP(ss, DType::F32), dS(ss, DType::F32),
      dq(qs, DType::F32), dk(qs, DType::F32), dv(qs, DType::F32);
  k::matmul(r.q, r.k, S, false, true);
  k::masked_softmax(S, mask, P, scale);
  k::matmul(P, r.v, out, false, false);
  k::matmul(r.dout, r.v, dP, false, true);
  k::softmax_grad(P, dP, dS, 3, scale);
  k::matmul(dS, r.k, dq, false, false);
  k::matmul(dS, r.q, dk, true, false);
  k::matmul(P, r.dout, dv, true, false);
  k::set_matmul_operands(k::MatmulOperands::FP32);
  EXPECT_LE(rel_norm(r.out, out), 1e-4);
  EXPECT_LE(rel_norm(r.dq, dq), 1e-4);
  EXPECT_LE(rel_norm(r.dk, dk), 1e-4);
  EXPECT_LE(rel_norm(r.dv, dv), 1e-4);
  // What no rounding at all gives, for scale: far outside those bounds.
  EXPECT_GT(rel_norm(fp32.out, out), 1e-3);
  EXPECT_GT(rel_norm(fp32.dq, dq), 1e-3);
}

}  // namespace
}  // namespace fyt
