/* hodu plugin ABI: compilers and runtimes in shared libraries that hodu loads
 * at run time (docs/plugins.md). Pure C (C99 and C++), stable across hodu
 * releases with the same HODU_PLUGIN_ABI_VERSION.
 *
 * A plugin exports exactly two symbols:
 *
 *   uint32_t hodu_plugin_abi_version(void);               // HODU_PLUGIN_ABI_VERSION
 *   const hodu_plugin* hodu_plugin_entry(const hodu_host_api* host);
 *
 * hodu calls hodu_plugin_abi_version() first and refuses a plugin built for a
 * different version before touching anything else; then hodu_plugin_entry()
 * once, and uses the returned table until it unloads the library.
 *
 * Models cross the boundary as .hdss bytes (hodu's own model format,
 * docs/hdss.md); a plugin that does not parse .hdss itself reads the graph
 * through the host table (hodu_host_api) it receives at entry. Tensors cross
 * as DLPack (dlpack/dlpack.h).
 *
 * Ownership, in one rule: whoever allocates frees, through its own table.
 *   - Memory the plugin returns (hodu_buffer, hodu_model, output
 *     DLManagedTensors) is released by the matching plugin call (free_buffer,
 *     unload, DLManagedTensor::deleter), never by free().
 *   - Pointers hodu passes in (model bytes, options, input DLTensors, paths)
 *     are borrowed for the duration of the call only; copy what you keep.
 *   - Strings and arrays in a plugin's tables (hodu_plugin_info,
 *     hodu_tensor_info) are owned by the plugin and stay valid until the
 *     library is unloaded (info) or the model is unloaded (tensor info).
 *   - Strings returned by last_error() are owned by the callee and valid on
 *     the calling thread until that thread's next call into the same table.
 *
 * Threads: every function may be called from any thread. hodu never runs the
 * same hodu_model from two threads at once; different models may run at the
 * same time, so keep per-model state in the model and the error message in
 * thread-local storage.
 */
#ifndef HODU_PLUGIN_H
#define HODU_PLUGIN_H

#include <dlpack/dlpack.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on any incompatible change of the tables below. */
#define HODU_PLUGIN_ABI_VERSION 1

#define HODU_PLUGIN_ABI_VERSION_SYMBOL "hodu_plugin_abi_version"
#define HODU_PLUGIN_ENTRY_SYMBOL "hodu_plugin_entry"

#if defined(__GNUC__)
#define HODU_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define HODU_PLUGIN_EXPORT
#endif

/* Status codes. The categories are hodu::ErrorCode's, in the same order. */
typedef enum hodu_status {
  HODU_OK = 0,
  HODU_ERR_INVALID_MODEL = 1,    /* the model bytes or graph are malformed */
  HODU_ERR_INVALID_ARGUMENT = 2, /* wrong inputs, options, paths */
  HODU_ERR_UNSUPPORTED = 3,      /* valid, but this plugin cannot do it (op, dtype, format) */
  HODU_ERR_OUT_OF_MEMORY = 4,
  HODU_ERR_DEVICE = 5,
  HODU_ERR_IO = 6,
  HODU_ERR_INTERNAL = 7
} hodu_status;

/* Kinds, a bit mask: one library may be both (a "pack" in one file). */
#define HODU_PLUGIN_COMPILER 1u
#define HODU_PLUGIN_RUNTIME 2u

typedef struct hodu_plugin_info {
  const char* name;        /* unique among plugins of the same kind: "c", "native" */
  const char* version;     /* the plugin's own version: "0.1.0" */
  uint32_t kinds;          /* HODU_PLUGIN_COMPILER | HODU_PLUGIN_RUNTIME */
  const char* description; /* one line */
  /* NULL-terminated lists, or NULL for none. Devices: "cpu", "cuda". */
  const char* const* devices;
  const char* const* output_formats;   /* compiler: what build/compile write: "so", "c", "o" */
  const char* const* loadable_formats; /* runtime: what load accepts: "hdss", "so" */
  /* The pack this plugin belongs to (`hodu run --pack NAME` pairs the compiler
   * and the runtime of one pack), or NULL. */
  const char* pack;
} hodu_plugin_info;

/* Bytes allocated by a plugin; released with that plugin's free_buffer. */
typedef struct hodu_buffer {
  void* data;
  size_t size;
} hodu_buffer;

typedef struct hodu_build_options {
  const char* format;  /* one of output_formats; NULL = the first */
  const char* target;  /* GNU triple ("aarch64-linux-gnu"); NULL or "" = the host */
  int32_t opt_level;   /* 0..3 */
  const char* name;    /* symbol prefix of generated code; NULL = "model" */
  /* Shapes of inputs with symbolic dims, "NAME=1x3x224x224", NULL-terminated;
   * NULL for none. hodu sets them when it compiles for the shapes of a run. */
  const char* const* input_shapes;
  /* Plugin-specific "key=value" strings, NULL-terminated; NULL for none. A
   * plugin refuses keys it does not know with HODU_ERR_INVALID_ARGUMENT. */
  const char* const* options;
} hodu_build_options;

typedef struct hodu_compiler_api {
  /* .hdss bytes → an artifact in memory (*artifact filled by the plugin,
   * released with free_buffer). */
  hodu_status (*compile)(const void* model, size_t model_size, const hodu_build_options* options,
                         hodu_buffer* artifact);
  /* .hdss bytes → a file at out_path (and any companion files beside it,
   * e.g. a header). */
  hodu_status (*build)(const void* model, size_t model_size, const hodu_build_options* options,
                       const char* out_path);
  void (*free_buffer)(hodu_buffer* buffer); /* NULL-safe; clears *buffer */
} hodu_compiler_api;

