// Loading and saving models. The format comes from the file extension:
// .onnx (ONNX protobuf), .hdss (hodu's binary format), .hodu (HoduScript text).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "ir/graph.h"

namespace hodu {

enum class ModelFormat { Onnx, Hdss, HoduScript };

// InvalidArgument for an unknown extension.
ModelFormat model_format_from_path(const std::string& path);
// Sniffs the bytes: .hdss magic, HoduScript text, else ONNX.
ModelFormat model_format_from_bytes(std::string_view bytes);
const char* model_format_name(ModelFormat f);

struct LoadOptions {
  bool verify = true;  // run the IR verifier after loading
};

// Loads and canonicalizes (older ONNX opsets rewritten to the newest semantics).
// Errors name the file and what is wrong.
Model load_model(const std::string& path, const LoadOptions& options = {});
// `base_dir` resolves ONNX external data; `what` names the source in errors.
Model load_model_from_bytes(std::string_view bytes, ModelFormat format, const std::string& base_dir = ".",
                            const std::string& what = "<memory>", const LoadOptions& options = {});

struct SaveOptions {
  int onnx_opset = 0;  // 0: the lowest opset (>= 17) that expresses the graph
};
void save_model(const Model& model, const std::string& path, const SaveOptions& options = {});
std::string save_model_to_bytes(const Model& model, ModelFormat format, const SaveOptions& options = {});

// ---- Per-format entry points (formats/onnx/, formats/hdss/, ir/hoduscript) ----
Model import_onnx(std::string_view bytes, const std::string& base_dir, const std::string& what);
// Streams the file through a small buffer (the weights are held once, not twice, while parsing).
Model import_onnx_file(const std::string& path, const std::string& base_dir);
std::string export_onnx(const Model& model, int opset);  // opset 0 = auto
Model read_hdss(std::string_view bytes, const std::string& what);
// Reads an .hdss file with its weights memory-mapped (not copied).
Model read_hdss_file(const std::string& path);
std::string write_hdss(const Model& model);
// An .hdss whose tensor data lives elsewhere (a .hodupkg's weights section, docs/hodupkg.md):
// `place` stores a tensor's bytes there and returns their offset (a multiple of 64); the file
// sets the required flag 0x1 and has no data section, so read_hdss refuses it.
std::string write_hdss_external(const Model& model, const std::function<uint64_t(const Tensor&)>& place);
// Reads one with its tensor data in `data`: the tensors wrap those bytes and hold `keep` (null:
// they copy them).
Model read_hdss_external(std::string_view bytes, std::string_view data, std::shared_ptr<const void> keep,
                         const std::string& what);

}  // namespace hodu
