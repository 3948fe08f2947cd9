// Data-movement kernels on packed sub-byte dtypes (int2/uint2/int4), which
// ONNX's conformance data only exercises through Cast and (De)QuantizeLinear.
#include <gtest/gtest.h>

#include "core/element_access.h"
#include "engines/interp/ops/kernel_test_util.h"

namespace hodu::interp {
namespace {

using testing::run_kernel1;

Tensor packed(DType dt, std::vector<int64_t> shape, const std::vector<int64_t>& values) {
  Tensor t = Tensor::empty(dt, std::move(shape));
  for (size_t i = 0; i < values.size(); ++i) store_from_int64(dt, t.raw_data(), static_cast<int64_t>(i), values[i]);
  return t;
}

TEST(SubByteMovement, TransposeConcatSliceKeepValues) {
  for (DType dt : {DType::I2, DType::U2, DType::I4}) {
    std::vector<int64_t> v = dt == DType::U2 ? std::vector<int64_t>{0, 1, 2, 3, 3, 2}
                                             : std::vector<int64_t>{-2, -1, 0, 1, 1, -2};
    Tensor x = packed(dt, {2, 3}, v);
    Tensor t = run_kernel1("Transpose", {x});
    ASSERT_EQ(t.dtype(), dt);
    EXPECT_EQ(t.shape(), (std::vector<int64_t>{3, 2}));
    EXPECT_EQ(t.to_int64s(), (std::vector<int64_t>{v[0], v[3], v[1], v[4], v[2], v[5]})) << dtype_name(dt);
    Tensor c = run_kernel1("Concat", {x, x}, {Attribute::make_int("axis", 0)});
    ASSERT_EQ(c.dtype(), dt);
    std::vector<int64_t> vv = v;
    vv.insert(vv.end(), v.begin(), v.end());
    EXPECT_EQ(c.to_int64s(), vv) << dtype_name(dt);
    Tensor r = run_kernel1("Reshape", {x, Tensor::from_vector(DType::I64, {1}, std::vector<int64_t>{6})});
    EXPECT_EQ(r.to_int64s(), v) << dtype_name(dt);
  }
}

}  // namespace
}  // namespace hodu::interp
