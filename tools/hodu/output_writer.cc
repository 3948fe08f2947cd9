#include "output_writer.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "formats/tensor_io.h"
#include "tensor_printer.h"

namespace hodu::cli {
namespace {

// Every character outside [A-Za-z0-9._-] becomes '_'.
std::string sanitize(const std::string& name) {
  std::string s = name.empty() ? "output" : name;
  for (auto& c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) c = '_';
  if (s == "." || s == "..") s = "_";
  return s;
}

}  // namespace

void check_output_format(const std::string& format, const std::string& out_dir) {
  HODU_CHECK(format == "pretty" || format == "json" || format == "npy" || format == "hdt",
             ErrorCode::InvalidArgument, "-f {}: expected pretty, json, npy or hdt", format);
  HODU_CHECK(!((format == "npy" || format == "hdt") && out_dir.empty()), ErrorCode::InvalidArgument,
             "-f {} writes files: give an output folder with -o DIR", format);
}

void emit_outputs(const std::vector<NamedValue>& outputs, const std::string& format, const std::string& out_dir) {
  if (!out_dir.empty()) {
    std::filesystem::create_directories(out_dir);
    std::string ext = format == "pretty" ? "npy" : format;
    for (const auto& o : outputs) {
      HODU_CHECK(o.value.is_tensor(), ErrorCode::Unsupported,
                 "output '{}' is not a tensor; only tensors can be written to files (use -f pretty or json)", o.name);
      std::string path = (std::filesystem::path(out_dir) / (sanitize(o.name) + "." + ext)).string();
      if (ext == "json") {
        FILE* f = std::fopen(path.c_str(), "wb");
        HODU_CHECK(f, ErrorCode::Io, "cannot write {}", path);
        std::string text = tensor_to_json(o.value.tensor);
        std::fwrite(text.data(), 1, text.size(), f);
        std::fclose(f);
      } else {
        write_tensor_file(path, {{o.name, o.value.tensor}});
      }
      std::fprintf(stderr, "wrote %s\n", path.c_str());
    }
    return;
  }
  if (format == "json") {
    std::string out = "{";
    for (size_t i = 0; i < outputs.size(); ++i) {
      HODU_CHECK(outputs[i].value.is_tensor(), ErrorCode::Unsupported, "output '{}' is not a tensor", outputs[i].name);
      out += (i ? ", " : "") + nlohmann::json(outputs[i].name).dump() + ": " + tensor_to_json(outputs[i].value.tensor);
    }
    std::printf("%s}\n", out.c_str());
    return;
  }
  for (const auto& o : outputs) std::printf("%s\n", pretty_value(o.name, o.value).c_str());
}

}  // namespace hodu::cli
