#include "compilers/c/api_emitter.h"

#include <fmt/format.h>

#include <cstring>

#include "compilers/c/codegen_context.h"
#include "core/dlpack_tensor.h"

namespace hodu::compilers::c {
namespace {

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  return s;
}

std::string upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string substitute(const std::string& text, const ApiSpec& spec) {
  return replace_all(replace_all(text, "@P@", spec.name), "@U@", upper(spec.name));
}

// DLPack dtype (code, bits) of a hodu dtype (core/dlpack_tensor: bool is code 6, 8 bits; the
// float8 and packed types DLPack 1.1's codes).
std::pair<int, int> dl_dtype(DType t) {
  DLDataType d = to_dl_dtype(t, "a model input or output");
  return {d.code, d.bits};
}

// A shape as the API reports it: a dim bound at run time is -1.
std::string ints(const SymShape& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i].known() ? v[i].value() : -1);
  return v.empty() ? "0" : s;
}

const char* kHeader = R"HODU(/* @P@.h — C API of a model compiled by `hodu build`. Plain C; link the library
 * built with it.@SHAPEDOC@
 *
 *   @P@_t* m;
 *   if (@P@_create(NULL, &m) != @U@_OK) { ... }
 *   DLTensor in[@U@_NUM_INPUTS] = ...;   (device kDLCPU, dtype and shape as below, compact)
 *   DLTensor out[@U@_NUM_OUTPUTS] = {0};  (data NULL: the library fills in its own buffers)
 *   if (@P@_run(m, in, @U@_NUM_INPUTS, out, @U@_NUM_OUTPUTS) != @U@_OK) puts(@P@_last_error(m));
 *   @P@_destroy(m);
 *
 * Instances are independent: runs on different instances may go on in
 * different threads at once; one instance runs one call at a time. The library
 * keeps no global mutable state. @P@_run does not allocate, except in an
 * instance @P@_create made, when a run with new free dims needs a larger arena
 * than the instance has, or a value's size depends on data (see below).
 */
#ifndef @U@_H_
#define @U@_H_
#include <stddef.h>
#include <stdint.h>
#include <dlpack/dlpack.h>

#ifdef __cplusplus
extern "C" {
#endif

#define @U@_ABI_VERSION @ABI@
#define @U@_NUM_INPUTS @NIN@
#define @U@_NUM_OUTPUTS @NOUT@
#define @U@_EMBEDDED_WEIGHTS @EMBED@
#define @U@_STANDALONE @STANDALONE@
#define @U@_KERNEL_LIBRARY @KLIB@  /* 1: links libhodu_kernels (oneDNN, threads) */

/* Status codes. */
#define @U@_OK 0
#define @U@_ERR_INVALID_ARGUMENT 1
#define @U@_ERR_OUT_OF_MEMORY 2
#define @U@_ERR_IO 3
#define @U@_ERR_RUNTIME 4

typedef struct @P@_instance @P@_t;

/* The ABI version the library was built with (@U@_ABI_VERSION). */
int @P@_abi_version(void);
/* Name of a status code ("ok", "invalid argument", ...). */
const char* @P@_status_string(int status);

/* Creates an instance. weights_path: the weights side file when the weights are
 * not embedded (NULL: "@WFILE@" in the current directory); ignored otherwise.
 * On failure *out is NULL and, when errbuf is given, it holds the reason. */
int @P@_create(const char* weights_path, @P@_t** out);
int @P@_create_ex(const char* weights_path, @P@_t** out, char* errbuf, size_t errbuf_size);
/* As @P@_create_ex with the number of threads a run uses (@U@_KERNEL_LIBRARY
 * builds; others run on the calling thread). num_threads <= 0: the environment's
 * HODU_NUM_THREADS, else the physical cores this process may use. */
int @P@_create_threads(const char* weights_path, int num_threads, @P@_t** out, char* errbuf, size_t errbuf_size);
/* Bytes @P@_create_in needs, and creation in caller memory (no malloc at all in
 * standalone and portable builds; the kernel library allocates its own state;
 * memory must stay valid until @P@_destroy, which must be called). */
size_t @P@_instance_size(void);
int @P@_create_in(void* memory, size_t size, const char* weights_path, @P@_t** out, char* errbuf, size_t errbuf_size);
/* Creates an instance over a weights blob already in memory, used in place (not copied): the
 * whole blob (its 64-byte "HODUWGT1" header, then the data) as `hodu build --weights file`
 * writes it and a .hodupkg's weights section holds it, 64-byte aligned, valid and unchanged
 * until @P@_destroy. Another build's blob fails with @U@_ERR_IO; a library that embeds its
 * weights (@U@_EMBEDDED_WEIGHTS 1) answers @U@_ERR_INVALID_ARGUMENT. num_threads as in
 * @P@_create_threads; flags: 0 or @U@_WEIGHTS_MAPPED. */
int @P@_create_with_weights(const void* weights, size_t weights_size, int num_threads, int flags, @P@_t** out,
                            char* errbuf, size_t errbuf_size);
/* flags of @P@_create_with_weights: the blob is a file mapped (mmap) and never written, so
 * the pages of weights the library has copied into its own layouts may be given back to the
 * kernel (they are read from the file again if needed). */
#define @U@_WEIGHTS_MAPPED 1
void @P@_destroy(@P@_t* m);

/* Sizes bound at run time: @U@_NUM_DIMS free dims, named by the model (a symbol such as
 * "batch", or "<input>_<d>" for an unnamed one).@DIMDOC@ A free dim is -1 in
 * @P@_input_shape, and so is an output dim computed from free dims (or from data) in
 * @P@_output_shape. A run takes any value >= 1 for each free dim, the same wherever it
 * appears; @P@_output(m, i)->shape is the shape of the last run's output. The first run
 * with new dims plans the arena (and prepares the kernel library's ops) for them; the
 * instance keeps the last few shapes. */
#define @U@_NUM_DIMS @NDIMS@
int @P@_num_dims(void);
const char* @P@_dim_name(int k);
/* The free dim of input i's dim d, NULL when that dim is fixed; output i's dim d, when it
 * is a free dim (an output dim computed from free dims or data has none either). */
const char* @P@_input_dim_name(int i, int d);
const char* @P@_output_dim_name(int i, int d);
/* Bytes @P@_create_in needs to run with the free dims `dims` (in @P@_dim_name order;
 * runs with other dims need at most as much as their arena); 0 when the model cannot
 * take those dims. Models without free dims: @P@_instance_size(). */
size_t @P@_workspace_size(const int64_t* dims);

/* Inputs and outputs: name, DLPack dtype, rank and shape. */
int @P@_num_inputs(void);
int @P@_num_outputs(void);
const char* @P@_input_name(int i);
const char* @P@_output_name(int i);
DLDataType @P@_input_dtype(int i);
DLDataType @P@_output_dtype(int i);
int @P@_input_ndim(int i);
int @P@_output_ndim(int i);
const int64_t* @P@_input_shape(int i);
const int64_t* @P@_output_shape(int i);

/* Runs the model. inputs: num_inputs tensors in declaration order (kDLCPU,
 * matching dtype and shape, strides NULL or compact). outputs: for each output
 * whose data is non-NULL the result is written there (dtype and shape must
 * match; the memory must not overlap the inputs; that run leaves the instance-
 * owned copy of it alone); an output with data NULL is filled with a tensor
 * owned by the instance, valid until its next run or destroy. outputs may be NULL. */
int @P@_run(@P@_t* m, const DLTensor* inputs, int num_inputs, DLTensor* outputs, int num_outputs);
/* The instance-owned output i of the last successful run. */
const DLTensor* @P@_output(const @P@_t* m, int i);
/* Message of the last failed call on this instance ("" when none). */
const char* @P@_last_error(const @P@_t* m);

#ifdef __cplusplus
}
#endif
#endif
)HODU";

const char* kSourceApi = R"HODU(
/* ---- model API ------------------------------------------------------------ */
#include <stdio.h>
#include <stdarg.h>
#include <stdlib.h>
#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

