/* An out-of-tree hodu runtime plugin: runs models whose graph is made of
 * elementwise float32 ops (Add, Sub, Mul, Div, Relu, Neg, Identity), with
 * numpy broadcasting.
 *
 * It is built against the installed header alone (find_package(hodu)) and
 * reads the graph through the host table hodu passes at entry, so it needs
 * no hodu library. See docs/plugins.md, "Writing a plugin". */
#include <hodu/plugin.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const hodu_host_api* host;

/* ---- errors: one message per thread, returned by last_error ---- */
static _Thread_local char error_message[512];

static hodu_status fail(hodu_status status, const char* format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(error_message, sizeof error_message, format, args);
  va_end(args);
  return status;
}

static const char* last_error(void) { return error_message; }

/* ---- the model: the parsed graph plus what run needs ---- */
enum op { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_RELU, OP_NEG, OP_IDENTITY };

struct step {
  enum op op;
  const char* a; /* input names (owned by the graph) */
  const char* b; /* NULL for unary ops */
  const char* out;
};

struct hodu_model {
  hodu_graph* graph;
  int num_steps;
  struct step* steps;
};

/* A named float buffer of one run. */
struct value {
  const char* name;
  float* data;
  int64_t* shape;
  int32_t ndim;
  int64_t count;
  int owned; /* data and shape were malloc'ed by this run */
};

static int parse_op(const char* name, enum op* op) {
  static const struct { const char* name; enum op op; } ops[] = {
      {"Add", OP_ADD}, {"Sub", OP_SUB}, {"Mul", OP_MUL}, {"Div", OP_DIV},
      {"Relu", OP_RELU}, {"Neg", OP_NEG}, {"Identity", OP_IDENTITY}};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; ++i)
    if (strcmp(ops[i].name, name) == 0) { *op = ops[i].op; return 1; }
  return 0;
}

static int is_f32(DLDataType t) { return t.code == kDLFloat && t.bits == 32 && t.lanes == 1; }

static void unload(hodu_model* m) {
  if (!m) return;
  host->graph_free(m->graph);
  free(m->steps);
  free(m);
}

static hodu_status load(const void* bytes, size_t size, const char* format, hodu_model** out) {
  if (!bytes || !out) return fail(HODU_ERR_INVALID_ARGUMENT, "elementwise: null argument");
  *out = NULL;
  if (format && *format && strcmp(format, "hdss") != 0)
    return fail(HODU_ERR_UNSUPPORTED, "elementwise: cannot load '%s' artifacts, only hdss models", format);
  hodu_model* m = calloc(1, sizeof *m);
  if (!m) return fail(HODU_ERR_OUT_OF_MEMORY, "elementwise: out of memory");
  if (host->graph_parse(bytes, size, &m->graph) != HODU_OK) {
    hodu_status s = fail(HODU_ERR_INVALID_MODEL, "elementwise: %s", host->last_error());
    unload(m);
    return s;
  }
  m->num_steps = host->graph_num_nodes(m->graph);
  m->steps = calloc(m->num_steps ? m->num_steps : 1, sizeof *m->steps);
  for (int32_t i = 0; i < host->graph_num_inputs(m->graph); ++i) {
    hodu_tensor_info info;
    host->graph_input(m->graph, i, &info);
    if (!is_f32(info.dtype)) {
      unload(m);
      return fail(HODU_ERR_UNSUPPORTED, "elementwise: input '%s' is not float32", info.name);
    }
  }
  for (int32_t n = 0; n < m->num_steps; ++n) {
    struct step* s = &m->steps[n];
    const char* op = host->node_op(m->graph, n);
    int arity = host->node_num_inputs(m->graph, n);
    if (*host->node_domain(m->graph, n) || !parse_op(op, &s->op) ||
        arity != (s->op <= OP_DIV ? 2 : 1) || host->node_num_outputs(m->graph, n) != 1) {
      hodu_status st = fail(HODU_ERR_UNSUPPORTED,
                            "elementwise: node %d (%s) is not supported; this plugin runs "
                            "Add, Sub, Mul, Div, Relu, Neg and Identity", n, op);
      unload(m);
      return st;
    }
    s->a = host->node_input(m->graph, n, 0);
    s->b = arity == 2 ? host->node_input(m->graph, n, 1) : NULL;
    s->out = host->node_output(m->graph, n, 0);
  }
  *out = m;
  return HODU_OK;
}

static hodu_status load_file(const char* path, const char* format, hodu_model** out) {
  FILE* f = path ? fopen(path, "rb") : NULL;
  if (!f) return fail(HODU_ERR_IO, "elementwise: cannot open %s", path ? path : "(null)");
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  void* bytes = malloc(size > 0 ? (size_t)size : 1);
  size_t got = bytes ? fread(bytes, 1, (size_t)size, f) : 0;
  fclose(f);
  if (!bytes || got != (size_t)size) {
    free(bytes);
    return fail(HODU_ERR_IO, "elementwise: cannot read %s", path);
  }
  hodu_status s = load(bytes, (size_t)size, format ? format : "hdss", out);
  free(bytes);
  return s;
}

