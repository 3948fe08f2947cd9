/* run_hodupkg: runs the prebuilt library of a .hodupkg on a machine without hodu (an aarch64
 * board, a container with only libc): reads the package's table of contents
 * (docs/hodupkg.md), loads the library for a target triple out of the package, maps the
 * package so the library reads the weights section in place, and runs the model on .npy files.
 *
 *   usage: run_hodupkg MODEL.hodupkg TRIPLE [-i NAME=x.npy]... [-o DIR]
 *   build: cc -std=gnu11 -O2 run_hodupkg.c -ldl -o run_hodupkg       (needs dlpack/dlpack.h)
 *
 * It checks the header, the sizes and every section's bounds, not the SHA-256 checksums (no
 * crypto library here): `hodu info MODEL.hodupkg` verifies those. A library built with
 * libhodu_kernels (the host target's default) needs that library beside it; cross targets
 * (portable kernels) need only libc and libm. The library is written to a temporary file
 * ($TMPDIR, else /tmp: it must allow executable mappings) that is removed once loaded.
 * Outputs: DIR/<name>.npy, names sanitized as `hodu run` does. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <dlpack/dlpack.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static void die(const char* fmt, const char* a, const char* b) {
  fprintf(stderr, "run_hodupkg: error: ");
  fprintf(stderr, fmt, a, b);
  fprintf(stderr, "\n");
  exit(1);
}

static uint32_t u32(const unsigned char* p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}
static uint64_t u64(const unsigned char* p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

/* The section called `name`: its bytes, or NULL. */
static const unsigned char* section(const unsigned char* pkg, uint64_t size, const char* name, uint64_t* bytes) {
  uint32_t n = u32(pkg + 20), i;
  for (i = 0; i < n; ++i) {
    const unsigned char* e = pkg + 128 + (uint64_t)i * 128;
    uint64_t off = u64(e + 56), len = u64(e + 64);
    if (strncmp((const char*)e, name, 48) != 0) continue;
    if (off > size || len > size - off) die("section %s lies outside the file%s", name, "");
    *bytes = len;
    return pkg + off;
  }
  return NULL;
}

/* The API prefix `hodu build` stamps into every library ("HODU_AOT_MODEL_NAME=<prefix>"). */
static void api_prefix(const unsigned char* lib, uint64_t size, char* out, size_t cap) {
  static const char tag[] = "HODU_AOT_MODEL_NAME=";
  const unsigned char* at = memmem(lib, size, tag, sizeof tag - 1);
  size_t k = 0;
  if (!at) die("the library has no API name tag: not built by hodu%s%s", "", "");
  at += sizeof tag - 1;
  while (at + k < lib + size && at[k] && k + 1 < cap) {
    out[k] = (char)at[k];
    ++k;
  }
  out[k] = 0;
}

typedef struct {
  int (*create_with_weights)(const void*, size_t, int, int, void**, char*, size_t);
  void (*destroy)(void*);
  int (*num_inputs)(void), (*num_outputs)(void);
  const char* (*input_name)(int);
  const char* (*output_name)(int);
  DLDataType (*input_dtype)(int);
  int (*input_ndim)(int);
  const int64_t* (*input_shape)(int);
  int (*run)(void*, const DLTensor*, int, DLTensor*, int);
  const DLTensor* (*output)(const void*, int);
  const char* (*last_error)(const void*);
} Api;

static void* symbol(void* lib, const char* prefix, const char* name) {
  char full[300];
  void* p;
  snprintf(full, sizeof full, "%s_%s", prefix, name);
  p = dlsym(lib, full);
  if (!p) die("the library has no %s%s", full, "");
  return p;
}

static size_t numel(int ndim, const int64_t* shape) {
  size_t n = 1;
  int d;
  for (d = 0; d < ndim; ++d) n *= (size_t)shape[d];
  return n;
}

