// ONNX ModelProto → hodu Model. Reads the protobuf, converts graphs (subgraphs
// too), attributes, types, initializers (raw, typed, external, sparse), then
// hands the model to the canonicalizer (onnx_canonicalize.cc), which rewrites
// older opsets into the newest semantics.
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <onnx/onnx_pb.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <set>

#include "core/error.h"
#include "formats/mapped_file.h"
#include "formats/model_io.h"
#include "formats/onnx_canonicalize.h"
#include "formats/onnx_contrib.h"
#include "ir/topological_order.h"
#include "formats/onnx_tensor.h"

namespace hodu {
namespace {

struct ImportContext {
  std::string base_dir;
  std::string what;  // the file, for error messages
  int64_t ir_version = 0;
};

DType elem_dtype(int32_t code, const std::string& what) {
  if (code == 0) return DType::Undefined;
  auto dt = dtype_from_onnx(code);
  HODU_CHECK(dt.has_value(), ErrorCode::InvalidModel, "{}: unknown element type {}", what, code);
  return *dt;
}

Shape shape_from_onnx(const onnx::TensorShapeProto& s) {
  std::vector<Dim> dims;
  dims.reserve(s.dim_size());
  for (const auto& d : s.dim()) {
    if (d.has_dim_value() && d.dim_value() >= 0) dims.emplace_back(d.dim_value());
    else if (d.has_dim_param() && !d.dim_param().empty()) dims.push_back(Dim::sym(d.dim_param()));
    else dims.push_back(Dim::unknown());
  }
  return Shape(std::move(dims));
}

}  // namespace

ValueType value_type_from_onnx(const onnx::TypeProto& t, const std::string& what) {
  ValueType v;
  switch (t.value_case()) {
    case onnx::TypeProto::kTensorType: {
      v.kind = ValueType::Kind::Tensor;
      v.dtype = elem_dtype(t.tensor_type().elem_type(), what);
      if (t.tensor_type().has_shape()) v.shape = shape_from_onnx(t.tensor_type().shape());
      break;
    }
    case onnx::TypeProto::kSparseTensorType: {
      v.kind = ValueType::Kind::SparseTensor;
      v.dtype = elem_dtype(t.sparse_tensor_type().elem_type(), what);
      if (t.sparse_tensor_type().has_shape()) v.shape = shape_from_onnx(t.sparse_tensor_type().shape());
      break;
    }
    case onnx::TypeProto::kSequenceType:
      v.kind = ValueType::Kind::Sequence;
      v.elem = std::make_shared<ValueType>(t.sequence_type().has_elem_type()
                                               ? value_type_from_onnx(t.sequence_type().elem_type(), what)
                                               : ValueType{});
      break;
    case onnx::TypeProto::kOptionalType:
      v.kind = ValueType::Kind::Optional;
      v.elem = std::make_shared<ValueType>(t.optional_type().has_elem_type()
                                               ? value_type_from_onnx(t.optional_type().elem_type(), what)
                                               : ValueType{});
      break;
    case onnx::TypeProto::kMapType:
      v.kind = ValueType::Kind::Map;
      v.key_type = elem_dtype(t.map_type().key_type(), what);
      v.elem = std::make_shared<ValueType>(t.map_type().has_value_type()
                                               ? value_type_from_onnx(t.map_type().value_type(), what)
                                               : ValueType{});
      break;
    default:
      break;  // unknown (not set, or opaque)
  }
  return v;
}

namespace {

Graph graph_from_onnx(const onnx::GraphProto& g, const ImportContext& ctx);

// Sparse tensor → dense tensor of the same dtype.
Tensor densify(const onnx::SparseTensorProto& sp, const ImportContext& ctx, const std::string& name) {
  const std::string what = ctx.what + ": sparse tensor '" + name + "'";
  Tensor values = tensor_from_onnx(sp.values(), ctx.base_dir, what + " values");
  std::vector<int64_t> dims(sp.dims().begin(), sp.dims().end());
  for (auto d : dims)
    HODU_CHECK(d >= 0 && d < (int64_t(1) << 40), ErrorCode::InvalidModel, "{}: invalid dim {} in {}", what, d,
               shape_to_string(dims));
  int64_t n = 1;
  for (auto d : dims) {
    HODU_CHECK(d == 0 || n <= (int64_t(1) << 34) / d, ErrorCode::InvalidModel, "{}: shape {} is too large", what,
               shape_to_string(dims));
    n *= d;
  }
  HODU_CHECK(!dtype_is_packed4(values.dtype()), ErrorCode::Unsupported, "{}: 4-bit sparse tensors are not supported",
             what);
  HODU_CHECK(values.rank() == 1, ErrorCode::InvalidModel, "{}: values must be 1-D, got {}", what,
             values.shape_string());
  int64_t nnz = values.numel();
  std::vector<int64_t> linear(static_cast<size_t>(nnz));
  if (nnz > 0) {
    Tensor idx = tensor_from_onnx(sp.indices(), ctx.base_dir, what + " indices");
    HODU_CHECK(idx.dtype() == DType::I64, ErrorCode::InvalidModel, "{}: indices must be int64", what);
    std::vector<int64_t> iv = idx.to_int64s();
    int64_t rank = static_cast<int64_t>(dims.size());
    if (idx.rank() == 1) {
      HODU_CHECK(idx.dim(0) == nnz, ErrorCode::InvalidModel, "{}: {} indices for {} values", what, idx.dim(0), nnz);
      linear = iv;
    } else {
      HODU_CHECK(idx.rank() == 2 && idx.dim(0) == nnz && idx.dim(1) == rank, ErrorCode::InvalidModel,
                 "{}: indices of shape {} do not fit {} values of rank {}", what, idx.shape_string(), nnz, rank);
      for (int64_t k = 0; k < nnz; ++k) {
        int64_t lin = 0;
        for (int64_t a = 0; a < rank; ++a) {
          int64_t c = iv[k * rank + a];
          HODU_CHECK(c >= 0 && c < dims[a], ErrorCode::InvalidModel, "{}: index {} out of range for dim {}", what, c,
                     dims[a]);
          lin = lin * dims[a] + c;
        }
        linear[k] = lin;
      }
    }
  }
  Tensor dense = Tensor::empty(values.dtype(), dims);
  if (values.dtype() == DType::String) {
    for (int64_t k = 0; k < nnz; ++k) {
      HODU_CHECK(linear[k] >= 0 && linear[k] < n, ErrorCode::InvalidModel, "{}: index {} out of range", what,
                 linear[k]);
      dense.string_data()[linear[k]] = values.string_data()[k];
    }
    return dense;
  }
  size_t es = static_cast<size_t>(dtype_bits(values.dtype()) / 8);
  const char* src = static_cast<const char*>(values.contiguous().raw_data());
  char* dst = static_cast<char*>(dense.raw_data());
  for (int64_t k = 0; k < nnz; ++k) {
    HODU_CHECK(linear[k] >= 0 && linear[k] < n, ErrorCode::InvalidModel, "{}: index {} out of range", what,
               linear[k]);
    std::memcpy(dst + linear[k] * es, src + k * es, es);
  }
  return dense;
}

// The kind of the field that holds the attribute's value (Undefined when none is set).
Attribute::Kind held_kind(const onnx::AttributeProto& a);

Attribute::Kind attribute_kind(const onnx::AttributeProto& a) {
  using K = Attribute::Kind;
  switch (a.type()) {
    case onnx::AttributeProto::FLOAT: return K::Float;
    case onnx::AttributeProto::INT: return K::Int;
    case onnx::AttributeProto::STRING: return K::String;
    case onnx::AttributeProto::TENSOR: return K::Tensor;
    case onnx::AttributeProto::GRAPH: return K::Graph;
    case onnx::AttributeProto::SPARSE_TENSOR: return K::SparseTensor;
    case onnx::AttributeProto::TYPE_PROTO: return K::TypeProto;
    case onnx::AttributeProto::FLOATS: return K::Floats;
    case onnx::AttributeProto::INTS: return K::Ints;
    case onnx::AttributeProto::STRINGS: return K::Strings;
    case onnx::AttributeProto::TENSORS: return K::Tensors;
    case onnx::AttributeProto::GRAPHS: return K::Graphs;
    case onnx::AttributeProto::SPARSE_TENSORS: return K::Undefined;  // handled by the caller
    case onnx::AttributeProto::TYPE_PROTOS: return K::TypeProtos;
    default: break;
  }
  // IR version 1 files may leave `type` unset: infer it from the field set.
  return held_kind(a);
}

Attribute::Kind held_kind(const onnx::AttributeProto& a) {
  using K = Attribute::Kind;
  if (a.has_f()) return K::Float;
  if (a.has_i()) return K::Int;
  if (a.has_s()) return K::String;
  if (a.has_t()) return K::Tensor;
  if (a.has_g()) return K::Graph;
  if (a.has_sparse_tensor()) return K::SparseTensor;
  if (a.has_tp()) return K::TypeProto;
  if (a.floats_size()) return K::Floats;
  if (a.ints_size()) return K::Ints;
  if (a.strings_size()) return K::Strings;
  if (a.tensors_size()) return K::Tensors;
  if (a.graphs_size()) return K::Graphs;
  if (a.type_protos_size()) return K::TypeProtos;
  return K::Undefined;
}

Attribute attribute_from_onnx(const onnx::AttributeProto& a, const ImportContext& ctx, const std::string& where) {
  using K = Attribute::Kind;
  Attribute r;
  r.name = a.name();
  r.doc = a.doc_string();
  r.ref_attr_name = a.ref_attr_name();
  const std::string what = where + " attribute '" + a.name() + "'";
  HODU_CHECK(a.type() != onnx::AttributeProto::SPARSE_TENSORS, ErrorCode::Unsupported,
             "{}: {}: attributes of kind sparse_tensors are not supported", ctx.what, what);
  r.kind = attribute_kind(a);
  if (!r.ref_attr_name.empty()) return r;  // a reference to the caller's attribute carries no value
  // A declared type whose field is empty while another holds a value: reading the declared field
  // would give its default (0, "") silently, so refuse, as ONNX's checker does.
  if (const K held = held_kind(a); held != K::Undefined && held != r.kind)
    fail(ErrorCode::InvalidModel, "{}: {} is declared {} but its value is a {}", ctx.what, what,
         onnx::AttributeProto::AttributeType_Name(a.type()), attribute_kind_name(held));
  switch (r.kind) {
    case K::Float: r.f = a.f(); break;
    case K::Int: r.i = a.i(); break;
    case K::String: r.s = a.s(); break;
    case K::Tensor: r.t = tensor_from_onnx(a.t(), ctx.base_dir, ctx.what + ": " + what); break;
    case K::SparseTensor: r.t = densify(a.sparse_tensor(), ctx, what); break;
    case K::Graph: r.g = std::make_shared<Graph>(graph_from_onnx(a.g(), ctx)); break;
    case K::TypeProto: r.types.push_back(value_type_from_onnx(a.tp(), ctx.what + ": " + what)); break;
    case K::Floats: r.floats.assign(a.floats().begin(), a.floats().end()); break;
    case K::Ints: r.ints.assign(a.ints().begin(), a.ints().end()); break;
    case K::Strings: r.strings.assign(a.strings().begin(), a.strings().end()); break;
    case K::Tensors:
      for (const auto& t : a.tensors()) r.tensors.push_back(tensor_from_onnx(t, ctx.base_dir, ctx.what + ": " + what));
      break;
    case K::Graphs:
      for (const auto& g : a.graphs()) r.graphs.push_back(std::make_shared<Graph>(graph_from_onnx(g, ctx)));
      break;
    case K::TypeProtos:
      for (const auto& t : a.type_protos()) r.types.push_back(value_type_from_onnx(t, ctx.what + ": " + what));
      break;
    case K::Undefined:
      fail(ErrorCode::InvalidModel, "{}: {} has no value", ctx.what, what);
  }
  return r;
}

Value value_from_onnx(const onnx::ValueInfoProto& v, const ImportContext& ctx) {
  Value r;
  r.name = v.name();
  r.doc = v.doc_string();
  if (v.has_type()) r.type = value_type_from_onnx(v.type(), ctx.what + ": value '" + v.name() + "'");
  return r;
}

Graph graph_from_onnx(const onnx::GraphProto& g, const ImportContext& ctx) {
  Graph r;
  r.name = g.name();
  r.doc = g.doc_string();
  std::set<std::string> defined;  // names defined in this scope

  // Initializers (dense, then sparse), in file order.
  for (int k = 0; k < g.initializer_size(); ++k) {
    const auto& t = g.initializer(k);
    HODU_CHECK(!t.name().empty(), ErrorCode::InvalidModel, "{}: graph '{}': initializer #{} has no name", ctx.what,
               g.name(), k);
    HODU_CHECK(defined.insert(t.name()).second, ErrorCode::InvalidModel,
               "{}: graph '{}': initializer '{}' is defined twice", ctx.what, g.name(), t.name());
    // The ModelProto belongs to import_onnx and is dropped after import: take
    // the weight bytes rather than copy them.
    auto& owned = const_cast<onnx::TensorProto&>(t);
    r.initializers.emplace_back(t.name(), tensor_from_onnx_taking(owned, ctx.base_dir,
                                                                  ctx.what + ": initializer '" + t.name() + "'"));
  }
  for (const auto& sp : g.sparse_initializer()) {
    std::string name = sp.values().name();
    HODU_CHECK(!name.empty(), ErrorCode::InvalidModel, "{}: graph '{}': sparse initializer without a name", ctx.what,
               g.name());
    HODU_CHECK(defined.insert(name).second, ErrorCode::InvalidModel,
               "{}: graph '{}': initializer '{}' is defined twice", ctx.what, g.name(), name);
    r.initializers.emplace_back(name, densify(sp, ctx, name));
  }

  // Inputs. Before IR version 4 every initializer was also listed as an input;
  // such an input is an initializer, not an input. From IR 4 on, an input that
  // also has an initializer is an overridable input (the initializer is its default).
  std::set<std::string> input_names;
  for (const auto& in : g.input()) {
    bool is_init = defined.count(in.name()) > 0;
    HODU_CHECK(input_names.insert(in.name()).second, ErrorCode::InvalidModel,
               "{}: graph '{}': input '{}' is listed twice", ctx.what, g.name(), in.name());
    if (is_init && ctx.ir_version < 4) continue;
    r.inputs.push_back(value_from_onnx(in, ctx));
  }
  for (const auto& name : input_names) defined.insert(name);

  for (int k = 0; k < g.node_size(); ++k) {
    const auto& n = g.node(k);
    Node node;
    node.name = n.name();
    node.op_type = n.op_type();
    node.domain = n.domain() == "ai.onnx" ? "" : n.domain();
    node.doc = n.doc_string();
    node.inputs.assign(n.input().begin(), n.input().end());
    node.outputs.assign(n.output().begin(), n.output().end());
    std::string where =
        fmt::format("node '{}' ({})", n.name().empty() ? fmt::format("#{}", k) : n.name(), n.op_type());
    HODU_CHECK(!n.op_type().empty(), ErrorCode::InvalidModel, "{}: graph '{}': {} has no op_type", ctx.what,
               g.name(), where);
    for (const auto& out : node.outputs) {
      if (out.empty()) continue;
      HODU_CHECK(defined.insert(out).second, ErrorCode::InvalidModel,
                 "{}: graph '{}': {}: output '{}' is already produced by another node, input or initializer",
                 ctx.what, g.name(), where, out);
    }
    std::set<std::string> attr_names;
    for (const auto& a : n.attribute()) {
      HODU_CHECK(attr_names.insert(a.name()).second, ErrorCode::InvalidModel, "{}: {}: attribute '{}' is given twice",
                 ctx.what, where, a.name());
      node.attributes.push_back(attribute_from_onnx(a, ctx, where));
    }
    r.nodes.push_back(std::move(node));
  }

  for (const auto& out : g.output()) r.outputs.push_back(value_from_onnx(out, ctx));
  for (const auto& vi : g.value_info()) {
    if (vi.name().empty() || !vi.has_type()) continue;
    r.value_types[vi.name()] = value_type_from_onnx(vi.type(), ctx.what + ": value '" + vi.name() + "'");
  }
  return r;
}

}  // namespace

// The rest of the import, shared by bytes in memory and a file read as a stream.
Model model_from_proto(onnx::ModelProto& m, const std::string& base_dir, const std::string& what);

namespace {

void check_protobuf_size(size_t bytes, const std::string& what) {
  HODU_CHECK(bytes < size_t(INT_MAX), ErrorCode::Unsupported,
             "{}: ONNX models of 2 GiB or more must keep their weights in external data", what);
}

}  // namespace

Model import_onnx(std::string_view bytes, const std::string& base_dir, const std::string& what) {
  check_protobuf_size(bytes.size(), what);
  onnx::ModelProto m;
  HODU_CHECK(m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())), ErrorCode::InvalidModel,
             "{}: not a valid ONNX model (truncated or corrupt protobuf)", what);
  return model_from_proto(m, base_dir, what);
}

