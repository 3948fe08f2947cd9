// A fresh folder (mkdtemp) removed with everything in it when the ScratchDir
// goes out of scope: where plugins, the native engine and the artifact cache
// have a compiler write files that are loaded, moved or read back right after.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/error.h"

namespace hodu {

class ScratchDir {
 public:
  // `parent`/<prefix>XXXXXX; Io when it cannot be created.
  explicit ScratchDir(const std::string& prefix,
                      const std::filesystem::path& parent = std::filesystem::temp_directory_path()) {
    std::string tmpl = (parent / (prefix + "XXXXXX")).string();
    HODU_CHECK(mkdtemp(tmpl.data()) != nullptr, ErrorCode::Io, "cannot create a scratch folder");
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace hodu
