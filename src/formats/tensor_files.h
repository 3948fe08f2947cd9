// Private to the tensor-file readers and writers (tensor_file_*.cc): one pair
// of functions per format over in-memory bytes, and the bounds-checked reader
// they share. `what` names the file in every error message.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "formats/tensor_io.h"

namespace hodu::tensor_files {

// Reads little-endian values from a byte buffer; running past the end is an
// InvalidArgument error naming the file, never an out-of-bounds read.
class ByteReader {
 public:
  ByteReader(std::string_view bytes, const std::string& what) : bytes_(bytes), what_(what) {}

  size_t position() const { return pos_; }
  size_t remaining() const { return bytes_.size() - pos_; }
  size_t size() const { return bytes_.size(); }
  const std::string& what() const { return what_; }

  std::string_view take(uint64_t n, const char* field) {
    if (n > remaining())
      fail(ErrorCode::InvalidArgument, "{}: truncated: {} needs {} bytes at offset {}, the file has {} left", what_,
           field, n, pos_, remaining());
    std::string_view out = bytes_.substr(pos_, static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return out;
  }
  template <typename T>
  T read(const char* field) {
    T v;
    std::memcpy(&v, take(sizeof(T), field).data(), sizeof(T));  // the formats are little-endian, like the hosts
    return v;
  }
  void seek(uint64_t offset, const char* field) {
    if (offset > bytes_.size())
      fail(ErrorCode::InvalidArgument, "{}: {} offset {} is past the end of the file ({} bytes)", what_, field, offset,
           bytes_.size());
    pos_ = static_cast<size_t>(offset);
  }

 private:
  std::string_view bytes_;
  std::string what_;
  size_t pos_ = 0;
};

// Element count of `shape` with every dim checked (non-negative, no overflow,
// at most 2^48 elements): file headers are untrusted.
int64_t checked_numel(const std::vector<int64_t>& shape, const std::string& what);

// Little-endian appenders for the writers.
template <typename T>
void append_le(std::string& out, T v) {
  char buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof(T));
  out.append(buf, sizeof(T));
}

// Contiguous bytes of a numeric tensor (a copy only when it is a view).
std::string tensor_bytes(const Tensor& t);

NamedTensors read_npz(std::string_view bytes, const std::string& what);
std::string write_npz(const NamedTensors& tensors);

NamedTensors read_hdt(std::string_view bytes, const std::string& what);
std::string write_hdt(const NamedTensors& tensors);

NamedTensors read_json_tensors(std::string_view text, const std::string& what);
std::string write_json_tensors(const NamedTensors& tensors);

NamedTensors read_safetensors(std::string_view bytes, const std::string& what);
std::string write_safetensors(const NamedTensors& tensors);

NamedTensors read_gguf(std::string_view bytes, const std::string& what);

}  // namespace hodu::tensor_files
