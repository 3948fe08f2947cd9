#include "plugins/plugin.h"

#include <dlfcn.h>

#include <filesystem>
#include <fstream>
#include <utility>

#include "core/error.h"
#include "plugins/host_api.h"
#include "plugins/plugin_status.h"

namespace hodu::plugins {
namespace {

std::vector<std::string> string_list(const char* const* list) {
  std::vector<std::string> out;
  for (; list && *list; ++list) out.emplace_back(*list);
  return out;
}

// dlopen's own message for a non-library file is cryptic ("invalid ELF header");
// say what the file is first.
bool looks_like_elf(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char magic[4] = {};
  f.read(magic, 4);
  return f.gcount() == 4 && magic[0] == 0x7f && magic[1] == 'E' && magic[2] == 'L' && magic[3] == 'F';
}

struct OutputSlots {
  std::vector<DLManagedTensor*> slots;
  ~OutputSlots() {  // anything not handed to the caller (a failed run) is released
    for (auto* m : slots)
      if (m && m->deleter) m->deleter(m);
  }
};

}  // namespace

const char* plugin_kind_name(PluginKind kind) { return kind == PluginKind::Compiler ? "compiler" : "runtime"; }

bool PluginInfo::supports(const Device& device) const {
  std::string exact = device.to_string();
  const char* kind = device.kind == Device::Kind::CPU ? "cpu" : "cuda";
  for (const auto& d : devices)
    if (d == exact || d == kind) return true;
  return false;
}

std::string PluginInfo::kinds_string() const {
  if (is(PluginKind::Compiler) && is(PluginKind::Runtime)) return "compiler+runtime";
  return is(PluginKind::Compiler) ? "compiler" : "runtime";
}

std::shared_ptr<Plugin> Plugin::builtin(PluginInfo info) {
  auto p = std::shared_ptr<Plugin>(new Plugin());
  info.path.clear();
  p->info_ = std::move(info);
  return p;
}

std::shared_ptr<Plugin> Plugin::open(const std::string& path) {
  namespace fs = std::filesystem;
  HODU_CHECK(fs::is_regular_file(path), ErrorCode::InvalidArgument, "{}: no such plugin file", path);
  HODU_CHECK(looks_like_elf(path), ErrorCode::InvalidArgument, "{}: not a shared library", path);
  auto p = std::shared_ptr<Plugin>(new Plugin());
  std::string abs = fs::absolute(path).lexically_normal().string();
  p->info_.path = abs;
  // RTLD_LOCAL: two plugins may carry the same internal symbols (both link libhodu).
  p->handle_ = dlopen(abs.c_str(), RTLD_NOW | RTLD_LOCAL);
  HODU_CHECK(p->handle_, ErrorCode::InvalidArgument, "{}: cannot load: {}", path, dlerror());
  auto version_fn = reinterpret_cast<hodu_plugin_abi_version_fn>(dlsym(p->handle_, HODU_PLUGIN_ABI_VERSION_SYMBOL));
  HODU_CHECK(version_fn, ErrorCode::InvalidArgument, "{}: not a hodu plugin (missing symbol {})", path,
             HODU_PLUGIN_ABI_VERSION_SYMBOL);
  uint32_t version = version_fn();
  HODU_CHECK(version == HODU_PLUGIN_ABI_VERSION, ErrorCode::Unsupported,
             "{}: built for plugin ABI version {}, this hodu speaks version {} (rebuild the plugin)", path, version,
             HODU_PLUGIN_ABI_VERSION);
  auto entry = reinterpret_cast<hodu_plugin_entry_fn>(dlsym(p->handle_, HODU_PLUGIN_ENTRY_SYMBOL));
  HODU_CHECK(entry, ErrorCode::InvalidArgument, "{}: not a hodu plugin (missing symbol {})", path,
             HODU_PLUGIN_ENTRY_SYMBOL);
  const hodu_plugin* t = entry(host_api());
  HODU_CHECK(t, ErrorCode::InvalidArgument, "{}: {} returned no table", path, HODU_PLUGIN_ENTRY_SYMBOL);
  HODU_CHECK(t->abi_version == HODU_PLUGIN_ABI_VERSION && t->struct_size >= sizeof(hodu_plugin),
             ErrorCode::Unsupported, "{}: table is for ABI version {} (size {}), expected version {} (size {})", path,
             t->abi_version, t->struct_size, HODU_PLUGIN_ABI_VERSION, sizeof(hodu_plugin));
  HODU_CHECK(t->info && t->info->name && *t->info->name && t->last_error, ErrorCode::InvalidArgument,
             "{}: plugin table lacks a name or last_error", path);
  const hodu_plugin_info& i = *t->info;
  uint32_t kinds = i.kinds;
  HODU_CHECK(kinds != 0 && (kinds & ~(HODU_PLUGIN_COMPILER | HODU_PLUGIN_RUNTIME)) == 0, ErrorCode::InvalidArgument,
             "{}: plugin '{}' declares unknown kinds {:#x}", path, i.name, kinds);
  if (kinds & HODU_PLUGIN_COMPILER) {
    const auto* c = t->compiler;
    HODU_CHECK(c && c->compile && c->build && c->free_buffer, ErrorCode::InvalidArgument,
               "{}: compiler plugin '{}' lacks compile, build or free_buffer", path, i.name);
  }
  if (kinds & HODU_PLUGIN_RUNTIME) {
    const auto* r = t->runtime;
    HODU_CHECK(r && r->load && r->load_file && r->num_inputs && r->num_outputs && r->input_info && r->output_info &&
                   r->run && r->unload,
               ErrorCode::InvalidArgument, "{}: runtime plugin '{}' lacks one of its functions", path, i.name);
  }
  p->table_ = t;
  p->info_.name = i.name;
  p->info_.version = i.version ? i.version : "";
  p->info_.description = i.description ? i.description : "";
  p->info_.pack = i.pack ? i.pack : "";
  p->info_.kinds = kinds;
  p->info_.devices = string_list(i.devices);
  p->info_.output_formats = string_list(i.output_formats);
  p->info_.loadable_formats = string_list(i.loadable_formats);
  return p;
}

Plugin::~Plugin() {
  if (handle_) dlclose(handle_);
}

void Plugin::check(hodu_status status, std::string_view call) const {
  if (status == HODU_OK) return;
  const char* message = table_ && table_->last_error ? table_->last_error() : nullptr;
  throw Error(to_error_code(status), fmt::format("plugin '{}' ({}): {}", info_.name, call,
                                                 message && *message ? message : "failed without a message"));
}

const hodu_compiler_api& Plugin::compiler() const {
  HODU_CHECK(table_ && table_->compiler, ErrorCode::InvalidArgument, "plugin '{}' is not a compiler", info_.name);
  return *table_->compiler;
}

const hodu_runtime_api& Plugin::runtime() const {
  HODU_CHECK(table_ && table_->runtime, ErrorCode::InvalidArgument, "plugin '{}' is not a runtime plugin", info_.name);
  return *table_->runtime;
}

namespace {
struct CBuildOptions {
  std::vector<const char*> options, shapes;
  hodu_build_options c{};
  explicit CBuildOptions(const BuildRequest& r) {
    for (const auto& o : r.options) options.push_back(o.c_str());
    options.push_back(nullptr);
    for (const auto& s : r.input_shapes) shapes.push_back(s.c_str());
    shapes.push_back(nullptr);
    c.input_shapes = shapes.data();
    c.format = r.format.empty() ? nullptr : r.format.c_str();
    c.target = r.target.c_str();
    c.opt_level = r.opt_level;
    c.name = r.name.c_str();
    c.options = options.data();
  }
};
}  // namespace

std::string Plugin::compile(std::string_view hdss, const BuildRequest& request) const {
  const auto& api = compiler();
  CBuildOptions o(request);
  hodu_buffer buffer{};
  check(api.compile(hdss.data(), hdss.size(), &o.c, &buffer), "compile");
  std::string out(static_cast<const char*>(buffer.data), buffer.size);
  api.free_buffer(&buffer);
  return out;
}

void Plugin::build(std::string_view hdss, const BuildRequest& request, const std::string& out_path) const {
  CBuildOptions o(request);
  check(compiler().build(hdss.data(), hdss.size(), &o.c, out_path.c_str()), "build");
}

std::unique_ptr<LoadedModel> Plugin::load(std::string_view bytes, const std::string& format) const {
  hodu_model* m = nullptr;
  check(runtime().load(bytes.data(), bytes.size(), format.c_str(), &m), "load");
  HODU_CHECK(m, ErrorCode::Internal, "plugin '{}': load returned no model", info_.name);
  return std::make_unique<LoadedModel>(shared_from_this(), m);
}

std::unique_ptr<LoadedModel> Plugin::load_file(const std::string& path, const std::string& format) const {
  hodu_model* m = nullptr;
  check(runtime().load_file(path.c_str(), format.empty() ? nullptr : format.c_str(), &m), "load_file");
  HODU_CHECK(m, ErrorCode::Internal, "plugin '{}': load_file returned no model", info_.name);
  return std::make_unique<LoadedModel>(shared_from_this(), m);
}

LoadedModel::~LoadedModel() { plugin_->table()->runtime->unload(model_); }

int LoadedModel::num_inputs() const { return plugin_->table()->runtime->num_inputs(model_); }
int LoadedModel::num_outputs() const { return plugin_->table()->runtime->num_outputs(model_); }

hodu_tensor_info LoadedModel::input_info(int i) const {
  hodu_tensor_info info{};
  plugin_->check(plugin_->table()->runtime->input_info(model_, i, &info), "input_info");
  return info;
}

hodu_tensor_info LoadedModel::output_info(int i) const {
  hodu_tensor_info info{};
  plugin_->check(plugin_->table()->runtime->output_info(model_, i, &info), "output_info");
  return info;
}

std::vector<DLManagedTensor*> LoadedModel::run(const std::vector<DLTensor>& inputs) {
  OutputSlots out;
  out.slots.assign(static_cast<size_t>(std::max(num_outputs(), 0)), nullptr);
  plugin_->check(plugin_->table()->runtime->run(model_, inputs.data(), static_cast<int32_t>(inputs.size()),
                                                out.slots.data(), static_cast<int32_t>(out.slots.size())),
                 "run");
  for (size_t i = 0; i < out.slots.size(); ++i)
    HODU_CHECK(out.slots[i], ErrorCode::Internal, "plugin '{}': run left output {} empty", plugin_->name(), i);
  return std::exchange(out.slots, {});
}

}  // namespace hodu::plugins
