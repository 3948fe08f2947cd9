#include "engines/native/native_engine.h"

#include <dlfcn.h>
#include <dlpack/dlpack.h>
#include <elf.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>

#include "compilers/c/toolchain.h"
#include "core/error.h"
#include "formats/mapped_file.h"
#include "formats/package.h"
#include "runtime/log.h"
#include "core/dlpack_tensor.h"
#include "core/scratch_dir.h"

namespace fs = std::filesystem;

namespace hodu::native {
namespace {

// 2 added sizes bound at run time (free dims: -1 in the declared shapes); 1 still runs.
constexpr int kAbiVersion = 2;
constexpr const char* kNameTag = "HODU_AOT_MODEL_NAME=";
constexpr const char* kDocTag = "HODU_AOT_MODEL_DOC=";

// The model.h API of one compiled library, resolved by name.
struct Api {
  void* handle = nullptr;
  std::string path, prefix, doc;  // doc: what was built (hodu build's description), may be empty
  int (*abi_version)() = nullptr;
  int (*create_ex)(const char*, void**, char*, size_t) = nullptr;
  // Libraries built before it existed lack it; then the library picks its threads.
  int (*create_threads)(const char*, int, void**, char*, size_t) = nullptr;
  // Weights given in memory (a .hodupkg's weights section); libraries built before it lack it.
  int (*create_with_weights)(const void*, size_t, int, int, void**, char*, size_t) = nullptr;
  void (*destroy)(void*) = nullptr;
  int (*num_inputs)() = nullptr;
  int (*num_outputs)() = nullptr;
  const char* (*input_name)(int) = nullptr;
  const char* (*output_name)(int) = nullptr;
  DLDataType (*input_dtype)(int) = nullptr;
  DLDataType (*output_dtype)(int) = nullptr;
  int (*input_ndim)(int) = nullptr;
  int (*output_ndim)(int) = nullptr;
  const int64_t* (*input_shape)(int) = nullptr;
  const int64_t* (*output_shape)(int) = nullptr;
  const char* (*input_dim_name)(int, int) = nullptr;   // ABI 2: a free dim's name, NULL when fixed
  const char* (*output_dim_name)(int, int) = nullptr;  // ABI 2: an output dim that is a free dim
  int (*run)(void*, const DLTensor*, int, DLTensor*, int) = nullptr;
  const char* (*last_error)(const void*) = nullptr;

