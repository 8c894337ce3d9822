// Forward kernels against naive reference loops written independently of
// the runtime (multi-index arithmetic, no shared helpers with the kernels).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>

#include "core/half.h"
#include "kernels/cpu/kernels.h"
#include "test_util.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace fyt {
namespace {

using fy::cpu::BinOp;
using fy::cpu::UnOp;
namespace k = fy::cpu;

double ref_bin(BinOp op, double a, double b) {
  switch (op) {
    case BinOp::Add: return a + b;
    case BinOp::Sub: return a - b;
    case BinOp::Mul: return a * b;
    case BinOp::Div: return a / b;
    case BinOp::Pow: return std::pow(a, b);
  }
  return 0;
}

Shape bshape(const Shape& a, const Shape& b) {
  Shape s;
  s.rank = std::max(a.rank, b.rank);
  for (int i = 0; i < s.rank; ++i) {
    int ia = i - (s.rank - a.rank), ib = i - (s.rank - b.rank);
    int64_t da = ia >= 0 ? a.d[ia] : 1, db = ib >= 0 ? b.d[ib] : 1;
    s.d[i] = da == 1 ? db : da;
  }
  return s;
}

struct ShapePair {
  Shape a, b;
};
const std::vector<ShapePair> kBroadcastCases = {
    {{2, 3, 4}, {2, 3, 4}}, {{2, 3, 4}, {4}},    {{2, 1, 4}, {3, 1}}, {{1}, {5, 2}},
    {{3, 1, 5}, {1, 4, 1}}, {Shape(), {2, 3}}, {{2, 3}, Shape()},   {{7, 1}, {1, 9}},
    {{0, 3}, {3}},          {{300, 257}, {257}}};

TEST(Binary, BroadcastAllOpsF32F64) {
  Rng rng(1);
  for (DType dt : {DType::F32, DType::F64})
    for (BinOp op : {BinOp::Add, BinOp::Sub, BinOp::Mul, BinOp::Div, BinOp::Pow})
      for (const auto& c : kBroadcastCases) {
        // Positive operands keep Pow real and Div away from zero.
        HostTensor a = rand_tensor(c.a, dt, rng, 0.5, 2), b = rand_tensor(c.b, dt, rng, 0.5, 2);
        Shape os = bshape(c.a, c.b);
        HostTensor out(os, dt), want(os, DType::F64);
        k::binary(op, a, b, out);
        for (int64_t i = 0; i < os.numel(); ++i)
          set(want.view(), i,
              ref_bin(op, get(a.view(), broadcast_source(c.a, os, i)), get(b.view(), broadcast_source(c.b, os, i))));
        expect_close(out, want, dt == DType::F32 ? 1e-6 : 1e-14, 0,
                     "op " + std::to_string(int(op)) + " " + c.a.str() + " " + c.b.str());
      }
}

TEST(Binary, IntegerOps) {
  HostTensor a = make_tensor({2, 3}, DType::I64, {7, -7, 9, 10, 11, 12});
  HostTensor b = make_tensor({3}, DType::I64, {2, 2, 3});
  HostTensor out({2, 3}, DType::I64);
  k::binary(BinOp::Div, a, b, out);
  EXPECT_EQ(get(out, 0), 3);
  EXPECT_EQ(get(out, 1), -3);  // C++ truncation
  EXPECT_EQ(get(out, 5), 4);
  k::binary(BinOp::Mul, a, b, out);
  EXPECT_EQ(get(out, 4), 22);
  HostTensor z = make_tensor({3}, DType::I64, {1, 0, 1});
  EXPECT_THROW(k::binary(BinOp::Div, a, z, out), fy::Error);
}

TEST(Binary, RejectsBadShapes) {
  HostTensor a({2, 3}, DType::F32), b({4}, DType::F32), out({2, 3}, DType::F32);
  EXPECT_THROW(k::binary(BinOp::Add, a, b, out), fy::Error);
  HostTensor c({3}, DType::F32), wrong({3, 3}, DType::F32);
  EXPECT_THROW(k::binary(BinOp::Add, a, c, wrong), fy::Error);
}

TEST(Equal, BroadcastDtypes) {
  HostTensor a = make_tensor({2, 3}, DType::I64, {1, 2, 3, 4, 2, 6});
  HostTensor b = make_tensor({3}, DType::I64, {1, 2, 6});
  HostTensor out({2, 3}, DType::U8);
  k::equal(a, b, out);
  std::vector<double> want = {1, 1, 0, 0, 1, 1};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(get(out, i), want[size_t(i)]) << i;
  HostTensor fa = make_tensor({2, 1}, DType::F32, {0.5, 1.5});
  HostTensor fb = make_tensor({1, 2}, DType::F32, {1.5, 0.5});
  HostTensor fo({2, 2}, DType::U8);
  k::equal(fa, fb, fo);
  EXPECT_EQ(get(fo, 0), 0);
  EXPECT_EQ(get(fo, 1), 1);
  EXPECT_EQ(get(fo, 2), 1);
  EXPECT_EQ(get(fo, 3), 0);
}

double ref_unary(UnOp op, double x) {
  const double pi = 3.14159265358979323846;
  switch (op) {
    case UnOp::Neg: return -x;
    case UnOp::Sqrt: return std::sqrt(x);
    case UnOp::Reciprocal: return 1 / x;
    case UnOp::Exp: return std::exp(x);
    case UnOp::Tanh: return std::tanh(x);
    case UnOp::Erf: return std::erf(x);
    case UnOp::Sigmoid: return 1 / (1 + std::exp(-x));
    case UnOp::Gelu: return x * 0.5 * std::erfc(-x / std::sqrt(2.0));
    case UnOp::GeluTanh: return 0.5 * x * (1 + std::tanh(std::sqrt(2 / pi) * (x + 0.044715 * std::pow(x, 3))));
    case UnOp::Silu: return x / (1 + std::exp(-x));
    case UnOp::Identity: return x;
  }
  return 0;
}

const std::vector<UnOp> kAllUnary = {UnOp::Neg,     UnOp::Sqrt, UnOp::Reciprocal, UnOp::Exp,
                                     UnOp::Tanh,    UnOp::Erf,  UnOp::Sigmoid,    UnOp::Gelu,
                                     UnOp::GeluTanh, UnOp::Silu, UnOp::Identity};

TEST(Unary, AllOpsAgainstReference) {
  Rng rng(2);
  for (DType dt : {DType::F32, DType::F64})
    for (UnOp op : kAllUnary) {
      bool positive = op == UnOp::Sqrt || op == UnOp::Reciprocal;
      HostTensor x = rand_tensor({5, 77}, dt, rng, positive ? 0.1 : -4, 4);
      HostTensor y({5, 77}, dt), want({5, 77}, DType::F64);
      k::unary(op, x, y);
      for (int64_t i = 0; i < x.numel(); ++i) set(want.view(), i, ref_unary(op, get(x.view(), i)));
      expect_close(y, want, dt == DType::F32 ? 2e-6 : 1e-13, dt == DType::F32 ? 1e-7 : 1e-15,
                   "unary op " + std::to_string(int(op)));
    }
}

// tanh-GELU, SiLU and sigmoid in float take a vectorised path of their own
// (a call-free exp): forward and gradient against the float64 kernels, over
// a wide range and the values where exp saturates. Far left the float64
// reference's own 1 + tanh(u) cancels (it is exactly -0 from x = -9 on), so
// tiny values are compared absolutely.
TEST(Unary, FloatVectorPathsAgainstFloat64) {
  Rng rng(5);
  std::vector<double> xs = {0, 1e-30, -1e-30, 1e-8, -1e-8, 0.5, -0.5, 30, -30, 45, -45, 88, -88, 100, -100};
  for (int i = 0; i < 4000; ++i) xs.push_back(rng.uniform(-12, 12));
  const int64_t n = int64_t(xs.size());
  HostTensor x32({n}, DType::F32), x64({n}, DType::F64), dy32({n}, DType::F32), dy64({n}, DType::F64);
  for (int64_t i = 0; i < n; ++i) {
    set(x32.view(), i, xs[size_t(i)]);
    set(x64.view(), i, get(x32.view(), i));  // the same inputs, exactly
    set(dy32.view(), i, 1 + 0.001 * double(i % 7));
    set(dy64.view(), i, get(dy32.view(), i));
  }
  for (UnOp op : {UnOp::GeluTanh, UnOp::Silu, UnOp::Sigmoid}) {
    HostTensor y32({n}, DType::F32), y64({n}, DType::F64), dx32({n}, DType::F32), dx64({n}, DType::F64);
    k::unary(op, x32, y32);
    k::unary(op, x64, y64);
    expect_close(y32, y64, 2e-6, 1e-12, "forward of op " + std::to_string(int(op)));
    k::unary_grad(op, x32, fy::View{nullptr, fy::Shape{n}, DType::F32}, dy32, dx32);
    k::unary_grad(op, x64, fy::View{nullptr, fy::Shape{n}, DType::F64}, dy64, dx64);
    expect_close(dx32, dx64, 4e-6, 1e-7, "gradient of op " + std::to_string(int(op)));
  }
}

TEST(Unary, KnownValues) {
  // Published values: GELU(1) = Phi(1), SiLU(1) = sigmoid(1), tanh-GELU(1).
  HostTensor x = make_tensor({1}, DType::F64, {1.0}), y({1}, DType::F64);
  k::unary(UnOp::Gelu, x, y);
  EXPECT_NEAR(get(y, 0), 0.8413447460685429, 1e-15);
  k::unary(UnOp::Silu, x, y);
  EXPECT_NEAR(get(y, 0), 0.7310585786300049, 1e-15);
  k::unary(UnOp::GeluTanh, x, y);
  EXPECT_NEAR(get(y, 0), 0.8411919906082768, 1e-12);
}

// bias_unary is add then unary, bias_unary_grad add then unary_grad (with
// y), bit for bit: rows of odd and vector-friendly widths, both GELU forms.
TEST(BiasUnary, BitIdenticalToAddThenUnary) {
  Rng rng(43);
  for (UnOp op : {UnOp::Gelu, UnOp::GeluTanh})
    for (Shape s : {Shape{3, 7}, Shape{2, 5, 64}, Shape{129, 768}}) {
      const int64_t n = s[s.rank - 1];
      HostTensor x = rand_tensor(s, DType::F32, rng, -5, 5), b = rand_tensor(Shape{n}, DType::F32, rng, -1, 1);
      HostTensor dy = rand_tensor(s, DType::F32, rng), sum(s, DType::F32), want(s, DType::F32), got(s, DType::F32);
      k::binary(BinOp::Add, x, b, sum);
      k::unary(op, sum, want);
      k::bias_unary(op, x, b, got);
      EXPECT_EQ(std::memcmp(got.view().data, want.view().data, want.view().nbytes()), 0) << s.str();
      HostTensor dwant(s, DType::F32), dgot(s, DType::F32);
      k::unary_grad(op, sum, want, dy, dwant);
      k::bias_unary_grad(op, x, b, want, dy, dgot);
      EXPECT_EQ(std::memcmp(dgot.view().data, dwant.view().data, dwant.view().nbytes()), 0) << "grad " << s.str();
    }
  HostTensor x = rand_tensor({3, 7}, DType::F32, rng), b3 = rand_tensor({3}, DType::F32, rng), y({3, 7}, DType::F32);
  EXPECT_THROW(k::bias_unary(UnOp::Gelu, x, b3, y), fy::Error);  // the bias runs along the last dim
}

TEST(ReduceTo, SumAndMeanOverBroadcastDims) {
  Rng rng(3);
  struct Case {
    Shape x, y;
  };
  std::vector<Case> cases = {{{2, 3, 4}, {1, 3, 1}},   {{2, 3, 4}, {4}},       {{2, 3, 4}, {2, 1, 1}},
                             {{2, 3, 4}, {1, 1, 1}},   {{2, 3, 4}, {2, 3, 4}}, {{2, 3, 4}, Shape()},
                             {{64, 1024}, {64, 1}},    {{64, 1024}, {1024}},   {{8, 16, 300}, {8, 1, 300}},
                             {{5, 1, 7}, {1, 1, 7}}};
  for (DType dt : {DType::F32, DType::F64})
    for (bool mean : {false, true})
      for (const auto& c : cases) {
        HostTensor x = rand_tensor(c.x, dt, rng), y(c.y, dt), want(c.y, DType::F64);
        k::reduce_to(x, y, mean);
        for (int64_t i = 0; i < c.x.numel(); ++i) {
          int64_t j = broadcast_source(c.y, c.x, i);
          set(want.view(), j, get(want.view(), j) + get(x.view(), i));
        }
        const double ratio = double(c.x.numel() / c.y.numel());
        if (mean)
          for (int64_t j = 0; j < want.numel(); ++j) set(want.view(), j, get(want.view(), j) / ratio);
        expect_close(y, want, dt == DType::F32 ? 1e-6 : 1e-13, 1e-12, c.x.str() + "->" + c.y.str());
      }
  HostTensor x({2, 3}, DType::F32), bad({3, 1}, DType::F32);
  EXPECT_THROW(k::reduce_to(x, bad, false), fy::Error);
}

TEST(BroadcastTo, Expand) {
  Rng rng(4);
  for (auto c : std::vector<ShapePair>{{{3, 1}, {2, 3, 5}}, {{5}, {4, 5}}, {Shape(), {2, 2}}, {{1, 4}, {3, 4}}}) {
    HostTensor x = rand_tensor(c.a, DType::F32, rng), y(c.b, DType::F32), want(c.b, DType::F64);
    k::broadcast_to(x, y);
    for (int64_t i = 0; i < c.b.numel(); ++i) set(want.view(), i, get(x.view(), broadcast_source(c.a, c.b, i)));
    expect_close(y, want, 0, 0, c.a.str());
  }
  HostTensor xi = make_tensor({2}, DType::I64, {5, -6}), yi({3, 2}, DType::I64);
  k::broadcast_to(xi, yi);
  EXPECT_EQ(get(yi, 4), 5);
  EXPECT_EQ(get(yi, 5), -6);
}

// Naive batched matmul with numpy broadcasting over batch dims.
HostTensor ref_matmul(const HostTensor& a, const HostTensor& b, bool ta, bool tb) {
  const Shape& as = a.shape();
  const Shape& bs = b.shape();
  int ra = as.rank, rb = bs.rank;
  int64_t M = ta ? as[ra - 1] : as[ra - 2], K = ta ? as[ra - 2] : as[ra - 1];
  int64_t N = tb ? bs[rb - 2] : bs[rb - 1];
  Shape ab(as.d, ra - 2), bb(bs.d, rb - 2);
  Shape cb = bshape(ab, bb);
  Shape cs = cb;
  cs.d[cs.rank++] = M;
  cs.d[cs.rank++] = N;
  HostTensor c(cs, DType::F64);
  for (int64_t bi = 0; bi < std::max<int64_t>(cb.numel(), 1); ++bi) {
    int64_t ia = ab.rank ? broadcast_source(ab, cb, bi) : 0, ib = bb.rank ? broadcast_source(bb, cb, bi) : 0;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t kk = 0; kk < K; ++kk) {
          double av = get(a.view(), ia * M * K + (ta ? kk * M + m : m * K + kk));
          double bv = get(b.view(), ib * K * N + (tb ? n * K + kk : kk * N + n));
          s += av * bv;
        }
        set(c.view(), bi * M * N + m * N + n, s);
      }
  }
  return c;
}