/* A loaded model; opaque, owned by the runtime plugin until unload. */
typedef struct hodu_model hodu_model;

/* An input or output. Every pointer is owned by whoever filled the struct and
 * valid until the model (or graph) it describes is released. */
typedef struct hodu_tensor_info {
  const char* name;
  DLDataType dtype;
  int32_t ndim;                /* -1: rank unknown */
  const int64_t* shape;        /* ndim entries; -1 where the dim is not a number */
  const char* const* dim_names; /* ndim entries, NULL where the dim is a number; or NULL when none is symbolic */
} hodu_tensor_info;

typedef struct hodu_runtime_api {
  /* An artifact from memory: `format` is one of loadable_formats ("hdss"
   * for model bytes). The plugin copies what it needs from `bytes`. */
  hodu_status (*load)(const void* bytes, size_t size, const char* format, hodu_model** model);
  /* An artifact from a file; format NULL = from the file's extension. */
  hodu_status (*load_file)(const char* path, const char* format, hodu_model** model);
  int32_t (*num_inputs)(const hodu_model* model);
  int32_t (*num_outputs)(const hodu_model* model);
  hodu_status (*input_info)(const hodu_model* model, int32_t index, hodu_tensor_info* info);
  hodu_status (*output_info)(const hodu_model* model, int32_t index, hodu_tensor_info* info);
  /* Runs once. `inputs`: num_inputs() tensors in input order, on a device
   * the plugin listed, borrowed for the call (strides NULL = compact
   * row-major). `outputs`: num_outputs() slots the plugin fills with tensors
   * it allocates; hodu calls each one's deleter when done. On failure the
   * plugin leaves every slot NULL. */
  hodu_status (*run)(hodu_model* model, const DLTensor* inputs, int32_t num_inputs, DLManagedTensor** outputs,
                     int32_t num_outputs);
  void (*unload)(hodu_model* model); /* NULL-safe */
} hodu_runtime_api;

/* What hodu_plugin_entry returns; owned by the plugin, static in practice. */
typedef struct hodu_plugin {
  uint32_t abi_version; /* HODU_PLUGIN_ABI_VERSION the plugin was built against */
  uint32_t struct_size; /* sizeof(hodu_plugin) */
  const hodu_plugin_info* info;
  const hodu_compiler_api* compiler; /* non-NULL iff kinds has HODU_PLUGIN_COMPILER */
  const hodu_runtime_api* runtime;   /* non-NULL iff kinds has HODU_PLUGIN_RUNTIME */
  /* The message of this thread's last failed call into this plugin. */
  const char* (*last_error)(void);
} hodu_plugin;

/* ---- What hodu offers plugins: read a model's graph without parsing .hdss ---- */

/* A parsed model; opaque, owned by hodu until graph_free. */
typedef struct hodu_graph hodu_graph;

typedef struct hodu_host_api {
  uint32_t abi_version; /* HODU_PLUGIN_ABI_VERSION of the host */
  uint32_t struct_size; /* sizeof(hodu_host_api) */
  const char* host_version; /* "0.1.0" */
  /* .hdss bytes → graph (bytes are copied). */
  hodu_status (*graph_parse)(const void* hdss, size_t size, hodu_graph** graph);
  void (*graph_free)(hodu_graph* graph); /* NULL-safe */
  /* Inputs the caller feeds (initializers excluded) and outputs. */
  int32_t (*graph_num_inputs)(const hodu_graph* graph);
  int32_t (*graph_num_outputs)(const hodu_graph* graph);
  hodu_status (*graph_input)(const hodu_graph* graph, int32_t index, hodu_tensor_info* info);
  hodu_status (*graph_output)(const hodu_graph* graph, int32_t index, hodu_tensor_info* info);
  /* Nodes in topological order. Strings are owned by the graph; "" names an
   * omitted optional input; domain "" is ai.onnx. NULL for a bad index. */
  int32_t (*graph_num_nodes)(const hodu_graph* graph);
  const char* (*node_op)(const hodu_graph* graph, int32_t node);
  const char* (*node_domain)(const hodu_graph* graph, int32_t node);
  int32_t (*node_num_inputs)(const hodu_graph* graph, int32_t node);
  const char* (*node_input)(const hodu_graph* graph, int32_t node, int32_t index);
  int32_t (*node_num_outputs)(const hodu_graph* graph, int32_t node);
  const char* (*node_output)(const hodu_graph* graph, int32_t node, int32_t index);
  /* An int / float attribute; HODU_ERR_INVALID_ARGUMENT when absent. */
  hodu_status (*node_attribute_int)(const hodu_graph* graph, int32_t node, const char* name, int64_t* value);
  hodu_status (*node_attribute_float)(const hodu_graph* graph, int32_t node, const char* name, float* value);
  /* A constant tensor by value name: a view into the graph's memory (compact,
   * CPU), valid until graph_free. HODU_ERR_INVALID_ARGUMENT when not a constant. */
  hodu_status (*graph_constant)(const hodu_graph* graph, const char* name, DLTensor* tensor);
  /* The message of this thread's last failed host call. */
  const char* (*last_error)(void);
} hodu_host_api;

/* The two exports of every plugin (define them in your plugin). `host` is
 * valid until the library is unloaded. */
HODU_PLUGIN_EXPORT uint32_t hodu_plugin_abi_version(void);
HODU_PLUGIN_EXPORT const hodu_plugin* hodu_plugin_entry(const hodu_host_api* host);

typedef uint32_t (*hodu_plugin_abi_version_fn)(void);
typedef const hodu_plugin* (*hodu_plugin_entry_fn)(const hodu_host_api* host);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* HODU_PLUGIN_H */
