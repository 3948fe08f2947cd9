// Emitters for the random ops (kernels/hk_random.c): RandomNormal, RandomUniform and their
// -Like forms, Bernoulli, Multinomial, and Dropout in training mode. Each node draws from its
// own stream seeded as the reference interpreter seeds it (generator.cc's make_rng, Dropout's
// MT19937): its `seed` attribute, or else the interpreter's per-node seed at session seed 0
// (mix_seed of the node's name and position in the model's graph). So a library draws what
// `hodu run --engine interp` draws (its default --seed 0), and the same numbers every run.
#include <fmt/format.h>

#include <cstring>

#include "compilers/c/ops_generic.h"
#include "core/error.h"

namespace hodu::compilers::c {
namespace {

void need_random_kernels(Codegen& cg) {
  need_generic_kernels(cg);
  cg.kernel_sections.insert("random");
}

// The interpreter's seed of an unseeded node (interpreter.cc's mix_seed at session seed 0).
uint64_t interpreter_node_seed(Codegen& cg, const Node& n) {
  const Graph* g = cg.model ? &cg.model->graph : nullptr;
  for (size_t k = 0; g && k < g->nodes.size(); ++k) {
    const Node& m = g->nodes[k];
    if (m.op_type != n.op_type || m.outputs.empty() || n.outputs.empty() || m.outputs[0] != n.outputs[0]) continue;
    uint64_t h = 0 ^ 0x9E3779B97F4A7C15ull;
    for (char c : m.name) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001B3ull;
    return h ^ (k * 0xBF58476D1CE4E5B9ull);
  }
  fail(ErrorCode::Unsupported,
       "{}: not supported by compiled code: an unseeded random op that is not a node of the model's main graph (inside a control-flow body) "
       "cannot be compiled to draw what the interpreter draws; give it a `seed` attribute",
       n.describe());
}

// xoshiro's seed of a node: generator.cc's make_rng.
uint64_t stream_seed(Codegen& cg, const Node& n) {
  if (!n.has_attr("seed")) return interpreter_node_seed(cg, n);
  const float s = n.get_float("seed", 0.f);
  uint32_t bits;
  std::memcpy(&bits, &s, 4);
  return 0x5EEDull ^ (static_cast<uint64_t>(bits) << 16);
}

void emit_random_fill(Codegen& cg, const Node& n) {
  const bool normal = n.op_type == "RandomNormal" || n.op_type == "RandomNormalLike";
  DType dt = cg.dtype_of(n.outputs[0]);
  HODU_CHECK(dtype_is_float(dt) && !dtype_is_complex(dt), ErrorCode::Unsupported,
             "{}: dtype {} is not supported (needs a float type)", n.describe(), dtype_name(dt));
  auto ys = cg.shape_of(n.outputs[0]);
  need_random_kernels(cg);
  double a = normal ? n.get_float("mean", 0.f) : n.get_float("low", 0.f);
  double b = normal ? n.get_float("scale", 1.f) : n.get_float("high", 1.f);
  WideOut y = wide_out(cg, n.outputs[0], ys);
  cg.emit(fmt::format("hk_random_fill({}, {}, {}ull, {}, {:.17g}, {:.17g});", y.buffer, numel(ys), stream_seed(cg, n),
                      normal ? 1 : 0, a, b));
  y.finish(cg);
}

void emit_bernoulli(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]);
  HODU_CHECK(dtype_is_float(cg.dtype_of(n.inputs[0])), ErrorCode::Unsupported, "{}: input must be a float type",
             n.describe());
  need_random_kernels(cg);
  std::string p = f64_in(cg, n.inputs[0]);
  WideOut y = wide_out(cg, n.outputs[0], xs);
  cg.emit_checked(fmt::format("hk_bernoulli({}, {}, {}, {}ull)", p, y.buffer, numel(xs), stream_seed(cg, n)), n,
                  "an input element is not a probability in [0, 1]");
  y.finish(cg);
}

void emit_multinomial(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]), ys = cg.shape_of(n.outputs[0]);
  HODU_CHECK(xs.size() == 2 && ys.size() == 2, ErrorCode::InvalidModel, "{}: input must be 2-D [batch, classes]",
             n.describe());
  HODU_CHECK(dtype_is_float(cg.dtype_of(n.inputs[0])), ErrorCode::Unsupported, "{}: input must be a float type",
             n.describe());
  const int64_t samples = n.get_int("sample_size", 1);
  HODU_CHECK(samples >= 0, ErrorCode::InvalidModel, "{}: sample_size must be >= 0, got {}", n.describe(), samples);
  need_random_kernels(cg);
  std::string x = f64_in(cg, n.inputs[0]);
  std::string cdf = fmt::format("((double*){})", cg.scratch(xs[1] * 8));
  if (!xs[1].known() || xs[1].value() == 0)
    cg.emit(fmt::format("if ({} == 0 && {} > 0) return hm_fail(m, 4, \"%s\", {});", xs[1], samples,
                        c_string_literal(n.describe() + ": input has no classes")));
  WideOut y = wide_out(cg, n.outputs[0], ys, /*integer=*/true);
  cg.emit(fmt::format("hk_multinomial({}, {}, {}, {}, {}, {}ull, {});", x, y.buffer, xs[0], xs[1], samples,
                      stream_seed(cg, n), cdf));
  y.finish(cg);
}

