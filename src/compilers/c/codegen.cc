// The code generator proper: walks the prepared graph, groups elementwise
// chains into single loops, emits one kernel call per remaining node over
// arena buffers, plans the arena, and lays out the weights blob.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <set>

#include "compilers/c/api_emitter.h"
#include "compilers/c/c_codegen.h"
#include "compilers/c/codegen_context.h"
#include "compilers/c/graph_prep.h"
#include "compilers/c/memory_plan.h"
#include "compilers/c/weight_store.h"
#include "core/error.h"

namespace hodu::compilers::c {

const char* kernel_library_source() {
  static const char* text =
#include "kernel_hodu_kernels.inc"
      ;
  return text;
}

const char* kernel_section_source(const std::string& name) {
  static const std::map<std::string, const char*> sections = {
      {"convert",
#include "kernel_hk_convert.inc"
      },
      {"ops",
#include "kernel_hk_ops.inc"
      },
      {"resample",
#include "kernel_hk_resample.inc"
      },
      {"window",
#include "kernel_hk_window.inc"
      },
      {"detect",
#include "kernel_hk_detect.inc"
      },
      {"ml",
#include "kernel_hk_ml.inc"
      },
      {"random",
#include "kernel_hk_random.inc"
      },
  };
  auto it = sections.find(name);
  HODU_CHECK(it != sections.end(), ErrorCode::Internal, "no kernel section '{}'", name);
  return it->second;
}

// The C sections use hodu's DType values.
static_assert(static_cast<int>(DType::Bool) == 1 && static_cast<int>(DType::F32) == 10 &&
              static_cast<int>(DType::I64) == 21 && static_cast<int>(DType::U2) == 25 &&
              static_cast<int>(DType::I2) == 26, "kernels/hk_convert.c HK_DT_* follow core/dtype.h");

const char* kernel_library_abi() {
  static const char* text =
#include "kernel_abi.inc"
      ;
  return text;
}

// ---- Context ----------------------------------------------------------------

const char* c_type(DType t) {
  switch (t) {
    case DType::F32: return "float";
    case DType::F64: return "double";
    case DType::I64: return "int64_t";
    case DType::I32: return "int32_t";
    case DType::I16: return "int16_t";
    case DType::I8: return "int8_t";
    case DType::U8: return "uint8_t";
    case DType::U16: return "uint16_t";
    case DType::U32: return "uint32_t";
    case DType::U64: return "uint64_t";
    case DType::Bool: return "uint8_t";
    // Storage only: C computes these through the kernel library's dtype section.
    case DType::F16: case DType::BF16: return "uint16_t";
    case DType::F8E4M3FN: case DType::F8E4M3FNUZ: case DType::F8E5M2: case DType::F8E5M2FNUZ: case DType::F8E8M0:
    case DType::F4E2M1: case DType::U4: case DType::I4: case DType::U2: case DType::I2:
      return "uint8_t";
    default: return nullptr;
  }
}

std::string c_string_literal(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') out.append(1, '\\').append(1, static_cast<char>(c));
    else if (c < 32 || c >= 127) out += fmt::format("\\{:03o}", c);
    else out += static_cast<char>(c);
  }
  out.append(1, '"');
  return out;
}

std::string c_float(double v) {
  if (std::isnan(v)) return "NAN";
  if (std::isinf(v)) return v > 0 ? "INFINITY" : "(-INFINITY)";
  std::string s = fmt::format("{:.9g}", static_cast<float>(v));
  return s + (s.find_first_of(".en") == std::string::npos ? ".f" : "f");  // "2" → "2.f", a float literal
}

SymInt storage_bytes(DType t, const SymInt& n) {
  if (n.known()) return static_cast<int64_t>(dtype_storage_bytes(t, n.value()));
  if (dtype_bits(t) % 8 != 0) return ceildiv(n * dtype_bits(t), 8);  // packed
  return n * (dtype_bits(t) / 8);
}

Codegen::Codegen(const Graph& g, const CodegenOptions& o) : graph(g), options(o) {
  // The blob, sealed by generate_c. Reserved for every initializer up front: growing it
  // by doubling held the old and the new buffer at once (GPT-2's build peaked 470 MB higher).
  size_t estimate = kWeightsHeaderBytes;
  for (const auto& [name, t] : g.initializers) estimate += (t.nbytes() + 63) / 64 * 64;
  if (!o.weight_store) weights.reserve(estimate);
  weights.assign(kWeightsHeaderBytes, '\0');
  for (const auto& [name, t] : g.initializers) constants[name] = t;
  for (size_t i = 0; i < g.inputs.size(); ++i)
    if (!g.initializer(g.inputs[i].name)) {
      ValueInfo v;
      v.kind = ValueInfo::Kind::Input;
      v.index = static_cast<int>(input_names.size());
      v.dtype = g.inputs[i].type.dtype;
      // Free dims: generate_c fills in the run-time dims (graph_prep's SymInfo).
      if (auto st = g.inputs[i].type.shape.to_static()) v.shape = to_sym(*st);
      values[g.inputs[i].name] = v;
      input_names.push_back(g.inputs[i].name);
    }
}

