// HoduScript printer: Model → text. The grammar is in docs/hoduscript.md; the
// parser (hoduscript_parser.cc) reads back exactly what this writes.
#include <charconv>
#include <cmath>
#include <cstring>
#include <set>

#include "core/float_convert.h"
#include "ir/hoduscript.h"

namespace hodu {

// Helpers shared with the parser (declared again there; no header on purpose:
// they are private to the two HoduScript files).
namespace hs_detail {

bool is_narrow_float(DType t) {
  switch (t) {
    case DType::F8E4M3FN: case DType::F8E4M3FNUZ: case DType::F8E5M2: case DType::F8E5M2FNUZ:
    case DType::F8E8M0: case DType::F4E2M1: case DType::BF16: case DType::F16:
      return true;
    default:
      return false;
  }
}

// Narrow float bits → f32 (exact).
float narrow_to_f32(DType t, uint32_t bits) {
  switch (t) {
    case DType::F8E4M3FN: return f8e4m3fn_to_f32(static_cast<uint8_t>(bits));
    case DType::F8E4M3FNUZ: return f8e4m3fnuz_to_f32(static_cast<uint8_t>(bits));
    case DType::F8E5M2: return f8e5m2_to_f32(static_cast<uint8_t>(bits));
    case DType::F8E5M2FNUZ: return f8e5m2fnuz_to_f32(static_cast<uint8_t>(bits));
    case DType::F8E8M0: return f8e8m0_to_f32(static_cast<uint8_t>(bits));
    case DType::F4E2M1: return f4e2m1_to_f32(static_cast<uint8_t>(bits & 0xF));
    case DType::BF16: return bf16_to_f32(static_cast<uint16_t>(bits));
    case DType::F16: return f16_to_f32(static_cast<uint16_t>(bits));
    default: return 0;
  }
}

// f32 → narrow float bits (round to nearest even, no saturation).
uint32_t f32_to_narrow(DType t, float v) {
  switch (t) {
    case DType::F8E4M3FN: return f32_to_f8e4m3fn(v, false);
    case DType::F8E4M3FNUZ: return f32_to_f8e4m3fnuz(v, false);
    case DType::F8E5M2: return f32_to_f8e5m2(v, false);
    case DType::F8E5M2FNUZ: return f32_to_f8e5m2fnuz(v, false);
    case DType::F8E8M0: return f32_to_f8e8m0(v, false, true);
    case DType::F4E2M1: return f32_to_f4e2m1(v) & 0xF;
    case DType::BF16: return f32_to_bf16(v);
    case DType::F16: return f32_to_f16(v);
    default: return 0;
  }
}

}  // namespace hs_detail

namespace {

using hs_detail::is_narrow_float;

constexpr int kInlineElements = 32;  // larger numeric tensors are written as base64

bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_ident_char(char c) { return is_ident_start(c) || is_digit(c) || c == '.'; }
bool is_value_char(char c) { return is_ident_char(c) || c == '/'; }

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
        else out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// A name that may be written bare: [A-Za-z_][A-Za-z0-9_.]*, else quoted.
std::string name(std::string_view s) {
  bool bare = !s.empty() && is_ident_start(s[0]);
  for (char c : s) bare = bare && is_ident_char(c);
  return bare ? std::string(s) : quote(s);
}

// A value reference: %name, %"odd name".
std::string value_ref(std::string_view s) {
  bool bare = !s.empty();
  for (char c : s) bare = bare && is_value_char(c);
  return "%" + (bare ? std::string(s) : quote(s));
}

std::string use_ref(const std::string& s) { return s.empty() ? "_" : value_ref(s); }

std::string format_f32(float v, bool force_point) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  if (std::isnan(v)) {
    if (bits == 0x7fc00000u) return "nan";
    if (bits == 0xffc00000u) return "-nan";
    return fmt::format("nan(0x{:08x})", bits);
  }
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, r.ptr);
  if (force_point && s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string format_f64(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  if (std::isnan(v)) {
    if (bits == 0x7ff8000000000000ull) return "nan";
    if (bits == 0xfff8000000000000ull) return "-nan";
    return fmt::format("nan(0x{:016x})", bits);
  }
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string format_dim(const Dim& d) {
  if (d.symbol.empty()) return d.value == -1 ? "?" : std::to_string(d.value);
  if (d.value == -1) return name(d.symbol);
  return name(d.symbol) + "=" + std::to_string(d.value);
}

std::string format_shape(const Shape& s) {
  if (!s.rank_known()) return "[*]";
  std::string out = "[";
  for (size_t i = 0; i < s.dims().size(); ++i) {
    if (i) out += ", ";
    out += format_dim(s.dims()[i]);
  }
  return out + "]";
}

std::string format_dtype(DType t) { return std::string(dtype_name(t)); }

std::string format_type(const ValueType& t) {
  using K = ValueType::Kind;
  auto elem = [&](const char* kw) {
    return t.elem ? fmt::format("{}<{}>", kw, format_type(*t.elem)) : std::string(kw);
  };
  switch (t.kind) {
    case K::Unknown: return "?";
    case K::Tensor: return format_dtype(t.dtype) + format_shape(t.shape);
    case K::SparseTensor: return "sparse<" + format_dtype(t.dtype) + format_shape(t.shape) + ">";
    case K::Sequence: return elem("seq");
    case K::Optional: return elem("opt");
    case K::Map:
      return "map<" + format_dtype(t.key_type) + (t.elem ? ", " + format_type(*t.elem) : std::string()) + ">";
  }
  return "?";
}

std::string base64(const uint8_t* p, size_t n) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= n; i += 3) {
    uint32_t v = (uint32_t(p[i]) << 16) | (uint32_t(p[i + 1]) << 8) | p[i + 2];
    out += k[v >> 18]; out += k[(v >> 12) & 63]; out += k[(v >> 6) & 63]; out += k[v & 63];
  }
  if (n - i == 1) {
    uint32_t v = uint32_t(p[i]) << 16;
    out += k[v >> 18]; out += k[(v >> 12) & 63]; out += "==";
  } else if (n - i == 2) {
    uint32_t v = (uint32_t(p[i]) << 16) | (uint32_t(p[i + 1]) << 8);
    out += k[v >> 18]; out += k[(v >> 12) & 63]; out += k[(v >> 6) & 63]; out += '=';
  }
  return out;
}

template <typename T>
T load(const uint8_t* base, int64_t i) {
  T v;
  std::memcpy(&v, base + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return v;
}

uint32_t nibble(const uint8_t* base, int64_t i) { return (base[i / 2] >> ((i % 2) * 4)) & 0xF; }

// One element of a numeric tensor, as the parser reads it back for `t`.
std::string format_element(DType t, const uint8_t* b, int64_t i) {
  switch (t) {
    case DType::Bool: {
      uint8_t v = b[i];
      return v == 0 ? "false" : v == 1 ? "true" : std::to_string(v);
    }
    case DType::U8: return std::to_string(load<uint8_t>(b, i));
    case DType::U16: return std::to_string(load<uint16_t>(b, i));
    case DType::U32: return std::to_string(load<uint32_t>(b, i));
    case DType::U64: return std::to_string(load<uint64_t>(b, i));
    case DType::I8: return std::to_string(load<int8_t>(b, i));
    case DType::I16: return std::to_string(load<int16_t>(b, i));
    case DType::I32: return std::to_string(load<int32_t>(b, i));
    case DType::I64: return std::to_string(load<int64_t>(b, i));
    case DType::U4: return std::to_string(nibble(b, i));
    case DType::I4: {
      int v = static_cast<int>(nibble(b, i));
      return std::to_string(v >= 8 ? v - 16 : v);
    }
    case DType::F32: return format_f32(load<float>(b, i), false);
    case DType::F64: return format_f64(load<double>(b, i));
    case DType::C64:
      return "(" + format_f32(load<float>(b, 2 * i), false) + ", " + format_f32(load<float>(b, 2 * i + 1), false) + ")";
    case DType::C128:
      return "(" + format_f64(load<double>(b, 2 * i)) + ", " + format_f64(load<double>(b, 2 * i + 1)) + ")";
    default: break;
  }
  if (is_narrow_float(t)) {
    uint32_t bits = t == DType::F4E2M1 ? nibble(b, i)
                    : dtype_bits(t) == 16 ? load<uint16_t>(b, i)
                                          : b[i];
    float v = hs_detail::narrow_to_f32(t, bits);
    if (hs_detail::f32_to_narrow(t, v) == bits) return format_f32(v, false);
    return fmt::format("0x{:x}", bits);  // raw bits (a NaN payload the f32 round trip would change)
  }
  return "?";
}

class Printer {
 public:
  std::string out;

  void line(int indent, const std::string& s) {
    out.append(static_cast<size_t>(indent) * 2, ' ');
    out += s;
    out += '\n';
  }

  std::string tensor(const Tensor& t0, int indent) {
    if (!t0.defined()) return "<tensor>";
    Tensor t = t0.contiguous();
    std::string head = format_dtype(t.dtype()) + shape_to_string(t.shape());
    int64_t n = t.numel();
    if (t.dtype() == DType::String) {
      std::string s = head + " [";
      const std::string* v = n ? t.string_data() : nullptr;
      for (int64_t i = 0; i < n; ++i) s += (i ? ", " : "") + quote(v[i]);
      return s + "]";
    }
    const auto* b = static_cast<const uint8_t*>(n ? t.raw_data() : nullptr);
    bool inline_ok = n <= kInlineElements;
    // Odd-sized packed 4-bit tensors: the padding nibble is part of the bytes.
    if (inline_ok && dtype_is_packed4(t.dtype()) && n % 2 == 1 && (b[n / 2] >> 4) != 0) inline_ok = false;
    if (!inline_ok) return head + " base64 \"" + base64(b, t.nbytes()) + "\"";
    std::string s = head + " [";
    for (int64_t i = 0; i < n; ++i) s += (i ? ", " : "") + format_element(t.dtype(), b, i);
    return s + "]";
  }

  std::string attr_value(const Attribute& a, int indent) {
    using K = Attribute::Kind;
    auto kind_kw = [&] { return fmt::format("<{}>", attribute_kind_name(a.kind)); };
    bool by_ref = !a.ref_attr_name.empty();
    switch (a.kind) {
      case K::Undefined: return kind_kw();
      case K::Int: return by_ref && a.i == 0 ? kind_kw() : std::to_string(a.i);
      case K::Float: {
        uint32_t bits;
        std::memcpy(&bits, &a.f, 4);
        return by_ref && bits == 0 ? kind_kw() : format_f32(a.f, true);
      }
      case K::String: return by_ref && a.s.empty() ? kind_kw() : quote(a.s);
      case K::Tensor: return a.t.defined() ? tensor(a.t, indent) : kind_kw();
      case K::SparseTensor: return a.t.defined() ? "sparse " + tensor(a.t, indent) : kind_kw();
      case K::Graph: return a.g ? graph(*a.g, indent) : kind_kw();
      case K::TypeProto: return a.types.size() == 1 ? "type " + format_type(a.types[0]) : kind_kw();
      case K::Floats: case K::Ints: case K::Strings: case K::Tensors: case K::Graphs: case K::TypeProtos:
        break;
    }
    std::vector<std::string> items;
    switch (a.kind) {
      case K::Floats: for (float f : a.floats) items.push_back(format_f32(f, true)); break;
      case K::Ints: for (int64_t v : a.ints) items.push_back(std::to_string(v)); break;
      case K::Strings: for (const auto& v : a.strings) items.push_back(quote(v)); break;
      case K::Tensors: for (const auto& v : a.tensors) items.push_back(tensor(v, indent)); break;
      case K::Graphs: for (const auto& v : a.graphs) items.push_back(v ? graph(*v, indent) : "<graph>"); break;
      case K::TypeProtos: for (const auto& v : a.types) items.push_back("type " + format_type(v)); break;
      default: break;
    }
    if (items.empty()) return kind_kw();
    return fmt::format("[{}]", fmt::join(items, ", "));
  }

  std::string attributes(const std::vector<Attribute>& attrs, int indent) {
    std::vector<std::string> items;
    for (const auto& a : attrs) {
      std::string s = name(a.name) + ": " + attr_value(a, indent);
      if (!a.ref_attr_name.empty()) s += " @" + name(a.ref_attr_name);
      if (!a.doc.empty()) s += " doc " + quote(a.doc);
      items.push_back(std::move(s));
    }
    return fmt::format("{{{}}}", fmt::join(items, ", "));
  }

  std::string params(const std::vector<Value>& vs) {
    std::vector<std::string> items;
    for (const auto& v : vs) {
      std::string s = value_ref(v.name) + ": " + format_type(v.type);
      if (!v.doc.empty()) s += " doc " + quote(v.doc);
      items.push_back(std::move(s));
    }
    return fmt::format("({})", fmt::join(items, ", "));
  }

  // A graph: header line + body, ending with "}" (no newline) at `indent`.
  std::string graph(const Graph& g, int indent) {
    Printer p;
    std::string header = "graph " + (g.name.empty() ? std::string() : name(g.name)) + params(g.inputs) + " -> " +
                         params(g.outputs) + " {";
    p.out = header + "\n";
    p.body(g, indent + 1);
    p.out.append(static_cast<size_t>(indent) * 2, ' ');
    p.out += "}";
    return p.out;
  }

  void body(const Graph& g, int indent) {
    if (!g.doc.empty()) line(indent, "doc " + quote(g.doc));
    std::set<std::string> produced;
    for (const auto& n : g.nodes)
      for (const auto& o : n.outputs)
        if (!o.empty()) produced.insert(o);
    for (const auto& [k, t] : g.value_types)
      if (!produced.count(k)) line(indent, value_ref(k) + ": " + format_type(t));
    for (const auto& [k, t] : g.initializers) line(indent, "init " + value_ref(k) + " = " + tensor(t, indent));
    std::set<std::string> annotated;
    for (const auto& n : g.nodes) {
      std::string s;
      if (n.outputs.empty()) s = "()";
      for (size_t i = 0; i < n.outputs.size(); ++i) {
        if (i) s += ", ";
        const std::string& o = n.outputs[i];
        s += use_ref(o);
        if (o.empty()) continue;
        auto it = g.value_types.find(o);
        if (it != g.value_types.end() && annotated.insert(o).second) s += ": " + format_type(it->second);
      }
      s += " = ";
      if (!n.domain.empty()) s += name(n.domain) + "::";
      s += name(n.op_type) + "(";
      for (size_t i = 0; i < n.inputs.size(); ++i) s += (i ? ", " : "") + use_ref(n.inputs[i]);
      s += ")";
      if (!n.attributes.empty()) s += " " + attributes(n.attributes, indent);
      if (!n.name.empty()) s += " name " + quote(n.name);
      if (!n.doc.empty()) s += " doc " + quote(n.doc);
      line(indent, s);
    }
  }
};

}  // namespace

std::string print_hoduscript(const Model& m) {
  Printer p;
  p.line(0, "hodu 1");
  std::string head = "model ir " + std::to_string(m.ir_version);
  if (!m.opset_imports.empty()) {
    std::vector<std::string> items;
    for (const auto& [d, v] : m.opset_imports) items.push_back(d.empty() ? std::to_string(v) : name(d) + " " + std::to_string(v));
    head += " opset " + fmt::format("{}", fmt::join(items, ", "));
  }
  p.line(0, head);
  if (!m.producer_name.empty() || !m.producer_version.empty())
    p.line(1, "producer " + quote(m.producer_name) + " " + quote(m.producer_version));
  if (!m.domain.empty()) p.line(1, "domain " + quote(m.domain));
  if (m.model_version != 0) p.line(1, "version " + std::to_string(m.model_version));
  if (!m.doc.empty()) p.line(1, "doc " + quote(m.doc));
  for (const auto& [k, v] : m.metadata) p.line(1, "meta " + quote(k) + " " + quote(v));
  p.out += p.graph(m.graph, 0);
  p.out += "\n";
  return p.out;
}

}  // namespace hodu
