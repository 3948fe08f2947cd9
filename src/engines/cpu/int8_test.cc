// Quantized products and DynamicQuantizeLinear on the cpu engine: exactly the interpreter's
// results with every form of the weights (as they are, shifted with window sums for the zero point,
// split in two, hodu's int16 conv), at the extremes of the 8-bit ranges (where oneDNN's non-VNNI kernels would
// saturate), and ORT's dynamic quantization chain fused into the product. The ctest entry
// cpu_engine_test_avx2 runs these with oneDNN capped at AVX2 (no VNNI).
#include <gtest/gtest.h>

#include <cstdlib>

#include "engines/cpu/dnnl_common.h"
#include "engines/cpu/test_util.h"
#include "kernels/cpu/byte_table.h"
#include "kernels/cpu/int8_avx2.h"
#include "kernels/cpu/vector_math.h"

namespace hodu::cpu {
namespace {

using namespace testing;  // NOLINT
using hodu::testing::ScopedEnv;

Tensor ints(DType dt, const std::vector<int64_t>& shape, uint32_t seed, int lo, int hi) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<uint8_t> v(static_cast<size_t>(shape_numel(shape)));
  for (auto& x : v) x = static_cast<uint8_t>(d(rng));  // two's complement bytes for s8
  return Tensor::from_vector(dt, shape, v);
}
Tensor full(DType dt, const std::vector<int64_t>& shape, int value) {
  std::vector<uint8_t> v(static_cast<size_t>(shape_numel(shape)), static_cast<uint8_t>(value));
  return Tensor::from_vector(dt, shape, v);
}
Tensor scalar8(DType dt, int v) {
  return dt == DType::U8 ? Tensor::scalar<uint8_t>(dt, static_cast<uint8_t>(v))
                         : Tensor::scalar<int8_t>(dt, static_cast<int8_t>(v));
}

// Every weights form the engine has ("" lets it choose; int16: hodu's int16 convolution,
// kernels/cpu/int8_avx2.h, for every conv it can run — products it cannot run choose as "").
const char* const kForms[] = {"", "sums", "split", "int16"};

// Steps of op `op` on an int8 product kernel: oneDNN's, or hodu's int16 convolution (a matmul as
// a 1x1 conv) — which the product must take where int16 is forced.
int int8_steps(const PlannedModel& p, const std::string& op, const char* form = "") {
  const int hodu = p.count("(" + op + "): hodu int8 conv on int16 products") +
                   p.count("(" + op + "): hodu int8 matmul on int16 products");
  if (std::string(form) == "int16") {
    EXPECT_EQ(hodu, 1) << op;
  }
  return p.count("(" + op + "): onednn int8") + hodu;
}

struct ProductCase {
  DType x, w;
  int xz, wz;      // zero points
  bool extreme;    // inputs and weights at their limits (every product pair would saturate in 16 bits)
  int64_t group = 1;
};

Model conv_integer_model(const ProductCase& c, int64_t C, int64_t M, int64_t H) {
  GraphBuilder b;
  b.input("x", c.x, std::vector<int64_t>{1, C, H, H});
  std::vector<int64_t> ws = {M, C / c.group, 3, 3};
  Tensor w = c.extreme ? full(c.w, ws, c.w == DType::U8 ? 255 : 127)
                       : (c.w == DType::U8 ? ints(c.w, ws, 3, 0, 255) : ints(c.w, ws, 3, -128, 127));
  if (c.extreme) {  // half the weights at the other end
    auto* p = static_cast<uint8_t*>(w.raw_data());
    for (int64_t i = 0; i < w.numel(); i += 2) p[i] = c.w == DType::U8 ? 0 : 0x80;
  }
  b.constant("w", w);
  b.constant("xz", scalar8(c.x, c.xz));
  b.constant("wz", scalar8(c.w, c.wz));
  b.node("ConvInteger", {"x", "w", "xz", "wz"}, {"y"},
         {Attribute::make_ints("pads", {1, 1, 1, 1}), Attribute::make_int("group", c.group)});
  b.output("y");
  return b.finish();
}

TEST(CpuInt8, ConvIntegerIsExactInEveryWeightsForm) {
  const ProductCase cases[] = {
      {DType::U8, DType::I8, 0, 0, true},    {DType::U8, DType::I8, 255, 0, true}, {DType::I8, DType::I8, -128, 0, true},
      {DType::U8, DType::U8, 0, 143, true},  {DType::U8, DType::U8, 17, 3, false}, {DType::I8, DType::U8, 5, 200, false},
      {DType::U8, DType::I8, 9, -7, false},  {DType::U8, DType::I8, 9, -7, false, 4},
  };
  for (const char* form : kForms) {
    ScopedEnv env("HODU_CPU_INT8_WEIGHTS", *form ? form : nullptr);
    for (const auto& c : cases) {
      SCOPED_TRACE(::testing::Message() << "form '" << form << "' x " << dtype_name(c.x) << " w " << dtype_name(c.w)
                                        << " xz " << c.xz << " wz " << c.wz << " extreme " << c.extreme << " group "
                                        << c.group);
      const int64_t C = 32, M = 24, H = 7;
      Model m = conv_integer_model(c, C, M, H);
      Tensor x = c.extreme ? full(c.x, {1, C, H, H}, c.x == DType::U8 ? 255 : 127)
                           : (c.x == DType::U8 ? ints(c.x, {1, C, H, H}, 4, 0, 255) : ints(c.x, {1, C, H, H}, 4, -128, 127));
      auto p = expect_matches_interpreter(m, {{"x", x}}, 0, 0);
      EXPECT_EQ(int8_steps(*p, "ConvInteger", form), 1);
    }
  }
}

// Full-range 8-bit weights: random, with each row's first two at the type's top and the next
// two at its bottom, so that no row is pair-safe for vpmaddubsw whatever its zero point.
Tensor full_range_weights(DType dt, const std::vector<int64_t>& shape, uint32_t seed) {
  Tensor w = dt == DType::U8 ? ints(dt, shape, seed, 0, 255) : ints(dt, shape, seed, -128, 127);
  auto* p = static_cast<uint8_t*>(w.raw_data());
  const int64_t per = w.numel() / shape[0];
  for (int64_t m = 0; m < shape[0] && per >= 4; ++m) {
    p[m * per] = p[m * per + 1] = dt == DType::U8 ? 255 : 0x7f;
    p[m * per + 2] = p[m * per + 3] = dt == DType::U8 ? 0 : 0x80;
  }
  return w;
}

struct Int16Case {
  DType x, w;
  std::vector<int64_t> xs, ws;  // x [N, C, spatial...], w [M, C/group, k...]
  std::vector<Attribute> attrs;
  bool per_channel;  // weight zero points per output channel
  bool qlinear;      // QLinearConv (requantized, with bias), else ConvInteger (int32 sums)
};

// ConvInteger or QLinearConv of case c, with a nonzero input zero point.
Model int16_case_model(const Int16Case& c, uint32_t seed) {
  const int64_t M = c.ws[0];
  GraphBuilder b;
  b.input("x", c.x, c.xs);
  b.constant("w", full_range_weights(c.w, c.ws, seed));
  b.constant("xz", scalar8(c.x, c.x == DType::U8 ? 201 : -77));
  if (c.per_channel) {
    Tensor z = c.w == DType::U8 ? ints(c.w, {M}, seed + 1, 0, 255) : ints(c.w, {M}, seed + 1, -128, 127);
    b.constant("wz", z);
  } else {
    b.constant("wz", scalar8(c.w, c.w == DType::U8 ? 140 : -9));
  }
  if (!c.qlinear) {
    b.node("ConvInteger", {"x", "w", "xz", "wz"}, {"y"}, c.attrs);
  } else {
    b.constant("xs", Tensor::scalar<float>(DType::F32, 0.019f));
    std::vector<float> ws;
    std::vector<int32_t> bias;
    for (int64_t m = 0; m < M; ++m) {
      ws.push_back(0.0007f + 0.00003f * static_cast<float>(m));
      bias.push_back(static_cast<int32_t>(m * 777 - 9000));
    }
    b.constant("ws", Tensor::from_vector(DType::F32, {M}, ws));
    b.constant("ys", Tensor::scalar<float>(DType::F32, 0.9f));
    b.constant("yz", scalar8(c.x, c.x == DType::U8 ? 110 : 4));
    b.constant("bias", Tensor::from_vector(DType::I32, {M}, bias));
    b.node("QLinearConv", {"x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "bias"}, {"y"}, c.attrs);
  }
  b.output("y");
  return b.finish();
}

const std::vector<Int16Case>& int16_cases() {
  using A = Attribute;
  static const std::vector<Int16Case> cases = {
      {DType::U8, DType::I8, {2, 5, 9, 8}, {13, 5, 3, 3}, {A::make_ints("pads", {1, 1, 1, 1})}, true, false},
      {DType::I8, DType::U8, {1, 7, 11, 11}, {29, 7, 3, 3},
       {A::make_ints("pads", {1, 0, 2, 1}), A::make_ints("strides", {2, 2})}, true, true},
      {DType::U8, DType::U8, {2, 16, 6, 7}, {50, 16, 1, 1}, {}, false, false},
      {DType::I8, DType::I8, {1, 3, 23, 23}, {16, 3, 7, 7},
       {A::make_ints("pads", {3, 3, 3, 3}), A::make_ints("strides", {2, 2})}, true, true},
      {DType::U8, DType::I8, {1, 12, 10, 10}, {18, 4, 3, 3},
       {A::make_int("group", 3), A::make_ints("dilations", {2, 2}), A::make_ints("pads", {2, 2, 2, 2})}, true, false},
      {DType::U8, DType::U8, {2, 9, 17}, {11, 9, 5}, {A::make_ints("pads", {2, 2}), A::make_ints("strides", {2})},
       false, true},
      {DType::U8, DType::U8, {1, 64, 8, 8}, {72, 64, 3, 3}, {A::make_string("auto_pad", "SAME_UPPER")}, true, true},
      // Column dilation: taps apart in the copy, an odd channel count padded to even.
      {DType::U8, DType::I8, {1, 7, 9, 10}, {9, 7, 2, 3}, {A::make_ints("dilations", {1, 2}), A::make_ints("pads", {0, 2, 1, 2})},
       true, true},
      // A window row of 3 x 181 values, 272 pairs: K in two chunks (256 pairs and the rest).
      {DType::I8, DType::I8, {2, 181, 5, 6}, {20, 181, 3, 3}, {A::make_ints("pads", {1, 1, 1, 1})}, true, false},
  };
  return cases;
}

// hodu's int16 convolution (kernels/cpu/int8_avx2.h), forced by HODU_CPU_INT8_WEIGHTS=int16 on
// any AVX2 CPU: integer outputs bit-exact against the interpreter on weights that are not
// pair-safe (full range, per-channel zero points), u8 and s8 inputs and weights, odd channel
// counts, a nonzero input zero point under padding, strides, dilations, groups, 1-D, 1x1 and
// 7x7 windows, batch 2, 1 and 2 threads; the plan must say the kernel ran.
TEST(CpuInt8, Int16ConvIsExact) {
  if (!int8_avx2::available()) GTEST_SKIP() << "no AVX2 here (or HODU_MAX_ISA below it): the int16 conv cannot run";
  ScopedEnv env("HODU_CPU_INT8_WEIGHTS", "int16");
  const auto& cases = int16_cases();
  for (size_t i = 0; i < cases.size(); ++i)
    for (int threads : {1, 2}) {
      const auto& c = cases[i];
      SCOPED_TRACE(::testing::Message() << "case " << i << " threads " << threads);
      Model m = int16_case_model(c, 70 + static_cast<uint32_t>(i));
      Tensor x = c.x == DType::U8 ? ints(c.x, c.xs, 80 + static_cast<uint32_t>(i), 0, 255)
                                  : ints(c.x, c.xs, 80 + static_cast<uint32_t>(i), -128, 127);
      auto p = expect_matches_interpreter(m, {{"x", x}}, 0, 0, threads);
      EXPECT_EQ(p->count("hodu int8 conv on int16 products"), 1);
      EXPECT_EQ(p->count(": interp"), 0);
    }
}

// MatMulInteger / QLinearMatMul (constant B) on the int16 conv as a 1x1 conv over A's rows,
// forced: exact against the interpreter with full-range B, per-column zero points (and scales),
// an odd K, N not a multiple of 8, batch dims folded into rows, 1 and 2 threads.
Model int16_matmul_model(DType a_dt, DType b_dt, bool qlinear, int64_t K, int64_t N, const std::vector<int64_t>& as) {
  GraphBuilder b;
  b.input("a", a_dt, as);
  b.constant("b", full_range_weights(b_dt, {K, N}, 97));
  b.constant("az", scalar8(a_dt, a_dt == DType::U8 ? 77 : -100));
  b.constant("bz", b_dt == DType::U8 ? ints(b_dt, {N}, 98, 0, 255) : ints(b_dt, {N}, 98, -128, 127));
  if (qlinear) {
    std::vector<float> bs;
    for (int64_t n = 0; n < N; ++n) bs.push_back(0.001f + 0.0001f * static_cast<float>(n));
    b.constant("as", Tensor::scalar<float>(DType::F32, 0.02f));
    b.constant("bs", Tensor::from_vector(DType::F32, {N}, bs));
    b.constant("ys", Tensor::scalar<float>(DType::F32, 0.6f));
    b.constant("yz", scalar8(a_dt, 5));
    b.node("QLinearMatMul", {"a", "as", "az", "b", "bs", "bz", "ys", "yz"}, {"y"});
  } else {
    b.node("MatMulInteger", {"a", "b", "az", "bz"}, {"y"});
  }
  b.output("y");
  return b.finish();
}

TEST(CpuInt8, Int16MatMulIsExact) {
  if (!int8_avx2::available()) GTEST_SKIP() << "no AVX2 here (or HODU_MAX_ISA below it): the int16 conv cannot run";
  ScopedEnv env("HODU_CPU_INT8_WEIGHTS", "int16");
  const int64_t K = 75, N = 21;
  const std::vector<int64_t> as = {3, 7, K};
  for (DType a_dt : {DType::U8, DType::I8})
    for (DType b_dt : {DType::U8, DType::I8})
      for (bool qlinear : {false, true})
        for (int threads : {1, 2}) {
          SCOPED_TRACE(::testing::Message() << "a " << dtype_name(a_dt) << " b " << dtype_name(b_dt) << " qlinear "
                                            << qlinear << " threads " << threads);
          Tensor a = a_dt == DType::U8 ? ints(a_dt, as, 99, 0, 255) : ints(a_dt, as, 99, -128, 127);
          auto p = expect_matches_interpreter(int16_matmul_model(a_dt, b_dt, qlinear, K, N, as), {{"a", a}}, 0, 0,
                                              threads);
          EXPECT_EQ(p->count("hodu int8 matmul on int16 products"), 1);
          EXPECT_EQ(p->count(": interp"), 0);
        }
}

// An unknown HODU_CPU_INT8_WEIGHTS is an error naming the value and the accepted ones.
TEST(CpuInt8, UnknownWeightsFormIsAnError) {
  ScopedEnv env("HODU_CPU_INT8_WEIGHTS", "int17");
  const Int16Case& c = int16_cases()[0];
  try {
    PlannedModel p(int16_case_model(c, 94), {{"x", ints(c.x, c.xs, 94, 0, 255)}});
    ADD_FAILURE() << "HODU_CPU_INT8_WEIGHTS=int17 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("HODU_CPU_INT8_WEIGHTS=int17"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("int16"), std::string::npos) << e.what();
  }
}

// Unforced, on AVX2 without VNNI (ctest cpu_engine_test_avx2 caps oneDNN and hodu so on any
// CPU): full-range weights, which oneDNN would run split in two, go to the int16 conv (a
// matmul of 4 rows or more too); 7-bit weights (pair-safe) and depthwise convs stay on oneDNN's
// int8 kernels.
TEST(CpuInt8, Int16ConvIsChosenWhereOneDnnWouldSplitTheWeights) {
  if (int8_exact_isa() || vector_math::cpu_isa() != vector_math::Isa::Avx2)
    GTEST_SKIP() << "needs AVX2 without VNNI (ctest cpu_engine_test_avx2 runs it so)";
  const Int16Case& c = int16_cases()[0];
  Tensor x = ints(c.x, c.xs, 90, 0, 255);
  {
    auto p = expect_matches_interpreter(int16_case_model(c, 91), {{"x", x}}, 0, 0);
    EXPECT_EQ(p->count("hodu int8 conv on int16 products"), 1);
  }
  // A matmul of 4 rows and more too; below 4 (a tile computes 6) oneDNN's split product.
  for (int64_t rows : {1, 4}) {
    SCOPED_TRACE(::testing::Message() << "matmul rows " << rows);
    Tensor a = ints(DType::U8, {rows, 64}, 93, 0, 255);
    auto p = expect_matches_interpreter(int16_matmul_model(DType::U8, DType::I8, false, 64, 24, {rows, 64}),
                                        {{"a", a}}, 0, 0);
    EXPECT_EQ(p->count("hodu int8 matmul on int16 products"), rows >= 4 ? 1 : 0);
    EXPECT_EQ(p->count("(MatMulInteger): onednn int8"), rows >= 4 ? 0 : 1);
  }
  for (bool depthwise : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "depthwise " << depthwise);
    const int64_t C = c.xs[1];
    GraphBuilder b;
    b.input("x", c.x, c.xs);
    // Depthwise: full range (oneDNN's depthwise kernels are exact); else 7-bit.
    b.constant("w", depthwise ? full_range_weights(DType::I8, {C, 1, 3, 3}, 92) : ints(DType::I8, {8, C, 3, 3}, 92, -64, 64));
    b.constant("xz", scalar8(c.x, 201));
    b.constant("wz", scalar8(DType::I8, 0));
    b.node("ConvInteger", {"x", "w", "xz", "wz"}, {"y"},
           {Attribute::make_ints("pads", {1, 1, 1, 1}), Attribute::make_int("group", depthwise ? C : 1)});
    b.output("y");
    auto p = expect_matches_interpreter(b.finish(), {{"x", x}}, 0, 0);
    EXPECT_EQ(p->count("hodu int8 conv on int16 products"), 0);
    EXPECT_EQ(p->count("(ConvInteger): onednn int8"), 1);
  }
}

// The window sums (ZeroPointSums) over every window geometry: strides, dilations, asymmetric
// padding, auto_pad, 1-D, 2-D and 3-D, groups.
TEST(CpuInt8, ConvWindowGeometriesAreExact) {
  struct Geometry {
    std::vector<int64_t> x, w;  // x [N, C, spatial...], w [M, C/group, k...]
    std::vector<Attribute> attrs;
  };
  const std::vector<Geometry> cases = {
      {{2, 16, 9, 11}, {24, 16, 3, 2}, {Attribute::make_ints("pads", {2, 0, 1, 3}), Attribute::make_ints("strides", {2, 1})}},
      {{1, 16, 12, 12}, {16, 16, 3, 3}, {Attribute::make_ints("dilations", {2, 3}), Attribute::make_ints("pads", {2, 3, 2, 3})}},
      {{1, 32, 10, 10}, {32, 8, 3, 3}, {Attribute::make_int("group", 4), Attribute::make_string("auto_pad", "SAME_LOWER"),
                                        Attribute::make_ints("strides", {2, 2})}},
      {{1, 16, 20}, {8, 16, 5}, {Attribute::make_ints("pads", {4, 1}), Attribute::make_ints("strides", {3})}},
      {{1, 8, 5, 6, 7}, {16, 8, 3, 1, 2}, {Attribute::make_ints("pads", {1, 0, 1, 1, 0, 0})}},
  };
  for (const char* form : {"", "sums", "int16"}) {
    ScopedEnv env("HODU_CPU_INT8_WEIGHTS", *form ? form : nullptr);
    for (size_t i = 0; i < cases.size(); ++i) {
      SCOPED_TRACE(::testing::Message() << "form '" << form << "' case " << i);
      const auto& c = cases[i];
      GraphBuilder b;
      b.input("x", DType::U8, c.x);
      b.constant("w", ints(DType::U8, c.w, 40 + static_cast<uint32_t>(i), 0, 255));
      b.constant("xz", scalar8(DType::U8, 97));
      b.constant("wz", scalar8(DType::U8, 140));
      b.node("ConvInteger", {"x", "w", "xz", "wz"}, {"y"}, c.attrs);
      b.output("y");
      Model m = b.finish();
      auto p = expect_matches_interpreter(m, {{"x", ints(DType::U8, c.x, 50, 0, 255)}}, 0, 0);
      EXPECT_EQ(int8_steps(*p, "ConvInteger", c.x.size() <= 4 ? form : ""), 1);  // 3-D: oneDNN's
    }
  }
}

// MatMulInteger exactly; QLinearMatMul exactly with HODU_CPU_INT8_EXACT, else (unsplit weights:
// oneDNN requantizes in f32) within one quantum.
TEST(CpuInt8, MatMulIntegerAndQLinearMatMulAreExactInEveryWeightsForm) {
  for (const char* form : kForms)
  for (bool exact : {true, false}) {
    ScopedEnv env("HODU_CPU_INT8_WEIGHTS", *form ? form : nullptr);
    ScopedEnv exact_env("HODU_CPU_INT8_EXACT", exact ? "1" : nullptr);
    for (DType a_dt : {DType::U8, DType::I8})
      for (DType b_dt : {DType::U8, DType::I8})
        for (bool qlinear : {false, true}) {
          SCOPED_TRACE(::testing::Message() << "form '" << form << "' exact " << exact << " a " << dtype_name(a_dt)
                                            << " b " << dtype_name(b_dt) << " qlinear " << qlinear);
          const int64_t K = 96, N = 40;
          GraphBuilder b;
          b.input("a", a_dt, std::vector<int64_t>{2, 5, K});
          b.constant("b", b_dt == DType::U8 ? ints(b_dt, {K, N}, 7, 0, 255) : ints(b_dt, {K, N}, 7, -128, 127));
          b.constant("az", scalar8(a_dt, a_dt == DType::U8 ? 250 : -120));
          b.constant("bz", scalar8(b_dt, b_dt == DType::U8 ? 30 : 100));
          if (qlinear) {
            b.constant("as", Tensor::scalar<float>(DType::F32, 0.03f));
            b.constant("bs", Tensor::scalar<float>(DType::F32, 0.002f));
            b.constant("ys", Tensor::scalar<float>(DType::F32, 0.4f));
            b.constant("yz", scalar8(a_dt, 3));
            b.node("QLinearMatMul", {"a", "as", "az", "b", "bs", "bz", "ys", "yz"}, {"y"});
          } else {
            b.node("MatMulInteger", {"a", "b", "az", "bz"}, {"y"});
          }
          b.output("y");
          Model m = b.finish();
          Tensor a = a_dt == DType::U8 ? ints(a_dt, {2, 5, K}, 8, 0, 255) : ints(a_dt, {2, 5, K}, 8, -128, 127);
          auto p = expect_matches_interpreter(m, {{"a", a}}, 0, exact || !qlinear ? 0 : 1);
          EXPECT_EQ(int8_steps(*p, qlinear ? "QLinearMatMul" : "MatMulInteger", form), 1);
        }
  }
}

// QLinearConv requantized as the interpreter does it (in double) where the engine's epilogue does
// it (split or shifted weights, HODU_CPU_INT8_EXACT): equal; by oneDNN (unsplit weights) within
// one quantum.
TEST(CpuInt8, QLinearConvRequantizesExactly) {
  for (const char* form : kForms)
  for (bool exact : {true, false}) {
    ScopedEnv env("HODU_CPU_INT8_WEIGHTS", *form ? form : nullptr);
    ScopedEnv exact_env("HODU_CPU_INT8_EXACT", exact ? "1" : nullptr);
    for (DType x_dt : {DType::U8, DType::I8}) {
      SCOPED_TRACE(::testing::Message() << "form '" << form << "' exact " << exact << " x " << dtype_name(x_dt));
      const int64_t C = 16, M = 32, H = 9;
      GraphBuilder b;
      b.input("x", x_dt, std::vector<int64_t>{1, C, H, H});
      b.constant("w", ints(DType::I8, {M, C, 3, 3}, 11, -128, 127));
      b.constant("xs", Tensor::scalar<float>(DType::F32, 0.021f));
      b.constant("xz", scalar8(x_dt, x_dt == DType::U8 ? 128 : 0));
      std::vector<float> ws;
      for (int64_t m = 0; m < M; ++m) ws.push_back(0.0031f + 0.0001f * static_cast<float>(m));
      b.constant("ws", Tensor::from_vector(DType::F32, {M}, ws));
      b.constant("wz", Tensor::from_vector(DType::I8, {M}, std::vector<int8_t>(static_cast<size_t>(M), 0)));
      b.constant("ys", Tensor::scalar<float>(DType::F32, 0.17f));
      b.constant("yz", scalar8(x_dt, x_dt == DType::U8 ? 120 : -3));
      std::vector<int32_t> bias;
      for (int64_t m = 0; m < M; ++m) bias.push_back(static_cast<int32_t>(m * 1000 - 16000));
      b.constant("bias", Tensor::from_vector(DType::I32, {M}, bias));
      b.node("QLinearConv", {"x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "bias"}, {"y"},
             {Attribute::make_ints("pads", {1, 1, 1, 1}), Attribute::make_ints("strides", {2, 2})});
      b.output("y");
      Model m = b.finish();
      Tensor x = x_dt == DType::U8 ? ints(x_dt, {1, C, H, H}, 12, 0, 255) : ints(x_dt, {1, C, H, H}, 12, -128, 127);
      auto p = expect_matches_interpreter(m, {{"x", x}}, 0, exact || *form ? 0 : 1);
      EXPECT_EQ(int8_steps(*p, "QLinearConv", form), 1);
    }
  }
}

// ORT's quantize_dynamic writes every conv as DynamicQuantizeLinear → ConvInteger → Cast →
// Mul(x_scale · w_scale) → Add(bias) (→ Relu): one step, float results equal to the interpreter's.
// scale_after: the x_scale · w_scale Mul placed after the product, as ORT's quantizer orders it.
Model dynamic_conv_model(bool per_channel, bool relu, int64_t C, int64_t M, int64_t H, bool scale_after = false) {
  GraphBuilder b;
  b.input("x", DType::F32, std::vector<int64_t>{1, C, H, H});
  b.constant("w", ints(DType::U8, {M, C, 3, 3}, 21, 0, 255));
  b.constant("wz", Tensor::scalar<uint8_t>(DType::U8, 131));
  if (per_channel) {
    std::vector<float> ws;
    for (int64_t m = 0; m < M; ++m) ws.push_back(0.002f + 0.0003f * static_cast<float>(m % 7));
    b.constant("ws", Tensor::from_vector(DType::F32, {M, 1, 1}, ws));
  } else {
    b.constant("ws", Tensor::scalar<float>(DType::F32, 0.0023f));
  }
  b.constant("bias", random_floats({1, M, 1, 1}, 22));
  b.node("DynamicQuantizeLinear", {"x"}, {"xq", "xs", "xzp"});
  if (!scale_after) b.node("Mul", {"xs", "ws"}, {"scale"});
  b.node("ConvInteger", {"xq", "w", "xzp", "wz"}, {"acc"}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
  if (scale_after) b.node("Mul", {"xs", "ws"}, {"scale"});
  b.node("Cast", {"acc"}, {"accf"}, {Attribute::make_int("to", 1)});
  b.node("Mul", {"accf", "scale"}, {"scaled"});
  b.node("Add", {"scaled", "bias"}, {relu ? "pre" : "y"});
  if (relu) b.node("Relu", {"pre"}, {"y"});
  b.output("y");
  return b.finish();
}

TEST(CpuInt8, DynamicQuantizedConvChainIsOneExactStep) {
  for (const char* form : kForms) {
    ScopedEnv env("HODU_CPU_INT8_WEIGHTS", *form ? form : nullptr);
    for (bool per_channel : {false, true})
      for (bool relu : {false, true})
        for (bool scale_after : {false, true}) {
          SCOPED_TRACE(::testing::Message() << "form '" << form << "' per_channel " << per_channel << " relu " << relu
                                            << " scale_after " << scale_after);
          Model m = dynamic_conv_model(per_channel, relu, 24, 40, 11, scale_after);
          auto p = expect_matches_interpreter(m, {{"x", random_floats({1, 24, 11, 11}, 23)}}, 0, 0);
          EXPECT_EQ(p->count("+ float epilogue"), 1);
          EXPECT_EQ(int8_steps(*p, "ConvInteger", form), 1);
          EXPECT_EQ(p->count("(Cast)"), 0);  // done by the product's step
          EXPECT_EQ(p->count("(DynamicQuantizeLinear): cpu"), 1);
          EXPECT_EQ(p->count(": interp"), 0);  // the scalar scale product has a cpu kernel too
          // After the product, the scale's Mul is the epilogue's too (before it, its own step).
          EXPECT_EQ(p->count("(Mul)"), scale_after ? 0 : 1);
        }
  }
}

// The same for a transformer's linear layer: DynamicQuantizeLinear → MatMulInteger → Cast → Mul → Add,
// with the x_scale · w_scale Mul before the product or after it (ORT's quantizer's order).
Model dynamic_matmul_model(int64_t K, int64_t N, bool scale_after, bool scale_is_output = false) {
  GraphBuilder b;
  b.input("x", DType::F32, std::vector<int64_t>{2, 7, K});
  b.constant("w", ints(DType::I8, {K, N}, 31, -128, 127));
  b.constant("wz", Tensor::scalar<int8_t>(DType::I8, 0));
  std::vector<float> ws;
  for (int64_t n = 0; n < N; ++n) ws.push_back(0.001f * static_cast<float>(1 + n % 5));
  b.constant("ws", Tensor::from_vector(DType::F32, {N}, ws));
  b.constant("bias", random_floats({N}, 32));
  b.node("DynamicQuantizeLinear", {"x"}, {"xq", "xs", "xzp"});
  if (!scale_after) b.node("Mul", {"xs", "ws"}, {"scale"});
  b.node("MatMulInteger", {"xq", "w", "xzp", "wz"}, {"acc"});
  b.node("Cast", {"acc"}, {"accf"}, {Attribute::make_int("to", 1)});
  if (scale_after) b.node("Mul", {"xs", "ws"}, {"scale"});
  b.node("Mul", {"scale", "accf"}, {"scaled"});
  b.node("Add", {"bias", "scaled"}, {"y"});
  b.output("y");
  if (scale_is_output) b.output("scale");
  return b.finish();
}

TEST(CpuInt8, DynamicQuantizedMatMulChainIsOneExactStep) {
  const int64_t K = 64, N = 48;
  for (const char* form : kForms) {
    ScopedEnv env("HODU_CPU_INT8_WEIGHTS", *form ? form : nullptr);
    for (bool scale_after : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "form '" << form << "' scale_after " << scale_after);
      auto p = expect_matches_interpreter(dynamic_matmul_model(K, N, scale_after),
                                          {{"x", random_floats({2, 7, K}, 33)}}, 0, 0);
      EXPECT_EQ(int8_steps(*p, "MatMulInteger", form), 1);
      EXPECT_EQ(p->count("+ float epilogue"), 1);
      EXPECT_EQ(p->count("(Cast)"), 0);
      EXPECT_EQ(p->count("(Mul)"), scale_after ? 0 : 1);
      EXPECT_EQ(p->count("(Add)"), 0);
    }
  }
}

// The scale's Mul after the product but read by another node too: it keeps its own step, and
// the chain stays unfused (the float results are the interpreter's either way).
TEST(CpuInt8, ScaleProductReadElsewhereIsNotClaimed) {
  Model m = dynamic_matmul_model(32, 16, true, true);
  auto p = expect_matches_interpreter(m, {{"x", random_floats({2, 7, 32}, 34)}}, 0, 0);
  EXPECT_EQ(p->count("+ float epilogue"), 0);
  EXPECT_EQ(p->count("(Mul)"), 2);
}

// DynamicQuantizeLinear alone: scale, zero point and values equal to the interpreter's, for
// all-positive, all-negative, constant and mixed inputs past the threading chunk.
TEST(CpuInt8, DynamicQuantizeLinearMatchesInterpreter) {
  for (int kind = 0; kind < 4; ++kind) {
    SCOPED_TRACE(kind);
    const int64_t n = 100003;
    std::vector<float> v(static_cast<size_t>(n));
    std::mt19937 rng(kind);
    std::uniform_real_distribution<float> d(-3.0f, 5.0f);
    for (auto& x : v) x = kind == 0 ? d(rng) : kind == 1 ? std::fabs(d(rng)) : kind == 2 ? -std::fabs(d(rng)) : 0.75f;
    GraphBuilder b;
    b.input("x", DType::F32, std::vector<int64_t>{n});
    b.node("DynamicQuantizeLinear", {"x"}, {"y", "s", "z"});
    b.output("y");
    b.output("s");
    b.output("z");
    Model m = b.finish();
    auto p = expect_matches_interpreter(m, {{"x", Tensor::from_vector(DType::F32, {n}, v)}}, 0, 0, 2);
    EXPECT_EQ(p->count(": interp"), 0);
  }
}

// A QDQ graph as ORT's static quantizer writes it: x quantized once, then per branch
// DQ → Conv / MatMul / Gemm (weights s8 per channel, int32 biases) [→ Relu | Clip] → Q → DQ.
// The engine runs every branch as one int8 product with the clamp in its requantization, within
// one quantum of the interpreter on the QDQ graph itself.
Model qdq_model() {
  GraphBuilder b;
  const int64_t C = 8, M = 12, H = 10;
  b.input("x", DType::F32, std::vector<int64_t>{1, C, H, H});
  auto f = [](float v) { return Tensor::scalar<float>(DType::F32, v); };
  b.constant("xs", f(0.03f));
  b.constant("xz", Tensor::scalar<uint8_t>(DType::U8, 128));
  b.node("QuantizeLinear", {"x", "xs", "xz"}, {"xq"});
  b.node("DequantizeLinear", {"xq", "xs", "xz"}, {"xd"});
  std::vector<float> ws;
  for (int64_t m = 0; m < M; ++m) ws.push_back(0.004f + 0.0004f * static_cast<float>(m));
  b.constant("w", ints(DType::I8, {M, C, 3, 3}, 61, -127, 127));
  b.constant("ws", Tensor::from_vector(DType::F32, {M}, ws));
  b.constant("wz", Tensor::from_vector(DType::I8, {M}, std::vector<int8_t>(static_cast<size_t>(M), 0)));
  b.node("DequantizeLinear", {"w", "ws", "wz"}, {"wd"}, {Attribute::make_int("axis", 0)});
  std::vector<float> bs;
  std::vector<int32_t> bq;
  for (int64_t m = 0; m < M; ++m) {
    bs.push_back(0.03f * ws[m]);
    bq.push_back(static_cast<int32_t>(m * 40 - 200));
  }
  b.constant("b", Tensor::from_vector(DType::I32, {M}, bq));
  b.constant("bs", Tensor::from_vector(DType::F32, {M}, bs));
  b.constant("bz", Tensor::from_vector(DType::I32, {M}, std::vector<int32_t>(static_cast<size_t>(M), 0)));
  b.node("DequantizeLinear", {"b", "bs", "bz"}, {"bd"}, {Attribute::make_int("axis", 0)});
  const char* acts[] = {"", "Relu", "Clip"};
  for (int i = 0; i < 3; ++i) {
    std::string k = std::to_string(i);
    b.node("Conv", {"xd", "wd", "bd"}, {"c" + k}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
    std::string pre = "c" + k;
    if (*acts[i]) {
      if (std::string(acts[i]) == "Clip") {
        b.constant("lo", f(0.0f));
        b.constant("hi", f(0.9f));
        b.node("Clip", {pre, "lo", "hi"}, {"a" + k});
      } else {
        b.node("Relu", {pre}, {"a" + k});
      }
      pre = "a" + k;
    }
    b.constant("ys" + k, f(0.011f));
    b.constant("yz" + k, Tensor::scalar<uint8_t>(DType::U8, static_cast<uint8_t>(100 + 10 * i)));
    b.node("QuantizeLinear", {pre, "ys" + k, "yz" + k}, {"q" + k});
    b.node("DequantizeLinear", {"q" + k, "ys" + k, "yz" + k}, {"y" + k});
    b.output("y" + k);
  }
  // MatMul and Gemm branches on the flattened input.
  b.constant("shape", int64s({1, C * H * H}));
  b.node("Reshape", {"xd", "shape"}, {"flat"});
  b.constant("fm", ints(DType::I8, {C * H * H, 16}, 62, -127, 127));
  b.constant("fms", f(0.002f));
  b.constant("fmz", Tensor::scalar<int8_t>(DType::I8, 0));
  b.node("DequantizeLinear", {"fm", "fms", "fmz"}, {"fmd"});
  b.node("MatMul", {"flat", "fmd"}, {"mm"});
  b.constant("gw", ints(DType::I8, {10, C * H * H}, 63, -127, 127));
  b.node("DequantizeLinear", {"gw", "fms", "fmz"}, {"gwd"});
  b.constant("gb", random_floats({10}, 64, 0.5f));
  b.node("Gemm", {"flat", "gwd", "gb"}, {"gm"}, {Attribute::make_int("transB", 1)});
  for (const char* o : {"mm", "gm"}) {
    std::string s = o;
    b.constant(s + "_s", f(0.2f));
    b.constant(s + "_z", Tensor::scalar<uint8_t>(DType::U8, 120));
    b.node("QuantizeLinear", {s, s + "_s", s + "_z"}, {s + "_q"});
    b.node("DequantizeLinear", {s + "_q", s + "_s", s + "_z"}, {s + "_y"});
    b.output(s + "_y");
  }
  return b.finish();
}

TEST(CpuInt8, QdqGraphRunsOnInt8Products) {
  Model m = qdq_model();
  auto feeds = std::map<std::string, RuntimeValue>{{"x", random_floats({1, 8, 10, 10}, 65)}};
  auto want = interp::Interpreter(m).run(feeds);
  for (bool exact : {true, false}) {
    ScopedEnv exact_env("HODU_CPU_INT8_EXACT", exact ? "1" : nullptr);
    PlannedModel p(m, feeds);
    auto got = p.run(feeds);
    ASSERT_EQ(got.size(), want.size());
    // Within one quantum of each output's scale (0.011 for the convs, 0.2 for the products).
    for (size_t i = 0; i < got.size(); ++i)
      expect_close(got[i], want[i], 0, (i < 3 ? 0.011 : 0.2) * 1.001, "output " + std::to_string(i));
    EXPECT_EQ(int8_steps(p, "QLinearConv"), 4);  // three convs and the Gemm
    EXPECT_EQ(p.count("(QLinearMatMul): onednn int8"), 1);
    EXPECT_EQ(p.count("(Max)") + p.count("(Clip)") + p.count("(Conv)") + p.count("(MatMul)"), 0);
    EXPECT_EQ(p.count(": interp"), 0);
  }
}

}  // namespace
}  // namespace hodu::cpu

namespace hodu::cpu {
namespace {

// MaxPool of u8 and s8 (ONNX Runtime's QOperator models pool quantized activations): the
// engine's own loop, the interpreter's values, with padding, strides, dilations and ceil_mode.
// After an int8 conv (whose output the plan keeps channels-last) the pool runs channels-last,
// no reorder either side, on every int8 conv form: equal to the interpreter, with padding,
// strides, dilations, ceil_mode, 1 and 2 threads, and a second reader of the conv's output.
TEST(CpuInt8MaxPool, ChannelsLastAfterAnInt8ConvMatchesInterpreter) {
  for (const char* form : kForms)
    for (DType dt : {DType::U8, DType::I8})
      for (int threads : {1, 2}) {
        SCOPED_TRACE(::testing::Message() << "form '" << form << "' " << dtype_name(dt) << " threads " << threads);
        ScopedEnv env("HODU_CPU_INT8_WEIGHTS", *form ? form : nullptr);
        ScopedEnv exact("HODU_CPU_INT8_EXACT", "1");
        const int64_t C = 16, M = 40, H = 13;
        GraphBuilder b;
        b.input("x", dt, std::vector<int64_t>{2, C, H, H});
        b.constant("xs", Tensor::scalar<float>(DType::F32, 0.02f));
        b.constant("xz", scalar8(dt, dt == DType::U8 ? 100 : -20));
        b.constant("w", full_range_weights(DType::I8, {M, C, 3, 3}, 95));
        b.constant("ws", Tensor::scalar<float>(DType::F32, 0.003f));
        b.constant("wz", scalar8(DType::I8, 0));
        b.constant("ys", Tensor::scalar<float>(DType::F32, 0.5f));
        b.constant("yz", scalar8(dt, dt == DType::U8 ? 120 : 3));
        b.node("QLinearConv", {"x", "xs", "xz", "w", "ws", "wz", "ys", "yz"}, {"c"},
               {Attribute::make_ints("pads", {1, 1, 1, 1})});
        b.node("MaxPool", {"c"}, {"y"},
               {Attribute::make_ints("kernel_shape", {3, 3}), Attribute::make_ints("strides", {2, 2}),
                Attribute::make_ints("pads", {1, 1, 1, 1})});
        b.node("MaxPool", {"c"}, {"z"},
               {Attribute::make_ints("kernel_shape", {2, 3}), Attribute::make_ints("strides", {2, 1}),
                Attribute::make_ints("dilations", {2, 1}), Attribute::make_int("ceil_mode", 1)});
        b.output("y");
        b.output("z");
        Tensor x = dt == DType::U8 ? ints(dt, {2, C, H, H}, 96, 0, 255) : ints(dt, {2, C, H, H}, 96, -128, 127);
        auto p = expect_matches_interpreter(b.finish(), {{"x", x}}, 0, 0, threads);
        EXPECT_EQ(p->count("cpu int8 max pool (nhwc)"), 2);
        EXPECT_EQ(p->count("reorder 'c'"), 0);  // the conv's output read as it is written
      }
}

// ONNX Runtime's QLinearAdd as hodu's loader lowers it — DequantizeLinear of both inputs, Add,
// QuantizeLinear — as one step: after two int8 convs in their channels-last layout (no reorder
// of either conv's output), or over plain inputs; equal to the interpreter (the same f32
// operations), u8 and s8, 1 and 2 threads. A dequantized input read elsewhere too keeps the
// nodes' own steps.
Model quantized_add_model(DType dt, bool after_convs, bool extra_reader) {
  const int64_t C = 24, H = 9;
  GraphBuilder b;
  auto q8 = [&](int v) { return scalar8(dt, dt == DType::U8 ? v : v - 128); };
  b.input("x", dt, std::vector<int64_t>{2, C, H, H});
  b.constant("xs", Tensor::scalar<float>(DType::F32, 0.02f));
  b.constant("xz", q8(120));
  std::string a = "x", c = "x2";
  if (after_convs) {
    for (const char* o : {"ca", "cb"}) {
      b.constant(std::string("w_") + o, full_range_weights(DType::I8, {C, C, 3, 3}, o[1] == 'a' ? 110 : 111));
      b.constant(std::string("ws_") + o, Tensor::scalar<float>(DType::F32, o[1] == 'a' ? 0.003f : 0.004f));
      b.constant(std::string("wz_") + o, scalar8(DType::I8, 0));
      b.constant(std::string("ys_") + o, Tensor::scalar<float>(DType::F32, o[1] == 'a' ? 0.5f : 0.7f));
      b.constant(std::string("yz_") + o, q8(o[1] == 'a' ? 100 : 140));
      b.node("QLinearConv",
             {"x", "xs", "xz", std::string("w_") + o, std::string("ws_") + o, std::string("wz_") + o,
              std::string("ys_") + o, std::string("yz_") + o},
             {o}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
    }
    a = "ca";
    c = "cb";
  } else {
    b.input("x2", dt, std::vector<int64_t>{2, C, H, H});
  }
  b.constant("as", Tensor::scalar<float>(DType::F32, after_convs ? 0.5f : 0.02f));
  b.constant("az", q8(after_convs ? 100 : 120));
  b.constant("cs", Tensor::scalar<float>(DType::F32, after_convs ? 0.7f : 0.031f));
  b.constant("cz", q8(after_convs ? 140 : 77));
  b.constant("ys", Tensor::scalar<float>(DType::F32, after_convs ? 0.9f : 0.045f));
  b.constant("yz", q8(110));
  b.node("DequantizeLinear", {a, "as", "az"}, {"af"});
  b.node("DequantizeLinear", {c, "cs", "cz"}, {"cf"});
  b.node("Add", {"cf", "af"}, {"sum"});
  b.node("QuantizeLinear", {"sum", "ys", "yz"}, {"y"});
  b.output("y");
  if (extra_reader) b.output("af");
  return b.finish();
}

TEST(CpuInt8, QuantizedAddIsOneStep) {
  ScopedEnv exact("HODU_CPU_INT8_EXACT", "1");
  for (DType dt : {DType::U8, DType::I8})
    for (bool after_convs : {false, true})
      for (bool extra_reader : {false, true})
        for (int threads : {1, 2}) {
          SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " after_convs " << after_convs << " extra_reader "
                                            << extra_reader << " threads " << threads);
          std::map<std::string, RuntimeValue> feeds;
          for (const char* in : {"x", "x2"}) {
            Tensor t = dt == DType::U8 ? ints(dt, {2, 24, 9, 9}, in[1] ? 120 : 121, 0, 255)
                                       : ints(dt, {2, 24, 9, 9}, in[1] ? 120 : 121, -128, 127);
            if (after_convs && in[1]) continue;
            feeds[in] = t;
          }
          auto p = expect_matches_interpreter(quantized_add_model(dt, after_convs, extra_reader), feeds, 0, 0,
                                              threads);
          const int fused = p->count(after_convs ? ": cpu quantized add (nhwc)" : ": cpu quantized add");
          EXPECT_EQ(fused, extra_reader ? 0 : 1);
          EXPECT_EQ(p->count("(Add)") + p->count("(QuantizeLinear)"), extra_reader ? 2 : 0);
          if (after_convs && !extra_reader) {
            EXPECT_EQ(p->count("reorder 'ca'") + p->count("reorder 'cb'"), 0);
          }
        }
}

TEST(CpuInt8MaxPool, MatchesInterpreterWithoutFallback) {
  for (DType dt : {DType::U8, DType::I8}) {
    testing::GraphBuilder b;
    b.input("x", dt, std::vector<int64_t>{2, 3, 11, 9});
    b.node("MaxPool", {"x"}, {"y"},
           {Attribute::make_ints("kernel_shape", {3, 3}), Attribute::make_ints("strides", {2, 2}),
            Attribute::make_ints("pads", {1, 1, 1, 1})});
    b.node("MaxPool", {"x"}, {"z"},
           {Attribute::make_ints("kernel_shape", {2, 3}), Attribute::make_ints("strides", {2, 1}),
            Attribute::make_ints("dilations", {2, 1}), Attribute::make_int("ceil_mode", 1)});
    b.output("y");
    b.output("z");
    Model m = b.finish();
    std::vector<int64_t> v(2 * 3 * 11 * 9);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>((i * 37 + 11) % 256) - (dt == DType::I8 ? 128 : 0);
    Tensor x = Tensor::from_vector<int64_t>(DType::I64, {2, 3, 11, 9}, v).cast(dt);
    auto p = testing::expect_matches_interpreter(m, {{"x", RuntimeValue(x)}}, 0, 0);
    EXPECT_TRUE(p->interp_ops().empty()) << dtype_name(dt);
    EXPECT_EQ(p->count("cpu int8 max pool"), 2) << dtype_name(dt);
  }
}

}  // namespace
}  // namespace hodu::cpu

namespace hodu::cpu {
namespace {

// ORT's QOperator SqueezeNet as quantize_static writes it: every QLinearConv's output goes
// DequantizeLinear → Relu [→ MaxPool | → Concat with its sibling] → QuantizeLinear (its own
// scale, one Q per reader). The engine runs it on bytes: a byte table per conv output
// (fuse_quantized_lookups), the pool and the concat on the integers in the convs' channels-last
// layout, no float step and no reorder between the convs; the interpreter's bits (it runs the
// float graph), u8 and s8, 1 and 2 threads, every int8 conv form.
Model quantized_fire_model(DType dt) {
  const int64_t C = 8, S = 16, E = 24, H = 15;
  GraphBuilder b;
  auto q8 = [&](int v) { return scalar8(dt, dt == DType::U8 ? v : v - 128); };
  b.input("x", dt, std::vector<int64_t>{1, C, H, H});
  b.constant("xs", Tensor::scalar<float>(DType::F32, 0.035f));
  b.constant("xz", q8(130));
  int seed = 200;
  // QLinearConv(in) → DQ; returns the float output's name.
  auto conv = [&](const std::string& in, const std::string& in_s, const std::string& in_z, int64_t cin, int64_t cout,
                  int64_t k, const std::string& name, float ys, int yz) {
    b.constant(name + "_w", full_range_weights(DType::I8, {cout, cin, k, k}, static_cast<uint32_t>(seed++)));
    b.constant(name + "_ws", Tensor::scalar<float>(DType::F32, 0.004f));
    b.constant(name + "_wz", scalar8(DType::I8, 0));
    b.constant(name + "_ys", Tensor::scalar<float>(DType::F32, ys));
    b.constant(name + "_yz", q8(yz));
    const int64_t p = k / 2;
    b.node("QLinearConv", {in, in_s, in_z, name + "_w", name + "_ws", name + "_wz", name + "_ys", name + "_yz"},
           {name + "_q"}, {Attribute::make_ints("pads", {p, p, p, p})});
    b.node("DequantizeLinear", {name + "_q", name + "_ys", name + "_yz"}, {name + "_f"});
    b.node("Relu", {name + "_f"}, {name + "_r"});
    return name + "_r";
  };
  std::string c1 = conv("x", "xs", "xz", C, S, 3, "c1", 0.053f, 126);
  b.node("MaxPool", {c1}, {"pool"},
         {Attribute::make_ints("kernel_shape", {3, 3}), Attribute::make_ints("strides", {2, 2}),
          Attribute::make_int("ceil_mode", 1)});
  b.constant("ps", Tensor::scalar<float>(DType::F32, 0.027f));
  b.constant("pz", q8(0));
  b.node("QuantizeLinear", {"pool", "ps", "pz"}, {"pool_q"});
  std::string sq = conv("pool_q", "ps", "pz", S, S, 1, "squeeze", 0.093f, 131);
  b.constant("ss", Tensor::scalar<float>(DType::F32, 0.045f));
  b.constant("sz", q8(0));
  b.node("QuantizeLinear", {sq, "ss", "sz"}, {"sq_a"});
  b.node("QuantizeLinear", {sq, "ss", "sz"}, {"sq_b"});
  std::string e1 = conv("sq_a", "ss", "sz", S, E, 1, "e1", 0.108f, 123);
  std::string e3 = conv("sq_b", "ss", "sz", S, E, 3, "e3", 0.092f, 159);
  b.node("Concat", {e1, e3}, {"cat"}, {Attribute::make_int("axis", 1)});
  b.constant("cs", Tensor::scalar<float>(DType::F32, 0.056f));
  b.constant("cz", q8(0));
  b.node("QuantizeLinear", {"cat", "cs", "cz"}, {"y"});
  b.output("y");
  return b.finish();
}

TEST(CpuInt8, QuantizedFireModuleRunsOnBytes) {
  ScopedEnv exact("HODU_CPU_INT8_EXACT", "1");
  for (const char* form : kForms)
    for (DType dt : {DType::U8, DType::I8})
      for (int threads : {1, 2}) {
        SCOPED_TRACE(::testing::Message() << "form '" << form << "' " << dtype_name(dt) << " threads " << threads);
        ScopedEnv env("HODU_CPU_INT8_WEIGHTS", *form ? form : nullptr);
        Tensor x = dt == DType::U8 ? ints(dt, {1, 8, 15, 15}, 97, 0, 255) : ints(dt, {1, 8, 15, 15}, 97, -128, 127);
        auto p = expect_matches_interpreter(quantized_fire_model(dt), {{"x", x}}, 0, 0, threads);
        SCOPED_TRACE(p->steps());
        EXPECT_EQ(p->count(": cpu byte table (in its layout)"), 4);  // one per conv
        EXPECT_EQ(p->count("cpu int8 max pool (nhwc)"), 1);
        EXPECT_EQ(p->count("(Concat): cpu blocked concat"), 1);
        for (const char* op : {"(DequantizeLinear)", "(Relu)", "(QuantizeLinear)", ": interp"})
          EXPECT_EQ(p->count(op), 0) << op;
        for (const char* v : {"c1_q", "squeeze_q", "e1_q", "e3_q"})
          EXPECT_EQ(p->count(std::string("reorder '") + v), 0) << v;
      }
}

}  // namespace
}  // namespace hodu::cpu

namespace hodu::cpu {
namespace {

// The byte table's vector forms (AVX-512BW here, AVX2 in the cpu_engine_test_avx2 run) against
// the table itself: every byte value, lengths around the vector widths, unaligned starts, in place.
TEST(CpuInt8, ByteTableMatchesTheTableAtEveryLength) {
  std::mt19937 rng(7);
  std::vector<uint8_t> table(256);
  for (auto& t : table) t = static_cast<uint8_t>(rng());
  std::vector<uint8_t> x(300), y(300);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint8_t>(i * 131 + 7);  // every byte value
  for (int64_t offset : {0, 1, 5})
    for (int64_t n = 0; n + offset <= 290; n += n < 70 ? 1 : 31) {
      std::fill(y.begin(), y.end(), 0xAB);
      byte_table::look_up(x.data() + offset, y.data() + offset, n, table.data());
      for (int64_t i = 0; i < static_cast<int64_t>(y.size()); ++i) {
        const bool inside = i >= offset && i < offset + n;
        ASSERT_EQ(y[i], inside ? table[x[i]] : 0xAB) << "offset " << offset << " n " << n << " at " << i;
      }
    }
  std::vector<uint8_t> z = x;
  byte_table::look_up(z.data(), z.data(), static_cast<int64_t>(z.size()), table.data());
  for (size_t i = 0; i < z.size(); ++i) ASSERT_EQ(z[i], table[x[i]]) << "in place, at " << i;
}

}  // namespace
}  // namespace hodu::cpu

namespace hodu::cpu {
namespace {

// A byte table over a value whose length is known only while running (a Slice to a fed end):
// the plain, run-time-shaped step, equal to the interpreter at two lengths.
TEST(CpuInt8, ByteTableOfARunTimeShape) {
  std::vector<uint8_t> table(256);
  for (int i = 0; i < 256; ++i) table[static_cast<size_t>(i)] = static_cast<uint8_t>(255 - i / 2);
  GraphBuilder b;
  b.input("x", DType::U8, std::vector<int64_t>{300});
  b.input("end", DType::I64, std::vector<int64_t>{1});
  b.constant("start", Tensor::from_vector<int64_t>(DType::I64, {1}, {3}));
  b.constant("table", Tensor::from_vector(DType::U8, {256}, table));
  b.node("Slice", {"x", "start", "end"}, {"part"});
  b.node("LookupTable", {"part", "table"}, {"y"}).domain = "hodu";
  b.m.opset_imports["hodu"] = 1;
  b.output("y");
  Model m = b.finish();
  for (int64_t end : {40, 297}) {
    std::map<std::string, RuntimeValue> feeds = {
        {"x", ints(DType::U8, {300}, 98, 0, 255)},
        {"end", Tensor::from_vector<int64_t>(DType::I64, {1}, {end})}};
    auto p = expect_matches_interpreter(m, feeds, 0, 0, 2);
    EXPECT_EQ(p->count("(hodu.LookupTable): cpu byte table (shape at run time)"), 1) << p->steps();
  }
}

}  // namespace
}  // namespace hodu::cpu
