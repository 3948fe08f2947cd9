/* hodu kernel library, generic section: the ops a compiled model runs outside the hot
 * path, with sizes given at run time. Floats are computed in double (the generated code
 * converts other float types around a call), integers in int64 (sums and products wrap
 * as numpy's do); data movement is by element size. Semantics follow hodu's reference
 * interpreter (src/engines/interp/ops), which follows ONNX's numpy reference. Kernels that
 * can fail on data (an index out of range) return non-zero. Needs the dtype section. */

/* ---- offsets -------------------------------------------------------------------------- */

/* Row-major strides of dims. */
HK void hk_strides(int64_t rank, const int64_t* dims, int64_t* st) {
  int64_t d, s = 1;
  for (d = rank; d-- > 0;) {
    st[d] = s;
    s *= dims[d];
  }
}

/* Offsets (in elements of x, row-major dims) of the elements a reduction over the dims
 * flagged in `reduced` combines: out_off[o] for each output element (kept dims in order),
 * red_off[j] for each element of one group. Returns the group size. */
HK int64_t hk_reduce_offsets(int64_t rank, const int64_t* dims, const int64_t* reduced, int64_t* out_off,
                             int64_t* red_off) {
  int64_t st[16], idx[16], d, n_out = 1, n_red = 1, i;
  hk_strides(rank, dims, st);
  for (d = 0; d < rank; ++d) {
    if (reduced[d]) n_red *= dims[d];
    else n_out *= dims[d];
  }
  for (int pass = 0; pass < 2; ++pass) {
    int64_t count = pass ? n_red : n_out, off = 0;
    int64_t* out = pass ? red_off : out_off;
    for (d = 0; d < rank; ++d) idx[d] = 0;
    for (i = 0; i < count; ++i) {
      out[i] = off;
      for (d = rank; d-- > 0;) {
        if ((reduced[d] != 0) != pass) continue;
        if (++idx[d] < dims[d]) {
          off += st[d];
          break;
        }
        off -= st[d] * (dims[d] - 1);
        idx[d] = 0;
      }
    }
  }
  return n_red;
}

/* The dims an axes tensor names, as 0/1 flags (rank entries); 0 when an axis is out of range
 * or repeated. No axes: every dim unless noop (then none). */
HK int hk_axes_flags(int64_t rank, const void* axes, int is32, int64_t n, int noop, int64_t* flags) {
  int64_t d, i;
  for (d = 0; d < rank; ++d) flags[d] = n == 0 && !noop;
  for (i = 0; i < n; ++i) {
    int64_t a = is32 ? ((const int32_t*)axes)[i] : ((const int64_t*)axes)[i];
    if (a < 0) a += rank;
    if (a < 0 || a >= rank || flags[a]) return 1;
    flags[a] = 1;
  }
  return 0;
}

/* The output dims of a reduction over the flagged dims (kept as 1, or dropped). */
HK void hk_reduce_dims(int64_t rank, const int64_t* dims, const int64_t* flags, int keep, int64_t* out) {
  int64_t d, k = 0;
  for (d = 0; d < rank; ++d)
    if (!flags[d]) out[k++] = dims[d];
    else if (keep) out[k++] = 1;
}

/* ---- reductions ---------------------------------------------------------------------- */

enum { HK_R_SUM, HK_R_MEAN, HK_R_MAX, HK_R_MIN, HK_R_PROD, HK_R_L1, HK_R_L2, HK_R_LOGSUM, HK_R_LOGSUMEXP, HK_R_SUMSQ };

/* y[o] = op over x[out_off[o] + red_off[j]] (doubles). */
HK void hk_reduce_f64(const double* x, double* y, int64_t n_out, int64_t n_red, const int64_t* out_off,
                      const int64_t* red_off, int op) {
  int64_t o, j;
  for (o = 0; o < n_out; ++o) {
    const double* p = x + out_off[o];
    double acc = 0, m;
    switch (op) {
      case HK_R_MAX: case HK_R_MIN:
        m = op == HK_R_MAX ? -INFINITY : INFINITY;
        for (j = 0; j < n_red; ++j) {
          double v = p[red_off[j]];
          if (v != v) { m = v; break; }
          if (op == HK_R_MAX ? v > m : v < m) m = v;
        }
        y[o] = m;
        continue;
      case HK_R_PROD:
        acc = 1;
        for (j = 0; j < n_red; ++j) acc *= p[red_off[j]];
        y[o] = acc;
        continue;
      case HK_R_LOGSUMEXP:
        if (n_red == 0) { y[o] = -INFINITY; continue; }
        m = -INFINITY;
        for (j = 0; j < n_red; ++j) m = p[red_off[j]] > m ? p[red_off[j]] : m;
        if (isinf(m)) {
          for (j = 0; j < n_red; ++j) acc += exp(p[red_off[j]]);
          y[o] = log(acc);
        } else {
          for (j = 0; j < n_red; ++j) acc += exp(p[red_off[j]] - m);
          y[o] = log(acc) + m;
        }
        continue;
      default: break;
    }
    for (j = 0; j < n_red; ++j) {
      double v = p[red_off[j]];
      acc += op == HK_R_L1 ? fabs(v) : op == HK_R_L2 || op == HK_R_SUMSQ ? v * v : v;
    }
    y[o] = op == HK_R_MEAN ? acc / (double)n_red : op == HK_R_L2 ? sqrt(acc) : op == HK_R_LOGSUM ? log(acc) : acc;
  }
}

/* The same over int64 values (wrapping sums and products; unsigned: values as uint64). */
HK void hk_reduce_i64(const int64_t* x, int64_t* y, int64_t n_out, int64_t n_red, const int64_t* out_off,
                      const int64_t* red_off, int op, int is_unsigned) {
  int64_t o, j;
  for (o = 0; o < n_out; ++o) {
    const int64_t* p = x + out_off[o];
    uint64_t acc = 0;
    double dacc = 0;
    int64_t m;
    switch (op) {
      case HK_R_MAX: case HK_R_MIN:
        if (is_unsigned) {
          uint64_t um = op == HK_R_MAX ? 0 : UINT64_MAX;
          for (j = 0; j < n_red; ++j) {
            uint64_t v = (uint64_t)p[red_off[j]];
            if (op == HK_R_MAX ? v > um : v < um) um = v;
          }
          y[o] = (int64_t)um;
          continue;
        }
        m = op == HK_R_MAX ? INT64_MIN : INT64_MAX;
        for (j = 0; j < n_red; ++j) {
          int64_t v = p[red_off[j]];
          if (op == HK_R_MAX ? v > m : v < m) m = v;
        }
        y[o] = m;
        continue;
      case HK_R_PROD:
        acc = 1;
        for (j = 0; j < n_red; ++j) acc *= (uint64_t)p[red_off[j]];
        y[o] = (int64_t)acc;
        continue;
      case HK_R_L2: case HK_R_LOGSUM: case HK_R_LOGSUMEXP:
        for (j = 0; j < n_red; ++j) {
          double v = is_unsigned ? (double)(uint64_t)p[red_off[j]] : (double)p[red_off[j]];
          dacc += op == HK_R_LOGSUMEXP ? exp(v) : op == HK_R_L2 ? v * v : v;
        }
        dacc = op == HK_R_L2 ? sqrt(dacc) : log(dacc);
        y[o] = isfinite(dacc) ? (int64_t)dacc : 0;
        continue;
      default: break;
    }
    for (j = 0; j < n_red; ++j) {
      uint64_t v = (uint64_t)p[red_off[j]];
      if (op == HK_R_L1 && !is_unsigned && p[red_off[j]] < 0) v = 0 - v;
      acc += op == HK_R_SUMSQ ? v * v : v;
    }
    if (op == HK_R_MEAN) {
      if (n_red == 0) y[o] = 0;
      else y[o] = is_unsigned ? (int64_t)(acc / (uint64_t)n_red) : (int64_t)acc / n_red;
    } else {
      y[o] = (int64_t)acc;
    }
  }
}

/* ArgMax/ArgMin over the middle dim of [outer, n, inner] doubles (NaN wins, as numpy's). */
HK void hk_argreduce_f64(const double* x, int64_t* y, int64_t outer, int64_t n, int64_t inner, int is_min,
                         int select_last) {
  int64_t o, i, k;
  for (o = 0; o < outer; ++o)
    for (i = 0; i < inner; ++i) {
      const double* p = x + o * n * inner + i;
      int64_t best = 0;
      double bv = p[0];
      for (k = 1; k < n; ++k) {
        double v = p[k * inner];
        int vn = v != v, bn = bv != bv, better, equal;
        if (vn || bn) {
          better = vn && !bn;
          equal = vn && bn;
        } else {
          better = is_min ? v < bv : v > bv;
          equal = v == bv;
        }
        if (better || (select_last && equal)) {
          best = k;
          bv = v;
        }
      }
      y[o * inner + i] = best;
    }
}