  ~Api() {
    if (handle) dlclose(handle);
  }
};

// The API prefix the generator stamped into the library.
// The symbol prefix, from the name tag `hodu build` embeds. Searched in a
// mapping: a library with embedded weights is mostly weights, not worth copying.
// The bytes of the ".hodu_info" section of a 64-bit little-endian ELF file; empty when the
// file has none (another format, or a library built before the section existed).
std::string_view info_section(std::string_view bytes) {
  if (bytes.size() < sizeof(Elf64_Ehdr) || bytes.compare(0, 4, ELFMAG) != 0 || bytes[EI_CLASS] != ELFCLASS64 ||
      bytes[EI_DATA] != ELFDATA2LSB)
    return {};
  Elf64_Ehdr eh;
  std::memcpy(&eh, bytes.data(), sizeof eh);
  auto header = [&](size_t i, Elf64_Shdr& sh) {
    size_t at = eh.e_shoff + i * eh.e_shentsize;
    if (eh.e_shentsize < sizeof sh || at + sizeof sh > bytes.size()) return false;
    std::memcpy(&sh, bytes.data() + at, sizeof sh);
    return sh.sh_offset <= bytes.size() && sh.sh_size <= bytes.size() - sh.sh_offset;
  };
  Elf64_Shdr names;
  if (eh.e_shstrndx >= eh.e_shnum || !header(eh.e_shstrndx, names)) return {};
  for (size_t i = 0; i < eh.e_shnum; ++i) {
    Elf64_Shdr sh;
    if (!header(i, sh) || sh.sh_name >= names.sh_size) continue;
    std::string_view name = bytes.substr(names.sh_offset + sh.sh_name, names.sh_size - sh.sh_name);
    if (name.substr(0, name.find('\0')) == ".hodu_info") return bytes.substr(sh.sh_offset, sh.sh_size);
  }
  return {};
}

// The text after `tag` (up to its NUL) in `bytes`.
std::optional<std::string> find_tag(std::string_view bytes, const char* tag) {
  size_t at = bytes.find(tag);
  if (at == std::string_view::npos) return std::nullopt;
  size_t start = at + std::strlen(tag), end = bytes.find('\0', start);
  return std::string(bytes.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
}

// The API prefix and the build description, read from the library's info section (libraries
// built before it existed: from anywhere in the file), one mapping for both.
void read_tags(Api& api) {
  MappedFile file(api.path);
  std::string_view bytes = info_section(file.bytes());
  if (bytes.find(kNameTag) == std::string_view::npos) bytes = file.bytes();
  auto prefix = find_tag(bytes, kNameTag);
  HODU_CHECK(prefix.has_value(), ErrorCode::InvalidModel, "{}: not a library built by `hodu build` (no model name tag)",
             api.path);
  api.prefix = *prefix;
  api.doc = find_tag(bytes, kDocTag).value_or("");
}

// `shown`: the library's name in messages when `path` is not one a user knows (a memfd).
std::shared_ptr<Api> open_library(const std::string& path, const std::string& shown = "") {
  auto api = std::make_shared<Api>();
  api->path = fs::absolute(path).string();
  read_tags(*api);
  api->handle = dlopen(api->path.c_str(), RTLD_NOW | RTLD_LOCAL);
  HODU_CHECK(api->handle, ErrorCode::Io, "cannot load {}: {}", shown.empty() ? path : shown, dlerror());
  if (!shown.empty()) api->path = shown;
  auto sym = [&](const char* what, auto& fn) {
    void* p = dlsym(api->handle, (api->prefix + "_" + what).c_str());
    HODU_CHECK(p, ErrorCode::InvalidModel, "{}: missing symbol {}_{} (not a hodu-built library?)", path, api->prefix,
               what);
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
  };
  sym("abi_version", api->abi_version);
  HODU_CHECK(api->abi_version() == kAbiVersion || api->abi_version() == 1, ErrorCode::Unsupported,
             "{}: built with C API version {}, this hodu runs version {} (rebuild it with hodu build)", path,
             api->abi_version(), kAbiVersion);
  sym("create_ex", api->create_ex);
  api->create_threads = reinterpret_cast<decltype(api->create_threads)>(
      dlsym(api->handle, (api->prefix + "_create_threads").c_str()));
  api->create_with_weights = reinterpret_cast<decltype(api->create_with_weights)>(
      dlsym(api->handle, (api->prefix + "_create_with_weights").c_str()));
  sym("destroy", api->destroy);
  sym("num_inputs", api->num_inputs);
  sym("num_outputs", api->num_outputs);
  sym("input_name", api->input_name);
  sym("output_name", api->output_name);
  sym("input_dtype", api->input_dtype);
  sym("output_dtype", api->output_dtype);
  sym("input_ndim", api->input_ndim);
  sym("output_ndim", api->output_ndim);
  sym("input_shape", api->input_shape);
  sym("output_shape", api->output_shape);
  sym("run", api->run);
  api->input_dim_name =
      reinterpret_cast<decltype(api->input_dim_name)>(dlsym(api->handle, (api->prefix + "_input_dim_name").c_str()));
  api->output_dim_name =
      reinterpret_cast<decltype(api->output_dim_name)>(dlsym(api->handle, (api->prefix + "_output_dim_name").c_str()));
  sym("last_error", api->last_error);
  return api;
}

// Weights a library reads in place: a blob in memory and what keeps it there.
struct WeightsInMemory {
  std::string_view blob;
  std::shared_ptr<const void> keep;
  std::string hint;  // appended to input errors (what the library was built for)
  bool mapped = false;  // a clean file mapping (pages may be given back)
};

class NativeExecutable : public Executable {
 public:
  NativeExecutable(std::shared_ptr<Api> api, const std::string& weights, int threads) : api_(std::move(api)) {
    char err[600] = {0};
    const char* w = weights.empty() ? nullptr : weights.c_str();
    int st = api_->create_threads ? api_->create_threads(w, threads, &instance_, err, sizeof err)
                                  : api_->create_ex(w, &instance_, err, sizeof err);
    HODU_CHECK(st == 0, ErrorCode::Io, "{}: cannot create the model instance: {}", api_->path, err);
  }
  NativeExecutable(std::shared_ptr<Api> api, WeightsInMemory weights, int threads)
      : api_(std::move(api)), keep_(std::move(weights.keep)), hint_(std::move(weights.hint)) {
    HODU_CHECK(api_->create_with_weights, ErrorCode::InvalidModel,
               "{}: the library has no {}_create_with_weights (built by an older hodu): repack the model", api_->path,
               api_->prefix);
    char err[600] = {0};
    // The package is a file mapped and never written: the library gives back the pages of the
    // weights it packs as it goes (MODEL_WEIGHTS_MAPPED), as it does for embedded weights.
    constexpr int kWeightsMapped = 1;
    int st = api_->create_with_weights(weights.blob.data(), weights.blob.size(), threads,
                                       weights.mapped ? kWeightsMapped : 0, &instance_, err, sizeof err);
    HODU_CHECK(st == 0, ErrorCode::Io, "{}: cannot create the model instance: {}", api_->path, err);
  }
  ~NativeExecutable() override {
    if (instance_) api_->destroy(instance_);
  }

  std::vector<RuntimeValue> run(const std::map<std::string, RuntimeValue>& inputs) override {
    int nin = api_->num_inputs(), nout = api_->num_outputs();
    std::vector<Tensor> keep;
    std::vector<DLTensor> in(nin), out(nout);
    keep.reserve(nin);  // DLTensors point into these: no reallocation
    for (int i = 0; i < nin; ++i) {
      std::string name = api_->input_name(i);
      auto it = inputs.find(name);
      HODU_CHECK(it != inputs.end() && it->second.is_tensor(), ErrorCode::InvalidArgument, "missing input '{}'", name);
      keep.push_back(it->second.tensor.contiguous());
      in[i] = dl_view(keep.back(), name);
    }
    // The library writes into caller-owned outputs: the last run's, unless the caller still
    // holds them (fresh pages for GPT-2's 26 MB of logits cost ~3 ms a run in page faults).
    outputs_.resize(nout);
    std::vector<RuntimeValue> results;
    results.reserve(nout);
    for (int i = 0; i < nout; ++i) {
      const char* name = api_->output_name(i);
      const int64_t* s = api_->output_shape(i);
      std::vector<int64_t> shape(s, s + api_->output_ndim(i));
      // A size known only per run: the library's own tensor, copied after the run.
      if (std::any_of(shape.begin(), shape.end(), [](int64_t d) { return d < 0; })) {
        outputs_[i] = Tensor();
        out[i] = DLTensor{};
        continue;
      }
      Tensor& t = outputs_[i];
      if (!t.defined() || t.storage().use_count() > 1) t = Tensor::empty(from_dl_dtype(api_->output_dtype(i), name), shape);
      out[i] = dl_view(t, name);
    }
    int st = api_->run(instance_, in.data(), nin, out.data(), nout);
    HODU_CHECK(st == 0, st == 1 ? ErrorCode::InvalidArgument : ErrorCode::Internal, "{}: {}{}", api_->path,
               api_->last_error(instance_), st == 1 ? hint_ : "");
    for (int i = 0; i < nout; ++i) {
      if (!outputs_[i].defined()) {
        const DLTensor& o = out[i];
        std::vector<int64_t> shape(o.shape, o.shape + o.ndim);
        Tensor t = Tensor::empty(from_dl_dtype(o.dtype, api_->output_name(i)), shape);
        if (t.nbytes()) std::memcpy(t.raw_data(), static_cast<const char*>(o.data) + o.byte_offset, t.nbytes());
        results.emplace_back(t);
        continue;
      }
      results.emplace_back(outputs_[i]);
    }
    return results;
  }

 private:
  std::shared_ptr<Api> api_;
  std::shared_ptr<const void> keep_;  // holds the weights the instance reads
  std::string hint_;
  void* instance_ = nullptr;
  std::vector<Tensor> outputs_;
};

std::string metadata_value(const Model& model, const char* key) {
  for (const auto& [k, v] : model.metadata)
    if (k == key) return v;
  return "";
}

// The library of a .hodupkg for this host, run over the package's weights section in place.
// The library is loaded from memory (a memfd): nothing is extracted to disk.
std::unique_ptr<Executable> prepare_package(const std::string& path, const EngineOptions& options) {
  auto package = pkg::Package::open(path);
  const pkg::Target* t = package->meta().target(pkg::host_triple());
  if (!t) return nullptr;
  const std::string file = fs::path(path).filename().string();
  const std::string shown = fmt::format("{} ({} library)", file, t->triple);
  if (t->kernels == "onednn") {
    // Its NEEDED libhodu_kernels.so carries the packing machine's RUNPATH; the one of this
    // hodu, loaded first under the same soname, is the one the library binds to.
    std::string kernels;
    try {
      kernels = (fs::path(compilers::c::kernel_library_dir()) / "libhodu_kernels.so").string();
    } catch (const Error& e) {
      throw e.with_context(shown + " calls hodu's kernel library, which is missing: ");
    }
    static std::mutex preload_mutex;
    std::lock_guard<std::mutex> lock(preload_mutex);
    static void* preloaded = nullptr;
    if (!preloaded) preloaded = dlopen(kernels.c_str(), RTLD_NOW | RTLD_GLOBAL);
    HODU_CHECK(preloaded, ErrorCode::Io, "{} needs hodu's kernel library: cannot load {}: {}", shown, kernels,
               dlerror());
  }
  std::string_view lib = package->bytes(*package->find(t->library));
  std::shared_ptr<Api> api;
  int fd = access("/proc/self/fd", X_OK) == 0 ? memfd_create(("hodu-" + t->triple).c_str(), MFD_CLOEXEC) : -1;
  if (fd >= 0) {
    size_t done = 0;
    while (done < lib.size()) {
      ssize_t w = ::write(fd, lib.data() + done, lib.size() - done);
      if (w <= 0) {
        ::close(fd);
        fail(ErrorCode::Io, "{}: cannot write the library to memory", shown);
      }
      done += static_cast<size_t>(w);
    }
    try {
      api = open_library(fmt::format("/proc/self/fd/{}", fd), shown);
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);  // the mapping stays
  } else {
    // No memfd or no /proc: a scratch file, removed once loaded.
    ScratchDir scratch("hodu-package-");
    fs::path so = scratch.path() / ("lib" + t->api_prefix + ".so");
    {
      std::ofstream f(so, std::ios::binary);
      f.write(lib.data(), static_cast<std::streamsize>(lib.size()));
      HODU_CHECK(f.good(), ErrorCode::Io, "{}: cannot write the library to {}", shown, so.string());
    }
    api = open_library(so.string(), shown);
  }
  std::string hint;
  if (!t->input_shapes.empty()) {
    for (const auto& [name, dims] : t->input_shapes)
      hint += fmt::format("{}{} {}", hint.empty() ? "" : ", ", name, shape_to_string(dims));
    hint = fmt::format(" (the package's {} library was built for {}; --engine cpu runs the graph at other sizes)",
                       t->triple, hint);
  }
  log_verbose("{}: running its {} library (API {}, {} kernels, built -O{}), weights read in place from the package",
              file, t->triple, t->api_prefix, t->kernels, t->opt_level);
  const pkg::SectionInfo& weights = *package->find("weights");
  return std::make_unique<NativeExecutable>(
      api, WeightsInMemory{package->bytes(weights), package, hint, package->mapped()}, options.threads);
}

std::string library_of(const Model& model) {
  for (const auto& [k, v] : model.metadata)
    if (k == kLibraryKey) return v;
  return "";
}

class NativeEngine : public Engine {
 public:
  std::string name() const override { return "native"; }
  std::string description() const override {
    return "runs models compiled by hodu build (.so); other models are compiled to a temporary .so first";
  }
  bool supports(const Device& d) const override { return d.kind == Device::Kind::CPU; }

  std::unique_ptr<Executable> prepare(const Model& model, const EngineOptions& options) override {
    if (std::string p = metadata_value(model, pkg::kPackagePathKey); !p.empty())
      if (auto e = prepare_package(p, options)) return e;
    std::string lib = library_of(model);
    if (!lib.empty()) {
      std::string weights = fs::exists(lib + ".weights") ? lib + ".weights" : "";
      return std::make_unique<NativeExecutable>(open_library(lib), weights, options.threads);
    }
    // Compile first: a scratch .so, loaded and then removed (the mapping stays).
    ScratchDir scratch("hodu-native-");
    compilers::c::BuildOptions o;
    o.format = compilers::c::ArtifactFormat::SharedLibrary;
    std::string so = (scratch.path() / "model.so").string();
    compilers::c::build_model(model, so, o);
    return std::make_unique<NativeExecutable>(open_library(so), "", options.threads);
  }
};

}  // namespace

std::shared_ptr<Engine> make_native_engine() { return std::make_shared<NativeEngine>(); }

void register_native_kernels(KernelRegistry& registry) {
  registry.add({.op = "*", .device = Device::Kind::CPU, .name = "aot-c", .engine = "native", .priority = -1,
                .description = "the whole graph compiled to C by hodu build and run as a shared library"});
}

bool is_native_library(const std::string& path) { return fs::path(path).extension() == ".so"; }

Model describe_library(const std::string& path) {
  HODU_CHECK(fs::exists(path), ErrorCode::Io, "{}: no such file", path);
  auto api = open_library(path);
  Model m;
  m.producer_name = "hodu build";
  m.graph.name = api->prefix;
  m.metadata.push_back({kLibraryKey, api->path});
  m.doc = api->doc;
  // A free dim (-1) is the library's symbol; an output dim computed while running is unknown.
  auto shape_of = [&](const int64_t* s, int ndim, int input, int output) {
    std::vector<Dim> dims;
    for (int d = 0; d < ndim; ++d) {
      const char* name = input >= 0 && api->input_dim_name     ? api->input_dim_name(input, d)
                         : output >= 0 && api->output_dim_name ? api->output_dim_name(output, d)
                                                               : nullptr;
      dims.push_back(s[d] >= 0 ? Dim(s[d]) : name ? Dim::sym(name) : Dim::unknown());
    }
    return Shape(dims);
  };
  for (int i = 0; i < api->num_inputs(); ++i) {
    m.graph.inputs.push_back(Value{api->input_name(i),
                                   ValueType::tensor(from_dl_dtype(api->input_dtype(i), api->input_name(i)),
                                                     shape_of(api->input_shape(i), api->input_ndim(i), i, -1)),
                                   {}});
  }
  for (int i = 0; i < api->num_outputs(); ++i) {
    m.graph.outputs.push_back(Value{api->output_name(i),
                                    ValueType::tensor(from_dl_dtype(api->output_dtype(i), api->output_name(i)),
                                                      shape_of(api->output_shape(i), api->output_ndim(i), -1, i)),
                                    {}});
  }
  return m;
}

}  // namespace hodu::native
