#include "runtime/policy.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"

namespace hodu {
namespace {

std::string lower(std::string_view s) {
  std::string r(s);
  for (auto& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

const char* json_type(const nlohmann::json& j) { return j.type_name(); }

void check_keys(const nlohmann::json& j, const char* what, std::initializer_list<const char*> known) {
  for (const auto& [key, v] : j.items()) {
    bool ok = false;
    for (const char* k : known) ok |= key == k;
    if (!ok) {
      std::string list;
      for (const char* k : known) list += (list.empty() ? "" : ", ") + std::string(k);
      fail(ErrorCode::InvalidArgument, "{}: unknown field '{}' (known: {})", what, key, list);
    }
  }
}

}  // namespace

std::string_view precision_name(Precision p) {
  switch (p) {
    case Precision::FP32: return "fp32";
    case Precision::TF32: return "tf32";
    case Precision::FP16: return "fp16";
    case Precision::BF16: return "bf16";
  }
  return "?";
}

Precision parse_precision(std::string_view text) {
  std::string t = lower(text);
  for (Precision p : {Precision::FP32, Precision::TF32, Precision::FP16, Precision::BF16})
    if (t == precision_name(p)) return p;
  fail(ErrorCode::InvalidArgument, "unknown precision '{}' (expected fp32, tf32, fp16 or bf16)", text);
}

// ---- KernelPolicy

namespace {

const std::vector<std::pair<std::string, std::vector<std::string>>>& family_table() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> table = {
      {"matmul", {"MatMul", "Gemm", "FusedMatMul", "FusedGemm"}},
      {"conv", {"Conv", "FusedConv", "ConvGrad"}},
      {"attention", {"Attention"}},
      {"layer_norm", {"LayerNormalization", "LayerNorm", "LayerNormGrad"}},
      {"gelu", {"Gelu"}},
      {"softmax", {"Softmax", "LogSoftmax", "SoftmaxGrad"}},
  };
  return table;
}

}  // namespace

const std::vector<std::string>* kernel_family_ops(std::string_view name) {
  std::string l = lower(name);
  for (const auto& [family, ops] : family_table())
    if (family == l) return &ops;
  return nullptr;
}

std::string_view kernel_family_of(std::string_view op) {
  std::string l = lower(op);
  for (const auto& [family, ops] : family_table())
    for (const auto& o : ops)
      if (lower(o) == l) return family;
  return {};
}

const std::vector<std::string>& kernel_families() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& [family, ops] : family_table()) v.push_back(family);
    return v;
  }();
  return names;
}

const std::vector<std::string>* KernelPolicy::find(std::string_view op, bool* from_family) const {
  if (from_family) *from_family = false;
  if (auto it = preferred.find(std::string(op)); it != preferred.end()) return &it->second;
  std::string l = lower(op);
  for (const auto& [k, v] : preferred)
    if (lower(k) == l) return &v;
  std::string_view family = kernel_family_of(op);
  if (family.empty() || lower(family) == l) return nullptr;
  for (const auto& [k, v] : preferred)
    if (lower(k) == family) {
      if (from_family) *from_family = true;
      return &v;
    }
  return nullptr;
}

nlohmann::json KernelPolicy::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [op, names] : preferred) j[op] = names;
  if (!precision.empty()) j["precision"] = precision;
  return j;
}

KernelPolicy KernelPolicy::from_json(const nlohmann::json& j) {
  HODU_CHECK(j.is_object(), ErrorCode::InvalidArgument,
             "kernel policy: expected an object {{\"Op\": \"kernel\" or [\"kernel\", ...]}}, got {}", json_type(j));
  KernelPolicy p;
  for (const auto& [op, v] : j.items()) {
    if (op == "precision") {
      HODU_CHECK(v.is_string(), ErrorCode::InvalidArgument,
                 "kernel policy: 'precision' must be a string (fp32, tf32, fp16, bf16), got {}", json_type(v));
      p.precision = v.get<std::string>();
      continue;
    }
    std::vector<std::string> names;
    if (v.is_string()) {
      names.push_back(v.get<std::string>());
    } else if (v.is_array()) {
      for (const auto& n : v) {
        HODU_CHECK(n.is_string(), ErrorCode::InvalidArgument,
                   "kernel policy: '{}' lists a {} where a kernel name (string) is expected", op, json_type(n));
        names.push_back(n.get<std::string>());
      }
    } else {
      fail(ErrorCode::InvalidArgument, "kernel policy: '{}' must be a kernel name or a list of names, got {}", op,
           json_type(v));
    }
    p.preferred[op] = std::move(names);
  }
  p.validate();
  return p;
}

void KernelPolicy::validate() const {
  std::set<std::string> seen;
  for (const auto& [op, names] : preferred) {
    HODU_CHECK(!op.empty(), ErrorCode::InvalidArgument, "kernel policy: empty op name");
    HODU_CHECK(seen.insert(lower(op)).second, ErrorCode::InvalidArgument,
               "kernel policy: op '{}' is listed twice (op names are case-insensitive)", op);
    HODU_CHECK(!names.empty(), ErrorCode::InvalidArgument, "kernel policy: '{}' lists no kernel", op);
    for (const auto& n : names)
      HODU_CHECK(!n.empty(), ErrorCode::InvalidArgument, "kernel policy: '{}' lists an empty kernel name", op);
  }
  if (!precision.empty()) {
    try {
      parse_precision(precision);
    } catch (const Error& e) {
      throw e.with_context("kernel policy: 'precision': ");
    }
  }
}

