/* A client of a model with free dims (tests/aot/make_test_model.py's CNN with its input
 * [batch, 3, h, w]) that knows only model.h: the dims API, one instance running several
 * sizes (output shapes per run), an instance in caller memory of model_workspace_size()
 * bytes, which runs without allocating (COUNT_MALLOC) and refuses a size needing more.
 * usage: dynamic_api_test */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

#include "count_malloc.h"

#define CHECK(cond, ...)                                       \
  do {                                                         \
    if (!(cond)) {                                             \
      fprintf(stderr, "dynamic_api_test: FAILED %s: ", #cond); \
      fprintf(stderr, __VA_ARGS__);                            \
      fprintf(stderr, "\n");                                   \
      exit(1);                                                 \
    }                                                          \
  } while (0)

/* Runs input [n, 3, h, w] (a fixed ramp) and returns a copy of output 0 (its shape in shape0). */
static float* run(model_t* m, int64_t n, int64_t h, int64_t w, int64_t* shape0, int* status) {
  int64_t shape[4] = {n, 3, h, w};
  size_t count = (size_t)(n * 3 * h * w), k, out;
  float* x = (float*)calloc(count, sizeof(float));
  float* copy;
  DLTensor in, outs[MODEL_NUM_OUTPUTS];
  for (k = 0; k < count; ++k) x[k] = (float)((k * 7919) % 201) / 100.f - 1.f;
  memset(&in, 0, sizeof in);
  memset(outs, 0, sizeof outs);
  in.data = x;
  in.device.device_type = kDLCPU;
  in.ndim = 4;
  in.dtype = model_input_dtype(0);
  in.shape = shape;
#ifdef COUNT_MALLOC
  counting = 1;
#endif
  *status = model_run(m, &in, 1, outs, MODEL_NUM_OUTPUTS);
#ifdef COUNT_MALLOC
  counting = 0;
#endif
  free(x);
  if (*status != MODEL_OK) return NULL;
  CHECK(outs[0].ndim == 2 && outs[0].shape[0] == n && outs[0].shape[1] == 10, "output 0 is [n, 10]");
  CHECK(outs[1].ndim == 4 && outs[1].shape[0] == n && outs[1].shape[1] == 8 && outs[1].shape[2] == h &&
            outs[1].shape[3] == w, "output 1 is [n, 8, h, w], got [%lld, %lld, %lld, %lld]", (long long)outs[1].shape[0],
        (long long)outs[1].shape[1], (long long)outs[1].shape[2], (long long)outs[1].shape[3]);
  out = (size_t)(outs[0].shape[0] * outs[0].shape[1]);
  copy = (float*)malloc(out * sizeof(float));
  memcpy(copy, outs[0].data, out * sizeof(float));
  shape0[0] = outs[0].shape[0];
  shape0[1] = outs[0].shape[1];
  return copy;
}

int main(void) {
  int64_t small[3] = {1, 16, 16}, big[3] = {3, 40, 24}, huge[3] = {8, 96, 96}, tiny[3] = {1, 1, 1};
  int64_t shape[2];
  size_t ws_small, ws_big;
  int st;
  model_t *a = NULL, *b = NULL;
  char err[300];
  float *a_small, *a_big, *b_small, *b_big;
  void* memory;

  CHECK(MODEL_NUM_DIMS == 3 && model_num_dims() == 3, "three free dims");
  CHECK(!strcmp(model_dim_name(0), "batch") && !strcmp(model_dim_name(1), "h") && !strcmp(model_dim_name(2), "w"),
        "dims named batch, h, w");
  CHECK(model_dim_name(3) == NULL, "no fourth dim");
  CHECK(model_input_shape(0)[0] == -1 && model_input_shape(0)[1] == 3 && model_input_shape(0)[2] == -1,
        "free dims are -1 in the input shape");
  CHECK(model_input_dim_name(0, 0) && !strcmp(model_input_dim_name(0, 0), "batch"), "input dim 0 is batch");
  CHECK(model_input_dim_name(0, 1) == NULL, "input dim 1 is fixed");
  CHECK(model_output_shape(0)[0] == -1 && model_output_shape(0)[1] == 10, "output 0 declared [-1, 10]");
  CHECK(model_output_dim_name(0, 0) && !strcmp(model_output_dim_name(0, 0), "batch"), "output dim 0 is batch");

  ws_small = model_workspace_size(small);
  ws_big = model_workspace_size(big);
  CHECK(ws_small > model_instance_size() && ws_big > ws_small, "workspace %zu for 1x16x16, %zu for 3x40x24", ws_small,
        ws_big);
  CHECK(model_workspace_size(tiny) == 0, "1x1 images are too small for the max pool");
  CHECK(model_workspace_size(NULL) == 0, "no dims");

  /* One instance (the library's memory) at several sizes, back and forth. */
  CHECK(model_create_ex(NULL, &a, err, sizeof err) == MODEL_OK, "%s", err);
  a_small = run(a, 1, 16, 16, shape, &st);
  CHECK(a_small, "run 1x16x16: %s", model_last_error(a));
  a_big = run(a, 3, 40, 24, shape, &st);
  CHECK(a_big && shape[0] == 3, "run 3x40x24: %s", model_last_error(a));
  free(run(a, 2, 7, 9, shape, &st));
  CHECK(st == MODEL_OK, "run 2x7x9: %s", model_last_error(a));
  {
    float* again = run(a, 1, 16, 16, shape, &st);
    CHECK(again && !memcmp(again, a_small, 10 * sizeof(float)), "1x16x16 again gives the same result");
    free(again);
  }
  /* Bad input: a fixed dim. */
  {
    int64_t bad[4] = {1, 4, 16, 16};
    float x[4 * 16 * 16] = {0};
    DLTensor in;
    memset(&in, 0, sizeof in);
    in.data = x;
    in.device.device_type = kDLCPU;
    in.ndim = 4;
    in.dtype = model_input_dtype(0);
    in.shape = bad;
    CHECK(model_run(a, &in, 1, NULL, 0) == MODEL_ERR_INVALID_ARGUMENT && strstr(model_last_error(a), "dim 1 is 4"),
          "channels 4: %s", model_last_error(a));
  }

  /* An instance in caller memory sized for the big shape: no allocation while running. */
  memory = malloc(ws_big);
  CHECK(model_create_in(memory, ws_big, NULL, &b, err, sizeof err) == MODEL_OK, "%s", err);
#ifdef COUNT_MALLOC
  allocations = 0; /* the other instance grew its arena while running: it was made by the library */
#endif
  b_big = run(b, 3, 40, 24, shape, &st);
  CHECK(b_big, "create_in run 3x40x24: %s", model_last_error(b));
  b_small = run(b, 1, 16, 16, shape, &st);
  CHECK(b_small, "create_in run 1x16x16: %s", model_last_error(b));
  CHECK(!memcmp(a_small, b_small, 10 * sizeof(float)) && !memcmp(a_big, b_big, 30 * sizeof(float)),
        "both instances agree");
  free(run(b, huge[0], huge[1], huge[2], shape, &st));
  CHECK(st == MODEL_ERR_OUT_OF_MEMORY && strstr(model_last_error(b), "model_workspace_size"),
        "a bigger shape than the memory: status %d, %s", st, model_last_error(b));
  free(run(b, 1, 16, 16, shape, &st));
  CHECK(st == MODEL_OK, "the instance still runs after refusing a size: %s", model_last_error(b));
#ifdef COUNT_MALLOC
  CHECK(allocations == 0, "%d allocations while running (the run path allocates nothing in caller memory)",
        allocations);
  printf("no allocation in model_run\n");
#endif
  model_destroy(b);
  model_destroy(a);
  free(memory);
  free(a_small);
  free(a_big);
  free(b_small);
  free(b_big);
  printf("dynamic_api_test: ok\n");
  return 0;
}
