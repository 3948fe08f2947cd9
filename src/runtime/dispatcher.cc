#include "runtime/dispatcher.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "ir/schema.h"
#include "runtime/log.h"
#include "runtime/profiler.h"

namespace hodu {
namespace {

std::string lower(std::string_view s) {
  std::string r(s);
  for (auto& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "none" : s;
}

bool known_op(const KernelRegistry& registry, const std::string& op) {
  std::string l = lower(op);
  for (const OpSchema* s : SchemaRegistry::instance().latest())
    if (lower(s->name) == l) return true;
  for (const auto& k : registry.all())
    if (k.op != "*" && lower(k.op) == l) return true;
  return false;
}

// Kernel names registered for an op type (any domain) on a device kind.
std::vector<std::string> names_for_op(const KernelRegistry& registry, const std::string& op, Device::Kind device) {
  std::string l = lower(op);
  std::vector<std::string> out;
  for (const auto& k : registry.all())
    if (k.device == device && (k.op == "*" || lower(k.op) == l)) out.push_back(k.name);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace

Dispatcher::Dispatcher(const KernelRegistry& registry, Policy policy) : registry_(registry), policy_(std::move(policy)) {
  policy_.validate();
  const Device& device = policy_.execution.device;
  for (const auto& [op, names] : policy_.kernels.preferred) {
    HODU_CHECK(known_op(registry_, op), ErrorCode::InvalidArgument, "kernel policy: unknown op '{}'", op);
    auto available = names_for_op(registry_, op, device.kind);
    for (const auto& name : names)
      HODU_CHECK(std::find(available.begin(), available.end(), name) != available.end(), ErrorCode::InvalidArgument,
                 "kernel policy: no kernel '{}' is registered for op '{}' on device {} (available: {})", name, op,
                 device.to_string(), join(available));
  }
}

std::shared_ptr<Engine> Dispatcher::choose_engine(const EngineRegistry& engines) {
  const ExecutionPolicy& ep = policy_.execution;
  std::shared_ptr<Engine> engine;
  std::string reason;
  if (ep.engine.empty() || ep.engine == "auto") {
    engine = engines.pick(ep.device);
    reason = "best for device " + ep.device.to_string();
  } else {
    engine = engines.find(ep.engine);
    if (!engine) {
      std::vector<std::string> names;
      for (const auto& e : engines.all()) names.push_back(e->name());
      fail(ErrorCode::InvalidArgument, "unknown engine '{}' (available: {})", ep.engine, join(names));
    }
    HODU_CHECK(engine->supports(ep.device), ErrorCode::Unsupported, "engine '{}' does not run on device {}",
               engine->name(), ep.device.to_string());
    reason = "policy";
  }
  HODU_CHECK(engine->supports_precision(ep.precision), ErrorCode::Unsupported,
             "engine '{}' cannot compute in precision {} on device {} (policy 'precision'; fp32 always works)",
             engine->name(), precision_name(ep.precision), ep.device.to_string());
  record({"engine", "", "", engine->name(), reason});
  return engine;
}

KernelChoice Dispatcher::choose(const Node& node, DType dtype, std::string_view engine) {
  {
    std::lock_guard lock(mutex_);
    if (auto it = chosen_.find({&node, std::string(engine)}); it != chosen_.end()) return it->second;
  }
  const Device& device = policy_.execution.device;
  std::vector<KernelInfo> candidates;
  for (auto& k : registry_.find(node.op_type, node.domain, device.kind, dtype))
    if ((engine.empty() || k.engine == engine) && (!k.supports || k.supports(node))) candidates.push_back(std::move(k));

  auto names_of = [](const std::vector<KernelInfo>& ks) {
    std::vector<std::string> v;
    for (const auto& k : ks) v.push_back(k.name);
    return v;
  };
  std::string where = fmt::format("on device {}{}{}", device.to_string(),
                                  dtype == DType::Undefined ? "" : " for " + std::string(dtype_name(dtype)),
                                  engine.empty() ? "" : " in engine '" + std::string(engine) + "'");
  KernelChoice choice;
  if (const auto* wanted = policy_.kernels.find(node.op_type)) {
    for (const auto& name : *wanted) {
      auto it = std::find_if(candidates.begin(), candidates.end(), [&](const KernelInfo& k) { return k.name == name; });
      if (it != candidates.end()) {
        choice = {it->name, it->engine, "policy"};
        break;
      }
    }
    if (choice.kernel.empty())
      fail(ErrorCode::Unsupported, "{}: the kernel policy asks for [{}] but {} the kernels that can run it are: {}",
           node.describe(), join(*wanted), where, join(names_of(candidates)));
  } else {
    if (candidates.empty())
      fail(ErrorCode::Unsupported, "{}: no kernel for op '{}' {}", node.describe(), node.op_type, where);
    choice = {candidates[0].name, candidates[0].engine, candidates.size() == 1 ? "only candidate" : "priority"};
  }
  record({"kernel", node.name, node.op_type, choice.kernel, choice.reason});
  std::lock_guard lock(mutex_);
  chosen_[{&node, std::string(engine)}] = choice;
  return choice;
}

void Dispatcher::record(DispatchDecision d) {
  if (d.what == "engine")
    log_verbose("dispatch: engine {} ({})", d.choice, d.reason);
  else
    log_verbose("dispatch: node '{}' ({}) -> kernel {} ({})", d.node, d.op, d.choice, d.reason);
  if (Profiler* p = Profiler::active())
    p->add_instant("dispatch", {{"what", d.what}, {"node_name", d.node}, {"op_name", d.op}, {"choice", d.choice},
                                {"reason", d.reason}});
  std::lock_guard lock(mutex_);
  decisions_.push_back(std::move(d));
}

std::vector<DispatchDecision> Dispatcher::decisions() const {
  std::lock_guard lock(mutex_);
  return decisions_;
}

DType dispatch_dtype(const Graph& graph, const Node& node) {
  auto type_of = [&](const std::string& name) -> DType {
    if (name.empty()) return DType::Undefined;
    if (const Tensor* t = graph.initializer(name)) return t->dtype();
    if (auto t = graph.type_of(name); t && t->is_tensor()) return t->dtype;
    return DType::Undefined;
  };
  for (const auto& in : node.inputs)
    if (DType d = type_of(in); d != DType::Undefined) return d;
  for (const auto& out : node.outputs)
    if (DType d = type_of(out); d != DType::Undefined) return d;
  return DType::Undefined;
}

}  // namespace hodu
