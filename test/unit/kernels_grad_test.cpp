// Backward kernels against central finite differences in double precision.
// Each case projects the forward outputs on a random direction r and compares
// the analytic gradient (backward fed with dy = r) to d<r, f(x)>/dx.
#include <gtest/gtest-spi.h>

#include <cmath>
#include <cstring>

#include "kernels/cpu/kernels.h"
#include "test_util.h"

namespace fyt {
namespace {

using fy::cpu::BinOp;
using fy::cpu::UnOp;
namespace k = fy::cpu;
constexpr DType F64 = DType::F64, F32 = DType::F32;

View null_view(Shape s) { return View{nullptr, s, F64}; }

// The checker itself must catch a wrong gradient (here: Tanh's derivative
// taken as 1 - x^2 instead of 1 - tanh(x)^2).
TEST(Grad, CheckerCatchesWrongGradient) {
  Rng rng(99);
  HostTensor x = rand_tensor({6}, F64, rng, 0.5, 1.5), y({6}, F64), dy({6}, F64), dx({6}, F64);
  GradCase c{{&x}, {&dx}, {&y}, {&dy}, [&] { k::unary(UnOp::Tanh, x, y); },
             [&] {
               for (int64_t i = 0; i < 6; ++i) set(dx, i, get(dy, i) * (1 - get(x, i) * get(x, i)));
             }};
  EXPECT_NONFATAL_FAILURE(check_grad(c), "gradient mismatches");
}

TEST(Grad, UnaryAllOps) {
  const std::vector<UnOp> ops = {UnOp::Neg,  UnOp::Sqrt,    UnOp::Reciprocal, UnOp::Exp,      UnOp::Tanh, UnOp::Erf,
                                 UnOp::Sigmoid, UnOp::Gelu, UnOp::GeluTanh,   UnOp::Silu,     UnOp::Identity};
  for (UnOp op : ops)
    for (bool pass_y : {true, false}) {
      Rng rng(100 + int(op));
      bool positive = op == UnOp::Sqrt || op == UnOp::Reciprocal;
      HostTensor x = rand_tensor({3, 7}, F64, rng, positive ? 0.3 : -3, 3);
      HostTensor y({3, 7}, F64), dy({3, 7}, F64), dx({3, 7}, F64);
      GradCase c{{&x}, {&dx}, {&y}, {&dy}, [&] { k::unary(op, x, y); },
                 [&] { k::unary_grad(op, x, pass_y ? y.view() : null_view({3, 7}), dy, dx); }};
      SCOPED_TRACE("op " + std::to_string(int(op)) + " pass_y " + std::to_string(pass_y));
      check_grad(c);
    }
}

// Gradients of broadcasting binary ops are composed by the compiler from
// binary + reduce_to; this checks that composition for every op.
TEST(Grad, BinaryBroadcastViaReduceTo) {
  for (BinOp op : {BinOp::Add, BinOp::Sub, BinOp::Mul, BinOp::Div, BinOp::Pow}) {
    Rng rng(200 + int(op));
    Shape as{2, 1, 4}, bs{3, 1}, os{2, 3, 4};
    HostTensor a = rand_tensor(as, F64, rng, 0.5, 2), b = rand_tensor(bs, F64, rng, 0.5, 2);
    HostTensor out(os, F64), dout(os, F64), da(as, F64), db(bs, F64);
    HostTensor ta(os, F64), tb(os, F64), t1(os, F64), t2(os, F64);
    auto bwd = [&] {
      // Local derivatives d out/da and d out/db at each broadcast position.
      for (int64_t i = 0; i < os.numel(); ++i) {
        double av = get(a, broadcast_source(as, os, i)), bv = get(b, broadcast_source(bs, os, i));
        double d1 = 0, d2 = 0;
        switch (op) {
          case BinOp::Add: d1 = 1; d2 = 1; break;
          case BinOp::Sub: d1 = 1; d2 = -1; break;
          case BinOp::Mul: d1 = bv; d2 = av; break;
          case BinOp::Div: d1 = 1 / bv; d2 = -av / (bv * bv); break;
          case BinOp::Pow: d1 = bv * std::pow(av, bv - 1); d2 = std::pow(av, bv) * std::log(av); break;
        }
        set(t1, i, d1);
        set(t2, i, d2);
      }
      k::binary(BinOp::Mul, dout, t1, ta);
      k::binary(BinOp::Mul, dout, t2, tb);
      k::reduce_to(ta, da, false);
      k::reduce_to(tb, db, false);
    };
    GradCase c{{&a, &b}, {&da, &db}, {&out}, {&dout}, [&] { k::binary(op, a, b, out); }, bwd};
    SCOPED_TRACE("op " + std::to_string(int(op)));
    check_grad(c);
  }
}

TEST(Grad, ReduceToAndBroadcastTo) {
  for (bool mean : {false, true}) {
    Rng rng(300);
    Shape xs{3, 4, 5}, ys{1, 4, 1};
    HostTensor x = rand_tensor(xs, F64, rng), y(ys, F64), dy(ys, F64), dx(xs, F64);
    GradCase c{{&x}, {&dx}, {&y}, {&dy}, [&] { k::reduce_to(x, y, mean); },
               [&] {
                 k::broadcast_to(dy, dx);
                 if (mean) {
                   HostTensor s({1}, F64);
                   k::fill(s, 1.0 / 15);
                   k::binary(BinOp::Mul, dx, s, dx);
                 }
               }};
    check_grad(c);
  }
  Rng rng(301);
  HostTensor x = rand_tensor({4, 1}, F64, rng), y({2, 4, 3}, F64), dy({2, 4, 3}, F64), dx({4, 1}, F64);
  GradCase c{{&x}, {&dx}, {&y}, {&dy}, [&] { k::broadcast_to(x, y); }, [&] { k::reduce_to(dy, dx, false); }};
  check_grad(c);
}

TEST(Grad, MatmulAllTransposeCombos) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool batched : {false, true}) {
        Rng rng(400 + 4 * ta + 2 * tb + batched);
        const int64_t M = 3, K = 4, N = 5;
        Shape as = ta ? Shape{K, M} : Shape{M, K}, bs = tb ? Shape{N, K} : Shape{K, N}, cs{M, N};
        if (batched) {
          as = ta ? Shape{2, K, M} : Shape{2, M, K};
          bs = tb ? Shape{2, N, K} : Shape{2, K, N};
          cs = Shape{2, M, N};
        }
        HostTensor a = rand_tensor(as, F64, rng), b = rand_tensor(bs, F64, rng);
        HostTensor cc(cs, F64), dc(cs, F64), da(as, F64), db(bs, F64);
        auto bwd = [&] {
          if (!ta && !tb) { k::matmul(dc, b, da, false, true); k::matmul(a, dc, db, true, false); }
          if (!ta && tb) { k::matmul(dc, b, da, false, false); k::matmul(dc, a, db, true, false); }
          if (ta && !tb) { k::matmul(b, dc, da, false, true); k::matmul(a, dc, db, false, false); }
          if (ta && tb) { k::matmul(b, dc, da, true, true); k::matmul(dc, a, db, true, true); }
        };
        GradCase c{{&a, &b}, {&da, &db}, {&cc}, {&dc}, [&] { k::matmul(a, b, cc, ta, tb); }, bwd};
        SCOPED_TRACE("ta " + std::to_string(ta) + " tb " + std::to_string(tb) + " batched " + std::to_string(batched));
        check_grad(c);
      }
}

