// Recurrent ops: RNN, GRU, LSTM as one call of the generic kernel hk_rnn (kernels/hk_ops.c,
// computed in double), with the newest ONNX semantics the interpreter has: layout,
// sequence_lens, bidirectional and reverse, activations with alpha/beta, clip, peepholes,
// input_forget, linear_before_reset. The sequence and batch may be free dims.
#include <fmt/format.h>

#include <map>

#include "compilers/c/ops_generic.h"
#include "core/error.h"

namespace hodu::compilers::c {
namespace {

struct Activation {
  int code;
  double alpha = 0, beta = 0;
  bool takes_alpha = false, takes_beta = false;
};

// ONNX activation names (case-insensitive) → hk_rnn_act codes and default alpha/beta.
std::optional<Activation> activation_of(std::string name) {
  for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static const std::map<std::string, Activation> table = {
      {"sigmoid", {0}},
      {"tanh", {1}},
      {"relu", {2}},
      {"affine", {3, 1, 0, true, true}},
      {"leakyrelu", {4, 0.01, 0, true, false}},
      {"thresholdedrelu", {5, 1, 0, true, false}},
      {"scaledtanh", {6, 1, 1, true, true}},
      {"hardsigmoid", {7, 0.2, 0.5, true, true}},
      {"elu", {8, 1, 0, true, false}},
      {"softsign", {9}},
      {"softplus", {10}},
  };
  auto it = table.find(name);
  if (it == table.end()) return std::nullopt;
  return it->second;
}

std::string list(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return "{" + s + "}";
}

void emit_rnn(Codegen& cg, const Node& n) {
  const int cell = n.op_type == "RNN" ? 0 : n.op_type == "GRU" ? 1 : 2;
  const int64_t G = cell == 0 ? 1 : cell == 1 ? 3 : 4;
  const std::string direction = n.get_string("direction", "forward");
  HODU_CHECK(direction == "forward" || direction == "reverse" || direction == "bidirectional",
             ErrorCode::InvalidModel, "{}: unknown direction '{}'", n.describe(), direction);
  const int64_t layout = n.get_int("layout", 0), dirs = direction == "bidirectional" ? 2 : 1;
  HODU_CHECK(layout == 0 || layout == 1, ErrorCode::InvalidModel, "{}: layout must be 0 or 1", n.describe());
  auto xs = cg.shape_of(n.inputs[0]), ws = cg.shape_of(n.inputs[1]), rs = cg.shape_of(n.inputs[2]);
  HODU_CHECK(xs.size() == 3 && ws.size() == 3 && rs.size() == 3, ErrorCode::InvalidModel,
             "{}: X, W and R must be 3-D", n.describe());
  const SymInt S = layout ? xs[1] : xs[0], B = layout ? xs[0] : xs[1], I = xs[2];
  const SymInt H = floordiv(ws[1], G);
  auto mismatch = [](const SymInt& a, const SymInt& b) { return a.known() && b.known() && a.value() != b.value(); };
  HODU_CHECK(!mismatch(ws[0], dirs) && !mismatch(ws[2], I) && !(ws[1].known() && ws[1].value() % G != 0),
             ErrorCode::InvalidModel, "{}: W {} must be [{}, {}*hidden, {}]", n.describe(), to_string(ws), dirs, G,
             I.c());
  HODU_CHECK(!mismatch(rs[0], dirs) && !mismatch(rs[1], ws[1]) && !mismatch(rs[2], H), ErrorCode::InvalidModel,
             "{}: R {} must be [{}, {}, {}]", n.describe(), to_string(rs), dirs, ws[1].c(), H.c());
  HODU_CHECK(!n.has_attr("hidden_size") || !mismatch(SymInt(n.get_int("hidden_size", 0)), H), ErrorCode::InvalidModel,
             "{}: hidden_size {} does not match W {}", n.describe(), n.get_int("hidden_size", 0), to_string(ws));

  // Activations: one list a direction (one list given for both directions is both's).
  std::vector<std::string> names = n.get_strings("activations");
  const std::vector<std::string> defaults = cell == 0   ? std::vector<std::string>{"Tanh"}
                                            : cell == 1 ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                        : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
  const size_t per = defaults.size();
  if (names.empty())
    for (int64_t d = 0; d < dirs; ++d) names.insert(names.end(), defaults.begin(), defaults.end());
  else if (names.size() == per && dirs == 2)
    names.insert(names.end(), names.begin(), names.end());
  HODU_CHECK(names.size() == per * static_cast<size_t>(dirs), ErrorCode::InvalidModel,
             "{}: activations has {} names, expected {}", n.describe(), names.size(), per * dirs);
  auto alphas = n.get_floats("activation_alpha"), betas = n.get_floats("activation_beta");
  size_t ai = 0, bi = 0;
  std::vector<std::string> codes(6, "0"), alpha(6, "0"), beta(6, "0");
  for (size_t k = 0; k < names.size(); ++k) {
    auto a = activation_of(names[k]);
    HODU_CHECK(a, ErrorCode::InvalidModel, "{}: unknown activation '{}'", n.describe(), names[k]);
    if (a->takes_alpha && ai < alphas.size()) a->alpha = alphas[ai++];
    if (a->takes_beta && bi < betas.size()) a->beta = betas[bi++];
    codes[k] = std::to_string(a->code);
    alpha[k] = fmt::format("{:.9g}", a->alpha);
    beta[k] = fmt::format("{:.9g}", a->beta);
  }
  const bool has_clip = n.has_attr("clip");
  const double clip = n.get_float("clip", 0.f);
  HODU_CHECK(!has_clip || clip > 0, ErrorCode::InvalidModel, "{}: clip must be positive", n.describe());

  auto opt_f64 = [&](size_t i) { return n.has_input(i) ? f64_in(cg, n.inputs[i]) : std::string("NULL"); };
  std::string x = f64_in(cg, n.inputs[0]), w = f64_in(cg, n.inputs[1]), r = f64_in(cg, n.inputs[2]);
  std::string bias = opt_f64(3), h0 = opt_f64(5), c0 = cell == 2 ? opt_f64(6) : "NULL",
              p = cell == 2 ? opt_f64(7) : "NULL";
  std::string lens = n.has_input(4) ? i64_in(cg, n.inputs[4]) : "NULL";
  std::vector<std::string> outs(3, "NULL");
  std::vector<WideOut> wide(3);
  for (size_t k = 0; k < (cell == 2 ? 3u : 2u); ++k)
    if (n.has_output(k)) {
      wide[k] = wide_out(cg, n.outputs[k], cg.shape_of(n.outputs[k]));
      outs[k] = wide[k].buffer;
    }
  std::string work = fmt::format("((double*){})", cg.scratch((SymInt(3 * G) * H + SymInt(2) * B * H) * 8));
  std::string args = fmt::format("rnn{}", cg.table_count++);
  const std::vector<std::string> fields = {
      std::to_string(cell), std::to_string(layout), direction == "reverse" ? "1" : "0", std::to_string(dirs),
      std::to_string(per), has_clip ? "1" : "0",
      n.get_int("linear_before_reset", 0) && cell == 1 ? "1" : "0",
      n.get_int("input_forget", 0) && cell == 2 ? "1" : "0", S.c(), B.c(), I.c(), H.c(), x, w, r, bias, h0, c0, p,
      lens, list(codes), list(alpha), list(beta), fmt::format("{:.9g}", clip), outs[0], outs[1], outs[2]};
  std::string init;
  for (const auto& f : fields) init += (init.empty() ? "" : ", ") + f;
  cg.emit(fmt::format("hk_rnn_args {} = {{{}}};", args, init));
  cg.emit_checked(fmt::format("hk_rnn(&{}, {})", args, work), n, "a sequence length is out of [0, seq_length]");
  for (size_t k = 0; k < 3; ++k)
    if (outs[k] != "NULL") wide[k].finish(cg);
}

}  // namespace

std::vector<std::string> rnn_op_names() { return {"RNN", "GRU", "LSTM"}; }

bool emit_rnn_op(Codegen& cg, const Node& n) {
  if (!n.domain.empty() || (n.op_type != "RNN" && n.op_type != "GRU" && n.op_type != "LSTM")) return false;
  emit_rnn(cg, n);
  need_generic_kernels(cg);
  return true;
}

}  // namespace hodu::compilers::c
