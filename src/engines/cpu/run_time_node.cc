// A node whose input shapes the plan cannot know (they come out of a Loop's sequence, a
// SequenceAt, a data-dependent Reshape) and which has no kernel for shapes known only while
// running (a Conv, a MaxPool, a fused Gelu) is planned when it runs: a one-node graph planned
// like a subgraph, once per set of input shapes (Subgraph), its outputs handed on by value.
// Before, such nodes ran on the interpreter's kernel (torchvision's MViT-v2: 194 nodes, its
// 3-D pooling convs, MaxPools and GELUs behind the Loop that splits the class token).
#include <set>

#include "engines/cpu/subgraph.h"
#include "engines/cpu/tensor_step.h"
#include "passes/graph_utils.h"

namespace hodu::cpu {
namespace {

PlanOptions per_shape(PlanOptions o) {
  o.per_shape_node = true;
  return o;
}

class RunTimeNodeStep : public Step {
 public:
  RunTimeNodeStep(PlanBuilder& b, const Node& n, const Graph& body) : body_(b, body, per_shape(b.options())) {
    for (const auto& name : body_.outer()) reads.push_back(b.plain(name));
    for (const auto& o : n.outputs) {
      out_.push_back(o.empty() ? -1 : b.define_dynamic(o));
      if (out_.back() >= 0) writes.push_back(out_.back());
    }
    label = n.describe() + ": cpu, planned for its shapes while running";
  }
  void run(RunState& rs) override {
    std::vector<RuntimeValue> inputs;
    inputs.reserve(reads.size());
    for (int r : reads) inputs.push_back(rs.slots[r].value);
    Plan& p = body_.plan_for(inputs);
    // Large outputs in buffers the caller's plan let go earlier in this run: Keypoint R-CNN's
    // eight 512-channel head convs at 100 detections each left a 40 MB result in that pool and
    // allocated a new one, 328 MB at the peak.
    std::vector<Tensor> into;
    size_t k = 0;
    for (int slot : out_) {
      if (slot < 0) continue;
      const auto shape = p.output_shape(k);
      const DType dt = p.output_dtype(k);
      if (rs.pool && shape && dt != DType::String) {
        const size_t bytes = dtype_storage_bytes(dt, shape_numel(*shape));
        if (bytes >= kReleaseAfterUseBytes)
          if (auto reused = rs.pool->take(bytes)) {
            into.resize(k + 1);
            into[k] = Tensor::from_storage(dt, *shape, std::move(reused));
          }
      }
      ++k;
    }
    auto outs = p.run(inputs, rs.stream, into.empty() ? nullptr : &into, rs.seed_salt);
    k = 0;  // the body's outputs: the node's present ones, in order
    for (int slot : out_) {
      if (slot < 0) continue;
      own_arena_tensors(outs[k], rs.arena);
      own_arena_tensors(outs[k], p.arena());  // shared with the other such plans
      rs.slots[slot].value = std::move(outs[k++]);
    }
  }
  void list_kernels(std::vector<std::string>& out) const override {
    Step::list_kernels(out);
    for (const Plan* p : body_.plans())
      for (const auto& k : p->kernel_choices()) out.push_back("  " + k);
  }

 private:
  Subgraph body_;
  std::vector<int> out_;  // per node output: its slot, -1 when omitted
};

// Ops whose results depend on more than their inputs: the interpreter's per-node seed (mixed
// from the node's place in the graph) would differ in a graph of one node.
bool draws_random_numbers(const Node& n) {
  static const std::set<std::string> kRandom = {"RandomNormal", "RandomNormalLike", "RandomUniform",
                                                "RandomUniformLike", "Bernoulli", "Multinomial", "Dropout"};
  return n.domain.empty() && kRandom.count(n.op_type);
}

// The name of such a node's one-node graph. Past 8 shapes a Subgraph plans once with the
// varying dims free; that plan's node must not be deferred again (a new level every 8 shapes).
constexpr const char* kBodyPrefix = "run-time node ";

}  // namespace

bool make_run_time_node(PlanBuilder& b, const Node& n) {
  if (draws_random_numbers(n) || n.outputs.empty()) return false;
  if (b.graph().name.rfind(kBodyPrefix, 0) == 0) return false;
  if (passes::has_subgraph(n)) return false;  // control flow has its own steps
  bool unknown = false;
  for (const auto& in : n.inputs) {
    if (in.empty()) continue;
    const DType dt = dtype_of(b, in);
    if (dt == DType::Undefined || dt == DType::String) return false;  // sequences, maps, strings
    unknown |= !b.static_type(in).has_value();
  }
  if (!unknown) return false;  // shapes known: the node had its chance at the static kernels
  Graph body;
  body.name = kBodyPrefix + n.name;
  body.nodes.push_back(n);
  for (const auto& o : n.outputs) {
    if (o.empty()) continue;
    const auto t = b.graph().type_of(o);  // (the outputs have no slots yet)
    if (!t || !t->is_tensor() || t->dtype == DType::Undefined || t->dtype == DType::String) return false;
    body.outputs.push_back(Value{o, ValueType::tensor(t->dtype, Shape::unknown_rank()), ""});
  }
  b.add(std::make_unique<RunTimeNodeStep>(b, n, body));
  return true;
}

}  // namespace hodu::cpu