const ValueInfo& Codegen::info(const std::string& name) {
  if (auto it = values.find(name); it != values.end()) return it->second;
  if (auto it = constants.find(name); it != constants.end()) {
    ValueInfo v;
    v.kind = ValueInfo::Kind::Weight;
    v.dtype = it->second.dtype();
    v.shape = to_sym(it->second.shape());
    v.index = add_weight(it->second);
    return values[name] = v;
  }
  fail(ErrorCode::Internal, "codegen: value '{}' has no storage yet", name);
}

DType Codegen::dtype_of(const std::string& name) const {
  if (auto it = values.find(name); it != values.end()) return it->second.dtype;
  if (auto it = constants.find(name); it != constants.end()) return it->second.dtype();
  auto t = graph.type_of(name);
  HODU_CHECK(t && t->is_tensor(), ErrorCode::Unsupported, "value '{}' is not a tensor of known type", name);
  return t->dtype;
}

std::string runtime_check(const SymTable::Statement& check, int status) {
  // printf format: the message's own '%' doubled, its %lld kept for the arguments.
  std::string fmt_text;
  const std::string& m = check.message;
  for (size_t i = 0; i < m.size(); ++i) {
    if (m.compare(i, 4, "%lld") == 0) {
      fmt_text += "%lld";
      i += 3;
    } else {
      fmt_text += m[i] == '%' ? std::string("%%") : std::string(1, m[i]);
    }
  }
  std::string args;
  for (const auto& a : check.args) args += fmt::format(", (long long)({})", a);
  return fmt::format("if (!({})) return hm_fail(m, {}, {}{});", check.cond, status, c_string_literal(fmt_text), args);
}

void Codegen::read_late(const std::string& name) {
  if (!late_read.insert(name).second) return;
  const SymShape& atoms = late_values.at(name);
  std::string p = ptr(name);
  for (size_t k = 0; k < atoms.size(); ++k) {
    const auto& t = atoms[k].terms();
    HODU_CHECK(t.size() == 1 && t[0].atoms.size() == 1 && t[0].coef == 1, ErrorCode::Internal,
               "late value '{}': element {} is no late dim", name, k);
    emit(fmt::format("S[{}] = (int64_t){}[{}];", t[0].atoms[0], p, k));
  }
}

std::string Codegen::late_alloc(const SymInt& bytes, const char* type) {
  int k = late_values_count++;
  emit(fmt::format("L[{0}] = hm_late(m, {1});\n  if (!L[{0}]) return hm_fail(m, 2, \"out of memory: %lld bytes for a "
                   "value whose size is known only while running\", (long long)({1}));",
                   k, bytes));
  return fmt::format("(({}*)L[{}])", type, k);
}

void Codegen::materialize(const std::string& name) {
  if (values.count(name)) return;
  auto it = sym_values.find(name);
  HODU_CHECK(it != sym_values.end(), ErrorCode::Internal, "codegen: '{}' is no size value", name);
  DType dt = dtype_of(name);
  define(name, dt, shape_of(name));
  std::string p = ptr(name);
  for (size_t k = 0; k < it->second.size(); ++k)
    emit(fmt::format("{}[{}] = ({}){};", p, k, c_type(dt), it->second[k]));
}

SymShape sym_ints(Codegen& cg, const Node& n, size_t i) {
  HODU_CHECK(n.has_input(i), ErrorCode::InvalidModel, "{}: input {} is missing", n.describe(), i);
  const std::string& v = n.inputs[i];
  if (cg.is_constant(v)) return to_sym(cg.constant(v).to_int64s());
  if (auto it = cg.sym_values.find(v); it != cg.sym_values.end()) return it->second;
  if (cg.late_values.count(v)) {
    cg.read_late(v);
    return cg.late_values.at(v);
  }
  // Data read as sizes where the output's shape is known anyway (declared by the model):
  // late dims read here.
  DType dt = cg.dtype_of(v);
  auto shape = to_static(cg.shape_of(v));
  if ((dt == DType::I64 || dt == DType::I32) && shape && shape_numel(*shape) <= 64 && current_sym_table()) {
    SymShape atoms;
    for (int64_t k = 0; k < shape_numel(*shape); ++k)
      atoms.push_back(SymInt::dim(current_sym_table()->late_dim(std::nullopt)));
    cg.late_values[v] = atoms;
    cg.read_late(v);
    return atoms;
  }
  fail(ErrorCode::Unsupported, "{}: compiled code needs input {} ('{}') to be a constant or computed from shapes",
       n.describe(), i, n.inputs[i]);
}

