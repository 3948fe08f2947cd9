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

// A policy's kernel name as the registry knows it: "hodu" (hodu's own kernels) is registered as "cpu".
static bool names_kernel(const std::string& policy_name, const std::string& registered) {
  return policy_name == registered || (policy_name == "hodu" && registered == "cpu");
}

Dispatcher::Dispatcher(const KernelRegistry& registry, Policy policy) : registry_(registry), policy_(std::move(policy)) {
  policy_.validate();
  if (!policy_.kernels.precision.empty()) policy_.execution.precision = parse_precision(policy_.kernels.precision);
  const Device& device = policy_.execution.device;
  for (const auto& [op, names] : policy_.kernels.preferred) {
    const std::vector<std::string>* family = kernel_family_ops(op);
    HODU_CHECK(family || known_op(registry_, op), ErrorCode::InvalidArgument,
               "kernel policy: unknown op '{}' (neither an op with kernels nor an op family: {})", op,
               join(kernel_families()));
    std::vector<std::string> available;
    for (const auto& o : family ? *family : std::vector<std::string>{op}) {
      auto n = names_for_op(registry_, o, device.kind);
      available.insert(available.end(), n.begin(), n.end());
    }
    std::sort(available.begin(), available.end());
    available.erase(std::unique(available.begin(), available.end()), available.end());
    for (const auto& name : names) {
      bool found = name == "auto" || std::any_of(available.begin(), available.end(),
                                                 [&](const std::string& a) { return names_kernel(name, a); });
      HODU_CHECK(found, ErrorCode::InvalidArgument,
                 "kernel policy: no kernel '{}' is registered for {} '{}' on device {} (available: auto, {})", name,
                 family && std::find(kernel_families().begin(), kernel_families().end(), op) != kernel_families().end()
                     ? "op family"
                     : "op",
                 op, device.to_string(), join(available));
    }
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
  bool from_family = false;
  const auto* wanted = policy_.kernels.find(node.op_type, &from_family);
  if (wanted) {
    for (const auto& name : *wanted) {
      if (name == "auto" && !candidates.empty()) {
        choice = {candidates[0].name, candidates[0].engine, "policy: auto (the registered default)"};
        break;
      }
      auto it = std::find_if(candidates.begin(), candidates.end(),
                             [&](const KernelInfo& k) { return names_kernel(name, k.name); });
      if (it != candidates.end()) {
        choice = {it->name, it->engine, from_family ? "policy: " + std::string(kernel_family_of(node.op_type)) : "policy"};
        break;
      }
    }
    // A family names kernels for the ops that have them; its other ops keep their default.
    if (choice.kernel.empty() && from_family && !candidates.empty())
      choice = {candidates[0].name, candidates[0].engine,
                fmt::format("priority (the policy's {} kernels [{}] do not run it)", kernel_family_of(node.op_type),
                            join(*wanted))};
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