TEST(Grad, MatmulBroadcastWeight) {
  // x[2,3,4] @ W[4,5]: dW sums over the batch, via a reshaped 2-D matmul.
  Rng rng(410);
  HostTensor x = rand_tensor({2, 3, 4}, F64, rng), w = rand_tensor({4, 5}, F64, rng);
  HostTensor y({2, 3, 5}, F64), dy({2, 3, 5}, F64), dx({2, 3, 4}, F64), dw({4, 5}, F64);
  GradCase c{{&x, &w}, {&dx, &dw}, {&y}, {&dy}, [&] { k::matmul(x, w, y, false, false); },
             [&] {
               k::matmul(dy, w, dx, false, true);
               k::matmul(x.view().reshaped({6, 4}), dy.view().reshaped({6, 5}), dw, true, false);
             }};
  check_grad(c);
}

TEST(Grad, TransposeSliceConcatWhere) {
  Rng rng(500);
  {
    HostTensor x = rand_tensor({2, 3, 4}, F64, rng), y({4, 2, 3}, F64), dy({4, 2, 3}, F64), dx({2, 3, 4}, F64);
    GradCase c{{&x}, {&dx}, {&y}, {&dy}, [&] { k::transpose(x, y, {2, 0, 1}); },
               [&] { k::transpose(dy, dx, {1, 2, 0}); }};
    check_grad(c);
  }
  {
    HostTensor x = rand_tensor({5, 6}, F64, rng), y({2, 3}, F64), dy({2, 3}, F64), dx({5, 6}, F64);
    GradCase c{{&x}, {&dx}, {&y}, {&dy}, [&] { k::slice(x, y, {1, -5}, {2, 2}); },
               [&] { k::slice_grad(dy, dx, {1, -5}, {2, 2}); }};
    check_grad(c);
  }
  {
    HostTensor a = rand_tensor({2, 1, 3}, F64, rng), b = rand_tensor({2, 2, 3}, F64, rng);
    HostTensor y({2, 3, 3}, F64), dy({2, 3, 3}, F64), da({2, 1, 3}, F64), db({2, 2, 3}, F64);
    GradCase c{{&a, &b}, {&da, &db}, {&y}, {&dy}, [&] { k::concat({a.view(), b.view()}, y, 1); },
               [&] {
                 k::slice(dy, da, {0, 0, 0}, {1, 1, 1});
                 k::slice(dy, db, {0, 1, 0}, {1, 1, 1});
               }};
    check_grad(c);
  }
  {
    HostTensor cond = make_tensor({3}, DType::U8, {1, 0, 1});
    HostTensor a = rand_tensor({2, 3}, F64, rng), b = rand_tensor({2, 3}, F64, rng), zero({1}, F64);
    HostTensor y({2, 3}, F64), dy({2, 3}, F64), da({2, 3}, F64), db({2, 3}, F64);
    GradCase c{{&a, &b}, {&da, &db}, {&y}, {&dy}, [&] { k::where(cond, a, b, y); },
               [&] {
                 k::where(cond, dy, zero, da);
                 k::where(cond, zero, dy, db);
               }};
    check_grad(c);
  }
}

