#include "core/dtype.h"

#include <gtest/gtest.h>

#include "core/shape.h"

namespace hodu {
namespace {

TEST(DType, NamesParseBack) {
  for (int i = 1; i < kNumDTypes; ++i) {
    auto t = static_cast<DType>(i);
    EXPECT_EQ(parse_dtype(dtype_name(t)), t) << dtype_name(t);
    EXPECT_EQ(parse_dtype(dtype_onnx_name(t)), t) << dtype_onnx_name(t);
  }
}

TEST(DType, ParseAliasesAndCase) {
  EXPECT_EQ(parse_dtype("f32"), DType::F32);
  EXPECT_EQ(parse_dtype("float"), DType::F32);
  EXPECT_EQ(parse_dtype("FLOAT32"), DType::F32);
  EXPECT_EQ(parse_dtype("float16"), DType::F16);
  EXPECT_EQ(parse_dtype("half"), DType::F16);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::BF16);
  EXPECT_EQ(parse_dtype("Int64"), DType::I64);
  EXPECT_EQ(parse_dtype("bool"), DType::Bool);
  EXPECT_EQ(parse_dtype("float8e4m3fn"), DType::F8E4M3FN);
  EXPECT_FALSE(parse_dtype("f33").has_value());
  EXPECT_FALSE(parse_dtype("").has_value());
  EXPECT_FALSE(parse_dtype("undefined").has_value());
}

TEST(DType, OnnxCodesRoundTrip) {
  for (int i = 1; i < kNumDTypes; ++i) {
    auto t = static_cast<DType>(i);
    int code = dtype_to_onnx(t);
    EXPECT_GT(code, 0) << dtype_name(t);
    EXPECT_EQ(dtype_from_onnx(code), t) << dtype_name(t);
  }
  // Codes from onnx.proto's TensorProto.DataType.
  EXPECT_EQ(dtype_to_onnx(DType::F32), 1);
  EXPECT_EQ(dtype_to_onnx(DType::U8), 2);
  EXPECT_EQ(dtype_to_onnx(DType::I64), 7);
  EXPECT_EQ(dtype_to_onnx(DType::String), 8);
  EXPECT_EQ(dtype_to_onnx(DType::Bool), 9);
  EXPECT_EQ(dtype_to_onnx(DType::F16), 10);
  EXPECT_EQ(dtype_to_onnx(DType::BF16), 16);
  EXPECT_EQ(dtype_to_onnx(DType::F8E5M2FNUZ), 20);
  EXPECT_EQ(dtype_to_onnx(DType::F4E2M1), 23);
  EXPECT_EQ(dtype_to_onnx(DType::F8E8M0), 24);
  EXPECT_FALSE(dtype_from_onnx(0).has_value());
  EXPECT_FALSE(dtype_from_onnx(99).has_value());
}

TEST(DType, SizesAndKinds) {
  EXPECT_EQ(dtype_bits(DType::F32), 32);
  EXPECT_EQ(dtype_bits(DType::I4), 4);
  EXPECT_EQ(dtype_bits(DType::C128), 128);
  EXPECT_EQ(dtype_storage_bytes(DType::F16, 3), 6u);
  EXPECT_EQ(dtype_storage_bytes(DType::U4, 3), 2u);  // 4-bit types round up
  EXPECT_EQ(dtype_storage_bytes(DType::F4E2M1, 4), 2u);
  EXPECT_EQ(dtype_storage_bytes(DType::F32, 0), 0u);
  EXPECT_TRUE(dtype_is_float(DType::F8E5M2));
  EXPECT_TRUE(dtype_is_float(DType::BF16));
  EXPECT_FALSE(dtype_is_float(DType::I32));
  EXPECT_TRUE(dtype_is_integer(DType::U4));
  EXPECT_FALSE(dtype_is_integer(DType::Bool));
  EXPECT_TRUE(dtype_is_signed(DType::I8));
  EXPECT_FALSE(dtype_is_signed(DType::U64));
  EXPECT_TRUE(dtype_is_signed(DType::F16));
  EXPECT_TRUE(dtype_is_complex(DType::C64));
  EXPECT_TRUE(dtype_is_packed4(DType::I4));
  EXPECT_FALSE(dtype_is_packed4(DType::U8));
}

TEST(Shape, StaticAndSymbolic) {
  Shape s{Dim::sym("batch"), 3, 224, 224};
  EXPECT_EQ(s.to_string(), "[batch, 3, 224, 224]");
  EXPECT_TRUE(s.rank_known());
  EXPECT_EQ(s.rank(), 4);
  EXPECT_FALSE(s.is_static());
  EXPECT_FALSE(s.to_static().has_value());
  EXPECT_FALSE(s.numel().has_value());
  EXPECT_TRUE(s[0].is_symbolic());
  EXPECT_FALSE(s[0].is_known());

  Shape t{2, 3};
  EXPECT_TRUE(t.is_static());
  EXPECT_EQ(t.to_static(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t, Shape::from({2, 3}));
  EXPECT_NE(t, s);

  Shape u{Dim::unknown(), 4};
  EXPECT_EQ(u.to_string(), "[?, 4]");
  EXPECT_FALSE(u.is_static());

  EXPECT_EQ(Shape::unknown_rank().to_string(), "<unknown rank>");
  EXPECT_FALSE(Shape::unknown_rank().is_static());
  EXPECT_TRUE(Shape::scalar().is_static());
  EXPECT_EQ(Shape::scalar().to_string(), "[]");
  EXPECT_EQ(Shape::scalar().numel(), 1);
  EXPECT_NE(Shape::scalar(), Shape::unknown_rank());
}

TEST(Shape, Helpers) {
  EXPECT_EQ(shape_to_string({2, 3}), "[2, 3]");
  EXPECT_EQ(shape_to_string({}), "[]");
  EXPECT_EQ(shape_numel({}), 1);
  EXPECT_EQ(shape_numel({2, 0, 3}), 0);
  EXPECT_EQ(contiguous_strides({2, 3, 4}), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_EQ(contiguous_strides({}), (std::vector<int64_t>{}));
}

}  // namespace
}  // namespace hodu