TEST(Matmul, BatchedBroadcastTransposed) {
  Rng rng(5);
  struct Case {
    Shape a, b;
    bool ta, tb;
  };
  std::vector<Case> cases = {
      {{3, 4}, {4, 5}, false, false},       {{2, 3, 4}, {4, 5}, false, false},
      {{2, 3, 4}, {2, 4, 5}, false, false}, {{2, 1, 3, 4}, {3, 4, 5}, false, false},
      {{1, 3, 4}, {2, 4, 5}, false, false}, {{4, 3}, {4, 5}, true, false},
      {{3, 4}, {5, 4}, false, true},        {{4, 3}, {5, 4}, true, true},
      {{2, 4, 3}, {4, 5}, true, false},     {{2, 3, 4}, {2, 5, 4}, false, true},
      {{3, 2, 4, 3}, {2, 5, 4}, true, true}, {{2, 3, 4}, {3, 4}, false, true},
      {{1, 7}, {7, 1}, false, false},       {{33, 65}, {65, 17}, false, false}};
  for (DType dt : {DType::F32, DType::F64})
    for (const auto& c : cases) {
      HostTensor a = rand_tensor(c.a, dt, rng), b = rand_tensor(c.b, dt, rng);
      HostTensor want = ref_matmul(a, b, c.ta, c.tb);
      HostTensor out(want.shape(), dt);
      k::fill(out, 123.0);  // c must be overwritten
      k::matmul(a, b, out, c.ta, c.tb);
      // Any order of a K-term sum is within K * 2^-24 * sum |a_k b_k| of the
      // exact one (operands in [-1, 1]): the bound, not one BLAS kernel's
      // error, so the check holds whichever kernel the CPU picks. A layout
      // mistake is off by O(1).
      const int64_t K = c.a[c.a.rank - (c.ta ? 2 : 1)];
      const double atol = dt == DType::F32 ? double(K) * double(K) * 0x1p-24 : 1e-12;
      expect_close(out, want, dt == DType::F32 ? 1e-5 : 1e-13, atol,
                   c.a.str() + "x" + c.b.str() + " ta=" + std::to_string(c.ta) + " tb=" + std::to_string(c.tb));
    }
  HostTensor a({2, 3}, DType::F32), b({4, 5}, DType::F32), c({2, 5}, DType::F32);
  EXPECT_THROW(k::matmul(a, b, c, false, false), fy::Error);
}

