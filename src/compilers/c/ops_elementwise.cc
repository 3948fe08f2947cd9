// Elementwise ops and their fusion: a chain (or tree) of elementwise nodes of
// one output shape becomes one loop; intermediate values are C locals, and
// each outside input is read with its broadcast index.
#include <fmt/format.h>

#include <map>
#include <set>

#include "compilers/c/codegen_context.h"
#include "core/error.h"

namespace hodu::compilers::c {
namespace {

// Generic: any C arithmetic type; Math: floats; Logic: bool; Integer: ints; Unsigned: unsigned ints.
enum Family { Generic, Math, Logic, Integer, Unsigned };

struct EwOp {
  Family family;
  int arity;  // -1 variadic
};

const std::map<std::string, EwOp>& ew_ops() {
  static const std::map<std::string, EwOp> ops = {
      {"Relu", {Generic, 1}},      {"Neg", {Generic, 1}},         {"Abs", {Generic, 1}},
      {"Identity", {Generic, 1}},  {"Sign", {Generic, 1}},        {"Cast", {Generic, 1}},
      {"Sigmoid", {Math, 1}},      {"Tanh", {Math, 1}},           {"Exp", {Math, 1}},
      {"Log", {Math, 1}},          {"Sqrt", {Math, 1}},           {"Erf", {Math, 1}},
      {"Reciprocal", {Math, 1}},   {"Floor", {Math, 1}},          {"Ceil", {Math, 1}},
      {"Round", {Math, 1}},        {"Sin", {Math, 1}},            {"Cos", {Math, 1}},
      {"Tan", {Math, 1}},          {"Asin", {Math, 1}},           {"Acos", {Math, 1}},
      {"Atan", {Math, 1}},         {"Sinh", {Math, 1}},           {"Cosh", {Math, 1}},
      {"Softplus", {Math, 1}},     {"Softsign", {Math, 1}},       {"LeakyRelu", {Math, 1}},
      {"Elu", {Math, 1}},          {"Selu", {Math, 1}},           {"Celu", {Math, 1}},
      {"HardSigmoid", {Math, 1}},  {"HardSwish", {Math, 1}},      {"Gelu", {Math, 1}},
      {"Mish", {Math, 1}},         {"ThresholdedRelu", {Math, 1}}, {"Clip", {Generic, 1}},
      {"IsNaN", {Math, 1}},        {"IsInf", {Math, 1}},          {"Not", {Logic, 1}},
      {"Add", {Generic, 2}},       {"Sub", {Generic, 2}},         {"Mul", {Generic, 2}},
      {"Div", {Generic, 2}},       {"Pow", {Generic, 2}},            {"PRelu", {Math, 2}},
      {"Equal", {Generic, 2}},     {"Less", {Generic, 2}},        {"Greater", {Generic, 2}},
      {"LessOrEqual", {Generic, 2}}, {"GreaterOrEqual", {Generic, 2}},
      {"And", {Logic, 2}},         {"Or", {Logic, 2}},            {"Xor", {Logic, 2}},
      {"Where", {Generic, 3}},     {"Max", {Generic, -1}},        {"Min", {Generic, -1}},
      {"Sum", {Generic, -1}},      {"Mean", {Math, -1}},
      {"CastLike", {Generic, 2}},  {"Mod", {Generic, 2}},         {"BitShift", {Unsigned, 2}},
      {"BitwiseAnd", {Integer, 2}}, {"BitwiseOr", {Integer, 2}},   {"BitwiseXor", {Integer, 2}},
      {"BitwiseNot", {Integer, 1}}, {"Asinh", {Math, 1}},         {"Acosh", {Math, 1}},
      {"Atanh", {Math, 1}},        {"Swish", {Math, 1}},          {"Shrink", {Generic, 1}},
  };
  return ops;
}

// Inputs that are read as build-time constants (not loaded per element): Clip's constant
// bounds (tensor bounds are operands like any other), CastLike's target (only its dtype).
bool is_param_input(const Codegen& cg, const Node& n, size_t i) {
  if (n.op_type == "CastLike") return i == 1;
  return n.op_type == "Clip" && i >= 1 && (!n.has_input(i) || cg.is_constant(n.inputs[i]));
}

// The dtype C computes a value of dtype t in: float for float16 and bfloat16 (loaded with
// a conversion, results rounded back), t itself for C's arithmetic types.
DType compute_of(DType t) { return t == DType::F16 || t == DType::BF16 ? DType::F32 : t; }
bool arith(DType t) {
  return t == DType::F32 || t == DType::F64 || t == DType::Bool ||
         (dtype_is_integer(t) && !dtype_is_subbyte(t));
}
bool loadable(DType t) { return arith(t) || t == DType::F16 || t == DType::BF16; }

std::string fn(const char* name, DType t) { return t == DType::F32 ? std::string(name) + "f" : name; }

std::string lit(double v, DType t) {
  if (t == DType::F32) return c_float(v);
  if (t == DType::F64) return fmt::format("{:.17g}", v).find_first_of(".en") == std::string::npos
                                  ? fmt::format("{:.17g}.0", v) : fmt::format("{:.17g}", v);
  return fmt::format("(({}){})", c_type(t), static_cast<int64_t>(v));
}

// The C expression of one node over its operand expressions, aligned with n.inputs (empty
// for an absent input or a build-time parameter). t: the compute dtype of input 0 (Where:
// of input 1), out: the node's output dtype (both as computed: float for f16/bf16).
std::string node_expr(const Codegen& cg, const Node& n, const std::vector<std::string>& a, DType t, DType out) {
  const std::string& op = n.op_type;
  auto x = a.empty() ? std::string() : a[0];
  const bool flt = t == DType::F32 || t == DType::F64;
  if (op == "Relu") return fmt::format("({0} < 0 ? 0 : {0})", x);
  if (op == "Neg") return fmt::format("(-{})", x);
  if (op == "Abs") return dtype_is_integer(t) && !dtype_is_signed(t) ? x : fmt::format("({0} < 0 ? -{0} : {0})", x);
  if (op == "Identity") return x;
  if (op == "Sign") return fmt::format("(({0} > 0) - ({0} < 0))", x);
  if (op == "Cast" || op == "CastLike") {
    if (out == DType::Bool) return fmt::format("({} != 0)", x);
    if (dtype_is_integer(out) && flt) {
      // C's cast of a float out of range is undefined: through hk_d2i64 (NaN 0, clamped), then truncated.
      if (out == DType::U64) return fmt::format("hk_d2u64({})", x);
      return fmt::format("(({})hk_d2i64({}))", c_type(out), x);
    }
    return fmt::format("(({}){})", c_type(out), x);
  }
  if (op == "Sigmoid") return fmt::format("({1} / ({1} + {2}(-{0})))", x, lit(1, t), fn("exp", t));
  if (op == "Tanh" || op == "Exp" || op == "Log" || op == "Sqrt" || op == "Erf" || op == "Floor" || op == "Ceil" ||
      op == "Sin" || op == "Cos" || op == "Tan" || op == "Asin" || op == "Acos" || op == "Atan" || op == "Sinh" ||
      op == "Cosh" || op == "Asinh" || op == "Acosh" || op == "Atanh") {
    std::string name = op;
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return fmt::format("{}({})", fn(name.c_str(), t), x);
  }
  if (op == "Round") return fmt::format("{}({})", fn("nearbyint", t), x);
  if (op == "Reciprocal") return fmt::format("({} / {})", lit(1, t), x);
  if (op == "Softplus") return fmt::format("{}({}({}) + {})", fn("log", t), fn("exp", t), x, lit(1, t));
  if (op == "Softsign") return fmt::format("({0} / ({1} + {2}({0})))", x, lit(1, t), fn("fabs", t));
  if (op == "LeakyRelu")
    return fmt::format("({0} < 0 ? {1} * {0} : {0})", x, lit(n.get_float("alpha", 0.01f), t));
  if (op == "Elu")
    return fmt::format("({0} < 0 ? {1} * ({2}({0}) - {3}) : {0})", x, lit(n.get_float("alpha", 1.f), t),
                       fn("exp", t), lit(1, t));
  if (op == "Selu") {
    double alpha = n.get_float("alpha", 1.67326319217681884765625f), gamma = n.get_float("gamma", 1.05070102214813232421875f);
    return fmt::format("({0} <= 0 ? {1} * ({2} * {3}({0}) - {2}) : {1} * {0})", x, lit(gamma, t), lit(alpha, t),
                       fn("exp", t));
  }
  if (op == "Celu") {
    double alpha = n.get_float("alpha", 1.f);
    return fmt::format("(({0} > 0 ? {0} : 0) + ({0} < 0 ? {1} * ({2}({0} / {1}) - {3}) : 0))", x, lit(alpha, t),
                       fn("exp", t), lit(1, t));
  }
  if (op == "HardSigmoid") {
    return fmt::format("{2}({0} * {1} + {3})", lit(n.get_float("alpha", 0.2f), t), x, fn("hk_clamp01", t),
                       lit(n.get_float("beta", 0.5f), t));
  }
  if (op == "HardSwish")
    return fmt::format("({0} * {1}({0} / {2} + {3}))", x, fn("hk_clamp01", t), lit(6, t), lit(0.5, t));
  if (op == "Gelu") {
    if (n.get_string("approximate", "none") == "tanh")
      return fmt::format("({1} * {0} * ({2} + {3}({4} * ({0} + {5} * {0} * {0} * {0}))))", x, lit(0.5, t), lit(1, t),
                         fn("tanh", t), lit(0.7978845608028654, t), lit(0.044715, t));
    return fmt::format("({1} * {0} * ({2} + {3}({0} * {4})))", x, lit(0.5, t), lit(1, t), fn("erf", t),
                       lit(0.7071067811865476, t));
  }
  if (op == "Mish") return fmt::format("({0} * {1}({2}({3}({0}) + {4})))", x, fn("tanh", t), fn("log", t), fn("exp", t), lit(1, t));
  if (op == "Swish")
    return fmt::format("({0} / ({1} + {2}(-{3} * {0})))", x, lit(1, t), fn("exp", t), lit(n.get_float("alpha", 1.f), t));
  if (op == "ThresholdedRelu") return fmt::format("({0} > {1} ? {0} : 0)", x, lit(n.get_float("alpha", 1.f), t));
  if (op == "Shrink") {
    // In the float type (double for integers), then back.
    DType c = t == DType::F32 ? DType::F32 : DType::F64;
    std::string v = fmt::format("(({}){})", c_type(c), x), l = lit(n.get_float("lambd", 0.5f), c),
                b = lit(n.get_float("bias", 0.f), c);
    std::string r = fmt::format("({0} < -{1} ? {0} + {2} : {0} > {1} ? {0} - {2} : 0)", v, l, b);
    return flt ? r : fmt::format("(({})hk_d2i64({}))", c_type(t), r);
  }
  if (op == "IsNaN") return fmt::format("({0} != {0})", x);
  if (op == "IsInf") {
    bool pos = n.get_int("detect_positive", 1) != 0, neg = n.get_int("detect_negative", 1) != 0;
    return fmt::format("(({0} == INFINITY && {1}) || ({0} == -INFINITY && {2}))", x, pos ? 1 : 0, neg ? 1 : 0);
  }
  if (op == "Not") return fmt::format("(!{})", x);
  if (op == "BitwiseNot") return fmt::format("(({})~{})", c_type(t), x);
  if (op == "Clip") {
    std::string e = x;
    auto bound = [&](size_t i) -> std::optional<std::string> {
      if (!n.has_input(i)) return std::nullopt;
      if (i < a.size() && !a[i].empty()) return a[i];  // a tensor bound: an operand
      const Tensor& c = cg.constant(n.inputs[i]);
      if (dtype_is_integer(t)) return fmt::format("(({}){}LL)", c_type(t), c.get_int64(0));
      return lit(c.get_double(0), t);
    };
    std::string lo = bound(1).value_or(""), hi = bound(2).value_or("");
    if (!lo.empty()) e = fmt::format("({0} < {1} ? {1} : {0})", e, lo);
    if (!hi.empty()) e = fmt::format("({0} > {1} ? {1} : {0})", e, hi);
    return e;
  }
  auto b = a.size() > 1 ? a[1] : std::string();
  const bool signed_int = dtype_is_integer(t) && dtype_is_signed(t);
  const bool wraps = signed_int && dtype_bits(t) >= 32;  // int arithmetic would overflow (undefined): unsigned
  if (op == "Add" || op == "Sub" || op == "Mul") {
    const char* o = op == "Add" ? "+" : op == "Sub" ? "-" : "*";
    if (wraps) return fmt::format("(({0})((uint{1}_t){2} {3} (uint{1}_t){4}))", c_type(t), dtype_bits(t), x, o, b);
    return fmt::format("({} {} {})", x, o, b);
  }
  if (op == "Div") {
    if (flt) return fmt::format("({} / {})", x, b);
    return fmt::format("(({}){}({}, {}))", c_type(t), signed_int ? "hk_idiv" : "hk_udiv", x, b);
  }
  if (op == "Mod") {
    bool fmod_ = n.get_int("fmod", 0) != 0;
    if (flt) return fmod_ ? fmt::format("{}({}, {})", fn("fmod", t), x, b)
                          : fmt::format("{}({}, {})", t == DType::F32 ? "hk_fmodpyf" : "hk_fmodpy", x, b);
    if (!signed_int) return fmt::format("(({})hk_umod({}, {}))", c_type(t), x, b);
    return fmt::format("(({}){}({}, {}))", c_type(t), fmod_ ? "hk_ifmod" : "hk_imod", x, b);
  }
  if (op == "Pow") {
    DType e = compute_of(cg.dtype_of(n.inputs[1]));
    bool e_flt = e == DType::F32 || e == DType::F64;
    if (t == DType::F32 && e == DType::F32) return fmt::format("powf({}, {})", x, b);
    if (flt) return fmt::format("(({})pow((double){}, (double){}))", c_type(t), x, b);
    if (e_flt) return fmt::format("(({})hk_pow_to_int(pow((double){}, (double){})))", c_type(t), x, b);
    return fmt::format("(({})hk_ipow((int64_t){}, (int64_t){}))", c_type(t), x, b);
  }
  if (op == "PRelu") return fmt::format("({0} < 0 ? {0} * {1} : {0})", x, b);
  if (op == "Equal") return fmt::format("({} == {})", x, b);
  if (op == "Less") return fmt::format("({} < {})", x, b);
  if (op == "Greater") return fmt::format("({} > {})", x, b);
  if (op == "LessOrEqual") return fmt::format("({} <= {})", x, b);
  if (op == "GreaterOrEqual") return fmt::format("({} >= {})", x, b);
  if (op == "And") return fmt::format("({} && {})", x, b);
  if (op == "Or") return fmt::format("({} || {})", x, b);
  if (op == "Xor") return fmt::format("(!{} != !{})", x, b);
  if (op == "BitwiseAnd") return fmt::format("(({}){} & {})", c_type(t), x, b);
  if (op == "BitwiseOr") return fmt::format("(({}){} | {})", c_type(t), x, b);
  if (op == "BitwiseXor") return fmt::format("(({}){} ^ {})", c_type(t), x, b);
  if (op == "BitShift") {
    bool left = n.get_string("direction", "") == "LEFT";
    return fmt::format("(({0}){2} >= {3} ? 0 : ({0})({1} {4} {2}))", c_type(t), x, b, dtype_bits(t), left ? "<<" : ">>");
  }
  if (op == "Where") return fmt::format("({} ? {} : {})", a[0], a[1], a[2]);
  if (op == "Max" || op == "Min" || op == "Sum" || op == "Mean") {
    std::vector<std::string> v;
    for (const auto& e : a)
      if (!e.empty()) v.push_back(e);
    std::string e = v[0];
    for (size_t i = 1; i < v.size(); ++i) {
      if (op == "Max") e = fmt::format("(({0} > {1} || {0} != {0}) ? {0} : {1})", e, v[i]);
      else if (op == "Min") e = fmt::format("(({0} < {1} || {0} != {0}) ? {0} : {1})", e, v[i]);
      else e = fmt::format("({} + {})", e, v[i]);
    }
    if (op == "Mean") e = fmt::format("({} / {})", e, lit(static_cast<double>(v.size()), t));
    return e;
  }
  fail(ErrorCode::Internal, "no elementwise expression for {}", op);
}

// Elements per thread below which a loop is not worth splitting.
constexpr int64_t kParallelRange = 16384;

// Loop body lines are indented for the run function; one level less in an outlined one.
std::string replace_indent(const std::string& body) {
  std::string out;
  size_t at = 0;
  while (at < body.size()) {
    size_t end = body.find('\n', at);
    std::string line = body.substr(at, end == std::string::npos ? std::string::npos : end - at + 1);
    out += line.rfind("  ", 0) == 0 ? line.substr(2) : line;
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return out;
}

// The dtype the node computes in (its inputs' dtype; Where: the data inputs'), as C
// computes it (float for f16/bf16).
DType compute_dtype(const Codegen& cg, const Node& n) {
  size_t i = n.op_type == "Where" ? 1 : 0;
  return compute_of(cg.dtype_of(n.inputs[i]));
}

}  // namespace

std::vector<std::string> elementwise_op_names() {
  std::vector<std::string> v;
  for (const auto& [name, op] : ew_ops()) v.push_back(name);
  return v;
}

bool is_elementwise(const Codegen& cg, const Node& n) {
  if (!n.domain.empty()) return false;
  auto it = ew_ops().find(n.op_type);
  if (it == ew_ops().end() || n.outputs.size() != 1 || n.inputs.empty()) return false;
  if (it->second.arity > 0 && static_cast<int>(n.inputs.size()) > it->second.arity &&
      n.op_type != "Clip")
    return false;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (n.inputs[i].empty()) {
      if (!is_param_input(cg, n, i)) return false;
      continue;
    }
    if (!is_param_input(cg, n, i) && !loadable(cg.dtype_of(n.inputs[i]))) return false;
  }
  DType t = compute_dtype(cg, n);
  DType out = cg.dtype_of(n.outputs[0]);
  if (!loadable(out)) return false;
  if (it->second.family == Math && t != DType::F32 && t != DType::F64) return false;
  if (it->second.family == Logic && t != DType::Bool) return false;
  if (it->second.family == Integer && !dtype_is_integer(t)) return false;
  if (it->second.family == Unsigned && (!dtype_is_integer(t) || dtype_is_signed(t))) return false;
  if (n.op_type == "Sign" && !(dtype_is_signed(t) || dtype_is_float(t))) return false;
  if (n.op_type == "Pow" && !loadable(cg.dtype_of(n.inputs[1]))) return false;
  return true;
}

void emit_elementwise_group(Codegen& cg, const std::vector<const Node*>& group) {
  const Node& last = *group.back();
  const std::string out_name = last.outputs[0];
  const SymShape out_shape = cg.shape_of(out_name);
  const SymInt count = numel(out_shape);
  const int64_t rank = static_cast<int64_t>(out_shape.size());
  std::set<std::string> produced;
  for (const Node* n : group) produced.insert(n->outputs[0]);

  // Operands: outside inputs get a pointer local; scalars constants a literal.
  std::map<std::string, std::string> operand;  // value → C expression per element
  std::string pre, body;
  std::string unpack, pointers;  // the parallel form: pointers passed through a void* array
  std::vector<std::string> outside;
  int temp = 0;
  auto out_strides = row_major_strides(out_shape);
  for (const Node* n : group)
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      const std::string& in = n->inputs[i];
      if (in.empty() || is_param_input(cg, *n, i) || produced.count(in) || operand.count(in)) continue;
      DType dt = cg.dtype_of(in);
      SymShape s = cg.shape_of(in);
      if (cg.is_constant(in) && numel(s).is(1)) {
        operand[in] = lit(cg.constant(in).get_double(0), compute_of(dt));
        if (dtype_is_integer(dt) || dt == DType::Bool)
          operand[in] = fmt::format("(({}){}LL)", c_type(dt), cg.constant(in).get_int64(0));
        continue;
      }
      std::string p = fmt::format("p{}", outside.size());
      std::string where = cg.ptr(in);
      pre += fmt::format("    const {}* {} = {};\n", c_type(dt), p, where);
      unpack += fmt::format("  const {0}* {1} = (const {0}*)a[{2}];\n", c_type(dt), p, outside.size());
      pointers += fmt::format("(void*){}, ", where);
      outside.push_back(in);
      // Broadcast index: right-aligned dims; size-1 dims of the input do not move.
      std::string idx;
      if (s == out_shape) {
        idx = "i";
      } else if (numel(s).is(1)) {
        idx = "0";
      } else {
        int64_t off = rank - static_cast<int64_t>(s.size());
        auto in_strides = row_major_strides(s);
        // A dim moves when it is the output's; a run-time dim that may be 1 (and so
        // broadcast) has its stride chosen when the dims are bound.
        auto moves = [&](int64_t d) { return d - off >= 0 && s[d - off] == out_shape[d] && !s[d - off].is(1); };
        auto maybe = [&](int64_t d) { return d - off >= 0 && !s[d - off].is(1) && !moves(d); };
        // One term per run of adjacent dims the input does not broadcast (they are contiguous
        // in both): Swin's [1, 3, 49, 49] mask over [64, 3, 49, 49] reads p[i % 7203], not a
        // division and a modulo per dim per element.
        for (int64_t d = 0; d < rank; ++d) {
          if (maybe(d)) {
            SymInt st = sym_select(sym_eq(s[d - off], 1), 0, in_strides[d - off]);
            std::string term = d == 0 ? fmt::format("(i / {})", out_strides[d])
                                      : fmt::format("((i / {}) % {})", out_strides[d], out_shape[d]);
            idx += (idx.empty() ? "" : " + ") + fmt::format("{} * {}", term, st);
            continue;
          }
          if (!moves(d)) continue;
          int64_t last = d;
          SymInt span = out_shape[d];
          while (last + 1 < rank && moves(last + 1)) span *= out_shape[++last];
          std::string term = d == 0 ? fmt::format("(i / {})", out_strides[last])
                                    : fmt::format("((i / {}) % {})", out_strides[last], span);
          if (out_strides[last].is(1)) term = d == 0 ? "i" : fmt::format("(i % {})", span);
          SymInt st = in_strides[last - off];
          idx += (idx.empty() ? "" : " + ") + (st.is(1) ? term : fmt::format("{} * {}", term, st));
          d = last;
        }
        if (idx.empty()) idx = "0";
      }
      operand[in] = fmt::format("{}[{}]", p, idx);
    }
  for (const Node* n : group) {
    DType t = compute_dtype(cg, *n);
    DType out = cg.dtype_of(n->outputs[0]);
    std::vector<std::string> args;
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      if (is_param_input(cg, *n, i) || n->inputs[i].empty()) {
        args.emplace_back();
        continue;
      }
      const std::string& e = operand.at(n->inputs[i]);
      // Load each operand once into a local (templates repeat their operands); float16 and
      // bfloat16 are loaded as float.
      if (e.find('[') != std::string::npos) {
        DType it = cg.dtype_of(n->inputs[i]);
        std::string v = fmt::format("v{}", temp++);
        std::string load = it == DType::F16 ? "hk_f16_to_f32(" + e + ")" : it == DType::BF16 ? "hk_bf16_to_f32(" + e + ")" : e;
        body += fmt::format("      const {} {} = {};\n", c_type(compute_of(it)), v, load);
        operand[n->inputs[i]] = v;
        args.push_back(v);
      } else {
        args.push_back(e);
      }
    }
    std::string v = fmt::format("v{}", temp++);
    const char* ct = c_type(compute_of(out));
    std::string expr = node_expr(cg, *n, args, t, compute_of(out));
    // A float16 / bfloat16 result is rounded to its precision (numpy computes each op in
    // float and rounds its result).
    if (out == DType::F16) expr = "hk_round_f16(" + expr + ")";
    if (out == DType::BF16) expr = "hk_round_bf16(" + expr + ")";
    body += fmt::format("      const {} {} = ({}){};\n", ct, v, ct, expr);
    operand[n->outputs[0]] = v;

  }
  // In place over an outside input that dies here and is read at index i.
  int reuse = -1;
  SymInt bytes = storage_bytes(cg.dtype_of(out_name), count);
  for (const auto& in : outside)
    if (cg.shape_of(in) == out_shape && cg.reusable(in, bytes) && storage_bytes(cg.dtype_of(in), count) == bytes) {
      reuse = cg.buffer_of(in);
      break;
    }
  cg.define(out_name, cg.dtype_of(out_name), out_shape, reuse);
  std::string comment;
  for (const Node* n : group) comment += (comment.empty() ? "" : " + ") + n->op_type;
  cg.emit(fmt::format("/* {} */ {{", comment));
  const DType out_dt = cg.dtype_of(out_name);
  const char* out_type = c_type(out_dt);
  // The stored value: float16 / bfloat16 converted from the float computed.
  std::string result = operand.at(out_name);
  if (out_dt == DType::F16) result = "hk_f32_to_f16(" + result + ")";
  if (out_dt == DType::BF16) result = "hk_f32_to_bf16(" + result + ")";
  // The conversions live in the kernel library's dtype section.
  for (const char* f : {"hk_d2", "hk_round_", "hk_f16_", "hk_bf16_", "hk_f32_to_"})
    if (body.find(f) != std::string::npos || result.find(f) != std::string::npos) cg.kernel_sections.insert("convert");
  if (cg.kernel_library && (!count.known() || count.value() >= 2 * kParallelRange)) {
    // Outlined, so the kernel library's threads can each run a range of it (run-time dims
    // travel with the pointers).
    std::string fn = fmt::format("hm_loop{}", cg.function_count++);
    std::string loop = replace_indent(body) + operand.at(out_name);
    bool dims = loop.find("S[") != std::string::npos;
    if (dims) unpack += fmt::format("  const int64_t* S = (const int64_t*)a[{}];\n", outside.size() + 1);
    cg.functions += fmt::format(
        "static void {}(void* arg, int64_t begin, int64_t end) {{\n  void* const* a = (void* const*)arg;\n{}"
        "  {}* o = ({}*)a[{}];\n  for (int64_t i = begin; i < end; ++i) {{\n{}    o[i] = {};\n  }}\n}}\n",
        fn, unpack, out_type, out_type, outside.size(), replace_indent(body), result);
    cg.code += fmt::format("    void* a[] = {{{}(void*){}{}}};\n", pointers, cg.ptr(out_name), dims ? ", (void*)S" : "");
    cg.code += fmt::format("    hodu_kernels_parallel_for(m->kernels, {}, {}, {}, a);\n  }}\n", count, kParallelRange, fn);
    cg.fused_nodes += static_cast<int>(group.size()) - 1;
    return;
  }
  cg.code += pre;
  cg.code += fmt::format("    {}* o = {};\n", out_type, cg.ptr(out_name));
  cg.code += fmt::format("    for (int64_t i = 0; i < {}; ++i) {{\n{}      o[i] = {};\n    }}\n  }}\n", count, body,
                         result);
  cg.fused_nodes += static_cast<int>(group.size()) - 1;
}

}  // namespace hodu::compilers::c
