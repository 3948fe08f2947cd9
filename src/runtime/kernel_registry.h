// KernelRegistry: which named implementations exist for an op on a device and
// dtype — op × device × dtype → names, e.g. `Conv on cpu: onednn | reference`.
// It holds descriptions only; each engine keeps its own function pointers and
// looks them up by the name the Dispatcher chose.
//
//   KernelRegistry::instance().add({
//       .op = "Conv", .device = Device::Kind::CPU, .dtypes = {DType::F32},
//       .name = "onednn", .engine = "cpu", .priority = 10,
//       .description = "oneDNN direct/winograd convolution",
//       .supports = [](const Node& n) { return n.inputs.size() <= 3; }});
//
// `op` "*" registers a kernel for every op (the reference interpreter: name
// "reference", engine "interp", device cpu, all dtypes). Empty `dtypes` = all.
// Higher `priority` wins when no policy says otherwise. `supports` (optional)
// refines: a kernel that does not support a node is not chosen for it.
// Adding a kernel with the same (domain, op, device, name, engine) replaces it.
// The registry starts with the reference kernel ("*", cpu, all dtypes, engine
// "interp", priority 0); other engines add theirs when they are registered
// (register_builtin_engines runs before a Session consults this registry).
// Thread-safe.
#pragma once
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "ir/graph.h"

namespace hodu {

// Every member has a default initializer, so designated initializers may leave
// any of them out without -Wmissing-field-initializers warnings.
struct KernelInfo {
  std::string op = {};      // op type, or "*" for every op
  std::string domain = {};  // "" = ai.onnx; ignored when op is "*"
  Device::Kind device = Device::Kind::CPU;
  std::vector<DType> dtypes = {};  // empty = every dtype
  std::string name = {};           // "reference", "onednn", "cublasLt", ...
  std::string engine = {};         // the engine that runs it: "interp", "cpu", "cuda"
  int priority = 0;
  std::string description = {};
  std::function<bool(const Node&)> supports = {};  // empty = every node of the op

  bool matches(std::string_view op_type, std::string_view op_domain, Device::Kind dev, DType dtype) const;
};

class KernelRegistry {
 public:
  // The process-wide registry, with the built-in kernels registered.
  static KernelRegistry& instance();

  void add(KernelInfo info);
  // Kernels for (op, device, dtype), highest priority first. DType::Undefined
  // (type not known before run time) matches every kernel.
  std::vector<KernelInfo> find(std::string_view op, std::string_view domain, Device::Kind device,
                               DType dtype = DType::Undefined) const;
  // Every kernel name registered for the op on the device (any dtype), sorted, unique.
  std::vector<std::string> names(std::string_view op, std::string_view domain, Device::Kind device) const;
  // Every registered kernel, in registration order.
  std::vector<KernelInfo> all() const;
  // True if any kernel of that name exists for the op type (any device/domain).
  bool has_op(std::string_view op) const;

 private:
  mutable std::mutex mutex_;
  std::vector<KernelInfo> kernels_;
};

}  // namespace hodu
