// 16-bit storage: bf16 / fp16 bits against values worked out from the
// formats, the cast kernel, and the kernels that move 16-bit elements.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "core/half.h"
#include "kernels/cpu/kernels.h"
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

HostTensor random(fy::Shape s, uint64_t seed) {
  fyt::Rng rng(seed);
  return fyt::rand_tensor(s, DType::F32, rng, -3000, 3000);
}

// cast narrows F32 to the nearest 16-bit value and widens it back exactly;
// other pairs are refused.
TEST(Half, CastKernel) {
  HostTensor x = random({3, 1000}, 1);
  for (DType dt : {DType::BF16, DType::F16}) {
    HostTensor h({3, 1000}, dt), back({3, 1000}, DType::F32);
    k::cast(x.view(), h.view());
    k::cast(h.view(), back.view());
    const uint16_t* bits = static_cast<const uint16_t*>(h.view().data);
    for (int64_t i = 0; i < 3000; ++i) {
      const float v = x.view().as<float>()[i];
      ASSERT_EQ(bits[i], dt == DType::BF16 ? fy::bf16_bits(v) : fy::fp16_bits(v)) << i;
      ASSERT_EQ(back.view().as<float>()[i], dt == DType::BF16 ? fy::round_to_bf16(v) : fy::round_to_fp16(v)) << i;
    }
  }
  HostTensor i64({4}, DType::I64), b16({4}, DType::BF16), f16({4}, DType::F16);
  EXPECT_THROW(k::cast(i64.view(), b16.view()), fy::Error);
  EXPECT_THROW(k::cast(b16.view(), f16.view()), fy::Error);
}

// The kernels that only move elements take 16-bit operands as they are.
TEST(Half, MovementKernelsMoveSixteenBits) {
  HostTensor x = random({4, 6}, 2), h({4, 6}, DType::BF16), t({6, 4}, DType::BF16), s({2, 6}, DType::BF16);
  k::cast(x.view(), h.view());
  k::transpose(h.view(), t.view(), {1, 0});
  k::slice(h.view(), s.view(), {1, 0}, {2, 1});
  const uint16_t* ph = static_cast<const uint16_t*>(h.view().data);
  const uint16_t* pt = static_cast<const uint16_t*>(t.view().data);
  const uint16_t* ps = static_cast<const uint16_t*>(s.view().data);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 6; ++j) EXPECT_EQ(pt[j * 4 + i], ph[i * 6 + j]);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 6; ++j) EXPECT_EQ(ps[i * 6 + j], ph[(1 + 2 * i) * 6 + j]);
  // slice_grad writes the slice's rows and zeros (bits 0) elsewhere, over poison.
  HostTensor dx({4, 6}, DType::BF16);
  std::memset(dx.view().data, 0xff, dx.view().nbytes());
  k::slice_grad(s.view(), dx.view(), {1, 0}, {2, 1});
  const uint16_t* pd = static_cast<const uint16_t*>(dx.view().data);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 6; ++j) EXPECT_EQ(pd[i * 6 + j], i % 2 ? ph[i * 6 + j] : 0) << i << "," << j;
}

// The CPU's matmul takes 16-bit operands and result itself: the bits of
// casts around the F32 product (at the precision's operand rounding).
TEST(Half, MatmulWidensAndNarrows) {
  for (DType dt : {DType::BF16, DType::F16}) {
    k::set_matmul_operands(dt == DType::BF16 ? k::MatmulOperands::BF16 : k::MatmulOperands::FP16);
    HostTensor x = random({2, 64, 96}, 3), w = random({80, 96}, 4);
    for (int64_t i = 0; i < w.view().numel(); ++i) w.view().as<float>()[i] *= 1e-3f;
    HostTensor x16({2, 64, 96}, dt), y16({2, 64, 80}, dt);
    k::cast(x.view(), x16.view());
    k::matmul(x16.view(), w.view(), y16.view(), false, true);
    HostTensor xw({2, 64, 96}, DType::F32), yw({2, 64, 80}, DType::F32), want({2, 64, 80}, dt);
    k::cast(x16.view(), xw.view());
    k::matmul(xw.view(), w.view(), yw.view(), false, true);
    k::cast(yw.view(), want.view());
    EXPECT_EQ(std::memcmp(y16.view().data, want.view().data, y16.view().nbytes()), 0) << fy::dtype_name(dt);
  }
  k::set_matmul_operands(k::MatmulOperands::FP32);
}

// A Linear's product and bias in one kernel: the bits of matmul into an fp32
// buffer, add, and (a 16-bit result) cast, the kernels it stands for.
TEST(Half, MatmulBiasIsMatmulAddCast) {
  HostTensor x = random({2, 64, 96}, 5), w = random({80, 96}, 6), b = random({80}, 7);
  for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
    HostTensor y({2, 64, 80}, dt), p({2, 64, 80}, DType::F32), want({2, 64, 80}, dt);
    k::matmul_bias(x.view(), w.view(), b.view(), y.view(), false, true);
    k::matmul(x.view(), w.view(), p.view(), false, true);
    k::binary(k::BinOp::Add, p.view(), b.view(), p.view());
    k::cast(p.view(), want.view());
    EXPECT_EQ(std::memcmp(y.view().data, want.view().data, y.view().nbytes()), 0) << fy::dtype_name(dt);
  }
  // The add reads the bias along the last dim: a wrong length is refused.
  HostTensor y({2, 64, 80}, DType::F32), b2 = random({96}, 8);
  EXPECT_THROW(k::matmul_bias(x.view(), w.view(), b2.view(), y.view(), false, true), fy::Error);
}

}  // namespace

// A bias's gradient and its activation gradient's 16-bit copy in one launch
// (fy-half-activations' product copies): reduce_to's sum and cast's copy.
TEST(Half, ReduceSumCastIsReduceThenCast) {
  HostTensor x = random({4, 33, 36}, 9);
  for (DType dt : {DType::BF16, DType::F16}) {
    HostTensor y({36}, DType::F32), h({4, 33, 36}, dt), want_y({36}, DType::F32), want_h({4, 33, 36}, dt);
    k::reduce_sum_cast(x.view(), y.view(), h.view());
    k::reduce_to(x.view(), want_y.view(), false);
    k::cast(x.view(), want_h.view());
    EXPECT_EQ(std::memcmp(y.view().data, want_y.view().data, y.view().nbytes()), 0) << fy::dtype_name(dt);
    EXPECT_EQ(std::memcmp(h.view().data, want_h.view().data, h.view().nbytes()), 0) << fy::dtype_name(dt);
  }
}
