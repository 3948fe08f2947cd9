// f16 and bf16 models on the cpu engine: computed by its f32 kernels between casts at the
// model's inputs and outputs (passes::widen_half_precision), within half precision of the
// interpreter's per-op f16/bf16 arithmetic.
#include <gtest/gtest.h>

#include "engines/cpu/test_util.h"

namespace hodu::cpu {
namespace {

using namespace testing;  // NOLINT

TEST(CpuHalf, HalfModelsRunOnFloatKernels) {
  for (DType half : {DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(half));
    GraphBuilder b;
    b.input("x", half, std::vector<int64_t>{1, 8, 12, 12});
    b.constant("w", random_floats({16, 8, 3, 3}, 1, 0.2f).cast(half));
    b.constant("bias", random_floats({16}, 2, 0.1f).cast(half));
    b.constant("fc", random_floats({16, 5}, 3, 0.3f).cast(half));
    b.node("Conv", {"x", "w", "bias"}, {"c"}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
    b.node("Relu", {"c"}, {"r"});
    b.node("GlobalAveragePool", {"r"}, {"g"});
    b.node("Flatten", {"g"}, {"f"});
    b.node("MatMul", {"f", "fc"}, {"y"});
    b.output("y");
    Model m = b.finish();
    std::map<std::string, RuntimeValue> feeds = {{"x", random_floats({1, 8, 12, 12}, 4).cast(half)}};
    // Per-op rounding to f16 (bf16) in the interpreter against one rounding at the end here.
    auto p = expect_matches_interpreter(m, feeds, half == DType::F16 ? 4e-3 : 3e-2, 2e-3);
    // conv, matmul (and reorders) on oneDNN, the pool on hodu's mean over the conv's pixels
    EXPECT_EQ(p->count("onednn") + p->count(" mean"), 3 + p->count("reorder"));
    auto on_interp = p->interp_ops();
    on_interp.erase("Cast");  // the boundary casts
    EXPECT_TRUE(on_interp.empty()) << *on_interp.begin();
  }
}

}  // namespace
}  // namespace hodu::cpu
