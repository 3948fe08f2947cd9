// The backward pass: from the roots' nodes, every node runs once all the nodes
// that feed it gradients have run (dependency counts), later-recorded nodes
// first; gradients arriving at one input are summed.
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "frontend/autograd/node.h"
#include "hodu/autograd.h"

namespace hodu::eager {
namespace {

struct ByLatest {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr < b->sequence_nr; }
};

// Where autograd::grad takes a gradient instead of letting it flow on.
struct Capture {
  Node* node;
  uint32_t input_nr;
  size_t slot;
};

Tensor add_grads(const Tensor& a, const Tensor& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  return a + b;
}

std::string edge_name(const Tensor& t, size_t i) {
  return "tensor " + std::to_string(i) + " (" + t.type_string() + ")";
}

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& root_grads, bool retain_graph,
                  bool create_graph, const std::vector<Edge>* capture_edges, std::vector<Tensor>* captured) {
  HODU_CHECK(root_grads.empty() || root_grads.size() == roots.size(), ErrorCode::InvalidArgument,
             "backward: {} gradients given for {} outputs", root_grads.size(), roots.size());
  std::vector<Edge> root_edges;
  std::vector<Tensor> grads;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    HODU_CHECK(r.defined(), ErrorCode::InvalidArgument, "backward: output {} is an undefined tensor", i);
    Edge e = gradient_edge(r);
    HODU_CHECK(e.fn != nullptr, ErrorCode::InvalidArgument,
               "backward: {} does not require grad and has no grad_fn (nothing it was computed from requires grad, "
               "or it was computed under NoGradGuard)",
               edge_name(r, i));
    Tensor g = i < root_grads.size() ? root_grads[i] : Tensor();
    if (!g.defined()) {
      HODU_CHECK(r.numel() == 1, ErrorCode::InvalidArgument,
                 "backward: the gradient can be left out only for a one-element output; {} has shape {}",
                 edge_name(r, i), shape_to_string(r.shape()));
      g = ones_like(r);
    } else {
      HODU_CHECK(g.shape() == r.shape(), ErrorCode::InvalidArgument,
                 "backward: gradient of shape {} for output of shape {}", shape_to_string(g.shape()),
                 shape_to_string(r.shape()));
      if (g.dtype() != r.dtype()) g = g.to(r.dtype());
    }
    root_edges.push_back(e);
    grads.push_back(g);
  }

  // Dependencies: how many edges point at each node reachable from the roots.
  std::unordered_map<Node*, int> deps;
  std::unordered_map<Node*, std::shared_ptr<Node>> keep;  // nodes stay alive while the pass runs
  std::vector<Node*> stack;
  for (const Edge& e : root_edges)
    if (keep.emplace(e.fn.get(), e.fn).second) stack.push_back(e.fn.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.fn) continue;
      ++deps[e.fn.get()];
      if (keep.emplace(e.fn.get(), e.fn).second) stack.push_back(e.fn.get());
    }
  }

  std::vector<Capture> captures;
  if (capture_edges) {
    for (size_t i = 0; i < capture_edges->size(); ++i) {
      const Edge& e = (*capture_edges)[i];
      if (e.fn) captures.push_back({e.fn.get(), e.input_nr, i});
    }
  }

  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  auto deliver = [&](Node* n, uint32_t input_nr, Tensor g) {
    auto& buf = buffers[n];
    if (buf.empty()) buf.resize(n->outputs.size());
    HODU_CHECK(input_nr < buf.size(), ErrorCode::Internal, "autograd: edge {} into {} with {} outputs", input_nr,
               n->name(), buf.size());
    buf[input_nr] = add_grads(buf[input_nr], g);
  };
  for (size_t i = 0; i < root_edges.size(); ++i) deliver(root_edges[i].fn.get(), root_edges[i].input_nr, grads[i]);

  std::priority_queue<Node*, std::vector<Node*>, ByLatest> ready;
  for (const Edge& e : root_edges)
    if (deps[e.fn.get()] == 0) {
      deps[e.fn.get()] = -1;  // queued once
      ready.push(e.fn.get());
    }

  set_grad_enabled(create_graph);
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    std::vector<Tensor> in = std::move(buffers[n]);
    buffers.erase(n);
    in.resize(n->outputs.size());
    for (size_t i = 0; i < in.size(); ++i)
      if (!in[i].defined()) in[i] = zeros(n->outputs[i].shape, n->outputs[i].dtype);
    for (const Capture& c : captures)
      if (c.node == n) (*captured)[c.slot] = add_grads((*captured)[c.slot], in[c.input_nr]);
    for (size_t i = 0; i < n->retained.size(); ++i) {
      if (auto impl = n->retained[i].lock()) {
        Tensor g = create_graph ? in[i] : in[i].detach().clone();
        impl->grad = impl->grad.defined() ? add_grads(impl->grad, g) : g;
      }
    }
    std::vector<Tensor> out;
    bool skip = captured && dynamic_cast<AccumulateGrad*>(n) != nullptr;  // autograd::grad leaves .grad alone
    if (!skip) {
      try {
        out = n->apply(std::move(in));
      } catch (const Error& err) {
        if (std::string(err.what()).find("backward") != std::string::npos) throw;
        throw err.with_context("in the backward of " + n->name() + ": ");
      }
      if (!retain_graph) n->release();
    }
    HODU_CHECK(skip || out.empty() || out.size() == n->next_edges.size(), ErrorCode::Internal,
               "{} returned {} gradients for {} inputs", n->name(), out.size(), n->next_edges.size());
    for (size_t i = 0; i < n->next_edges.size(); ++i) {
      const Edge& e = n->next_edges[i];
      if (!e.fn) continue;
      if (!skip && i < out.size() && out[i].defined()) {
        const auto& info = e.fn->outputs[e.input_nr];
        HODU_CHECK(out[i].shape() == info.shape, ErrorCode::Internal,
                   "{} gave a gradient of shape {} for input {} of shape {}", n->name(),
                   shape_to_string(out[i].shape()), i, shape_to_string(info.shape));
        deliver(e.fn.get(), e.input_nr, std::move(out[i]));
      }
      if (--deps[e.fn.get()] == 0) {
        deps[e.fn.get()] = -1;
        ready.push(e.fn.get());
      }
    }
  }
}