static int32_t num_inputs(const hodu_model* m) { return host->graph_num_inputs(m->graph); }
static int32_t num_outputs(const hodu_model* m) { return host->graph_num_outputs(m->graph); }

static hodu_status input_info(const hodu_model* m, int32_t i, hodu_tensor_info* info) {
  if (host->graph_input(m->graph, i, info) != HODU_OK) return fail(HODU_ERR_INVALID_ARGUMENT, "%s", host->last_error());
  return HODU_OK;
}

static hodu_status output_info(const hodu_model* m, int32_t i, hodu_tensor_info* info) {
  if (host->graph_output(m->graph, i, info) != HODU_OK) return fail(HODU_ERR_INVALID_ARGUMENT, "%s", host->last_error());
  return HODU_OK;
}

static struct value* find_value(struct value* values, int count, const char* name) {
  for (int i = count - 1; i >= 0; --i)
    if (strcmp(values[i].name, name) == 0) return &values[i];
  return NULL;
}

static void free_values(struct value* values, int count) {
  for (int i = 0; i < count; ++i)
    if (values[i].owned) { free(values[i].data); free(values[i].shape); }
  free(values);
}

static void delete_output(DLManagedTensor* t) {
  free(t->dl_tensor.data);
  free(t->dl_tensor.shape);
  free(t);
}

static float apply(enum op op, float a, float b) {
  switch (op) {
    case OP_ADD: return a + b;
    case OP_SUB: return a - b;
    case OP_MUL: return a * b;
    case OP_DIV: return a / b;
    case OP_RELU: return a > 0 ? a : 0;
    case OP_NEG: return -a;
    default: return a;
  }
}