TEST(Grad, Gather) {
  Rng rng(600);
  HostTensor table = rand_tensor({5, 4}, F64, rng);
  HostTensor idx = make_tensor({2, 3}, DType::I64, {1, 4, 1, 0, 1, 3});
  HostTensor y({2, 3, 4}, F64), dy({2, 3, 4}, F64), dt({5, 4}, F64);
  GradCase c{{&table}, {&dt}, {&y}, {&dy}, [&] { k::gather(table, idx, y); }, [&] { k::gather_grad(idx, dy, dt); }};
  check_grad(c);
}

TEST(Grad, LayerNorm) {
  for (int64_t axis : {-1, 1})
    for (bool with_bias : {true, false}) {
      Rng rng(700 + axis + 10 * with_bias);
      Shape xs{2, 3, 4};
      Shape ps = axis == -1 ? Shape{4} : Shape{3, 4};
      Shape ms = axis == -1 ? Shape{2, 3, 1} : Shape{2, 1, 1};
      HostTensor x = rand_tensor(xs, F64, rng, -2, 2), s = rand_tensor(ps, F64, rng), b = rand_tensor(ps, F64, rng);
      HostTensor y(xs, F64), mean(ms, F64), istd(ms, F64), dy(xs, F64);
      HostTensor dx(xs, F64), ds(ps, F64), db(ps, F64);
      View bias = with_bias ? b.view() : null_view(ps), dbias = with_bias ? db.view() : null_view(ps);
      GradCase c{{&x, &s, &b},
                 {&dx, &ds, with_bias ? &db : nullptr},
                 {&y},
                 {&dy},
                 [&] { k::layer_norm(x, s, bias, y, mean, istd, axis, 1e-5); },
                 [&] { k::layer_norm_grad(dy, x, s, mean, istd, dx, ds, dbias, axis); }};
      SCOPED_TRACE("axis " + std::to_string(axis) + " bias " + std::to_string(with_bias));
      check_grad(c);
    }
}

TEST(Grad, RmsNorm) {
  for (int64_t axis : {-1, 1}) {
    Rng rng(800 + axis);
    Shape xs{2, 3, 4};
    Shape ps = axis == -1 ? Shape{4} : Shape{3, 4};
    Shape ms = axis == -1 ? Shape{2, 3, 1} : Shape{2, 1, 1};
    HostTensor x = rand_tensor(xs, F64, rng, -2, 2), s = rand_tensor(ps, F64, rng);
    HostTensor y(xs, F64), inv(ms, F64), dy(xs, F64), dx(xs, F64), ds(ps, F64);
    GradCase c{{&x, &s}, {&dx, &ds}, {&y}, {&dy}, [&] { k::rms_norm(x, s, y, inv, axis, 1e-6); },
               [&] { k::rms_norm_grad(dy, x, s, inv, dx, ds, axis); }};
    check_grad(c);
  }
}

