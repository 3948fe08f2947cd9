// If, Loop and Scan as generated C (control_flow.h): each body a nested library.
#include "compilers/c/control_flow.h"

#include <fmt/format.h>

#include <cctype>
#include <climits>
#include <optional>
#include <set>

#include "compilers/c/codegen_context.h"
#include "core/dlpack_tensor.h"
#include "core/error.h"
#include "ir/schema.h"
#include "passes/graph_utils.h"

namespace hodu::compilers::c {
namespace {

// Helpers of the nodes' code, once per source (a nested body's copy gets its own names).
const char* kHelpers = R"HODU(
/* ---- control flow ---- */
#include <stdlib.h>
static void hm_cf_tensor(DLTensor* t, const void* data, int ndim, int64_t* shape, int code, int bits) {
  memset(t, 0, sizeof *t);
  t->data = (void*)data;
  t->device.device_type = kDLCPU;
  t->ndim = ndim;
  t->dtype.code = (uint8_t)code;
  t->dtype.bits = (uint8_t)bits;
  t->dtype.lanes = 1;
  t->shape = shape;
}
static size_t hm_cf_bytes(const DLTensor* t) {
  size_t n = 1;
  int d;
  for (d = 0; d < t->ndim; ++d) n *= (size_t)t->shape[d];
  return (n * t->dtype.bits + 7) / 8;
}
/* `bytes` of src at byte `at` of a heap buffer grown as needed; 0 when out of memory. */
static int hm_cf_keep(unsigned char** buf, size_t* cap, size_t at, const void* src, size_t bytes) {
  if (at + bytes > *cap) {
    size_t want = *cap * 2 > at + bytes ? *cap * 2 : at + bytes;
    unsigned char* p = (unsigned char*)realloc(*buf, want ? want : 1);
    if (!p) return 0;
    *buf = p;
    *cap = want;
  }
  if (bytes) memcpy(*buf + at, src, bytes);
  return 1;
}
/* Index `idx` of the middle dim of [outer, len, inner bytes] between a whole tensor and one
 * slice: take copies it out of `all`, put into it. */
static void hm_cf_take(unsigned char* slice, const unsigned char* all, int64_t outer, int64_t len, size_t inner,
                       int64_t idx) {
  int64_t o;
  for (o = 0; o < outer; ++o) memcpy(slice + (size_t)o * inner, all + ((size_t)(o * len + idx)) * inner, inner);
}
static void hm_cf_put(unsigned char* all, const unsigned char* slice, int64_t outer, int64_t len, size_t inner,
                      int64_t idx) {
  int64_t o;
  for (o = 0; o < outer; ++o) memcpy(all + ((size_t)(o * len + idx)) * inner, slice + (size_t)o * inner, inner);
}
)HODU";

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  return s;
}

bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// A nested body's C text with its file-scope names made its own: hm_*/HM_* (the API's
// statics and macros) and T<n> (tables) get `tag` after their prefix.
std::string rename_statics(const std::string& text, const std::string& tag) {
  std::string out;
  out.reserve(text.size() + text.size() / 16);
  for (size_t i = 0; i < text.size();) {
    if (!ident_char(text[i]) || (i > 0 && ident_char(text[i - 1]))) {
      out += text[i++];
      continue;
    }
    size_t e = i;
    while (e < text.size() && ident_char(text[e])) ++e;
    std::string id = text.substr(i, e - i);
    if (id.rfind("hm_", 0) == 0 || id.rfind("HM_", 0) == 0) {
      id = id.substr(0, 3) + tag + "_" + id.substr(3);
    } else if (id.size() > 1 && id[0] == 'T' && id.find_first_not_of("0123456789", 1) == std::string::npos) {
      id = "T" + tag + "_" + id.substr(1);
    }
    out += id;
    i = e;
  }
  return out;
}

// The names a body reads from outside it: its nodes' inputs, its outputs and (recursively)
// what its nested bodies read from outside them, less what it defines.
void collect_outer_reads(const Graph& body, std::set<std::string>& seen, std::vector<std::string>& out) {
  std::set<std::string> defined;
  for (const auto& in : body.inputs) defined.insert(in.name);
  for (const auto& [name, t] : body.initializers) defined.insert(name);
  for (const auto& n : body.nodes)
    for (const auto& o : n.outputs)
      if (!o.empty()) defined.insert(o);
  std::vector<std::string> reads;
  for (const auto& n : body.nodes) {
    reads.insert(reads.end(), n.inputs.begin(), n.inputs.end());
    for (const auto& a : n.attributes) {
      std::vector<const Graph*> subs;
      if (a.g) subs.push_back(a.g.get());
      for (const auto& g : a.graphs) subs.push_back(g.get());
      for (const Graph* g : subs) {
        std::set<std::string> inner_seen;
        collect_outer_reads(*g, inner_seen, reads);
      }
    }
  }
  for (const auto& o : body.outputs) reads.push_back(o.name);
  for (const auto& v : reads)
    if (!v.empty() && !defined.count(v) && seen.insert(v).second) out.push_back(v);
}

