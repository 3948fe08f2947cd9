// Dispatcher: applies the policies. It picks the engine for a session and the
// kernel for each node, records every decision (shown with `-v` and in the
// profile) and refuses impossible policies with a clear error instead of
// falling back silently.
//
//   Dispatcher d(KernelRegistry::instance(), policy);   // checks the policy
//   auto engine = d.choose_engine(EngineRegistry::instance());
//   KernelChoice c = d.choose(node, dtype, "cpu");       // inside Engine::prepare
//   c.kernel   → "onednn"; look up your own function by this name
//
// Rules for choose(node, dtype, engine):
//  - candidates: kernels registered for (op, device, dtype) whose `engine` is
//    the given engine (or any engine when it is empty) and that support the node;
//  - if the KernelPolicy lists names for the op, the first listed name that is
//    a candidate wins; none → Unsupported naming op, node, the listed and the
//    available kernels;
//  - otherwise the candidate with the highest priority; none → Unsupported.
// The constructor checks that every name in the KernelPolicy is registered for
// that op on the policy's device (InvalidArgument otherwise), and the
// ExecutionPolicy's own validate().
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/engine.h"
#include "runtime/kernel_registry.h"
#include "runtime/policy.h"

namespace hodu {

struct KernelChoice {
  std::string kernel;  // implementation name
  std::string engine;  // engine that runs it
  std::string reason;  // "policy", "priority" or "only candidate"
};

struct DispatchDecision {
  std::string what;    // "engine" or "kernel"
  std::string node;    // node name ("" for the engine decision)
  std::string op;      // op type ("" for the engine decision)
  std::string choice;  // the engine or kernel name
  std::string reason;
};

class Dispatcher {
 public:
  Dispatcher(const KernelRegistry& registry, Policy policy);
  Dispatcher(const KernelRegistry& registry, ExecutionPolicy execution, KernelPolicy kernels)
      : Dispatcher(registry, Policy{std::move(execution), std::move(kernels)}) {}

  const Policy& policy() const { return policy_; }
  const ExecutionPolicy& execution() const { return policy_.execution; }
  const KernelPolicy& kernels() const { return policy_.kernels; }

  // The engine named by the policy (InvalidArgument if unknown, Unsupported if
  // it does not run on the device or in the precision), or the best for the device.
  std::shared_ptr<Engine> choose_engine(const EngineRegistry& engines);
  // The kernel for one node (see the rules above). `engine` "" = any engine.
  // The choice is remembered per (node, engine): asking again returns it
  // without recording a second decision (the Session asks first, then the engine).
  KernelChoice choose(const Node& node, DType dtype, std::string_view engine);

  // Every decision so far, in order. Thread-safe.
  std::vector<DispatchDecision> decisions() const;

 private:
  void record(DispatchDecision d);
  const KernelRegistry& registry_;
  Policy policy_;
  mutable std::mutex mutex_;
  std::vector<DispatchDecision> decisions_;
  std::map<std::pair<const Node*, std::string>, KernelChoice> chosen_;
};

// The dtype a node computes in, for dispatch: the first known input type
// (or output type for ops without inputs); DType::Undefined if not known.
DType dispatch_dtype(const Graph& graph, const Node& node);

}  // namespace hodu
