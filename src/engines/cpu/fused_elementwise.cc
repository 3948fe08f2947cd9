// hodu.FusedElementwise: the body graph compiled at plan time into a list of
// array operations, run over chunks of the output that stay in L1 (each op a
// simple loop GCC vectorizes), chunks split over the threads: one pass over
// memory for the whole chain.
#include <cmath>

#include "core/error.h"
#include "engines/cpu/plan.h"
#include "engines/cpu/row_kernels.h"
#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/vector_math.h"

namespace hodu::cpu {
namespace {

constexpr int64_t kChunk = 512;

enum class Op { Add, Sub, Mul, Div, Relu, Neg, Abs, Sqrt, Reciprocal, Exp, Log, Sigmoid, Tanh, Erf };

std::optional<Op> op_of(const Node& n) {
  static const std::map<std::string, Op> ops = {
      {"Add", Op::Add},   {"Sub", Op::Sub},         {"Mul", Op::Mul}, {"Div", Op::Div},         {"Relu", Op::Relu},
      {"Neg", Op::Neg},   {"Abs", Op::Abs},         {"Sqrt", Op::Sqrt}, {"Reciprocal", Op::Reciprocal},
      {"Exp", Op::Exp},   {"Log", Op::Log},         {"Sigmoid", Op::Sigmoid}, {"Tanh", Op::Tanh},
      {"Erf", Op::Erf}};
  if (!n.domain.empty()) return std::nullopt;
  auto it = ops.find(n.op_type);
  if (it == ops.end()) return std::nullopt;
  return it->second;
}

bool is_binary(Op op) { return op == Op::Add || op == Op::Sub || op == Op::Mul || op == Op::Div; }

// Registers: [0, inputs) the node's inputs, then the body's constants, then temporaries.
struct Instr {
  Op op;
  int a = -1, b = -1, dst = -1;
};

// Exp, Sigmoid, Tanh and Erf on vector_math's vectorizable forms (exp about 2 ulp; tanh MLAS's
// rational approximation; erf within 4e-7 absolute, as the engine's Erf op): with the C
// library's they ran one element at a time (a Conformer's Swish, Sigmoid·Mul on 5760 values,
// 50 us; a GPT decoder's tanh GELU 40 % of its run).
HODU_ISA_BODY void apply_body(Op op, const float* a, const float* b, float* d, int64_t n) {
  using vector_math::exp_full;
  switch (op) {
    case Op::Add: for (int64_t i = 0; i < n; ++i) d[i] = a[i] + b[i]; break;
    case Op::Sub: for (int64_t i = 0; i < n; ++i) d[i] = a[i] - b[i]; break;
    case Op::Mul: for (int64_t i = 0; i < n; ++i) d[i] = a[i] * b[i]; break;
    case Op::Div: for (int64_t i = 0; i < n; ++i) d[i] = a[i] / b[i]; break;
    case Op::Relu: for (int64_t i = 0; i < n; ++i) d[i] = a[i] > 0.0f ? a[i] : 0.0f; break;
    case Op::Neg: for (int64_t i = 0; i < n; ++i) d[i] = -a[i]; break;
    case Op::Abs: for (int64_t i = 0; i < n; ++i) d[i] = std::fabs(a[i]); break;
    case Op::Sqrt: for (int64_t i = 0; i < n; ++i) d[i] = std::sqrt(a[i]); break;
    case Op::Reciprocal: for (int64_t i = 0; i < n; ++i) d[i] = 1.0f / a[i]; break;
    case Op::Exp: for (int64_t i = 0; i < n; ++i) d[i] = exp_full(a[i]); break;
    case Op::Log: for (int64_t i = 0; i < n; ++i) d[i] = std::log(a[i]); break;
    case Op::Sigmoid: for (int64_t i = 0; i < n; ++i) d[i] = 1.0f / (1.0f + exp_full(-a[i])); break;
    case Op::Tanh: for (int64_t i = 0; i < n; ++i) d[i] = vector_math::tanh_approx(a[i]); break;
    case Op::Erf: for (int64_t i = 0; i < n; ++i) d[i] = vector_math::erf_approx(a[i]); break;
  }
}
HODU_ISA_VARIANTS(void, apply, (Op op, const float* a, const float* b, float* d, int64_t n), (op, a, b, d, n))

class FusedElementwiseStep : public Step {
 public:
  void run(RunState& rs) override {
    std::vector<const float*> in(reads.size());
    for (size_t i = 0; i < reads.size(); ++i) in[i] = rs.slots[reads[i]].tensor().data<float>();
    float* out = rs.slots[writes[0]].value.tensor.data<float>();
    const int64_t chunks = (numel_ + kChunk - 1) / kChunk;
    const int64_t nregs = static_cast<int64_t>(regs_);
    parallel_for(chunks, rs.threads, [&](int64_t c) {
      // Per-thread scratch rows for the temporaries, sized once.
      thread_local std::vector<float> scratch;
      if (static_cast<int64_t>(scratch.size()) < nregs * kChunk) scratch.resize(nregs * kChunk);
      const int64_t off = c * kChunk, len = std::min(kChunk, numel_ - off);
      thread_local std::vector<const float*> src;
      src.assign(nregs, nullptr);
      for (size_t i = 0; i < in.size(); ++i) src[i] = broadcast_[i] ? splat_input(in[i][0], scratch, i) : in[i] + off;
      for (size_t i = 0; i < constants_.size(); ++i) src[in.size() + i] = constants_[i].data();
      for (size_t k = 0; k < program_.size(); ++k) {
        const Instr& ins = program_[k];
        float* d = k + 1 == program_.size() ? out + off : scratch.data() + ins.dst * kChunk;
        apply(ins.op, src[ins.a], ins.b >= 0 ? src[ins.b] : nullptr, d, len);
        src[ins.dst] = d;
      }
    });
  }
  // A one-element input broadcast: its scratch row filled with the value.
  static const float* splat_input(float v, std::vector<float>& scratch, size_t reg) {
    float* row = scratch.data() + reg * kChunk;
    for (int64_t i = 0; i < kChunk; ++i) row[i] = v;
    return row;
  }