struct @P@_instance {
  unsigned char* arena;
  const unsigned char* weights;
  int weights_mapped;  /* the weights are a clean file mapping: pages copied by prepared ops go back */
  void* owned;  /* the malloc'd block of @P@_create, NULL for @P@_create_in */
  DLTensor outputs[@NOUT@ + 1];
  char error[512];
@KFIELDS@};

static const char* const hm_input_names[@NIN@ + 1] = {@INNAMES@};
static const char* const hm_output_names[@NOUT@ + 1] = {@OUTNAMES@};
static const int hm_input_ndim[@NIN@ + 1] = {@INNDIM@};
static const int hm_output_ndim[@NOUT@ + 1] = {@OUTNDIM@};
static const int64_t* const hm_input_shape[@NIN@ + 1] = {@INSHAPES@};
static const int64_t* const hm_output_shape[@NOUT@ + 1] = {@OUTSHAPES@};
static const uint8_t hm_input_code[@NIN@ + 1] = {@INCODE@}, hm_input_bits[@NIN@ + 1] = {@INBITS@};
static const uint8_t hm_output_code[@NOUT@ + 1] = {@OUTCODE@}, hm_output_bits[@NOUT@ + 1] = {@OUTBITS@};
static const int64_t hm_output_offset[@NOUT@ + 1] = {@OUTOFFS@};
/* 1: run() writes the output straight into caller-given memory (no copy at the end). */
static const unsigned char hm_output_direct[@NOUT@ + 1] = {@OUTDIRECT@};
#define HM_ARENA_BYTES ((size_t)@ARENA@)
#define HM_WEIGHTS_BYTES ((size_t)@WBYTES@)
#define HM_FINGERPRINT @FPRINT@ULL

@WEIGHTS_DECL@
/* Lets a loader (hodu's native engine, `hodu info`) find the API prefix and what was
 * built in the file: in their own ELF section, read without scanning the weights. */
#if defined(__ELF__)
#define HM_INFO_SECTION __attribute__((used, section(".hodu_info")))
#else
#define HM_INFO_SECTION __attribute__((used))
#endif
HM_INFO_SECTION static const char hm_tag[] = "HODU_AOT_MODEL_NAME=@P@";
HM_INFO_SECTION static const char hm_doc[] = "HODU_AOT_MODEL_DOC=@DOC@";

int @P@_abi_version(void) { return @ABI@; }

const char* @P@_status_string(int status) {
  switch (status) {
    case 0: return "ok";
    case 1: return "invalid argument";
    case 2: return "out of memory";
    case 3: return "i/o error";
    case 4: return "runtime error";
    default: return "unknown status";
  }
}

int @P@_num_inputs(void) { return @NIN@; }
int @P@_num_outputs(void) { return @NOUT@; }
const char* @P@_input_name(int i) { return i >= 0 && i < @NIN@ ? hm_input_names[i] : NULL; }
const char* @P@_output_name(int i) { return i >= 0 && i < @NOUT@ ? hm_output_names[i] : NULL; }
static DLDataType hm_dtype(uint8_t code, uint8_t bits) {
  DLDataType t;
  t.code = code;
  t.bits = bits;
  t.lanes = 1;
  return t;
}
DLDataType @P@_input_dtype(int i) { return hm_dtype(i >= 0 && i < @NIN@ ? hm_input_code[i] : 0, i >= 0 && i < @NIN@ ? hm_input_bits[i] : 0); }
DLDataType @P@_output_dtype(int i) { return hm_dtype(i >= 0 && i < @NOUT@ ? hm_output_code[i] : 0, i >= 0 && i < @NOUT@ ? hm_output_bits[i] : 0); }
int @P@_input_ndim(int i) { return i >= 0 && i < @NIN@ ? hm_input_ndim[i] : -1; }
int @P@_output_ndim(int i) { return i >= 0 && i < @NOUT@ ? hm_output_ndim[i] : -1; }
const int64_t* @P@_input_shape(int i) { return i >= 0 && i < @NIN@ ? hm_input_shape[i] : NULL; }
const int64_t* @P@_output_shape(int i) { return i >= 0 && i < @NOUT@ ? hm_output_shape[i] : NULL; }

static int hm_fail(@P@_t* m, int status, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m->error, sizeof m->error, fmt, ap);
  va_end(ap);
  return status;
}

static void hm_errbuf(char* errbuf, size_t size, const char* msg) {
  if (errbuf && size) snprintf(errbuf, size, "%s", msg);
}

@KPREPARE@
/* The instance and its arena, without a weights copy. */
#define HM_INSTANCE_BASE_BYTES (sizeof(struct @P@_instance) + 64 + HM_ARENA_BYTES)
size_t @P@_instance_size(void) {
  return HM_INSTANCE_BASE_BYTES + (@U@_EMBEDDED_WEIGHTS ? 0 : HM_WEIGHTS_BYTES + 64);
}

@STATICDIMS@
#if !@U@_EMBEDDED_WEIGHTS
/* 0 when a blob's header is this build's (magic, data size, fingerprint). */
static int hm_check_blob(const unsigned char* header, char* errbuf, size_t size) {
  uint64_t bytes = 0, fp = 0;
  if (memcmp(header, "HODUWGT1", 8) != 0) {
    hm_errbuf(errbuf, size, "the weights file is not a hodu weights blob (bad magic)");
    return 3;
  }
  memcpy(&bytes, header + 8, 8);
  memcpy(&fp, header + 16, 8);
  if (bytes != HM_WEIGHTS_BYTES || fp != HM_FINGERPRINT) {
    hm_errbuf(errbuf, size, "the weights file belongs to another build of the model (size or fingerprint differ)");
    return 3;
  }
  return 0;
}

static int hm_load_weights(const char* path, unsigned char* dst, char* errbuf, size_t size) {
  unsigned char header[64];
  int st;
  FILE* f = fopen(path, "rb");
  if (!f) {
    char msg[600];
    snprintf(msg, sizeof msg, "cannot open the weights file '%s'", path);
    hm_errbuf(errbuf, size, msg);
    return 3;
  }
  if (fread(header, 1, 64, f) != 64) memset(header, 0, 8);
  if ((st = hm_check_blob(header, errbuf, size))) {
    fclose(f);
    return st;
  }
  if (HM_WEIGHTS_BYTES && fread(dst, 1, HM_WEIGHTS_BYTES, f) != HM_WEIGHTS_BYTES) {
    fclose(f);
    hm_errbuf(errbuf, size, "the weights file is truncated");
    return 3;
  }
  fclose(f);
  return 0;
}
#endif

/* weights: a blob in memory to use in place (@P@_create_with_weights), else NULL; mapped:
 * it is a clean file mapping (@U@_WEIGHTS_MAPPED). */
static int hm_create_in(void* memory, size_t size, const char* weights_path, const unsigned char* weights, int mapped,
                        int num_threads, @P@_t** out, char* errbuf, size_t errbuf_size) {
  @P@_t* m;
  uintptr_t p;
  int i;
  (void)num_threads;
  if (!out) {
    hm_errbuf(errbuf, errbuf_size, "out is NULL");
    return 1;
  }
  *out = NULL;
  if (!memory || size < (weights ? HM_INSTANCE_BASE_BYTES : @P@_instance_size())) {
    hm_errbuf(errbuf, errbuf_size, "memory is NULL or smaller than @P@_instance_size()");
    return 1;
  }
  m = (@P@_t*)memory;
  memset(m, 0, sizeof *m);
  p = ((uintptr_t)(m + 1) + 63) & ~(uintptr_t)63;
  m->arena = (unsigned char*)p;
#if @U@_EMBEDDED_WEIGHTS
  (void)weights_path;
  (void)weights;
  if (memcmp(hm_blob, "HODUWGT1", 8) != 0) {
    hm_errbuf(errbuf, errbuf_size, "embedded weights are corrupt");
    return 3;
  }
  m->weights = hm_blob + 64;
  m->weights_mapped = 1;
#else
  if (weights) {
    int st = hm_check_blob(weights, errbuf, errbuf_size);
    if (st) return st;
    m->weights = weights + 64;
    m->weights_mapped = mapped;
  } else {
    unsigned char* w = (unsigned char*)((p + HM_ARENA_BYTES + 63) & ~(uintptr_t)63);
    int st = hm_load_weights(weights_path ? weights_path : "@WFILE@", w, errbuf, errbuf_size);
    if (st) return st;
    m->weights = w;
  }
#endif
  for (i = 0; i < @NOUT@; ++i) {
    DLTensor* t = &m->outputs[i];
    t->data = m->arena + hm_output_offset[i];
    t->device.device_type = kDLCPU;
    t->device.device_id = 0;
    t->ndim = hm_output_ndim[i];
    t->dtype = hm_dtype(hm_output_code[i], hm_output_bits[i]);
    t->shape = (int64_t*)hm_output_shape[i];
    t->strides = NULL;
    t->byte_offset = 0;
  }
@KCREATE@  *out = m;
  return 0;
}