std::vector<std::string> outer_reads(const Graph& body) {
  std::set<std::string> seen;
  std::vector<std::string> out;
  collect_outer_reads(body, seen, out);
  return out;
}

// A body's formal input: its type as the node binds it; `shape` entries that are not known
// become free dims of the body (named by their C expression, so equal sizes share a dim).
struct Formal {
  DType dtype;
  SymShape shape;
  bool free_all = false;  // every dim free (a carried value whose shape may change)
};

Shape body_shape(const SymShape& s, bool free_all, const std::string& prefix,
                 std::map<std::string, std::string>& dim_names) {
  std::vector<Dim> dims;
  for (size_t d = 0; d < s.size(); ++d) {
    if (!free_all && s[d].known()) {
      dims.push_back(Dim(s[d].value()));
      continue;
    }
    std::string key = free_all ? prefix + std::to_string(d) : s[d].c();
    auto it = dim_names.find(key);
    if (it == dim_names.end()) it = dim_names.emplace(key, fmt::format("d{}", dim_names.size())).first;
    dims.push_back(Dim::sym(it->second));
  }
  return Shape(dims);
}

struct Body {
  std::string name;                   // API prefix of the nested library
  int field = -1;                     // m->cf<field>
  std::vector<std::string> captured;  // outer values passed after the formal inputs
  size_t num_outputs = 0;
};

std::pair<int, int> dl_code(DType t) {
  DLDataType d = to_dl_dtype(t, "a control-flow body's value");
  return {d.code, d.bits};
}

// Compiles `body` as a nested library of this source and adds its instance to the model's.
Body compile_body(Codegen& cg, const Node& n, const Graph& body, const std::vector<Formal>& formals,
                  const char* what) {
  HODU_CHECK(body.inputs.size() == formals.size(), ErrorCode::InvalidArgument,
             "{}: the {} has {} inputs, the op gives it {}", n.describe(), what, body.inputs.size(), formals.size());
  Body b;
  b.field = cg.cf_count++;
  b.name = fmt::format("{}_cf{}", cg.options.name, b.field);
  Model sub;
  sub.opset_imports = cg.model->opset_imports;
  sub.graph.name = b.name;
  std::map<std::string, std::string> dim_names;
  for (size_t i = 0; i < formals.size(); ++i) {
    Value v = body.inputs[i];
    v.type = ValueType::tensor(formals[i].dtype, body_shape(formals[i].shape, formals[i].free_all,
                                                              fmt::format("in{}_", i), dim_names));
    sub.graph.inputs.push_back(v);
  }
  for (const auto& [name, t] : body.initializers) sub.graph.set_initializer(name, t);
  for (const auto& r : outer_reads(body)) {
    if (cg.is_constant(r)) {
      sub.graph.set_initializer(r, cg.constant(r));
      continue;
    }
    if (cg.sym_values.count(r)) cg.materialize(r);
    HODU_CHECK(cg.values.count(r), ErrorCode::Unsupported, "{}: the {} reads '{}', which is not a tensor here",
               n.describe(), what, r);
    HODU_CHECK(!cg.strided_views.count(r), ErrorCode::Internal, "{}: the {} reads the strided view '{}'",
               n.describe(), what, r);
    Value v;
    v.name = r;
    v.type = ValueType::tensor(cg.dtype_of(r), body_shape(cg.shape_of(r), false, "", dim_names));
    sub.graph.inputs.push_back(v);
    b.captured.push_back(r);
  }
  sub.graph.nodes = body.nodes;
  sub.graph.outputs = body.outputs;
  for (auto& o : sub.graph.outputs) o.type = ValueType{};  // inferred afresh from the bound inputs
  b.num_outputs = body.outputs.size();

  CodegenOptions o = cg.options;
  o.name = b.name;
  o.nested = true;
  o.embed_weights = false;
  o.weights_file.clear();
  o.weight_store = nullptr;
  o.input_shapes.clear();
  o.dims.clear();
  GeneratedModel gm;
  try {
    gm = generate_c(sub, o);
  } catch (const Error& e) {
    throw e.with_context(fmt::format("{}: {}: ", n.describe(), what));
  }
  // The body's source with its header in place of the #include, no info tag of its own (a
  // loader finds the model's), its file-scope names its own.
  std::string src = gm.source;
  const std::string include = fmt::format("#include \"{}.h\"\n", b.name);
  size_t at = src.find(include);
  HODU_CHECK(at != std::string::npos, ErrorCode::Internal, "nested body source without its include");
  src.replace(at, include.size(), gm.header);
  std::string kept;
  for (size_t p = 0; p < src.size();) {
    size_t e = src.find('\n', p);
    e = e == std::string::npos ? src.size() : e + 1;
    std::string line = src.substr(p, e - p);
    if (line.find("HM_INFO_SECTION static const char") == std::string::npos) kept += line;
    p = e;
  }
  cg.functions += "\n/* ---- " + std::string(what) + " of " + c_string_literal(n.describe()).substr(1) + " */\n" +
                  rename_statics(kept, b.name);
  cg.kernel_sections.insert(gm.kernel_sections.begin(), gm.kernel_sections.end());
  // Its weights: a blob (header included) inside the model's, used in place.
  Tensor blob = Tensor::from_bytes(DType::U8, {static_cast<int64_t>(gm.weights.size())}, gm.weights.data(),
                                   gm.weights.size());
  int w = cg.add_weight(blob);
  cg.cf_fields += fmt::format("  struct {}_instance* cf{};\n", b.name, b.field);
  // A failed create gives back the bodies made before it (cf_destroy so far) and the kernels.
  cg.cf_create += fmt::format(
      "  {{\n    int st = {0}_create_with_weights(m->weights + {1}, (size_t){2}, num_threads, 0, &m->cf{3}, errbuf, "
      "errbuf_size);\n    if (st) {{\n  {4}{5}      return st;\n    }}\n  }}\n",
      b.name, cg.weight_offsets[w], gm.weights.size(), b.field, replace_all(cg.cf_destroy, "\n  ", "\n      "),
      cg.kernel_library ? "      hodu_kernels_destroy(m->kernels);\n      m->kernels = NULL;\n" : "");
  cg.cf_destroy += fmt::format("  {}_destroy(m->cf{});\n", b.name, b.field);
  return b;
}

