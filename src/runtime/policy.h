// Policies are data: plain structs that say how a model should run, with a
// JSON round trip, validation and equality. The Dispatcher applies them.
//
//   KernelPolicy    per-op preferred kernel names, in order of preference:
//                   {"Conv": ["onednn", "reference"], "MatMul": "cublasLt"}
//                   Op names match case-insensitively ("conv" == "Conv"). A key may
//                   also name a family of ops (kernel_family_ops: "matmul", "conv",
//                   "attention", "layer_norm", "gelu", "softmax"), covering each op of
//                   the family that has one of the listed kernels (the others keep
//                   their default). Special names: "auto" (the registered default,
//                   highest priority; no timing is done) and "hodu" (hodu's own
//                   hand-written kernels, registered as "cpu"). Optional "precision"
//                   (fp32|tf32|fp16|bf16: overrides the execution policy's).
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

// The ops a family name covers ("matmul" → MatMul, Gemm, FusedMatMul, FusedGemm), or null when
// `name` is no family (case-insensitive). The family of an op: "" when it has none.
const std::vector<std::string>* kernel_family_ops(std::string_view name);
std::string_view kernel_family_of(std::string_view op);
// Every family name, in a fixed order.
const std::vector<std::string>& kernel_families();

struct KernelPolicy {
  // op type or family → kernel names, most preferred first. Keys are stored as given.
  std::map<std::string, std::vector<std::string>> preferred;
  std::string precision;  // "" = the execution policy's; else fp32, tf32, fp16, bf16

  // The preference list for an op: its own key (case-insensitive), else its family's; null if none.
  // `from_family` (optional) tells which of the two it was.
  const std::vector<std::string>* find(std::string_view op, bool* from_family = nullptr) const;
  bool empty() const { return preferred.empty() && precision.empty(); }

  nlohmann::json to_json() const;
  static KernelPolicy from_json(const nlohmann::json& j);
  void validate() const;  // no empty op names or kernel names, no duplicate ops (case-insensitive), precision
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
