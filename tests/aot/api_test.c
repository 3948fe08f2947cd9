/* A client of a compiled model that knows only model.h: checks the C API
 * (ABI version, metadata, caller- and library-owned outputs, errors,
 * create_in without malloc) and, with THREADS > 1, that instances run
 * concurrently with the same results.  usage: api_test [THREADS] */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

#include "count_malloc.h"

#define CHECK(cond, ...)                                   \
  do {                                                     \
    if (!(cond)) {                                         \
      fprintf(stderr, "api_test: FAILED %s: ", #cond);     \
      fprintf(stderr, __VA_ARGS__);                        \
      fprintf(stderr, "\n");                               \
      exit(1);                                             \
    }                                                      \
  } while (0)

static size_t numel(int ndim, const int64_t* shape) {
  size_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= (size_t)shape[d];
  return n;
}

static DLTensor inputs[MODEL_NUM_INPUTS + 1];
static void* input_data[MODEL_NUM_INPUTS + 1];
static void* reference[MODEL_NUM_OUTPUTS + 1];

static void make_inputs(void) {
  for (int i = 0; i < model_num_inputs(); ++i) {
    DLDataType t = model_input_dtype(i);
    size_t n = numel(model_input_ndim(i), model_input_shape(i));
    input_data[i] = calloc(n ? n : 1, t.bits / 8);
    for (size_t k = 0; k < n; ++k) {
      if (t.code == kDLFloat && t.bits == 32) ((float*)input_data[i])[k] = (float)((k * 7919) % 201) / 100.f - 1.f;
      else if (t.code == kDLInt && t.bits == 64) ((int64_t*)input_data[i])[k] = (int64_t)(k % 3);
    }
    inputs[i].data = input_data[i];
    inputs[i].device.device_type = kDLCPU;
    inputs[i].ndim = model_input_ndim(i);
    inputs[i].dtype = t;
    inputs[i].shape = (int64_t*)model_input_shape(i);
  }
}

static size_t output_bytes(int i) {
  return numel(model_output_ndim(i), model_output_shape(i)) * (model_output_dtype(i).bits / 8);
}

/* One instance, `iters` runs, each compared with the reference. */
static void* worker(void* arg) {
  int iters = (int)(intptr_t)arg;
  model_t* m = NULL;
  CHECK(model_create(NULL, &m) == MODEL_OK && m, "create");
  for (int it = 0; it < iters; ++it) {
    DLTensor out[MODEL_NUM_OUTPUTS + 1];
    memset(out, 0, sizeof out);
    CHECK(model_run(m, inputs, model_num_inputs(), out, model_num_outputs()) == MODEL_OK, "%s", model_last_error(m));
    for (int i = 0; i < model_num_outputs(); ++i)
      CHECK(memcmp(out[i].data, reference[i], output_bytes(i)) == 0, "output %d differs across threads", i);
  }
  model_destroy(m);
  return NULL;
}

int main(int argc, char** argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 1;
  CHECK(model_abi_version() == MODEL_ABI_VERSION, "abi %d", model_abi_version());
  CHECK(model_num_inputs() == MODEL_NUM_INPUTS && model_num_outputs() == MODEL_NUM_OUTPUTS, "counts");
  CHECK(model_input_name(model_num_inputs()) == NULL && model_output_shape(-1) == NULL, "out-of-range queries");
  CHECK(strcmp(model_status_string(MODEL_ERR_INVALID_ARGUMENT), "invalid argument") == 0, "status string");
  make_inputs();

  /* Library-owned outputs, then caller-owned outputs: the same numbers. */
  model_t* m = NULL;
  CHECK(model_create(NULL, &m) == MODEL_OK, "create");
  DLTensor out[MODEL_NUM_OUTPUTS + 1];
  memset(out, 0, sizeof out);
  CHECK(model_run(m, inputs, model_num_inputs(), out, model_num_outputs()) == MODEL_OK, "%s", model_last_error(m));
  for (int i = 0; i < model_num_outputs(); ++i) {
    CHECK(out[i].data == model_output(m, i)->data, "library-owned output %d", i);
    reference[i] = malloc(output_bytes(i) + 1);
    memcpy(reference[i], out[i].data, output_bytes(i));
  }
  DLTensor mine[MODEL_NUM_OUTPUTS + 1];
  void* mine_data[MODEL_NUM_OUTPUTS + 1];
  for (int i = 0; i < model_num_outputs(); ++i) {
    mine_data[i] = calloc(1, output_bytes(i) + 1);
    mine[i] = out[i];
    mine[i].data = mine_data[i];
  }
  CHECK(model_run(m, inputs, model_num_inputs(), mine, model_num_outputs()) == MODEL_OK, "%s", model_last_error(m));
  for (int i = 0; i < model_num_outputs(); ++i)
    CHECK(memcmp(mine_data[i], reference[i], output_bytes(i)) == 0, "caller-owned output %d", i);

  /* Errors: wrong count, wrong shape, wrong dtype — a status and a message, never a crash. */
  CHECK(model_run(m, inputs, model_num_inputs() + 1, NULL, 0) == MODEL_ERR_INVALID_ARGUMENT, "count");
  CHECK(strstr(model_last_error(m), "inputs") != NULL, "message: %s", model_last_error(m));
  if (model_num_inputs() > 0 && model_input_ndim(0) > 0) {
    int64_t bad[16];
    memcpy(bad, model_input_shape(0), sizeof(int64_t) * (size_t)model_input_ndim(0));
    bad[0] += 1;
    DLTensor wrong[MODEL_NUM_INPUTS + 1];
    memcpy(wrong, inputs, sizeof wrong);
    wrong[0].shape = bad;
    CHECK(model_run(m, wrong, model_num_inputs(), NULL, 0) == MODEL_ERR_INVALID_ARGUMENT, "shape");
    CHECK(strstr(model_last_error(m), model_input_name(0)) != NULL, "message names the input: %s", model_last_error(m));
    wrong[0].shape = inputs[0].shape;
    wrong[0].dtype.bits = 16;
    CHECK(model_run(m, wrong, model_num_inputs(), NULL, 0) == MODEL_ERR_INVALID_ARGUMENT, "dtype");
  }
  model_destroy(m);

  /* create_in: the caller's memory, no malloc. */
  size_t size = model_instance_size();
  void* memory = malloc(size);
  char err[256];
  CHECK(model_create_in(memory, size - 1, NULL, &m, err, sizeof err) == MODEL_ERR_INVALID_ARGUMENT && m == NULL, "small");
  CHECK(model_create_in(memory, size, NULL, &m, err, sizeof err) == MODEL_OK, "%s", err);
#ifdef COUNT_MALLOC
  counting = 1;
#endif
  CHECK(model_run(m, inputs, model_num_inputs(), mine, model_num_outputs()) == MODEL_OK, "%s", model_last_error(m));
#ifdef COUNT_MALLOC
  counting = 0;
  CHECK(allocations == 0, "create_in + run allocated %d times", allocations);
  printf("api_test: model_run made no allocation\n");
#endif
  for (int i = 0; i < model_num_outputs(); ++i)
    CHECK(memcmp(mine_data[i], reference[i], output_bytes(i)) == 0, "create_in output %d", i);
  model_destroy(m);
  free(memory);

  /* Concurrent instances. */
  if (threads > 1) {
    pthread_t t[64];
    if (threads > 64) threads = 64;
    for (int k = 0; k < threads; ++k) CHECK(pthread_create(&t[k], NULL, worker, (void*)(intptr_t)3) == 0, "thread");
    for (int k = 0; k < threads; ++k) pthread_join(t[k], NULL);
  }
  for (int i = 0; i < model_num_inputs(); ++i) free(input_data[i]);
  for (int i = 0; i < model_num_outputs(); ++i) {
    free(reference[i]);
    free(mine_data[i]);
  }
  printf("api_test: ok (%d inputs, %d outputs, %d threads)\n", model_num_inputs(), model_num_outputs(), threads);
  return 0;
}