// Values worked out by hand from the formats (fp16: 10 mantissa bits,
// largest 65504, subnormal step 2^-24; bf16: 7 mantissa bits).
TEST(Matmul, OperandRoundingKnownValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(fy::round_to_fp16(1.0f), 1.0f);
  EXPECT_EQ(fy::round_to_fp16(1.0f + 0x1p-11f), 1.0f);            // tie: to the even mantissa
  EXPECT_EQ(fy::round_to_fp16(1.0f + 0x3p-11f), 1.0f + 0x1p-9f);  // tie: up to the even one
  EXPECT_EQ(fy::round_to_fp16(0.1f), 0.0999755859375f);
  EXPECT_EQ(fy::round_to_fp16(65504.f), 65504.f);
  EXPECT_EQ(fy::round_to_fp16(65519.f), 65504.f);
  EXPECT_EQ(fy::round_to_fp16(65520.f), inf);
  EXPECT_EQ(fy::round_to_fp16(-7e4f), -inf);
  EXPECT_EQ(fy::round_to_fp16(0x1p-24f), 0x1p-24f);   // smallest subnormal
  EXPECT_EQ(fy::round_to_fp16(0x1p-25f), 0.0f);       // tie: to zero (even)
  EXPECT_EQ(fy::round_to_fp16(0x3p-25f), 0x1p-23f);   // tie: to 2 * 2^-24
  EXPECT_EQ(fy::round_to_fp16(0x1.ffcp-15f), 0x1p-14f);  // 1023.5 steps: tie, up into the normals
  EXPECT_EQ(fy::round_to_fp16(-1e-9f), -0.0f);
  EXPECT_TRUE(std::signbit(fy::round_to_fp16(-1e-9f)));
  EXPECT_TRUE(std::isnan(fy::round_to_fp16(std::nanf(""))));
  EXPECT_EQ(fy::round_to_bf16(1.0f + 0x1p-8f), 1.0f);
  EXPECT_EQ(fy::round_to_bf16(1.0f + 0x3p-8f), 1.0f + 0x1p-6f);
  EXPECT_EQ(fy::round_to_bf16(0.1f), 0.10009765625f);
  EXPECT_EQ(fy::round_to_bf16(70000.f), 70144.f);
  EXPECT_EQ(fy::round_to_bf16(std::numeric_limits<float>::max()), inf);
  EXPECT_TRUE(std::isnan(fy::round_to_bf16(std::nanf(""))));

  // matmul rounds both operands, then sums in fp32.
  HostTensor a = make_tensor({1, 2}, DType::F32, {1.0 + 0x1p-11, 3.0}), b = make_tensor({2, 1}, DType::F32, {1.0, 1.0});
  HostTensor big = make_tensor({1, 1}, DType::F32, {65520.0}), one = make_tensor({1, 1}, DType::F32, {1.0});
  HostTensor c({1, 1}, DType::F32);
  auto product = [&](k::MatmulOperands p, HostTensor& x, HostTensor& y) {
    k::set_matmul_operands(p);
    k::matmul(x, y, c, false, false);
    k::set_matmul_operands(k::MatmulOperands::FP32);
    return c.as<float>()[0];
  };
  EXPECT_EQ(product(k::MatmulOperands::FP32, a, b), 4.0f + 0x1p-11f);
  EXPECT_EQ(product(k::MatmulOperands::FP16, a, b), 4.0f);
  EXPECT_EQ(product(k::MatmulOperands::BF16, a, b), 4.0f);
  EXPECT_EQ(product(k::MatmulOperands::FP32, big, one), 65520.0f);
  EXPECT_EQ(product(k::MatmulOperands::FP16, big, one), inf);
  EXPECT_EQ(product(k::MatmulOperands::BF16, big, one), 65536.0f);
}

