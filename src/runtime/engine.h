// Engines turn a Model into something that runs: Engine::prepare(model) gives an
// Executable, prepared once and run many times. The EngineRegistry knows every
// engine by name (interp, cpu, native, cuda, plugins).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/runtime_value.h"
#include "ir/graph.h"
#include "runtime/policy.h"

namespace hodu {

class Dispatcher;

struct EngineOptions {
  Device device = {};
  int threads = 1;
  uint64_t seed = 0;
  // Set by the Session: the policies and per-node kernel choice
  // (dispatcher->choose(node, dtype, name())). May be null when an engine is
  // prepared directly; then use defaults (fp32, highest-priority kernels).
  std::shared_ptr<Dispatcher> dispatcher = {};
  // The model's initializers are read by nothing but this engine (the Session loaded the model
  // itself): an engine that keeps a weight in its own layout may release the original's bytes
  // (Storage::release), so the weight is held once. False for a model the caller also holds.
  bool exclusive_weights = false;
  // SessionOptions::update_state_in_place: an output "<x>.next" is written into the caller's
  // tensor fed as input "<x>" (a training step's params and optimizer state). An engine that
  // does it returns that tensor as the output; the Session copies where an engine did not.
  bool update_state_in_place = false;
  // SessionOptions::reseed_each_run: random ops draw new numbers on each run (run k's seed is
  // `seed` mixed with k; run 0 draws what it would without this), reproducibly from the start.
  bool reseed_each_run = false;
  // SessionOptions::opt_level: passes::optimize's level for an engine that optimizes an
  // unoptimized model itself (-1: its default).
  int opt_level = -1;
};

class Executable {
 public:
  virtual ~Executable() = default;
  // Inputs by name (already checked by the Session); outputs in graph order.
  virtual std::vector<RuntimeValue> run(const std::map<std::string, RuntimeValue>& inputs) = 0;
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual std::string name() const = 0;
  virtual std::string description() const = 0;
  virtual bool supports(const Device& device) const = 0;
  // Precisions the engine can compute in (ExecutionPolicy::precision); fp32 by default.
  virtual bool supports_precision(Precision p) const { return p == Precision::FP32; }
  // The model outlives the executable (the Session owns both).
  virtual std::unique_ptr<Executable> prepare(const Model& model, const EngineOptions& options) = 0;
};

class EngineRegistry {
 public:
  // The process-wide registry, with the built-in engines registered.
  static EngineRegistry& instance();
  void add(std::shared_ptr<Engine> engine);
  std::shared_ptr<Engine> find(const std::string& name) const;
  // Best engine for a device: the first registered that supports it (registration order is preference).
  std::shared_ptr<Engine> pick(const Device& device) const;
  std::vector<std::shared_ptr<Engine>> all() const { return engines_; }

 private:
  std::vector<std::shared_ptr<Engine>> engines_;
};

// Defined in src/engines: registers interp (and the other built-in engines).
void register_builtin_engines(EngineRegistry& registry);

}  // namespace hodu