/* CumSum/CumProd over the middle dim of [outer, n, inner]: doubles, or int64 wrapping. */
HK void hk_cumulate(const void* x, void* y, int64_t outer, int64_t n, int64_t inner, int exclusive, int reverse,
                    int prod, int is_int) {
  int64_t o, i, c;
  for (o = 0; o < outer; ++o)
    for (i = 0; i < inner; ++i) {
      double acc = prod ? 1 : 0;
      uint64_t iacc = prod ? 1 : 0;
      for (c = 0; c < n; ++c) {
        int64_t k = reverse ? n - 1 - c : c, at = (o * n + k) * inner + i;
        if (is_int) {
          uint64_t v = (uint64_t)((const int64_t*)x)[at];
          if (exclusive) ((int64_t*)y)[at] = (int64_t)iacc;
          iacc = prod ? iacc * v : iacc + v;
          if (!exclusive) ((int64_t*)y)[at] = (int64_t)iacc;
        } else {
          double v = ((const double*)x)[at];
          if (exclusive) ((double*)y)[at] = acc;
          acc = prod ? acc * v : acc + v;
          if (!exclusive) ((double*)y)[at] = acc;
        }
      }
    }
}

/* Softmax (kind 0), LogSoftmax (1), Hardmax (2) over the middle dim of [outer, n, inner]. */
HK void hk_softmax_f64(const double* x, double* y, int64_t outer, int64_t n, int64_t inner, int kind) {
  int64_t o, i, k;
  for (o = 0; o < outer; ++o)
    for (i = 0; i < inner; ++i) {
      const double* p = x + o * n * inner + i;
      double* q = y + o * n * inner + i;
      double m, sum = 0;
      int64_t am = 0;
      if (n == 0) continue;
      m = p[0];
      for (k = 1; k < n; ++k)
        if (p[k * inner] > m || (p[k * inner] != p[k * inner] && m == m)) {
          m = p[k * inner];
          am = k;
        }
      if (kind == 2) {
        for (k = 0; k < n; ++k) q[k * inner] = k == am ? 1 : 0;
        continue;
      }
      for (k = 0; k < n; ++k) sum += exp(p[k * inner] - m);
      for (k = 0; k < n; ++k) q[k * inner] = kind == 0 ? exp(p[k * inner] - m) / sum : p[k * inner] - m - log(sum);
    }
}

/* Whether element (vi, index ii) comes before (vj, ij) in TopK's order: NaN is the largest
 * value (numpy), ties keep the lower index first. */
HK int hk_topk_before(double vi, int64_t ii, double vj, int64_t ij, int largest) {
  int ni = vi != vi, nj = vj != vj;
  int i_less = ni || nj ? !ni && nj : vi < vj, j_less = ni || nj ? !nj && ni : vj < vi;
  if (largest ? j_less : i_less) return 1;
  if (largest ? i_less : j_less) return 0;
  return ii < ij;
}

/* TopK over the middle dim of [outer, n, inner]: keys (doubles) ordered, values copied from
 * x (esize bytes each), int64 indices. work: n int64s. */
HK void hk_topk(const double* keys, const void* x, void* values, int64_t* indices, int64_t outer, int64_t n,
                int64_t inner, int64_t k, int largest, int64_t esize, int64_t* work) {
  int64_t o, i, a, b;
  for (o = 0; o < outer; ++o)
    for (i = 0; i < inner; ++i) {
      const double* p = keys + o * n * inner + i;
      for (a = 0; a < n; ++a) work[a] = a;
      for (a = 0; a < k; ++a) {  /* selection of the first k */
        int64_t best = a, t;
        for (b = a + 1; b < n; ++b)
          if (hk_topk_before(p[work[b] * inner], work[b], p[work[best] * inner], work[best], largest)) best = b;
        t = work[a];
        work[a] = work[best];
        work[best] = t;
      }
      for (a = 0; a < k; ++a) {
        int64_t at = (o * k + a) * inner + i;
        memcpy((char*)values + at * esize, (const char*)x + ((o * n + work[a]) * inner + i) * esize, (size_t)esize);
        indices[at] = work[a];
      }
    }
}

/* ---- normalizations (doubles) ---------------------------------------------------------- */

/* LayerNormalization (rms 0) / RMSNormalization (rms 1) over rows of `cols`: scale and bias
 * (NULL: none) of cols values; mean / invstd (NULL: not wanted) rounded to float unless
 * stash_f64. */
HK void hk_rows_norm(const double* x, const double* scale, const double* bias, double* y, double* mean,
                     double* invstd, int64_t rows, int64_t cols, double eps, int rms, int stash_f64) {
  int64_t i, k;
  for (i = 0; i < rows; ++i) {
    const double* p = x + i * cols;
    double mu = 0, q = 0, inv;
    if (!rms) {
      for (k = 0; k < cols; ++k) mu += p[k];
      mu /= (double)cols;
    }
    for (k = 0; k < cols; ++k) q += (p[k] - mu) * (p[k] - mu);
    inv = 1.0 / sqrt(q / (double)cols + eps);
    if (!stash_f64) {
      mu = (float)mu;
      inv = (float)inv;
    }
    if (mean) mean[i] = mu;
    if (invstd) invstd[i] = inv;
    for (k = 0; k < cols; ++k) y[i * cols + k] = (p[k] - mu) * inv * scale[k] + (bias ? bias[k] : 0);
  }
}

/* BatchNormalization (training: batch statistics, running ones out), InstanceNormalization
 * (per n and c), GroupNormalization: x [N, C, S]. */
HK void hk_batch_norm(const double* x, const double* scale, const double* bias, const double* mean,
                      const double* var, double* y, double* run_mean, double* run_var, int64_t N, int64_t C,
                      int64_t S, double eps, double momentum, int training) {
  int64_t n, c, k, cnt = N * S;
  for (c = 0; c < C; ++c) {
    double mu = mean[c], v = var[c], inv;
    if (training) {
      double s = 0, q = 0;
      for (n = 0; n < N; ++n)
        for (k = 0; k < S; ++k) s += x[(n * C + c) * S + k];
      mu = cnt ? s / (double)cnt : 0;
      for (n = 0; n < N; ++n)
        for (k = 0; k < S; ++k) q += (x[(n * C + c) * S + k] - mu) * (x[(n * C + c) * S + k] - mu);
      v = cnt ? q / (double)cnt : 0;
      if (run_mean) run_mean[c] = mean[c] * momentum + mu * (1 - momentum);
      if (run_var) run_var[c] = var[c] * momentum + v * (1 - momentum);
    }
    inv = 1.0 / sqrt(v + eps);
    for (n = 0; n < N; ++n)
      for (k = 0; k < S; ++k) y[(n * C + c) * S + k] = (x[(n * C + c) * S + k] - mu) * scale[c] * inv + bias[c];
  }
}

HK void hk_group_norm(const double* x, const double* scale, const double* bias, double* y, int64_t N, int64_t C,
                      int64_t S, int64_t groups, double eps, int per_group_params) {
  int64_t t, k, cg = C / groups, gsize = cg * S;
  for (t = 0; t < N * groups; ++t) {
    const double* p = x + t * gsize;
    double s = 0, q = 0, mu, inv;
    int64_t g = t % groups;
    for (k = 0; k < gsize; ++k) s += p[k];
    mu = s / (double)gsize;
    for (k = 0; k < gsize; ++k) q += (p[k] - mu) * (p[k] - mu);
    inv = 1.0 / sqrt(q / (double)gsize + eps);
    for (k = 0; k < gsize; ++k) {
      int64_t c = per_group_params ? g : g * cg + k / S;
      y[t * gsize + k] = (p[k] - mu) * inv * scale[c] + bias[c];
    }
  }
}

HK void hk_lrn(const double* x, double* y, int64_t N, int64_t C, int64_t S, int64_t size, double alpha, double beta,
               double bias) {
  int64_t t, k, j, lo = (size - 1) / 2, hi = (size - 1) - lo;
  for (t = 0; t < N * C; ++t) {
    int64_t n = t / C, c = t % C, c0 = c - lo < 0 ? 0 : c - lo, c1 = c + hi > C - 1 ? C - 1 : c + hi;
    for (k = 0; k < S; ++k) {
      double sq = 0;
      for (j = c0; j <= c1; ++j) sq += x[(n * C + j) * S + k] * x[(n * C + j) * S + k];
      y[t * S + k] = x[t * S + k] / pow(bias + alpha / (double)size * sq, beta);
    }
  }
}

/* MeanVarianceNormalization (kind 0) and LpNormalization (kind 1: p 1 or 2) over groups of
 * elements given by offsets (hk_reduce_offsets). */
