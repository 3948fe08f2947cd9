#include "formats/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace hodu {

ReadOnlyFile::ReadOnlyFile(const std::string& path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  HODU_CHECK(fd_ >= 0, ErrorCode::Io, "{}: cannot open ({})", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    int err = errno;
    ::close(fd_);
    fail(ErrorCode::Io, "{}: cannot stat ({})", path, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    fail(ErrorCode::Io, "{}: not a regular file", path);
  }
  size_ = static_cast<size_t>(st.st_size);
}

ReadOnlyFile::~ReadOnlyFile() { ::close(fd_); }

MappedFile::MappedFile(const std::string& path) {
  ReadOnlyFile file(path);
  size_ = file.size();
  if (size_ > 0) {
    data_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, file.fd(), 0);
    if (data_ == MAP_FAILED) {
      data_ = nullptr;
      fail(ErrorCode::Io, "{}: cannot map ({})", path, std::strerror(errno));
    }
    ::madvise(data_, size_, MADV_SEQUENTIAL);
  }
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
}

}  // namespace hodu