int @P@_create_in(void* memory, size_t size, const char* weights_path, @P@_t** out, char* errbuf, size_t errbuf_size) {
  return hm_create_in(memory, size, weights_path, NULL, 0, 0, out, errbuf, errbuf_size);
}

/* An instance in memory of its own (freed by destroy); weights as in hm_create_in. */
static int hm_create_owned(size_t size, const char* weights_path, const unsigned char* weights, int mapped,
                           int num_threads, @P@_t** out, char* errbuf, size_t errbuf_size) {
  size_t slack = 0;
  unsigned char *raw, *mem;
  int st;
  if (out) *out = NULL;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  /* A large instance (arena, weights) on 2 MiB pages where the kernel gives them only on
   * request: fewer TLB misses on every run, fewer page faults on the first. */
  if (size >= ((size_t)4 << 20)) slack = (size_t)2 << 20;
#endif
  raw = (unsigned char*)malloc(size + slack);
  if (!raw) {
    hm_errbuf(errbuf, errbuf_size, "out of memory");
    return 2;
  }
  mem = slack ? (unsigned char*)(((uintptr_t)raw + slack - 1) & ~(uintptr_t)(slack - 1)) : raw;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (slack) (void)madvise(mem, size, MADV_HUGEPAGE);
#endif
  st = hm_create_in(mem, size, weights_path, weights, mapped, num_threads, out, errbuf, errbuf_size);
  if (st) {
    free(raw);
    return st;
  }
  (*out)->owned = raw;
  return 0;
}

int @P@_create_threads(const char* weights_path, int num_threads, @P@_t** out, char* errbuf, size_t errbuf_size) {
  return hm_create_owned(@P@_instance_size(), weights_path, NULL, 0, num_threads, out, errbuf, errbuf_size);
}

int @P@_create_with_weights(const void* weights, size_t weights_size, int num_threads, int flags, @P@_t** out,
                            char* errbuf, size_t errbuf_size) {
  if (out) *out = NULL;
  if (@U@_EMBEDDED_WEIGHTS) {
    hm_errbuf(errbuf, errbuf_size, "this library embeds its weights: create it with @P@_create_ex");
    return 1;
  }
  if (!weights || ((uintptr_t)weights & 63) || weights_size < 64 || weights_size - 64 < HM_WEIGHTS_BYTES) {
    hm_errbuf(errbuf, errbuf_size, "weights is NULL, not 64-byte aligned, or smaller than the blob this build reads");
    return 1;
  }
  if (flags & ~@U@_WEIGHTS_MAPPED) {
    hm_errbuf(errbuf, errbuf_size, "unknown flags");
    return 1;
  }
  return hm_create_owned(HM_INSTANCE_BASE_BYTES, NULL, (const unsigned char*)weights, flags & @U@_WEIGHTS_MAPPED,
                         num_threads, out, errbuf, errbuf_size);
}

int @P@_create_ex(const char* weights_path, @P@_t** out, char* errbuf, size_t errbuf_size) {
  return @P@_create_threads(weights_path, 0, out, errbuf, errbuf_size);
}

int @P@_create(const char* weights_path, @P@_t** out) { return @P@_create_ex(weights_path, out, NULL, 0); }

void @P@_destroy(@P@_t* m) {
  if (!m) return;
@KDESTROY@  if (m->owned) free(m->owned);
}

const DLTensor* @P@_output(const @P@_t* m, int i) { return m && i >= 0 && i < @NOUT@ ? &m->outputs[i] : NULL; }
const char* @P@_last_error(const @P@_t* m) { return m ? m->error : "instance is NULL"; }

/* Bytes of n elements of `bits` each (4- and 2-bit types packed). */
static size_t hm_bytes(size_t n, uint8_t bits) { return (n * bits + 7) / 8; }

/* Checks one caller tensor against the model's; 0 when it matches. free (inputs of a model
 * with free dims): per dim, the free dim it binds (-1: fixed), into key/bound (names: dims). */
static int hm_check(@P@_t* m, const char* what, const char* name, const DLTensor* t, uint8_t code, uint8_t bits, int ndim,
                    const int64_t* shape, const int* free, int64_t* key, int* bound, const char* const* dims) {
  int d;
  if (!t->data) return hm_fail(m, 1, "%s '%s': data is NULL", what, name);
  if (t->device.device_type != kDLCPU) return hm_fail(m, 1, "%s '%s': device type %d is not kDLCPU", what, name, (int)t->device.device_type);
  if (t->dtype.code != code || t->dtype.bits != bits || t->dtype.lanes != 1)
    return hm_fail(m, 1, "%s '%s': dtype (code %d, bits %d, lanes %d) does not match the model's (code %d, bits %d)", what, name,
                   (int)t->dtype.code, (int)t->dtype.bits, (int)t->dtype.lanes, (int)code, (int)bits);
  if (t->ndim != ndim) return hm_fail(m, 1, "%s '%s': rank %d does not match the model's %d", what, name, t->ndim, ndim);
  for (d = 0; d < ndim; ++d) {
    int f = free ? free[d] : -1;
    if (f < 0) {
      if (t->shape[d] != shape[d])
        return hm_fail(m, 1, "%s '%s': dim %d is %lld but the model expects %lld", what, name, d, (long long)t->shape[d],
                       (long long)shape[d]);
      continue;
    }
    if (t->shape[d] < 1)
      return hm_fail(m, 1, "%s '%s': dim %d (%s) is %lld; compiled code takes sizes >= 1 there", what, name, d, dims[f],
                     (long long)t->shape[d]);
    if (bound[f] && key[f] != t->shape[d])
      return hm_fail(m, 1, "%s '%s': dim %d (%s) is %lld, but an earlier input has %s = %lld", what, name, d, dims[f],
                     (long long)t->shape[d], dims[f], (long long)key[f]);
    key[f] = t->shape[d];
    bound[f] = 1;
  }
  if (t->strides) {
    int64_t expect = 1;
    for (d = ndim - 1; d >= 0; --d) {
      if (t->shape[d] != 1 && t->strides[d] != expect)
        return hm_fail(m, 1, "%s '%s': strides are not compact (row-major) at dim %d", what, name, d);
      expect *= t->shape[d];
    }
  }
  return 0;
}

static size_t hm_numel(int ndim, const int64_t* shape) {
  size_t n = 1;
  int d;
  for (d = 0; d < ndim; ++d) n *= (size_t)shape[d];
  return n;
}

int @P@_run(@P@_t* m, const DLTensor* inputs, int num_inputs, DLTensor* outputs, int num_outputs) {
  unsigned char* A;
  const unsigned char* W;
  int i;
@INDECL@
  if (!m) return 1;
  m->error[0] = 0;
  if (num_inputs != @NIN@) return hm_fail(m, 1, "got %d inputs, the model has @NIN@", num_inputs);
  if (@NIN@ > 0 && !inputs) return hm_fail(m, 1, "inputs is NULL");
  if (outputs && num_outputs != @NOUT@) return hm_fail(m, 1, "got %d outputs, the model has @NOUT@", num_outputs);
@CHECKS@  A = m->arena;
  W = m->weights;
  (void)A;
  (void)W;
@INSET@
@BODY@
  for (i = 0; outputs && i < @NOUT@; ++i) {
    if (outputs[i].data && hm_output_direct[i]) continue;
    if (outputs[i].data)
      memcpy((char*)outputs[i].data + outputs[i].byte_offset, m->outputs[i].data,
             hm_bytes(hm_numel(hm_output_ndim[i], hm_output_shape[i]), hm_output_bits[i]));
    else
      outputs[i] = m->outputs[i];
  }
  return 0;
}
)HODU";

