// Small helpers the passes share: who reads a value, constants, rewiring.
#pragma once
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace hodu::passes {

// Number of readers of each value: node inputs (subgraphs' implicit reads of
// outer values count for the node owning the subgraph) and graph outputs.
std::map<std::string, int> use_counts(const Graph& g);

// The values a node reads: its inputs and the outer values its subgraphs read.
std::set<std::string> reads_of(const Node& n);

// Index of the nodes reading each value (top level only).
std::map<std::string, std::vector<size_t>> consumers(const Graph& g);

// The node reading `value` when it is the only reader (one node reads it once, no subgraph
// reads it, it is not a graph output); -1 otherwise. `uses`, `readers`: use_counts(g), consumers(g).
int sole_reader(const Graph& g, const std::map<std::string, int>& uses,
                const std::map<std::string, std::vector<size_t>>& readers, const std::string& value);

// For a node with two inputs, one of them `value`: the other one ("" otherwise).
std::string other_input(const Node& n, const std::string& value);

// The constant behind a value: an initializer that is not an overridable graph input.
const Tensor* constant_of(const Graph& g, const std::string& value);
// A constant with exactly one element, as double.
std::optional<double> scalar_constant(const Graph& g, const std::string& value);

bool is_graph_output(const Graph& g, const std::string& value);
// Every fed input of the graph (not an initializer) is a tensor of a declared static shape.
bool all_inputs_static(const Graph& g);
// Every value name the graph uses (inputs, outputs, initializers, node inputs and outputs), with
// `nested` its nested graphs' too.
std::set<std::string> value_names(const Graph& g, bool nested = false);
// Replaces every read of `from` by `to` (node inputs, subgraph reads, not graph outputs).
void replace_uses(Graph& g, std::string from, std::string to);  // by value: callers pass names held by nodes it edits
// Erases the nodes with the given indices.
void erase_nodes(Graph& g, const std::set<size_t>& indices);
// Rebuilds g.nodes in order: before[k], node k unless `removed` holds it, after[k].
void splice_nodes(Graph& g, const std::set<size_t>& removed, std::map<size_t, std::vector<Node>> before,
                  std::map<size_t, std::vector<Node>> after = {});
// A node y = Reshape(x, shape) (named y + "/reshape"), its shape a new initializer y + "/shape".
Node make_reshape(Graph& g, const std::string& x, const std::string& y, const std::vector<int64_t>& shape);

// Static shape of a value from its type or its constant.
std::optional<std::vector<int64_t>> static_shape(const Graph& g, const std::string& value);

// Reshape, Squeeze, Unsqueeze, Flatten: ops that only give their input another shape (the
// data, row-major, unchanged).
bool is_reshape_op(const Node& n);

// The strides a strided view (sizes, strides) takes reshaped to `shape` without copying
// (PyTorch's view rule: each run of dims contiguous in the view may be split and merged);
// nullopt where the reshape needs a copy.
std::optional<std::vector<int64_t>> reshape_strides(const std::vector<int64_t>& sizes,
                                                    const std::vector<int64_t>& strides,
                                                    const std::vector<int64_t>& shape);
// The same over any integer-like sizes (the C generator's sizes known at run time): `==`
// for equality known for certain, ge(a, b) for a >= b known for certain.
template <class I, class Ge>
std::optional<std::vector<I>> reshape_strides_with(const std::vector<I>& sizes, const std::vector<I>& strides,
                                                   const std::vector<I>& shape, Ge ge) {
  I total = 1, view_total = 1;
  for (const auto& s : sizes) total = total * s;
  for (const auto& s : shape) view_total = view_total * s;
  if (sizes.empty() || !(total == view_total) || total == I(0)) return std::nullopt;
  std::vector<I> out(shape.size(), I(0));
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  I base = strides.back(), tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    tensor_numel = tensor_numel * sizes[d];
    if (d == 0 || (!(sizes[d - 1] == I(1)) && !(strides[d - 1] == tensor_numel * base))) {
      // The view's dims over this contiguous run: its size exactly, in whole dims.
      while (view_d >= 0 && (!(view_numel == tensor_numel) || shape[view_d] == I(1))) {
        if (!ge(tensor_numel, view_numel * shape[view_d])) return std::nullopt;
        out[view_d] = view_numel * base;
        view_numel = view_numel * shape[view_d];
        --view_d;
      }
      if (!(view_numel == tensor_numel)) return std::nullopt;
      if (d > 0) {
        base = strides[d - 1];
        tensor_numel = view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

// A Transpose's permutation of `rank` dims: its perm attribute, else the dims reversed.
std::vector<int64_t> transpose_perm(const Node& n, size_t rank);

// True for ops whose result differs between runs (never folded or merged).
bool is_random_op(const Node& n);
bool has_subgraph(const Node& n);

// "Relu", "Clip", ... when `n` is an activation FusedConv/FusedMatMul can take,
// with its parameters; nullopt otherwise.
struct Activation {
  std::string name;
  std::vector<float> params;
};
std::optional<Activation> as_activation(const Graph& g, const Node& n);

// The end of a fusion into `fused` (FusedConv, FusedMatMul, FusedGemm): it takes the activation
// (attributes activation, activation_params) and produces `y`, the output of the last node it
// absorbed (its own output's type goes).
void finish_fusion(Graph& g, Node& fused, const std::optional<Activation>& act, const std::string& y);

// The nodes `chain` (indices, `last` among them) become one node `domain`.`op`(x) producing
// last's output, at last's position (which keeps the order valid); the others join `removed`
// (for erase_nodes). False, changing nothing, when one of them is in `removed` already.
bool replace_chain(Graph& g, std::set<size_t> chain, size_t last, const std::string& op, const std::string& domain,
                   const std::string& x, std::set<size_t>& removed);

}  // namespace hodu::passes
