// LSTM, GRU and RNN on the cpu engine: what a node asks for (rnn.cc reads it, with the
// interpreter's defaults), run by oneDNN's RNN primitives where they compute exactly that
// (rnn_onednn.cc), else by the engine's own loop (rnn.cc).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "engines/cpu/plan.h"

namespace hodu::cpu {

struct RnnAct {
  enum Kind { Sigmoid, Tanh, Relu, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign, Softplus };
  Kind kind = Sigmoid;
  float alpha = 0, beta = 0;
};

struct RnnSpec {
  enum Cell { Rnn, Gru, Lstm } cell = Lstm;
  std::string what;  // the node, for errors
  int64_t gates = 4, dirs = 1, seq = 0, batch = 0, input = 0, hidden = 0, layout = 0;
  bool reverse = false;  // direction "reverse" (bidirectional: direction 1 is)
  float clip = 0;        // 0: none
  bool linear_before_reset = false, input_forget = false, peepholes = false;
  std::vector<RnnAct> acts;  // acts_per_dir per direction
  size_t acts_per_dir = 1;
};

// The node's spec when the cpu engine runs it: f32 inputs of static shapes, known activations;
// nullopt otherwise (the interpreter's kernel reports what is wrong).
std::optional<RnnSpec> rnn_spec(PlanBuilder& b, const Node& n);
// Adds a step running the node on oneDNN's RNN primitive when it matches the spec exactly
// (rnn_onednn.cc); false otherwise.
bool make_onednn_rnn(PlanBuilder& b, const Node& n, const RnnSpec& spec);
// Whether the engine's loop runs a node oneDNN could (it is faster there: AVX2 and up at
// batches up to 4, below AVX-512 at any batch). HODU_CPU_RNN=loop|onednn overrides it (tests
// run both).
bool loop_preferred(const RnnSpec& spec);

}  // namespace hodu::cpu