TEST(Transpose, Permutations) {
  Rng rng(6);
  struct Case {
    Shape x;
    std::vector<int64_t> perm;
  };
  for (auto c : std::vector<Case>{{{2, 3, 4}, {2, 0, 1}}, {{2, 3, 4, 5}, {0, 2, 1, 3}}, {{3, 5}, {1, 0}},
                                  {{2, 3, 4}, {0, 1, 2}}, {{1, 3, 1, 2}, {3, 1, 0, 2}}})
    for (DType dt : {DType::F32, DType::I64}) {
      HostTensor x = rand_tensor(c.x, dt, rng, -100, 100);
      Shape ys;
      ys.rank = c.x.rank;
      for (int i = 0; i < ys.rank; ++i) ys.d[i] = c.x[int(c.perm[size_t(i)])];
      HostTensor y(ys, dt), want(ys, DType::F64);
      k::transpose(x, y, c.perm);
      for (int64_t i = 0; i < ys.numel(); ++i) {
        auto yi = unravel(ys, i);
        std::vector<int64_t> xi(size_t(ys.rank));
        for (int d = 0; d < ys.rank; ++d) xi[size_t(c.perm[size_t(d)])] = yi[size_t(d)];
        int64_t lin = 0;
        for (int d = 0; d < ys.rank; ++d) lin = lin * c.x[d] + xi[size_t(d)];
        set(want.view(), i, get(x.view(), lin));
      }
      expect_close(y, want, 0, 0, c.x.str());
    }
  HostTensor x({2, 3}, DType::F32), y({3, 2}, DType::F32);
  EXPECT_THROW(k::transpose(x, y, {0, 0}), fy::Error);
}

TEST(Slice, StepsAndNegativeStarts) {
  Rng rng(7);
  HostTensor x = rand_tensor({5, 6, 7}, DType::F64, rng);
  // x[1:5:2, -4::1, 0:7:3] -> [2, 4, 3]
  HostTensor y({2, 4, 3}, DType::F64);
  k::slice(x, y, {1, -4, 0}, {2, 1, 3});
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 4; ++j)
      for (int64_t l = 0; l < 3; ++l)
        EXPECT_EQ(get(y, (i * 4 + j) * 3 + l), get(x, ((1 + 2 * i) * 6 + (2 + j)) * 7 + 3 * l));
  // slice_grad: zeros except the sliced positions.
  HostTensor dx({5, 6, 7}, DType::F64);
  fy::cpu::fill(dx, 9.0);
  k::slice_grad(y, dx, {1, -4, 0}, {2, 1, 3});
  int nonzero = 0;
  for (int64_t a = 0; a < 5; ++a)
    for (int64_t b = 0; b < 6; ++b)
      for (int64_t c = 0; c < 7; ++c) {
        bool in = a % 2 == 1 && a < 5 && b >= 2 && c % 3 == 0;
        double v = get(dx, (a * 6 + b) * 7 + c);
        if (in) {
          EXPECT_EQ(v, get(x, (a * 6 + b) * 7 + c));
          ++nonzero;
        } else {
          EXPECT_EQ(v, 0.0);
        }
      }
  EXPECT_EQ(nonzero, 2 * 4 * 3);
  HostTensor big({3, 4, 3}, DType::F64);
  EXPECT_THROW(k::slice(x, big, {1, -4, 0}, {2, 1, 3}), fy::Error);
}

