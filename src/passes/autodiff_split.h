// A gradient graph split in two graphs that run apart: the forward, which also outputs the
// values the backward needs ("saved" activations), and the backward, which starts from the
// gradients of the forward's outputs. This is how an autograd system drives a compiled graph
// (hodu.torch: forward in a torch.autograd.Function's forward, backward in its backward):
// the forward runs once, the backward never recomputes it, and a random op's draw (Dropout's
// mask) reaches the backward as the value the forward used.
#pragma once
#include <string>
#include <vector>

#include "ir/graph.h"

namespace hodu::passes {

struct SplitRequest {
  // Forward outputs whose gradients the caller passes to the backward (each gets an input
  // "grad.<y>" of y's type). Empty: every float output.
  std::vector<std::string> outputs;
  std::vector<std::string> wrt;  // graph inputs or initializers, as build_gradient_graph takes them
};

struct ForwardBackward {
  // Inputs: the forward's. Outputs: the forward's, then each saved value not already an output.
  Graph forward;
  // Inputs: `seeds`, then `saved`, then `reused_inputs`. Outputs: "grad.<w>" per wrt value.
  Graph backward;
  std::vector<std::string> seeds;  // "grad.<y>" per differentiated output, in request order
  std::vector<std::string> saved;  // forward values (not inputs) the backward reads
  std::vector<std::string> reused_inputs;  // forward inputs (data, params) the backward reads
};

// Builds the gradient graph (build_gradient_graph: one seed input for one output; for several,
// the sum of ⟨y_i, grad.y_i⟩ differentiated, which hands each y_i exactly grad.y_i) and cuts it:
// the forward is every node an output of `forward` depends on; the backward the rest. Constant
// nodes the backward reads are copied into it, and Shape/Size of forward values (with the
// integer arithmetic on them) move to the forward, so a tensor read only for its shape is not
// kept. Errors: those of build_gradient_graph (an op without a gradient rule is Unsupported,
// naming the node); an output in `outputs` that is not a float output of `forward` is
// InvalidArgument.
ForwardBackward split_gradient_graph(const Graph& forward, const SplitRequest& request);

}  // namespace hodu::passes
