// Policies are data: plain structs that say how a model should run, with a
// JSON round trip, validation and equality. The Dispatcher applies them.
//
//   KernelPolicy    per-op preferred kernel names, in order of preference:
//                   {"Conv": ["onednn", "reference"], "MatMul": "cublasLt"}
//                   Op names match case-insensitively ("conv" == "Conv").
//   ExecutionPolicy precision (fp32|tf32|fp16|bf16), cuda_graphs, threads
//                   (0 = physical cores), deterministic, engine ("" = best for
//                   the device), device ("cpu", "cuda:0").
//   Policy          both, as one file:
//                   {"execution": {...}, "kernels": {...}}
//
// from_json() throws InvalidArgument naming the bad field; validate() checks
// values that parse but make no sense (negative threads, CUDA graphs on cpu).
// Whether a named kernel exists is the Dispatcher's check (it knows the registry).
#pragma once
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/device.h"

namespace hodu {

enum class Precision { FP32, TF32, FP16, BF16 };

std::string_view precision_name(Precision p);
// "fp32", "tf32", "fp16", "bf16" (case-insensitive); InvalidArgument otherwise.
Precision parse_precision(std::string_view text);

struct KernelPolicy {
  // op type → kernel names, most preferred first. Keys are stored as given.
  std::map<std::string, std::vector<std::string>> preferred;

  // The preference list for an op (case-insensitive key match); empty if none.
  const std::vector<std::string>* find(std::string_view op) const;
  bool empty() const { return preferred.empty(); }

  nlohmann::json to_json() const;
  static KernelPolicy from_json(const nlohmann::json& j);
  void validate() const;  // no empty op names or kernel names, no duplicate ops (case-insensitive)
  bool operator==(const KernelPolicy&) const = default;
};

struct ExecutionPolicy {
  Precision precision = Precision::FP32;
  bool cuda_graphs = false;
  int threads = 0;  // 0 = physical cores
  bool deterministic = false;
  std::string engine;  // "" = best for the device
  Device device;

  nlohmann::json to_json() const;
  static ExecutionPolicy from_json(const nlohmann::json& j);
  void validate() const;
  bool operator==(const ExecutionPolicy&) const = default;
};

struct Policy {
  ExecutionPolicy execution;
  KernelPolicy kernels;

  nlohmann::json to_json() const;
  static Policy from_json(const nlohmann::json& j);
  // Reads a JSON file (Io if unreadable, InvalidArgument naming the file if malformed).
  static Policy load(const std::string& path);
  void save(const std::string& path) const;
  void validate() const;
  bool operator==(const Policy&) const = default;
};

}  // namespace hodu