HK void hk_group_normalize(const double* x, double* y, int64_t n_out, int64_t n_red, const int64_t* out_off,
                           const int64_t* red_off, int kind, int p) {
  int64_t o, j;
  for (o = 0; o < n_out; ++o) {
    const double* a = x + out_off[o];
    double* b = y + out_off[o];
    double s = 0, s2 = 0;
    for (j = 0; j < n_red; ++j) {
      double v = a[red_off[j]];
      if (kind == 0) {
        s += v;
        s2 += v * v;
      } else {
        s += p == 1 ? fabs(v) : v * v;
      }
    }
    if (kind == 0) {
      double mu = s / (double)n_red, var = s2 / (double)n_red - mu * mu, sd = sqrt(var > 0 ? var : 0) + 1e-9;
      for (j = 0; j < n_red; ++j) b[red_off[j]] = (a[red_off[j]] - mu) / sd;
    } else {
      double norm = p == 1 ? s : sqrt(s);
      for (j = 0; j < n_red; ++j) b[red_off[j]] = norm == 0 ? 0 : a[red_off[j]] / norm;
    }
  }
}

/* ---- losses ------------------------------------------------------------------------------ */

/* NegativeLogLikelihoodLoss (softmax 0) / SoftmaxCrossEntropyLoss (1): x [N, C, D], target
 * [N, D] int64; loss [N, D] (reduction 0 none) or one value (1 sum, 2 mean); logp (softmax,
 * NULL: not wanted) [N, C, D]. Returns non-zero on a target out of range. */
HK int hk_loss(const double* x, const int64_t* target, const double* weight, double* loss, double* logp,
               double* work, int64_t N, int64_t C, int64_t D, int reduction, int has_ignore, int64_t ignore,
               int softmax) {
  int64_t n, c, d;
  double total = 0, wsum = 0;
  double* lp = logp ? logp : work;
  for (n = 0; n < N * D; ++n) {
    int64_t t = target[n];
    if (!(has_ignore && t == ignore) && (t < 0 || t >= C)) return 1;
  }
  for (n = 0; n < N; ++n)
    for (d = 0; d < D; ++d) {
      double mx = -INFINITY, s = 0;
      if (!softmax) {
        for (c = 0; c < C; ++c) lp[(n * C + c) * D + d] = x[(n * C + c) * D + d];
        continue;
      }
      for (c = 0; c < C; ++c) mx = x[(n * C + c) * D + d] > mx ? x[(n * C + c) * D + d] : mx;
      for (c = 0; c < C; ++c) s += exp(x[(n * C + c) * D + d] - mx);
      for (c = 0; c < C; ++c) lp[(n * C + c) * D + d] = log(exp(x[(n * C + c) * D + d] - mx) / s);
    }
  for (n = 0; n < N; ++n)
    for (d = 0; d < D; ++d) {
      int64_t t = target[n * D + d];
      int ign = has_ignore && t == ignore;
      double w = ign ? 0 : weight ? weight[t] : 1, l = ign ? 0 : -lp[(n * C + t) * D + d];
      if (reduction == 0) loss[n * D + d] = w * l;
      total += w * l;
      wsum += w;
    }
  if (reduction == 1) loss[0] = total;
  if (reduction == 2) loss[0] = total / wsum;
  return 0;
}

/* ---- indexing (by element size) ---------------------------------------------------------- */

HK int64_t hk_index(const void* idx, int is32, int64_t i) {
  return is32 ? ((const int32_t*)idx)[i] : ((const int64_t*)idx)[i];
}

/* GatherElements: y[i] = x[i with its axis coordinate replaced by idx[i]] over idx's dims. */
HK int hk_gather_elements(const void* x, const void* idx, int is32, void* y, int64_t rank, const int64_t* xdims,
                          const int64_t* idims, int64_t axis, int64_t esize) {
  int64_t xst[16], c[16] = {0}, d, i, n = 1;
  hk_strides(rank, xdims, xst);
  for (d = 0; d < rank; ++d) n *= idims[d];
  for (i = 0; i < n; ++i) {
    int64_t v = hk_index(idx, is32, i), off = 0;
    if (v < 0) v += xdims[axis];
    if (v < 0 || v >= xdims[axis]) return 1;
    for (d = 0; d < rank; ++d) off += (d == axis ? v : c[d]) * xst[d];
    memcpy((char*)y + i * esize, (const char*)x + off * esize, (size_t)esize);
    for (d = rank; d-- > 0;) {
      if (++c[d] < idims[d]) break;
      c[d] = 0;
    }
  }
  return 0;
}

/* Combines element `v` into element `a` of dtype dt: reduction 0 none, 1 add, 2 mul, 3 max, 4 min. */
HK void hk_combine(int dt, void* a, int64_t ai, const void* v, int64_t vi, int red, int64_t esize) {
  if (red == 0) {
    memcpy((char*)a + ai * esize, (const char*)v + vi * esize, (size_t)esize);
  } else if (hk_dt_is_float(dt)) {
    double x = hk_load_f64(dt, a, ai), u = hk_load_f64(dt, v, vi);
    double r = red == 1 ? x + u : red == 2 ? x * u : red == 3 ? (x > u ? x : u) : (x < u ? x : u);
    hk_store_f64(dt, a, ai, r, 1);
  } else {
    int64_t x = hk_load_i64(dt, a, ai), u = hk_load_i64(dt, v, vi);
    int64_t r = red == 1 ? (int64_t)((uint64_t)x + (uint64_t)u) : red == 2 ? (int64_t)((uint64_t)x * (uint64_t)u)
              : red == 3 ? (x > u ? x : u) : (x < u ? x : u);
    hk_store_i64(dt, a, ai, r);
  }
}

/* ScatterElements on y (a copy of data): y[i with its axis coordinate idx[i]] (op)= upd[i]. */
HK int hk_scatter_elements(void* y, const void* idx, int is32, const void* upd, int64_t rank, const int64_t* ydims,
                           const int64_t* idims, int64_t axis, int red, int dt, int64_t esize) {
  int64_t yst[16], c[16] = {0}, d, i, n = 1;
  hk_strides(rank, ydims, yst);
  for (d = 0; d < rank; ++d) n *= idims[d];
  for (i = 0; i < n; ++i) {
    int64_t v = hk_index(idx, is32, i), off = 0;
    if (v < 0) v += ydims[axis];
    if (v < 0 || v >= ydims[axis]) return 1;
    for (d = 0; d < rank; ++d) off += (d == axis ? v : c[d]) * yst[d];
    hk_combine(dt, y, off, upd, i, red, esize);
    for (d = rank; d-- > 0;) {
      if (++c[d] < idims[d]) break;
      c[d] = 0;
    }
  }
  return 0;
}

/* GatherND: for each of `count` index tuples of m int64s (per batch), the block of `inner`
 * elements of x it names; x dims after the batch dims in xdims. */
HK int hk_gather_nd(const void* x, const int64_t* idx, void* y, int64_t batches, int64_t per_batch, int64_t m,
                    int64_t inner, int64_t batch_stride, const int64_t* xdims, const int64_t* xstrides, int64_t esize) {
  int64_t b, j, k;
  for (b = 0; b < batches; ++b)
    for (j = 0; j < per_batch; ++j) {
      const int64_t* tup = idx + (b * per_batch + j) * m;
      int64_t off = b * batch_stride;
      for (k = 0; k < m; ++k) {
        int64_t v = tup[k] < 0 ? tup[k] + xdims[k] : tup[k];
        if (v < 0 || v >= xdims[k]) return 1;
        off += v * xstrides[k];
      }
      memcpy((char*)y + (b * per_batch + j) * inner * esize, (const char*)x + off * esize, (size_t)(inner * esize));
    }
  return 0;
}

/* ScatterND on y (a copy of data): n tuples of k int64s, each a block of `block` elements. */
HK int hk_scatter_nd(void* y, const int64_t* idx, const void* upd, int64_t n, int64_t k, const int64_t* ydims,
                     const int64_t* ystrides, int64_t block, int red, int dt, int64_t esize) {
  int64_t i, j, e;
  for (i = 0; i < n; ++i) {
    int64_t off = 0;
    for (j = 0; j < k; ++j) {
      int64_t v = idx[i * k + j] < 0 ? idx[i * k + j] + ydims[j] : idx[i * k + j];
      if (v < 0 || v >= ydims[j]) return 1;
      off += v * ystrides[j];
    }
    for (e = 0; e < block; ++e) hk_combine(dt, y, off + e, upd, i * block + e, red, esize);
  }
  return 0;
}

/* Trilu: y = x with the elements above (upper 0) / below (upper 1) diagonal k zeroed. */
HK void hk_trilu(const void* x, void* y, int64_t batch, int64_t rows, int64_t cols, int64_t k, int upper,
                 int64_t esize) {
  int64_t b, i, j;
  for (b = 0; b < batch; ++b)
    for (i = 0; i < rows; ++i)
      for (j = 0; j < cols; ++j) {
        int64_t at = (b * rows + i) * cols + j;
        int keep = upper ? j - i >= k : j - i <= k;
        if (keep) memcpy((char*)y + at * esize, (const char*)x + at * esize, (size_t)esize);
        else memset((char*)y + at * esize, 0, (size_t)esize);
      }
}

/* OneHot: y [outer, depth, inner] of values[1] where idx (doubles) names the position (negative
 * counts from the end), values[0] elsewhere. */