/* An .npy file's data (after its header), checked to hold exactly `bytes` bytes. */
static void* read_npy(const char* path, size_t bytes) {
  FILE* f = fopen(path, "rb");
  unsigned char head[10];
  size_t header;
  long size;
  void* data;
  if (!f) die("cannot open %s%s", path, "");
  if (fread(head, 1, 10, f) != 10 || memcmp(head, "\x93NUMPY", 6) != 0) die("%s is not an .npy file%s", path, "");
  header = head[6] == 1 ? (size_t)(head[8] | head[9] << 8) + 10 : 0;
  if (head[6] != 1) die("%s: only .npy version 1 is read here%s", path, "");
  fseek(f, 0, SEEK_END);
  size = ftell(f);
  if (size < 0 || (size_t)size - header != bytes) die("%s does not hold the input's number of bytes%s", path, "");
  data = malloc(bytes ? bytes : 1);
  fseek(f, (long)header, SEEK_SET);
  if (fread(data, 1, bytes, f) != bytes) die("cannot read %s%s", path, "");
  fclose(f);
  return data;
}

static void write_npy(const char* path, const DLTensor* t) {
  char descr[8], dict[256], shape[160] = "";
  size_t len, pad, n = numel(t->ndim, t->shape);
  int d;
  FILE* f = fopen(path, "wb");
  if (!f) die("cannot write %s%s", path, "");
  snprintf(descr, sizeof descr, "%c%c%d", t->dtype.bits == 8 ? '|' : '<',
           t->dtype.code == kDLFloat ? 'f' : t->dtype.code == kDLUInt ? 'u' : t->dtype.code == 6 ? 'b' : 'i',
           t->dtype.bits / 8); /* code 6: kDLBool (DLPack >= 0.8) */
  for (d = 0; d < t->ndim; ++d)
    snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%lld,%s", (long long)t->shape[d],
             d + 1 < t->ndim ? " " : "");
  snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, shape);
  len = strlen(dict);
  pad = 64 - (10 + len + 1) % 64;
  fwrite("\x93NUMPY\x01\x00", 1, 8, f);
  fputc((int)((len + pad + 1) & 255), f);
  fputc((int)((len + pad + 1) >> 8), f);
  fwrite(dict, 1, len, f);
  for (; pad; --pad) fputc(' ', f);
  fputc('\n', f);
  fwrite((const char*)t->data + t->byte_offset, t->dtype.bits / 8, n, f);
  fclose(f);
}

