// Edge cases of the linalg / reduction / attention kernels that ONNX's conformance
// data lacks: thread-count determinism, error paths.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "engines/interp/kernel.h"
#include "engines/interp/ops/linalg_gemm.h"

namespace hodu::interp {
namespace {

Tensor random_tensor(std::vector<int64_t> shape, uint32_t seed) {
  Tensor t = Tensor::empty(DType::F32, std::move(shape));
  float* d = t.data<float>();
  uint32_t s = seed;
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    d[i] = static_cast<float>((s >> 8) % 2001) / 1000.0f - 1.0f;
  }
  return t;
}

std::vector<RuntimeValue> run_op(const std::string& op, std::vector<Tensor> inputs, int threads,
                                 std::vector<Attribute> attrs = {}, size_t n_out = 1) {
  Node node;
  node.op_type = op;
  node.name = "n";
  for (size_t i = 0; i < inputs.size(); ++i) node.inputs.push_back("in" + std::to_string(i));
  for (size_t i = 0; i < n_out; ++i) node.outputs.push_back("out" + std::to_string(i));
  node.attributes = std::move(attrs);
  std::vector<RuntimeValue> vals;
  for (auto& t : inputs) vals.emplace_back(t);
  KernelContext ctx{node, {}, {}, threads, 0, {}};
  for (auto& v : vals) ctx.inputs.push_back(&v);
  ctx.outputs.resize(n_out);
  KernelFn fn = OpTable::instance().find("", op);
  EXPECT_NE(fn, nullptr) << op;
  fn(ctx);
  return ctx.outputs;
}

TEST(LinalgKernels, SgemmMatchesNaiveAndIsThreadInvariant) {
  for (int64_t n : {1, 7, 33, 130}) {
    int64_t M = n, N = n + 3, K = 2 * n + 1;
    Tensor a = random_tensor({M, K}, 1), b = random_tensor({K, N}, 2);
    std::vector<float> c1(M * N), c4(M * N);
    sgemm(M, N, K, a.data<float>(), K, b.data<float>(), N, c1.data(), N, 1);
    sgemm(M, N, K, a.data<float>(), K, b.data<float>(), N, c4.data(), N, 4);
    EXPECT_EQ(c1, c4);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        float acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += a.data<float>()[i * K + k] * b.data<float>()[k * N + j];
        EXPECT_EQ(acc, c1[i * N + j]);  // same order of summation: bit-exact
      }
  }
}

TEST(LinalgKernels, BatchedMatMulThreadInvariant) {
  Tensor a = random_tensor({3, 1, 40, 70}, 3), b = random_tensor({4, 70, 50}, 4);
  auto r1 = run_op("MatMul", {a, b}, 1);
  auto r3 = run_op("MatMul", {a, b}, 3);
  ASSERT_EQ(r1[0].tensor.shape(), (std::vector<int64_t>{3, 4, 40, 50}));
  EXPECT_TRUE(tensors_bitwise_equal(r1[0].tensor, r3[0].tensor));
}

TEST(LinalgKernels, MatMulShapeMismatchIsAnError) {
  Tensor a = random_tensor({2, 3}, 5), b = random_tensor({4, 2}, 6);
  EXPECT_THROW(run_op("MatMul", {a, b}, 1), Error);
}

TEST(LinalgKernels, EinsumMatchesMatMul) {
  Tensor a = random_tensor({2, 5, 6}, 7), b = random_tensor({2, 6, 3}, 8);
  auto e = run_op("Einsum", {a, b}, 2, {Attribute::make_string("equation", "bij,bjk->bik")});
  auto m = run_op("MatMul", {a, b}, 1);
  ASSERT_EQ(e[0].tensor.shape(), m[0].tensor.shape());
  for (int64_t i = 0; i < e[0].tensor.numel(); ++i)
    EXPECT_NEAR(e[0].tensor.get_double(i), m[0].tensor.get_double(i), 1e-5);
  // Diagonal / trace with ellipsis.
  Tensor sq = random_tensor({3, 4, 4}, 9);
  auto tr = run_op("Einsum", {sq}, 1, {Attribute::make_string("equation", "...ii->...")});
  ASSERT_EQ(tr[0].tensor.shape(), (std::vector<int64_t>{3}));
  for (int64_t bi = 0; bi < 3; ++bi) {
    double s = 0;
    for (int64_t i = 0; i < 4; ++i) s += sq.get_double(bi * 16 + i * 5);
    EXPECT_NEAR(tr[0].tensor.get_double(bi), s, 1e-5);
  }
}

TEST(ReductionKernels, ThreadInvariantAndEmptySet) {
  Tensor x = random_tensor({17, 33, 9}, 10);
  Tensor axes = Tensor::from_vector<int64_t>(DType::I64, {2}, {0, 2});
  auto r1 = run_op("ReduceLogSumExp", {x, axes}, 1);
  auto r4 = run_op("ReduceLogSumExp", {x, axes}, 4);
  EXPECT_TRUE(tensors_bitwise_equal(r1[0].tensor, r4[0].tensor));
  Tensor e = Tensor::empty(DType::F32, {2, 0, 3});
  Tensor ax1 = Tensor::from_vector<int64_t>(DType::I64, {1}, {1});
  auto mn = run_op("ReduceMin", {e, ax1}, 1);
  ASSERT_EQ(mn[0].tensor.shape(), (std::vector<int64_t>{2, 1, 3}));
  EXPECT_TRUE(std::isinf(mn[0].tensor.get_double(0)) && mn[0].tensor.get_double(0) > 0);
  Tensor bad = Tensor::from_vector<int64_t>(DType::I64, {1}, {5});
  EXPECT_THROW(run_op("ReduceSum", {x, bad}, 1), Error);
}

TEST(ReductionKernels, TopKTiesKeepLowerIndex) {
  Tensor x = Tensor::from_vector<float>(DType::F32, {6}, {1, 3, 3, 2, 3, 0});
  Tensor k = Tensor::from_vector<int64_t>(DType::I64, {1}, {3});
  auto r = run_op("TopK", {x, k}, 1, {}, 2);
  EXPECT_EQ(r[1].tensor.to_int64s(), (std::vector<int64_t>{1, 2, 4}));
  Tensor k9 = Tensor::from_vector<int64_t>(DType::I64, {1}, {9});
  EXPECT_THROW(run_op("TopK", {x, k9}, 1, {}, 2), Error);
}

}  // namespace
}  // namespace hodu::interp