// fy-fuse-norm-grad-add: a norm's input gradient with the residual's
// gradient added in the kernel is the kernel's gradient, then binary's add,
// bit for bit (F32 and F64; GPT-2's width and an odd one).
TEST(Grad, NormGradAddIsGradThenAdd) {
  for (DType dt : {F32, F64})
    for (int64_t D : {int64_t(768), int64_t(37)}) {
      Rng rng(900 + D);
      const Shape xs{3, 5, D}, ps{D}, ms{3, 5, 1};
      HostTensor x = rand_tensor(xs, dt, rng, -2, 2), s = rand_tensor(ps, dt, rng), b = rand_tensor(ps, dt, rng);
      HostTensor dy = rand_tensor(xs, dt, rng), g = rand_tensor(xs, dt, rng);
      HostTensor y(xs, dt), mean(ms, dt), istd(ms, dt), inv(ms, dt);
      k::layer_norm(x, s, b, y, mean, istd, -1, 1e-5);
      k::rms_norm(x, s, y, inv, -1, 1e-6);
      HostTensor want(xs, dt), got(xs, dt), ds(ps, dt), db(ps, dt), ds2(ps, dt), db2(ps, dt);
      k::layer_norm_grad(dy, x, s, mean, istd, want, ds, db, -1);
      k::binary(BinOp::Add, want, g, want);
      k::layer_norm_grad_add(dy, x, s, mean, istd, g, got, ds2, db2, -1);
      SCOPED_TRACE(std::string(fy::dtype_name(dt)) + " D " + std::to_string(D));
      EXPECT_EQ(std::memcmp(got.view().data, want.view().data, got.view().nbytes()), 0) << "layer_norm_grad_add dx";
      EXPECT_EQ(std::memcmp(ds2.view().data, ds.view().data, ds.view().nbytes()), 0) << "layer_norm_grad_add dscale";
      EXPECT_EQ(std::memcmp(db2.view().data, db.view().data, db.view().nbytes()), 0) << "layer_norm_grad_add dbias";
      k::rms_norm_grad(dy, x, s, inv, want, ds, -1);
      k::binary(BinOp::Add, g, want, want);
      k::rms_norm_grad_add(dy, x, s, inv, g, got, ds2, -1);
      EXPECT_EQ(std::memcmp(got.view().data, want.view().data, got.view().nbytes()), 0) << "rms_norm_grad_add dx";
      EXPECT_EQ(std::memcmp(ds2.view().data, ds.view().data, ds.view().nbytes()), 0) << "rms_norm_grad_add dscale";
      HostTensor wrong({3, 5, D + 1}, dt);
      EXPECT_THROW(k::rms_norm_grad_add(dy, x, s, inv, wrong, got, ds2, -1), fy::Error);
    }
}

TEST(Grad, Softmax) {
  for (int64_t axis : {-1, 1, 0}) {
    Rng rng(900 + axis);
    Shape xs{3, 4, 2};
    HostTensor x = rand_tensor(xs, F64, rng, -3, 3), y(xs, F64), dy(xs, F64), dx(xs, F64);
    GradCase c{{&x}, {&dx}, {&y}, {&dy}, [&] { k::softmax(x, y, axis); },
               [&] { k::softmax_grad(y, dy, dx, axis); }};
    SCOPED_TRACE("axis " + std::to_string(axis));
    check_grad(c);
  }
}

TEST(Grad, SoftmaxCrossEntropy) {
  struct Case {
    Shape logits;
    std::vector<double> labels;
    Shape ls;
    bool mean;
  };
  std::vector<Case> cases = {{{4, 5}, {0, 4, -1, 2}, {4}, true},
                             {{4, 5}, {1, 1, 3, -1}, {4}, false},
                             {{2, 3, 3}, {0, 2, -1, 1, 1, 0}, {2, 3}, true}};
  for (const auto& cs : cases) {
    Rng rng(1000);
    HostTensor x = rand_tensor(cs.logits, F64, rng, -2, 2), labels = make_tensor(cs.ls, DType::I64, cs.labels);
    HostTensor loss({1}, F64), lp(cs.logits, F64), dloss({1}, F64), dx(cs.logits, F64);
    GradCase c{{&x}, {&dx}, {&loss}, {&dloss},
               [&] { k::softmax_cross_entropy(x, labels, loss, lp, -1, cs.mean); },
               [&] { k::softmax_cross_entropy_grad(dloss, lp, labels, dx, -1, cs.mean); }};
    SCOPED_TRACE(cs.logits.str());
    check_grad(c);
  }
}

