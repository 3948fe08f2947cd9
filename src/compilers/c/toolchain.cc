#include "compilers/c/toolchain.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace fs = std::filesystem;

namespace hodu::compilers::c {
namespace {

void write_file(const fs::path& p, const std::string& data) {
  std::ofstream f(p, std::ios::binary);
  HODU_CHECK(f.good(), ErrorCode::Io, "cannot write {}", p.string());
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
  HODU_CHECK(f.good(), ErrorCode::Io, "cannot write {}", p.string());
}

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool on_path(const std::string& program) {
  if (program.find('/') != std::string::npos) return access(program.c_str(), X_OK) == 0;
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(ss, dir, ':'))
    if (!dir.empty() && access((fs::path(dir) / program).c_str(), X_OK) == 0) return true;
  return false;
}

std::string join(const std::vector<std::string>& args) {
  std::string s;
  for (const auto& a : args) s += (s.empty() ? "" : " ") + a;
  return s;
}

// Runs a program in `cwd`; Io error with its diagnostics when it fails.
void run(const std::vector<std::string>& args, const fs::path& cwd) {
  fs::path log = cwd / "compiler.log";
  pid_t pid = fork();
  HODU_CHECK(pid >= 0, ErrorCode::Io, "cannot start {}", args[0]);
  if (pid == 0) {
    if (chdir(cwd.c_str()) != 0) _exit(126);
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  std::string diag = read_text(log);
  if (diag.size() > 4000) diag = diag.substr(0, 4000) + "\n...";
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
    fail(ErrorCode::Io, "cannot run '{}': not installed?", args[0]);
  fail(ErrorCode::Io, "the C compiler failed: {}\n{}", join(args), diag);
}

std::string opt_flag(int level) { return fmt::format("-O{}", level); }

}  // namespace

ArtifactFormat artifact_format(const std::string& out_path, const std::string& flag) {
  std::string f = flag;
  if (f.empty()) {
    std::string ext = fs::path(out_path).extension().string();
    if (ext.empty()) return ArtifactFormat::Executable;
    f = ext.substr(1);
  }
  if (f == "c") return ArtifactFormat::CSource;
  if (f == "o") return ArtifactFormat::Object;
  if (f == "so") return ArtifactFormat::SharedLibrary;
  if (f == "a") return ArtifactFormat::StaticLibrary;
  if (f == "exe" || f == "out" || f == "bin") return ArtifactFormat::Executable;
  if (f == "s") return ArtifactFormat::Assembly;
  if (f == "ll") return ArtifactFormat::LlvmIr;
  if (f == "bc") return ArtifactFormat::Bitcode;
  fail(ErrorCode::InvalidArgument,
       "unknown output format '{}' (from {}): expected c, o, so, a, exe (no extension), s, ll or bc", f,
       flag.empty() ? "the extension of " + out_path : "-f");
}

const char* artifact_format_name(ArtifactFormat f) {
  switch (f) {
    case ArtifactFormat::CSource: return "C source";
    case ArtifactFormat::Object: return "object file";
    case ArtifactFormat::SharedLibrary: return "shared library";
    case ArtifactFormat::StaticLibrary: return "static library";
    case ArtifactFormat::Executable: return "executable";
    case ArtifactFormat::Assembly: return "assembly";
    case ArtifactFormat::LlvmIr: return "LLVM IR";
    case ArtifactFormat::Bitcode: return "LLVM bitcode";
  }
  return "?";
}

std::string c_compiler_for(const std::string& target) {
  if (target.empty()) {
    if (const char* cc = std::getenv("CC"); cc && *cc) return cc;
    return "cc";
  }
  if (on_path(target + "-gcc")) return target + "-gcc";
  if (on_path("clang")) return "clang";
  fail(ErrorCode::Unsupported,
       "--target {}: no cross compiler found ({}-gcc or clang); on Debian install gcc-{} (e.g. gcc-aarch64-linux-gnu)",
       target, target, target.substr(0, target.find('-')));
}

std::string kernel_library_dir() {
  std::vector<fs::path> places;
  if (const char* env = std::getenv("HODU_KERNELS_DIR"); env && *env) {
    places.emplace_back(env);  // given: the only place
  } else {
    std::error_code ec;
    fs::path self = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) places.push_back(self.parent_path().parent_path() / "lib");
#ifdef HODU_KERNELS_BUILD_DIR
    places.emplace_back(HODU_KERNELS_BUILD_DIR);
#endif
  }
  std::string looked;
  for (const auto& dir : places) {
    if (fs::exists(dir / "libhodu_kernels.so")) return fs::canonical(dir).string();
    looked += (looked.empty() ? "" : ", ") + dir.string();
  }
  fail(ErrorCode::Io,
       "hodu's kernel library libhodu_kernels.so is not in {} (default-mode artifacts link it): build it "
       "(ninja hodu_kernels), point HODU_KERNELS_DIR at its folder, or build with --kernels portable",
       looked.empty() ? "any known place" : looked);
}

