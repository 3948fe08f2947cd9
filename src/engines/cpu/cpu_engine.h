// The optimized CPU engine: runs the graph passes, then for each input shape a
// Plan (oneDNN conv/matmul/pool/eltwise/binary, hand-written row kernels,
// interpreter kernels for everything else).
#pragma once
#include <memory>

#include "runtime/engine.h"

namespace hodu {
class KernelRegistry;
struct Model;
}

namespace hodu::cpu {

std::shared_ptr<Engine> make_cpu_engine();
// Adds the cpu engine's kernels to the runtime's registry (kernel_list.cc).
void register_cpu_kernels(KernelRegistry& registry);

// Checks HODU_MAX_ISA and caps oneDNN's ISA to it (isa_cap.cc); called before the engine's
// first primitive. InvalidArgument for a value that names no ISA.
void apply_isa_cap();

// Optimization level used when the model does not say (passes::optimized_level).
constexpr int kDefaultOptLevel = 3;

// The engine's own rewrites of a model before passes::optimize (level: the model's recorded
// optimization level, -1 none): f16/bf16 computation widened to f32 (HODU_CPU_HALF=keep leaves
// it), QDQ graphs fused into integer ops. True when anything changed.
bool engine_rewrites(Model& m, int level);

}  // namespace hodu::cpu