  std::vector<Instr> program_;
  std::vector<bool> broadcast_;                // per node input: one element
  std::vector<std::vector<float>> constants_;  // the body's scalars, splat to a chunk
  size_t regs_ = 0;
  int64_t numel_ = 0;
};

}  // namespace

bool make_fused_elementwise(PlanBuilder& b, const Node& n) {
  if (n.domain != "hodu" || n.op_type != "FusedElementwise" || n.outputs.size() != 1) return false;
  const Graph* body = n.get_graph("body");
  auto y = b.static_type(n.outputs[0]);
  if (!body || !y || y->first != DType::F32 || body->outputs.size() != 1 || body->inputs.size() != n.inputs.size())
    return false;
  const int64_t numel = shape_numel(y->second);
  if (numel == 0) return false;
  auto step = std::make_unique<FusedElementwiseStep>();
  std::map<std::string, int> reg;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    auto t = b.static_type(n.inputs[i]);
    if (!t || t->first != DType::F32) return false;
    int64_t m = shape_numel(t->second);
    if (m != numel && m != 1) return false;
    step->broadcast_.push_back(m == 1 && numel != 1);
    reg[body->inputs[i].name] = static_cast<int>(i);
  }
  for (const auto& [name, t] : body->initializers) {
    if (reg.count(name)) continue;  // an overridable input, bound above
    if (t.dtype() != DType::F32 || t.numel() != 1) return false;
    reg[name] = static_cast<int>(n.inputs.size() + step->constants_.size());
    step->constants_.emplace_back(kChunk, t.contiguous().data<float>()[0]);
  }
  int next = static_cast<int>(n.inputs.size() + step->constants_.size());
  for (const auto& bn : body->nodes) {
    auto op = op_of(bn);
    if (!op || bn.outputs.size() != 1) return false;
    size_t arity = is_binary(*op) ? 2 : 1;
    if (bn.inputs.size() != arity) return false;
    Instr ins{*op};
    for (size_t i = 0; i < arity; ++i) {
      auto it = reg.find(bn.inputs[i]);
      if (it == reg.end()) return false;  // an outer value the body reads: not handled here
      (i == 0 ? ins.a : ins.b) = it->second;
    }
    ins.dst = next++;
    reg[bn.outputs[0]] = ins.dst;
    step->program_.push_back(ins);
  }
  if (step->program_.empty() || reg[body->outputs[0].name] != step->program_.back().dst) return false;
  step->regs_ = static_cast<size_t>(next);
  step->numel_ = numel;
  for (const auto& in : n.inputs) step->reads.push_back(b.plain(in));
  step->writes = {b.define(n.outputs[0], DType::F32, y->second)};
  step->label = n.describe() + ": cpu fused loop (" + std::to_string(step->program_.size()) + " ops)";
  b.add(std::move(step));
  return true;
}

}  // namespace hodu::cpu