static hodu_status run(hodu_model* m, const DLTensor* inputs, int32_t n_in, DLManagedTensor** outputs, int32_t n_out) {
  if (n_in != num_inputs(m) || n_out != num_outputs(m))
    return fail(HODU_ERR_INVALID_ARGUMENT, "elementwise: expected %d inputs and %d outputs, got %d and %d",
                num_inputs(m), num_outputs(m), n_in, n_out);
  int capacity = n_in + m->num_steps + 8, count = 0;
  struct value* values = calloc((size_t)capacity, sizeof *values);
  if (!values) return fail(HODU_ERR_OUT_OF_MEMORY, "elementwise: out of memory");
  hodu_status status = HODU_OK;
  for (int32_t i = 0; i < n_in; ++i) {
    hodu_tensor_info info;
    input_info(m, i, &info);
    if (!is_f32(inputs[i].dtype) || inputs[i].device.device_type != kDLCPU) {
      status = fail(HODU_ERR_INVALID_ARGUMENT, "elementwise: input '%s' must be a float32 CPU tensor", info.name);
      goto done;
    }
    struct value* v = &values[count++];
    v->name = info.name;
    v->data = (float*)((char*)inputs[i].data + inputs[i].byte_offset);
    v->shape = inputs[i].shape;
    v->ndim = inputs[i].ndim;
    v->count = 1;
    for (int d = 0; d < v->ndim; ++d) v->count *= v->shape[d];
  }
  for (int n = 0; n < m->num_steps; ++n) {
    const struct step* s = &m->steps[n];
    struct value operands[2];
    const char* names[2] = {s->a, s->b};
    for (int k = 0; k < (s->b ? 2 : 1); ++k) {
      struct value* v = find_value(values, count, names[k]);
      DLTensor constant;
      if (v) {
        operands[k] = *v;
      } else if (host->graph_constant(m->graph, names[k], &constant) == HODU_OK && is_f32(constant.dtype)) {
        operands[k].data = constant.data;
        operands[k].shape = constant.shape;
        operands[k].ndim = constant.ndim;
        operands[k].count = 1;
        for (int d = 0; d < constant.ndim; ++d) operands[k].count *= constant.shape[d];
      } else {
        status = fail(HODU_ERR_INVALID_MODEL, "elementwise: node %d reads '%s', which is neither an input, "
                      "a float32 constant nor an earlier output", n, names[k]);
        goto done;
      }
    }
    /* numpy broadcasting: shapes aligned on the right, dims of 1 stretch. */
    int nops = s->b ? 2 : 1;
    struct value* r = &values[count++];
    r->name = s->out;
    r->owned = 1;
    r->ndim = operands[0].ndim;
    if (nops == 2 && operands[1].ndim > r->ndim) r->ndim = operands[1].ndim;
    r->shape = malloc(sizeof(int64_t) * (size_t)(r->ndim ? r->ndim : 1));
    int64_t* strides = calloc((size_t)(2 * (r->ndim ? r->ndim : 1)), sizeof(int64_t)); /* [operand][dim], 0 = stretched */
    if (!r->shape || !strides) { free(strides); status = fail(HODU_ERR_OUT_OF_MEMORY, "elementwise: out of memory"); goto done; }
    for (int d = r->ndim - 1; d >= 0; --d) {
      int64_t size = 1;
      for (int k = 0; k < nops; ++k) {
        int od = d - (r->ndim - operands[k].ndim);
        int64_t dim = od >= 0 ? operands[k].shape[od] : 1;
        if (dim != 1 && size != 1 && dim != size) {
          free(strides);
          status = fail(HODU_ERR_INVALID_ARGUMENT, "elementwise: node %d (%s): shapes do not broadcast at dim %d",
                        n, host->node_op(m->graph, n), d);
          goto done;
        }
        if (dim != 1) size = dim;
      }
      r->shape[d] = size;
    }
    for (int k = 0; k < nops; ++k) {
      int64_t stride = 1;
      for (int d = r->ndim - 1; d >= 0; --d) {
        int od = d - (r->ndim - operands[k].ndim);
        int64_t dim = od >= 0 ? operands[k].shape[od] : 1;
        strides[k * r->ndim + d] = dim == 1 ? 0 : stride;
        stride *= dim;
      }
    }
    r->count = 1;
    for (int d = 0; d < r->ndim; ++d) r->count *= r->shape[d];
    r->data = malloc(sizeof(float) * (size_t)(r->count ? r->count : 1));
    if (!r->data) { free(strides); status = fail(HODU_ERR_OUT_OF_MEMORY, "elementwise: out of memory"); goto done; }
    for (int64_t i = 0; i < r->count; ++i) {
      int64_t offset[2] = {0, 0}, rest = i;
      for (int d = r->ndim - 1; d >= 0; --d) {
        int64_t index = rest % r->shape[d];
        rest /= r->shape[d];
        for (int k = 0; k < nops; ++k) offset[k] += index * strides[k * r->ndim + d];
      }
      r->data[i] = apply(s->op, operands[0].data[offset[0]], nops == 2 ? operands[1].data[offset[1]] : 0.0f);
    }
    free(strides);
  }
  for (int32_t i = 0; i < n_out; ++i) {
    hodu_tensor_info info;
    output_info(m, i, &info);
    struct value* v = find_value(values, count, info.name);
    DLManagedTensor* t = calloc(1, sizeof *t);
    float* data = v ? malloc(sizeof(float) * (size_t)(v->count ? v->count : 1)) : NULL;
    int64_t* shape = v ? malloc(sizeof(int64_t) * (size_t)(v->ndim ? v->ndim : 1)) : NULL;
    if (!v || !t || !data || !shape) {
      free(t); free(data); free(shape);
      status = v ? fail(HODU_ERR_OUT_OF_MEMORY, "elementwise: out of memory")
                 : fail(HODU_ERR_INVALID_MODEL, "elementwise: output '%s' is never computed", info.name);
      goto done;
    }
    memcpy(data, v->data, sizeof(float) * (size_t)v->count);
    memcpy(shape, v->shape, sizeof(int64_t) * (size_t)v->ndim);
    t->dl_tensor.data = data;
    t->dl_tensor.device.device_type = kDLCPU;
    t->dl_tensor.ndim = v->ndim;
    t->dl_tensor.dtype.code = kDLFloat;
    t->dl_tensor.dtype.bits = 32;
    t->dl_tensor.dtype.lanes = 1;
    t->dl_tensor.shape = shape;
    t->deleter = delete_output;
    outputs[i] = t;
  }
done:
  if (status != HODU_OK)  /* the contract: on failure every output slot is NULL */
    for (int32_t i = 0; i < n_out; ++i)
      if (outputs[i]) { outputs[i]->deleter(outputs[i]); outputs[i] = NULL; }
  free_values(values, count);
  return status;
}

static const char* const devices[] = {"cpu", NULL};
static const char* const formats[] = {"hdss", NULL};

static const hodu_plugin_info info = {
    "elementwise", "1.0.0", HODU_PLUGIN_RUNTIME,
    "example: float32 Add/Sub/Mul/Div/Relu/Neg/Identity graphs, in plain C",
    devices, NULL, formats, NULL};

static const hodu_runtime_api runtime = {load, load_file, num_inputs, num_outputs, input_info, output_info, run, unload};

static const hodu_plugin plugin = {HODU_PLUGIN_ABI_VERSION, sizeof(hodu_plugin), &info, NULL, &runtime, last_error};

uint32_t hodu_plugin_abi_version(void) { return HODU_PLUGIN_ABI_VERSION; }

const hodu_plugin* hodu_plugin_entry(const hodu_host_api* h) {
  host = h;
  return &plugin;
}
