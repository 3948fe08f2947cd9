// Sequence ops on the cpu engine: the same values as the interpreter, no interpreter fallback,
// arena tensors put in a sequence keep their values after the arena's bytes are reused, and a
// bad position is a clear error naming the node.
#include <gtest/gtest.h>

#include "engines/cpu/test_util.h"

namespace hodu::cpu {
namespace {

using namespace testing;  // NOLINT

Model sequence_model() {
  GraphBuilder b;
  b.input("x", DType::F32, std::vector<int64_t>{4, 6});
  b.constant("sizes", int64s({1, 2, 3}));
  b.constant("first", int64s({0}, std::vector<int64_t>{}));
  b.constant("one", Tensor::scalar<int32_t>(DType::I32, 1));
  b.constant("last", int64s({-1}, std::vector<int64_t>{}));
  b.node("SplitToSequence", {"x", "sizes"}, {"parts"}, {Attribute::make_int("axis", 1)});
  b.node("SequenceAt", {"parts", "last"}, {"tail"});                // [4, 3]
  b.node("Relu", {"x"}, {"r"});                                     // an arena intermediate...
  b.node("SequenceInsert", {"parts", "r", "first"}, {"with_r"});    // ...kept by the sequence
  b.node("SequenceErase", {"with_r", "one"}, {"erased"});           // drops the [4, 1] part
  b.node("Mul", {"x", "x"}, {"m"});                                 // reuse the arena after r died
  b.node("Add", {"m", "x"}, {"m2"});
  b.node("Sigmoid", {"m2"}, {"m3"});
  b.node("ConcatFromSequence", {"erased"}, {"joined"}, {Attribute::make_int("axis", 1)});  // [4, 11]
  b.node("SequenceLength", {"erased"}, {"len"});
  b.node("SequenceConstruct", {"tail", "m3"}, {"pair"}, {});
  b.node("SequenceEmpty", {}, {"none"}, {Attribute::make_int("dtype", 1)});
  b.node("SequenceInsert", {"none", "tail"}, {"single"});
  b.node("ConcatFromSequence", {"single"}, {"stacked"},
         {Attribute::make_int("axis", -1), Attribute::make_int("new_axis", 1)});  // [4, 3, 1]
  b.node("SplitToSequence", {"m3"}, {"rows"}, {Attribute::make_int("axis", 0), Attribute::make_int("keepdims", 0)});
  b.output("joined");
  b.output("len");
  b.output("pair");
  b.output("stacked");
  b.output("rows");
  b.output("tail");
  return b.finish();
}

TEST(CpuSequenceOps, MatchInterpreterWithoutFallback) {
  Model m = sequence_model();
  std::map<std::string, RuntimeValue> feeds{{"x", RuntimeValue(random_floats({4, 6}, 7))}};
  auto p = expect_matches_interpreter(m, feeds, 1e-6, 1e-7);  // the sigmoid's vector loop; the rest is copies
  EXPECT_TRUE(p->interp_ops().empty()) << "ran on the interpreter: " << *p->interp_ops().begin();
  EXPECT_EQ(p->plan->fallback_count(), 0);
  EXPECT_GE(p->count(": cpu sequence"), 10);
  auto out = p->run(feeds);
  ASSERT_TRUE(out[0].is_tensor());
  EXPECT_EQ(out[0].tensor.shape(), (std::vector<int64_t>{4, 11}));
  EXPECT_EQ(out[1].tensor.get_int64(0), 3);
  ASSERT_TRUE(out[4].is_sequence());
  EXPECT_EQ(out[4].sequence.size(), 4u);
  EXPECT_EQ(out[4].sequence[0].shape(), (std::vector<int64_t>{6}));
  EXPECT_EQ(out[3].tensor.shape(), (std::vector<int64_t>{4, 3, 1}));
}

TEST(CpuSequenceOps, ElementsOfIntegerDtypes) {
  GraphBuilder b;
  b.input("x", DType::I64, std::vector<int64_t>{3, 5});
  b.constant("two", int64s({2}, std::vector<int64_t>{}));
  b.node("SplitToSequence", {"x", "two"}, {"parts"}, {Attribute::make_int("axis", 1)});  // 2, 2, 1 columns
  b.node("ConcatFromSequence", {"parts"}, {"back"}, {Attribute::make_int("axis", 1)});
  b.node("SequenceLength", {"parts"}, {"n"});
  b.output("back");
  b.output("n");
  Model m = b.finish();
  std::vector<int64_t> v(15);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>(i * 7 - 40);
  std::map<std::string, RuntimeValue> feeds{{"x", RuntimeValue(int64s(v, {3, 5}))}};
  auto p = expect_matches_interpreter(m, feeds, 0, 0);
  EXPECT_TRUE(p->interp_ops().empty());
  EXPECT_EQ(p->run(feeds)[0].tensor.to_int64s(), v);
}

TEST(CpuSequenceOps, PositionOutOfRangeIsAnErrorNamingTheNode) {
  GraphBuilder b;
  b.input("x", DType::F32, std::vector<int64_t>{2, 2});
  b.input("i", DType::I64, std::vector<int64_t>{});
  b.node("SplitToSequence", {"x"}, {"parts"}, {Attribute::make_int("axis", 0)});
  b.node("SequenceAt", {"parts", "i"}, {"y"});
  b.output("y");
  Model m = b.finish();
  std::map<std::string, RuntimeValue> feeds{{"x", RuntimeValue(random_floats({2, 2}, 1))},
                                            {"i", RuntimeValue(int64s({2}, std::vector<int64_t>{}))}};
  PlannedModel p(m, feeds);
  EXPECT_TRUE(p.interp_ops().empty());
  try {
    p.run(feeds);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("SequenceAt"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
  feeds["i"] = RuntimeValue(int64s({-2}, std::vector<int64_t>{}));
  auto x = feeds["x"].tensor.to_doubles();
  Tensor row = p.run(feeds)[0].tensor;  // position -2 of 2: the first row, keepdims
  EXPECT_EQ(row.shape(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(row.to_doubles(), std::vector<double>(x.begin(), x.begin() + 2));
}

}  // namespace
}  // namespace hodu::cpu
