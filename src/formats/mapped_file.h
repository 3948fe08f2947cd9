// A read-only memory mapping of a whole file, unmapped on destruction. Model
// loaders parse straight from it instead of copying the file into a string
// (a 100 MB ONNX model would otherwise be copied twice before parsing).
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace hodu {

class MappedFile {
 public:
  // Io error naming the path when it cannot be opened or mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::string_view bytes() const { return {static_cast<const char*>(data_), size_}; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace hodu
