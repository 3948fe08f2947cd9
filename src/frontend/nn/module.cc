// Module: named parameters, buffers and children; modes; state dicts.
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "formats/tensor_io.h"
#include "kernels/cpu/tensor/kernels.h"
#include "frontend/tensor/tensor_impl.h"
#include "hodu/autograd.h"
#include "hodu/nn.h"

namespace hodu::eager::nn {

Module::Module(std::string type_name) : type_name_(std::move(type_name)) {}
Module::~Module() = default;

Tensor Module::forward(const Tensor&) {
  fail(ErrorCode::Unsupported, "module {} has no single-input forward (call its own forward, or override forward)",
       type_name_);
}

std::vector<Tensor> Module::forward_all(const std::vector<Tensor>& inputs) {
  HODU_CHECK(inputs.size() == 1, ErrorCode::InvalidArgument,
             "module {}: {} inputs given to a single-input forward (override forward_all for several)", type_name_,
             inputs.size());
  return {forward(inputs[0])};
}

namespace {
void check_name(const std::string& name, const std::string& owner) {
  HODU_CHECK(!name.empty() && name.find('.') == std::string::npos, ErrorCode::InvalidArgument,
             "module {}: '{}' is not a valid name (non-empty, no '.')", owner, name);
}
}  // namespace

Tensor Module::register_parameter(std::string name, Tensor value, bool requires_grad) {
  check_name(name, type_name_);
  for (const auto& [n, t] : parameters_)
    HODU_CHECK(n != name, ErrorCode::InvalidArgument, "module {}: parameter '{}' registered twice", type_name_, name);
  if (value.defined() && requires_grad) value.requires_grad_(true);
  parameters_.emplace_back(std::move(name), value);
  return value;
}

Tensor Module::register_buffer(std::string name, Tensor value) {
  check_name(name, type_name_);
  for (const auto& [n, t] : buffers_)
    HODU_CHECK(n != name, ErrorCode::InvalidArgument, "module {}: buffer '{}' registered twice", type_name_, name);
  buffers_.emplace_back(std::move(name), value);
  return value;
}

void Module::add_child(std::string name, std::shared_ptr<Module> module) {
  check_name(name, type_name_);
  HODU_CHECK(module != nullptr, ErrorCode::InvalidArgument, "module {}: child '{}' is null", type_name_, name);
  for (const auto& [n, m] : children_)
    HODU_CHECK(n != name, ErrorCode::InvalidArgument, "module {}: child '{}' registered twice", type_name_, name);
  children_.emplace_back(std::move(name), std::move(module));
}

void Module::collect(const std::string& prefix, bool params, bool recurse, NamedTensors& out) const {
  for (const auto& [n, t] : params ? parameters_ : buffers_)
    if (t.defined()) out.emplace_back(prefix + n, t);
  if (recurse)
    for (const auto& [n, m] : children_) m->collect(prefix + n + ".", params, true, out);
}

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors out;
  collect("", true, recurse, out);
  // A tensor shared by two modules (tied weights) is listed once, as PyTorch does.
  NamedTensors unique;
  std::set<const TensorImpl*> seen;
  for (auto& nt : out)
    if (seen.insert(nt.second.impl().get()).second) unique.push_back(std::move(nt));
  return unique;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  collect("", false, recurse, out);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const { return children_; }

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out = {{"", this}};
  for (auto& [n, m] : children_)
    for (auto& [sub, p] : m->named_modules()) out.emplace_back(sub.empty() ? n : n + "." + sub, p);
  return out;
}

int64_t Module::parameter_count() const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, m] : children_) m->train(on);
}

NamedTensors Module::state_dict() const {
  NamedTensors out = named_parameters();
  NamedTensors b = named_buffers();
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

void Module::load_state_dict(const NamedTensors& state, bool strict) {
  NamedTensors mine = state_dict();
  std::map<std::string, Tensor> given(state.begin(), state.end());
  std::vector<std::string> missing, unexpected;
  for (const auto& [n, t] : mine)
    if (!given.count(n)) missing.push_back(n);
  std::set<std::string> known;
  for (const auto& [n, t] : mine) known.insert(n);
  for (const auto& [n, t] : state)
    if (!known.count(n)) unexpected.push_back(n);
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  HODU_CHECK(!strict || (missing.empty() && unexpected.empty()), ErrorCode::InvalidArgument,
             "load_state_dict into {}: missing keys [{}], unexpected keys [{}]", type_name_, join(missing),
             join(unexpected));
  NoGradGuard guard;
  for (auto& [n, t] : mine) {
    auto it = given.find(n);
    if (it == given.end()) continue;
    HODU_CHECK(it->second.defined() && it->second.shape() == t.shape(), ErrorCode::InvalidArgument,
               "load_state_dict into {}: '{}' has shape {} in the state, {} in the module", type_name_, n,
               it->second.defined() ? shape_to_string(it->second.shape()) : "undefined", shape_to_string(t.shape()));
    Tensor dst = t;
    dst.copy_(it->second);
  }
}

void Module::save(const std::string& path) const {
  hodu::NamedTensors out;
  for (auto& [n, t] : state_dict()) out.emplace_back(n, kernels::contiguous(core(t)));
  write_tensor_file(path, out);
}

void Module::load(const std::string& path, bool strict) {
  NamedTensors state;
  for (auto& [n, t] : read_tensor_file(path)) state.emplace_back(n, make_tensor(t));
  try {
    load_state_dict(state, strict);
  } catch (const Error& e) {
    throw e.with_context(path + ": ");
  }
}

void Module::zero_grad(bool set_to_none) {
  NoGradGuard guard;
  for (Tensor& p : parameters()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (set_to_none) p.set_grad(Tensor());
    else g.detach().zero_();
  }
}

void Module::to(DType dtype) {
  HODU_CHECK(kernels::is_float(dtype), ErrorCode::InvalidArgument, "Module::to: {} is not a floating-point dtype",
             dtype_name(dtype));
  NoGradGuard guard;
  for (auto* list : {&parameters_, &buffers_})
    for (auto& [n, t] : *list)
      if (t.defined() && kernels::is_float(t.dtype()) && t.dtype() != dtype) {
        Tensor converted = t.to(dtype);
        t.set_data(converted);
        if (t.grad().defined()) t.set_grad(t.grad().to(dtype));
      }
  for (auto& [n, m] : children_) m->to(dtype);
}

std::string Module::to_string() const {
  std::ostringstream os;
  std::function<void(const Module&, const std::string&, int)> rec = [&](const Module& m, const std::string& name,
                                                                        int depth) {
    os << std::string(depth * 2, ' ') << (name.empty() ? "" : name + ": ") << m.type_name_;
    for (const auto& [n, t] : m.parameters_)
      if (t.defined()) os << " " << n << "=" << t.type_string();
    os << "\n";
    for (const auto& [n, c] : m.children_) rec(*c, n, depth + 1);
  };
  rec(*this, "", 0);
  return os.str();
}

}  // namespace hodu::eager::nn
