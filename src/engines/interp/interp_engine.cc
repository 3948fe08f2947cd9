// The interp engine: the reference interpreter behind the Engine interface.
#include "engines/interp/interp_engine.h"

#include "engines/interp/interpreter.h"

namespace hodu::interp {
namespace {

class InterpExecutable : public Executable {
 public:
  InterpExecutable(const Model& model, const EngineOptions& o) : interp_(model, {o.threads, o.seed}) {}
  std::vector<RuntimeValue> run(const std::map<std::string, RuntimeValue>& inputs) override {
    return interp_.run(inputs);
  }

 private:
  Interpreter interp_;
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