// Restores grad mode however the pass ends.
struct GradModeRestore {
  bool saved = is_grad_enabled();
  ~GradModeRestore() { set_grad_enabled(saved); }
};

}  // namespace

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  autograd::backward({*this}, {gradient}, retain_graph, create_graph);
}

namespace autograd {

void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs, bool retain_graph,
              bool create_graph) {
  GradModeRestore restore;
  run_backward(outputs, grad_outputs, retain_graph || create_graph, create_graph, nullptr, nullptr);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, bool retain_graph, bool create_graph,
                         bool allow_unused) {
  std::vector<Edge> edges;
  for (size_t i = 0; i < inputs.size(); ++i) {
    HODU_CHECK(inputs[i].defined() && inputs[i].requires_grad(), ErrorCode::InvalidArgument,
               "autograd::grad: input {} does not require grad", i);
    edges.push_back(gradient_edge(inputs[i]));
  }
  std::vector<Tensor> result(inputs.size());
  {
    GradModeRestore restore;
    run_backward(outputs, grad_outputs, retain_graph || create_graph, create_graph, &edges, &result);
  }
  for (size_t i = 0; i < result.size(); ++i) {
    HODU_CHECK(result[i].defined() || allow_unused, ErrorCode::InvalidArgument,
               "autograd::grad: input {} was not used to compute the outputs (pass allow_unused=true)", i);
    if (result[i].defined() && !create_graph) result[i] = result[i].detach();
  }
  return result;
}

}  // namespace autograd
}  // namespace hodu::eager
