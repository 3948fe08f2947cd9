// Edge cases of the nn / rnn / signal kernels that ONNX's conformance data
// lacks: GEMM correctness on odd sizes, thread-count determinism, error paths,
// and a rough speed check of the im2col + GEMM convolution.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include "core/error.h"
#include "engines/interp/kernel.h"
#include "engines/interp/ops/nn_gemm.h"

namespace hodu::interp {
namespace {

Tensor rand_f32(std::vector<int64_t> shape, uint32_t seed) {
  Tensor t = Tensor::empty(DType::F32, std::move(shape));
  float* d = t.data<float>();
  uint32_t s = seed;
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    d[i] = static_cast<float>((s >> 8) % 2001) / 1000.0f - 1.0f;
  }
  return t;
}

std::vector<RuntimeValue> run_nn(const std::string& op, std::vector<Tensor> inputs, int threads,
                                 std::vector<Attribute> attrs = {}, size_t n_out = 1) {
  Node node;
  node.op_type = op;
  node.name = "n";
  for (size_t i = 0; i < inputs.size(); ++i)
    node.inputs.push_back(inputs[i].defined() ? "in" + std::to_string(i) : "");
  for (size_t i = 0; i < n_out; ++i) node.outputs.push_back("out" + std::to_string(i));
  node.attributes = std::move(attrs);
  std::vector<RuntimeValue> vals;
  vals.reserve(inputs.size());
  for (auto& t : inputs) vals.emplace_back(t.defined() ? RuntimeValue(t) : RuntimeValue());
  KernelContext ctx{node, {}, {}, threads, 0, {}};
  for (auto& v : vals) ctx.inputs.push_back(v.is_none() ? nullptr : &v);
  ctx.outputs.resize(n_out);
  KernelFn fn = OpTable::instance().find("", op);
  EXPECT_NE(fn, nullptr) << op;
  fn(ctx);
  return ctx.outputs;
}

TEST(NnKernels, SgemmMatchesDoubleReference) {
  for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {7, 37, 300}, {100, 530, 17},
                          {13, 16, 600}}) {
    Tensor a = rand_f32({M, K}, 3), b = rand_f32({K, N}, 4), c0 = rand_f32({M, N}, 5);
    for (bool acc : {false, true}) {
      std::vector<float> c(c0.data<float>(), c0.data<float>() + M * N), c3 = c;
      nn_sgemm(M, N, K, a.data<float>(), K, b.data<float>(), N, c.data(), N, acc, 1);
      nn_sgemm(M, N, K, a.data<float>(), K, b.data<float>(), N, c3.data(), N, acc, 3);
      EXPECT_EQ(c, c3);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double r = acc ? c0.data<float>()[i * N + j] : 0.0;
          for (int64_t k = 0; k < K; ++k)
            r += static_cast<double>(a.data<float>()[i * K + k]) * b.data<float>()[k * N + j];
          EXPECT_NEAR(c[i * N + j], r, 1e-4 * (1 + std::fabs(r)));
        }
    }
  }
}

// Direct (naive) 2-D convolution for comparison.
std::vector<double> naive_conv(const Tensor& x, const Tensor& w, int64_t G, int64_t s, int64_t p, int64_t d,
                               int64_t OH, int64_t OW) {
  int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3), M = w.dim(0), KH = w.dim(2), KW = w.dim(3);
  int64_t Cg = C / G, Mg = M / G;
  std::vector<double> y(static_cast<size_t>(N * M * OH * OW), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = 0;
          int64_t g = m / Mg;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                int64_t ih = oh * s - p + kh * d, iw = ow * s - p + kw * d;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += static_cast<double>(x.data<float>()[((n * C + g * Cg + c) * H + ih) * W + iw]) *
                       w.data<float>()[((m * Cg + c) * KH + kh) * KW + kw];
              }
          y[((n * M + m) * OH + oh) * OW + ow] = acc;
        }
  return y;
}

