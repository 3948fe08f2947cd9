// Tensor files: picks the format from the extension, reads or writes the whole
// file, and hands the bytes to the format's reader or writer (tensor_file_*.cc).
#include "formats/tensor_io.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "formats/onnx_tensor.h"
#include "formats/tensor_files.h"

namespace hodu {
namespace tensor_files {

int64_t checked_numel(const std::vector<int64_t>& shape, const std::string& what) {
  constexpr int64_t kMaxElements = int64_t{1} << 48;
  int64_t n = 1;
  for (int64_t d : shape) {
    HODU_CHECK(d >= 0, ErrorCode::InvalidArgument, "{}: negative dim in shape {}", what, shape_to_string(shape));
    HODU_CHECK(d == 0 || n <= kMaxElements / d, ErrorCode::InvalidArgument, "{}: shape {} has too many elements",
               what, shape_to_string(shape));
    n *= d;
  }
  return n;
}

std::string tensor_bytes(const Tensor& t) {
  Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.raw_data()), c.nbytes());
}

}  // namespace tensor_files

namespace {

std::string lowercase_extension(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext;
}

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  HODU_CHECK(in.good(), ErrorCode::Io, "cannot open '{}'", path);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  HODU_CHECK(!in.bad(), ErrorCode::Io, "error reading '{}'", path);
  return std::move(buffer).str();
}

void write_whole_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  HODU_CHECK(out.good(), ErrorCode::Io, "cannot create '{}'", path);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  HODU_CHECK(out.good(), ErrorCode::Io, "error writing '{}'", path);
}

// A .pb file is one ONNX TensorProto; its name field names the tensor.
NamedTensors read_pb(const std::string& bytes, const std::string& path) {
  onnx::TensorProto proto;
  HODU_CHECK(bytes.size() < (size_t{1} << 31) && proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())),
             ErrorCode::InvalidArgument, "{}: not a valid ONNX TensorProto", path);
  std::string base_dir = std::filesystem::path(path).parent_path().string();
  Tensor t = tensor_from_onnx(proto, base_dir.empty() ? "." : base_dir, path);
  return {{proto.name(), std::move(t)}};
}

}  // namespace

TensorFormat tensor_format_from_path(const std::string& path) {
  std::string ext = lowercase_extension(path);
  if (ext == ".npy") return TensorFormat::Npy;
  if (ext == ".npz") return TensorFormat::Npz;
  if (ext == ".hdt") return TensorFormat::Hdt;
  if (ext == ".json") return TensorFormat::Json;
  if (ext == ".pb") return TensorFormat::Pb;
  if (ext == ".safetensors") return TensorFormat::Safetensors;
  if (ext == ".gguf") return TensorFormat::Gguf;
  fail(ErrorCode::InvalidArgument,
       "'{}': unknown tensor file type '{}' (known: .npy .npz .hdt .json .pb .safetensors .gguf)", path, ext);
}

const char* tensor_format_extension(TensorFormat f) {
  switch (f) {
    case TensorFormat::Npy: return ".npy";
    case TensorFormat::Npz: return ".npz";
    case TensorFormat::Hdt: return ".hdt";
    case TensorFormat::Json: return ".json";
    case TensorFormat::Pb: return ".pb";
    case TensorFormat::Safetensors: return ".safetensors";
    case TensorFormat::Gguf: return ".gguf";
  }
  return "";
}

NamedTensors read_tensor_file(const std::string& path) {
  TensorFormat format = tensor_format_from_path(path);
  std::string bytes = read_whole_file(path);
  switch (format) {
    case TensorFormat::Npy: return {{"", read_npy(bytes, path)}};
    case TensorFormat::Npz: return tensor_files::read_npz(bytes, path);
    case TensorFormat::Hdt: return tensor_files::read_hdt(bytes, path);
    case TensorFormat::Json: return tensor_files::read_json_tensors(bytes, path);
    case TensorFormat::Pb: return read_pb(bytes, path);
    case TensorFormat::Safetensors: return tensor_files::read_safetensors(bytes, path);
    case TensorFormat::Gguf: return tensor_files::read_gguf(bytes, path);
  }
  fail(ErrorCode::Internal, "unhandled tensor format for '{}'", path);
}

Tensor read_single_tensor(const std::string& path) {
  NamedTensors tensors = read_tensor_file(path);
  HODU_CHECK(tensors.size() == 1, ErrorCode::InvalidArgument, "'{}' holds {} tensors, expected exactly one", path,
             tensors.size());
  return std::move(tensors[0].second);
}

void write_tensor_file(const std::string& path, const NamedTensors& tensors) {
  TensorFormat format = tensor_format_from_path(path);
  auto need_one = [&] {
    HODU_CHECK(tensors.size() == 1, ErrorCode::InvalidArgument, "'{}': a {} file holds exactly one tensor, got {}",
               path, tensor_format_extension(format), tensors.size());
  };
  for (const auto& [name, t] : tensors)
    HODU_CHECK(t.defined(), ErrorCode::InvalidArgument, "'{}': tensor '{}' is undefined", path, name);
  std::string bytes;
  try {
    switch (format) {
      case TensorFormat::Npy: need_one(); bytes = write_npy(tensors[0].second); break;
      case TensorFormat::Npz: bytes = tensor_files::write_npz(tensors); break;
      case TensorFormat::Hdt: bytes = tensor_files::write_hdt(tensors); break;
      case TensorFormat::Json: bytes = tensor_files::write_json_tensors(tensors); break;
      case TensorFormat::Pb: need_one(); bytes = write_tensor_pb(tensors[0].second, tensors[0].first); break;
      case TensorFormat::Safetensors: bytes = tensor_files::write_safetensors(tensors); break;
      case TensorFormat::Gguf:
        fail(ErrorCode::Unsupported, "writing .gguf files is not supported (write .safetensors or .hdt)");
    }
  } catch (const Error& e) {
    throw e.with_context(fmt::format("'{}': ", path));
  }
  write_whole_file(path, bytes);
}

}  // namespace hodu