// ---- ExecutionPolicy

nlohmann::json ExecutionPolicy::to_json() const {
  return {{"precision", std::string(precision_name(precision))},
          {"cuda_graphs", cuda_graphs},
          {"threads", threads},
          {"deterministic", deterministic},
          {"engine", engine},
          {"device", device.to_string()}};
}

ExecutionPolicy ExecutionPolicy::from_json(const nlohmann::json& j) {
  HODU_CHECK(j.is_object(), ErrorCode::InvalidArgument, "execution policy: expected an object, got {}", json_type(j));
  check_keys(j, "execution policy", {"precision", "cuda_graphs", "threads", "deterministic", "engine", "device"});
  ExecutionPolicy p;
  auto get = [&](const char* key, auto check, const char* expected) -> const nlohmann::json* {
    auto it = j.find(key);
    if (it == j.end()) return nullptr;
    HODU_CHECK(check(*it), ErrorCode::InvalidArgument, "execution policy: '{}' must be {}, got {} ({})", key,
               expected, json_type(*it), it->dump());
    return &*it;
  };
  auto is_string = [](const nlohmann::json& v) { return v.is_string(); };
  auto is_bool = [](const nlohmann::json& v) { return v.is_boolean(); };
  auto is_int = [](const nlohmann::json& v) { return v.is_number_integer(); };
  if (auto* v = get("precision", is_string, "a string (fp32, tf32, fp16, bf16)"))
    try {
      p.precision = parse_precision(v->get<std::string>());
    } catch (const Error& e) {
      throw e.with_context("execution policy: 'precision': ");
    }
  if (auto* v = get("cuda_graphs", is_bool, "true or false")) p.cuda_graphs = v->get<bool>();
  if (auto* v = get("threads", is_int, "an integer")) {
    int64_t t = v->get<int64_t>();
    HODU_CHECK(t >= 0 && t <= 4096, ErrorCode::InvalidArgument,
               "execution policy: 'threads' must be 0 (physical cores) or a positive count up to 4096, got {}", t);
    p.threads = static_cast<int>(t);
  }
  if (auto* v = get("deterministic", is_bool, "true or false")) p.deterministic = v->get<bool>();
  if (auto* v = get("engine", is_string, "an engine name")) p.engine = v->get<std::string>();
  if (auto* v = get("device", is_string, "a device (\"cpu\", \"cuda:0\")")) {
    try {
      p.device = Device::parse(v->get<std::string>());
    } catch (const Error& e) {
      throw e.with_context("execution policy: 'device': ");
    }
  }
  p.validate();
  return p;
}

void ExecutionPolicy::validate() const {
  HODU_CHECK(threads >= 0, ErrorCode::InvalidArgument,
             "execution policy: 'threads' must be 0 (physical cores) or positive, got {}", threads);
  HODU_CHECK(!(cuda_graphs && device.kind != Device::Kind::CUDA), ErrorCode::InvalidArgument,
             "execution policy: 'cuda_graphs' needs a cuda device, but the device is {}", device.to_string());
  HODU_CHECK(!(precision == Precision::TF32 && device.kind != Device::Kind::CUDA), ErrorCode::Unsupported,
             "execution policy: precision tf32 is a CUDA tensor-core mode; device {} has none (use fp32)",
             device.to_string());
}

// ---- Policy

nlohmann::json Policy::to_json() const { return {{"execution", execution.to_json()}, {"kernels", kernels.to_json()}}; }

Policy Policy::from_json(const nlohmann::json& j) {
  HODU_CHECK(j.is_object(), ErrorCode::InvalidArgument,
             "policy: expected an object {{\"execution\": {{...}}, \"kernels\": {{...}}}}, got {}", json_type(j));
  check_keys(j, "policy", {"execution", "kernels"});
  Policy p;
  if (auto it = j.find("execution"); it != j.end()) p.execution = ExecutionPolicy::from_json(*it);
  if (auto it = j.find("kernels"); it != j.end()) p.kernels = KernelPolicy::from_json(*it);
  return p;
}

Policy Policy::load(const std::string& path) {
  std::ifstream f(path);
  HODU_CHECK(f, ErrorCode::Io, "cannot read policy file {}", path);
  std::stringstream ss;
  ss << f.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorCode::InvalidArgument, "{}: not valid JSON: {}", path, e.what());
  }
  try {
    return from_json(j);
  } catch (const Error& e) {
    throw e.with_context(path + ": ");
  }
}

void Policy::save(const std::string& path) const {
  std::ofstream f(path);
  HODU_CHECK(f, ErrorCode::Io, "cannot write policy file {}", path);
  f << to_json().dump(2) << "\n";
  HODU_CHECK(f.good(), ErrorCode::Io, "cannot write policy file {}", path);
}

void Policy::validate() const {
  execution.validate();
  kernels.validate();
}

}  // namespace hodu
