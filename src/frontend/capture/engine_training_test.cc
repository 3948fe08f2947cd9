// Training steps (passes::build_training_step of captured forwards) on the cpu
// engine give the interpreter's results: the engine's training kernels
// (engines/cpu/dnnl_backward.cc, backward_rows.cc: convolution and pooling
// backward, batch and layer norm backward, activation and softmax gradients,
// the losses) against the reference kernels in double. Internal headers: no hodu/hodu.h here.
#include <gtest/gtest.h>

#include <cmath>

#include "hodu/capture.h"
#include "hodu/random.h"
#include "passes/autodiff.h"
#include "runtime/differential_check.h"
#include "runtime/session.h"

namespace {

namespace E = hodu::eager;
namespace nn = hodu::eager::nn;

// Two steps of `forward` (outputs[0] the loss) with SGD and momentum, on the cpu engine and on
// the interpreter, compared output by output. (Not Adam: it scales the rounding noise of
// gradients that are zero in exact arithmetic — attention's key bias — to full steps.)
void compare_engines(const std::string& what, const E::CapturedGraph& forward, const std::vector<std::string>& params,
                     const std::map<std::string, hodu::Tensor>& batch) {
  SCOPED_TRACE(what);
  hodu::Graph step = hodu::passes::build_training_step(forward.model()->graph, "output", params,
                                                       hodu::passes::OptimizerSpec::sgd(0.9f));
  hodu::Model model = *forward.model();
  model.graph = step;
  auto state = hodu::passes::initial_training_state(forward.model()->graph, step);
  std::map<std::string, std::unique_ptr<hodu::Session>> sessions;
  for (const char* engine : {"cpu", "interp"}) {
    hodu::SessionOptions o;
    o.engine = engine;
    o.threads = 2;
    sessions[engine] = hodu::Session::from_model(model, o);
  }
  std::map<std::string, hodu::Tensor> cpu_state = state, ref_state = state;
  for (int s = 0; s < 2; ++s) {
    std::map<std::string, std::vector<hodu::NamedValue>> results;
    for (auto& [engine, session] : sessions) {
      std::map<std::string, hodu::RuntimeValue> feeds;
      for (auto& [n, t] : batch) feeds[n] = t;
      feeds["lr"] = hodu::Tensor::scalar<float>(hodu::DType::F32, 0.01f);
      for (auto& [n, t] : engine == "cpu" ? cpu_state : ref_state) feeds[n] = t;
      results[engine] = session->run(feeds);
      auto& st = engine == "cpu" ? cpu_state : ref_state;
      for (auto& nv : results[engine])
        if (nv.name.size() > 5 && nv.name.compare(nv.name.size() - 5, 5, ".next") == 0)
          st[nv.name.substr(0, nv.name.size() - 5)] = nv.value.tensor;
    }
    const auto& a = results["cpu"];
    const auto& b = results["interp"];
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      auto d = hodu::compare_values(a[i].name, a[i].value, b[i].value, 1e-4, 0.0);
      EXPECT_TRUE(d.matches) << "step " << s << ": " << d.to_string();
    }
  }
}

E::Tensor randn(std::vector<int64_t> shape, uint64_t seed) {
  E::Generator g(seed);
  return E::randn(shape, &g);
}

hodu::Tensor core(const E::Tensor& t) { return t.impl() ? hodu::Tensor::from_bytes(t.dtype(), t.shape(), t.contiguous().data_ptr(), static_cast<size_t>(t.numel()) * (hodu::dtype_bits(t.dtype()) / 8)) : hodu::Tensor(); }