const char* kMain = R"HODU(/* main() of a model compiled by `hodu build` into an executable:
 *   PROGRAM [-i NAME=PATH.npy]... [-o DIR] [-w WEIGHTS]
 * reads each input from a .npy file and writes DIR/<output>.npy. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "@P@.h"

static void die(const char* msg, const char* arg) {
  fprintf(stderr, "error: %s%s\n", msg, arg ? arg : "");
  exit(1);
}

static const char* npy_descr(DLDataType t) {
  if (t.code == kDLFloat && t.bits == 32) return "<f4";
  if (t.code == kDLFloat && t.bits == 64) return "<f8";
  if (t.code == kDLInt && t.bits == 64) return "<i8";
  if (t.code == kDLInt && t.bits == 32) return "<i4";
  if (t.code == kDLInt && t.bits == 16) return "<i2";
  if (t.code == kDLInt && t.bits == 8) return "|i1";
  if (t.code == kDLUInt && t.bits == 8) return "|u1";
  if (t.code == 6 && t.bits == 8) return "|b1";
  if (t.code == kDLUInt && t.bits == 16) return "<u2";
  if (t.code == kDLUInt && t.bits == 32) return "<u4";
  if (t.code == kDLUInt && t.bits == 64) return "<u8";
  return "?";
}

/* Reads a little-endian C-order .npy; checks dtype and shape against the model's input i
 * (a free dim, -1, takes the file's size) and leaves the shape in dims. */
static void* read_npy(const char* path, int i, int64_t* dims) {
  FILE* f = fopen(path, "rb");
  unsigned char pre[10];
  size_t hlen, n = 1, bytes;
  char* header;
  int d, ndim = @P@_input_ndim(i);
  const int64_t* shape = @P@_input_shape(i);
  const char* want = npy_descr(@P@_input_dtype(i));
  void* data;
  if (!f) die("cannot open ", path);
  if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0) die("not a .npy file: ", path);
  if (pre[6] == 1) {
    hlen = pre[8] | (pre[9] << 8);
  } else {
    unsigned char more[2];
    if (fread(more, 1, 2, f) != 2) die("truncated .npy: ", path);
    hlen = pre[8] | (pre[9] << 8) | ((size_t)more[0] << 16) | ((size_t)more[1] << 24);
  }
  header = (char*)calloc(hlen + 1, 1);
  if (!header || fread(header, 1, hlen, f) != hlen) die("truncated .npy: ", path);
  if (!strstr(header, want))
    { fprintf(stderr, "error: %s: dtype must be %s (header %s)\n", path, want, header); exit(1); }
  if (strstr(header, "'fortran_order': True")) die("Fortran-order .npy is not supported: ", path);
  {
    const char* s = strstr(header, "'shape': (");
    int got = 0;
    if (!s) die("no shape in .npy header: ", path);
    s += 10;
    while (*s && *s != ')') {
      char* end;
      long long v = strtoll(s, &end, 10);
      if (end == s) { ++s; continue; }
      if (got < 16) dims[got] = v;
      ++got;
      s = end;
    }
    if (got != ndim) { fprintf(stderr, "error: %s: rank %d, the model's input '%s' has rank %d\n", path, got, @P@_input_name(i), ndim); exit(1); }
    for (d = 0; d < ndim; ++d)
      if (shape[d] >= 0 && dims[d] != shape[d]) { fprintf(stderr, "error: %s: dim %d is %lld, the model expects %lld\n", path, d, (long long)dims[d], (long long)shape[d]); exit(1); }
  }
  for (d = 0; d < ndim; ++d) n *= (size_t)dims[d];
  bytes = n * (@P@_input_dtype(i).bits / 8);
  data = malloc(bytes ? bytes : 1);
  if (!data || fread(data, 1, bytes, f) != bytes) die("truncated .npy data: ", path);
  free(header);
  fclose(f);
  return data;
}

static void write_npy(const char* path, const DLTensor* t) {
  char header[256];
  int d, len;
  size_t n = 1, total;
  FILE* f = fopen(path, "wb");
  if (!f) die("cannot write ", path);
  len = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': (", npy_descr(t->dtype));
  for (d = 0; d < t->ndim; ++d) {
    len += snprintf(header + len, sizeof header - len, "%lld%s", (long long)t->shape[d], t->ndim == 1 ? "," : d + 1 < t->ndim ? ", " : "");
    n *= (size_t)t->shape[d];
  }
  len += snprintf(header + len, sizeof header - len, "), }");
  total = 10 + (size_t)len + 1;
  {
    size_t pad = (64 - total % 64) % 64, k;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
    size_t hl = (size_t)len + pad + 1;
    pre[8] = (unsigned char)(hl & 0xff);
    pre[9] = (unsigned char)(hl >> 8);
    fwrite(pre, 1, 10, f);
    fwrite(header, 1, (size_t)len, f);
    for (k = 0; k < pad; ++k) fputc(' ', f);
    fputc('\n', f);
  }
  if (fwrite(t->data, t->dtype.bits / 8, n, f) != n) die("cannot write ", path);
  fclose(f);
}

int main(int argc, char** argv) {
  const char* out_dir = ".";
  const char* weights = NULL;
  char weights_default[4096];
  void* data[@U@_NUM_INPUTS + 1] = {0};
  int64_t dims[@U@_NUM_INPUTS + 1][16];
  DLTensor in[@U@_NUM_INPUTS + 1], out[@U@_NUM_OUTPUTS + 1];
  char err[600];
  @P@_t* m = NULL;
  int a, i, st;
  memset(in, 0, sizeof in);
  memset(out, 0, sizeof out);
  for (a = 1; a < argc; ++a) {
    if (!strcmp(argv[a], "-h") || !strcmp(argv[a], "--help")) {
      printf("usage: %s [-i NAME=PATH.npy]... [-o DIR] [-w WEIGHTS]\ninputs:\n", argv[0]);
      for (i = 0; i < @P@_num_inputs(); ++i) printf("  %s\n", @P@_input_name(i));
      return 0;
    } else if (!strcmp(argv[a], "-i") && a + 1 < argc) {
      const char* spec = argv[++a];
      const char* eq = strchr(spec, '=');
      int found = -1;
      if (!eq) die("-i expects NAME=PATH, got ", spec);
      for (i = 0; i < @P@_num_inputs(); ++i)
        if (strlen(@P@_input_name(i)) == (size_t)(eq - spec) && !strncmp(@P@_input_name(i), spec, (size_t)(eq - spec))) found = i;
      if (found < 0) die("no such input: ", spec);
      free(data[found]);
      data[found] = read_npy(eq + 1, found, dims[found]);
    } else if (!strcmp(argv[a], "-o") && a + 1 < argc) {
      out_dir = argv[++a];
    } else if (!strcmp(argv[a], "-w") && a + 1 < argc) {
      weights = argv[++a];
    } else {
      die("unknown argument: ", argv[a]);
    }
  }
  if (!weights) {
    snprintf(weights_default, sizeof weights_default, "%s.weights", argv[0]);
    weights = weights_default;
  }
  for (i = 0; i < @P@_num_inputs(); ++i) {
    if (!data[i]) die("missing input (give -i NAME=PATH.npy): ", @P@_input_name(i));
    in[i].data = data[i];
    in[i].device.device_type = kDLCPU;
    in[i].ndim = @P@_input_ndim(i);
    in[i].dtype = @P@_input_dtype(i);
    in[i].shape = dims[i];
  }
  st = @P@_create_ex(weights, &m, err, sizeof err);
  if (st) die("cannot create the model: ", err);
  st = @P@_run(m, in, @P@_num_inputs(), out, @P@_num_outputs());
  if (st) die("run failed: ", @P@_last_error(m));
  mkdir(out_dir, 0777);
  for (i = 0; i < @P@_num_outputs(); ++i) {
    char path[4096], name[1024];
    size_t k;
    snprintf(name, sizeof name, "%s", @P@_output_name(i)[0] ? @P@_output_name(i) : "output");
    for (k = 0; name[k]; ++k) {
      char c = name[k];
      if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-')) name[k] = '_';
    }
    if (!strcmp(name, ".") || !strcmp(name, "..")) strcpy(name, "_");
    snprintf(path, sizeof path, "%s/%s.npy", out_dir, name);
    write_npy(path, &out[i]);
    fprintf(stderr, "wrote %s\n", path);
  }
  @P@_destroy(m);
  for (i = 0; i < @P@_num_inputs(); ++i) free(data[i]);
  return 0;
}
)HODU";


