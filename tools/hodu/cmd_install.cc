// hodu install --prefix DIR: copies this hodu (binary, public headers, shipped
// plugins, CMake package) into DIR, in the layout of `cmake --install`
// (cmake/install.cmake). Works from a build tree and from an installed prefix.
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "core/error.h"

namespace fs = std::filesystem;

namespace hodu::cli {
namespace {

// Where this hodu's files are.
struct Layout {
  fs::path binary, headers, plugins, cmake_package;
  fs::path kernel_library;  // libhodu_kernels.so, linked by `hodu build` artifacts (same place in both layouts)
  fs::path cpp_library;     // libhodu.so, hodu::hodu (same place in both layouts)
};

Layout this_layout() {
  Layout l;
  l.binary = fs::read_symlink("/proc/self/exe");
  fs::path root = l.binary.parent_path().parent_path();
  l.kernel_library = root / "lib" / "libhodu_kernels.so";
  l.cpp_library = root / "lib" / "libhodu.so";
  if (fs::exists(root / "lib" / "cmake" / "hodu" / "hoduConfig.cmake")) {  // an installed prefix
    l.headers = root / "include" / "hodu";
    l.plugins = root / "lib" / "hodu" / "plugins";
    l.cmake_package = root / "lib" / "cmake" / "hodu";
  } else {  // the build tree: <build>/bin/hodu
    l.headers = fs::path(HODU_SOURCE_DIR) / "include" / "hodu";
    l.plugins = root / "plugins";
    l.cmake_package = root / "cmake-package";
  }
  return l;
}

void copy_file(const fs::path& from, const fs::path& to, bool quiet) {
  std::error_code ec;
  fs::create_directories(to.parent_path(), ec);
  // Through a temporary name: replacing a running binary or a loaded plugin in place would corrupt it.
  fs::path tmp = to.parent_path() / ("." + to.filename().string() + ".tmp");
  fs::copy_file(from, tmp, fs::copy_options::overwrite_existing, ec);
  HODU_CHECK(!ec, ErrorCode::Io, "cannot copy {} to {}: {}", from.string(), tmp.string(), ec.message());
  fs::permissions(tmp, fs::status(from).permissions(), ec);
  fs::rename(tmp, to, ec);
  HODU_CHECK(!ec, ErrorCode::Io, "cannot write {}: {}", to.string(), ec.message());
  if (!quiet) std::fprintf(stderr, "installed %s\n", to.string().c_str());
}

int run_install(const std::string& prefix_text, bool quiet) {
  HODU_CHECK(!prefix_text.empty(), ErrorCode::InvalidArgument, "--prefix: give a folder");
  Layout from = this_layout();
  fs::path prefix = fs::absolute(prefix_text);
  HODU_CHECK(fs::exists(from.cmake_package / "hoduConfig.cmake"), ErrorCode::Io,
             "{}: no CMake package next to this hodu (run cmake on the build tree first)",
             from.cmake_package.string());
  HODU_CHECK(fs::is_directory(from.headers), ErrorCode::Io, "{}: headers not found", from.headers.string());
  copy_file(from.binary, prefix / "bin" / "hodu", quiet);
  int headers = 0, plugins = 0;
  for (const auto& e : fs::directory_iterator(from.headers))
    if (e.path().extension() == ".h") copy_file(e.path(), prefix / "include" / "hodu" / e.path().filename(), quiet), ++headers;
  std::error_code ec;
  if (fs::is_directory(from.plugins, ec))
    for (const auto& e : fs::directory_iterator(from.plugins))
      if (e.path().extension() == ".so")
        copy_file(e.path(), prefix / "lib" / "hodu" / "plugins" / e.path().filename(), quiet), ++plugins;
  // hodugaki (docs/hodugaki.md), built next to hodu, goes next to it.
  if (fs::path gaki = from.binary.parent_path() / "hodugaki"; fs::exists(gaki, ec))
    copy_file(gaki, prefix / "bin" / "hodugaki", quiet);
  bool kernels = fs::exists(from.kernel_library, ec);
  if (kernels) copy_file(from.kernel_library, prefix / "lib" / from.kernel_library.filename(), quiet);
  else
    std::fprintf(stderr, "note: %s not found; `hodu build` from this prefix needs --kernels portable\n",
                 from.kernel_library.string().c_str());
  if (fs::exists(from.cpp_library, ec)) copy_file(from.cpp_library, prefix / "lib" / from.cpp_library.filename(), quiet);
  else
    std::fprintf(stderr, "note: %s not found; hodu::hodu (the C++ library) is not installed (build hodu_shared)\n",
                 from.cpp_library.string().c_str());
  for (const char* f : {"hoduConfig.cmake", "hoduConfigVersion.cmake"})
    copy_file(from.cmake_package / f, prefix / "lib" / "cmake" / "hodu" / f, quiet);
  std::printf("installed hodu %s into %s (%d headers, %d plugins); use it from CMake with "
              "-DCMAKE_PREFIX_PATH=%s and find_package(hodu)\n",
              HODU_VERSION, prefix.string().c_str(), headers, plugins, prefix.string().c_str());
  if (plugins == 0)
    std::fprintf(stderr, "note: no plugins found in %s (build the hodu-compiler-c and hodu-runtime-native targets)\n",
                 from.plugins.string().c_str());
  return 0;
}

}  // namespace

CommandFn add_install_command(CLI::App& app) {
  auto prefix = std::make_shared<std::string>();
  auto quiet = std::make_shared<bool>(false);
  app.add_option("--prefix", *prefix, "folder to install into (bin/, include/hodu/, lib/hodu/plugins/, lib/cmake/hodu/)")
      ->required();
  app.add_flag("-q,--quiet", *quiet, "only the summary line");
  app.footer("Same layout as `cmake --install <build> --prefix DIR`. See docs/plugins.md.");
  return [prefix, quiet] { return run_install(*prefix, *quiet); };
}

}  // namespace hodu::cli
