// LSTM, GRU and RNN on the cpu engine against the interpreter over the attributes ONNX allows:
// directions, layouts, batch sizes on both sides of the GEMV/matmul switch, sequence lengths,
// biases, initial states, sequence_lens, clip, activations with alpha/beta, GRU
// linear_before_reset, LSTM peepholes and input_forget, weights as constants or inputs; the
// engine's loop and oneDNN's primitives (HODU_CPU_RNN) each, and the default choice between them.
#include <gtest/gtest.h>

#include <cstdlib>

#include "engines/cpu/test_util.h"
#include "kernels/cpu/packed_gemm.h"
#include "kernels/cpu/vector_math.h"

namespace hodu::cpu {
namespace {

using namespace testing;  // NOLINT

struct RnnCase {
  std::string op = "LSTM", direction = "forward";
  int64_t layout = 0, batch = 1, seq = 1, input = 5, hidden = 4;
  bool bias = false, init = false, lens = false, peep = false, weights_as_inputs = false;
  float clip = 0;
  bool lbr = false, input_forget = false;
  std::vector<std::string> acts;
  std::vector<float> alphas, betas;
};

std::string describe(const RnnCase& c) {
  std::string s = c.op + " " + c.direction + " layout " + std::to_string(c.layout) + " B " + std::to_string(c.batch) +
                  " S " + std::to_string(c.seq);
  if (c.bias) s += " bias";
  if (c.init) s += " init";
  if (c.lens) s += " lens";
  if (c.peep) s += " peep";
  if (c.weights_as_inputs) s += " W-input";
  if (c.clip > 0) s += " clip";
  if (c.lbr) s += " lbr";
  if (c.input_forget) s += " input_forget";
  for (const auto& a : c.acts) s += " " + a;
  return s;
}

struct Built {
  Model model;
  std::map<std::string, RuntimeValue> feeds;
};

Built build(const RnnCase& c, uint32_t seed) {
  const int64_t G = c.op == "LSTM" ? 4 : c.op == "GRU" ? 3 : 1;
  const int64_t D = c.direction == "bidirectional" ? 2 : 1, H = c.hidden;
  GraphBuilder b;
  Built out;
  std::vector<int64_t> xs = c.layout == 0 ? std::vector<int64_t>{c.seq, c.batch, c.input}
                                          : std::vector<int64_t>{c.batch, c.seq, c.input};
  std::vector<int64_t> ss = c.layout == 0 ? std::vector<int64_t>{D, c.batch, H} : std::vector<int64_t>{c.batch, D, H};
  b.input("X", DType::F32, xs);
  out.feeds["X"] = random_floats(xs, seed);
  auto param = [&](const std::string& name, std::vector<int64_t> shape, uint32_t s, float scale) {
    Tensor t = random_floats(shape, seed * 31 + s, scale);
    if (c.weights_as_inputs) {
      b.input(name, DType::F32, shape);
      out.feeds[name] = t;
    } else {
      b.constant(name, t);
    }
  };
  param("W", {D, G * H, c.input}, 1, 0.5f);
  param("R", {D, G * H, H}, 2, 0.5f);
  std::vector<std::string> ins = {"X", "W", "R", "", "", "", "", ""};
  if (c.bias) {
    param("B", {D, 2 * G * H}, 3, 0.5f);
    ins[3] = "B";
  }
  if (c.lens) {
    b.input("L", DType::I32, std::vector<int64_t>{c.batch});
    std::vector<int32_t> l;
    for (int64_t i = 0; i < c.batch; ++i) l.push_back(static_cast<int32_t>((i * 3 + 1) % (c.seq + 1)));
    out.feeds["L"] = Tensor::from_vector(DType::I32, {c.batch}, l);
    ins[4] = "L";
  }
  if (c.init) {
    b.input("H0", DType::F32, ss);
    out.feeds["H0"] = random_floats(ss, seed + 5);
    ins[5] = "H0";
    if (c.op == "LSTM") {
      b.input("C0", DType::F32, ss);
      out.feeds["C0"] = random_floats(ss, seed + 6);
      ins[6] = "C0";
    }
  }
  if (c.peep) {
    param("P", {D, 3 * H}, 4, 0.5f);
    ins[7] = "P";
  }
  while (!ins.empty() && ins.back().empty()) ins.pop_back();
  std::vector<Attribute> attrs = {Attribute::make_int("hidden_size", H), Attribute::make_string("direction", c.direction),
                                  Attribute::make_int("layout", c.layout)};
  if (c.clip > 0) attrs.push_back(Attribute::make_float("clip", c.clip));
  if (c.lbr) attrs.push_back(Attribute::make_int("linear_before_reset", 1));
  if (c.input_forget) attrs.push_back(Attribute::make_int("input_forget", 1));
  if (!c.acts.empty()) attrs.push_back(Attribute::make_strings("activations", c.acts));
  if (!c.alphas.empty()) attrs.push_back(Attribute::make_floats("activation_alpha", c.alphas));
  if (!c.betas.empty()) attrs.push_back(Attribute::make_floats("activation_beta", c.betas));
  std::vector<std::string> outs = {"Y", "Yh"};
  if (c.op == "LSTM") outs.push_back("Yc");
  b.node(c.op, ins, outs, attrs);
  for (const auto& o : outs) b.output(o);
  out.model = b.finish();
  return out;
}

// Non-default activations per cell (the same list for both directions, as ONNX allows).
void set_activations(RnnCase& c, int variant) {
  if (variant == 0) return;
  if (c.op == "RNN") {
    const char* names[] = {"Relu", "Sigmoid", "LeakyRelu", "Softsign", "Elu"};
    c.acts = {names[variant % 5]};
    if (c.acts[0] == "LeakyRelu" || c.acts[0] == "Elu") c.alphas = {0.3f};
  } else if (c.op == "GRU") {
    if (variant % 2) c.acts = {"HardSigmoid", "Softsign"}, c.alphas = {0.3f}, c.betas = {0.4f};
    else c.acts = {"Sigmoid", "Relu"};
  } else {
    if (variant % 2) c.acts = {"Sigmoid", "ScaledTanh", "Affine"}, c.alphas = {0.8f, 0.5f}, c.betas = {1.2f, 0.1f};
    else c.acts = {"HardSigmoid", "Tanh", "Softplus"};
  }
}

using hodu::testing::ScopedEnv;

TEST(CpuRnn, EveryAttributeCombinationMatchesInterpreter) {
  int index = 0, onednn = 0, loop = 0;
  for (const char* mode : {"loop", "onednn"}) {
    ScopedEnv env("HODU_CPU_RNN", mode);
    for (std::string op : {"RNN", "GRU", "LSTM"})
      for (std::string dir : {"forward", "reverse", "bidirectional"})
        for (int64_t layout : {0, 1})
          for (int64_t batch : {1, 6})
            for (int64_t seq : {1, 5}) {
              RnnCase c;
              c.op = op, c.direction = dir, c.layout = layout, c.batch = batch, c.seq = seq;
              const int v = index++;
              c.bias = v % 3 != 0;
              c.init = v % 4 != 1;
              c.lens = v % 5 == 2;
              c.weights_as_inputs = v % 7 == 3;
              c.clip = v % 6 == 4 ? 0.7f : 0.0f;
              c.lbr = op == "GRU" && v % 2 == 1;
              c.peep = op == "LSTM" && v % 3 == 1;
              c.input_forget = op == "LSTM" && v % 8 == 5;
              set_activations(c, v % 4 == 0 ? 1 + v / 4 : 0);
              SCOPED_TRACE(std::string(mode) + ": " + describe(c));
              Built m = build(c, static_cast<uint32_t>(v + 1));
              auto p = expect_matches_interpreter(m.model, m.feeds, 1e-4, 1e-5);
              const bool matches = c.clip == 0 && !c.input_forget && c.acts.empty() && !c.lens && !c.weights_as_inputs;
              bool on_onednn = p->count("onednn rnn") == 1;
              EXPECT_EQ(on_onednn, std::string(mode) == "onednn" && matches);
              EXPECT_EQ(p->count(": interp"), 0);
              (on_onednn ? onednn : loop)++;
            }
  }
  EXPECT_GT(onednn, 20);
  EXPECT_GT(loop, 100);
}

// With two threads (the GEMVs of a large hidden size split over them) and a longer sequence.
TEST(CpuRnn, LargeHiddenSizeOnTwoThreadsMatchesInterpreter) {
  for (const char* mode : {"loop", "onednn"}) {
    ScopedEnv env("HODU_CPU_RNN", mode);
    for (std::string op : {"GRU", "LSTM"}) {
      RnnCase c;
      c.op = op, c.direction = "bidirectional", c.batch = 2, c.seq = 9, c.input = 40, c.hidden = 160;
      c.bias = c.init = true;
      SCOPED_TRACE(std::string(mode) + ": " + describe(c));
      Built m = build(c, 77);
      // Sums of 200 products in f32, in another order than the interpreter's: h in (-1, 1) within 2e-4.
      expect_matches_interpreter(m.model, m.feeds, 1e-4, 2e-4, 2);
    }
  }
}

// The loop's recurrent product at the batch sizes and hidden sizes where its tiles change:
// 1-5 rows (tiles of 3 rows on AVX2 and up, GEMVs below), gate columns of whole 32-column tiles,
// a 16-column panel left over and a partial panel (LSTM 4·20 = 80, GRU 3·20 = 60, RNN 20).
TEST(CpuRnn, LoopAtEveryBatchAndPanelTailMatchesInterpreter) {
  ScopedEnv env("HODU_CPU_RNN", "loop");
  for (std::string op : {"RNN", "GRU", "LSTM"})
    for (int64_t batch : {1, 2, 3, 4, 5}) {
      RnnCase c;
      c.op = op, c.direction = "bidirectional", c.batch = batch, c.seq = 6, c.input = 7, c.hidden = 20;
      c.bias = c.init = true;
      c.lbr = op == "GRU" && batch % 2 == 0;
      SCOPED_TRACE(describe(c));
      Built m = build(c, static_cast<uint32_t>(batch + 40));
      auto p = expect_matches_interpreter(m.model, m.feeds, 1e-4, 2e-5);
      EXPECT_EQ(p->count("cpu rnn loop"), 1);
    }
}

// Without HODU_CPU_RNN: the loop where it is faster (AVX2 and up: batches up to 4, and every
// batch below AVX-512; any CPU: a cell oneDNN does not compute, a clip), oneDNN elsewhere.
TEST(CpuRnn, DefaultChoiceBetweenLoopAndOneDnn) {
  const bool packed = packed_gemm::available();
  const bool avx512 = vector_math::cpu_isa() == vector_math::Isa::Avx512;
  for (int64_t batch : {1, 6})
    for (bool clip : {false, true}) {
      RnnCase c;
      c.seq = 3;
      c.batch = batch;
      c.bias = true;
      c.clip = clip ? 0.5f : 0.0f;
      SCOPED_TRACE(describe(c));
      Built m = build(c, 3);
      auto p = expect_matches_interpreter(m.model, m.feeds, 1e-4, 1e-5);
      const bool loop = clip || (packed && (batch <= 4 || !avx512));
      EXPECT_EQ(p->count("onednn rnn"), loop ? 0 : 1);
      EXPECT_EQ(p->count("cpu rnn loop"), loop ? 1 : 0);
    }
}

TEST(CpuRnn, BadSequenceLengthGivesAnError) {
  RnnCase c;
  c.seq = 3, c.batch = 2, c.lens = true;
  Built m = build(c, 4);
  PlannedModel p(m.model, m.feeds);
  m.feeds["L"] = Tensor::from_vector(DType::I32, {2}, std::vector<int32_t>{1, 9});
  try {
    p.run(m.feeds);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sequence_lens[1] = 9 out of [0, 3]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hodu::cpu