const char* kDynamicApi = R"HODU(
/* ---- sizes known at run time ----------------------------------------------- */
/* The instance keeps HM_STATES shape states: for one set of free input dims each holds
 * the run-time dims S (the free dims first), the arena offsets O and, with the kernel
 * library, the ops prepared for that shape. A run with new dims takes the least recently
 * used state (shape function, arena plan, ops). */
#define HM_NUM_DIMS @NDIMS@
#define HM_NUM_SLOTS @NSLOTS@
#define HM_NUM_BUFFERS @NBUFS@
#define HM_NUM_LATE @NLATE@
#define HM_NUM_OPS @NOPS@
#define HM_MAX_RANK @MAXRANK@
#define HM_STATES 4
typedef struct {
  int valid;
  uint64_t used;
  int64_t S[HM_NUM_SLOTS + 1];
  int64_t O[HM_NUM_BUFFERS + 1];
  size_t arena_bytes;
  struct hodu_kernel* ops[HM_NUM_OPS + 1];
} hm_state;
)HODU";

const char* kDynamicFunctions = R"HODU(
static const char* const hm_dim_names[HM_NUM_DIMS + 1] = {@DIMNAMES@};
@INFREE@static const int* const hm_input_free[@NIN@ + 1] = {@INFREEPTRS@};
static const int* const hm_output_free[@NOUT@ + 1] = {@OUTFREEPTRS@};
static const int32_t hm_buf_first[HM_NUM_BUFFERS + 1] = {@BUFFIRST@};
static const int32_t hm_buf_last[HM_NUM_BUFFERS + 1] = {@BUFLAST@};
static const int32_t hm_buf_reuse[HM_NUM_BUFFERS + 1] = {@BUFREUSE@};

int @P@_num_dims(void) { return HM_NUM_DIMS; }
const char* @P@_dim_name(int k) { return k >= 0 && k < HM_NUM_DIMS ? hm_dim_names[k] : NULL; }
const char* @P@_input_dim_name(int i, int d) {
  if (i < 0 || i >= @NIN@ || d < 0 || d >= hm_input_ndim[i] || hm_input_free[i][d] < 0) return NULL;
  return hm_dim_names[hm_input_free[i][d]];
}
const char* @P@_output_dim_name(int i, int d) {
  if (i < 0 || i >= @NOUT@ || d < 0 || d >= hm_output_ndim[i] || hm_output_free[i][d] < 0) return NULL;
  return hm_dim_names[hm_output_free[i][d]];
}

/* The run-time dims of one shape (S[0..HM_NUM_DIMS) given) and the checks on them. */
static int hm_shapes(@P@_t* m, int64_t* S) {
  (void)S;
@SHAPEFN@  return 0;
}

/* Arena offsets of this shape's buffers; returns the arena bytes. */
static size_t hm_plan(const int64_t* S, int64_t* O) {
  int64_t bytes[HM_NUM_BUFFERS + 1], work[5 * (HM_NUM_BUFFERS + 1)];
  (void)S;
@PLANFN@  return (size_t)hk_plan(HM_NUM_BUFFERS, bytes, hm_buf_first, hm_buf_last, hm_buf_reuse, O, work);
}

static void hm_release_state(@P@_t* m, hm_state* hs) {
#if @U@_KERNEL_LIBRARY
  int k;
  for (k = HM_NUM_OPS; k-- > 0;) {
    hodu_kernel_release(m->kernels, hs->ops[k]);
    hs->ops[k] = NULL;
  }
#else
  (void)m;
#endif
  hs->valid = 0;
}

@KPREPARESHAPE@
/* The state of these free dims: kept from an earlier run, or made (least recently used). */
static int hm_state_for(@P@_t* m, const int64_t* key, hm_state** out) {
  hm_state* hs = NULL;
  int i, st;
  size_t need;
  for (i = 0; i < HM_STATES; ++i)
    if (m->states[i].valid && !memcmp(m->states[i].S, key, sizeof(int64_t) * HM_NUM_DIMS)) {
      m->states[i].used = ++m->tick;
      *out = &m->states[i];
      return 0;
    }
  for (i = 0; i < HM_STATES; ++i)
    if (!hs || (!m->states[i].valid && hs->valid) || (m->states[i].valid == hs->valid && m->states[i].used < hs->used))
      hs = &m->states[i];
  if (hs->valid) hm_release_state(m, hs);
  memcpy(hs->S, key, sizeof(int64_t) * HM_NUM_DIMS);
  if ((st = hm_shapes(m, hs->S))) return st;
  need = hm_plan(hs->S, hs->O);
  if (need > m->arena_cap) {
    unsigned char* heap;
    if (!m->owned)
      return hm_fail(m, 2, "this shape needs %llu bytes of arena, the instance has %llu (give @P@_create_in "
                     "@P@_workspace_size(dims) bytes)", (unsigned long long)need, (unsigned long long)m->arena_cap);
    free(m->arena_heap);
    m->arena_heap = NULL;
    m->arena = NULL;
    m->arena_cap = 0;
    heap = (unsigned char*)malloc(need + 64);
    if (!heap) return hm_fail(m, 2, "out of memory: the arena of this shape is %llu bytes", (unsigned long long)need);
    m->arena_heap = heap;
    m->arena = (unsigned char*)(((uintptr_t)heap + 63) & ~(uintptr_t)63);
    m->arena_cap = need;
  }
  hs->arena_bytes = need;
#if @U@_KERNEL_LIBRARY
  if ((st = hm_prepare_shape(m, hs))) {
    hm_release_state(m, hs);
    return st;
  }
#endif
  hs->valid = 1;
  hs->used = ++m->tick;
  *out = hs;
  return 0;
}

/* Memory for a value whose size is known only while running (a NonZero's result): the
 * arena's tail past this shape's plan, else (instances the library allocated) the heap,
 * given back at the next run. NULL when neither has room. */
static void* hm_late(@P@_t* m, int64_t bytes) {
  size_t at = (m->late_top + 63) & ~(size_t)63, n = bytes > 0 ? (size_t)bytes : 1;
  void* p;
  if (at + n <= m->arena_cap) {
    m->late_top = at + n;
    return m->arena + at;
  }
  if (!m->owned || m->late_count >= HM_NUM_LATE) return NULL;
  p = malloc(n);
  if (p) m->late_blocks[m->late_count++] = p;
  return p;
}

static void hm_free_late(@P@_t* m) {
  while (m->late_count > 0) free(m->late_blocks[--m->late_count]);
}

size_t @P@_workspace_size(const int64_t* dims) {
  @P@_t* m = (@P@_t*)calloc(1, sizeof(struct @P@_instance));
  size_t need;
  int k;
  if (!m) return 0;
  for (k = 0; k < HM_NUM_DIMS; ++k) {
    if (!dims || dims[k] < 1) {
      free(m);
      return 0;
    }
    m->states[0].S[k] = dims[k];
  }
  if (hm_shapes(m, m->states[0].S)) {
    free(m);
    return 0;
  }
  need = hm_plan(m->states[0].S, m->states[0].O);
  free(m);
  return @P@_instance_size() + need + 64;
}

)HODU";

