#include "compilers/c/sym_int.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace hodu::compilers::c {
namespace {

struct SymIntTest : ::testing::Test {
  SymTable table;
  SymScope scope{table};
  SymInt b = SymInt::dim(table.input_dim("batch"));
  SymInt s = SymInt::dim(table.input_dim("seq"));
};

TEST_F(SymIntTest, ConstantsStayPlainIntegers) {
  SymInt x = SymInt(6) * 7 - 2;
  EXPECT_TRUE(x.known());
  EXPECT_EQ(x.value(), 40);
  EXPECT_EQ(x.c(), "40");
  EXPECT_EQ(SymInt(-5).c(), "-5");
  EXPECT_EQ(floordiv(-7, 2).value(), -4) << "floor, not C's truncation";
  EXPECT_EQ(floormod(-7, 2).value(), 1);
  EXPECT_EQ(ceildiv(7, 2).value(), 4);
  EXPECT_EQ(truncdiv(-7, 2).value(), -3);
  EXPECT_EQ(table.size(), 2) << "no run-time dim made for constants";
}

TEST_F(SymIntTest, PolynomialsAreCanonical) {
  // numel(x) / (b * 768) with numel(x) = b * s * 768 is s: the same value, not an expression.
  SymInt numel = b * s * 768;
  SymInt q = floordiv(numel, b * 768);
  EXPECT_TRUE(q.same(s));
  EXPECT_TRUE((s * b * 12 * 64) == numel);
  EXPECT_TRUE((b + s) - s == b);
  EXPECT_FALSE(b == s);
  EXPECT_EQ(b.c(), "S[0]");
  EXPECT_EQ((b * s * 4).c(), "(S[0] * S[1] * 4)");
  EXPECT_EQ((s - 1).c(), "(-1 + S[1])");
  EXPECT_EQ(table.size(), 2) << "exact divisions make no run-time dim";
}

TEST_F(SymIntTest, BoundsDecideMinMaxAndComparisons) {
  // Free dims are >= 1: min(b, 1) is 1, max(b, 0) is b, a huge end clamps to the dim.
  EXPECT_TRUE(sym_min(b, 1).is(1));
  EXPECT_TRUE(sym_max(b, 0) == b);
  EXPECT_TRUE(sym_min(SymInt(int64_t{1} << 62), s) == s);
  EXPECT_TRUE(sym_min(s + 1, s) == s);
  EXPECT_TRUE(sym_lt(s, s + 1).is(1));
  EXPECT_TRUE(sym_eq(b * 2, b + b).is(1));
  EXPECT_TRUE(sym_eq(b + 1, 0).is(0)) << "b + 1 >= 2";
  EXPECT_TRUE(provably_ge(b * s, b));
  EXPECT_FALSE(provably_ge(b, s));
  EXPECT_EQ(table.size(), 2);
}

TEST_F(SymIntTest, OtherOperationsAreRunTimeDimsComputedOnce) {
  SymInt h = floordiv(s - 1, 2) + 1;  // a strided conv's output
  EXPECT_FALSE(h.known());
  ASSERT_EQ(table.size(), 3);
  EXPECT_EQ(table.atom(2).expr, "(-1 + S[1]) / 2");
  EXPECT_EQ(table.atom(2).lower_bound, 0);
  SymInt again = floordiv(s - 1, 2) + 1;
  EXPECT_TRUE(again == h) << "interned: the same expression is the same dim";
  EXPECT_EQ(table.size(), 3);
  SymInt m = sym_min(b, s);
  EXPECT_EQ(table.atom(3).expr, "hm_min(S[0], S[1])");
  EXPECT_EQ(m.c(), "S[3]");
  ASSERT_EQ(table.statements().size(), 2u);
  EXPECT_EQ(table.statements()[0].atom, 2);
}

TEST_F(SymIntTest, BroadcastChecksAtRunTime) {
  EXPECT_TRUE(broadcast_dim(b, 1, "n").same(b));
  EXPECT_TRUE(broadcast_dim(1, s, "n").same(s));
  EXPECT_TRUE(broadcast_dim(s, s, "n").same(s));
  EXPECT_THROW(broadcast_dim(3, 4, "n"), Error);
  SymInt r = broadcast_dim(b, s, "node 'add'");
  EXPECT_FALSE(r.known());
  bool checked = false;
  for (const auto& st : table.statements())
    if (st.atom < 0) {
      checked = true;
      EXPECT_NE(st.message.find("node 'add': dims %lld and %lld do not broadcast"), std::string::npos);
      EXPECT_EQ(st.args.size(), 2u);
    }
  EXPECT_TRUE(checked);
  // A known-false requirement is a build error naming its sizes.
  try {
    sym_require(sym_eq(4, 5), "n: %lld vs %lld", {4, 5});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "n: 4 vs 5");
  }
}

TEST_F(SymIntTest, SliceIndicesClampOverRunTimeDims) {
  // [0 : INT64_MAX] keeps the dim; [-1 :] is the last element; [0 : 3] of s is min(3, s).
  EXPECT_TRUE(slice_length(slice_index(0, s, false, 1), slice_index(int64_t{1} << 62, s, true, 1), 1) == s);
  SymInt last = slice_index(-1, s, false, 1);
  EXPECT_TRUE(last == s - 1);
  EXPECT_TRUE(slice_length(last, slice_index(int64_t{1} << 62, s, true, 1), 1).is(1));
  EXPECT_FALSE(slice_length(0, slice_index(3, s, true, 1), 1).known());
}

TEST_F(SymIntTest, LateDimsAreExpressionsReadInPlace) {
  SymInt count = SymInt::dim(table.late_dim(0));
  EXPECT_TRUE(count.late());
  SymInt half = floordiv(count, 2);
  EXPECT_TRUE(half.late());
  EXPECT_EQ(half.c(), "(S[2] / 2)") << "read where used, not a slot of the shape function";
  EXPECT_TRUE(table.statements().empty());
  EXPECT_FALSE((b * 2).late());
}

}  // namespace
}  // namespace hodu::compilers::c
