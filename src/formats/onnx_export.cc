// hodu Model → ONNX ModelProto. The canonical graph is first converted to the
// target opset (onnx_downgrade.cc), then written field by field.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <set>

#include "core/error.h"
#include "formats/model_io.h"
#include "formats/onnx_canonicalize.h"
#include "formats/onnx_tensor.h"

namespace hodu {
namespace {

void shape_to_onnx(const Shape& s, onnx::TensorShapeProto* p) {
  for (const auto& d : s.dims()) {
    auto* dim = p->add_dim();
    if (d.is_known()) dim->set_dim_value(d.value);
    else if (d.is_symbolic()) dim->set_dim_param(d.symbol);
  }
}

}  // namespace

void value_type_to_onnx(const ValueType& t, onnx::TypeProto* p) {
  switch (t.kind) {
    case ValueType::Kind::Unknown:
      break;
    case ValueType::Kind::Tensor: {
      auto* tt = p->mutable_tensor_type();
      tt->set_elem_type(t.dtype == DType::Undefined ? 0 : dtype_to_onnx(t.dtype));
      if (t.shape.rank_known()) shape_to_onnx(t.shape, tt->mutable_shape());
      break;
    }
    case ValueType::Kind::SparseTensor: {
      auto* tt = p->mutable_sparse_tensor_type();
      tt->set_elem_type(t.dtype == DType::Undefined ? 0 : dtype_to_onnx(t.dtype));
      if (t.shape.rank_known()) shape_to_onnx(t.shape, tt->mutable_shape());
      break;
    }
    case ValueType::Kind::Sequence: {
      auto* s = p->mutable_sequence_type();
      if (t.elem && t.elem->kind != ValueType::Kind::Unknown) value_type_to_onnx(*t.elem, s->mutable_elem_type());
      break;
    }
    case ValueType::Kind::Optional: {
      auto* s = p->mutable_optional_type();
      if (t.elem && t.elem->kind != ValueType::Kind::Unknown) value_type_to_onnx(*t.elem, s->mutable_elem_type());
      break;
    }
    case ValueType::Kind::Map: {
      auto* m = p->mutable_map_type();
      m->set_key_type(t.key_type == DType::Undefined ? 0 : dtype_to_onnx(t.key_type));
      if (t.elem && t.elem->kind != ValueType::Kind::Unknown) value_type_to_onnx(*t.elem, m->mutable_value_type());
      break;
    }
  }
}

namespace {

void graph_to_onnx(const Graph& g, onnx::GraphProto* p);

// Dense tensor → sparse proto with linear (1-D) indices of the non-zero elements.
void sparse_to_onnx(const Tensor& t, const std::string& name, onnx::SparseTensorProto* p) {
  Tensor c = t.contiguous();
  for (auto d : c.shape()) p->add_dims(d);
  std::vector<int64_t> nz;
  int64_t n = c.numel();
  if (c.dtype() == DType::String) {
    for (int64_t i = 0; i < n; ++i)
      if (!c.string_data()[i].empty()) nz.push_back(i);
  } else {
    size_t es = static_cast<size_t>(std::max(1, dtype_bits(c.dtype()) / 8));
    const auto* b = static_cast<const unsigned char*>(c.raw_data());
    for (int64_t i = 0; i < n; ++i)
      if (std::any_of(b + i * es, b + (i + 1) * es, [](unsigned char x) { return x != 0; })) nz.push_back(i);
  }
  auto* values = p->mutable_values();
  values->set_name(name);
  values->set_data_type(dtype_to_onnx(c.dtype()));
  values->add_dims(static_cast<int64_t>(nz.size()));
  if (c.dtype() == DType::String) {
    for (auto i : nz) values->add_string_data(c.string_data()[i]);
  } else {
    size_t es = static_cast<size_t>(dtype_bits(c.dtype()) / 8);
    std::string raw(nz.size() * es, '\0');
    const auto* b = static_cast<const char*>(c.raw_data());
    for (size_t k = 0; k < nz.size(); ++k) std::copy(b + nz[k] * es, b + (nz[k] + 1) * es, raw.data() + k * es);
    values->set_raw_data(raw);
  }
  auto* idx = p->mutable_indices();
  idx->set_data_type(dtype_to_onnx(DType::I64));
  idx->add_dims(static_cast<int64_t>(nz.size()));
  for (auto i : nz) idx->add_int64_data(i);
}

void attribute_to_onnx(const Attribute& a, onnx::AttributeProto* p) {
  using K = Attribute::Kind;
  p->set_name(a.name);
  if (!a.doc.empty()) p->set_doc_string(a.doc);
  if (!a.ref_attr_name.empty()) p->set_ref_attr_name(a.ref_attr_name);
  switch (a.kind) {
    case K::Undefined: break;
    case K::Float: p->set_type(onnx::AttributeProto::FLOAT); if (a.ref_attr_name.empty()) p->set_f(a.f); break;
    case K::Int: p->set_type(onnx::AttributeProto::INT); if (a.ref_attr_name.empty()) p->set_i(a.i); break;
    case K::String: p->set_type(onnx::AttributeProto::STRING); if (a.ref_attr_name.empty()) p->set_s(a.s); break;
    case K::Tensor:
      p->set_type(onnx::AttributeProto::TENSOR);
      if (a.t.defined()) tensor_to_onnx(a.t, p->mutable_t());
      break;
    case K::SparseTensor:
      p->set_type(onnx::AttributeProto::SPARSE_TENSOR);
      if (a.t.defined()) sparse_to_onnx(a.t, "", p->mutable_sparse_tensor());
      break;
    case K::Graph:
      p->set_type(onnx::AttributeProto::GRAPH);
      if (a.g) graph_to_onnx(*a.g, p->mutable_g());
      break;
    case K::TypeProto:
      p->set_type(onnx::AttributeProto::TYPE_PROTO);
      if (!a.types.empty()) value_type_to_onnx(a.types[0], p->mutable_tp());
      break;
    case K::Floats:
      p->set_type(onnx::AttributeProto::FLOATS);
      for (float v : a.floats) p->add_floats(v);
      break;
    case K::Ints:
      p->set_type(onnx::AttributeProto::INTS);
      for (int64_t v : a.ints) p->add_ints(v);
      break;
    case K::Strings:
      p->set_type(onnx::AttributeProto::STRINGS);
      for (const auto& v : a.strings) p->add_strings(v);
      break;
    case K::Tensors:
      p->set_type(onnx::AttributeProto::TENSORS);
      for (const auto& t : a.tensors) tensor_to_onnx(t, p->add_tensors());
      break;
    case K::Graphs:
      p->set_type(onnx::AttributeProto::GRAPHS);
      for (const auto& g : a.graphs) graph_to_onnx(*g, p->add_graphs());
      break;
    case K::TypeProtos:
      p->set_type(onnx::AttributeProto::TYPE_PROTOS);
      for (const auto& t : a.types) value_type_to_onnx(t, p->add_type_protos());
      break;
  }
}

void value_to_onnx(const Value& v, onnx::ValueInfoProto* p) {
  p->set_name(v.name);
  if (!v.doc.empty()) p->set_doc_string(v.doc);
  if (v.type.kind != ValueType::Kind::Unknown) value_type_to_onnx(v.type, p->mutable_type());
}

void graph_to_onnx(const Graph& g, onnx::GraphProto* p) {
  p->set_name(g.name);
  if (!g.doc.empty()) p->set_doc_string(g.doc);
  for (const auto& v : g.inputs) value_to_onnx(v, p->add_input());
  for (const auto& v : g.outputs) value_to_onnx(v, p->add_output());
  for (const auto& [name, t] : g.initializers) {
    auto* tp = p->add_initializer();
    tensor_to_onnx(t, tp);
    tp->set_name(name);
  }
  for (const auto& n : g.nodes) {
    auto* np = p->add_node();
    np->set_name(n.name);
    np->set_op_type(n.op_type);
    if (!n.domain.empty()) np->set_domain(n.domain);
    if (!n.doc.empty()) np->set_doc_string(n.doc);
    for (const auto& i : n.inputs) np->add_input(i);
    for (const auto& o : n.outputs) np->add_output(o);
    for (const auto& a : n.attributes) attribute_to_onnx(a, np->add_attribute());
  }
  for (const auto& [name, t] : g.value_types) {
    auto* vi = p->add_value_info();
    vi->set_name(name);
    value_type_to_onnx(t, vi->mutable_type());
  }
}

// Lowest IR version that can carry an ai.onnx opset.
int64_t ir_version_for_opset(int opset) {
  if (opset <= 8) return 3;
  if (opset <= 10) return 5;
  if (opset == 11) return 6;
  if (opset <= 14) return 7;
  if (opset <= 18) return 8;
  if (opset <= 20) return 9;
  if (opset == 21) return 10;
  if (opset <= 23) return 11;
  return 12;
}

void collect_domains(const Graph& g, std::set<std::string>& out) {
  for (const auto& n : g.nodes) {
    if (!n.domain.empty()) out.insert(n.domain);
    for (const auto& a : n.attributes) {
      if (a.g) collect_domains(*a.g, out);
      for (const auto& sg : a.graphs) collect_domains(*sg, out);
    }
  }
}

}  // namespace

std::string export_onnx(const Model& model, int opset) {
  HODU_CHECK(opset == 0 || (opset >= 1 && opset <= kMaxOnnxOpset), ErrorCode::InvalidArgument,
             "ONNX opset {} is out of range (1..{}, or 0 for automatic)", opset, kMaxOnnxOpset);
  int target = opset == 0 ? required_onnx_opset(model.graph, 17) : opset;
  Graph g = model.graph;
  downgrade_graph(g, target);

  onnx::ModelProto m;
  // Debian's onnx checker (1.12) knows IR versions up to 8; keep a newer IR only
  // when the model or the opset needs it.
  int64_t ir = std::max<int64_t>(ir_version_for_opset(target), std::min<int64_t>(model.ir_version, 8));
  if (ir < 4) ir = 4;  // initializers need not be listed as inputs
  m.set_ir_version(ir);
  if (!model.producer_name.empty()) m.set_producer_name(model.producer_name);
  if (!model.producer_version.empty()) m.set_producer_version(model.producer_version);
  if (!model.domain.empty()) m.set_domain(model.domain);
  if (model.model_version) m.set_model_version(model.model_version);
  if (!model.doc.empty()) m.set_doc_string(model.doc);
  for (const auto& [k, v] : model.metadata) {
    auto* e = m.add_metadata_props();
    e->set_key(k);
    e->set_value(v);
  }
  auto* ai = m.add_opset_import();
  ai->set_domain("");
  ai->set_version(target);
  std::set<std::string> used;
  collect_domains(g, used);
  for (const auto& [domain, version] : model.opset_imports) {
    if (domain.empty()) continue;
    used.erase(domain);
    auto* op = m.add_opset_import();
    op->set_domain(domain);
    op->set_version(version);
  }
  for (const auto& domain : used) {  // domains the graph uses without declaring them
    auto* op = m.add_opset_import();
    op->set_domain(domain);
    op->set_version(domain == "ai.onnx.ml" ? kMaxOnnxMlOpset : 1);
  }
  graph_to_onnx(g, m.mutable_graph());
  std::string out;
  HODU_CHECK(m.SerializeToString(&out), ErrorCode::Unsupported,
             "cannot write the model as ONNX (protobuf serialization failed; models over 2 GiB need external data)");
  return out;
}

}  // namespace hodu