// The input and output checks at the start of a run: the declared shapes, or (sizes known at
// run time) free dims bound into a key that selects the shape state.
const char* kStaticChecks = R"HODU(  for (i = 0; i < @NIN@; ++i) {
    int st = hm_check(m, "input", hm_input_names[i], &inputs[i], hm_input_code[i], hm_input_bits[i], hm_input_ndim[i],
                      hm_input_shape[i], NULL, NULL, NULL, NULL);
    if (st) return st;
  }
  for (i = 0; outputs && i < @NOUT@; ++i) {
    if (outputs[i].data) {
      int st = hm_check(m, "output", hm_output_names[i], &outputs[i], hm_output_code[i], hm_output_bits[i],
                        hm_output_ndim[i], hm_output_shape[i], NULL, NULL, NULL, NULL);
      if (st) return st;
    }
  }
)HODU";

const char* kDynamicChecks = R"HODU(  {
    int64_t key[HM_NUM_DIMS + 1];
    int bound[HM_NUM_DIMS + 1], st;
    memset(bound, 0, sizeof bound);
    key[0] = 0;
    for (i = 0; i < @NIN@; ++i)
      if ((st = hm_check(m, "input", hm_input_names[i], &inputs[i], hm_input_code[i], hm_input_bits[i], hm_input_ndim[i],
                         hm_input_shape[i], hm_input_free[i], key, bound, hm_dim_names)))
        return st;
    if ((st = hm_state_for(m, key, &hs))) return st;
  }
  S = hs->S;
  O = hs->O;
  (void)S;
  (void)O;
  (void)L;
  hm_free_late(m);
  m->late_top = hs->arena_bytes;
@OUTSHAPES_PRE@  for (i = 0; outputs && i < @NOUT@; ++i) {
    if (outputs[i].data && !hm_output_late[i]) {
      int st = hm_check(m, "output", hm_output_names[i], &outputs[i], hm_output_code[i], hm_output_bits[i],
                        hm_output_ndim[i], m->out_shape[i], NULL, NULL, NULL, NULL);
      if (st) return st;
    }
  }
)HODU";

const char* kPrepareShape = R"HODU(/* The library ops of one shape. */
static int hm_prepare_shape(@P@_t* m, hm_state* hs) {
  const unsigned char* W = m->weights;
  const int64_t* S = hs->S;
  char* errbuf = m->error;
  size_t errbuf_size = sizeof m->error;
  int st;
  (void)W;
  (void)S;
  (void)st;
@PREPARE_SHAPE@  return 0;
}
)HODU";
}  // namespace

uint64_t fingerprint_of(std::string_view data) {
  // FNV-1a over 8-byte words (the blob is 64-byte aligned, so whole words): a byte at a
  // time took 0.6 s of GPT-2's build.
  uint64_t h = 1469598103934665603ULL;
  size_t i = 0;
  for (; i + 8 <= data.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, data.data() + i, 8);
    h = (h ^ w) * 1099511628211ULL;
  }
  for (; i < data.size(); ++i) h = (h ^ static_cast<unsigned char>(data[i])) * 1099511628211ULL;
  return h;
}

void seal_weights_blob(std::string& blob, uint64_t fingerprint) {
  HODU_CHECK(blob.size() >= static_cast<size_t>(kWeightsHeaderBytes), ErrorCode::Internal, "weights blob without header");
  std::memset(blob.data(), 0, kWeightsHeaderBytes);
  std::memcpy(blob.data(), kWeightsMagic, 8);
  uint64_t bytes = blob.size() - kWeightsHeaderBytes;
  std::memcpy(blob.data() + 8, &bytes, 8);
  std::memcpy(blob.data() + 16, &fingerprint, 8);
}

std::string emit_header(const ApiSpec& spec) {
  std::string h = kHeader;
  h = replace_all(h, "@ABI@", std::to_string(kAbiVersion));
  h = replace_all(h, "@NIN@", std::to_string(spec.inputs.size()));
  h = replace_all(h, "@NOUT@", std::to_string(spec.outputs.size()));
  h = replace_all(h, "@EMBED@", spec.embed_weights ? "1" : "0");
  h = replace_all(h, "@STANDALONE@", spec.standalone ? "1" : "0");
  h = replace_all(h, "@KLIB@", spec.kernel_library ? "1" : "0");
  h = replace_all(h, "@WFILE@", spec.weights_file);
  h = replace_all(h, "@NDIMS@", std::to_string(spec.dim_names.size()));
  std::string dims;
  for (const auto& d : spec.dim_names) dims += (dims.empty() ? "" : ", ") + d;
  h = replace_all(h, "@DIMDOC@", dims.empty() ? " This model has none." : " This model's: " + dims + ".");
  // The inputs and outputs with their shapes (free dims by name, "?" computed while running).
  std::string doc = "\n *";
  auto line = [&](const char* what, const ApiTensor& t) {
    doc += fmt::format("\n *   {} '{}' {} {}", what, t.name, dtype_name(t.dtype), t.shape_doc);
  };
  for (const auto& t : spec.inputs) line("input ", t);
  for (const auto& t : spec.outputs) line("output", t);
  h = replace_all(h, "@SHAPEDOC@", replace_all(doc, "*/", "* /"));
  return substitute(h, spec);
}

namespace {

// Default mode: the instance's kernel context, prepared at create time.
const char* kKernelPrepare = R"HODU(/* A prepare call's status: UNSUPPORTED leaves the op NULL and the portable kernel runs it. */
static int hm_prepared(@P@_t* m, int st, const char* node, char* errbuf, size_t size) {
  char msg[700];
  if (st == HODU_KERNELS_OK || st == HODU_KERNELS_ERR_UNSUPPORTED) return 0;
  snprintf(msg, sizeof msg, "%s: %s", node, hodu_kernels_last_error(m->kernels));
  hm_errbuf(errbuf, size, msg);
  return st == HODU_KERNELS_ERR_OUT_OF_MEMORY ? 2 : 4;
}

/* Pages of the weights a prepared op has copied: given back to the kernel when they are a
 * clean file-backed mapping (the embedded blob; a blob given with @U@_WEIGHTS_MAPPED), so a
 * later read (another instance's create, an op's portable fallback) faults them in again
 * from the file. */
static void hm_release_pages(const @P@_t* m, const unsigned char* p, size_t bytes) {
#if defined(__linux__) && defined(MADV_DONTNEED)
  const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t begin = ((uintptr_t)p + page - 1) & ~(page - 1), end = ((uintptr_t)p + bytes) & ~(page - 1);
  if (m->weights_mapped && page && end > begin) (void)madvise((void*)begin, end - begin, MADV_DONTNEED);
#else
  (void)m;
  (void)p;
  (void)bytes;
#endif
}
#define hm_release(p, bytes) hm_release_pages(m, p, bytes)

static int hm_kernel_fail(@P@_t* m, const char* node) {
  return hm_fail(m, 4, "%s: %s", node, hodu_kernels_last_error(m->kernels));
}

static int hm_prepare_kernels(@P@_t* m, int num_threads, char* errbuf, size_t errbuf_size) {
  const unsigned char* W = m->weights;
  int st;
  if (hodu_kernels_abi_version() != HODU_KERNELS_ABI_VERSION) {
    char msg[300];
    snprintf(msg, sizeof msg,
             "libhodu_kernels has ABI version %d, this model was built for version %d: "
             "rebuild the model with the hodu that ships this library, or use that hodu's library",
             hodu_kernels_abi_version(), HODU_KERNELS_ABI_VERSION);
    hm_errbuf(errbuf, errbuf_size, msg);
    return 4;
  }
  st = hodu_kernels_create(num_threads, &m->kernels, errbuf, errbuf_size);
  (void)W;
  if (st) return st == HODU_KERNELS_ERR_OUT_OF_MEMORY ? 2 : 4;
@PREPARE_BODY@  return 0;
}
)HODU";

}  // namespace

