// Session: the user's handle on a model. It loads the model, picks an engine,
// prepares once, checks every run's inputs against the model (name, dtype,
// rank, dims, symbolic dims bound consistently) and runs.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/runtime_value.h"
#include "formats/model_io.h"
#include "ir/graph.h"
#include "runtime/dispatcher.h"
#include "runtime/engine.h"
#include "runtime/policy.h"

namespace hodu {

struct SessionOptions {
  std::string engine;  // "" = best for the device
  Device device;
  int threads = 0;     // 0 = number of physical cores
  uint64_t seed = 0;
  // When set, the policy decides engine, device and threads (the three fields
  // above are ignored) and its kernel policy picks each node's kernel.
  std::optional<Policy> policy;
  // A graph with outputs "<x>.next" for inputs "<x>" (passes::build_training_step): each run
  // writes "<x>.next" into the tensor fed as "<x>" (contiguous, same dtype and shape), so the
  // caller feeds the same tensors step after step, updated in place; the output is that tensor.
  // The cpu engine writes them there directly (no copy) where the producing kernel allows.
  bool update_state_in_place = false;
  // Random ops (a training step's Dropout) draw new numbers on each run: run k's seed is `seed`
  // mixed with k, so a session replays the same sequence from its start. Off, every run draws
  // the same numbers (the seed is mixed with the node only).
  bool reseed_each_run = false;
  // Graph optimization level (passes::optimize, 0-3) for an engine that optimizes the model
  // itself, when the model was not optimized before (-1: the engine's default). The cpu engine
  // applies it per input shape to a model with free input dims (`hodu run -O N`).
  int opt_level = -1;
};

struct NamedValue {
  std::string name;
  RuntimeValue value;
};

class Session {
 public:
  static std::unique_ptr<Session> load(const std::string& path, const SessionOptions& options = {});
  static std::unique_ptr<Session> from_bytes(std::string_view bytes, const SessionOptions& options = {});
  static std::unique_ptr<Session> from_model(Model model, const SessionOptions& options = {});

  // The model as loaded. For a Session that loaded it (load, from_bytes) the engine may have
  // released weights it keeps in its own layout: reading one rebuilds it, and a pointer into
  // it stays valid until a run with new input shapes (a new plan may release it again).
  const Model& model() const { return *model_; }
  // Graph inputs the caller must feed (initializers excluded) and the outputs.
  const std::vector<Value>& inputs() const { return inputs_; }
  const std::vector<Value>& outputs() const { return model_->graph.outputs; }
  const std::string& engine_name() const { return engine_name_; }
  int threads() const { return threads_; }
  // The policies in effect and every engine/kernel decision made for this model.
  const Dispatcher& dispatcher() const { return *dispatcher_; }

  // Checks the feeds and runs; outputs in graph order.
  std::vector<NamedValue> run(const std::map<std::string, RuntimeValue>& feeds);
  // Checks feeds only (InvalidArgument naming the input and the mismatch).
  void check_inputs(const std::map<std::string, RuntimeValue>& feeds) const;

 private:
  // `owns_weights`: the model was loaded here and nothing outside reads its initializers.
  Session(std::unique_ptr<Model> model, const SessionOptions& options, bool owns_weights);
  // update_state_in_place: outputs "<x>.next" the engine did not write into the fed "<x>" are copied there.
  void write_state_back(const std::map<std::string, RuntimeValue>& feeds, std::vector<RuntimeValue>& values);
  std::unique_ptr<Model> model_;
  std::vector<Value> inputs_;
  std::shared_ptr<Dispatcher> dispatcher_;
  std::unique_ptr<Executable> executable_;
  std::string engine_name_;
  int threads_ = 1;
  bool update_state_in_place_ = false;
  // Engines keep per-run state (plans, arenas): runs of one Session take turns.
  std::mutex run_mutex_;
};

// Physical cores of this machine (falls back to hardware_concurrency).
int physical_core_count();

}  // namespace hodu
