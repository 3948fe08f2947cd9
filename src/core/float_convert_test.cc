#include "core/float_convert.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

namespace hodu {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

float bits_to_float(uint32_t b) { return std::bit_cast<float>(b); }

// ---- f16 -------------------------------------------------------------------------

TEST(F16, KnownPatterns) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(f32_to_f16(-2.5f), 0xC100);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFF);                 // max finite
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14)), 0x0400);    // min normal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);    // min subnormal
  EXPECT_EQ(f32_to_f16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(kInf), 0x7C00);
  EXPECT_EQ(f32_to_f16(-kInf), 0xFC00);
  EXPECT_EQ(f32_to_f16(kNaN) & 0x7E00, 0x7E00);
}

TEST(F16, TiesToEven) {
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // halfway 1 and next: even (down)
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // halfway, odd below: up
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);             // half the min subnormal: to 0
  EXPECT_EQ(f32_to_f16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(f32_to_f16(3 * std::ldexp(1.0f, -25)), 0x0002);
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7BFF);  // below the overflow tie
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);  // tie with max (odd): rounds to Inf
}

TEST(F16, DecodeExactAndRoundTrip) {
  EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);
  EXPECT_TRUE(std::isinf(f16_to_f32(0xFC00)) && f16_to_f32(0xFC00) < 0);
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7E00)));
  EXPECT_TRUE(std::signbit(f16_to_f32(0x8000)));
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_f16(f), h) << std::hex << h;
  }
}

// ---- bf16 ------------------------------------------------------------------------

TEST(BF16, KnownPatterns) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_bf16(-2.5f), 0xC020);
  EXPECT_EQ(f32_to_bf16(bits_to_float(0x7F7F0000)), 0x7F7F);      // max finite
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7F80);  // rounds to Inf
  EXPECT_EQ(f32_to_bf16(std::ldexp(1.0f, -126)), 0x0080);        // min normal
  EXPECT_EQ(f32_to_bf16(std::ldexp(1.0f, -133)), 0x0001);        // min subnormal
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);      // tie → even
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);  // tie → even (up)
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_bf16(kInf), 0x7F80);
  EXPECT_EQ(f32_to_bf16(-kInf), 0xFF80);
  EXPECT_EQ(f32_to_bf16(kNaN), 0x7FC0);
  EXPECT_EQ(f32_to_bf16(-kNaN), 0xFFC0);
  EXPECT_EQ(f32_to_bf16(bits_to_float(0x7F800001)), 0x7FC0);  // signalling NaN stays NaN, not Inf
  EXPECT_EQ(bf16_to_f32(0x3F80), 1.0f);
  EXPECT_TRUE(std::isnan(bf16_to_f32(0x7FC0)));
}

// ONNX test_cast_FLOAT_to_BFLOAT16.
TEST(BF16, OnnxConformance) {
  const std::vector<float> in = {0.47892547f, 0.48033667f, 0.49968487f, 0.81910545f, 0.47031248f, 0.816468f,
                                 0.21087195f, 0.7229038f,  kNaN,        kInf,        kInf,        -kInf};
  const std::vector<uint16_t> want = {0x3EF5, 0x3EF6, 0x3F00, 0x3F52, 0x3EF1, 0x3F51,
                                      0x3E58, 0x3F39, 0x7FC0, 0x7F80, 0x7F80, 0xFF80};
  for (size_t i = 0; i < in.size(); ++i) EXPECT_EQ(f32_to_bf16(in[i]), want[i]) << i;
}

// ---- float8: the ONNX conformance vectors (test_cast_FLOAT_to_FLOAT8*) -----------

const std::vector<float> kOnnxFloat8Input = {
    0.47892547f, 0.48033667f, 0.49968487f, 0.81910545f, 0.47031248f, 0.7229038f, 1000000.0f, 1e-07f,
    kNaN,        kInf,        kInf,        -kInf,       -1e-07f,     1e-07f,     -1000000.0f};

