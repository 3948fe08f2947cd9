// A read-only memory mapping of a whole file, unmapped on destruction. Model
// loaders parse straight from it instead of copying the file into a string
// (a 100 MB ONNX model would otherwise be copied twice before parsing).
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace hodu {

// A regular file opened read-only (an Io error naming the path otherwise), closed on destruction.
class ReadOnlyFile {
 public:
  explicit ReadOnlyFile(const std::string& path);
  ~ReadOnlyFile();
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;

  int fd() const { return fd_; }
  size_t size() const { return size_; }

 private:
  int fd_ = -1;
  size_t size_ = 0;
};

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