SymInt slice_start(const SymInt& start, const SymInt& dim, int64_t step) {
  return slice_index(start, dim, false, step);
}

SymShape Codegen::shape_of(const std::string& name) const {
  if (auto it = values.find(name); it != values.end()) return it->second.shape;
  if (auto it = sym_shapes.find(name); it != sym_shapes.end()) return it->second;
  if (auto it = constants.find(name); it != constants.end()) return to_sym(it->second.shape());
  auto t = graph.type_of(name);
  HODU_CHECK(t && t->is_tensor(), ErrorCode::Unsupported, "value '{}' is not a tensor of known type", name);
  auto s = t->shape.to_static();
  HODU_CHECK(s.has_value(), ErrorCode::Unsupported,
             "value '{}' has shape {} after binding the inputs: compiled code needs static shapes", name,
             t->shape.to_string());
  return to_sym(*s);
}

int Codegen::add_weight(const Tensor& t) {
  Tensor c = t.contiguous();
  HODU_CHECK(c_type(c.dtype()) != nullptr, ErrorCode::Unsupported, "constant of dtype {} cannot be compiled",
             dtype_name(c.dtype()));
  int64_t off;
  if (options.weight_store) {
    off = options.weight_store->place(c.raw_data(), c.nbytes());
  } else {
    off = static_cast<int64_t>(weights.size()) - kWeightsHeaderBytes;  // the blob's header comes first
    weights.append(static_cast<const char*>(c.raw_data()), c.nbytes());
    weights.resize((weights.size() + 63) / 64 * 64, '\0');
  }
  weight_offsets.push_back(off);
  weight_bytes[off] = static_cast<int64_t>(c.nbytes());
  return static_cast<int>(weight_offsets.size()) - 1;
}

int Codegen::new_buffer(const SymInt& bytes, int first_step) {
  buffers.push_back({sym_max(bytes, 1), first_step, first_step, -1});
  return static_cast<int>(buffers.size()) - 1;
}

void Codegen::define(const std::string& name, DType dt, const SymShape& shape, int reuse_buffer) {
  ValueInfo v;
  v.kind = ValueInfo::Kind::Arena;
  v.dtype = dt;
  v.shape = shape;
  SymInt bytes = storage_bytes(dt, numel(shape));
  if (bytes.late()) {  // sized while running: memory of its own, taken here
    v.kind = ValueInfo::Kind::Late;
    v.index = late_values_count;
    late_alloc(bytes, "void");
    values[name] = v;
    return;
  }
  v.index = new_buffer(bytes, step);
  buffers[v.index].reuse = reuse_buffer;
  values[name] = v;
}

void Codegen::define_alias(const std::string& name, const std::string& of, const SymShape& shape) {
  ValueInfo v = info(of);
  v.shape = shape;
  values[name] = v;
}

std::string Codegen::ptr(const std::string& name) {
  const ValueInfo& v = info(name);
  const char* t = c_type(v.dtype);
  HODU_CHECK(t, ErrorCode::Unsupported, "value '{}' has dtype {}, which compiled code does not support", name,
             dtype_name(v.dtype));
  touch(name);
  switch (v.kind) {
    case ValueInfo::Kind::Input: return fmt::format("((const {}*)in{})", t, v.index);
    case ValueInfo::Kind::Weight: return fmt::format("((const {}*)(W + {}))", t, weight_offsets[v.index]);
    case ValueInfo::Kind::Arena:
      return !v.offset.is(0) ? fmt::format("(({}*)(A + @{}@ + {}))", t, v.index, v.offset)
                             : fmt::format("(({}*)(A + @{}@))", t, v.index);
    case ValueInfo::Kind::Late: return fmt::format("(({}*)L[{}])", t, v.index);
  }
  return "";
}

std::string Codegen::scratch(const SymInt& bytes) {
  if (bytes.late()) return late_alloc(bytes, "float");
  int b = new_buffer(bytes, step);
  return fmt::format("((float*)(A + @{}@))", b);
}

void Codegen::touch(const std::string& name) {
  const ValueInfo& v = values.at(name);
  if (v.kind == ValueInfo::Kind::Arena) buffers[v.index].last_step = std::max(buffers[v.index].last_step, step);
}

