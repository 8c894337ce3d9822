// 16-bit storage: bf16 / fp16 bits against values worked out from the
// formats, and the CPU kernels' widening of 16-bit operands against the F32
// kernels on the widened values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "core/half.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/widen.h"
#include "test_util.h"

namespace {
using fy::DType;
using fy::HostTensor;
using fy::View;
namespace k = fy::cpu;

float f(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

TEST(Half, KnownBits) {
  EXPECT_EQ(fy::bf16_bits(1.0f), 0x3f80);
  EXPECT_EQ(fy::bf16_bits(0.1f), 0x3dcd);       // 0x3dcccccd: the low half rounds up
  EXPECT_EQ(fy::bf16_bits(-2.0f), 0xc000);
  EXPECT_EQ(fy::bf16_bits(f(0x3f808000u)), 0x3f80);  // tie: to the even one
  EXPECT_EQ(fy::bf16_bits(f(0x3f818000u)), 0x3f82);  // tie: up to the even one
  EXPECT_EQ(fy::bf16_bits(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(fy::bf16_bits(f(0x7f800001u)) & 0x7fc0, 0x7fc0);  // a NaN whose payload is in the low bits stays NaN
  EXPECT_EQ(fy::fp16_bits(1.0f), 0x3c00);
  EXPECT_EQ(fy::fp16_bits(-2.0f), 0xc000);
  EXPECT_EQ(fy::fp16_bits(65504.f), 0x7bff);
  EXPECT_EQ(fy::fp16_bits(65520.f), 0x7c00);
  EXPECT_EQ(fy::fp16_bits(0x1p-14f), 0x0400);   // smallest normal
  EXPECT_EQ(fy::fp16_bits(0x1p-24f), 0x0001);   // smallest subnormal
  EXPECT_EQ(fy::fp16_bits(0x3ffp-24f), 0x03ff); // largest subnormal
  EXPECT_EQ(fy::fp16_bits(-0.0f), 0x8000);
  EXPECT_EQ(fy::fp16_bits(0.1f), 0x2e66);
  EXPECT_EQ(fy::fp16_bits(std::nanf("")) & 0x7e00, 0x7e00);
  EXPECT_EQ(fy::fp16_value(0x3555), 0x555p-12f);  // 1/3's nearest: 1.0101010101b x 2^-2
  EXPECT_EQ(fy::fp16_value(0x8001), -0x1p-24f);
  EXPECT_TRUE(std::isinf(fy::fp16_value(0xfc00)) && fy::fp16_value(0xfc00) < 0);
  EXPECT_EQ(fy::bf16_value(0x4049), 3.140625f);
}

// Every 16-bit pattern that is a number comes back from its value; every
// float narrows to the value round_to_* gives.
TEST(Half, BitsRoundTripAndAgreeWithRounding) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float b = fy::bf16_value(uint16_t(h)), p = fy::fp16_value(uint16_t(h));
    if (!std::isnan(b)) EXPECT_EQ(fy::bf16_bits(b), h) << h;
    if (!std::isnan(p)) EXPECT_EQ(fy::fp16_bits(p), h) << h;
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const float x = f(rng());
    if (std::isnan(x)) continue;
    const float b = fy::bf16_value(fy::bf16_bits(x)), p = fy::fp16_value(fy::fp16_bits(x));
    const float rb = fy::round_to_bf16(x), rp = fy::round_to_fp16(x);
    ASSERT_EQ(std::memcmp(&b, &rb, 4), 0) << x;
    ASSERT_EQ(std::memcmp(&p, &rp, 4), 0) << x;
  }
}

HostTensor narrow(const HostTensor& x, DType dt) {
  HostTensor y(x.view().shape, dt);
  const float* s = x.view().as<float>();
  uint16_t* d = static_cast<uint16_t*>(y.view().data);
  for (int64_t i = 0; i < x.view().numel(); ++i) d[i] = dt == DType::BF16 ? fy::bf16_bits(s[i]) : fy::fp16_bits(s[i]);
  return y;
}
HostTensor widen(const HostTensor& x) {
  HostTensor y(x.view().shape, DType::F32);
  const uint16_t* s = static_cast<const uint16_t*>(x.view().data);
  for (int64_t i = 0; i < x.view().numel(); ++i)
    y.view().as<float>()[i] = x.view().dtype == DType::BF16 ? fy::bf16_value(s[i]) : fy::fp16_value(s[i]);
  return y;
}
HostTensor random(fy::Shape s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  HostTensor t(s, DType::F32);
  for (int64_t i = 0; i < t.view().numel(); ++i) t.view().as<float>()[i] = n(rng);
  return t;
}

// A kernel on 16-bit operands gives the F32 kernel's result on their
// values, rounded: mixed with F32 operands, and with F32 statistics beside.
TEST(Half, WidenedKernelsAreTheF32KernelsRounded) {
  for (DType dt : {DType::BF16, DType::F16}) {
    HostTensor a = narrow(random({4, 33}, 1), dt), b = random({33}, 2), out(fy::Shape{4, 33}, dt);
    k::widened([](auto&&... x) { k::binary(x...); })(k::BinOp::Mul, a.view(), b.view(), out.view());
    HostTensor want({4, 33}, DType::F32);
    k::binary(k::BinOp::Mul, widen(a).view(), b.view(), want.view());
    EXPECT_TRUE(fyt::same_bits(out, narrow(want, dt)));
    EXPECT_TRUE(fyt::same_bits(widen(a), widen(narrow(widen(a), dt))));  // a itself unchanged

    // layer_norm: x and y 16-bit, mean and inv_std F32.
    HostTensor scale = random({33}, 3), bias = random({33}, 4), y({4, 33}, dt), mean({4, 1}, DType::F32),
               inv({4, 1}, DType::F32);
    k::widened([](auto&&... x) { k::layer_norm(x...); })(a.view(), scale.view(), bias.view(), y.view(), mean.view(),
                                                         inv.view(), int64_t(1), 1e-5);
    HostTensor wy({4, 33}, DType::F32), wmean({4, 1}, DType::F32), winv({4, 1}, DType::F32);
    k::layer_norm(widen(a).view(), scale.view(), bias.view(), wy.view(), wmean.view(), winv.view(), 1, 1e-5);
    EXPECT_TRUE(fyt::same_bits(y, narrow(wy, dt)));
    EXPECT_TRUE(fyt::same_bits(mean, wmean));
    EXPECT_TRUE(fyt::same_bits(inv, winv));
  }
}

// One buffer as two operands is one copy; the same storage under two
// sizes is refused rather than rounded back twice.
TEST(Half, OperandsOnOneBuffer) {
  HostTensor a = narrow(random({8}, 5), DType::BF16), out({8}, DType::BF16);
  k::widened([](auto&&... x) { k::binary(x...); })(k::BinOp::Add, a.view(), a.view(), out.view());
  HostTensor want({8}, DType::F32);
  k::binary(k::BinOp::Add, widen(a).view(), widen(a).view(), want.view());
  EXPECT_TRUE(fyt::same_bits(out, narrow(want, DType::BF16)));
  View first4{a.view().data, fy::Shape{4}, DType::BF16};
  EXPECT_THROW(k::widened([](auto&&... x) { k::binary(x...); })(k::BinOp::Add, a.view(), first4, out.view()),
               fy::Error);
}

}  // namespace