void expect_bytes(uint8_t (*convert)(float, bool), bool saturate, const std::vector<uint8_t>& want) {
  ASSERT_EQ(want.size(), kOnnxFloat8Input.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(convert(kOnnxFloat8Input[i], saturate), want[i]) << "element " << i << " saturate " << saturate;
}

TEST(Float8, OnnxConformanceE4M3FN) {
  expect_bytes(f32_to_f8e4m3fn, true,
               {0x2f, 0x2f, 0x30, 0x35, 0x2f, 0x34, 0x7e, 0x00, 0x7f, 0x7e, 0x7e, 0xfe, 0x80, 0x00, 0xfe});
  expect_bytes(f32_to_f8e4m3fn, false,
               {0x2f, 0x2f, 0x30, 0x35, 0x2f, 0x34, 0x7f, 0x00, 0x7f, 0x7f, 0x7f, 0xff, 0x80, 0x00, 0xff});
}

TEST(Float8, OnnxConformanceE4M3FNUZ) {
  expect_bytes(f32_to_f8e4m3fnuz, true,
               {0x37, 0x37, 0x38, 0x3d, 0x37, 0x3c, 0x7f, 0x00, 0x80, 0x7f, 0x7f, 0xff, 0x00, 0x00, 0xff});
  expect_bytes(f32_to_f8e4m3fnuz, false,
               {0x37, 0x37, 0x38, 0x3d, 0x37, 0x3c, 0x80, 0x00, 0x80, 0x80, 0x80, 0x80, 0x00, 0x00, 0x80});
}

TEST(Float8, OnnxConformanceE5M2) {
  expect_bytes(f32_to_f8e5m2, true,
               {0x38, 0x38, 0x38, 0x3b, 0x38, 0x3a, 0x7b, 0x00, 0x7e, 0x7b, 0x7b, 0xfb, 0x80, 0x00, 0xfb});
  expect_bytes(f32_to_f8e5m2, false,
               {0x38, 0x38, 0x38, 0x3b, 0x38, 0x3a, 0x7c, 0x00, 0x7e, 0x7c, 0x7c, 0xfc, 0x80, 0x00, 0xfc});
}

TEST(Float8, OnnxConformanceE5M2FNUZ) {
  expect_bytes(f32_to_f8e5m2fnuz, true,
               {0x3c, 0x3c, 0x3c, 0x3f, 0x3c, 0x3e, 0x7f, 0x00, 0x80, 0x7f, 0x7f, 0xff, 0x00, 0x00, 0xff});
  expect_bytes(f32_to_f8e5m2fnuz, false,
               {0x3c, 0x3c, 0x3c, 0x3f, 0x3c, 0x3e, 0x80, 0x00, 0x80, 0x80, 0x80, 0x80, 0x00, 0x00, 0x80});
}

// ---- float8 e4m3fn -----------------------------------------------------------------

TEST(Float8E4M3FN, KnownPatterns) {
  EXPECT_EQ(f32_to_f8e4m3fn(1.0f), 0x38);
  EXPECT_EQ(f32_to_f8e4m3fn(-2.5f), 0xC2);
  EXPECT_EQ(f32_to_f8e4m3fn(448.0f), 0x7E);               // max finite
  EXPECT_EQ(f32_to_f8e4m3fn(std::ldexp(1.0f, -6)), 0x08);  // min normal
  EXPECT_EQ(f32_to_f8e4m3fn(std::ldexp(1.0f, -9)), 0x01);  // min subnormal
  EXPECT_EQ(f32_to_f8e4m3fn(0.0f), 0x00);
  EXPECT_EQ(f32_to_f8e4m3fn(-0.0f), 0x80);
  EXPECT_EQ(f32_to_f8e4m3fn(kNaN), 0x7F);
  EXPECT_EQ(f32_to_f8e4m3fn(-kNaN), 0xFF);
  EXPECT_EQ(f32_to_f8e4m3fn(kInf, true), 0x7E);
  EXPECT_EQ(f32_to_f8e4m3fn(-kInf, true), 0xFE);
  EXPECT_EQ(f32_to_f8e4m3fn(kInf, false), 0x7F);
  EXPECT_EQ(f32_to_f8e4m3fn(-kInf, false), 0xFF);
}

TEST(Float8E4M3FN, TiesAndOverflow) {
  EXPECT_EQ(f32_to_f8e4m3fn(1.0f + 1.0f / 16), 0x38);   // tie → even (down)
  EXPECT_EQ(f32_to_f8e4m3fn(1.0f + 3.0f / 16), 0x3A);   // tie → even (up)
  EXPECT_EQ(f32_to_f8e4m3fn(std::ldexp(1.0f, -10)), 0x00);   // half the min subnormal
  EXPECT_EQ(f32_to_f8e4m3fn(-std::ldexp(1.0f, -10)), 0x80);  // keeps the sign of zero
  EXPECT_EQ(f32_to_f8e4m3fn(3 * std::ldexp(1.0f, -10)), 0x02);
  // 464 is halfway between 448 (mantissa even) and 480 (not representable): down to 448.
  EXPECT_EQ(f32_to_f8e4m3fn(464.0f, false), 0x7E);
  EXPECT_EQ(f32_to_f8e4m3fn(465.0f, false), 0x7F);
  EXPECT_EQ(f32_to_f8e4m3fn(465.0f, true), 0x7E);
  EXPECT_EQ(f32_to_f8e4m3fn(-1e9f, true), 0xFE);
}

TEST(Float8E4M3FN, DecodeAllCodes) {
  EXPECT_EQ(f8e4m3fn_to_f32(0x7E), 448.0f);
  EXPECT_EQ(f8e4m3fn_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isnan(f8e4m3fn_to_f32(0x7F)));
  EXPECT_TRUE(std::isnan(f8e4m3fn_to_f32(0xFF)));
  for (uint32_t c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    EXPECT_EQ(f32_to_f8e4m3fn(f8e4m3fn_to_f32(static_cast<uint8_t>(c))), c) << c;
  }
}

// ---- float8 e4m3fnuz ---------------------------------------------------------------

TEST(Float8E4M3FNUZ, KnownPatterns) {
  EXPECT_EQ(f32_to_f8e4m3fnuz(1.0f), 0x40);
  EXPECT_EQ(f32_to_f8e4m3fnuz(-2.5f), 0xCA);
  EXPECT_EQ(f32_to_f8e4m3fnuz(240.0f), 0x7F);              // max finite
  EXPECT_EQ(f32_to_f8e4m3fnuz(std::ldexp(1.0f, -7)), 0x08);   // min normal
  EXPECT_EQ(f32_to_f8e4m3fnuz(std::ldexp(1.0f, -10)), 0x01);  // min subnormal
  EXPECT_EQ(f32_to_f8e4m3fnuz(-0.0f), 0x00);                  // no negative zero
  EXPECT_EQ(f32_to_f8e4m3fnuz(-std::ldexp(1.0f, -12)), 0x00);  // underflow to +0
  EXPECT_EQ(f32_to_f8e4m3fnuz(kNaN), 0x80);
  EXPECT_EQ(f32_to_f8e4m3fnuz(-kNaN), 0x80);
  EXPECT_EQ(f32_to_f8e4m3fnuz(-kInf, true), 0xFF);
  EXPECT_EQ(f32_to_f8e4m3fnuz(-kInf, false), 0x80);
  EXPECT_EQ(f32_to_f8e4m3fnuz(248.0f, false), 0x80);  // tie with max (odd): overflows
  EXPECT_EQ(f32_to_f8e4m3fnuz(247.0f, false), 0x7F);
  EXPECT_EQ(f32_to_f8e4m3fnuz(248.0f, true), 0x7F);
  EXPECT_TRUE(std::isnan(f8e4m3fnuz_to_f32(0x80)));
  EXPECT_EQ(f8e4m3fnuz_to_f32(0xFF), -240.0f);
  for (uint32_t c = 0; c < 256; ++c) {
    if (c == 0x80) continue;
    EXPECT_EQ(f32_to_f8e4m3fnuz(f8e4m3fnuz_to_f32(static_cast<uint8_t>(c))), c) << c;
  }
}

// ---- float8 e5m2 -------------------------------------------------------------------

TEST(Float8E5M2, KnownPatterns) {
  EXPECT_EQ(f32_to_f8e5m2(1.0f), 0x3C);
  EXPECT_EQ(f32_to_f8e5m2(-2.5f), 0xC1);
  EXPECT_EQ(f32_to_f8e5m2(57344.0f), 0x7B);                // max finite
  EXPECT_EQ(f32_to_f8e5m2(std::ldexp(1.0f, -14)), 0x04);   // min normal
  EXPECT_EQ(f32_to_f8e5m2(std::ldexp(1.0f, -16)), 0x01);   // min subnormal
  EXPECT_EQ(f32_to_f8e5m2(-0.0f), 0x80);
  EXPECT_EQ(f32_to_f8e5m2(kNaN), 0x7E);
  EXPECT_EQ(f32_to_f8e5m2(-kNaN), 0xFE);
  EXPECT_EQ(f32_to_f8e5m2(kInf, true), 0x7B);
  EXPECT_EQ(f32_to_f8e5m2(kInf, false), 0x7C);
  EXPECT_EQ(f32_to_f8e5m2(-kInf, false), 0xFC);
  EXPECT_EQ(f32_to_f8e5m2(61439.0f, false), 0x7B);
  EXPECT_EQ(f32_to_f8e5m2(61440.0f, false), 0x7C);  // tie with max (odd): Inf
  EXPECT_EQ(f32_to_f8e5m2(61440.0f, true), 0x7B);
  EXPECT_EQ(f32_to_f8e5m2(1.0f + 1.0f / 8), 0x3C);  // tie → even (down)
  EXPECT_EQ(f32_to_f8e5m2(1.0f + 3.0f / 8), 0x3E);  // tie → even (up)
  EXPECT_TRUE(std::isinf(f8e5m2_to_f32(0x7C)));
  EXPECT_TRUE(std::isnan(f8e5m2_to_f32(0x7D)));
  for (uint32_t c = 0; c < 256; ++c) {
    if ((c & 0x7F) > 0x7C) continue;
    EXPECT_EQ(f32_to_f8e5m2(f8e5m2_to_f32(static_cast<uint8_t>(c)), false), c) << c;
  }
}

// ---- float8 e5m2fnuz ---------------------------------------------------------------

TEST(Float8E5M2FNUZ, KnownPatterns) {
  EXPECT_EQ(f32_to_f8e5m2fnuz(1.0f), 0x40);
  EXPECT_EQ(f32_to_f8e5m2fnuz(-2.5f), 0xC5);
  EXPECT_EQ(f32_to_f8e5m2fnuz(57344.0f), 0x7F);
  EXPECT_EQ(f32_to_f8e5m2fnuz(std::ldexp(1.0f, -15)), 0x04);  // min normal
  EXPECT_EQ(f32_to_f8e5m2fnuz(std::ldexp(1.0f, -17)), 0x01);  // min subnormal
  EXPECT_EQ(f32_to_f8e5m2fnuz(-0.0f), 0x00);
  EXPECT_EQ(f32_to_f8e5m2fnuz(kNaN), 0x80);
  EXPECT_EQ(f32_to_f8e5m2fnuz(kInf, false), 0x80);
  EXPECT_EQ(f32_to_f8e5m2fnuz(-kInf, true), 0xFF);
  EXPECT_TRUE(std::isnan(f8e5m2fnuz_to_f32(0x80)));
  for (uint32_t c = 0; c < 256; ++c) {
    if (c == 0x80) continue;
    EXPECT_EQ(f32_to_f8e5m2fnuz(f8e5m2fnuz_to_f32(static_cast<uint8_t>(c))), c) << c;
  }
}

// ---- float8 e8m0 -------------------------------------------------------------------

TEST(Float8E8M0, OnnxConformance) {
  // test_cast_e8m0_FLOAT_to_FLOAT8E8M0 (round_mode "up", saturate).
  const std::vector<float> in = {0.0f, 0.124f, 0.25f, 0.5f, 1.1f, 2.0f, 4.0f, 8.0f};
  const std::vector<uint8_t> want = {0x00, 0x7c, 0x7d, 0x7e, 0x80, 0x80, 0x81, 0x82};
  for (size_t i = 0; i < in.size(); ++i) EXPECT_EQ(f32_to_f8e8m0(in[i]), want[i]) << i;
  EXPECT_EQ(f8e8m0_to_f32(0x00), std::ldexp(1.0f, -127));
  EXPECT_EQ(f8e8m0_to_f32(0x7c), 0.125f);
  EXPECT_EQ(f8e8m0_to_f32(0x82), 8.0f);
}

TEST(Float8E8M0, Rules) {
  EXPECT_EQ(f32_to_f8e8m0(1.0f), 0x7F);
  EXPECT_EQ(f32_to_f8e8m0(-4.0f), 0x81);  // the sign is ignored
  EXPECT_EQ(f32_to_f8e8m0(kNaN), 0xFF);
  EXPECT_EQ(f32_to_f8e8m0(kInf), 0xFF);
  EXPECT_EQ(f32_to_f8e8m0(std::ldexp(1.0f, 127)), 0xFE);
  EXPECT_EQ(f32_to_f8e8m0(std::ldexp(1.5f, 127), true), 0xFE);   // saturates
  EXPECT_EQ(f32_to_f8e8m0(std::ldexp(1.5f, 127), false), 0xFF);  // overflows to NaN
  // round_mode "nearest": up from 1.5 × 2^e.
  EXPECT_EQ(f32_to_f8e8m0(1.4f, true, true), 0x7F);
  EXPECT_EQ(f32_to_f8e8m0(1.5f, true, true), 0x80);
  EXPECT_EQ(f32_to_f8e8m0(3.0f, true, true), 0x81);
  EXPECT_TRUE(std::isnan(f8e8m0_to_f32(0xFF)));
  for (uint32_t c = 1; c < 255; ++c) EXPECT_EQ(f32_to_f8e8m0(f8e8m0_to_f32(static_cast<uint8_t>(c))), c);
}

// ---- float4 e2m1 -------------------------------------------------------------------

TEST(Float4E2M1, OnnxConformance) {
  // test_cast_FLOAT_to_FLOAT4E2M1, unpacked (the file packs two per byte, low nibble first).
  const std::vector<float> in = {0.48f, 0.25f, 1.05f, -3.5f, -8.0f, 9.0f, 1000000.0f, 1e-07f,
                                 kNaN,  kInf,  kInf,  -kInf, -4.0f, 0.01f, -0.0f};
  const std::vector<uint8_t> want = {0x1, 0x0, 0x2, 0xE, 0xF, 0x7, 0x7, 0x0, 0x8, 0x7, 0x7, 0xF, 0xE, 0x0, 0x8};
  for (size_t i = 0; i < in.size(); ++i) EXPECT_EQ(f32_to_f4e2m1(in[i]), want[i]) << i;
}

TEST(Float4E2M1, AllCodes) {
  const float values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (uint8_t c = 0; c < 16; ++c) {
    float want = (c & 0x8) ? -values[c & 7] : values[c & 7];
    EXPECT_EQ(f4e2m1_to_f32(c), want);
    EXPECT_EQ(std::signbit(f4e2m1_to_f32(c)), (c & 0x8) != 0);
    EXPECT_EQ(f32_to_f4e2m1(want), c);
  }
  EXPECT_EQ(f32_to_f4e2m1(2.5f), 0x4);   // tie → even (2)
  EXPECT_EQ(f32_to_f4e2m1(5.0f), 0x6);   // tie → even (4)
  EXPECT_EQ(f32_to_f4e2m1(0.75f), 0x2);  // tie → even (1)
  EXPECT_EQ(f32_to_f4e2m1(7.0f), 0x7);   // saturates
}

}  // namespace
}  // namespace hodu