namespace {

// `from` replaced by `to` in text, where it must be (the static template's own text).
void rewrite(std::string& text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  HODU_CHECK(at != std::string::npos, ErrorCode::Internal, "api emitter: template text not found: {}", from.substr(0, 60));
  text.replace(at, from.size(), to);
}

// The API source for sizes known at run time: the static template with the instance
// holding shape states, inputs binding free dims, outputs shaped per run.
std::string dynamic_api(std::string api) {
  rewrite(api, "  char error[512];\n@KFIELDS@};",
          "  char error[512];\n  size_t arena_cap, late_top;\n  unsigned char* arena_heap;\n"
          "  void* late_blocks[HM_NUM_LATE + 1];\n  int late_count;\n  uint64_t tick;\n"
          "  int64_t out_shape[@NOUT@ + 1][HM_MAX_RANK + 1];\n  hm_state states[HM_STATES];\n@KFIELDS@};");
  rewrite(api, "/* 1: run() writes the output straight",
          "/* 1: the output's size is known only after the body (data-dependent). */\n"
          "static const unsigned char hm_output_late[@NOUT@ + 1] = {@OUTLATE@};\n"
          "/* 1: run() writes the output straight");
  rewrite(api, "    m->weights = w;\n  }\n#endif\n",
          "    m->weights = w;\n  }\n#endif\n  {\n    /* The arena: what the caller's memory has left after the weights. */\n"
          "    uintptr_t a = (p + (@U@_EMBEDDED_WEIGHTS ? 0 : HM_WEIGHTS_BYTES) + 63) & ~(uintptr_t)63;\n"
          "    m->arena = (unsigned char*)a;\n"
          "    m->arena_cap = (uintptr_t)memory + size > a ? (size_t)((uintptr_t)memory + size - a) : 0;\n  }\n");
  rewrite(api, "    t->data = m->arena + hm_output_offset[i];", "    t->data = NULL;");
  rewrite(api, "    t->shape = (int64_t*)hm_output_shape[i];",
          "    t->shape = m->out_shape[i];\n    memcpy(m->out_shape[i], hm_output_shape[i], sizeof(int64_t) * (size_t)hm_output_ndim[i]);");
  rewrite(api, "@KDESTROY@  if (m->owned) free(m->owned);",
          "  hm_free_late(m);\n  free(m->arena_heap);\n@KDESTROY@  if (m->owned) free(m->owned);");
  rewrite(api, "  int i;\n@INDECL@",
          "  int i;\n  hm_state* hs;\n  int64_t* S; /* late dims are written while running */\n  const int64_t* O;\n"
          "  void* L[HM_NUM_LATE + 1];\n@INDECL@");

  rewrite(api, "@BODY@\n  for (i = 0; outputs && i < @NOUT@; ++i) {\n    if (outputs[i].data && hm_output_direct[i]) continue;",
          "@BODY@\n@OUTSHAPES_POST@@OUTDATA@  for (i = 0; outputs && i < @NOUT@; ++i) {\n"
          "    if (outputs[i].data && hm_output_late[i]) {\n      int st = hm_check(m, \"output\", hm_output_names[i], "
          "&outputs[i], hm_output_code[i], hm_output_bits[i], hm_output_ndim[i], m->out_shape[i], NULL, NULL, NULL, NULL);\n"
          "      if (st) return st;\n    }\n  }\n"
          "  for (i = 0; outputs && i < @NOUT@; ++i) {\n    if (outputs[i].data && hm_output_direct[i]) continue;");
  rewrite(api, "hm_bytes(hm_numel(hm_output_ndim[i], hm_output_shape[i])", "hm_bytes(hm_numel(hm_output_ndim[i], m->out_shape[i])");
  return api;
}

}  // namespace