// The helpers, once; and the destroy-by-index the create's failure path calls.
void need_helpers(Codegen& cg) {
  if (cg.cf_helpers) return;
  cg.cf_helpers = true;
  cg.functions += kHelpers;
}

// A DLTensor for outer value `v` into `arr[i]`, its shape in a local array.
void bind_outer(Codegen& cg, const std::string& arr, size_t i, const std::string& v) {
  auto s = cg.shape_of(v);
  auto [code, bits] = dl_code(cg.dtype_of(v));
  std::string dims;
  for (const auto& d : s) dims += (dims.empty() ? "" : ", ") + d.c();
  cg.emit(fmt::format("int64_t {0}_s{1}[{2}] = {{{3}}};", arr, i, std::max<size_t>(s.size(), 1), dims.empty() ? "0" : dims));
  cg.emit(fmt::format("hm_cf_tensor(&{0}[{1}], {2}, {3}, {0}_s{1}, {4}, {5});", arr, i, cg.ptr(v), s.size(), code, bits));
}

// `C` with a failure of the body: the run fails naming the node and the body's error.
std::string body_failed(const Codegen& cg, const Node& n, const Body& b, const std::string& st, const char* what) {
  (void)cg;
  return fmt::format("return hm_fail(m, {0} == 2 ? 2 : 4, \"%s: {1}: %s\", {2}, {3}_last_error(m->cf{4}));", st, what,
                     c_string_literal(n.describe()), b.name, b.field);
}

// Outer value `name` from a tensor the node's code holds (`data`, shape `shape` of `rank`
// entries, `ndim` its rank at run time): late dims set from it, other dims checked, copied.
void keep_result(Codegen& cg, const Node& n, const std::string& name, const std::string& data, const std::string& shape,
                 const std::string& ndim, const std::string& cleanup) {
  SymShape ys = cg.shape_of(name);
  const DType dt = cg.dtype_of(name);
  std::string desc = c_string_literal(n.describe()), out = c_string_literal(name);
  cg.emit(fmt::format("if ({} != {}) {{\n  {}return hm_fail(m, 4, \"%s: output %s has rank %d, expected {}\", {}, {}, "
                      "(int)({}));\n}}",
                      ndim, ys.size(), cleanup, ys.size(), desc, out, ndim));
  std::set<int> assigned;
  for (size_t d = 0; d < ys.size(); ++d) {
    const auto& t = ys[d].terms();
    std::string got = fmt::format("{}[{}]", shape, d);
    if (ys[d].late() && t.size() == 1 && t[0].coef == 1 && t[0].atoms.size() == 1 && !assigned.count(t[0].atoms[0])) {
      assigned.insert(t[0].atoms[0]);
      cg.emit(fmt::format("S[{}] = {};", t[0].atoms[0], got));
      continue;
    }
    cg.emit(fmt::format("if ({0} != {1}) {{\n  {2}return hm_fail(m, 4, \"%s: output %s dim {3} is %lld, expected %lld\", "
                        "{4}, {5}, (long long)({0}), (long long)({1}));\n}}",
                        got, ys[d], cleanup, d, desc, out));
  }
  cg.define(name, dt, ys);
  cg.emit(fmt::format("if ({0}) memcpy({1}, {2}, {0});", storage_bytes(dt, numel(ys)), cg.ptr(name), data));
}

// After a Loop's or Scan's iterations: a failure (cf_st) frees the loop's buffers and fails
// the run: 5 `rank_message`, 6 a scan output that changed shape, 7 out of memory, else
// the body's own status and error.
void emit_loop_status(Codegen& cg, const Node& n, const Body& b, const std::string& cleanup, const char* rank_message) {
  const std::string desc = c_string_literal(n.describe());
  cg.emit(fmt::format("if (cf_st) {{\n  {}", cleanup));
  cg.emit(fmt::format("  if (cf_st == 5) return hm_fail(m, 4, \"%s: {}\", {});", rank_message, desc));
  cg.emit(fmt::format("  if (cf_st == 6) return hm_fail(m, 4, \"%s: a scan output changes shape between iterations\", {});", desc));
  cg.emit(fmt::format("  if (cf_st == 7) return hm_fail(m, 2, \"%s: out of memory for the loop's values\", {});", desc));
  cg.emit(fmt::format("  {}\n}}", body_failed(cg, n, b, "cf_st", "body")));
}