int main(int argc, char** argv) {
  const char *path, *triple, *out_dir = ".";
  const char* feeds[64] = {0};
  int nfeeds = 0, a, i, fd, st;
  struct stat sb;
  unsigned char* pkg;
  const unsigned char *lib, *weights;
  uint64_t lib_bytes = 0, weights_bytes = 0;
  char name[64], prefix[128], tmp[4096], err[600] = "";
  void *handle, *model;
  Api api;
  DLTensor inputs[64];
  void* input_data[64];

  if (argc < 3) {
    fprintf(stderr, "usage: run_hodupkg MODEL.hodupkg TRIPLE [-i NAME=x.npy]... [-o DIR]\n");
    return 2;
  }
  path = argv[1];
  triple = argv[2];
  for (a = 3; a < argc; ++a) {
    if (!strcmp(argv[a], "-i") && a + 1 < argc && nfeeds < 64) feeds[nfeeds++] = argv[++a];
    else if (!strcmp(argv[a], "-o") && a + 1 < argc) out_dir = argv[++a];
    else die("unknown argument %s%s", argv[a], "");
  }

  /* The package, mapped: the weights section is read in place (4 KiB-aligned in the file). */
  fd = open(path, O_RDONLY);
  if (fd < 0 || fstat(fd, &sb) != 0) die("cannot open %s%s", path, "");
  if (sb.st_size < 128) die("%s is too small to be a package%s", path, "");
  pkg = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (pkg == MAP_FAILED) die("cannot map %s%s", path, "");
  if (memcmp(pkg, "HODUPKG", 8) != 0) die("%s is not a .hodupkg package%s", path, "");
  if (u32(pkg + 8) != 1) die("%s: package format version is not 1%s", path, "");
  if (u64(pkg + 40) != (uint64_t)sb.st_size) die("%s is truncated or has bytes after its end%s", path, "");
  if (u32(pkg + 12) & 0xFFFF) die("%s uses features this reader does not know%s", path, "");
  if ((uint64_t)u32(pkg + 20) * 128 + 128 > (uint64_t)sb.st_size) die("%s: corrupt table of contents%s", path, "");
  snprintf(name, sizeof name, "lib/%s", triple);
  lib = section(pkg, (uint64_t)sb.st_size, name, &lib_bytes);
  if (!lib) die("%s has no library for %s", path, triple);
  weights = section(pkg, (uint64_t)sb.st_size, "weights", &weights_bytes);
  if (!weights) die("%s has no weights section%s", path, "");
  api_prefix(lib, lib_bytes, prefix, sizeof prefix);

  /* The library: written to a temporary file, loaded, and the file removed (the mapping stays). */
  snprintf(tmp, sizeof tmp, "%s/run_hodupkg-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  fd = mkstemp(tmp);
  if (fd < 0 || write(fd, lib, lib_bytes) != (ssize_t)lib_bytes) die("cannot write %s%s", tmp, "");
  close(fd);
  handle = dlopen(tmp, RTLD_NOW | RTLD_LOCAL);
  unlink(tmp);
  if (!handle) die("cannot load the library: %s%s", dlerror(), "");
  *(void**)&api.create_with_weights = symbol(handle, prefix, "create_with_weights");
  *(void**)&api.destroy = symbol(handle, prefix, "destroy");
  *(void**)&api.num_inputs = symbol(handle, prefix, "num_inputs");
  *(void**)&api.num_outputs = symbol(handle, prefix, "num_outputs");
  *(void**)&api.input_name = symbol(handle, prefix, "input_name");
  *(void**)&api.output_name = symbol(handle, prefix, "output_name");
  *(void**)&api.input_dtype = symbol(handle, prefix, "input_dtype");
  *(void**)&api.input_ndim = symbol(handle, prefix, "input_ndim");
  *(void**)&api.input_shape = symbol(handle, prefix, "input_shape");
  *(void**)&api.run = symbol(handle, prefix, "run");
  *(void**)&api.output = symbol(handle, prefix, "output");
  *(void**)&api.last_error = symbol(handle, prefix, "last_error");

  /* 1: <PREFIX>_WEIGHTS_MAPPED, the package is mapped and never written. */
  st = api.create_with_weights(weights, weights_bytes, 0, 1, &model, err, sizeof err);
  if (st) die("cannot create the model: %s%s", err, "");
  if (api.num_inputs() > 64) die("more than 64 inputs%s%s", "", "");
  for (i = 0; i < api.num_inputs(); ++i) {
    const char* in = api.input_name(i);
    const char* file = NULL;
    size_t len = strlen(in);
    for (a = 0; a < nfeeds; ++a)
      if (!strncmp(feeds[a], in, len) && feeds[a][len] == '=') file = feeds[a] + len + 1;
    if (!file) die("missing input %s: give it with -i %s=x.npy", in, in);
    memset(&inputs[i], 0, sizeof inputs[i]);
    inputs[i].device.device_type = kDLCPU;
    inputs[i].dtype = api.input_dtype(i);
    inputs[i].ndim = api.input_ndim(i);
    inputs[i].shape = (int64_t*)api.input_shape(i);
    input_data[i] = read_npy(file, numel(inputs[i].ndim, inputs[i].shape) * inputs[i].dtype.bits / 8);
    inputs[i].data = input_data[i];
  }
  if (api.run(model, inputs, api.num_inputs(), NULL, 0)) die("run failed: %s%s", api.last_error(model), "");
  for (i = 0; i < api.num_outputs(); ++i) {
    char file[4096], clean[256];
    size_t k;
    snprintf(clean, sizeof clean, "%s", api.output_name(i)[0] ? api.output_name(i) : "output");
    for (k = 0; clean[k]; ++k)
      if (!((clean[k] >= 'a' && clean[k] <= 'z') || (clean[k] >= 'A' && clean[k] <= 'Z') ||
            (clean[k] >= '0' && clean[k] <= '9') || clean[k] == '.' || clean[k] == '_' || clean[k] == '-'))
        clean[k] = '_';
    snprintf(file, sizeof file, "%s/%s.npy", out_dir, clean);
    write_npy(file, api.output(model, i));
    fprintf(stderr, "wrote %s\n", file);
  }
  api.destroy(model);
  for (i = 0; i < api.num_inputs(); ++i) free(input_data[i]);
  munmap(pkg, (size_t)sb.st_size);
  return 0;
}
