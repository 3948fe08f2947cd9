// The interp engine: the reference interpreter behind the Engine interface.
#include "engines/interp/interp_engine.h"

#include "engines/interp/interpreter.h"

namespace hodu::interp {
namespace {

class InterpExecutable : public Executable {
 public:
  InterpExecutable(const Model& model, const EngineOptions& o)
      : model_(model), options_(o), interp_(model, {o.threads, o.seed}) {}
  std::vector<RuntimeValue> run(const std::map<std::string, RuntimeValue>& inputs) override {
    if (!options_.reseed_each_run || runs_ == 0) {
      runs_ += options_.reseed_each_run;
      return interp_.run(inputs);
    }
    // Run k draws from the seed mixed with k.
    return Interpreter(model_, {options_.threads, options_.seed ^ (runs_++ * 0x9E3779B97F4A7C15ull)}).run(inputs);
  }

 private:
  const Model& model_;
  EngineOptions options_;
  Interpreter interp_;
  uint64_t runs_ = 0;
};

class InterpEngine : public Engine {
 public:
  std::string name() const override { return "interp"; }
  std::string description() const override { return "reference interpreter: every op, every dtype"; }
  bool supports(const Device& d) const override { return d.kind == Device::Kind::CPU; }
  std::unique_ptr<Executable> prepare(const Model& model, const EngineOptions& o) override {
    return std::make_unique<InterpExecutable>(model, o);
  }
};

}  // namespace

std::shared_ptr<Engine> make_interp_engine() { return std::make_shared<InterpEngine>(); }

}  // namespace hodu::interp
