#include <mutex>

#include "core/error.h"
#include "runtime/device_manager.h"
#include "runtime/engine.h"

namespace hodu {

EngineRegistry& EngineRegistry::instance() {
  static EngineRegistry* registry = [] {
    auto* r = new EngineRegistry();
    register_builtin_engines(*r);
    return r;
  }();
  return *registry;
}

void EngineRegistry::add(std::shared_ptr<Engine> engine) {
  for (auto& e : engines_)
    if (e->name() == engine->name()) { e = std::move(engine); return; }
  engines_.push_back(std::move(engine));
}

std::shared_ptr<Engine> EngineRegistry::find(const std::string& name) const {
  for (const auto& e : engines_)
    if (e->name() == name) return e;
  return nullptr;
}

std::shared_ptr<Engine> EngineRegistry::pick(const Device& device) const {
  for (const auto& e : engines_)
    if (e->supports(device)) return e;
  DeviceManager::instance().require(device);  // an absent device is a Device error, saying why
  fail(ErrorCode::Unsupported, "no engine supports device {}", device.to_string());
}

}  // namespace hodu