TEST(Grad, Dropout) {
  Rng rng(1100);
  HostTensor x = rand_tensor({50}, F64, rng), y({50}, F64), mask({50}, DType::U8), dy({50}, F64), dx({50}, F64);
  GradCase c{{&x}, {&dx}, {&y}, {&dy}, [&] { k::dropout(x, y, mask, 0.25, 9); },
             [&] { k::dropout_grad(dy, mask, dx, 0.25); }};
  check_grad(c);
}

// swiglu and its gradient give the bits of the kernels it fuses: silu then
// mul, and mul, unary_grad's silu and mul (those are checked against finite
// differences above), at sizes that take the vectorised and threaded paths.
TEST(Grad, SwiGLUIsSiluTimesUp) {
  Rng rng(1200);
  for (int64_t n : {int64_t(7), int64_t(1) << 16}) {
    SCOPED_TRACE(n);
    HostTensor g = rand_tensor({n}, F32, rng, -8, 8), u = rand_tensor({n}, F32, rng), dy = rand_tensor({n}, F32, rng);
    HostTensor y({n}, F32), dg({n}, F32), du({n}, F32);
    k::swiglu(g, u, y);
    k::swiglu_grad(g, u, dy, dg, du);
    HostTensor s({n}, F32), want_y({n}, F32), ds({n}, F32), want_dg({n}, F32), want_du({n}, F32);
    k::unary(UnOp::Silu, g, s);
    k::binary(BinOp::Mul, s, u, want_y);
    k::binary(BinOp::Mul, dy, u, ds);
    k::unary_grad(UnOp::Silu, g, s, ds, want_dg);
    k::binary(BinOp::Mul, dy, s, want_du);
    EXPECT_TRUE(same_bits(y, want_y));
    EXPECT_TRUE(same_bits(dg, want_dg));
    EXPECT_TRUE(same_bits(du, want_du));
  }
  HostTensor a({4}, F32), b({5}, F32), out({4}, F32);
  EXPECT_THROW(k::swiglu(a, b, out), fy::Error);
}

// swiglu_packed reads the gate and up of each row from the two halves of a
// [rows, 2F] input and gives swiglu's bits on them (one product of the two
// weights concatenated writes them so); its gradient writes dgate and dup
// into the same halves. Built here from separate gate and up, one row of
// the packed input at a time, so a half taken from the wrong place shows.
TEST(Grad, SwiGLUPackedIsSwiGLUOfTheHalves) {
  Rng rng(1201);
  for (auto [rows, F] : {std::pair<int64_t, int64_t>{3, 5}, {64, 2048}}) {
    SCOPED_TRACE(std::to_string(rows) + " x " + std::to_string(F));
    HostTensor g = rand_tensor({rows, F}, F32, rng, -8, 8), u = rand_tensor({rows, F}, F32, rng);
    HostTensor dy = rand_tensor({rows, F}, F32, rng), x({rows, 2 * F}, F32);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < F; ++c) {
        x.as<float>()[r * 2 * F + c] = g.as<float>()[r * F + c];
        x.as<float>()[r * 2 * F + F + c] = u.as<float>()[r * F + c];
      }
    HostTensor y({rows, F}, F32), dx({rows, 2 * F}, F32), want_y({rows, F}, F32), dg({rows, F}, F32),
        du({rows, F}, F32);
    k::swiglu_packed(x, y);
    k::swiglu_packed_grad(x, dy, dx);
    k::swiglu(g, u, want_y);
    k::swiglu_grad(g, u, dy, dg, du);
    EXPECT_TRUE(same_bits(y, want_y));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < F; ++c) {
        ASSERT_EQ(std::memcmp(&dx.as<float>()[r * 2 * F + c], &dg.as<float>()[r * F + c], 4), 0) << r << "," << c;
        ASSERT_EQ(std::memcmp(&dx.as<float>()[r * 2 * F + F + c], &du.as<float>()[r * F + c], 4), 0) << r << "," << c;
      }
  }
  HostTensor a({4, 15}, F32), out({4, 8}, F32);
  EXPECT_THROW(k::swiglu_packed(a, out), fy::Error);
}