BuildResult build_model(const Model& model, const std::string& out_path, const BuildOptions& options) {
  using clock = std::chrono::steady_clock;
  auto say = [&](const std::string& s) {
    if (options.progress) options.progress(s);
  };
  fs::path out = fs::absolute(out_path);
  HODU_CHECK(!out.filename().empty(), ErrorCode::InvalidArgument, "-o {}: not a file name", out_path);
  HODU_CHECK(fs::is_directory(out.parent_path()), ErrorCode::InvalidArgument, "-o {}: folder {} does not exist",
             out_path, out.parent_path().string());
  ArtifactFormat format = options.format;
  bool llvm = format == ArtifactFormat::LlvmIr || format == ArtifactFormat::Bitcode;
  fs::path weights_side = out.string() + ".weights";
  CodegenOptions co = options.codegen;
  if (co.kernel_library && (co.standalone || !options.target.empty())) {
    co.kernel_library = false;  // libhodu_kernels is built for the host only
    if (!co.standalone) say("cross build: portable kernels (libhodu_kernels is built for the host only)");
  }
  std::string kernels_dir = co.kernel_library ? kernel_library_dir() : "";
  // The .incbin reads the side file by name from the compiler's working folder.
  co.weights_file = weights_side.filename().string();

  BuildResult result;
  auto t0 = clock::now();
  say("generating C code");
  GeneratedModel gen = generate_c(model, co);
  result.generate_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  say(fmt::format("generated {} steps from {} nodes ({} fused, {} folded at build time); arena {:.1f} MiB "
                  "(unplanned {:.1f} MiB), weights {:.1f} MiB",
                  gen.steps, gen.nodes, gen.fused_nodes, gen.folded_nodes, gen.arena_bytes / 1048576.0,
                  gen.naive_arena_bytes / 1048576.0, gen.weight_bytes / 1048576.0));

  // Default mode: what linking the artifact needs.
  std::vector<std::string> link;
  if (co.kernel_library) {
    link = {"-L" + kernels_dir, "-lhodu_kernels", "-Wl,-rpath," + kernels_dir};
    result.link_flags = join(link);
  }
  std::vector<std::string> files;
  auto put = [&](const fs::path& src, const fs::path& dst) {
    fs::copy_file(src, dst, fs::copy_options::overwrite_existing);
    files.push_back(dst.string());
  };
  auto put_text = [&](const std::string& text, const fs::path& dst) {
    write_file(dst, text);
    files.push_back(dst.string());
  };
  // The report keeps the figures, not the texts.
  auto finish = [&] {
    result.files = std::move(files);
    result.model = std::move(gen);
    result.model.header.clear();
    result.model.source.clear();
    result.model.main_source.clear();
    result.model.weights.clear();
    return std::move(result);
  };
  fs::path dlpack_src = "/usr/include/dlpack/dlpack.h";
  HODU_CHECK(fs::exists(dlpack_src), ErrorCode::Io,
             "{} is missing: the generated header includes it (install Debian's libdlpack-dev)", dlpack_src.string());
  const std::string name = gen.name;
  if (format == ArtifactFormat::CSource) {  // no compiler run: no scratch folder
    if (co.kernel_library) say("link it with: " + result.link_flags);
    put_text(gen.source, out);
    put_text(gen.header, out.parent_path() / (name + ".h"));
    put_text(gen.weights, weights_side);
    return finish();
  }

  // Scratch folder: sources, the dlpack header (cross compilers do not see /usr/include) and the blob.
  std::string tmpl = (fs::temp_directory_path() / "hodu-build-XXXXXX").string();
  HODU_CHECK(mkdtemp(tmpl.data()) != nullptr, ErrorCode::Io, "cannot create a scratch folder in {}",
             fs::temp_directory_path().string());
  fs::path tmp = tmpl;
  struct Cleanup {
    fs::path dir;
    bool keep;
    ~Cleanup() {
      std::error_code ec;
      if (!keep) fs::remove_all(dir, ec);
    }
  } cleanup{tmp, options.keep_temp};
  fs::create_directories(tmp / "include" / "dlpack");
  fs::copy_file(dlpack_src, tmp / "include" / "dlpack" / "dlpack.h");
  write_file(tmp / (name + ".h"), gen.header);
  write_file(tmp / (name + ".c"), gen.source);
  write_file(tmp / co.weights_file, gen.weights);
  std::string().swap(gen.weights);  // on disk now: not held while the compiler runs
  bool side_file = !co.embed_weights || format == ArtifactFormat::Assembly || llvm;

  std::string cc = llvm ? (options.target.empty() || on_path("clang") ? "clang" : "") : c_compiler_for(options.target);
  HODU_CHECK(!cc.empty() && (on_path(cc) || cc == "cc"), ErrorCode::Io, "compiler '{}' is not installed{}",
             cc.empty() ? "clang" : cc, llvm ? " (LLVM IR needs clang: Debian package clang)" : "");
  std::vector<std::string> base = {cc, "-std=gnu11", opt_flag(co.opt_level), "-I.", "-Iinclude", "-fPIC"};
  if (co.opt_level >= 3) base.push_back("-funroll-loops");
  // -O3 tunes for the build machine's CPU (AVX2/FMA...): fastest here, not portable to older CPUs.
  if (co.opt_level >= 3 && options.target.empty()) base.push_back("-march=native");
  if (!options.target.empty() && cc.find("gcc") == std::string::npos) base.push_back("--target=" + options.target);
  // -ffp-contract=off: the same numbers on every target (no fused multiply-add surprises).
  base.push_back("-ffp-contract=off");
  // A kernel the generated code calls but the artifact lacks is a generator bug: fail here.
  base.push_back("-Werror=implicit-function-declaration");
  result.compiler = cc;
  auto t1 = clock::now();
  say(fmt::format("compiling {:.1f} KiB of C with {} -O{} ({})", gen.source.size() / 1024.0, cc, co.opt_level,
                  artifact_format_name(format)));
  auto with = [&](std::vector<std::string> extra, const std::vector<std::string>& libs = {}) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    a.insert(a.end(), libs.begin(), libs.end());
    return a;
  };
  std::string src = name + ".c";
  switch (format) {
    case ArtifactFormat::Object:
      run(with({"-c", src, "-o", "out.o"}), tmp);
      put(tmp / "out.o", out);
      break;
    case ArtifactFormat::SharedLibrary:
      run(with({"-shared", src, "-o", "out.so", "-lm"}, link), tmp);
      put(tmp / "out.so", out);
      break;
    case ArtifactFormat::StaticLibrary: {
      run(with({"-c", src, "-o", name + ".o"}), tmp);
      std::string ar = options.target.empty() ? "ar" : options.target + "-ar";
      if (!on_path(ar)) ar = on_path("llvm-ar") ? "llvm-ar" : "ar";
      fs::remove(out);
      run({ar, "rcs", "out.a", name + ".o"}, tmp);
      put(tmp / "out.a", out);
      break;
    }
    case ArtifactFormat::Executable:
      write_file(tmp / "main.c", gen.main_source);
      run(with({src, "main.c", "-o", "out.exe", "-lm"}, link), tmp);
      put(tmp / "out.exe", out);
      break;
    case ArtifactFormat::Assembly:
      run(with({"-S", src, "-o", "out.s"}), tmp);
      put(tmp / "out.s", out);
      break;
    case ArtifactFormat::LlvmIr:
      run(with({"-S", "-emit-llvm", src, "-o", "out.ll"}), tmp);
      put(tmp / "out.ll", out);
      break;
    case ArtifactFormat::Bitcode:
      run(with({"-c", "-emit-llvm", src, "-o", "out.bc"}), tmp);
      put(tmp / "out.bc", out);
      break;
    case ArtifactFormat::CSource:
      break;  // returned above
  }
  if (format != ArtifactFormat::Executable)
    put_text(gen.header, out.parent_path() / (name + ".h"));
  if (side_file) put(tmp / co.weights_file, weights_side);
  bool linked = format == ArtifactFormat::SharedLibrary || format == ArtifactFormat::Executable;
  if (co.kernel_library && !linked) say("link it with: " + result.link_flags);
  result.compile_seconds = std::chrono::duration<double>(clock::now() - t1).count();
  if (options.keep_temp) result.temp_dir = tmp.string();
  return finish();
}

}  // namespace hodu::compilers::c
