// Emitters for the ai.onnx.preview.training optimizers Adagrad, Adam and Momentum: one
// update step of each tensor group (kernels/hk_ops.c, doubles), as the reference
// interpreter (engines/interp/ops/training.cc) computes it. R and T are read while running.
// Gradient (a graph differentiated while running) stays with the interpreter.
#include <fmt/format.h>

#include <algorithm>

#include "compilers/c/ops_generic.h"
#include "core/error.h"

namespace hodu::compilers::c {
namespace {

constexpr const char* kTraining = "ai.onnx.preview.training";

// Tensors per group of the node's layout (R, T, then `groups` groups of n), checked.
int64_t group_size(Codegen& cg, const Node& n, int64_t groups, int64_t out_groups) {
  int64_t ni = static_cast<int64_t>(n.inputs.size()) - 2;
  HODU_CHECK(ni > 0 && ni % groups == 0, ErrorCode::InvalidModel, "{}: expected R, T and {} groups of tensors, got {} inputs",
             n.describe(), groups, n.inputs.size());
  int64_t k = ni / groups;
  HODU_CHECK(static_cast<int64_t>(n.outputs.size()) == k * out_groups, ErrorCode::InvalidModel,
             "{}: expected {} outputs, got {}", n.describe(), k * out_groups, n.outputs.size());
  for (int64_t i = 0; i < ni; ++i) {
    const std::string &t = n.inputs[2 + i], &x = n.inputs[2 + i % k];
    DType dt = cg.dtype_of(t);
    HODU_CHECK(dt == DType::F32 || dt == DType::F64, ErrorCode::Unsupported, "{}: input {} has dtype {}; float or double needed",
               n.describe(), 2 + i, dtype_name(dt));
    HODU_CHECK(dt == cg.dtype_of(x) && cg.shape_of(t).size() == cg.shape_of(x).size(), ErrorCode::InvalidModel,
               "{}: input {} does not match its parameter", n.describe(), 2 + i);
  }
  return k;
}

// A scalar input as a C double expression.
std::string scalar(Codegen& cg, const Node& n, size_t i, const char* what) {
  HODU_CHECK(numel(cg.shape_of(n.inputs[i])).is(1), ErrorCode::InvalidModel, "{}: {} must be a scalar", n.describe(),
             what);
  return fmt::format("({}[0])", doubles_in(cg, n.inputs[i]));
}

}  // namespace

bool is_compiled_training_op(const Node& n) {
  return n.domain == kTraining && (n.op_type == "Adagrad" || n.op_type == "Adam" || n.op_type == "Momentum");
}

std::vector<SymShape> training_op_shapes(const Node& n, const std::function<SymShape(const std::string&)>& shape) {
  const int64_t groups = n.op_type == "Adam" ? 4 : 3;
  const int64_t k = std::max<int64_t>(1, (static_cast<int64_t>(n.inputs.size()) - 2) / groups);
  std::vector<SymShape> out;
  for (size_t j = 0; j < n.outputs.size(); ++j) out.push_back(shape(n.inputs.at(2 + j % k)));
  return out;
}

bool emit_training_op(Codegen& cg, const Node& n) {
  if (!is_compiled_training_op(n)) return false;
  const std::string& op = n.op_type;
  const int64_t groups = op == "Adam" ? 4 : 3, out_groups = op == "Adam" ? 3 : 2;
  const int64_t k = group_size(cg, n, groups, out_groups);
  need_generic_kernels(cg);
  std::string r = scalar(cg, n, 0, "R"), t = scalar(cg, n, 1, "T");
  auto attr = [&](const char* name, float def) { return fmt::format("{:.17g}", static_cast<double>(n.get_float(name, def))); };
  std::string rate;
  if (op == "Adagrad") {
    rate = fmt::format("{} / (1 + {} * {})", r, t, attr("decay_factor", 0.f));
  } else if (op == "Adam") {
    std::string a = attr("alpha", 0.9f), b = attr("beta", 0.999f);
    rate = fmt::format("({} > 0 ? {} * sqrt(1 - pow({}, {})) / (1 - pow({}, {})) : {})", t, r, b, t, a, t, r);
  } else {
    std::string mode = n.get_string("mode", "standard");
    HODU_CHECK(mode == "standard" || mode == "nesterov", ErrorCode::InvalidModel, "{}: unknown mode '{}'", n.describe(),
               mode);
  }
  for (int64_t i = 0; i < k; ++i) {
    SymInt cnt = numel(cg.shape_of(n.inputs[2 + i]));
    std::vector<std::string> in;
    for (int64_t g = 0; g < groups; ++g) in.push_back(f64_in(cg, n.inputs[2 + g * k + i]));
    std::vector<WideOut> out;
    for (int64_t g = 0; g < out_groups; ++g)
      out.push_back(wide_out(cg, n.outputs[g * k + i], cg.shape_of(n.inputs[2 + i])));
    if (op == "Adagrad") {
      cg.emit(fmt::format("hk_adagrad({}, {}, {}, {}, {}, {}, {}, {}, {});", in[0], in[1], in[2], out[0].buffer,
                          out[1].buffer, cnt, rate, attr("norm_coefficient", 0.f), attr("epsilon", 1e-6f)));
    } else if (op == "Adam") {
      cg.emit(fmt::format("hk_adam({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {});", in[0], in[1], in[2], in[3],
                          out[0].buffer, out[1].buffer, out[2].buffer, cnt, rate, attr("alpha", 0.9f),
                          attr("beta", 0.999f), attr("epsilon", 1e-6f), attr("norm_coefficient", 0.f),
                          attr("norm_coefficient_post", 0.f)));
    } else {
      cg.emit(fmt::format("hk_momentum({}, {}, {}, {}, {}, {}, {}, {}, ({} > 0 ? {} : 1.0), {}, {});", in[0], in[1],
                          in[2], out[0].buffer, out[1].buffer, cnt, r, attr("alpha", 0.f), t, attr("beta", 0.f),
                          attr("norm_coefficient", 0.f), n.get_string("mode", "standard") == "nesterov" ? 1 : 0));
    }
    for (const auto& o : out) o.finish(cg);
  }
  return true;
}

}  // namespace hodu::compilers::c