HK void hk_onehot(const double* idx, const void* values, void* y, int64_t outer, int64_t depth, int64_t inner,
                  int64_t esize) {
  int64_t o, i, k;
  for (o = 0; o < outer; ++o)
    for (i = 0; i < inner; ++i) {
      double v = idx[o * inner + i];
      int64_t at = isfinite(v) ? (int64_t)v : depth;
      if (at < 0) at += depth;
      for (k = 0; k < depth; ++k)
        memcpy((char*)y + ((o * depth + k) * inner + i) * esize, (const char*)values + (k == at ? esize : 0),
               (size_t)esize);
    }
}

/* EyeLike: ones on diagonal k of rows x cols (one / zero: esize bytes each). */
HK void hk_eye(void* y, int64_t rows, int64_t cols, int64_t k, const void* one, int64_t esize) {
  int64_t i, j;
  memset(y, 0, (size_t)(rows * cols * esize));
  for (i = 0; i < rows; ++i) {
    j = i + k;
    if (j >= 0 && j < cols) memcpy((char*)y + (i * cols + j) * esize, one, (size_t)esize);
  }
}

/* ReverseSequence: along time_axis, the first lens[b] elements of each batch reversed. */
HK int hk_reverse_sequence(const void* x, void* y, const int64_t* lens, int64_t rank, const int64_t* dims,
                           int64_t batch_axis, int64_t time_axis, int64_t esize) {
  int64_t st[16], c[16] = {0}, d, i, n = 1;
  hk_strides(rank, dims, st);
  for (d = 0; d < rank; ++d) n *= dims[d];
  for (i = 0; i < n; ++i) {
    int64_t len = lens[c[batch_axis]], t = c[time_axis], src = i;
    if (len < 0 || len > dims[time_axis]) return 1;
    if (t < len) src = i + (len - 1 - 2 * t) * st[time_axis];
    memcpy((char*)y + i * esize, (const char*)x + src * esize, (size_t)esize);
    for (d = rank; d-- > 0;) {
      if (++c[d] < dims[d]) break;
      c[d] = 0;
    }
  }
  return 0;
}

/* Slice with starts, ends, axes and steps read while running (int32 or int64, each with its
 * own flag; axes NULL: 0..n-1, steps NULL: 1): y of ydims. */
HK int hk_slice_rt(const void* x, void* y, int64_t rank, const int64_t* xdims, const int64_t* ydims, const void* starts,
                   int s32, const void* ends, int e32, const void* axes, int a32, const void* steps, int t32, int64_t n,
                   int64_t esize) {
  int64_t st[16], begin[16], step[16], c[16] = {0}, d, i, total = 1;
  hk_strides(rank, xdims, st);
  for (d = 0; d < rank; ++d) {
    begin[d] = 0;
    step[d] = 1;
  }
  for (i = 0; i < n; ++i) {
    int64_t a = axes ? hk_index(axes, a32, i) : i, s = hk_index(starts, s32, i),
            k = steps ? hk_index(steps, t32, i) : 1, dim;
    if (a < 0) a += rank;
    if (a < 0 || a >= rank || k == 0) return 1;
    (void)ends;
    (void)e32;
    dim = xdims[a];
    if (s < 0) s += dim;
    if (k > 0) s = s < 0 ? 0 : s > dim ? dim : s;
    else s = s < 0 ? 0 : s > dim - 1 ? dim - 1 : s;
    begin[a] = s;
    step[a] = k;
  }
  for (d = 0; d < rank; ++d) total *= ydims[d];
  for (i = 0; i < total; ++i) {
    int64_t off = 0;
    for (d = 0; d < rank; ++d) off += (begin[d] + c[d] * step[d]) * st[d];
    memcpy((char*)y + i * esize, (const char*)x + off * esize, (size_t)esize);
    for (d = rank; d-- > 0;) {
      if (++c[d] < ydims[d]) break;
      c[d] = 0;
    }
  }
  return 0;
}

/* outer / n / inner of dims split around `axis` (negative counts from the end); 0 when out of range. */
HK int hk_split_axis(int64_t rank, const int64_t* dims, int64_t axis, int64_t* outer, int64_t* n, int64_t* inner) {
  int64_t d;
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return 1;
  *outer = *inner = 1;
  for (d = 0; d < rank; ++d) {
    if (d < axis) *outer *= dims[d];
    else if (d > axis) *inner *= dims[d];
  }
  *n = dims[axis];
  return 0;
}

/* TensorScatter on y (a copy of the cache [outer, max_len, inner] grouped by batch): the
 * update's len rows of each outer slice at write index wi[batch] (NULL: 0), circular or not. */
HK int hk_tensor_scatter(void* y, const void* upd, const int64_t* wi, int64_t batch, int64_t outer, int64_t max_len,
                         int64_t len, int64_t inner, int circular, int64_t esize) {
  int64_t o, s, per_batch = batch ? outer / batch : 1;
  for (o = 0; o < batch; ++o) {
    int64_t w = wi ? wi[o] : 0;
    if (w < 0 || (!circular && w + len > max_len)) return 1;
  }
  for (o = 0; o < outer; ++o) {
    int64_t b = per_batch ? o / per_batch : 0, w = wi ? wi[b] : 0;
    for (s = 0; s < len; ++s) {
      int64_t pos = circular ? (w + s) % max_len : w + s;
      memcpy((char*)y + (o * max_len + pos) * inner * esize, (const char*)upd + (o * len + s) * inner * esize,
             (size_t)(inner * esize));
    }
  }
  return 0;
}

/* Compress: the rows (along the middle dim of [outer, n, inner]) whose condition is true;
 * returns the count, or -1 when the condition selects past n. */
HK int64_t hk_compress_count(const uint8_t* cond, int64_t len, int64_t n) {
  int64_t i, k = 0;
  for (i = 0; i < len; ++i)
    if (cond[i]) {
      if (i >= n) return -1;
      ++k;
    }
  return k;
}
HK void hk_compress(const void* x, const uint8_t* cond, int64_t len, void* y, int64_t outer, int64_t n, int64_t inner,
                    int64_t k, int64_t esize) {
  int64_t o, i, j;
  for (o = 0; o < outer; ++o)
    for (i = 0, j = 0; i < len && i < n; ++i)
      if (cond[i]) {
        memcpy((char*)y + (o * k + j) * inner * esize, (const char*)x + (o * n + i) * inner * esize,
               (size_t)(inner * esize));
        ++j;
      }
}

/* NonZero of values given as doubles (NaN counts): the count, then [rank, count] coordinates. */
HK int64_t hk_count_nonzero(const double* x, int64_t n) {
  int64_t i, k = 0;
  for (i = 0; i < n; ++i) k += x[i] != 0;
  return k;
}
HK void hk_nonzero(const double* x, int64_t* y, int64_t rank, const int64_t* dims, int64_t count) {
  int64_t c[16] = {0}, i, d, j = 0, n = 1;
  for (d = 0; d < rank; ++d) n *= dims[d];
  for (i = 0; i < n; ++i) {
    if (x[i] != 0) {
      for (d = 0; d < rank; ++d) y[d * count + j] = c[d];
      ++j;
    }
    for (d = rank; d-- > 0;) {
      if (++c[d] < dims[d]) break;
      c[d] = 0;
    }
  }
}

/* Three-way order of two rows of m doubles; NaN after everything, equal to NaN. */
HK int hk_rows_cmp(const double* a, const double* b, int64_t m) {
  int64_t k;
  for (k = 0; k < m; ++k) {
    int na = a[k] != a[k], nb = b[k] != b[k];
    if (na || nb) {
      if (na != nb) return na ? 1 : -1;
      continue;
    }
    if (a[k] != b[k]) return a[k] < b[k] ? -1 : 1;
  }
  return 0;
}

/* Unique rows of keys [n, m]: first[g] the first row of group g, counts[g], inverse[i] the
 * group of row i, groups in sorted order or (sorted 0) by first occurrence. work: 3 n int64s.
 * Returns the number of groups. */
HK int64_t hk_unique_rows(const double* keys, int64_t n, int64_t m, int sorted, int64_t* first, int64_t* inverse,
                          int64_t* counts, int64_t* work) {
  int64_t* order = work;
  int64_t* group = work + n;
  int64_t* rank_of = work + 2 * n;
  int64_t i, j, g = 0;
  for (i = 0; i < n; ++i) order[i] = i;
  for (i = 1; i < n; ++i) { /* insertion sort: stable */
    int64_t v = order[i];
    for (j = i; j > 0 && hk_rows_cmp(keys + order[j - 1] * m, keys + v * m, m) > 0; --j) order[j] = order[j - 1];
    order[j] = v;
  }
  for (i = 0; i < n; ++i) {
    if (i == 0 || hk_rows_cmp(keys + order[i - 1] * m, keys + order[i] * m, m) != 0) {
      first[g] = order[i];
      counts[g] = 0;
      ++g;
    }
    group[order[i]] = g - 1;
    counts[g - 1]++;
  }
  for (i = 0; i < g; ++i) rank_of[i] = i;
  if (!sorted) { /* groups by first occurrence: sort (first, count) pairs by first */
    for (i = 1; i < g; ++i) {
      int64_t f = first[i], c = counts[i], r = rank_of[i];
      for (j = i; j > 0 && first[j - 1] > f; --j) {
        first[j] = first[j - 1];
        counts[j] = counts[j - 1];
        rank_of[j] = rank_of[j - 1];
      }
      first[j] = f;
      counts[j] = c;
      rank_of[j] = r;
    }
  }
  /* rank_of[k]: the sorted group at output position k; order (no longer needed) the inverse. */
  for (i = 0; i < g; ++i) order[rank_of[i]] = i;
  for (i = 0; i < n; ++i) inverse[i] = order[group[i]];
  return g;
}

