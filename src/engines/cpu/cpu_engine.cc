#include "engines/cpu/cpu_engine.h"

#include <malloc.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>

#include "core/error.h"
#include "engines/cpu/plan.h"
#include "passes/graph_utils.h"
#include "ir/schema.h"
#include "passes/passes.h"

namespace hodu::cpu {
namespace {

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::string(v) != "0";
}

using ShapeKey = std::vector<std::vector<int64_t>>;

// glibc serves a freed block of 128 KB or more from mmap, then raises that threshold to the
// block's size (up to 32 MB), so the next ones come from the heap and stay resident once freed:
// tensors allocated while running (shapes known only then: a detector's filtered scores) made
// RetinaNet's peak grow 57 MB over its runs. Blocks of 1 MB or more always mmap'd, returned at
// free. Once a process, unless the user set MALLOC_MMAP_THRESHOLD_ (as hodugaki serve does).
void fix_malloc_mmap_threshold() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (!std::getenv("MALLOC_MMAP_THRESHOLD_")) mallopt(M_MMAP_THRESHOLD, 1 << 20);
  });
}

class CpuExecutable : public Executable {
 public:
  CpuExecutable(const Model& model, const EngineOptions& o)
      : threads_(std::max(o.threads, 1)), engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
    fix_malloc_mmap_threshold();
    level_ = passes::optimized_level(model);
    base_ = model;
    bool rewritten = engine_rewrites(base_, level_);
    const bool static_inputs = passes::all_inputs_static(base_.graph);
    if (level_ < 0) {
      level_ = o.opt_level >= 0 ? o.opt_level : kDefaultOptLevel;
      // Inputs with free dims: each plan optimizes the model for its shapes (new_plan), and
      // a graph fused here without them would keep fusions that needed them undone (a conv's
      // residual Add fused into an elementwise loop instead of the conv's sum post-op).
      base_optimized_ = static_inputs;
      if (base_optimized_) passes::optimize(base_, {level_, {}});
    } else if (rewritten) {
      infer_types(base_.graph);
    }
    options_.threads = threads_;
    options_.dispatcher = o.dispatcher;
    options_.seed = o.seed;
    options_.verbose = env_flag("HODU_CPU_VERBOSE");
    options_.blocked_layouts = !env_flag("HODU_CPU_PLAIN_LAYOUT");
    options_.release_weights = o.exclusive_weights;
    options_.single_plan = static_inputs;
    // A plan per input shape: they share the packed weights.
    if (!options_.single_plan) options_.weight_cache = std::make_shared<PackedWeightCache>();
    options_.state_in_place = o.update_state_in_place;
    reseed_ = o.reseed_each_run;
    options_.opt_level = level_;
    for (const auto& in : base_.graph.inputs)
      if (!base_.graph.initializer(in.name)) feed_names_.push_back(in.name);
  }

  std::vector<RuntimeValue> run(const std::map<std::string, RuntimeValue>& inputs) override {
    ShapeKey key;
    key.reserve(feed_names_.size());
    for (const auto& name : feed_names_) {
      auto it = inputs.find(name);
      if (it == inputs.end()) fail(ErrorCode::InvalidArgument, "missing input '{}'", name);
      key.push_back(it->second.is_tensor() ? it->second.tensor.shape() : std::vector<int64_t>{-1});
    }
    const uint64_t run_index = reseed_ ? runs_++ : 0;
    ++uses_;
    for (auto& p : plans_)
      if (p->key == key) {
        p->last_use = uses_;
        return p->plan->run(inputs, stream_, run_index);
      }
    if (generic_ && generic_->plan && matches(generic_->pattern, key)) {
      // A shape the free-dim plan already ran once comes again: it gets a plan of its own (a
      // caller that runs one shape many times — a batch size, a benchmark — gets the specialized
      // kernels; a decoder's one-off lengths stay on the free-dim plan).
      if (generic_hits_.size() > 64) generic_hits_.clear();
      if (++generic_hits_[key] < 2) return generic_->plan->run(inputs, stream_, run_index);
      generic_hits_.erase(key);
      return new_plan(std::move(key), inputs).run(inputs, stream_, run_index);
    }
    if (Plan* g = generic_plan(key)) return g->run(inputs, stream_, run_index);
    return new_plan(std::move(key), inputs).run(inputs, stream_, run_index);
  }

 private:
  // The plan for the shapes of a first run with `inputs`.
  Plan& new_plan(ShapeKey key, const std::map<std::string, RuntimeValue>& inputs) {
    // With concrete shapes, shape subgraphs fold and more fusions apply; a model whose
    // declared input shapes are these already had that done at prepare.
    std::map<std::string, std::vector<int64_t>> shapes;
    bool declared = true;
    for (const auto& name : feed_names_) {
      const RuntimeValue& v = inputs.at(name);
      const Value* in = base_.graph.input(name);
      if (!v.is_tensor() || !in || !in->type.is_tensor()) continue;
      shapes[name] = v.tensor.shape();
      auto d = in->type.shape.to_static();
      declared &= d && *d == shapes[name];
    }
    // At most kMaxPlans shapes keep their plan (arena, primitives, optimized model): a model fed
    // ever new shapes (a decoder's growing cache) drops the least recently used one.
    if (plans_.size() >= kMaxPlans) {
      auto lru = std::min_element(plans_.begin(), plans_.end(),
                                  [](const auto& a, const auto& b) { return a->last_use < b->last_use; });
      plans_.erase(lru);
    }
    auto p = std::make_unique<PerShape>();
    p->key = std::move(key);
    p->last_use = uses_;
    const Model* m = &base_;
    if (!declared || !base_optimized_) {
      p->model = base_;
      passes::optimize(p->model, {level_, shapes});
      m = &p->model;
    }
    p->plan = std::make_unique<Plan>(*m, shapes, options_, engine_);
    plans_.push_back(std::move(p));
    return *plans_.back()->plan;
  }

  // Dims that took kGenericAfter different values or more (a decoder's growing cache, text of any
  // length) get one plan with those dims free, where its kernels allow: the shape subgraphs run
  // and the products of run-time shapes go to oneDNN's sgemm per run, but no new plan (about
  // 15 ms of passes and planning for a small decoder) is built for each new length. A plan that
  // would run a node on the interpreter's kernel (a conv of free height and width) is not used:
  // such models keep a plan per shape.
  static bool matches(const ShapeKey& pattern, const ShapeKey& key) {
    if (pattern.size() != key.size()) return false;
    for (size_t i = 0; i < key.size(); ++i) {
      if (pattern[i].size() != key[i].size()) return false;
      for (size_t d = 0; d < key[i].size(); ++d)
        if (pattern[i][d] >= 0 && pattern[i][d] != key[i][d]) return false;
    }
    return true;
  }

  Plan* generic_plan(const ShapeKey& key) {
    if (options_.single_plan) return nullptr;
    // The dims that differed among the shapes seen so far are free (-1); a rank that changed, or a
    // non-tensor input, makes no pattern.
    if (pattern_.empty()) {
      pattern_ = key;
    } else {
      for (size_t i = 0; i < key.size() && i < pattern_.size(); ++i) {
        if (pattern_[i].size() != key[i].size()) return nullptr;
        for (size_t d = 0; d < key[i].size(); ++d)
          if (pattern_[i][d] != key[i][d]) pattern_[i][d] = -1;
      }
    }
    if (++shapes_seen_ <= kGenericAfter) return nullptr;
    if (generic_ && generic_->pattern == pattern_) return nullptr;  // tried: it would fall back
    for (size_t i = 0; i < pattern_.size(); ++i) {
      const Value* in = base_.graph.input(feed_names_[i]);
      if (!in || !in->type.is_tensor() || !in->type.shape.rank_known() ||
          in->type.shape.rank() != static_cast<int64_t>(pattern_[i].size()))
        return nullptr;
    }
    auto g = std::make_unique<Generic>();
    g->pattern = pattern_;
    g->model = base_;
    std::map<std::string, std::vector<int64_t>> shapes;  // the inputs with no free dim
    for (size_t i = 0; i < pattern_.size(); ++i) {
      Value* in = nullptr;
      for (auto& v : g->model.graph.inputs)
        if (v.name == feed_names_[i]) in = &v;
      std::vector<Dim> dims;
      bool all_known = true;
      for (size_t d = 0; d < pattern_[i].size(); ++d) {
        const Dim& declared = in->type.shape.dims()[d];
        if (pattern_[i][d] >= 0) dims.push_back(Dim(pattern_[i][d]));
        else {
          dims.push_back(declared.is_known() || declared.symbol.empty() ? Dim::sym(feed_names_[i] + "_dim" + std::to_string(d))
                                                                        : declared);
          all_known = false;
        }
      }
      in->type.shape = Shape(dims);
      if (all_known) shapes[feed_names_[i]] = pattern_[i];
    }
    passes::optimize(g->model, {level_, shapes});
    auto plan = std::make_unique<Plan>(g->model, shapes, options_, engine_);
    if (plan->fallback_count() == 0) g->plan = std::move(plan);
    generic_ = std::move(g);
    return generic_->plan ? generic_->plan.get() : nullptr;
  }

  struct Generic {
    ShapeKey pattern;  // -1: a free dim
    Model model;       // read by the plan: destroyed after it
    std::unique_ptr<Plan> plan;  // null: it would have run a node on the interpreter
  };
  static constexpr int kGenericAfter = 3;
  ShapeKey pattern_;
  int shapes_seen_ = 0;
  std::map<ShapeKey, int> generic_hits_;  // runs of each shape on the free-dim plan
  std::unique_ptr<Generic> generic_;

  struct PerShape {
    ShapeKey key;
    uint64_t last_use = 0;
    // The plan reads the model (its graph, constants) while it lives: declared first, destroyed last.
    Model model;
    std::unique_ptr<Plan> plan;
  };
  static constexpr size_t kMaxPlans = 8;
  uint64_t uses_ = 0;
  int threads_;
  bool reseed_ = false;
  uint64_t runs_ = 0;  // reseed_each_run: the index of the next run
  int level_ = kDefaultOptLevel;
  bool base_optimized_ = true;  // false: every plan optimizes base_ for its shapes
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
    apply_isa_cap();
    return std::make_unique<CpuExecutable>(model, o);
  }
};

}  // namespace

bool engine_rewrites(Model& m, int level) {
  // f16/bf16 models run on the f32 kernels (HODU_CPU_HALF=keep: as written, on the interpreter's).
  const char* half = std::getenv("HODU_CPU_HALF");
  bool widened = !(half && std::string(half) == "keep") && passes::widen_half_precision(m.graph);
  // QDQ graphs run on the int8 kernels (before constant folding turns their weights to float).
  bool qdq = (level < 0 || level >= 2) && passes::fuse_qdq(m.graph);
  // Then the float ops left between a DQ and a Q as byte tables, pools and concats on integers.
  bool tables = (level < 0 || level >= 2) && passes::fuse_quantized_lookups(m.graph);
  return widened || qdq || tables;
}

std::shared_ptr<Engine> make_cpu_engine() { return std::make_shared<CpuEngine>(); }

}  // namespace hodu::cpu