std::string Codegen::table(const std::vector<int64_t>& v) {
  std::string name = fmt::format("T{}", table_count++);
  std::string body;
  for (size_t i = 0; i < v.size(); ++i) body += fmt::format("{}{}{}", i ? ", " : "", v[i], v[i] < -2147483647 ? "LL" : "");
  if (v.empty()) body.assign(1, '0');
  tables += fmt::format("static const int64_t {}[] = {{{}}};\n", name, body);
  return name;
}

std::string Codegen::table(const SymShape& v) {
  if (auto s = to_static(v)) return table(*s);
  std::string name = fmt::format("T{}", table_count++);
  std::string body;
  for (size_t i = 0; i < v.size(); ++i) body += fmt::format("{}{}", i ? ", " : "", v[i]);
  emit(fmt::format("const int64_t {}[] = {{{}}};", name, body));
  return name;
}

std::string Codegen::float_table(const std::vector<float>& v) {
  std::string name = fmt::format("T{}", table_count++);
  std::string body;
  for (size_t i = 0; i < v.size(); ++i) body += fmt::format("{}{}", i ? ", " : "", c_float(v[i]));
  if (v.empty()) body.assign(1, '0');
  tables += fmt::format("static const float {}[] = {{{}}};\n", name, body);
  return name;
}

void Codegen::emit(const std::string& line) {
  code.append("  ").append(line).append("\n");
}

void Codegen::emit_checked(const std::string& call, const Node& n, const std::string& what) {
  code += fmt::format("  if ({}) return hm_fail(m, 4, \"%s\", {});\n", call, c_string_literal(n.describe() + ": " + what));
}

bool Codegen::reusable(const std::string& name, const SymInt& bytes) const {
  if (options.opt_level < 1) return false;
  auto it = values.find(name);
  if (it == values.end() || it->second.kind != ValueInfo::Kind::Arena || !it->second.offset.is(0) ||
      concat_parts.count(name))
    return false;
  auto root = alias_root.find(name);
  auto lu = last_use.find(root == alias_root.end() ? name : root->second);
  // Dies at this step (its last reader is this step) and is not a graph output.
  if (lu == last_use.end() || lu->second != step) return false;
  const PlanBuffer& b = buffers[it->second.index];
  return b.last_step <= step && provably_ge(b.bytes, bytes);
}

int Codegen::buffer_of(const std::string& name) const { return values.at(name).index; }

bool Codegen::sizes_read_while_running(const Node& n) const {
  for (const auto* names : {&n.inputs, &n.outputs})
    for (const auto& v : *names) {
      if (v.empty()) continue;
      for (const SymInt& d : shape_of(v))
        if (d.late()) return true;
    }
  return false;
}

std::string Codegen::library_op(const Node& n, const std::string& desc_type, const std::string& desc,
                                const std::string& prepare_call) {
  // Its descriptor would be filled with sizes not computed yet (a wrong answer, found on
  // AffineGrid's expanded form). Products take the portable code instead (emit_matmul).
  HODU_CHECK(!sizes_read_while_running(n), ErrorCode::Unsupported,
             "{}: its sizes are read from the model's data while running, and the kernel library prepares "
             "its ops before that: not supported yet in the default mode (build with --standalone)",
             n.describe());
  std::string op = fmt::format("m->ops[{}]", library_ops++);
  std::string call = prepare_call;
  call.replace(call.find("&OP"), 3, "&" + op);
  // The weights a prepared op copied (every "(W + offset)" argument): their pages of the
  // embedded blob are given back (hm_release), or RSS holds the model's weights twice.
  std::string release;
  for (size_t at = call.find("(W + "); at != std::string::npos; at = call.find("(W + ", at + 5)) {
    size_t end = call.find(')', at);
    if (end == std::string::npos) break;
    std::string digits = call.substr(at + 5, end - at - 5);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    auto w = weight_bytes.find(std::stoll(digits));
    if (w != weight_bytes.end()) release += fmt::format("    if ({}) hm_release(W + {}, {});\n", op, w->first, w->second);
  }
  prepare += fmt::format("  {{\n    static const {} d = {{{}}};\n"
                         "    if ((st = hm_prepared(m, {}, {}, errbuf, errbuf_size))) return st;\n{}  }}\n",
                         desc_type, desc, call, c_string_literal(n.describe()), release);
  return op;
}

void Codegen::emit_library_call(const Node& n, const std::string& op, const std::string& library_call,
                                const std::string& portable) {
  // A single statement, or lines captured from the run body (already indented).
  std::string fallback = portable.empty() || portable.back() != '\n' ? "    " + portable + "\n" : portable;
  code += fmt::format("  if ({}) {{\n    if ({}) return hm_kernel_fail(m, {});\n  }} else {{\n{}  }}\n", op,
                      library_call, c_string_literal(n.describe()), fallback);
}

}  // namespace hodu::compilers::c