/* The rows first[0..g) of x [outer, n, inner] as y [outer, g, inner]. */
HK void hk_take_rows(const void* x, const int64_t* rows, int64_t g, void* y, int64_t outer, int64_t n, int64_t inner,
                     int64_t esize) {
  int64_t o, j;
  for (o = 0; o < outer; ++o)
    for (j = 0; j < g; ++j)
      memcpy((char*)y + (o * g + j) * inner * esize, (const char*)x + (o * n + rows[j]) * inner * esize,
             (size_t)(inner * esize));
}

/* ---- attention family (doubles) ------------------------------------------------------- */

/* ONNX Attention (opset 23/24): q [B, Hq, Sq, D], k and v [B, Hkv, S, D/Dv] (element strides
 * b, h, s, d each), optional past k / v [B, Hkv, P, D/Dv] (contiguous) before them; mask
 * (bool bytes or doubles) broadcast with strides ms over [B, Hq, Sq, mlen], positions past
 * mlen masked; nonpad [B] or NULL. Outputs: y (strides ys), present k / v [B, Hkv, P + S, .],
 * qk [B, Hq, Sq, P + S] (NULL: not wanted). work: 2 (P + S) + Dv doubles. */
typedef struct {
  int64_t B, Hq, Hkv, Sq, S, P, D, Dv;
  const double *q, *k, *v, *pk, *pv;
  int64_t qs[4], ks[4], vs[4];
  const void* mask;
  int mask_bool;
  int64_t ms[4], mlen;
  const int64_t* nonpad;
  double scale, softcap;
  int causal, mode, has_past;
  double* y;
  int64_t ys[4];
  double *present_k, *present_v, *qk;
} hk_attention_args;

HK double hk_att_k(const hk_attention_args* a, int64_t b, int64_t h, int64_t j, int64_t d, int value) {
  int64_t dim = value ? a->Dv : a->D;
  const double* past = value ? a->pv : a->pk;
  const double* cur = value ? a->v : a->k;
  const int64_t* st = value ? a->vs : a->ks;
  if (j < a->P) return past[((b * a->Hkv + h) * a->P + j) * dim + d];
  j -= a->P;
  return cur[b * st[0] + h * st[1] + j * st[2] + d * st[3]];
}

HK void hk_attention(const hk_attention_args* a, double* work) {
  const int64_t Skv = a->P + a->S, reps = a->Hkv ? a->Hq / a->Hkv : 1;
  const double ss = sqrt(a->scale);
  double* row = work;
  double* p = work + Skv;
  double* acc = work + 2 * Skv;
  int64_t b, h, i, j, d;
  for (b = 0; b < a->B; ++b)
    for (h = 0; h < a->Hkv; ++h)
      for (j = 0; j < Skv; ++j) {
        if (a->present_k)
          for (d = 0; d < a->D; ++d) a->present_k[((b * a->Hkv + h) * Skv + j) * a->D + d] = hk_att_k(a, b, h, j, d, 0);
        if (a->present_v)
          for (d = 0; d < a->Dv; ++d)
            a->present_v[((b * a->Hkv + h) * Skv + j) * a->Dv + d] = hk_att_k(a, b, h, j, d, 1);
      }
  for (b = 0; b < a->B; ++b)
    for (h = 0; h < a->Hq; ++h) {
      int64_t hk = h / reps;
      for (i = 0; i < a->Sq; ++i) {
        double mx = -INFINITY, sum = 0;
        int nan = 0;
        for (j = 0; j < Skv; ++j) {
          double s = 0, m = 0;
          for (d = 0; d < a->D; ++d)
            s += a->q[b * a->qs[0] + h * a->qs[1] + i * a->qs[2] + d * a->qs[3]] * ss * (hk_att_k(a, b, hk, j, d, 0) * ss);
          if (a->softcap > 0) s = tanh(s / a->softcap) * a->softcap;
          if (a->mask) {
            if (j >= a->mlen) {
              m = -INFINITY;
            } else {
              int64_t off = b * a->ms[0] + h * a->ms[1] + i * a->ms[2] + j * a->ms[3];
              m = a->mask_bool ? (((const uint8_t*)a->mask)[off] ? 0.0 : -INFINITY) : ((const double*)a->mask)[off];
            }
          }
          if (a->causal) {
            int64_t offset = (!a->has_past && a->nonpad) ? a->nonpad[b] - a->Sq : a->P;
            if (j > i + offset) m += -INFINITY;
          }
          if (a->nonpad && j >= a->nonpad[b]) m += -INFINITY;
          row[j] = s + m;
          if (a->qk) a->qk[((b * a->Hq + h) * a->Sq + i) * Skv + j] = a->mode == 2 ? row[j] : s;
          if (row[j] != row[j]) nan = 1;
          if (row[j] > mx) mx = row[j];
        }
        if (nan) mx = NAN;
        for (j = 0; j < Skv; ++j) {
          p[j] = exp(row[j] - mx);
          sum += p[j];
        }
        for (d = 0; d < a->Dv; ++d) acc[d] = 0;
        for (j = 0; j < Skv; ++j) {
          p[j] /= sum;
          if (a->qk && a->mode == 3) a->qk[((b * a->Hq + h) * a->Sq + i) * Skv + j] = p[j];
          for (d = 0; d < a->Dv; ++d) acc[d] += p[j] * hk_att_k(a, b, hk, j, d, 1);
        }
        for (d = 0; d < a->Dv; ++d) a->y[b * a->ys[0] + h * a->ys[1] + i * a->ys[2] + d * a->ys[3]] = acc[d];
      }
    }
}

/* RotaryEmbedding: x and y [B, S, H, D] by element strides xs (b, s, h, d); cos / sin
 * [positions, rot / 2] read at pos[b, s] (pos NULL: [B, S, rot / 2] caches). Returns non-zero
 * on a position out of range. */
HK int hk_rotary(const double* x, double* y, const double* cosc, const double* sinc, const int64_t* pos, int64_t B,
                 int64_t S, int64_t H, int64_t D, const int64_t* xs, int64_t rot, int interleaved, int64_t max_pos) {
  int64_t b, s, h, i, half = rot / 2;
  for (b = 0; b < B; ++b)
    for (s = 0; s < S; ++s) {
      int64_t r = pos ? pos[b * S + s] : b * S + s;
      const double *c, *sn;
      if (pos && (r < 0 || r >= max_pos)) return 1;
      c = cosc + r * half;
      sn = sinc + r * half;
      for (h = 0; h < H; ++h) {
        int64_t base = b * xs[0] + s * xs[1] + h * xs[2];
        for (i = 0; i < half; ++i) {
          int64_t i1 = interleaved ? 2 * i : i, i2 = interleaved ? 2 * i + 1 : i + half;
          double x1 = x[base + i1 * xs[3]], x2 = x[base + i2 * xs[3]];
          y[base + i1 * xs[3]] = c[i] * x1 - sn[i] * x2;
          y[base + i2 * xs[3]] = sn[i] * x1 + c[i] * x2;
        }
        for (i = rot; i < D; ++i) y[base + i * xs[3]] = x[base + i * xs[3]];
      }
    }
  return 0;
}

/* CausalConvWithState: x [B, C, L] after past [B, C, K - 1] (NULL: zeros), depthwise weights
 * [C, K], bias [C] or NULL, SiLU after when silu; y [B, C, L], present [B, C, K - 1] or NULL. */
HK void hk_causal_conv(const double* x, const double* past, const double* w, const double* bias, double* y,
                       double* present, int64_t B, int64_t C, int64_t L, int64_t K, int silu) {
  int64_t bc, t, j, P = K - 1;
  for (bc = 0; bc < B * C; ++bc) {
    int64_t c = bc % C;
    for (t = 0; t < L; ++t) {
      double s = bias ? bias[c] : 0;
      for (j = 0; j < K; ++j) {
        int64_t at = t + j; /* in the padded row of P + L */
        double v = at < P ? (past ? past[bc * P + at] : 0) : x[bc * L + at - P];
        s += v * w[c * K + j];
      }
      y[bc * L + t] = silu ? s / (1 + exp(-s)) : s;
    }
    if (present)
      for (j = 0; j < P; ++j) {
        int64_t at = L + j; /* the last P of the padded row */
        present[bc * P + j] = at < P ? (past ? past[bc * P + at] : 0) : x[bc * L + at - P];
      }
  }
}

