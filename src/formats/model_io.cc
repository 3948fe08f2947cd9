// Model loading and saving: picks the format (extension, else the bytes) and
// dispatches to the ONNX, .hdss and HoduScript readers/writers.
#include "formats/model_io.h"
#include "formats/mapped_file.h"
#include "formats/package.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "ir/hoduscript.h"
#include "ir/verifier.h"

namespace hodu {
namespace {

std::string lower_extension(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext;
}

void check_readable(const std::string& path) {
  std::error_code ec;
  HODU_CHECK(std::filesystem::exists(path, ec), ErrorCode::Io, "{}: no such model file", path);
  HODU_CHECK(!std::filesystem::is_directory(path, ec), ErrorCode::Io, "{}: is a directory, not a model file", path);
  std::ifstream f(path, std::ios::binary);
  HODU_CHECK(f.good(), ErrorCode::Io, "{}: cannot open model file ({})", path, std::strerror(errno));
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  HODU_CHECK(f.good(), ErrorCode::Io, "{}: cannot open for writing ({})", path, std::strerror(errno));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  HODU_CHECK(!f.fail(), ErrorCode::Io, "{}: error writing model file", path);
}

std::string parent_dir(const std::string& path) {
  auto p = std::filesystem::path(path).parent_path();
  return p.empty() ? std::string(".") : p.string();
}

void maybe_verify(const Model& model, const std::string& what, const LoadOptions& options) {
  if (!options.verify) return;
  try {
    verify_model(model);
  } catch (const Error& e) {
    throw e.with_context(what + ": ");
  }
}

}  // namespace

ModelFormat model_format_from_path(const std::string& path) {
  std::string ext = lower_extension(path);
  if (ext == ".onnx") return ModelFormat::Onnx;
  if (ext == ".hdss") return ModelFormat::Hdss;
  if (ext == ".hodu") return ModelFormat::HoduScript;
  HODU_CHECK(ext != ".hodupkg", ErrorCode::InvalidArgument,
             "{}: a .hodupkg package is written by `hodu pack MODEL -o {}`, not saved as a model format", path, path);
  fail(ErrorCode::InvalidArgument, "{}: unknown model format '{}' (expected .onnx, .hdss or .hodu)", path,
       ext.empty() ? std::string("no extension") : ext);
}

ModelFormat model_format_from_bytes(std::string_view bytes) {
  if (bytes.size() >= 4 && bytes.substr(0, 4) == "HDSS") return ModelFormat::Hdss;
  // HoduScript is text: printable UTF-8 / ASCII with ordinary whitespace. An
  // ONNX model starts with a protobuf tag byte (0x08 for ir_version) and holds
  // binary data.
  size_t n = std::min<size_t>(bytes.size(), 4096);
  if (n == 0) return ModelFormat::Onnx;
  size_t first = 0;
  while (first < n && std::isspace(static_cast<unsigned char>(bytes[first]))) ++first;
  if (first == n) return ModelFormat::Onnx;
  unsigned char c0 = static_cast<unsigned char>(bytes[first]);
  if (!(std::isalpha(c0) || c0 == '#' || c0 == '/' || c0 == '_')) return ModelFormat::Onnx;
  for (size_t i = 0; i < n; ++i) {
    unsigned char c = static_cast<unsigned char>(bytes[i]);
    if (c < 0x20 && c != '\n' && c != '\r' && c != '\t') return ModelFormat::Onnx;
    if (c == 0x7f) return ModelFormat::Onnx;
  }
  return ModelFormat::HoduScript;
}

const char* model_format_name(ModelFormat f) {
  switch (f) {
    case ModelFormat::Onnx: return "onnx";
    case ModelFormat::Hdss: return "hdss";
    case ModelFormat::HoduScript: return "hodu";
  }
  return "?";
}

Model load_model(const std::string& path, const LoadOptions& options) {
  ModelFormat format;
  std::string ext = lower_extension(path);
  // A .hodupkg: its graph, the weights in place in the package (docs/hodupkg.md).
  auto load_package = [&] {
    Model m = pkg::Package::open(path)->model();
    maybe_verify(m, path, options);
    return m;
  };
  if (ext == ".hodupkg") return load_package();
  if (ext == ".onnx" || ext == ".hdss" || ext == ".hodu") {
    format = model_format_from_path(path);
  } else {
    // Unknown extension: let the bytes decide.
    check_readable(path);
    MappedFile file(path);
    if (pkg::is_package_bytes(file.bytes())) return load_package();
    return load_model_from_bytes(file.bytes(), model_format_from_bytes(file.bytes()), parent_dir(path), path,
                                 options);
  }
  if (format == ModelFormat::Hdss) {
    check_readable(path);
    Model m = read_hdss_file(path);
    maybe_verify(m, path, options);
    return m;
  }
  check_readable(path);
  if (format == ModelFormat::Onnx) {
    Model m = import_onnx_file(path, parent_dir(path));
    maybe_verify(m, path, options);
    return m;
  }
  MappedFile file(path);  // parsed in place: the text is not copied just to be read
  return load_model_from_bytes(file.bytes(), format, parent_dir(path), path, options);
}

Model load_model_from_bytes(std::string_view bytes, ModelFormat format, const std::string& base_dir,
                            const std::string& what, const LoadOptions& options) {
  Model m;
  if (pkg::is_package_bytes(bytes)) {  // whatever `format` says: the bytes are a package
    m = pkg::Package::from_bytes(std::string(bytes), what)->model();
    maybe_verify(m, what, options);
    return m;
  }
  switch (format) {
    case ModelFormat::Onnx: m = import_onnx(bytes, base_dir, what); break;
    case ModelFormat::Hdss: m = read_hdss(bytes, what); break;
    case ModelFormat::HoduScript: m = parse_hoduscript(bytes, what); break;
  }
  maybe_verify(m, what, options);
  return m;
}

std::string save_model_to_bytes(const Model& model, ModelFormat format, const SaveOptions& options) {
  switch (format) {
    case ModelFormat::Onnx: return export_onnx(model, options.onnx_opset);
    case ModelFormat::Hdss: return write_hdss(model);
    case ModelFormat::HoduScript: return print_hoduscript(model);
  }
  fail(ErrorCode::Internal, "unknown model format");
}

void save_model(const Model& model, const std::string& path, const SaveOptions& options) {
  ModelFormat format = model_format_from_path(path);
  std::string bytes;
  try {
    bytes = save_model_to_bytes(model, format, options);
  } catch (const Error& e) {
    throw e.with_context(path + ": ");
  }
  write_file(path, bytes);
}

}  // namespace hodu