// ---- If ----------------------------------------------------------------------

void emit_if(Codegen& cg, const Node& n) {
  const Attribute* then_a = n.attr("then_branch");
  const Attribute* else_a = n.attr("else_branch");
  HODU_CHECK(then_a && then_a->g && else_a && else_a->g, ErrorCode::InvalidArgument, "{}: If without its branches",
             n.describe());
  need_helpers(cg);
  // A branch that is invalid for the shapes it would get (the other sample rate's branch of
  // a model built for one) compiles to a run-time error: ONNX Runtime, too, checks only the
  // branch it takes. A branch with something compiled code cannot do is refused here.
  std::optional<Body> bt, be;
  std::string why_t, why_e;
  auto compile_branch = [&](const Graph& g, const char* what, std::optional<Body>& out, std::string& why) {
    try {
      out = compile_body(cg, n, g, {}, what);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::InvalidModel && e.code() != ErrorCode::InvalidArgument) throw;
      why = e.what();
    }
  };
  compile_branch(*then_a->g, "then_branch", bt, why_t);
  compile_branch(*else_a->g, "else_branch", be, why_e);
  HODU_CHECK(bt || be, ErrorCode::InvalidModel, "{}", why_t);
  for (const auto* b : {&bt, &be})
    HODU_CHECK(!*b || (*b)->num_outputs == n.outputs.size(), ErrorCode::InvalidArgument,
               "{}: a branch has {} outputs, the If {}", n.describe(), (*b)->num_outputs, n.outputs.size());
  const std::string cond = cg.ptr(n.inputs[0]);
  const size_t nout = n.outputs.size();
  cg.emit("{");
  cg.emit(fmt::format("DLTensor cf_out[{}];", nout + 1));
  cg.emit("int cf_st;");
  cg.emit("memset(cf_out, 0, sizeof cf_out);");
  auto branch = [&](const std::optional<Body>& b, const std::string& why, const char* what) {
    if (!b) {
      cg.emit(fmt::format("(void)cf_st;\nreturn hm_fail(m, 4, \"%s\", {});",
                          c_string_literal(why + " (the " + what + " does not compile for these input shapes)")));
      return;
    }
    cg.emit(fmt::format("DLTensor cf_in[{}];", b->captured.size() + 1));
    for (size_t i = 0; i < b->captured.size(); ++i) bind_outer(cg, "cf_in", i, b->captured[i]);
    cg.emit(fmt::format("cf_st = {}_run(m->cf{}, cf_in, {}, cf_out, {});", b->name, b->field, b->captured.size(), nout));
    cg.emit(fmt::format("if (cf_st) {}", body_failed(cg, n, *b, "cf_st", what)));
  };
  cg.emit(fmt::format("if (*(const unsigned char*){}) {{", cond));
  branch(bt, why_t, "then_branch");
  cg.emit("} else {");
  branch(be, why_e, "else_branch");
  cg.emit("}");
  for (size_t k = 0; k < nout; ++k) {
    if (n.outputs[k].empty()) continue;
    keep_result(cg, n, n.outputs[k], fmt::format("cf_out[{}].data", k), fmt::format("cf_out[{}].shape", k),
                fmt::format("cf_out[{}].ndim", k), "");
  }
  cg.emit("}");
}

// ---- Loop and Scan -------------------------------------------------------------

// Whether the body maps each carried value to one of the same static shape (then the body
// is compiled for that shape; otherwise its dims are free). `carried`: formal index → output index.
std::vector<bool> carried_static(const Codegen& cg, const Graph& body, const std::vector<Formal>& formals,
                                 const std::vector<std::pair<size_t, size_t>>& carried) {
  std::vector<bool> ok(carried.size(), false);
  Graph g = body;
  std::map<std::string, std::string> names;
  for (size_t i = 0; i < formals.size() && i < g.inputs.size(); ++i)
    g.inputs[i].type = ValueType::tensor(formals[i].dtype, body_shape(formals[i].shape, false, "", names));
  for (const auto& r : outer_reads(body)) {
    if (g.initializer(r) || g.input(r)) continue;
    Value v;
    v.name = r;
    if (cg.is_constant(r)) {
      g.set_initializer(r, cg.constant(r));
      continue;
    }
    v.type = ValueType::tensor(cg.dtype_of(r), body_shape(cg.shape_of(r), false, "", names));
    g.inputs.push_back(v);
  }
  for (auto& o : g.outputs) o.type = ValueType{};
  g.value_types.clear();
  try {
    infer_types(g);
  } catch (const Error&) {
    return ok;
  }
  for (size_t k = 0; k < carried.size(); ++k) {
    const auto [fi, oi] = carried[k];
    if (!is_static(formals[fi].shape) || oi >= g.outputs.size()) continue;
    auto t = g.type_of(g.outputs[oi].name);
    auto st = t && t->is_tensor() ? t->shape.to_static() : std::nullopt;
    ok[k] = st && to_sym(*st) == formals[fi].shape;
  }
  return ok;
}