/* LinearAttention: q [B, T, Hq, dk], k [B, T, Hkv, dk], v [B, T, Hkv, dv] (row-major),
 * state [B, Hkv, dk, dv] (updated in place: starts from the past state or zeros), decay
 * [B, T, Hkv or Hkv * dk] (gated rules), beta [B, T, Hkv or 1] (delta rules), erase
 * [B, T, Hkv * dk]; out [B, T, Hq, dv]. work: dv + dk doubles. */
HK void hk_linear_attention(const double* q, const double* k, const double* v, double* state, const double* decay,
                            int64_t decay_last, const double* beta, int64_t beta_last, const double* erase, double* out,
                            int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t dk, int64_t dv, double scale,
                            double* work) {
  int64_t bh, t, d, m, g, G = Hq / Hkv;
  double* vt = work;
  double* ke = work + dv;
  for (bh = 0; bh < B * Hkv; ++bh) {
    int64_t b = bh / Hkv, h = bh % Hkv;
    double* St = state + bh * dk * dv;
    for (t = 0; t < T; ++t) {
      int64_t row = b * T + t;
      const double* kt = k + row * Hkv * dk + h * dk;
      for (m = 0; m < dv; ++m) vt[m] = v[row * Hkv * dv + h * dv + m];
      if (decay) {
        for (d = 0; d < dk; ++d) {
          double gexp = exp(decay_last == Hkv ? decay[row * Hkv + h] : decay[row * Hkv * dk + h * dk + d]);
          for (m = 0; m < dv; ++m) St[d * dv + m] *= gexp;
        }
      }
      if (beta) {
        double bt = beta[row * beta_last + (beta_last == 1 ? 0 : h)];
        for (d = 0; d < dk; ++d) ke[d] = erase ? erase[row * Hkv * dk + h * dk + d] * kt[d] : kt[d];
        for (m = 0; m < dv; ++m) {
          double r = 0;
          for (d = 0; d < dk; ++d) r += St[d * dv + m] * ke[d];
          vt[m] = bt * (vt[m] - r);
        }
      }
      for (d = 0; d < dk; ++d)
        for (m = 0; m < dv; ++m) St[d * dv + m] += kt[d] * vt[m];
      for (g = 0; g < G; ++g) {
        int64_t hq = h * G + g;
        const double* qt = q + row * Hq * dk + hq * dk;
        for (m = 0; m < dv; ++m) {
          double s = 0;
          for (d = 0; d < dk; ++d) s += qt[d] * St[d * dv + m];
          out[row * Hq * dv + hq * dv + m] = scale * s;
        }
      }
    }
  }
}

/* ---- recurrent cells: RNN, GRU, LSTM ---------------------------------------------------- */

/* Activation codes (ONNX's names, resolved at build time). */
enum { HK_ACT_SIGMOID, HK_ACT_TANH, HK_ACT_RELU, HK_ACT_AFFINE, HK_ACT_LEAKYRELU, HK_ACT_THRESHOLDEDRELU,
       HK_ACT_SCALEDTANH, HK_ACT_HARDSIGMOID, HK_ACT_ELU, HK_ACT_SOFTSIGN, HK_ACT_SOFTPLUS };

HK double hk_rnn_act(int kind, double alpha, double beta, double v) {
  switch (kind) {
    case HK_ACT_SIGMOID: return 1.0 / (1.0 + exp(-v));
    case HK_ACT_TANH: return tanh(v);
    case HK_ACT_RELU: return v > 0 ? v : 0;
    case HK_ACT_AFFINE: return alpha * v + beta;
    case HK_ACT_LEAKYRELU: return v < 0 ? alpha * v : v;
    case HK_ACT_THRESHOLDEDRELU: return v > alpha ? v : 0;
    case HK_ACT_SCALEDTANH: return alpha * tanh(beta * v);
    case HK_ACT_HARDSIGMOID: { double r = alpha * v + beta; return r < 0 ? 0 : r > 1 ? 1 : r; }
    case HK_ACT_ELU: return v < 0 ? alpha * (exp(v) - 1) : v;
    case HK_ACT_SOFTSIGN: return v / (1 + fabs(v));
    default: return log1p(exp(v));
  }
}

/* cell 0 RNN, 1 GRU, 2 LSTM. x [S, B, I] (layout 0) or [B, S, I] (layout 1); w [dirs, G*H, I],
 * r [dirs, G*H, H], bias [dirs, 2*G*H] or NULL, lens [B] or NULL, h0/c0 [dirs, B, H] (layout 1:
 * [B, dirs, H]) or NULL, p [dirs, 3*H] or NULL. y [S, dirs, B, H] (layout 1: [B, S, dirs, H]),
 * yh/yc as h0; any may be NULL. Activations: `per` codes a direction (acts[d * per + k]).
 * work: 3*G*H + 2*B*H doubles. Non-zero when a sequence length is out of [0, S]. */
typedef struct {
  int cell, layout, reverse, dirs, per, has_clip, lbr, input_forget;
  int64_t S, B, I, H;
  const double *x, *w, *r, *bias, *h0, *c0, *p;
  const int64_t* lens;
  int acts[6];
  double alpha[6], beta[6], clip;
  double *y, *yh, *yc;
} hk_rnn_args;

HK double hk_rnn_clip(const hk_rnn_args* a, double v) {
  if (!a->has_clip) return v;
  return v < -a->clip ? -a->clip : v > a->clip ? a->clip : v;
}

HK int hk_rnn(const hk_rnn_args* a, double* work) {
  const int64_t S = a->S, B = a->B, I = a->I, H = a->H, G = a->cell == 0 ? 1 : a->cell == 1 ? 3 : 4;
  const int64_t dirs = a->dirs;
  double *gx = work, *gh = work + G * H, *tmp = work + 2 * G * H, *h = work + 3 * G * H, *c = h + B * H;
  int64_t d, step, b, g, k, j;
  if (a->lens)
    for (b = 0; b < B; ++b)
      if (a->lens[b] < 0 || a->lens[b] > S) return 1;
  for (d = 0; d < dirs; ++d) {
    const int reverse = a->reverse || d == 1;
    const double* w = a->w + d * G * H * I;
    const double* r = a->r + d * G * H * H;
    const double* wb = a->bias ? a->bias + d * 2 * G * H : NULL;
    const double* rb = a->bias ? wb + G * H : NULL;
    const double* peep = a->p ? a->p + d * 3 * H : NULL;
    const int* act = a->acts + d * a->per;
    const double* al = a->alpha + d * a->per;
    const double* be = a->beta + d * a->per;
    for (b = 0; b < B; ++b)
      for (j = 0; j < H; ++j) {
        int64_t at = a->layout ? (b * dirs + d) * H + j : (d * B + b) * H + j;
        h[b * H + j] = a->h0 ? a->h0[at] : 0;
        c[b * H + j] = a->c0 ? a->c0[at] : 0;
      }
    for (step = 0; step < S; ++step) {
      const int64_t t = reverse ? S - 1 - step : step;
      for (b = 0; b < B; ++b) {
        double* yo = a->y ? a->y + (a->layout ? ((b * S + t) * dirs + d) * H : ((t * dirs + d) * B + b) * H) : NULL;
        const double* xt = a->x + (a->layout ? (b * S + t) * I : (t * B + b) * I);
        double* hb = h + b * H;
        double* cb = c + b * H;
        if (t >= (a->lens ? a->lens[b] : S)) {
          if (yo)
            for (j = 0; j < H; ++j) yo[j] = 0;
          continue;
        }
        for (g = 0; g < G * H; ++g) {
          double sx = 0, sh = 0;
          for (k = 0; k < I; ++k) sx += xt[k] * w[g * I + k];
          for (k = 0; k < H; ++k) sh += hb[k] * r[g * H + k];
          gx[g] = sx + (wb ? wb[g] : 0);
          gh[g] = sh + (rb ? rb[g] : 0);
        }
        if (a->cell == 0) {
          for (j = 0; j < H; ++j) hb[j] = hk_rnn_act(act[0], al[0], be[0], hk_rnn_clip(a, gx[j] + gh[j]));
        } else if (a->cell == 1) {
          /* z in tmp[0, H), the new candidate in tmp[H, 2H), r ⊙ h in tmp[2H, 3H). */
          for (j = 0; j < H; ++j) {
            double rt = hk_rnn_act(act[0], al[0], be[0], hk_rnn_clip(a, gx[H + j] + gh[H + j]));
            tmp[j] = hk_rnn_act(act[0], al[0], be[0], hk_rnn_clip(a, gx[j] + gh[j]));
            if (a->lbr) tmp[H + j] = hk_rnn_act(act[1], al[1], be[1], hk_rnn_clip(a, gx[2 * H + j] + rt * gh[2 * H + j]));
            else tmp[2 * H + j] = rt * hb[j];
          }
          if (!a->lbr)
            for (j = 0; j < H; ++j) {
              double s = 0;
              for (k = 0; k < H; ++k) s += tmp[2 * H + k] * r[(2 * H + j) * H + k];
              tmp[H + j] = hk_rnn_act(act[1], al[1], be[1], hk_rnn_clip(a, gx[2 * H + j] + s + (rb ? rb[2 * H + j] : 0)));
            }
          for (j = 0; j < H; ++j) hb[j] = (1 - tmp[j]) * tmp[H + j] + tmp[j] * hb[j];
        } else {
          for (j = 0; j < H; ++j) {
            double pi = peep ? peep[j] : 0, po = peep ? peep[H + j] : 0, pf = peep ? peep[2 * H + j] : 0;
            double it = hk_rnn_act(act[0], al[0], be[0], hk_rnn_clip(a, gx[j] + gh[j] + pi * cb[j]));
            double ft = a->input_forget ? 1 - it
                                        : hk_rnn_act(act[0], al[0], be[0], hk_rnn_clip(a, gx[2 * H + j] + gh[2 * H + j] + pf * cb[j]));
            double ct = hk_rnn_act(act[1], al[1], be[1], hk_rnn_clip(a, gx[3 * H + j] + gh[3 * H + j]));
            double cn = ft * cb[j] + it * ct;
            double ot = hk_rnn_act(act[0], al[0], be[0], hk_rnn_clip(a, gx[H + j] + gh[H + j] + po * cn));
            cb[j] = cn;
            hb[j] = ot * hk_rnn_act(act[2], al[2], be[2], cn);
          }
        }
        if (yo)
          for (j = 0; j < H; ++j) yo[j] = hb[j];
      }
    }
    for (b = 0; b < B; ++b)
      for (j = 0; j < H; ++j) {
        int64_t at = a->layout ? (b * dirs + d) * H + j : (d * B + b) * H + j;
        if (a->yh) a->yh[at] = h[b * H + j];
        if (a->yc) a->yc[at] = c[b * H + j];
      }
  }
  return 0;
}

