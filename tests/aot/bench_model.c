/* Times model_run of a compiled model (inputs zero-filled except float ramps).
 * build: cc -O2 -I DIR bench_model.c DIR/libmodel.so -o bench; usage: bench [ITERS] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 10;
  DLTensor in[MODEL_NUM_INPUTS + 1];
  memset(in, 0, sizeof in);
  for (int i = 0; i < model_num_inputs(); ++i) {
    size_t n = 1;
    for (int d = 0; d < model_input_ndim(i); ++d) n *= (size_t)model_input_shape(i)[d];
    in[i].data = calloc(n ? n : 1, model_input_dtype(i).bits / 8);
    if (model_input_dtype(i).code == kDLFloat && model_input_dtype(i).bits == 32)
      for (size_t k = 0; k < n; ++k) ((float*)in[i].data)[k] = (float)(k % 255) / 255.f;
    in[i].device.device_type = kDLCPU;
    in[i].ndim = model_input_ndim(i);
    in[i].dtype = model_input_dtype(i);
    in[i].shape = (int64_t*)model_input_shape(i);
  }
  model_t* m;
  char err[256];
  double t0 = now();
  if (model_create_ex(NULL, &m, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
  double t1 = now();
  if (model_run(m, in, model_num_inputs(), NULL, 0)) { fprintf(stderr, "%s\n", model_last_error(m)); return 1; }
  double t2 = now(), best = 1e30, total = 0;
  for (int k = 0; k < iters; ++k) {
    double a = now();
    model_run(m, in, model_num_inputs(), NULL, 0);
    double d = now() - a;
    total += d;
    if (d < best) best = d;
  }
  printf("create %.1f ms, first run %.1f ms, mean %.1f ms, min %.1f ms over %d runs\n", (t1 - t0) * 1e3,
         (t2 - t1) * 1e3, total / iters * 1e3, best * 1e3, iters);
  model_destroy(m);
  return 0;
}
