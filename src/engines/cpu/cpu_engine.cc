#include "engines/cpu/cpu_engine.h"

#include <omp.h>

#include <cstdlib>
#include <mutex>

#include "core/error.h"
#include "engines/cpu/plan.h"
#include "passes/passes.h"

namespace hodu::cpu {
namespace {

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::string(v) != "0";
}

using ShapeKey = std::vector<std::vector<int64_t>>;

class CpuExecutable : public Executable {
 public:
  CpuExecutable(const Model& model, const EngineOptions& o)
      : threads_(std::max(o.threads, 1)), engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
    level_ = passes::optimized_level(model);
    base_ = model;
    if (level_ < 0) {
      level_ = kDefaultOptLevel;
      passes::optimize(base_, {level_, {}});
    }
    options_.threads = threads_;
    options_.dispatcher = o.dispatcher;
    options_.seed = o.seed;
    options_.verbose = env_flag("HODU_CPU_VERBOSE");
    options_.blocked_layouts = !env_flag("HODU_CPU_PLAIN_LAYOUT");
    for (const auto& in : base_.graph.inputs)
      if (!base_.graph.initializer(in.name)) feed_names_.push_back(in.name);
  }

  std::vector<RuntimeValue> run(const std::map<std::string, RuntimeValue>& inputs) override {
    ShapeKey key;
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const auto& name : feed_names_) {
      auto it = inputs.find(name);
      if (it == inputs.end()) fail(ErrorCode::InvalidArgument, "missing input '{}'", name);
      if (!it->second.is_tensor()) {
        key.push_back({-1});
        continue;
      }
      key.push_back(it->second.tensor.shape());
      const Value* declared = base_.graph.input(name);
      if (declared && declared->type.is_tensor()) shapes[name] = it->second.tensor.shape();
    }
    PerShape* ps = nullptr;
    for (auto& p : plans_)
      if (p->key == key) ps = p.get();
    if (!ps) {
      auto p = std::make_unique<PerShape>();
      p->key = key;
      // With concrete shapes, shape subgraphs fold and more fusions apply; a model whose
      // declared input shapes are these already had that done at prepare.
      bool declared = true;
      for (const auto& in : base_.graph.inputs) {
        auto it = shapes.find(in.name);
        if (it == shapes.end()) continue;
        auto d = in.type.shape.to_static();
        declared &= d && *d == it->second;
      }
      const Model* m = &base_;
      if (!declared) {
        p->model = base_;
        passes::optimize(p->model, {level_, shapes});
        m = &p->model;
      }
      p->plan = std::make_unique<Plan>(*m, shapes, options_, engine_);
      plans_.push_back(std::move(p));
      ps = plans_.back().get();
    }
    return ps->plan->run(inputs, stream_);
  }

 private:
  struct PerShape {
    ShapeKey key;
    Model model;
    std::unique_ptr<Plan> plan;
  };
  int threads_;
  int level_ = kDefaultOptLevel;
  Model base_;
  std::vector<std::string> feed_names_;
  PlanOptions options_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::vector<std::unique_ptr<PerShape>> plans_;
};

class CpuEngine : public Engine {
 public:
  std::string name() const override { return "cpu"; }
  std::string description() const override {
    return "optimized CPU: graph passes, oneDNN conv/matmul/pool, hand-written kernels, interpreter for the rest";
  }
  bool supports(const Device& d) const override { return d.kind == Device::Kind::CPU; }
  std::unique_ptr<Executable> prepare(const Model& model, const EngineOptions& o) override {
    return std::make_unique<CpuExecutable>(model, o);
  }
};

}  // namespace

std::shared_ptr<Engine> make_cpu_engine() { return std::make_shared<CpuEngine>(); }

}  // namespace hodu::cpu
