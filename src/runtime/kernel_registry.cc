#include "runtime/kernel_registry.h"

#include <algorithm>
#include <cctype>

namespace hodu {
namespace {

bool iequal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

bool same_slot(const KernelInfo& a, const KernelInfo& b) {
  return a.op == b.op && a.domain == b.domain && a.device == b.device && a.name == b.name && a.engine == b.engine;
}

}  // namespace

bool KernelInfo::matches(std::string_view op_type, std::string_view op_domain, Device::Kind dev, DType dtype) const {
  if (dev != device) return false;
  if (op != "*" && (!iequal(op, op_type) || domain != op_domain)) return false;
  if (dtype == DType::Undefined || dtypes.empty()) return true;
  return std::find(dtypes.begin(), dtypes.end(), dtype) != dtypes.end();
}

KernelRegistry& KernelRegistry::instance() {
  static KernelRegistry* registry = [] {
    auto* r = new KernelRegistry();
    // The reference interpreter runs every op in every dtype on the cpu.
    r->add({.op = "*", .domain = "", .device = Device::Kind::CPU, .dtypes = {}, .name = "reference",
            .engine = "interp", .priority = 0,
            .description = "reference interpreter kernel (every op, every dtype)", .supports = {}});
    return r;
  }();
  return *registry;
}

void KernelRegistry::add(KernelInfo info) {
  std::lock_guard lock(mutex_);
  for (auto& k : kernels_)
    if (same_slot(k, info)) { k = std::move(info); return; }
  kernels_.push_back(std::move(info));
}

std::vector<KernelInfo> KernelRegistry::find(std::string_view op, std::string_view domain, Device::Kind device,
                                             DType dtype) const {
  std::vector<KernelInfo> out;
  {
    std::lock_guard lock(mutex_);
    for (const auto& k : kernels_)
      if (k.matches(op, domain, device, dtype)) out.push_back(k);
  }
  // Highest priority first; registration order breaks ties.
  std::stable_sort(out.begin(), out.end(), [](const KernelInfo& a, const KernelInfo& b) { return a.priority > b.priority; });
  return out;
}

std::vector<std::string> KernelRegistry::names(std::string_view op, std::string_view domain, Device::Kind device) const {
  std::vector<std::string> out;
  for (const auto& k : find(op, domain, device)) out.push_back(k.name);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<KernelInfo> KernelRegistry::all() const {
  std::lock_guard lock(mutex_);
  return kernels_;
}

bool KernelRegistry::has_op(std::string_view op) const {
  std::lock_guard lock(mutex_);
  for (const auto& k : kernels_)
    if (k.op == "*" || iequal(k.op, op)) return true;
  return false;
}

}  // namespace hodu