// rope gives the bits of the seven ops it fuses (x cos + concat(-x2, x1)
// sin), and transposed those of the ops autodiff writes for their gradient
// (dy cos + concat(dy2 s2, -(dy1 s1))); the transposed rotation is the
// adjoint of the rotation: <rope(x), dy> = <x, rope^T(dy)>. Token-major and
// head-major layouts, a rank-3 x, and a size that takes the threaded path.
TEST(Grad, RopeIsTheUnfusedRotation) {
  struct Case {
    Shape x;
    int64_t axis;
  };
  Rng rng(1300);
  for (const Case& c : {Case{{2, 5, 3, 8}, 1}, Case{{2, 3, 5, 8}, 2}, Case{{2, 5, 8}, 1}, Case{{4, 64, 8, 64}, 1}}) {
    SCOPED_TRACE(c.x.str());
    const int r = c.x.rank;
    const int64_t T = c.x[int(c.axis)], D = c.x[r - 1], h = D / 2;
    HostTensor x = rand_tensor(c.x, F32, rng, -2, 2), dy = rand_tensor(c.x, F32, rng, -2, 2);
    HostTensor cos = rand_tensor({T, D}, F32, rng), sin = rand_tensor({T, D}, F32, rng);
    Shape tb = c.x;  // the tables broadcast against x
    for (int d = 0; d < r; ++d) tb.d[d] = (d == c.axis || d == r - 1) ? c.x[d] : 1;
    const View cb{cos.view().data, tb, F32}, sb{sin.view().data, tb, F32};
    Shape half = c.x;
    half.d[r - 1] = h;
    std::vector<int64_t> lo(size_t(r), 0), hi(size_t(r), 0), steps(size_t(r), 1);
    hi[size_t(r - 1)] = h;
    auto tmp = [&](const Shape& s) { return HostTensor(s, F32); };

    HostTensor y = tmp(c.x), dx = tmp(c.x);
    k::rope(x, cos, sin, y, c.axis, false);
    k::rope(dy, cos, sin, dx, c.axis, true);

    HostTensor t1 = tmp(c.x), x1 = tmp(half), x2 = tmp(half), n2 = tmp(half), rot = tmp(c.x), t2 = tmp(c.x),
               want = tmp(c.x);
    k::binary(BinOp::Mul, x, cb, t1);
    k::slice(x, x1, lo, steps);
    k::slice(x, x2, hi, steps);
    k::unary(UnOp::Neg, x2, n2);
    k::concat({n2, x1}, rot, r - 1);
    k::binary(BinOp::Mul, rot, sb, t2);
    k::binary(BinOp::Add, t1, t2, want);
    EXPECT_TRUE(same_bits(y, want)) << "rope";

    HostTensor a = tmp(c.x), p = tmp(c.x), p1 = tmp(half), p2 = tmp(half), n1 = tmp(half), q = tmp(c.x),
               want_dx = tmp(c.x);
    k::binary(BinOp::Mul, dy, cb, a);
    k::binary(BinOp::Mul, dy, sb, p);
    k::slice(p, p1, lo, steps);
    k::slice(p, p2, hi, steps);
    k::unary(UnOp::Neg, p1, n1);
    k::concat({p2, n1}, q, r - 1);
    k::binary(BinOp::Add, a, q, want_dx);
    EXPECT_TRUE(same_bits(dx, want_dx)) << "rope transposed";

    double lhs = 0, rhs = 0, scale = 0;
    for (int64_t i = 0; i < x.view().numel(); ++i) {
      lhs += get(y, i) * get(dy, i);
      rhs += get(x, i) * get(dx, i);
      scale += std::fabs(get(y, i) * get(dy, i));
    }
    EXPECT_NEAR(lhs, rhs, 1e-5 * scale) << "the transposed rotation is not the adjoint";
  }
  HostTensor x({2, 4, 7}, F32), y({2, 4, 7}, F32), t({4, 7}, F32);
  EXPECT_THROW(k::rope(x, t, t, y, 1, false), fy::Error);  // odd D
  HostTensor x8({2, 4, 8}, F32), y8({2, 4, 8}, F32), t8({4, 8}, F32), t5({5, 8}, F32);
  EXPECT_THROW(k::rope(x8, t5, t5, y8, 1, false), fy::Error);  // T 5, x's 4
  EXPECT_THROW(k::rope(x8, t8, t8, y8, 2, false), fy::Error);  // the last dim
}

}  // namespace
}  // namespace fyt