TEST(Concat, MiddleAndLastAxis) {
  Rng rng(8);
  HostTensor a = rand_tensor({2, 1, 3}, DType::F32, rng), b = rand_tensor({2, 4, 3}, DType::F32, rng),
             c = rand_tensor({2, 2, 3}, DType::F32, rng);
  HostTensor out({2, 7, 3}, DType::F32);
  k::concat({a.view(), b.view(), c.view()}, out, 1);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 7; ++j)
      for (int64_t l = 0; l < 3; ++l) {
        double want = j < 1   ? get(a, (i * 1 + j) * 3 + l)
                      : j < 5 ? get(b, (i * 4 + j - 1) * 3 + l)
                              : get(c, (i * 2 + j - 5) * 3 + l);
        EXPECT_EQ(get(out, (i * 7 + j) * 3 + l), want);
      }
  HostTensor p = make_tensor({2, 1}, DType::I64, {1, 2}), q = make_tensor({2, 2}, DType::I64, {3, 4, 5, 6});
  HostTensor o({2, 3}, DType::I64);
  k::concat(std::vector<View>{p, q}, o, -1);
  std::vector<double> want = {1, 3, 4, 2, 5, 6};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(get(o, i), want[size_t(i)]);
  HostTensor wrong({2, 4}, DType::I64);
  EXPECT_THROW(k::concat({p.view(), q.view()}, wrong, 1), fy::Error);
}

TEST(Where, Broadcast) {
  Rng rng(9);
  HostTensor cond = make_tensor({2, 1, 3}, DType::U8, {1, 0, 1, 0, 0, 1});
  HostTensor a = rand_tensor({4, 3}, DType::F32, rng), b = rand_tensor({1}, DType::F32, rng);
  Shape os{2, 4, 3};
  HostTensor out(os, DType::F32);
  k::where(cond, a, b, out);
  for (int64_t i = 0; i < os.numel(); ++i) {
    bool cnd = get(cond, broadcast_source(cond.shape(), os, i)) != 0;
    double want = cnd ? get(a, broadcast_source(a.shape(), os, i)) : get(b, 0);
    EXPECT_EQ(get(out, i), want) << i;
  }
}

TEST(Cast, AllPairs) {
  HostTensor f = make_tensor({4}, DType::F32, {-2.7, 0.0, 3.9, 1.0});
  HostTensor i64({4}, DType::I64), u8({4}, DType::U8), f64({4}, DType::F64);
  k::cast(f, i64);
  EXPECT_EQ(get(i64, 0), -2);
  EXPECT_EQ(get(i64, 2), 3);
  k::cast(f, u8);
  EXPECT_EQ(get(u8, 0), 1);
  EXPECT_EQ(get(u8, 1), 0);
  k::cast(f, f64);
  EXPECT_EQ(get(f64, 2), double(3.9f));
  HostTensor back({4}, DType::F32);
  k::cast(u8, back);
  EXPECT_EQ(get(back, 0), 1.0);
  EXPECT_EQ(get(back, 1), 0.0);
  HostTensor big = make_tensor({1}, DType::I64, {1LL << 40}), bf({1}, DType::F64);
  k::cast(big, bf);
  EXPECT_EQ(get(bf, 0), double(1LL << 40));
}

TEST(Gather, RowsAndErrors) {
  Rng rng(10);
  HostTensor table = rand_tensor({5, 3}, DType::F32, rng);
  HostTensor idx = make_tensor({2, 2}, DType::I64, {4, 0, 4, 2});
  HostTensor out({2, 2, 3}, DType::F32);
  k::gather(table, idx, out);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(get(out, i * 3 + c), get(table, int64_t(get(idx, i)) * 3 + c));
  HostTensor bad = make_tensor({2}, DType::I64, {1, 5}), out2({2, 3}, DType::F32);
  try {
    k::gather(table, bad, out2);
    FAIL() << "expected an error";
  } catch (const fy::Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("index 5"), std::string::npos) << m;
    EXPECT_NE(m.find("5 rows"), std::string::npos) << m;
  }
  HostTensor neg = make_tensor({1}, DType::I64, {-1}), out3({1, 3}, DType::F32);
  EXPECT_THROW(k::gather(table, neg, out3), fy::Error);
}

// A table of more than 2^31 elements at a 175B model's width, 8.6 GB that
// the kernel reads only two rows of: calloc's untouched pages cost no memory.
// Its last row gathered, and sliced, past element 2^31.
TEST(Gather, RowsPastTwoToThe31Elements) {
  const int64_t D = 12288, R = (int64_t(1) << 31) / D + 2;
  ASSERT_GT(R * D, int64_t(1) << 31);
  std::unique_ptr<float, decltype(&std::free)> table(static_cast<float*>(std::calloc(size_t(R * D), 4)), &std::free);
  if (!table) GTEST_SKIP() << "cannot reserve 8.6 GB of address space here";
  for (int64_t k = 0; k < D; ++k) table.get()[(R - 1) * D + k] = float(k) * 0.25f;
  HostTensor idx = make_tensor({2}, DType::I64, {double(R - 1), 0});
  HostTensor out({2, D}, DType::F32), last({1, D}, DType::F32);
  const fy::View t{table.get(), fy::Shape{R, D}, DType::F32};
  k::gather(t, idx, out);
  k::slice(t, last, {R - 1, 0}, {1, 1});
  for (int64_t k = 0; k < D; ++k) {
    ASSERT_EQ(get(out, k), float(k) * 0.25f) << "gathered, column " << k;
    ASSERT_EQ(get(last, k), float(k) * 0.25f) << "sliced, column " << k;
    ASSERT_EQ(get(out, D + k), 0.f) << "row 0, column " << k;
  }
}

TEST(Gather, GradScatterAddsRepeats) {
  Rng rng(11);
  const int64_t R = 6, D = 130, n = 50;
  HostTensor idx({n}, DType::I64);
  for (int64_t i = 0; i < n; ++i) set(idx, i, double(rng.integer(0, R - 1)));
  HostTensor dy = rand_tensor({n, D}, DType::F64, rng), dt({R, D}, DType::F64), want({R, D}, DType::F64);
  fy::cpu::fill(dt, 5.0);  // must be zeroed by the kernel
  k::gather_grad(idx, dy, dt);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < D; ++c) {
      int64_t r = int64_t(get(idx, i));
      set(want.view(), r * D + c, get(want.view(), r * D + c) + get(dy, i * D + c));
    }
  expect_close(dt, want, 1e-14, 1e-14);
}