// Read through a small buffer rather than a mapping: the weights then live once
// in memory (in the protobuf's strings, moved into the tensors) instead of
// once more in the mapped file's pages while it is parsed (peak RSS 2x the file).
Model import_onnx_file(const std::string& path, const std::string& base_dir) {
  ReadOnlyFile file(path);
  check_protobuf_size(file.size(), path);
  onnx::ModelProto m;
  google::protobuf::io::FileInputStream stream(file.fd(), 1 << 20);
  bool parsed = m.ParseFromZeroCopyStream(&stream);
  HODU_CHECK(stream.GetErrno() == 0, ErrorCode::Io, "{}: cannot read ({})", path, std::strerror(stream.GetErrno()));
  HODU_CHECK(parsed, ErrorCode::InvalidModel, "{}: not a valid ONNX model (truncated or corrupt protobuf)", path);
  return model_from_proto(m, base_dir, path);
}

Model model_from_proto(onnx::ModelProto& m, const std::string& base_dir, const std::string& what) {
  HODU_CHECK(m.has_ir_version() && m.ir_version() > 0, ErrorCode::InvalidModel,
             "{}: not a valid ONNX model (no ir_version)", what);
  HODU_CHECK(m.has_graph(), ErrorCode::InvalidModel, "{}: not a valid ONNX model (no graph)", what);
  HODU_CHECK(m.ir_version() <= 13, ErrorCode::Unsupported,
             "{}: ONNX IR version {} is newer than hodu supports (up to 13)", what, m.ir_version());

  Model model;
  model.ir_version = m.ir_version();
  model.producer_name = m.producer_name();
  model.producer_version = m.producer_version();
  model.domain = m.domain();
  model.model_version = m.model_version();
  model.doc = m.doc_string();
  for (const auto& p : m.metadata_props()) model.metadata.emplace_back(p.key(), p.value());

  for (const auto& op : m.opset_import()) {
    std::string domain = op.domain() == "ai.onnx" ? "" : op.domain();
    int64_t v = op.version();
    HODU_CHECK(v >= 1, ErrorCode::InvalidModel, "{}: opset version {} for domain '{}' is invalid", what, v,
               domain.empty() ? "ai.onnx" : domain);
    if (domain.empty())
      HODU_CHECK(v <= kMaxOnnxOpset, ErrorCode::Unsupported,
                 "{}: ai.onnx opset {} is newer than hodu supports (up to {})", what, v, kMaxOnnxOpset);
    if (domain == "ai.onnx.ml")
      HODU_CHECK(v <= kMaxOnnxMlOpset, ErrorCode::Unsupported,
                 "{}: ai.onnx.ml opset {} is newer than hodu supports (up to {})", what, v, kMaxOnnxMlOpset);
    auto [it, fresh] = model.opset_imports.emplace(domain, v);
    HODU_CHECK(fresh || it->second == v, ErrorCode::InvalidModel, "{}: domain '{}' is imported twice ({} and {})",
               what, domain.empty() ? "ai.onnx" : domain, it->second, v);
  }
  // Before IR version 3 there was no opset_import: opset 1 is implied.
  if (model.opset_imports.empty()) {
    HODU_CHECK(m.ir_version() < 3, ErrorCode::InvalidModel, "{}: not a valid ONNX model (no opset_import)", what);
    model.opset_imports[""] = 1;
  }

  ImportContext ctx{base_dir, what, m.ir_version()};
  model.graph = graph_from_onnx(m.graph(), ctx);
  sort_topologically(model.graph);  // a cycle stays as it is: the verifier names it
  canonicalize_onnx_model(model, what);
  lower_contrib_ops(model, what);  // after: its nodes are already in canonical form
  return model;
}

}  // namespace hodu