TEST(NnKernels, ConvMatchesNaiveAndIsThreadInvariant) {
  Tensor x = rand_f32({2, 8, 13, 11}, 7), w = rand_f32({6, 4, 3, 3}, 8);
  std::vector<Attribute> attrs{Attribute::make_int("group", 2), Attribute::make_ints("strides", {2, 2}),
                               Attribute::make_ints("pads", {1, 1, 1, 1}), Attribute::make_ints("dilations", {2, 2})};
  auto y1 = run_nn("Conv", {x, w}, 1, attrs);
  auto y4 = run_nn("Conv", {x, w}, 4, attrs);
  ASSERT_TRUE(tensors_bitwise_equal(y1[0].tensor, y4[0].tensor));
  const Tensor& y = y1[0].tensor;
  ASSERT_EQ(y.shape(), (std::vector<int64_t>{2, 6, 6, 5}));
  auto ref = naive_conv(x, w, 2, 2, 1, 2, 6, 5);
  for (int64_t i = 0; i < y.numel(); ++i) EXPECT_NEAR(y.data<float>()[i], ref[i], 1e-4);
  // Many groups (depthwise) take the outer-parallel path.
  Tensor xd = rand_f32({1, 16, 9, 9}, 9), wd = rand_f32({16, 1, 3, 3}, 10);
  std::vector<Attribute> da{Attribute::make_int("group", 16), Attribute::make_ints("pads", {1, 1, 1, 1})};
  auto d1 = run_nn("Conv", {xd, wd}, 1, da), d3 = run_nn("Conv", {xd, wd}, 3, da);
  EXPECT_TRUE(tensors_bitwise_equal(d1[0].tensor, d3[0].tensor));
  auto dref = naive_conv(xd, wd, 16, 1, 1, 1, 9, 9);
  for (int64_t i = 0; i < d1[0].tensor.numel(); ++i) EXPECT_NEAR(d1[0].tensor.data<float>()[i], dref[i], 1e-4);
}

TEST(NnKernels, ConvTransposeIsThreadInvariant) {
  Tensor x = rand_f32({1, 4, 5, 6}, 11), w = rand_f32({4, 3, 3, 3}, 12);
  std::vector<Attribute> attrs{Attribute::make_int("group", 2), Attribute::make_ints("strides", {2, 3}),
                               Attribute::make_ints("output_padding", {1, 0})};
  auto a = run_nn("ConvTranspose", {x, w}, 1, attrs), b = run_nn("ConvTranspose", {x, w}, 4, attrs);
  EXPECT_TRUE(tensors_bitwise_equal(a[0].tensor, b[0].tensor));
  EXPECT_EQ(a[0].tensor.shape(), (std::vector<int64_t>{1, 6, 12, 18}));
}

TEST(NnKernels, BadShapesGiveClearErrors) {
  Tensor x = rand_f32({1, 3, 5, 5}, 1), w = rand_f32({4, 2, 3, 3}, 2);
  try {
    run_nn("Conv", {x, w}, 1);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  }
  Tensor wbig = rand_f32({4, 3, 7, 7}, 2);
  EXPECT_THROW(run_nn("Conv", {x, wbig}, 1), Error);
  Tensor one = rand_f32({1, 1}, 3);
  Tensor pads = Tensor::from_vector<int64_t>(DType::I64, {4}, {0, 1, 0, 1});
  EXPECT_THROW(run_nn("Pad", {one, pads}, 1, {Attribute::make_string("mode", "reflect")}), Error);
  Tensor idx = Tensor::from_vector<int64_t>(DType::I64, {1, 1, 1, 1}, {99});
  Tensor v = rand_f32({1, 1, 1, 1}, 4);
  EXPECT_THROW(run_nn("MaxUnpool", {v, idx}, 1, {Attribute::make_ints("kernel_shape", {2, 2})}), Error);
}

TEST(NnKernels, DftOfImpulseIsFlat) {
  // DFT of a real impulse is flat.
  Tensor s = Tensor::zeros(DType::F32, {1, 8, 1});
  s.data<float>()[0] = 1;
  auto y = run_nn("DFT", {s}, 2, {});
  ASSERT_EQ(y[0].tensor.shape(), (std::vector<int64_t>{1, 8, 2}));
  for (int k = 0; k < 8; ++k) {
    EXPECT_NEAR(y[0].tensor.data<float>()[2 * k], 1.0f, 1e-6);
    EXPECT_NEAR(y[0].tensor.data<float>()[2 * k + 1], 0.0f, 1e-6);
  }
}

TEST(NnKernels, ConvSpeedResNetLayer) {
  // One ResNet-50 stage-2 3×3 conv (1×64×56×56 → 64): ~0.23 GFLOP.
  Tensor x = rand_f32({1, 64, 56, 56}, 1), w = rand_f32({64, 64, 3, 3}, 2);
  std::vector<Attribute> attrs{Attribute::make_ints("pads", {1, 1, 1, 1})};
  run_nn("Conv", {x, w}, 1, attrs);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) run_nn("Conv", {x, w}, 1, attrs);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 3;
  double gflops = 2.0 * 64 * 64 * 9 * 56 * 56 / (ms * 1e6);
  std::printf("conv 64x56x56 3x3: %.2f ms, %.1f GFLOP/s (1 thread)\n", ms, gflops);
  EXPECT_GT(gflops, 1.0);
}

}  // namespace
}  // namespace hodu::interp
