// libhodu-runtime-native.so: the native engine (src/engines/native) behind the
// plugin ABI. Loads a shared library built by `hodu build` (or by the
// hodu-compiler-c plugin), or .hdss model bytes, which it compiles first.
#include <hodu/plugin.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>

#include "engines/native/native_engine.h"
#include "formats/model_io.h"
#include "core/dlpack_tensor.h"
#include "plugins/plugin_status.h"
#include "plugins/tensor_info.h"

namespace fs = std::filesystem;
using namespace hodu;
using namespace hodu::plugins;

struct hodu_model {
  Model model;  // outlives the executable (Engine::prepare's contract)
  std::unique_ptr<Executable> executable;
  GraphTensorInfos io;
};

namespace {

std::unique_ptr<hodu_model> prepare(Model model) {
  auto m = std::make_unique<hodu_model>();
  m->model = std::move(model);
  m->io = GraphTensorInfos(m->model.graph);
  m->executable = native::make_native_engine()->prepare(m->model, {});
  return m;
}

std::string format_of(const char* format, const std::string& path) {
  if (format && *format) return format;
  std::string ext = fs::path(path).extension().string();
  return ext.empty() ? "" : ext.substr(1);
}

hodu_status load_file(const char* path, const char* format, hodu_model** out) {
  return guarded([&] {
    HODU_CHECK(path && out, ErrorCode::InvalidArgument, "load_file: null argument");
    *out = nullptr;
    std::string f = format_of(format, path);
    if (f == "so") *out = prepare(native::describe_library(path)).release();
    else if (f == "hdss") *out = prepare(read_hdss_file(path)).release();
    else fail(ErrorCode::Unsupported, "{}: cannot load '{}' files (loads: so, hdss)", path, f);
  });
}

hodu_status load(const void* bytes, size_t size, const char* format, hodu_model** out) {
  return guarded([&] {
    HODU_CHECK(bytes && out, ErrorCode::InvalidArgument, "load: null argument");
    *out = nullptr;
    std::string f = format ? format : "";
    std::string_view data(static_cast<const char*>(bytes), size);
    if (f == "hdss") {
      *out = prepare(read_hdss(data, "<model from hodu>")).release();
      return;
    }
    HODU_CHECK(f == "so", ErrorCode::Unsupported, "cannot load '{}' artifacts (loads: so, hdss)", f);
    // dlopen needs a file: a scratch copy, removed once loaded (the mapping stays).
    std::string path = (fs::temp_directory_path() / "hodu-runtime-native-XXXXXX.so").string();
    int fd = mkstemps(path.data(), 3);
    HODU_CHECK(fd >= 0, ErrorCode::Io, "cannot create a scratch file");
    bool written = ::write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size());
    ::close(fd);
    struct Cleanup {
      std::string p;
      ~Cleanup() { ::unlink(p.c_str()); }
    } cleanup{path};
    HODU_CHECK(written, ErrorCode::Io, "cannot write {}", path);
    *out = prepare(native::describe_library(path)).release();
  });
}

hodu_status run(hodu_model* m, const DLTensor* inputs, int32_t n_in, DLManagedTensor** outputs, int32_t n_out) {
  return guarded([&] {
    HODU_CHECK(m && (n_in == 0 || inputs) && (n_out == 0 || outputs), ErrorCode::InvalidArgument, "run: null argument");
    HODU_CHECK(n_in == static_cast<int32_t>(m->io.inputs.size()) && n_out == static_cast<int32_t>(m->io.outputs.size()),
               ErrorCode::InvalidArgument, "expected {} inputs and {} outputs, got {} and {}", m->io.inputs.size(),
               m->io.outputs.size(), n_in, n_out);
    std::map<std::string, RuntimeValue> feeds;
    for (int32_t i = 0; i < n_in; ++i) {
      std::string name = m->io.inputs[i]->info().name;
      feeds.emplace(name, RuntimeValue(tensor_from_dl(inputs[i], [] {}, "input '" + name + "'")));
    }
    auto results = m->executable->run(feeds);
    HODU_CHECK(static_cast<int32_t>(results.size()) == n_out, ErrorCode::Internal, "{} outputs, expected {}",
               results.size(), n_out);
    std::vector<DLManagedTensor*> made;
    try {
      for (int32_t i = 0; i < n_out; ++i) made.push_back(to_managed(results[i].tensor, m->io.outputs[i]->info().name));
    } catch (...) {
      for (auto* t : made) t->deleter(t);
      throw;
    }
    for (int32_t i = 0; i < n_out; ++i) outputs[i] = made[i];
  });
}

const char* const kDevices[] = {"cpu", nullptr};
const char* const kFormats[] = {"so", "hdss", nullptr};

const hodu_plugin_info kInfo = {
    .name = "hodu-runtime-native",
    .version = HODU_VERSION,
    .kinds = HODU_PLUGIN_RUNTIME,
    .description = "runs shared libraries built by hodu build / hodu-compiler-c (hdss models are compiled first)",
    .devices = kDevices,
    .output_formats = nullptr,
    .loadable_formats = kFormats,
    .pack = "c",
};

const hodu_runtime_api kRuntime = {
    .load = load,
    .load_file = load_file,
    .num_inputs = [](const hodu_model* m) { return m ? static_cast<int32_t>(m->io.inputs.size()) : 0; },
    .num_outputs = [](const hodu_model* m) { return m ? static_cast<int32_t>(m->io.outputs.size()) : 0; },
    .input_info = [](const hodu_model* m, int32_t i, hodu_tensor_info* info) {
      return m ? tensor_info_at(m->io.inputs, i, info) : set_thread_error(HODU_ERR_INVALID_ARGUMENT, "null model");
    },
    .output_info = [](const hodu_model* m, int32_t i, hodu_tensor_info* info) {
      return m ? tensor_info_at(m->io.outputs, i, info) : set_thread_error(HODU_ERR_INVALID_ARGUMENT, "null model");
    },
    .run = run,
    .unload = [](hodu_model* m) { delete m; },
};

const hodu_plugin kPlugin = {
    .abi_version = HODU_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(hodu_plugin),
    .info = &kInfo,
    .compiler = nullptr,
    .runtime = &kRuntime,
    .last_error = thread_last_error,
};

}  // namespace

extern "C" uint32_t hodu_plugin_abi_version(void) { return HODU_PLUGIN_ABI_VERSION; }
extern "C" const hodu_plugin* hodu_plugin_entry(const hodu_host_api*) { return &kPlugin; }
