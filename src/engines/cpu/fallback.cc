// Any node without a cpu kernel runs on the interpreter's kernel: the cpu
// engine runs every model the interpreter runs, only not always faster.
#include "core/error.h"
#include "engines/cpu/plan.h"
#include "engines/interp/kernel.h"

namespace hodu::cpu {
namespace {

class FallbackStep : public Step {
 public:
  FallbackStep(const Node& node, interp::KernelFn fn, const Graph& graph, uint64_t seed)
      : node_(node), fn_(fn), graph_(graph), seed_(seed) {}
  void run(RunState& rs) override {
    // reseed_each_run: the run's salt mixed in (splitmix64's finalizer), else the plan's seed.
    uint64_t seed = seed_;
    if (rs.seed_salt) {
      seed ^= rs.seed_salt;
      seed = (seed ^ (seed >> 30)) * 0xBF58476D1CE4E5B9ull;
      seed = (seed ^ (seed >> 27)) * 0x94D049BB133111EBull;
      seed ^= seed >> 31;
    }
    interp::KernelContext ctx{node_, {}, {}, rs.threads, seed, {}};
    ctx.graph = &graph_;
    ctx.inputs.reserve(node_.inputs.size());
    size_t r = 0;
    for (const auto& in : node_.inputs) ctx.inputs.push_back(in.empty() ? nullptr : &rs.slots[reads[r++]].value);
    ctx.outputs.resize(node_.outputs.size());
    ctx.run_subgraph = [&](const Graph& sg, const std::vector<RuntimeValue>& sg_inputs) {
      std::map<std::string, const RuntimeValue*> scope;
      for (const auto& s : rs.slots)
        if (!s.value.is_none() && !s.blocked) scope[s.name] = &s.value;
      return rs.interp.run_graph(sg, sg_inputs, scope);
    };
    try {
      fn_(ctx);
    } catch (const Error& e) {
      std::string prefix = node_.describe();
      if (std::string_view(e.what()).find(prefix) != std::string_view::npos) throw;
      throw e.with_context(prefix + ": ");
    }
    size_t w = 0;
    for (size_t i = 0; i < node_.outputs.size(); ++i) {
      if (node_.outputs[i].empty()) continue;
      RuntimeValue& v = ctx.outputs[i];
      if (v.is_none()) fail(ErrorCode::Internal, "{}: kernel did not produce output {}", node_.describe(), i);
      if (v.is_tensor() && v.tensor.dtype() != DType::String && !v.tensor.is_contiguous())
        v.tensor = v.tensor.contiguous();
      own_arena_tensors(v, rs.arena);
      rs.slots[writes[w++]].value = std::move(v);
    }
  }

 private:
  const Node& node_;
  interp::KernelFn fn_;
  const Graph& graph_;
  uint64_t seed_;
};

// The interpreter's per-node seed for random ops (same node name and index, same numbers).
uint64_t mix_seed(uint64_t seed, const std::string& name, size_t index) {
  uint64_t h = seed ^ 0x9E3779B97F4A7C15ull;
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001B3ull;
  return h ^ (index * 0xBF58476D1CE4E5B9ull);
}

}  // namespace

// A kernel may hand back its input (Identity, inference Dropout, SequenceConstruct) or a view of
// it; when that lives in the arena, later steps reuse the bytes, so the output gets its own copy.
void own_arena_tensors(RuntimeValue& v, const Storage* arena) {
  auto own = [&](Tensor& t) {
    if (arena && t.storage().get() == arena) t = t.clone();
  };
  own(v.tensor);
  for (auto& t : v.sequence) own(t);
  own(v.map_keys);
  own(v.map_values);
}

void make_fallback(PlanBuilder& b, const Node& node) {
  interp::KernelFn fn = interp::OpTable::instance().find(node.domain, node.op_type);
  if (!fn)
    fail(ErrorCode::Unsupported, "{}: op '{}'{} is not supported by the cpu engine", node.describe(), node.op_type,
         node.domain.empty() ? "" : " of domain '" + node.domain + "'");
  size_t index = static_cast<size_t>(&node - b.graph().nodes.data());
  auto step = std::make_unique<FallbackStep>(node, fn, b.graph(), mix_seed(b.seed(), node.name, index));
  for (const auto& in : node.inputs)
    if (!in.empty()) step->reads.push_back(b.plain(in));
  // Values read by subgraphs stay alive for the whole node.
  for (const auto& a : node.attributes) {
    std::vector<const Graph*> gs;
    if (a.g) gs.push_back(a.g.get());
    for (const auto& sg : a.graphs) gs.push_back(sg.get());
    std::function<void(const Graph&)> visit = [&](const Graph& sg) {
      for (const auto& n : sg.nodes) {
        for (const auto& in : n.inputs)
          if (!in.empty() && !sg.initializer(in)) {
            try {
              step->reads.push_back(b.plain(in));
            } catch (const Error&) {
              // defined inside the subgraph
            }
          }
        for (const auto& aa : n.attributes) {
          if (aa.g) visit(*aa.g);
          for (const auto& s2 : aa.graphs) visit(*s2);
        }
      }
    };
    for (const Graph* sg : gs) visit(*sg);
  }
  for (const auto& out : node.outputs) {
    if (out.empty()) continue;
    step->writes.push_back(b.define_dynamic(out));
  }
  step->label = node.describe() + ": interp";
  b.add(std::move(step));
}

}  // namespace hodu::cpu
