// libhodu-compiler-c.so: hodu's C code generator and toolchain driver
// (src/compilers/c) behind the plugin ABI. With libhodu-runtime-native.so it
// forms the "c" pack: `hodu run --pack c` builds a .so and runs it.
#include <hodu/plugin.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "compilers/c/toolchain.h"
#include "formats/model_io.h"
#include "plugins/plugin_status.h"
#include "core/scratch_dir.h"

using namespace hodu;
using namespace hodu::plugins;

namespace {

std::vector<int64_t> parse_numbers(const std::string& text, const std::string& what) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, 'x')) {
    char* end = nullptr;
    long long v = std::strtoll(part.c_str(), &end, 10);
    HODU_CHECK(!part.empty() && *end == '\0' && v >= 0, ErrorCode::InvalidArgument, "{}: '{}' is not like 1x3x224x224",
               what, text);
    out.push_back(v);
  }
  return out;
}

// Plugin options: standalone=0|1, weights=embed|file, dim.NAME=V (input shapes come in input_shapes).
compilers::c::BuildOptions build_options(const hodu_build_options* o, const std::string& out_path) {
  compilers::c::BuildOptions b;
  HODU_CHECK(o, ErrorCode::InvalidArgument, "no build options");
  b.format = compilers::c::artifact_format(out_path, o->format ? o->format : "");
  b.target = o->target ? o->target : "";
  HODU_CHECK(o->opt_level >= 0 && o->opt_level <= 3, ErrorCode::InvalidArgument, "opt_level {}: expected 0..3",
             o->opt_level);
  b.codegen.opt_level = o->opt_level;
  if (o->name && *o->name) b.codegen.name = o->name;
  for (const char* const* p = o->input_shapes; p && *p; ++p) {
    std::string s = *p;
    auto eq = s.rfind('=');
    HODU_CHECK(eq != std::string::npos && eq > 0, ErrorCode::InvalidArgument, "input shape '{}': expected NAME=1x3x224x224",
               s);
    b.codegen.input_shapes[s.substr(0, eq)] = parse_numbers(s.substr(eq + 1), s);
  }
  for (const char* const* p = o->options; p && *p; ++p) {
    std::string kv = *p;
    auto eq = kv.find('=');
    HODU_CHECK(eq != std::string::npos, ErrorCode::InvalidArgument, "option '{}': expected key=value", kv);
    std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
    if (key == "standalone") b.codegen.standalone = value == "1" || value == "true";
    else if (key == "weights") {
      HODU_CHECK(value == "embed" || value == "file", ErrorCode::InvalidArgument, "weights={}: expected embed or file",
                 value);
      b.codegen.embed_weights = value == "embed";
    } else if (key.starts_with("dim.")) {
      auto v = parse_numbers(value, kv);
      HODU_CHECK(v.size() == 1, ErrorCode::InvalidArgument, "{}: expected one number", kv);
      b.codegen.dims[key.substr(4)] = v[0];
    } else {
      fail(ErrorCode::InvalidArgument, "unknown option '{}' (known: standalone, weights, dim.NAME)", key);
    }
  }
  return b;
}

Model read_model(const void* bytes, size_t size) {
  HODU_CHECK(bytes, ErrorCode::InvalidArgument, "no model bytes");
  return read_hdss(std::string_view(static_cast<const char*>(bytes), size), "<model from hodu>");
}

hodu_status build(const void* model, size_t size, const hodu_build_options* options, const char* out_path) {
  return guarded([&] {
    HODU_CHECK(out_path && *out_path, ErrorCode::InvalidArgument, "no output path");
    compilers::c::build_model(read_model(model, size), out_path, build_options(options, out_path));
  });
}

hodu_status compile(const void* model, size_t size, const hodu_build_options* options, hodu_buffer* artifact) {
  return guarded([&] {
    HODU_CHECK(artifact, ErrorCode::InvalidArgument, "no artifact buffer");
    *artifact = {};
    ScratchDir scratch("hodu-compiler-c-");
    std::string format = options && options->format ? options->format : "so";
    std::string out = (scratch.path() / ("model." + format)).string();
    compilers::c::build_model(read_model(model, size), out, build_options(options, out));
    std::ifstream f(out, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    void* data = std::malloc(bytes.size() ? bytes.size() : 1);
    HODU_CHECK(data, ErrorCode::OutOfMemory, "cannot allocate {} bytes", bytes.size());
    std::memcpy(data, bytes.data(), bytes.size());
    *artifact = {data, bytes.size()};
  });
}

const char* const kDevices[] = {"cpu", nullptr};
const char* const kFormats[] = {"so", "o", "a", "c", "exe", "s", "ll", "bc", nullptr};

const hodu_plugin_info kInfo = {
    .name = "hodu-compiler-c",
    .version = HODU_VERSION,
    .kinds = HODU_PLUGIN_COMPILER,
    .description = "hodu's C code generator + cc/clang: .so .o .a .c executables .s .ll .bc",
    .devices = kDevices,
    .output_formats = kFormats,
    .loadable_formats = nullptr,
    .pack = "c",
};

const hodu_compiler_api kCompiler = {
    .compile = compile,
    .build = build,
    .free_buffer = [](hodu_buffer* b) {
      if (!b) return;
      std::free(b->data);
      *b = {};
    },
};

const hodu_plugin kPlugin = {
    .abi_version = HODU_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(hodu_plugin),
    .info = &kInfo,
    .compiler = &kCompiler,
    .runtime = nullptr,
    .last_error = thread_last_error,
};

}  // namespace

extern "C" uint32_t hodu_plugin_abi_version(void) { return HODU_PLUGIN_ABI_VERSION; }
extern "C" const hodu_plugin* hodu_plugin_entry(const hodu_host_api*) { return &kPlugin; }