std::string emit_source(const ApiSpec& spec, const std::string& kernels, const std::string& kernel_abi) {
  std::string s = "/* Generated by hodu build: " + spec.model_doc + " */\n#include \"" + spec.name + ".h\"\n";
  if (spec.kernel_library) s += "\n/* ---- libhodu_kernels (include/hodu/kernels.h) ---- */\n" + kernel_abi;
  s += kernels;
  if (spec.dynamic)
    s += "\n/* ---- run-time sizes ---- */\n"
         "static inline int64_t hm_fdiv(int64_t a, int64_t b) {\n"
         "  int64_t q = b ? a / b : 0;\n  return b && a % b != 0 && ((a < 0) != (b < 0)) ? q - 1 : q;\n}\n"
         "static inline int64_t hm_min(int64_t a, int64_t b) { return a < b ? a : b; }\n"
         "static inline int64_t hm_max(int64_t a, int64_t b) { return a > b ? a : b; }\n";
  s += "\n/* ---- build-time tables ---- */\n" + spec.tables;
  std::string api = spec.dynamic ? dynamic_api(kSourceApi) : std::string(kSourceApi);
  rewrite(api, "  char error[512];\n", "  char error[512];\n" + spec.extra_fields);
  rewrite(api, "@KCREATE@  *out = m;", "@KCREATE@" + spec.extra_create + "  *out = m;");
  rewrite(api, "@KDESTROY@  if (m->owned)", spec.extra_destroy + "@KDESTROY@  if (m->owned)");
  rewrite(api, "@CHECKS@", spec.dynamic ? kDynamicChecks : kStaticChecks);
  if (spec.dynamic) {
    std::string types = kDynamicApi;
    int max_rank = 1;
    for (const auto& o : spec.outputs) max_rank = std::max(max_rank, static_cast<int>(o.shape.size()));
    types = replace_all(types, "@NDIMS@", std::to_string(spec.dim_names.size()));
    types = replace_all(types, "@NSLOTS@", std::to_string(spec.num_slots));
    types = replace_all(types, "@NBUFS@", std::to_string(spec.num_buffers));
    types = replace_all(types, "@NLATE@", std::to_string(spec.num_late));
    types = replace_all(types, "@NOPS@", std::to_string(spec.library_ops));
    types = replace_all(types, "@MAXRANK@", std::to_string(max_rank));
    rewrite(api, "struct @P@_instance {", types + "\nstruct @P@_instance {");
    std::string fns = kDynamicFunctions;
    std::string dim_names, infree, infree_ptrs;
    for (const auto& d : spec.dim_names) dim_names += (dim_names.empty() ? "" : ", ") + c_string_literal(d);
    for (size_t i = 0; i < spec.inputs.size(); ++i) {
      std::string f;
      for (int k : spec.inputs[i].free_dims) f += (f.empty() ? "" : ", ") + std::to_string(k);
      infree += fmt::format("static const int hm_in_free{}[] = {{{}}};\n", i, f.empty() ? "-1" : f);
      infree_ptrs += (infree_ptrs.empty() ? "" : ", ") + fmt::format("hm_in_free{}", i);
    }
    std::string outfree_ptrs;
    for (size_t i = 0; i < spec.outputs.size(); ++i) {
      std::string f;
      for (int k : spec.outputs[i].free_dims) f += (f.empty() ? "" : ", ") + std::to_string(k);
      infree += fmt::format("static const int hm_out_free{}[] = {{{}}};\n", i, f.empty() ? "-1" : f);
      outfree_ptrs += (outfree_ptrs.empty() ? "" : ", ") + fmt::format("hm_out_free{}", i);
    }
    fns = replace_all(fns, "@OUTFREEPTRS@", outfree_ptrs.empty() ? "0" : outfree_ptrs);
    fns = replace_all(fns, "@DIMNAMES@", dim_names.empty() ? "0" : dim_names);
    fns = replace_all(fns, "@INFREE@", infree);
    fns = replace_all(fns, "@INFREEPTRS@", infree_ptrs.empty() ? "0" : infree_ptrs);
    fns = replace_all(fns, "@BUFFIRST@", spec.buffer_first.empty() ? "0" : spec.buffer_first);
    fns = replace_all(fns, "@BUFLAST@", spec.buffer_last.empty() ? "0" : spec.buffer_last);
    fns = replace_all(fns, "@BUFREUSE@", spec.buffer_reuse.empty() ? "0" : spec.buffer_reuse);
    std::string prepare_shape;
    if (spec.kernel_library) {
      prepare_shape = kPrepareShape;
      // Per shape: ops in the state, descriptors of run-time values.
      std::string body = replace_all(replace_all(spec.prepare, "m->ops[", "hs->ops["), "static const ", "const ");
      size_t at = prepare_shape.find("@PREPARE_SHAPE@");
      prepare_shape.replace(at, 15, body);
    }
    fns = replace_all(fns, "@KPREPARESHAPE@", prepare_shape);
    // Generated text last (not searched for placeholders).
    size_t at = fns.find("@SHAPEFN@");
    fns.replace(at, 9, spec.shape_function);
    at = fns.find("@PLANFN@");
    fns.replace(at, 8, spec.plan_function);
    rewrite(api, "@KPREPARE@\n", "@KPREPARE@\n" + fns);
    std::string late;
    for (const auto& o : spec.outputs) late += (late.empty() ? "" : ", ") + std::string(o.late ? "1" : "0");
    api = replace_all(api, "@OUTLATE@", late.empty() ? "0" : late);
    std::string pre, post, data;
    for (size_t i = 0; i < spec.outputs.size(); ++i) {
      const auto& o = spec.outputs[i];
      for (size_t d = 0; d < o.shape.size(); ++d)
        if (!o.shape[d].known())
          (o.late ? post : pre) += fmt::format("  m->out_shape[{}][{}] = {};\n", i, d, o.shape_c[d]);
      data += fmt::format("  m->outputs[{}].data = {};\n", i, o.data);
    }
    rewrite(api, "@OUTSHAPES_PRE@", pre);
    rewrite(api, "@OUTSHAPES_POST@", post);
    rewrite(api, "@OUTDATA@", data);
  }
  auto join = [](const std::vector<ApiTensor>& v, const std::function<std::string(const ApiTensor&)>& f) {
    std::string out;
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + f(v[i]);
    return out.empty() ? std::string("0") : out;
  };
  std::string shapes_decl;
  for (size_t i = 0; i < spec.inputs.size(); ++i)
    shapes_decl += fmt::format("static const int64_t hm_in_shape{}[] = {{{}}};\n", i, ints(spec.inputs[i].shape));
  for (size_t i = 0; i < spec.outputs.size(); ++i)
    shapes_decl += fmt::format("static const int64_t hm_out_shape{}[] = {{{}}};\n", i, ints(spec.outputs[i].shape));
  int k = 0;
  api = replace_all(api, "@INNAMES@", join(spec.inputs, [](const ApiTensor& t) { return c_string_literal(t.name); }));
  api = replace_all(api, "@OUTNAMES@", join(spec.outputs, [](const ApiTensor& t) { return c_string_literal(t.name); }));
  api = replace_all(api, "@INNDIM@", join(spec.inputs, [](const ApiTensor& t) { return std::to_string(t.shape.size()); }));
  api = replace_all(api, "@OUTNDIM@", join(spec.outputs, [](const ApiTensor& t) { return std::to_string(t.shape.size()); }));
  k = 0;
  api = replace_all(api, "@INSHAPES@", join(spec.inputs, [&](const ApiTensor&) { return fmt::format("hm_in_shape{}", k++); }));
  k = 0;
  api = replace_all(api, "@OUTSHAPES@", join(spec.outputs, [&](const ApiTensor&) { return fmt::format("hm_out_shape{}", k++); }));
  api = replace_all(api, "@INCODE@", join(spec.inputs, [](const ApiTensor& t) { return std::to_string(dl_dtype(t.dtype).first); }));
  api = replace_all(api, "@INBITS@", join(spec.inputs, [](const ApiTensor& t) { return std::to_string(dl_dtype(t.dtype).second); }));
  api = replace_all(api, "@OUTCODE@", join(spec.outputs, [](const ApiTensor& t) { return std::to_string(dl_dtype(t.dtype).first); }));
  api = replace_all(api, "@OUTBITS@", join(spec.outputs, [](const ApiTensor& t) { return std::to_string(dl_dtype(t.dtype).second); }));
  api = replace_all(api, "@OUTOFFS@", join(spec.outputs, [](const ApiTensor& t) { return std::to_string(t.arena_offset); }));
  {
    std::string doc = c_string_literal(spec.model_doc);
    api = replace_all(api, "@DOC@", doc.substr(1, doc.size() - 2));
  }
  api = replace_all(api, "@OUTDIRECT@", join(spec.outputs, [](const ApiTensor& t) { return t.direct ? "1" : "0"; }));
  api = replace_all(api, "@ARENA@", std::to_string(spec.arena_bytes));
  api = replace_all(api, "@WBYTES@", std::to_string(spec.weights_bytes));
  api = replace_all(api, "@FPRINT@", std::to_string(spec.fingerprint));
  api = replace_all(api, "@ABI@", std::to_string(kAbiVersion));
  api = replace_all(api, "@WFILE@", spec.weights_file);
  std::string weights_decl;
  if (spec.embed_weights) {
    // The blob is assembled into .rodata from the side file by .incbin.
    std::string sym = spec.name + "_hodu_weights";
    weights_decl = fmt::format(
        "__asm__(\".section .rodata\\n.balign 64\\n.hidden {0}\\n.globl {0}\\n{0}:\\n.incbin {1}\\n.previous\\n\");\n"
        "extern const unsigned char {0}[] __attribute__((visibility(\"hidden\")));\n#define hm_blob {0}\n",
        sym, replace_all(c_string_literal(spec.weights_file), "\"", "\\\""));
  }
  api = replace_all(api, "@WEIGHTS_DECL@", weights_decl);
  api = replace_all(api, "@STATICDIMS@",
                    spec.dynamic ? ""
                                 : "int @P@_num_dims(void) { return 0; }\n"
                                   "const char* @P@_dim_name(int k) { (void)k; return NULL; }\n"
                                   "const char* @P@_input_dim_name(int i, int d) { (void)i; (void)d; return NULL; }\n"
                                   "const char* @P@_output_dim_name(int i, int d) { (void)i; (void)d; return NULL; }\n"
                                   "size_t @P@_workspace_size(const int64_t* dims) { (void)dims; return @P@_instance_size(); }\n");
  if (spec.kernel_library) {
    api = replace_all(api, "@KFIELDS@",
                      spec.dynamic ? std::string("  hodu_kernels* kernels;\n")
                                   : fmt::format("  hodu_kernels* kernels;\n  hodu_kernel* ops[{}];\n",
                                                 std::max(spec.library_ops, 1)));
    api = replace_all(api, "@KPREPARE@", kKernelPrepare);
    api = replace_all(api, "@KCREATE@",
                      "  {\n    int st = hm_prepare_kernels(m, num_threads, errbuf, errbuf_size);\n"
                      "    if (st) {\n      hodu_kernels_destroy(m->kernels);\n      m->kernels = NULL;\n      return st;\n    }\n  }\n");
    api = replace_all(api, "@KDESTROY@", "  hodu_kernels_destroy(m->kernels);\n");
  } else {
    for (const char* k : {"@KFIELDS@", "@KPREPARE@", "@KCREATE@", "@KDESTROY@"}) api = replace_all(api, k, "");
  }
  std::string indecl, inset;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    indecl += fmt::format("  const void* in{};\n", i);
    inset += fmt::format("  in{0} = (const char*)inputs[{0}].data + inputs[{0}].byte_offset;\n", i);
  }
  for (size_t i = 0; i < spec.outputs.size(); ++i) {
    if (!spec.outputs[i].direct) continue;
    indecl += fmt::format("  unsigned char* o{};\n", i);
    inset += fmt::format(
        "  o{0} = outputs && outputs[{0}].data ? (unsigned char*)outputs[{0}].data + outputs[{0}].byte_offset : {1};\n",
        i, spec.dynamic ? "(unsigned char*)" + spec.outputs[i].data : fmt::format("A + {}", spec.outputs[i].arena_offset));
  }
  api = replace_all(api, "@INDECL@", indecl);
  api = replace_all(api, "@INSET@", inset);
  api = replace_all(api, "@NIN@", std::to_string(spec.inputs.size()));
  api = replace_all(api, "@NOUT@", std::to_string(spec.outputs.size()));
  api = substitute(api, spec);
  // The body last: it is generated text and must not be searched for placeholders.
  size_t at = api.find("@BODY@");
  api.replace(at, 6, spec.body);
  if (size_t p = api.find("@PREPARE_BODY@"); p != std::string::npos) api.replace(p, 14, spec.dynamic ? "" : spec.prepare);
  return s + shapes_decl + api;
}

std::string emit_main(const ApiSpec& spec) { return substitute(kMain, spec); }

}  // namespace hodu::compilers::c
