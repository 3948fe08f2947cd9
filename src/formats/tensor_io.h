// Tensor files: .npy, .npz, .hdt (hodu tensors), .json, .pb (ONNX TensorProto),
// .safetensors, .gguf. A file holds one tensor (.npy, .pb) or named tensors
// (.npz, .hdt, .json, .safetensors, .gguf).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace hodu {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

enum class TensorFormat { Npy, Npz, Hdt, Json, Pb, Safetensors, Gguf };
TensorFormat tensor_format_from_path(const std::string& path);  // InvalidArgument if unknown
const char* tensor_format_extension(TensorFormat f);           // ".npy", ...

// Every tensor of the file. Single-tensor formats give one entry named after
// the tensor (the .pb name field) or "" when the file has no name.
NamedTensors read_tensor_file(const std::string& path);
// Exactly one tensor; InvalidArgument naming the file if it holds several.
Tensor read_single_tensor(const std::string& path);
// Writes; single-tensor formats need exactly one tensor.
void write_tensor_file(const std::string& path, const NamedTensors& tensors);

// In-memory forms, used by the CLI and tests.
Tensor read_npy(std::string_view bytes, const std::string& what);
std::string write_npy(const Tensor& t);
std::string tensor_to_json(const Tensor& t);  // {"dtype": "f32", "shape": [..], "data": [..]}
Tensor tensor_from_json(std::string_view text, const std::string& what);

}  // namespace hodu
