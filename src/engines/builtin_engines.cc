// The engines compiled into libhodu, in order of preference per device.
#include "engines/interp/interp_engine.h"
#include "runtime/engine.h"

namespace hodu {

void register_builtin_engines(EngineRegistry& registry) {
  registry.add(interp::make_interp_engine());
}

}  // namespace hodu
