/* hodu kernel library, window section: N-D pooling of any rank and kind (MaxPool with its
 * Indices output, AveragePool, LpPool) outside the float32 1-D/2-D fast path. Doubles in
 * and out; sizes given at run time; no allocation. A C port of hodu's reference interpreter
 * (src/engines/interp/ops/nn_pool.cc). Needs <math.h>, <stdint.h> and the generic section. */

/* y [planes, out...] = the windows of x [planes, in...]. kind: 0 max, 1 average, 2 Lp (p).
 * ind (max only, may be NULL): the flat index of each maximum in x (col_major: its spatial
 * part in column-major order, as storage_order 1 asks). Returns 1 on more than 8 dims. */
HK int hk_pool_nd(const double* x, double* y, int64_t* ind, int64_t planes, int64_t nd, const int64_t* in,
                  const int64_t* out, const int64_t* kernel, const int64_t* strides, const int64_t* dil,
                  const int64_t* pb, const int64_t* pe, int kind, int include_pad, double p, int col_major) {
  int64_t st[8], cm[8], o[8], k[8], ins = 1, outs = 1, kk = 1, q, op, kf, d;
  if (nd < 1 || nd > 8) return 1;
  for (d = 0; d < nd; ++d) ins *= in[d], outs *= out[d], kk *= kernel[d];
  hk_strides(nd, in, st);
  cm[0] = 1;
  for (d = 1; d < nd; ++d) cm[d] = cm[d - 1] * in[d - 1];
  for (q = 0; q < planes; ++q) {
    const double* xp = x + q * ins;
    for (op = 0; op < outs; ++op) {
      int64_t rem = op, count = 0, pad_count = 0, best_idx = -1;
      double acc = 0, best = 0, v;
      int found = 0;
      for (d = nd; d-- > 0;) o[d] = rem % out[d], rem /= out[d];
      for (kf = 0; kf < kk; ++kf) {
        int64_t r2 = kf, off = 0, flat = 0;
        int inside = 1, in_padded = 1;
        for (d = nd; d-- > 0;) k[d] = r2 % kernel[d], r2 /= kernel[d];
        for (d = 0; d < nd; ++d) {
          int64_t i = o[d] * strides[d] - pb[d] + k[d] * dil[d];
          if (i < 0 || i >= in[d]) inside = 0;
          if (i < -pb[d] || i >= in[d] + pe[d]) in_padded = 0;
          off += i * st[d];
          flat += i * cm[d];
        }
        pad_count += in_padded;
        if (!inside) continue;
        v = xp[off];
        if (kind == 0) {
          if (v != v) continue;
          if (!found || v > best) best = v, found = 1, best_idx = q * ins + (col_major ? flat : off);
        } else if (kind == 1) {
          acc += v, ++count;
        } else {
          acc += pow(fabs(v), p);
        }
      }
      if (kind == 0) y[q * outs + op] = found ? best : NAN;
      else if (kind == 1) {
        int64_t div = include_pad ? pad_count : count;
        y[q * outs + op] = div > 0 ? acc / (double)div : NAN;
      } else {
        y[q * outs + op] = pow(acc, 1.0 / p);
      }
      if (ind) ind[q * outs + op] = best_idx;
    }
  }
  return 0;
}