/* ---- ConvTranspose ------------------------------------------------------------------------ */

/* x [N, C, in...], w [C, M/G, k...], b [M] or NULL; y [N, M, out...]. Each input element
 * scatters into the outputs at in * stride + k * dil - pad_begin. nd <= 8. */
HK void hk_conv_transpose(const double* x, const double* w, const double* b, double* y, int64_t N, int64_t C,
                          int64_t M, int64_t G, int64_t nd, const int64_t* in, const int64_t* out, const int64_t* k,
                          const int64_t* strides, const int64_t* dil, const int64_t* pb) {
  const int64_t Cg = C / G, Mg = M / G;
  int64_t ins = 1, outs = 1, kk = 1, ost[8], ic[8], kc[8], n, g, c, m, ip, kp, d;
  for (d = 0; d < nd; ++d) ins *= in[d], outs *= out[d], kk *= k[d];
  for (d = nd - 1, ost[nd - 1] = 1; d > 0; --d) ost[d - 1] = ost[d] * out[d];
  for (n = 0; n < N; ++n)
    for (m = 0; m < M; ++m) {
      double* ym = y + (n * M + m) * outs;
      for (ip = 0; ip < outs; ++ip) ym[ip] = b ? b[m] : 0;
    }
  for (n = 0; n < N; ++n)
    for (g = 0; g < G; ++g)
      for (c = 0; c < Cg; ++c) {
        const double* xr = x + (n * C + g * Cg + c) * ins;
        for (m = 0; m < Mg; ++m) {
          const double* wr = w + ((g * Cg + c) * Mg + m) * kk;
          double* yr = y + (n * M + g * Mg + m) * outs;
          for (d = 0; d < nd; ++d) ic[d] = 0;
          for (ip = 0; ip < ins; ++ip) {
            const double xv = xr[ip];
            for (d = 0; d < nd; ++d) kc[d] = 0;
            for (kp = 0; kp < kk; ++kp) {
              int64_t off = 0, ok = 1;
              for (d = 0; d < nd && ok; ++d) {
                int64_t p = ic[d] * strides[d] + kc[d] * dil[d] - pb[d];
                ok = p >= 0 && p < out[d];
                off += p * ost[d];
              }
              if (ok) yr[off] += xv * wr[kp];
              for (d = nd - 1; d >= 0 && ++kc[d] == k[d]; --d) kc[d] = 0;
            }
            for (d = nd - 1; d >= 0 && ++ic[d] == in[d]; --d) ic[d] = 0;
          }
        }
      }
}

/* ---- Resize tables over sizes known only while running ------------------------------------ */

/* The tables hk_resize_nearest / hk_resize_linear2d read, for one dim of `in` -> `out`
 * elements, as the generator computes them at build time for static shapes (ops_tensor.cc).
 * scale <= 0: out / in. ctm: 0 half_pixel, 1 align_corners, 2 asymmetric, 3 pytorch_half_pixel,
 * 4 half_pixel_symmetric. nearest: 0 round_prefer_floor, 1 round_prefer_ceil, 2 floor, 3 ceil.
 * linear: i0, i1, w (else the nearest index in i0). */
HK double hk_resize_source(int ctm, double s, double in, double out_size, double x) {
  double ow = s * in;
  /* align_corners, pytorch_half_pixel: the integer output length (interp nn_resize.cc). */
  if (ctm == 1) return out_size == 1 ? 0.0 : x * (in - 1) / (out_size - 1);
  if (ctm == 2) return x / s;
  if (ctm == 3) return out_size == 1 ? 0.0 : (x + 0.5) / s - 0.5;
  if (ctm == 4) {
    double adj = out_size / ow, center = in / 2;
    return center * (1 - adj) + (x + 0.5) / s - 0.5;
  }
  return (x + 0.5) / s - 0.5;
}

HK void hk_resize_table(int64_t in, int64_t out, double scale, int ctm, int nearest, int linear, int64_t* i0,
                        int64_t* i1, float* w) {
  const double s = scale > 0 ? scale : (double)out / (double)in;
  int64_t o;
  for (o = 0; o < out; ++o) {
    double xo = hk_resize_source(ctm, s, (double)in, (double)out, (double)o);
    if (linear) {
      int64_t lo, hi;
      if (xo < 0) xo = 0;
      if (xo > (double)(in - 1)) xo = (double)(in - 1);
      lo = (int64_t)floor(xo);
      hi = lo + 1 < in - 1 ? lo + 1 : in - 1;
      i0[o] = lo;
      i1[o] = hi;
      w[o] = (float)(xo - (double)lo);
    } else {
      double fl = floor(xo), ratio;
      int integral = xo == fl, up;
      int64_t base = integral ? (int64_t)fl - 1 : (int64_t)fl, v;
      ratio = integral ? 1.0 : xo - fl;
      up = integral || (nearest == 0 ? ratio > 0.5 : nearest == 1 ? ratio >= 0.5 : nearest != 2);
      v = up ? base + 1 : base;
      i0[o] = v < 0 ? 0 : v > in - 1 ? in - 1 : v;
    }
  }
}

/* ---- Det ----------------------------------------------------------------------------- */

/* y[b] = det of the n x n matrix x + b n^2 by Gaussian elimination with partial pivoting
 * in `work` (n^2 doubles), as the interpreter computes it. */
HK void hk_det(const double* x, double* y, int64_t batch, int64_t n, double* work) {
  int64_t b, i, j, c;
  for (b = 0; b < batch; ++b) {
    double det = 1;
    for (i = 0; i < n * n; ++i) work[i] = x[b * n * n + i];
    for (c = 0; c < n; ++c) {
      int64_t piv = c;
      double d;
      for (i = c + 1; i < n; ++i)
        if (fabs(work[i * n + c]) > fabs(work[piv * n + c])) piv = i;
      if (work[piv * n + c] == 0) {
        det = 0;
        break;
      }
      if (piv != c) {
        for (j = 0; j < n; ++j) {
          double t = work[c * n + j];
          work[c * n + j] = work[piv * n + j];
          work[piv * n + j] = t;
        }
        det = -det;
      }
      d = work[c * n + c];
      det *= d;
      for (i = c + 1; i < n; ++i) {
        double f = work[i * n + c] / d;
        if (f == 0) continue;
        for (j = c; j < n; ++j) work[i * n + j] -= f * work[c * n + j];
      }
    }
    y[b] = det;
  }
}

/* ---- Einsum -------------------------------------------------------------------------- */

/* y over the first nout of nl labels (dims) = the sum over the others of the product of
 * the operands, operand k read at sum_l idx[l] * st[k * nl + l] (0: a label it lacks or
 * broadcasts; a label it repeats has its strides added: a diagonal). */
HK void hk_einsum(int64_t nops, const double* const* ops, int64_t nl, const int64_t* dims, const int64_t* st,
                  int64_t nout, double* y) {
  int64_t idx[64], total_out = 1, total_sum = 1, o, s, l, k;
  for (l = 0; l < nl; ++l) *(l < nout ? &total_out : &total_sum) *= dims[l];
  for (o = 0; o < total_out; ++o) {
    double acc = 0;
    int64_t rem = o;
    for (l = nout; l-- > 0;) idx[l] = rem % dims[l], rem /= dims[l];
    for (s = 0; s < total_sum; ++s) {
      double prod = 1;
      rem = s;
      for (l = nl; l-- > nout;) idx[l] = rem % dims[l], rem /= dims[l];
      for (k = 0; k < nops; ++k) {
        int64_t off = 0;
        for (l = 0; l < nl; ++l) off += idx[l] * st[k * nl + l];
        prod *= ops[k][off];
      }
      acc += prod;
    }
    y[o] = acc;
  }
}