TEST(EngineTraining, ConvolutionNetwork) {
  E::manual_seed(1);
  // c1 without a bias: BatchNorm cancels it, leaving a gradient of rounding noise.
  nn::Conv2d c1(3, 8, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, false), c2(8, 8, {3, 3}, {2, 2}, {1, 1}, {1, 1}, 2);
  nn::BatchNorm2d bn(8);
  nn::Linear fc(8 * 3 * 3, 5);
  E::Tensor x = randn({4, 3, 8, 8}, 2), y = E::randint(0, 5, {4});
  auto fn = [&](const std::vector<E::Tensor>& in) {
    E::Tensor h = bn(c1(in[0])).relu();
    h = E::max_pool2d(h, {3, 3}, {2, 2}, {1, 1});
    h = E::avg_pool2d(E::leaky_relu(c2(h), 0.1), {2, 2}, {1, 1}, {1, 1}, false, false);
    h = E::elu(h).flatten(1);
    h = fc(E::gelu(h) * E::softplus(h));
    return std::vector<E::Tensor>{nn::cross_entropy(h, in[1])};
  };
  nn::NamedTensors params = {{"c1.weight", c1.weight}, {"c2.bias", c2.bias}, {"c2.weight", c2.weight},
                             {"bn.weight", bn.weight},  {"bn.bias", bn.bias},   {"fc.weight", fc.weight},
                             {"fc.bias", fc.bias},      {"bn.running_mean", bn.running_mean},
                             {"bn.running_var", bn.running_var}};
  E::CaptureOptions o;
  o.input_names = {"x", "y"};
  E::CapturedGraph g = E::capture(fn, params, {x, y}, o);
  compare_engines("cnn", g, {"c1.weight", "c2.bias", "c2.weight", "bn.weight", "bn.bias", "fc.weight", "fc.bias"},
                  {{"x", core(x)}, {"y", core(y)}});
}

TEST(EngineTraining, AttentionBlock) {
  E::manual_seed(3);
  nn::MultiheadAttention attn(8, 2, 0.0, true, true);
  nn::LayerNorm ln({8});
  nn::Linear ff(8, 8);
  E::Tensor x = randn({3, 5, 8}, 4), y = E::randint(0, 8, {3, 5});
  auto fn = [&](const std::vector<E::Tensor>& in) {
    E::Tensor h = ln(in[0] + attn.forward(in[0]));
    h = ff(E::silu(h) + h.tanh() * h.sigmoid());
    return std::vector<E::Tensor>{nn::cross_entropy(h.reshape({-1, 8}), in[1].reshape({-1}), "mean", 0.1)};
  };
  nn::NamedTensors params = {{"attn.in_proj_weight", attn.in_proj_weight}, {"attn.in_proj_bias", attn.in_proj_bias},
                             {"attn.out_proj.weight", attn.out_proj->weight}, {"attn.out_proj.bias", attn.out_proj->bias},
                             {"ln.weight", ln.weight}, {"ln.bias", ln.bias}, {"ff.weight", ff.weight}, {"ff.bias", ff.bias}};
  E::CaptureOptions o;
  o.input_names = {"x", "y"};
  E::CapturedGraph g = E::capture(fn, params, {x, y}, o);
  std::vector<std::string> names;
  for (auto& [n, t] : params) names.push_back(n);
  compare_engines("attention", g, names, {{"x", core(x)}, {"y", core(y)}});
}

}  // namespace

namespace {

// A captured graph written as ONNX, .hdss and HoduScript loads back and runs to the same values.
TEST(EngineTraining, SavedGraphsLoadAndRun) {
  E::manual_seed(5);
  nn::Conv2d conv(1, 4, {3, 3}, {1, 1}, {1, 1});
  nn::Linear fc(4 * 4 * 4, 3);
  conv.eval();
  auto fn = [&](const std::vector<E::Tensor>& in) {
    return std::vector<E::Tensor>{E::softmax(fc(E::max_pool2d(conv(in[0]).relu(), {2, 2}).flatten(1)), 1)};
  };
  E::Tensor x = randn({3, 1, 8, 8}, 6);
  E::CapturedGraph g = E::capture(fn, {{"conv.weight", conv.weight}, {"conv.bias", conv.bias}, {"fc.weight", fc.weight},
                                       {"fc.bias", fc.bias}},
                                  {x});
  const hodu::Tensor want = core(g.run({x})[0]);
  for (const char* ext : {".onnx", ".hdss", ".hodu"}) {
    const std::string path = testing::TempDir() + "/frontend_saved" + ext;
    g.save(path);
    hodu::SessionOptions o;
    o.engine = "cpu";
    auto s = hodu::Session::load(path, o);
    ASSERT_EQ(s->inputs().size(), 1u) << ext;
    EXPECT_TRUE(s->inputs()[0].type.shape[0].is_symbolic()) << ext << ": the batch dim is symbolic";
    auto out = s->run({{"input", core(x)}});
    auto d = hodu::compare_values("output", out[0].value, want, 1e-5, 0.0);
    EXPECT_TRUE(d.matches) << ext << ": " << d.to_string();
    std::remove(path.c_str());
  }
}

}  // namespace