// A scalar input as a C double expression (its first element).
std::string scalar_double(Codegen& cg, const Node& n, size_t i) {
  HODU_CHECK(numel(cg.shape_of(n.inputs[i])).is(1), ErrorCode::InvalidModel, "{}: input {} ('{}') must be a scalar",
             n.describe(), i, n.inputs[i]);
  if (cg.is_constant(n.inputs[i])) return fmt::format("{:.17g}", cg.constant(n.inputs[i]).get_double(0));
  DType dt = cg.dtype_of(n.inputs[i]);
  if (dtype_is_float(dt)) return fmt::format("({}[0])", f64_in(cg, n.inputs[i]));
  return fmt::format("((double){}[0])", i64_in(cg, n.inputs[i]));  // integers and bool
}

// Dropout with a training_mode input: the identity (mask all true) when it is false or the
// ratio 0, else numpy's mask and scale; decided while running when the flag is data.
void emit_training_dropout(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]);
  DType dt = cg.dtype_of(n.inputs[0]);
  HODU_CHECK(dtype_is_float(dt), ErrorCode::Unsupported, "{}: Dropout of {} (float types only)", n.describe(),
             dtype_name(dt));
  need_random_kernels(cg);
  auto constant_zero = [&](size_t i) {
    return n.has_input(i) && cg.is_constant(n.inputs[i]) && cg.constant(n.inputs[i]).numel() == 1 &&
           cg.constant(n.inputs[i]).get_double(0) == 0;
  };
  if (constant_zero(2) || constant_zero(1)) {
    // The identity (torch exports Swin-T's attention dropout in training mode with ratio 0);
    // its mask, all true, is written where something reads it.
    cg.define(n.outputs[0], dt, xs);
    cg.emit(fmt::format("memcpy({}, {}, {});", cg.ptr(n.outputs[0]), cg.ptr(n.inputs[0]),
                        storage_bytes(dt, numel(xs))));
    if (n.has_output(1)) {
      cg.define(n.outputs[1], DType::Bool, xs);
      cg.emit(fmt::format("memset({}, 1, {});", cg.ptr(n.outputs[1]), numel(xs)));
    }
    return;
  }
  std::string training = scalar_double(cg, n, 2);
  std::string ratio = n.has_input(1) ? scalar_double(cg, n, 1) : "0.5";
  const bool f64_scale = dt == DType::F64 && n.has_input(1) && cg.dtype_of(n.inputs[1]) == DType::F64;
  uint64_t seed = n.has_attr("seed") ? static_cast<uint64_t>(n.get_int("seed", 0)) : interpreter_node_seed(cg, n);
  std::string x = f64_in(cg, n.inputs[0]);
  SymInt count = numel(xs);
  std::string mask = n.has_output(1) ? fmt::format("((uint8_t*){})", (cg.define(n.outputs[1], DType::Bool, xs), cg.ptr(n.outputs[1])))
                                     : fmt::format("((uint8_t*){})", cg.scratch(count));
  std::string mt = fmt::format("((uint32_t*){})", cg.scratch(624 * 4));
  WideOut y = wide_out(cg, n.outputs[0], xs);
  cg.emit(fmt::format("{{ const double tr = {}, ratio = {};", training, ratio));
  cg.emit(fmt::format("  if (tr == 0 || ratio == 0) {{ memcpy({}, {}, (size_t)({}) * 8); memset({}, 1, (size_t)({})); }}",
                      y.buffer, x, count, mask, count));
  cg.emit(fmt::format("  else {{ if (!(ratio >= 0 && ratio < 1)) return hm_fail(m, 4, \"%s\", {});",
                      c_string_literal(n.describe() + ": the ratio is not in [0, 1)")));
  cg.emit(fmt::format("    hk_dropout_mask({}, {}, (uint32_t){}ull, ratio, {});", mask, count, seed, mt));
  cg.emit(fmt::format("    hk_dropout_apply({}, {}, {}, {}, {}); }} }}", x, mask, y.buffer, count,
                      f64_scale ? "1.0 / (1.0 - ratio)" : "(double)(1.0f / (1.0f - (float)ratio))"));
  y.finish(cg);
}

}  // namespace

bool is_training_dropout(const Node& n) { return n.domain.empty() && n.op_type == "Dropout" && n.has_input(2); }

std::vector<std::string> random_op_names() {
  return {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial"};
}

bool emit_random_op(Codegen& cg, const Node& n) {
  if (!n.domain.empty()) return false;
  const std::string& op = n.op_type;
  if (op == "RandomNormal" || op == "RandomUniform" || op == "RandomNormalLike" || op == "RandomUniformLike")
    emit_random_fill(cg, n);
  else if (op == "Bernoulli") emit_bernoulli(cg, n);
  else if (op == "Multinomial") emit_multinomial(cg, n);
  else if (is_training_dropout(n)) emit_training_dropout(cg, n);
  else return false;
  return true;
}

}  // namespace hodu::compilers::c