/* ---- MatMul and Gemm outside float32 -------------------------------------------------- */

/* y[batch, M, N] = A·B over broadcast batch dims (ad, bd: the operands' batch dims padded
 * with 1s to rank; yd: the result's), in double or (integer) int64 wrapping as two's
 * complement. ta/tb: A stored [K, M], B stored [N, K] (Gemm's transA/transB). */
HK void hk_matmul_wide(const void* a, const void* b, void* y, int integer, int64_t rank, const int64_t* ad,
                       const int64_t* bd, const int64_t* yd, int64_t M, int64_t K, int64_t N, int ta, int tb) {
  int64_t nb = 1, bi, d, i, j, k;
  for (d = 0; d < rank; ++d) nb *= yd[d];
  for (bi = 0; bi < nb; ++bi) {
    int64_t rem = bi, ao = 0, bo = 0, as = 1, bs = 1;
    for (d = rank; d-- > 0;) {
      int64_t id = rem % yd[d];
      rem /= yd[d];
      ao += (ad[d] == 1 ? 0 : id) * as, as *= ad[d];
      bo += (bd[d] == 1 ? 0 : id) * bs, bs *= bd[d];
    }
    for (i = 0; i < M; ++i)
      for (j = 0; j < N; ++j) {
        if (integer) {
          const int64_t *pa = (const int64_t*)a + ao * M * K, *pb = (const int64_t*)b + bo * K * N;
          uint64_t acc = 0;
          for (k = 0; k < K; ++k)
            acc += (uint64_t)pa[ta ? k * M + i : i * K + k] * (uint64_t)pb[tb ? j * K + k : k * N + j];
          ((int64_t*)y)[(bi * M + i) * N + j] = (int64_t)acc;
        } else {
          const double *pa = (const double*)a + ao * M * K, *pb = (const double*)b + bo * K * N;
          double acc = 0;
          for (k = 0; k < K; ++k) acc += pa[ta ? k * M + i : i * K + k] * pb[tb ? j * K + k : k * N + j];
          ((double*)y)[(bi * M + i) * N + j] = acc;
        }
      }
  }
}

/* Gemm's epilogue on y [M, N]: y * alpha + C * beta, C [cr, cc] broadcast (c NULL: none).
 * Integers: alpha and beta are integral (the emitter checks) and wrap. */
HK void hk_gemm_wide_epilogue(void* y, const void* c, int integer, int64_t M, int64_t N, int64_t cr, int64_t cc,
                         double alpha, double beta) {
  int64_t i, j;
  for (i = 0; i < M; ++i)
    for (j = 0; j < N; ++j) {
      int64_t ci = (cr == 1 ? 0 : i) * cc + (cc == 1 ? 0 : j);
      if (integer) {
        int64_t* p = (int64_t*)y + i * N + j;
        uint64_t v = (uint64_t)*p * (uint64_t)(int64_t)alpha;
        if (c) v += (uint64_t)((const int64_t*)c)[ci] * (uint64_t)(int64_t)beta;
        *p = (int64_t)v;
      } else {
        double* p = (double*)y + i * N + j;
        double v = alpha == 1.0 ? *p : *p * alpha;
        if (c && beta != 0.0) v += ((const double*)c)[ci] * beta;
        *p = v;
      }
    }
}

/* ---- ai.onnx.preview.training optimizers (engines/interp/ops/training.cc) ------------- */

/* Adagrad of one tensor: rr = R / (1 + T * decay). */
HK void hk_adagrad(const double* x, const double* g, const double* h, double* xo, double* ho, int64_t n, double rr,
                   double norm, double eps) {
  int64_t k;
  for (k = 0; k < n; ++k) {
    double gr = norm * x[k] + g[k], hk = h[k] + gr * gr;
    ho[k] = hk;
    xo[k] = x[k] - rr * gr / (sqrt(hk) + eps);
  }
}

/* Adam of one tensor: ra, the bias-corrected rate. */
HK void hk_adam(const double* x, const double* g, const double* v, const double* h, double* xo, double* vo, double* ho,
                int64_t n, double ra, double alpha, double beta, double eps, double norm, double norm_post) {
  int64_t k;
  for (k = 0; k < n; ++k) {
    double gr = norm * x[k] + g[k];
    double vk = alpha * v[k] + (1 - alpha) * gr, hk = beta * h[k] + (1 - beta) * gr * gr;
    vo[k] = vk, ho[k] = hk;
    xo[k] = (1 - norm_post) * (x[k] - ra * (vk / (sqrt(hk) + eps)));
  }
}

/* Momentum (standard or Nesterov) of one tensor: ba, beta (1 at T = 0). */
HK void hk_momentum(const double* x, const double* g, const double* v, double* xo, double* vo, int64_t n, double r,
                    double alpha, double ba, double norm, int nesterov) {
  int64_t k;
  for (k = 0; k < n; ++k) {
    double gr = norm * x[k] + g[k], vk = alpha * v[k] + ba * gr;
    vo[k] = vk;
    xo[k] = x[k] - (nesterov ? r * (gr + alpha * vk) : r * vk);
  }
}

/* ---- DeformConv (2-D) ------------------------------------------------------------------ */

/* DeformConv of x [N, C, H, W] by w [M, C/G, kh, kw] sampled at offsets [N, OG*2*kh*kw, OH, OW]
 * (bilinear, zero outside; off NULL: none, a plain convolution), each sample times its mask
 * (NULL: 1), plus b (NULL: none), into
 * y [N, M, OH, OW]; geo: stride, pad begin and dilation of each axis (h then w). col: scratch
 * of (C/G)*kh*kw*OH*OW doubles. As the interpreter (nn_conv.cc). */
HK void hk_deform_conv(const double* x, const double* w, const double* off, const double* mask, const double* b,
                       double* y, int64_t N, int64_t C, int64_t H, int64_t W, int64_t M, int64_t G, int64_t OG,
                       int64_t kh, int64_t kw, int64_t OH, int64_t OW, const int64_t* geo, double* col) {
  const int64_t kk = kh * kw, outs = OH * OW, Cg = C / G, Mg = M / G, Cog = C / OG, rows = Cg * kk;
  int64_t n, grp, r, p, m;
  for (n = 0; n < N; ++n)
    for (grp = 0; grp < G; ++grp) {
      for (r = 0; r < rows; ++r) {
        int64_t c = grp * Cg + r / kk, k = r % kk, ki = k / kw, kj = k % kw, og = c / Cog;
        const double* xc = x + (n * C + c) * H * W;
        const double* dy = off ? off + ((n * OG + og) * 2 * kk + 2 * k) * outs : 0;
        const double* dx = off ? dy + outs : 0;
        const double* mk = mask ? mask + ((n * OG + og) * kk + k) * outs : 0;
        for (p = 0; p < outs; ++p) {
          int64_t oh = p / OW, ow = p % OW;
          double h = (double)(oh * geo[0] - geo[1] + ki * geo[2]) + (dy ? dy[p] : 0.0);
          double wv = (double)(ow * geo[3] - geo[4] + kj * geo[5]) + (dx ? dx[p] : 0.0);
          double v = 0;
          if (isfinite(h) && isfinite(wv)) {
            double h0f = floor(h), w0f = floor(wv), lh = h - h0f, lw = wv - w0f;
            int64_t h0 = (int64_t)h0f, w0 = (int64_t)w0f;
            if (h0 > -2 && h0 <= H && w0 > -2 && w0 <= W) {
#define HK_DC_AT(yy, xx) (((yy) >= 0 && (yy) < H && (xx) >= 0 && (xx) < W) ? xc[(yy) * W + (xx)] : 0.0)
              v = (1 - lh) * ((1 - lw) * HK_DC_AT(h0, w0) + lw * HK_DC_AT(h0, w0 + 1)) +
                  lh * ((1 - lw) * HK_DC_AT(h0 + 1, w0) + lw * HK_DC_AT(h0 + 1, w0 + 1));
#undef HK_DC_AT
            }
          }
          col[r * outs + p] = mk ? v * mk[p] : v;
        }
      }
      for (m = 0; m < Mg; ++m) {
        const double* wr = w + (grp * Mg + m) * rows;
        double* yr = y + (n * M + grp * Mg + m) * outs;
        for (p = 0; p < outs; ++p) yr[p] = b ? b[grp * Mg + m] : 0.0;
        for (r = 0; r < rows; ++r) {
          const double wv = wr[r], *cr = col + r * outs;
          for (p = 0; p < outs; ++p) yr[p] += wv * cr[p];
        }
      }
    }
}