// A tied table's gradient: base plus the gather's rows. The rows named are
// bit for bit add(base, gather_grad(dy)); every other row is base's own,
// -0.0 included (an add of gather_grad's zero would make it +0.0).
TEST(Gather, GradAddKeepsUnnamedRowsAndRoundsAsTheSum) {
  Rng rng(13);
  const int64_t R = 9, D = 70, n = 24;
  HostTensor idx({n}, DType::I64);
  for (int64_t i = 0; i < n; ++i) set(idx, i, double(rng.integer(0, 4)));  // rows 5..8 never named
  HostTensor dy = rand_tensor({n, D}, DType::F32, rng), base = rand_tensor({R, D}, DType::F32, rng);
  float* pb = base.view().as<float>();
  pb[6 * D + 3] = -0.0f;
  pb[1 * D + 2] = -0.0f;  // a named row's -0.0 is summed
  HostTensor got({R, D}, DType::F32), scattered({R, D}, DType::F32), sum({R, D}, DType::F32);
  fy::cpu::fill(got, 7.0);
  k::gather_grad_add(base, idx, dy, got);
  k::gather_grad(idx, dy, scattered);
  k::binary(fy::cpu::BinOp::Add, base, scattered, sum);
  const float* g = got.view().as<float>();
  const float* s = sum.view().as<float>();
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < D; ++c) {
      const float want = r < 5 ? s[r * D + c] : pb[r * D + c];
      EXPECT_EQ(0, std::memcmp(&g[r * D + c], &want, sizeof(float))) << "row " << r << " col " << c;
    }
  EXPECT_TRUE(std::signbit(g[6 * D + 3]));
  EXPECT_THROW(k::gather_grad_add(base, idx, dy, base), fy::Error);  // in place is refused
}

TEST(LayerNorm, AgainstNaive) {
  Rng rng(12);
  for (DType dt : {DType::F32, DType::F64})
    for (int64_t axis : {-1, 1}) {
      Shape xs{3, 4, 5};
      HostTensor x = rand_tensor(xs, dt, rng, -2, 3);
      int a = axis < 0 ? 2 : 1;
      int64_t rows = a == 2 ? 12 : 3, D = xs.numel() / rows;
      Shape ps = a == 2 ? Shape{5} : Shape{4, 5};
      Shape ms = a == 2 ? Shape{3, 4, 1} : Shape{3, 1, 1};
      HostTensor s = rand_tensor(ps, dt, rng), b = rand_tensor(ps, dt, rng);
      HostTensor y(xs, dt), mean(ms, dt), istd(ms, dt);
      k::layer_norm(x, s, b, y, mean, istd, axis, 1e-5);
      for (int64_t r = 0; r < rows; ++r) {
        double mu = 0, var = 0;
        for (int64_t i = 0; i < D; ++i) mu += get(x, r * D + i) / double(D);
        for (int64_t i = 0; i < D; ++i) var += std::pow(get(x, r * D + i) - mu, 2) / double(D);
        const double tol = dt == DType::F32 ? 2e-5 : 1e-12;
        EXPECT_NEAR(get(mean, r), mu, tol);
        EXPECT_NEAR(get(istd, r), 1 / std::sqrt(var + 1e-5), tol * 10);
        for (int64_t i = 0; i < D; ++i)
          EXPECT_NEAR(get(y, r * D + i), (get(x, r * D + i) - mu) / std::sqrt(var + 1e-5) * get(s, i) + get(b, i), tol);
      }
      // bias omitted
      HostTensor y2(xs, dt);
      k::layer_norm(x, s, View{nullptr, ps, dt}, y2, mean, istd, axis, 1e-5);
      for (int64_t i = 0; i < xs.numel(); ++i) EXPECT_NEAR(get(y2, i) + get(b, i % D), get(y, i), 1e-5);
    }
}

TEST(RmsNorm, AgainstNaive) {
  Rng rng(13);
  for (DType dt : {DType::F32, DType::F64}) {
    Shape xs{4, 3, 8};
    HostTensor x = rand_tensor(xs, dt, rng), s = rand_tensor({8}, dt, rng);
    HostTensor y(xs, dt), inv({4, 3, 1}, dt);
    k::rms_norm(x, s, y, inv, -1, 1e-6);
    for (int64_t r = 0; r < 12; ++r) {
      double ms = 0;
      for (int64_t i = 0; i < 8; ++i) ms += std::pow(get(x, r * 8 + i), 2) / 8;
      const double rr = 1 / std::sqrt(ms + 1e-6), tol = dt == DType::F32 ? 1e-5 : 1e-12;
      EXPECT_NEAR(get(inv, r), rr, tol * rr);
      for (int64_t i = 0; i < 8; ++i) EXPECT_NEAR(get(y, r * 8 + i), get(x, r * 8 + i) * rr * get(s, i), tol);
    }
  }
}

TEST(Softmax, LastAndMiddleAxis) {
  Rng rng(14);
  for (DType dt : {DType::F32, DType::F64})
    for (int64_t axis : {-1, 1}) {
      Shape xs{2, 5, 3};
      HostTensor x = rand_tensor(xs, dt, rng, -30, 30), y(xs, dt);
      k::softmax(x, y, axis);
      int a = axis < 0 ? 2 : 1;
      for (int64_t i = 0; i < xs.numel(); ++i) {
        auto ix = unravel(xs, i);
        double m = -1e300, s = 0;
        for (int64_t j = 0; j < xs[a]; ++j) {
          auto jx = ix;
          jx[size_t(a)] = j;
          m = std::max(m, get(x, (jx[0] * 5 + jx[1]) * 3 + jx[2]));
        }
        for (int64_t j = 0; j < xs[a]; ++j) {
          auto jx = ix;
          jx[size_t(a)] = j;
          s += std::exp(get(x, (jx[0] * 5 + jx[1]) * 3 + jx[2]) - m);
        }
        double want = std::exp(get(x, i) - m) / s;
        EXPECT_NEAR(get(y, i), want, dt == DType::F32 ? 1e-6 : 1e-14);
      }
    }
}

