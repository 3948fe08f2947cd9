// The op schema registry: parses the generated table (schema_table.inc,
// produced by scripts/gen_schema_table.py from ONNX's own schemas plus the
// supplements in scripts/schema/) once at start-up, then attaches the type and
// shape inference functions of shape_inference.cc.
#include "ir/schema.h"

#include <charconv>
#include <climits>
#include <cstdlib>
#include <string_view>

#include "core/error.h"

namespace hodu {

namespace detail {
// shape_inference.cc: the inference function of an op, or an empty function.
InferenceFn inference_for(const std::string& domain, const std::string& op);
}  // namespace detail

namespace {

#include "ir/schema_table.inc"

using std::string_view;

std::vector<string_view> split(string_view s, char sep) {
  std::vector<string_view> out;
  size_t start = 0;
  while (true) {
    size_t p = s.find(sep, start);
    if (p == string_view::npos) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, p - start));
    start = p + 1;
  }
}

int64_t to_int(string_view s) {
  int64_t v = 0;
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec != std::errc()) fail(ErrorCode::Internal, "schema table: bad integer '{}'", s);
  return v;
}

float to_float(string_view s) {
  std::string tmp(s);
  return std::strtof(tmp.c_str(), nullptr);
}

std::string unpct(string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      out.push_back(static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

Attribute::Kind parse_kind(string_view k) {
  using K = Attribute::Kind;
  if (k == "float") return K::Float;
  if (k == "int") return K::Int;
  if (k == "string") return K::String;
  if (k == "tensor") return K::Tensor;
  if (k == "graph") return K::Graph;
  if (k == "floats") return K::Floats;
  if (k == "ints") return K::Ints;
  if (k == "strings") return K::Strings;
  if (k == "tensors") return K::Tensors;
  if (k == "graphs") return K::Graphs;
  if (k == "type_proto") return K::TypeProto;
  if (k == "type_protos") return K::TypeProtos;
  if (k == "sparse_tensor" || k == "sparse_tensors") return K::SparseTensor;
  fail(ErrorCode::Internal, "schema table: unknown attribute kind '{}'", k);
}

Attribute parse_default(const std::string& name, Attribute::Kind kind, string_view v) {
  using K = Attribute::Kind;
  switch (kind) {
    case K::Int: return Attribute::make_int(name, to_int(v));
    case K::Float: return Attribute::make_float(name, to_float(v));
    case K::String: return Attribute::make_string(name, unpct(v));
    case K::Ints: {
      std::vector<int64_t> xs;
      if (!v.empty())
        for (auto p : split(v, ',')) xs.push_back(to_int(p));
      return Attribute::make_ints(name, std::move(xs));
    }
    case K::Floats: {
      std::vector<float> xs;
      if (!v.empty())
        for (auto p : split(v, ',')) xs.push_back(to_float(p));
      return Attribute::make_floats(name, std::move(xs));
    }
    case K::Strings: {
      std::vector<std::string> xs;
      if (!v.empty())
        for (auto p : split(v, ',')) xs.push_back(unpct(p));
      return Attribute::make_strings(name, std::move(xs));
    }
    default: fail(ErrorCode::Internal, "schema table: no default of kind {} ('{}')", attribute_kind_name(kind), name);
  }
}

FormalParameter parse_param(const std::vector<string_view>& f) {
  FormalParameter p;
  p.name = std::string(f[1]);
  p.type_str = std::string(f[2]);
  p.option = f[3] == "s" ? FormalParameter::Option::Single
             : f[3] == "o" ? FormalParameter::Option::Optional
                           : FormalParameter::Option::Variadic;
  p.homogeneous = f[4] == "1";
  p.min_arity = static_cast<int>(to_int(f[5]));
  return p;
}

void parse_table(const std::function<void(OpSchema)>& add) {
  std::vector<std::vector<std::string>> lists;
  OpSchema cur;
  bool have = false;
  auto flush = [&] {
    if (have) add(std::move(cur));
    cur = OpSchema();
    have = false;
  };
  for (const char* chunk : kSchemaTableChunks) {
    string_view text(chunk);
    size_t pos = 0;
    while (pos < text.size()) {
      size_t nl = text.find('\n', pos);
      if (nl == string_view::npos) nl = text.size();
      string_view line = text.substr(pos, nl - pos);
      pos = nl + 1;
      if (line.empty()) continue;
      auto f = split(line, ' ');
      switch (f[0][0]) {
        case 'L': {
          size_t id = static_cast<size_t>(to_int(f[1]));
          if (lists.size() <= id) lists.resize(id + 1);
          for (size_t k = 2; k < f.size(); ++k) lists[id].emplace_back(f[k]);
          break;
        }
        case 'S':
          flush();
          have = true;
          cur.domain = f[1] == "-" ? "" : std::string(f[1]);
          cur.name = std::string(f[2]);
          cur.since_version = static_cast<int>(to_int(f[3]));
          cur.min_inputs = static_cast<int>(to_int(f[4]));
          cur.max_inputs = static_cast<int>(to_int(f[5]));
          cur.min_outputs = static_cast<int>(to_int(f[6]));
          cur.max_outputs = static_cast<int>(to_int(f[7]));
          cur.deprecated = f[8] == "d";
          break;
        case 'I': cur.inputs.push_back(parse_param(f)); break;
        case 'O': cur.outputs.push_back(parse_param(f)); break;
        case 'A': {
          AttributeSchema a;
          a.name = std::string(f[1]);
          a.kind = parse_kind(f[2]);
          a.required = f[3] == "1";
          if (f.size() > 4 && !f[4].empty() && f[4][0] == '=')
            a.default_value = parse_default(a.name, a.kind, f[4].substr(1));
          cur.attributes.push_back(std::move(a));
          break;
        }
        case 'T': {
          TypeConstraint tc;
          tc.name = std::string(f[1]);
          tc.allowed = lists.at(static_cast<size_t>(to_int(f[2])));
          cur.type_constraints.push_back(std::move(tc));
          break;
        }
        default: fail(ErrorCode::Internal, "schema table: bad line '{}'", line);
      }
    }
  }
  flush();
}

}  // namespace

const AttributeSchema* OpSchema::attribute(const std::string& n) const {
  for (const auto& a : attributes)
    if (a.name == n) return &a;
  return nullptr;
}

std::string canonical_domain(const std::string& domain) {
  return domain == "ai.onnx" ? std::string() : domain;
}

SchemaRegistry::SchemaRegistry() {
  parse_table([this](OpSchema s) { add(std::move(s)); });
}

const SchemaRegistry& SchemaRegistry::instance() {
  static const SchemaRegistry registry;
  return registry;
}

void SchemaRegistry::add(OpSchema schema) {
  schema.domain = canonical_domain(schema.domain);
  if (!schema.infer) schema.infer = detail::inference_for(schema.domain, schema.name);
  auto& vs = ops_[{schema.domain, schema.name}];
  auto it = vs.begin();
  while (it != vs.end() && it->since_version < schema.since_version) ++it;
  if (it != vs.end() && it->since_version == schema.since_version)
    *it = std::move(schema);
  else
    vs.insert(it, std::move(schema));
}

const OpSchema* SchemaRegistry::find(const std::string& domain, const std::string& op, int opset) const {
  auto it = ops_.find({canonical_domain(domain), op});
  if (it == ops_.end()) return nullptr;
  const OpSchema* best = nullptr;
  for (const auto& s : it->second)
    if (s.since_version <= opset) best = &s;
  return best;
}

std::vector<const OpSchema*> SchemaRegistry::versions(const std::string& domain, const std::string& op) const {
  std::vector<const OpSchema*> out;
  auto it = ops_.find({canonical_domain(domain), op});
  if (it != ops_.end())
    for (const auto& s : it->second) out.push_back(&s);
  return out;
}

std::vector<const OpSchema*> SchemaRegistry::latest() const {
  std::vector<const OpSchema*> out;
  for (const auto& [key, vs] : ops_)
    if (!vs.empty()) out.push_back(&vs.back());
  return out;  // std::map order: domain, then name
}

int SchemaRegistry::max_opset(const std::string& domain) const {
  std::string d = canonical_domain(domain);
  int best = 0;
  for (auto it = ops_.lower_bound({d, ""}); it != ops_.end() && it->first.first == d; ++it)
    for (const auto& s : it->second) best = std::max(best, s.since_version);
  return best;
}

}  // namespace hodu
