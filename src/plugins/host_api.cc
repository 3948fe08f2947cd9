#include "plugins/host_api.h"

#include <memory>
#include <vector>

#include "formats/model_io.h"
#include "core/dlpack_tensor.h"
#include "plugins/plugin_status.h"
#include "plugins/tensor_info.h"

// The opaque graph: the parsed model plus the info structs handed out.
struct hodu_graph {
  hodu::Model model;
  hodu::plugins::GraphTensorInfos io;
};

namespace hodu::plugins {
namespace {

const Node* node_at(const hodu_graph* g, int32_t i) {
  if (!g || i < 0 || i >= static_cast<int32_t>(g->model.graph.nodes.size())) return nullptr;
  return &g->model.graph.nodes[i];
}

const Attribute* attribute(const hodu_graph* g, int32_t node, const char* name) {
  const Node* n = node_at(g, node);
  HODU_CHECK(n && name, ErrorCode::InvalidArgument, "no node {}", node);
  for (const auto& a : n->attributes)
    if (a.name == name) return &a;
  fail(ErrorCode::InvalidArgument, "{}: no attribute '{}'", n->describe(), name);
}

hodu_status graph_parse(const void* bytes, size_t size, hodu_graph** out) {
  return guarded([&] {
    HODU_CHECK(bytes && out, ErrorCode::InvalidArgument, "graph_parse: null argument");
    *out = nullptr;
    auto g = std::make_unique<hodu_graph>();
    g->model = read_hdss(std::string_view(static_cast<const char*>(bytes), size), "<plugin model>");  // copies
    g->io = GraphTensorInfos(g->model.graph);
    *out = g.release();
  });
}

constexpr hodu_host_api kHostApi = {
    .abi_version = HODU_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(hodu_host_api),
    .host_version = HODU_VERSION,
    .graph_parse = graph_parse,
    .graph_free = [](hodu_graph* g) { delete g; },
    .graph_num_inputs = [](const hodu_graph* g) { return g ? static_cast<int32_t>(g->io.inputs.size()) : 0; },
    .graph_num_outputs = [](const hodu_graph* g) { return g ? static_cast<int32_t>(g->io.outputs.size()) : 0; },
    .graph_input = [](const hodu_graph* g, int32_t i, hodu_tensor_info* info) {
      return g ? tensor_info_at(g->io.inputs, i, info) : set_thread_error(HODU_ERR_INVALID_ARGUMENT, "null graph");
    },
    .graph_output = [](const hodu_graph* g, int32_t i, hodu_tensor_info* info) {
      return g ? tensor_info_at(g->io.outputs, i, info) : set_thread_error(HODU_ERR_INVALID_ARGUMENT, "null graph");
    },
    .graph_num_nodes = [](const hodu_graph* g) { return g ? static_cast<int32_t>(g->model.graph.nodes.size()) : 0; },
    .node_op = [](const hodu_graph* g, int32_t n) { auto* node = node_at(g, n); return node ? node->op_type.c_str() : nullptr; },
    .node_domain = [](const hodu_graph* g, int32_t n) { auto* node = node_at(g, n); return node ? node->domain.c_str() : nullptr; },
    .node_num_inputs = [](const hodu_graph* g, int32_t n) {
      auto* node = node_at(g, n);
      return node ? static_cast<int32_t>(node->inputs.size()) : 0;
    },
    .node_input = [](const hodu_graph* g, int32_t n, int32_t i) -> const char* {
      auto* node = node_at(g, n);
      if (!node || i < 0 || i >= static_cast<int32_t>(node->inputs.size())) return nullptr;
      return node->inputs[i].c_str();
    },
    .node_num_outputs = [](const hodu_graph* g, int32_t n) {
      auto* node = node_at(g, n);
      return node ? static_cast<int32_t>(node->outputs.size()) : 0;
    },
    .node_output = [](const hodu_graph* g, int32_t n, int32_t i) -> const char* {
      auto* node = node_at(g, n);
      if (!node || i < 0 || i >= static_cast<int32_t>(node->outputs.size())) return nullptr;
      return node->outputs[i].c_str();
    },
    .node_attribute_int = [](const hodu_graph* g, int32_t n, const char* name, int64_t* v) {
      return guarded([&] {
        const Attribute* a = attribute(g, n, name);
        HODU_CHECK(a->kind == Attribute::Kind::Int && v, ErrorCode::InvalidArgument, "attribute '{}' is not an int", name);
        *v = a->i;
      });
    },
    .node_attribute_float = [](const hodu_graph* g, int32_t n, const char* name, float* v) {
      return guarded([&] {
        const Attribute* a = attribute(g, n, name);
        HODU_CHECK(a->kind == Attribute::Kind::Float && v, ErrorCode::InvalidArgument, "attribute '{}' is not a float",
                   name);
        *v = a->f;
      });
    },
    .graph_constant = [](const hodu_graph* g, const char* name, DLTensor* out) {
      return guarded([&] {
        HODU_CHECK(g && name && out, ErrorCode::InvalidArgument, "graph_constant: null argument");
        const Tensor* t = g->model.graph.initializer(name);
        HODU_CHECK(t, ErrorCode::InvalidArgument, "'{}' is not a constant of the graph", name);
        *out = dl_view(*t, std::string("constant '") + name + "'");
      });
    },
    .last_error = thread_last_error,
};

}  // namespace

const hodu_host_api* host_api() { return &kHostApi; }

}  // namespace hodu::plugins