// masked_softmax stands for mul, where and softmax (fy-recompose): its bits
// must be theirs, whatever the mask's shape.
TEST(MaskedSoftmax, BitIdenticalToMulWhereSoftmax) {
  Rng rng(41);
  struct Case {
    Shape x, mask;
    bool causal;
  };
  for (DType dt : {DType::F32, DType::F64})
    for (const Case& c : {Case{{2, 3, 16, 16}, {1, 1, 16, 16}, true}, Case{{3, 5, 9}, {5, 9}, false},
                          Case{{4, 7}, {7}, false}, Case{{2, 6, 10}, {1, 10}, false}})
      for (double scale : {0.125, 1.0, 0.3}) {
        HostTensor x = rand_tensor(c.x, dt, rng, -6, 6), mask(c.mask, DType::U8);
        const int64_t D = c.mask[c.mask.rank - 1];
        for (int64_t i = 0; i < mask.view().numel(); ++i)  // never a whole row: column 0 is kept
          mask.as<uint8_t>()[i] = c.causal ? uint8_t(i % D > (i / D) % c.x[c.x.rank - 2]) : uint8_t(i % D != 0 && rng.integer(0, 2) == 0);
        // The scale is an f32 attribute: the F64 product uses its float value too.
        HostTensor sc = make_tensor(Shape{}, dt, {double(float(scale))}), ninf = make_tensor(Shape{}, dt, {-INFINITY});
        HostTensor scaled(c.x, dt), masked(c.x, dt), want(c.x, dt), got(c.x, dt);
        k::binary(BinOp::Mul, x, sc, scaled);
        k::where(mask, ninf, scaled, masked);
        k::softmax(masked, want, -1);
        k::masked_softmax(x, mask, got, float(scale));
        EXPECT_EQ(std::memcmp(got.view().data, want.view().data, want.view().nbytes()), 0)
            << c.x.str() << " mask " << c.mask.str() << " scale " << scale;
      }
  HostTensor x = rand_tensor({3, 5, 9}, DType::F32, rng), y({3, 5, 9}, DType::F32);
  HostTensor rows3({3, 9}, DType::U8), cols8({5, 8}, DType::U8), f32({5, 9}, DType::F32);
  EXPECT_THROW(k::masked_softmax(x, rows3, y, 1.f), fy::Error);  // 3 rows for 5
  EXPECT_THROW(k::masked_softmax(x, cols8, y, 1.f), fy::Error);
  EXPECT_THROW(k::masked_softmax(x, f32, y, 1.f), fy::Error);
}

// softmax_grad's scale stands for the mul after it (masked_softmax's gradient).
TEST(SoftmaxGrad, ScaleIsTheMulAfter) {
  Rng rng(42);
  for (DType dt : {DType::F32, DType::F64})
    for (int64_t axis : {-1, 1}) {
      Shape s{3, 6, 11};
      HostTensor x = rand_tensor(s, dt, rng, -4, 4), dy = rand_tensor(s, dt, rng), y(s, dt), g(s, dt), want(s, dt),
                 got(s, dt);
      HostTensor sc = make_tensor(Shape{}, dt, {0.125});
      k::softmax(x, y, axis);
      k::softmax_grad(y, dy, g, axis);
      k::binary(BinOp::Mul, g, sc, want);
      k::softmax_grad(y, dy, got, axis, 0.125f);
      EXPECT_EQ(std::memcmp(got.view().data, want.view().data, want.view().nbytes()), 0) << "axis " << axis;
    }
}

TEST(SoftmaxCrossEntropy, MeanSumIgnoreAndSpatial) {
  Rng rng(15);
  for (DType dt : {DType::F32, DType::F64}) {
    // [N, C, d] layout: class dim 1, labels [N, d].
    const int64_t N = 3, C = 4, d = 2;
    HostTensor logits = rand_tensor({N, C, d}, dt, rng, -3, 3);
    HostTensor labels = make_tensor({N, d}, DType::I64, {0, 3, -100, 1, 2, 2});
    HostTensor loss({1}, dt), lp({N, C, d}, dt);
    for (bool mean : {true, false}) {
      k::softmax_cross_entropy(logits, labels, loss, lp, -100, mean);
      double sum = 0;
      int cnt = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t p = 0; p < d; ++p) {
          double lse = 0;
          for (int64_t c = 0; c < C; ++c) lse += std::exp(get(logits, (n * C + c) * d + p));
          lse = std::log(lse);
          for (int64_t c = 0; c < C; ++c)
            EXPECT_NEAR(get(lp, (n * C + c) * d + p), get(logits, (n * C + c) * d + p) - lse, 1e-5);
          int64_t lab = int64_t(get(labels, n * d + p));
          if (lab == -100) continue;
          sum += lse - get(logits, (n * C + lab) * d + p);
          ++cnt;
        }
      EXPECT_NEAR(get(loss, 0), mean ? sum / cnt : sum, 1e-5);
    }
  }
  HostTensor logits({2, 3}, DType::F32), loss({1}, DType::F32), lp({2, 3}, DType::F32);
  HostTensor bad = make_tensor({2}, DType::I64, {0, 3});
  EXPECT_THROW(k::softmax_cross_entropy(logits, bad, loss, lp, -100, true), fy::Error);
  HostTensor ign = make_tensor({2}, DType::I64, {-100, -100});
  k::softmax_cross_entropy(logits, ign, loss, lp, -100, true);
  EXPECT_TRUE(std::isnan(get(loss, 0)));  // PyTorch: mean over no targets is NaN
}

// Float lanes over contiguous classes take simd loops (exp_vec); they must
// match libm's double to float precision over long rows of odd length, with
// -inf (masked) entries and exponents far below exp_vec's range, and leave
// NaN and +inf rows NaN as the libm path does (loss scaling looks for them).
TEST(SoftmaxCrossEntropy, VectorLanesMatchLibmAndKeepNaNs) {
  Rng rng(43);
  const int64_t N = 6, C = 1003;
  HostTensor logits = rand_tensor({N, C}, DType::F32, rng, -60, 60);
  float* x = logits.as<float>();
  x[1 * C + 5] = -1e30f;  // e^(x - max) underflows to 0
  x[2 * C + 7] = -INFINITY;
  x[3 * C + 11] = NAN;
  x[4 * C + 13] = INFINITY;
  HostTensor labels = make_tensor({N}, DType::I64, {0, 5, 1002, 3, 4, 500});
  HostTensor loss({1}, DType::F32), lp({N, C}, DType::F32), sm({N, C}, DType::F32), d({N, C}, DType::F32);
  k::softmax_cross_entropy(logits, labels, loss, lp, -100, false);
  k::softmax(logits, sm, -1);
  const double g = 0.37;
  HostTensor dl = make_tensor({1}, DType::F32, {g});
  k::softmax_cross_entropy_grad(dl, lp, labels, d, -100, false);
  for (int64_t n = 0; n < N; ++n) {
    const bool bad = n == 3 || n == 4;
    double m = -INFINITY, s = 0;
    for (int64_t c = 0; c < C; ++c) m = std::max(m, double(x[n * C + c]));
    for (int64_t c = 0; c < C; ++c) s += std::exp(double(x[n * C + c]) - m);
    const double lse = m + std::log(s);
    for (int64_t c = 0; c < C; ++c) {
      const double xi = x[n * C + c], want_lp = xi - lse, p = std::exp(want_lp);
      const float got_lp = lp.as<float>()[n * C + c], got_sm = sm.as<float>()[n * C + c],
                  got_d = d.as<float>()[n * C + c];
      if (bad) {
        ASSERT_TRUE(std::isnan(got_lp) && std::isnan(got_sm) && std::isnan(got_d)) << "row " << n << " class " << c;
        continue;
      }
      if (std::isinf(want_lp)) {  // a -inf logit: probability 0 exactly
        ASSERT_TRUE(got_lp == -INFINITY && got_sm == 0.f && got_d == 0.f) << "row " << n << " class " << c;
        continue;
      }
      ASSERT_NEAR(got_lp, want_lp, 2e-6 * std::max(1.0, std::abs(want_lp))) << "row " << n << " class " << c;
      // x - max is rounded to float first: e^d is off by up to |d| ulps.
      const double rel = 1e-6 + std::abs(want_lp) * 0x1p-23;
      ASSERT_NEAR(got_sm, p, rel * p + 1e-37) << "row " << n << " class " << c;
      const double want_d = p * g - (c == get(labels, n) ? g : 0.0);
      ASSERT_NEAR(got_d, want_d, rel * std::abs(want_d) + 1e-37) << "row " << n << " class " << c;
    }
  }
  EXPECT_TRUE(std::isnan(get(loss, 0)));
}