// The loop state the generated code keeps: a heap buffer and shape per carried value.
struct Carried {
  std::string init;    // the outer value it starts from
  std::string output;  // the node's output it ends as ("" when dropped)
};

void emit_loop(Codegen& cg, const Node& n) {
  const Attribute* ba = n.attr("body");
  HODU_CHECK(ba && ba->g, ErrorCode::InvalidArgument, "{}: Loop without its body", n.describe());
  const Graph& body = *ba->g;
  const size_t nc = n.inputs.size() >= 2 ? n.inputs.size() - 2 : 0;  // carried values
  HODU_CHECK(body.inputs.size() == nc + 2 && body.outputs.size() >= nc + 1, ErrorCode::InvalidArgument,
             "{}: the body has {} inputs and {} outputs for {} carried values", n.describe(), body.inputs.size(),
             body.outputs.size(), nc);
  const size_t ns = body.outputs.size() - 1 - nc;  // scan outputs
  HODU_CHECK(n.outputs.size() <= nc + ns, ErrorCode::InvalidArgument, "{}: more outputs than the body gives",
             n.describe());
  std::vector<Formal> formals = {{DType::I64, {}}, {DType::Bool, {}}};
  std::vector<std::pair<size_t, size_t>> pairs;
  for (size_t k = 0; k < nc; ++k) {
    const std::string& v = n.inputs[2 + k];
    HODU_CHECK(!v.empty(), ErrorCode::InvalidArgument, "{}: carried value {} is missing", n.describe(), k);
    formals.push_back({cg.dtype_of(v), cg.shape_of(v)});
    pairs.push_back({2 + k, 1 + k});
  }
  auto fixed = carried_static(cg, body, formals, pairs);
  for (size_t k = 0; k < nc; ++k) formals[2 + k].free_all = !fixed[k];
  need_helpers(cg);
  Body b = compile_body(cg, n, body, formals, "body");
  const size_t nin = 2 + nc + b.captured.size(), nout = 1 + nc + ns;
  // Outer pointers read before the loop (ptr marks them read at this step).
  std::string M = n.inputs.size() > 0 && !n.inputs[0].empty() ? cg.ptr(n.inputs[0]) : "";
  std::string C = n.inputs.size() > 1 && !n.inputs[1].empty() ? cg.ptr(n.inputs[1]) : "";
  cg.emit("{");
  cg.emit(fmt::format("int64_t cf_max = {}, cf_i = 0, cf_it = 0, cf_scalar[1] = {{0}};",
                      M.empty() ? "INT64_MAX" : "*(const int64_t*)" + M));
  cg.emit(fmt::format("unsigned char cf_cond = {};", C.empty() ? "1" : "*(const unsigned char*)" + C + " != 0"));
  cg.emit(fmt::format("DLTensor cf_in[{}], cf_out[{}];", nin, nout));
  cg.emit(fmt::format("unsigned char* cf_buf[{}] = {{0}};", nc + ns + 1));
  cg.emit(fmt::format("size_t cf_cap[{0}] = {{0}}, cf_used[{0}] = {{0}};", nc + ns + 1));
  cg.emit(fmt::format("int64_t cf_shape[{}][16];", nc + ns + 1));
  cg.emit("int cf_st = 0, cf_k;");
  std::string cleanup = fmt::format("for (cf_k = 0; cf_k < {}; ++cf_k) free(cf_buf[cf_k]);", nc + ns + 1);
  // The body's inputs: the counter, the condition, the carried values (the outer values at
  // first, then the heap copies of the last iteration's results), the outer values it reads.
  cg.emit("hm_cf_tensor(&cf_in[0], &cf_it, 0, cf_scalar, 0, 64);");
  cg.emit("hm_cf_tensor(&cf_in[1], &cf_cond, 0, cf_scalar, 6, 8);");
  for (size_t k = 0; k < nc; ++k) bind_outer(cg, "cf_in", 2 + k, n.inputs[2 + k]);
  for (size_t i = 0; i < b.captured.size(); ++i) bind_outer(cg, "cf_in", 2 + nc + i, b.captured[i]);
  cg.emit("for (; cf_i < cf_max && cf_cond; ++cf_i) {");
  cg.emit("  cf_it = cf_i;");
  cg.emit("  memset(cf_out, 0, sizeof cf_out);");
  cg.emit(fmt::format("  cf_st = {}_run(m->cf{}, cf_in, {}, cf_out, {});", b.name, b.field, nin, nout));
  cg.emit("  if (cf_st) break;");
  cg.emit("  cf_cond = *(const unsigned char*)cf_out[0].data != 0;");
  // Carried: kept in heap buffers that the next iteration reads.
  cg.emit(fmt::format("  for (cf_k = 0; cf_k < {}; ++cf_k) {{", nc));
  cg.emit("    size_t bytes = hm_cf_bytes(&cf_out[1 + cf_k]);");
  cg.emit("    if (cf_out[1 + cf_k].ndim > 16 || !hm_cf_keep(&cf_buf[cf_k], &cf_cap[cf_k], 0, cf_out[1 + cf_k].data, bytes)) {");
  cg.emit("      cf_st = 7;\n      break;\n    }");
  cg.emit("    memcpy(cf_shape[cf_k], cf_out[1 + cf_k].shape, sizeof(int64_t) * (size_t)cf_out[1 + cf_k].ndim);");
  cg.emit("    cf_in[2 + cf_k] = cf_out[1 + cf_k];");
  cg.emit("    cf_in[2 + cf_k].data = cf_buf[cf_k];\n    cf_in[2 + cf_k].shape = cf_shape[cf_k];");
  cg.emit("  }");
  cg.emit("  if (cf_st) break;");
  // Scan outputs: appended; every iteration's must have the first one's shape.
  cg.emit(fmt::format("  for (cf_k = {}; cf_k < {}; ++cf_k) {{", nc, nc + ns));
  cg.emit("    const DLTensor* t = &cf_out[1 + cf_k];");
  cg.emit("    size_t bytes = hm_cf_bytes(t);");
  cg.emit("    if (t->ndim > 15) {\n      cf_st = 5;\n      break;\n    }");
  cg.emit("    if (cf_i == 0) memcpy(cf_shape[cf_k] + 1, t->shape, sizeof(int64_t) * (size_t)t->ndim);");
  cg.emit("    else if (memcmp(cf_shape[cf_k] + 1, t->shape, sizeof(int64_t) * (size_t)t->ndim)) {\n"
          "      cf_st = 6;\n      break;\n    }");
  cg.emit("    if (!hm_cf_keep(&cf_buf[cf_k], &cf_cap[cf_k], cf_used[cf_k], t->data, bytes)) {\n"
          "      cf_st = 7;\n      break;\n    }");
  cg.emit("    cf_used[cf_k] += bytes;");
  cg.emit("  }");
  cg.emit("  if (cf_st) break;");
  cg.emit("}");
  emit_loop_status(cg, n, b, cleanup, "a scan output has rank over 15");
  // Results: the carried values (the initial ones when no iteration ran), the scan outputs
  // stacked on a new first dim of the iteration count.
  for (size_t k = 0; k < nc && k < n.outputs.size(); ++k) {
    if (n.outputs[k].empty()) continue;
    keep_result(cg, n, n.outputs[k], fmt::format("cf_in[{}].data", 2 + k), fmt::format("cf_in[{}].shape", 2 + k),
                fmt::format("cf_in[{}].ndim", 2 + k), cleanup);
  }
  for (size_t j = 0; nc + j < n.outputs.size(); ++j) {
    const std::string& y = n.outputs[nc + j];
    if (y.empty()) continue;
    const size_t k = nc + j;
    // No iteration: the per-iteration dims the model declares (0 where unknown).
    SymShape ys = cg.shape_of(y);
    cg.emit(fmt::format("cf_shape[{}][0] = cf_i;", k));
    cg.emit("if (cf_i == 0) {");
    for (size_t d = 1; d < ys.size(); ++d)
      cg.emit(fmt::format("  cf_shape[{}][{}] = {};", k, d, !ys[d].late() ? ys[d].c() : "0"));
    cg.emit("}");
    keep_result(cg, n, y, fmt::format("cf_buf[{}]", k), fmt::format("cf_shape[{}]", k),
                fmt::format("(cf_i ? cf_out[{}].ndim + 1 : {})", 1 + k, ys.size()), cleanup);
  }
  cg.emit(cleanup);
  cg.emit("}");
}

