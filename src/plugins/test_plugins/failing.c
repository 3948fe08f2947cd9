/* A compiler + runtime whose every call fails with its own message: hodu must
 * surface that message. Its load succeeds for format "ok" so run can fail too. */
#include <hodu/plugin.h>
#include <stdlib.h>

static _Thread_local const char* message = "";

static hodu_status fail(const char* m) {
  message = m;
  return HODU_ERR_UNSUPPORTED;
}
static const char* last_error(void) { return message; }

struct hodu_model { int unused; };

static hodu_status compile(const void* m, size_t n, const hodu_build_options* o, hodu_buffer* out) {
  (void)m; (void)n; (void)o; (void)out;
  return fail("failing: the compiler refuses this model (test)");
}
static hodu_status build(const void* m, size_t n, const hodu_build_options* o, const char* path) {
  (void)m; (void)n; (void)o; (void)path;
  return fail("failing: the compiler refuses this model (test)");
}
static void free_buffer(hodu_buffer* b) { (void)b; }

static hodu_status load(const void* bytes, size_t size, const char* format, hodu_model** out) {
  (void)bytes; (void)size;
  if (format && format[0] == 'o' && format[1] == 'k') {
    *out = calloc(1, sizeof **out);
    return HODU_OK;
  }
  return fail("failing: cannot load anything (test)");
}
static hodu_status load_file(const char* path, const char* format, hodu_model** out) {
  (void)path;
  return load(NULL, 0, format, out);
}
static int32_t num_inputs(const hodu_model* m) { (void)m; return 0; }
static int32_t num_outputs(const hodu_model* m) { (void)m; return 1; }
static hodu_status info(const hodu_model* m, int32_t i, hodu_tensor_info* out) {
  (void)m; (void)i; (void)out;
  return fail("failing: no tensor info (test)");
}
static hodu_status run(hodu_model* m, const DLTensor* in, int32_t n_in, DLManagedTensor** out, int32_t n_out) {
  (void)m; (void)in; (void)n_in; (void)out; (void)n_out;
  return fail("failing: the run exploded (test)");
}
static void unload(hodu_model* m) { free(m); }

static const char* const devices[] = {"cpu", NULL};
static const char* const formats[] = {"ok", NULL};
static const hodu_plugin_info plugin_info = {"failing", "0.0.1", HODU_PLUGIN_COMPILER | HODU_PLUGIN_RUNTIME,
                                             "fails on purpose", devices, formats, formats, NULL};
static const hodu_compiler_api compiler = {compile, build, free_buffer};
static const hodu_runtime_api runtime = {load, load_file, num_inputs, num_outputs, info, info, run, unload};
static const hodu_plugin plugin = {HODU_PLUGIN_ABI_VERSION, sizeof(hodu_plugin), &plugin_info, &compiler, &runtime,
                                   last_error};

uint32_t hodu_plugin_abi_version(void) { return HODU_PLUGIN_ABI_VERSION; }
const hodu_plugin* hodu_plugin_entry(const hodu_host_api* host) {
  (void)host;
  return &plugin;
}