TEST(Dropout, ReproducibleInverted) {
  Rng rng(16);
  const int64_t n = 100000;
  HostTensor x = rand_tensor({n}, DType::F32, rng, 0.5, 1.5);
  HostTensor y({n}, DType::F32), m({n}, DType::U8), y2({n}, DType::F32), m2({n}, DType::U8);
  k::dropout(x, y, m, 0.0, 1);
  for (int64_t i = 0; i < n; i += 997) {
    EXPECT_EQ(get(y, i), get(x, i));
    EXPECT_EQ(get(m, i), 1);
  }
  k::dropout(x, y, m, 0.3, 42);
  k::dropout(x, y2, m2, 0.3, 42);
  int64_t kept = 0, same_as_other_seed = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(get(m, i), get(m2, i));
    ASSERT_EQ(get(y, i), get(y2, i));
    kept += get(m, i) != 0;
    double want = get(m, i) ? double(float(get(x, i)) * float(1 / 0.7)) : 0.0;
    ASSERT_NEAR(get(y, i), want, 1e-6);
  }
  // 70% kept, binomial sd ~ 145 at n=1e5.
  EXPECT_NEAR(double(kept), 0.7 * n, 1000);
  k::dropout(x, y2, m2, 0.3, 43);
  for (int64_t i = 0; i < n; ++i) same_as_other_seed += get(m, i) == get(m2, i);
  EXPECT_LT(same_as_other_seed, n * 0.65);  // independent masks agree ~58%
  HostTensor dy = rand_tensor({n}, DType::F32, rng), dx({n}, DType::F32);
  k::dropout_grad(dy, m, dx, 0.3);
  for (int64_t i = 0; i < n; i += 13)
    EXPECT_NEAR(get(dx, i), get(m, i) ? get(dy, i) / 0.7 : 0.0, 1e-6);
}

TEST(FillCopy, Basics) {
  HostTensor a({2, 3}, DType::I64), b({3, 2}, DType::I64);
  k::fill(a, 7);
  k::copy(a, b);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(get(b, i), 7);
  HostTensor c({5}, DType::I64);
  EXPECT_THROW(k::copy(a, c), fy::Error);
}

#ifdef _OPENMP
// Results must not depend on the thread count.
TEST(Determinism, ThreadCountInvariant) {
  Rng rng(17);
  const int64_t R = 512, D = 384;
  HostTensor x = rand_tensor({R, D}, DType::F32, rng), dy = rand_tensor({R, D}, DType::F32, rng);
  HostTensor s = rand_tensor({D}, DType::F32, rng), b = rand_tensor({D}, DType::F32, rng);
  HostTensor idx({R}, DType::I64);
  for (int64_t i = 0; i < R; ++i) set(idx, i, double(rng.integer(0, 9)));
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    std::vector<HostTensor> out;
    out.emplace_back(Shape{1, D}, DType::F32);
    k::reduce_to(dy, out.back(), false);
    out.emplace_back(Shape{R, 1}, DType::F32);
    k::reduce_to(dy, out.back(), true);
    out.emplace_back(Shape{10, D}, DType::F32);
    k::gather_grad(idx, dy, out.back());
    HostTensor y({R, D}, DType::F32), mu({R, 1}, DType::F32), is({R, 1}, DType::F32);
    k::layer_norm(x, s, b, y, mu, is, -1, 1e-5);
    out.emplace_back(Shape{R, D}, DType::F32);
    out.emplace_back(Shape{D}, DType::F32);
    out.emplace_back(Shape{D}, DType::F32);
    k::layer_norm_grad(dy, x, s, mu, is, out[3], out[4], out[5], -1);
    out.push_back(std::move(y));
    // Products split by rows, by columns (wider than tall; b plain and
    // transposed), batched one per thread, and K past OpenBLAS's blocking.
    auto product = [&](Shape as, Shape bs, Shape cs, bool ta, bool tb) {
      Rng r(5);
      HostTensor a = rand_tensor(as, DType::F32, r), b = rand_tensor(bs, DType::F32, r);
      out.emplace_back(cs, DType::F32);
      k::matmul(a, b, out.back(), ta, tb);
    };
    product({R, D}, {D, 3 * D}, {R, 3 * D}, false, false);
    product({R, D}, {D + 1, D}, {R, D + 1}, false, true);
    product({R, D}, {R, 2 * D}, {D, 2 * D}, true, false);
    product({3, 2000}, {2000, 517}, {3, 517}, false, false);
    product({3, 2000}, {517, 2000}, {3, 517}, false, true);
    product({24, 64, 16}, {24, 64, 16}, {24, 64, 64}, false, true);
    return out;
  };
  int saved = omp_get_max_threads();
  auto one = run(1), two = run(2), three = run(3);
  omp_set_num_threads(saved);
  for (size_t t = 0; t < one.size(); ++t) {
    ASSERT_EQ(0, std::memcmp(one[t].view().data, two[t].view().data, one[t].view().nbytes())) << t;
    ASSERT_EQ(0, std::memcmp(one[t].view().data, three[t].view().data, one[t].view().nbytes())) << t;
  }
}
#endif

}  // namespace
}  // namespace fyt