std::vector<int64_t> ints_attr(const Node& n, const char* name, size_t count, int64_t fill) {
  std::vector<int64_t> v = n.get_ints(name, {});
  if (v.empty()) v.assign(count, fill);
  HODU_CHECK(v.size() == count, ErrorCode::InvalidArgument, "{}: {} has {} entries, expected {}", n.describe(), name,
             v.size(), count);
  return v;
}

void emit_scan(Codegen& cg, const Node& n) {
  const Attribute* ba = n.attr("body");
  HODU_CHECK(ba && ba->g, ErrorCode::InvalidArgument, "{}: Scan without its body", n.describe());
  const Graph& body = *ba->g;
  const int64_t nsi = n.get_int("num_scan_inputs", 0);
  const size_t ni = static_cast<size_t>(nsi), nst = n.inputs.size() - ni;
  HODU_CHECK(nsi >= 1 && ni <= n.inputs.size() && body.inputs.size() == n.inputs.size() &&
                 body.outputs.size() == n.outputs.size() && n.outputs.size() >= nst,
             ErrorCode::InvalidArgument, "{}: {} scan inputs of {} inputs, a body of {} inputs and {} outputs",
             n.describe(), nsi, n.inputs.size(), body.inputs.size(), body.outputs.size());
  const size_t nso = n.outputs.size() - nst;
  auto in_axes = ints_attr(n, "scan_input_axes", ni, 0), in_dirs = ints_attr(n, "scan_input_directions", ni, 0);
  auto out_axes = ints_attr(n, "scan_output_axes", nso, 0), out_dirs = ints_attr(n, "scan_output_directions", nso, 0);
  std::vector<Formal> formals;
  std::vector<std::pair<size_t, size_t>> pairs;
  for (size_t k = 0; k < nst; ++k) {
    formals.push_back({cg.dtype_of(n.inputs[k]), cg.shape_of(n.inputs[k])});
    pairs.push_back({k, k});
  }
  // The scan inputs' slices; the sequence length from the first.
  SymInt len;
  std::vector<SymInt> outer(ni), inner(ni);
  for (size_t j = 0; j < ni; ++j) {
    const std::string& x = n.inputs[nst + j];
    SymShape s = cg.shape_of(x);
    int64_t r = static_cast<int64_t>(s.size()), a = in_axes[j] < 0 ? in_axes[j] + r : in_axes[j];
    HODU_CHECK(a >= 0 && a < r, ErrorCode::InvalidArgument, "{}: scan_input_axes[{}] = {} for rank {}", n.describe(),
               j, in_axes[j], r);
    in_axes[j] = a;
    if (j == 0) len = s[a];
    else sym_require(sym_eq(len, s[a]), n.describe() + ": scan inputs of different lengths %lld and %lld", {len, s[a]});
    outer[j] = 1;
    inner[j] = storage_bytes(cg.dtype_of(x), 1);
    for (int64_t d = 0; d < a; ++d) outer[j] *= s[d];
    for (int64_t d = a + 1; d < r; ++d) inner[j] *= s[d];
    SymShape slice = s;
    slice.erase(slice.begin() + a);
    formals.push_back({cg.dtype_of(x), slice});
  }
  auto fixed = carried_static(cg, body, formals, pairs);
  for (size_t k = 0; k < nst; ++k) formals[k].free_all = !fixed[k];
  need_helpers(cg);
  Body b = compile_body(cg, n, body, formals, "body");
  const size_t nin = nst + ni + b.captured.size(), nout = nst + nso;
  cg.emit("{");
  cg.emit(fmt::format("const int64_t cf_len = {};", len));
  cg.emit(fmt::format("int64_t cf_i = 0, cf_slice[{}][16];", ni));
  cg.emit(fmt::format("DLTensor cf_in[{}], cf_out[{}];", nin, nout));
  cg.emit(fmt::format("unsigned char* cf_buf[{}] = {{0}};", nst + ni + nso + 1));
  cg.emit(fmt::format("size_t cf_cap[{0}] = {{0}};", nst + ni + nso + 1));
  cg.emit(fmt::format("int64_t cf_shape[{}][16];", nst + nso + 1));
  cg.emit("int cf_st = 0, cf_k;");
  const std::string cleanup = fmt::format("for (cf_k = 0; cf_k < {}; ++cf_k) free(cf_buf[cf_k]);", nst + ni + nso + 1);
  for (size_t k = 0; k < nst; ++k) bind_outer(cg, "cf_in", k, n.inputs[k]);
  std::vector<std::string> xs(ni);
  for (size_t j = 0; j < ni; ++j) {
    const std::string& x = n.inputs[nst + j];
    xs[j] = cg.ptr(x);
    SymShape s = cg.shape_of(x);
    s.erase(s.begin() + in_axes[j]);
    for (size_t d = 0; d < s.size(); ++d) cg.emit(fmt::format("cf_slice[{}][{}] = {};", j, d, s[d]));
    auto [code, bits] = dl_code(cg.dtype_of(x));
    SymInt bytes = outer[j] * inner[j];
    cg.emit(fmt::format("cf_buf[{0}] = (unsigned char*)malloc((size_t)({1}) ? (size_t)({1}) : 1);", nst + j, bytes));
    cg.emit(fmt::format("if (!cf_buf[{}]) cf_st = 7;", nst + j));
    cg.emit(fmt::format("hm_cf_tensor(&cf_in[{}], cf_buf[{}], {}, cf_slice[{}], {}, {});", nst + j, nst + j, s.size(), j,
                        code, bits));
  }
  for (size_t i = 0; i < b.captured.size(); ++i) bind_outer(cg, "cf_in", nst + ni + i, b.captured[i]);
  cg.emit("for (; cf_i < cf_len && !cf_st; ++cf_i) {");
  for (size_t j = 0; j < ni; ++j)
    cg.emit(fmt::format("  hm_cf_take(cf_buf[{}], (const unsigned char*){}, {}, cf_len, (size_t)({}), {});", nst + j,
                        xs[j], outer[j], inner[j], in_dirs[j] ? "cf_len - 1 - cf_i" : "cf_i"));
  cg.emit("  memset(cf_out, 0, sizeof cf_out);");
  cg.emit(fmt::format("  cf_st = {}_run(m->cf{}, cf_in, {}, cf_out, {});", b.name, b.field, nin, nout));
  cg.emit("  if (cf_st) break;");
  cg.emit(fmt::format("  for (cf_k = 0; cf_k < {}; ++cf_k) {{", nst));
  cg.emit("    if (cf_out[cf_k].ndim > 16 || !hm_cf_keep(&cf_buf[cf_k], &cf_cap[cf_k], 0, cf_out[cf_k].data, hm_cf_bytes(&cf_out[cf_k]))) {");
  cg.emit("      cf_st = 7;\n      break;\n    }");
  cg.emit("    memcpy(cf_shape[cf_k], cf_out[cf_k].shape, sizeof(int64_t) * (size_t)cf_out[cf_k].ndim);");
  cg.emit("    cf_in[cf_k] = cf_out[cf_k];\n    cf_in[cf_k].data = cf_buf[cf_k];\n    cf_in[cf_k].shape = cf_shape[cf_k];");
  cg.emit("  }");
  cg.emit("  if (cf_st) break;");
  // Scan outputs: the whole tensor allocated at the first iteration, each slice put in place.
  for (size_t j = 0; j < nso; ++j) {
    const size_t k = nst + j, slot = nst + ni + j;
    cg.emit("  {");
    cg.emit(fmt::format("    const DLTensor* t = &cf_out[{}];", k));
    cg.emit(fmt::format("    int64_t ax = {}, d, outer = 1, inner = (t->dtype.bits + 7) / 8;", out_axes[j]));
    cg.emit("    if (ax < 0) ax += t->ndim + 1;");
    cg.emit("    if (ax < 0 || ax > t->ndim || t->ndim > 15) {\n      cf_st = 5;\n      break;\n    }");
    cg.emit("    for (d = 0; d < ax; ++d) outer *= t->shape[d];");
    cg.emit("    for (d = ax; d < t->ndim; ++d) inner *= t->shape[d];");
    cg.emit("    if (cf_i == 0) {");
    cg.emit(fmt::format("      for (d = 0; d < t->ndim; ++d) cf_shape[{0}][d < ax ? d : d + 1] = t->shape[d];", k));
    cg.emit(fmt::format("      cf_shape[{}][ax] = cf_len;", k));
    cg.emit(fmt::format("      cf_buf[{0}] = (unsigned char*)malloc((size_t)(outer * inner * cf_len) ? (size_t)(outer * inner * cf_len) : 1);", slot));
    cg.emit(fmt::format("      if (!cf_buf[{}]) {{\n        cf_st = 7;\n        break;\n      }}", slot));
    cg.emit("    } else {");
    cg.emit(fmt::format("      for (d = 0; d < t->ndim; ++d)\n        if (cf_shape[{}][d < ax ? d : d + 1] != t->shape[d]) cf_st = 6;", k));
    cg.emit("      if (cf_st) break;");
    cg.emit("    }");
    cg.emit(fmt::format("    hm_cf_put(cf_buf[{}], (const unsigned char*)t->data, outer, cf_len, (size_t)inner, {});", slot,
                        out_dirs[j] ? "cf_len - 1 - cf_i" : "cf_i"));
    cg.emit("  }");
  }
  cg.emit("}");
  emit_loop_status(cg, n, b, cleanup, "a scan output's axis is out of range or its rank over 15");
  for (size_t k = 0; k < nst; ++k) {
    if (n.outputs[k].empty()) continue;
    keep_result(cg, n, n.outputs[k], fmt::format("cf_in[{}].data", k), fmt::format("cf_in[{}].shape", k),
                fmt::format("cf_in[{}].ndim", k), cleanup);
  }
  for (size_t j = 0; j < nso; ++j) {
    const std::string& y = n.outputs[nst + j];
    if (y.empty()) continue;
    const size_t k = nst + j;
    SymShape ys = cg.shape_of(y);
    int64_t ax = out_axes[j] < 0 ? out_axes[j] + static_cast<int64_t>(ys.size()) : out_axes[j];
    // An empty sequence: the dims the model declares (0 where unknown), the axis 0.
    cg.emit("if (cf_len == 0) {");
    for (size_t d = 0; d < ys.size(); ++d)
      cg.emit(fmt::format("  cf_shape[{}][{}] = {};", k, d,
                          static_cast<int64_t>(d) == ax ? "0" : !ys[d].late() ? ys[d].c() : "0"));
    cg.emit("}");
    keep_result(cg, n, y, fmt::format("cf_buf[{}]", nst + ni + j), fmt::format("cf_shape[{}]", k),
                fmt::format("(cf_len ? cf_out[{}].ndim + 1 : {})", k, ys.size()), cleanup);
  }
  cg.emit(cleanup);
  cg.emit("}");
}

}  // namespace

std::vector<std::string> control_flow_op_names() { return {"If", "Loop", "Scan"}; }

bool emit_control_flow_op(Codegen& cg, const Node& n) {
  if (!n.domain.empty()) return false;
  if (n.op_type == "If") emit_if(cg, n);
  else if (n.op_type == "Loop") emit_loop(cg, n);
  else if (n.op_type == "Scan") emit_scan(cg, n);
  else return false;
  return true;
}

}  // namespace hodu::compilers::c
