// The engines compiled into libhodu, in order of preference per device:
// cpu (optimized) before interp (reference), so cpu is the default on CPU.
#include "engines/cpu/cpu_engine.h"
#include "engines/interp/interp_engine.h"
#include "engines/native/native_engine.h"
#include "runtime/engine.h"
#include "runtime/kernel_registry.h"

namespace hodu {

void register_builtin_engines(EngineRegistry& registry) {
  registry.add(cpu::make_cpu_engine());
  cpu::register_cpu_kernels(KernelRegistry::instance());
  registry.add(interp::make_interp_engine());
  registry.add(native::make_native_engine());  // by name only: compiled libraries (hodu build)
  native::register_native_kernels(KernelRegistry::instance());
}

}  // namespace hodu
