/* hodu kernel library, ml section: the ai.onnx.ml ops of scikit-learn exports (TreeEnsemble,
 * LinearRegressor, Scaler, Normalizer, Binarizer, Imputer, OneHotEncoder, LabelEncoder on
 * numbers, ArrayFeatureExtractor, FeatureVectorizer). Inputs as doubles (or int64), sizes
 * given at run time, no allocation. A C port of hodu's reference interpreter
 * (src/engines/interp/ops/ml.cc): float32 results are computed in float where it does.
 * Kernels that can fail on data return non-zero. Needs <math.h>, <stdint.h>, <string.h>. */

/* Inverse error function: Giles' single-precision approximation refined by two Newton steps. */
HK double hk_erfinv(double x) {
  static const double c1[8] = {3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
                               -0.00417768164, 0.246640727, 1.50140941};
  static const double c2[8] = {0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
                               0.00943887047, 1.00167406, 2.83297682};
  double w, r;
  int k;
  if (x <= -1) return -INFINITY;
  if (x >= 1) return INFINITY;
  w = -log((1 - x) * (1 + x));
  if (w < 5) {
    w -= 2.5;
    r = 2.81022636e-08;
    for (k = 0; k < 8; ++k) r = c1[k] + r * w;
  } else {
    w = sqrt(w) - 3;
    r = -0.000200214257;
    for (k = 0; k < 8; ++k) r = c2[k] + r * w;
  }
  r *= x;
  for (k = 0; k < 2; ++k) r -= (erf(r) - x) / (2 / sqrt(3.14159265358979323846) * exp(-r * r));
  return r;
}

/* Post transforms of n scores: 0 NONE, 1 SOFTMAX, 2 LOGISTIC, 3 SOFTMAX_ZERO, 4 PROBIT. */
HK void hk_ml_post(double* s, int64_t n, int kind) {
  int64_t i;
  if (kind == 1 || kind == 3) {
    double mx = -INFINITY, sum = 0;
    for (i = 0; i < n; ++i)
      if (kind == 1 || s[i] != 0) mx = fmax(mx, s[i]);
    for (i = 0; i < n; ++i) {
      s[i] = (kind == 3 && s[i] == 0) ? 0 : exp(s[i] - mx);
      sum += s[i];
    }
    for (i = 0; i < n; ++i) s[i] = sum == 0 ? 0 : s[i] / sum;
  } else if (kind == 2) {
    for (i = 0; i < n; ++i) s[i] = 1 / (1 + exp(-s[i]));
  } else if (kind == 4) {
    for (i = 0; i < n; ++i) s[i] = sqrt(2.0) * hk_erfinv(2 * s[i] - 1);
  }
}

/* TreeEnsemble (opset 5) of x [rows, cols] into y [rows, n_targets]. nodes: 9 int64s a node
 * (mode, feature, true id, false id, true is a leaf, false is a leaf, missing goes true,
 * first member, member count), then the leaves' targets (nl), then the roots (nr); dv: the
 * splits (nn), the leaves' weights (nl), the membership values. agg: 0 AVERAGE, 1 SUM, 2 MIN,
 * 3 MAX; f32: accumulate rounded to float as the interpreter does. Returns 1 on a cycle. */
HK int hk_tree_ensemble(const double* x, double* y, int64_t rows, int64_t cols, const int64_t* nodes,
                        const double* dv, int64_t nn, int64_t nl, int64_t nr, int64_t n_targets, int agg, int post,
                        int f32) {
  const int64_t* leaf_t = nodes + 9 * nn;
  const int64_t* roots = leaf_t + nl;
  const double *split = dv, *leaf_w = dv + nn, *members = dv + nn + nl;
  double init = agg == 2 ? (f32 ? 3.4028234663852886e38 : 1.7976931348623157e308)
                         : agg == 3 ? (f32 ? -3.4028234663852886e38 : -1.7976931348623157e308) : 0.0;
  int64_t r, t, k;
  for (r = 0; r < rows; ++r) {
    const double* row = x + r * cols;
    double* acc = y + r * n_targets;
    for (t = 0; t < n_targets; ++t) acc[t] = init;
    for (t = 0; t < nr; ++t) {
      int64_t root = roots[t], leaf, cur = root, steps = 0;
      const int64_t* rn = nodes + 9 * root;
      double w, v;
      if (rn[4] && rn[5] && rn[2] == rn[3]) {
        leaf = root;
      } else {
        for (;;) {
          const int64_t* n = nodes + 9 * cur;
          double s = split[cur];
          int go;
          v = row[n[1]];
          if (isnan(v) && n[6]) go = 1;
          else switch (n[0]) {
            case 0: go = v <= s; break;
            case 1: go = v < s; break;
            case 2: go = v >= s; break;
            case 3: go = v > s; break;
            case 4: go = v == s; break;
            case 5: go = v != s; break;
            default:
              go = 0;
              for (k = 0; k < n[8] && !go; ++k) go = members[n[7] + k] == v;
          }
          if (go ? n[4] : n[5]) {
            leaf = go ? n[2] : n[3];
            break;
          }
          cur = go ? n[2] : n[3];
          if (++steps > nn) return 1;
        }
      }
      w = leaf_w[leaf];
      v = acc[leaf_t[leaf]];
      switch (agg) {
        case 0: v = v + w / (double)nr; break;
        case 1: v = v + w; break;
        case 2: v = fmin(v, f32 ? (double)(float)w : w); break;
        default: v = fmax(v, f32 ? (double)(float)w : w); break;
      }
      acc[leaf_t[leaf]] = f32 ? (double)(float)v : v;
    }
    hk_ml_post(acc, n_targets, post);
  }
  return 0;
}

/* LinearRegressor: y [rows, targets] = x·coefᵀ + intercepts, accumulated in float as the
 * interpreter does, then the post transform. icpt NULL: none. */
HK void hk_linear_regressor(const double* x, float* y, int64_t rows, int64_t cols, const float* coef,
                            const float* icpt, int64_t targets, int post, double* work) {
  int64_t r, t, c;
  for (r = 0; r < rows; ++r) {
    for (t = 0; t < targets; ++t) {
      float acc = icpt ? icpt[t] : 0.f;
      for (c = 0; c < cols; ++c) acc += (float)x[r * cols + c] * coef[t * cols + c];
      work[t] = acc;
    }
    hk_ml_post(work, targets, post);
    for (t = 0; t < targets; ++t) y[r * targets + t] = (float)work[t];
  }
}

/* Scaler: y = (x - offset) * scale in float, per feature (noff/nsc 1: one for all, 0: none). */
HK void hk_scaler(const double* x, float* y, int64_t rows, int64_t cols, const float* off, int64_t noff,
                  const float* sc, int64_t nsc) {
  int64_t r, c;
  for (r = 0; r < rows; ++r)
    for (c = 0; c < cols; ++c) {
      float o = noff == 0 ? 0.f : off[noff == 1 ? 0 : c], s = nsc == 0 ? 1.f : sc[nsc == 1 ? 0 : c];
      y[r * cols + c] = ((float)x[r * cols + c] - o) * s;
    }
}

/* Normalizer of each row: 0 MAX, 1 L1, 2 L2 (in float; a zero norm leaves the row). */
HK void hk_normalizer(const double* x, float* y, int64_t rows, int64_t cols, int kind) {
  int64_t r, c;
  for (r = 0; r < rows; ++r) {
    const double* p = x + r * cols;
    float d = 0;
    if (kind == 0) {
      d = -INFINITY;
      for (c = 0; c < cols; ++c) d = fmaxf(d, (float)p[c]);
    } else if (kind == 1) {
      for (c = 0; c < cols; ++c) d += fabsf((float)p[c]);
    } else {
      for (c = 0; c < cols; ++c) d += (float)p[c] * (float)p[c];
      d = sqrtf(d);
    }
    for (c = 0; c < cols; ++c) y[r * cols + c] = d == 0 ? (float)p[c] : (float)p[c] / d;
  }
}

/* Binarizer: 1 where x > threshold, else 0; NaN stays NaN. */
HK void hk_binarizer(const double* x, double* y, int64_t n, double th) {
  int64_t i;
  for (i = 0; i < n; ++i) y[i] = isnan(x[i]) ? x[i] : (x[i] > th ? 1.0 : 0.0);
}

/* Imputer: values equal to repl (NaN: NaN values) replaced by imp[feature] (nimp 1: imp[0]). */
HK void hk_imputer(const double* x, double* y, int64_t rows, int64_t cols, const double* imp, int64_t nimp,
                   double repl) {
  int64_t r, c;
  for (r = 0; r < rows; ++r)
    for (c = 0; c < cols; ++c) {
      double v = x[r * cols + c];
      int hit = isnan(repl) ? isnan(v) : v == repl;
      y[r * cols + c] = hit ? imp[nimp == 1 ? 0 : c] : v;
    }
}

/* Position of key k in sorted keys[n] (integers or doubles), or -1. */
HK int64_t hk_ml_find(const void* keys, int64_t n, const void* k, int integer) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    int less = integer ? ((const int64_t*)keys)[mid] < *(const int64_t*)k : ((const double*)keys)[mid] < *(const double*)k;
    if (less) lo = mid + 1;
    else hi = mid;
  }
  if (lo == n) return -1;
  if (integer) return ((const int64_t*)keys)[lo] == *(const int64_t*)k ? lo : -1;
  return ((const double*)keys)[lo] == *(const double*)k ? lo : -1;
}

/* OneHotEncoder of x (int64) over sorted categories (pos: each one's column) into y [n, ncat]
 * floats. zeros 0: a value outside the categories fails (returns 1). */
HK int hk_one_hot_encoder(const int64_t* x, float* y, int64_t n, const int64_t* cats, const int64_t* pos,
                          int64_t ncat, int zeros) {
  int64_t i;
  memset(y, 0, (size_t)(n * ncat) * sizeof(float));
  for (i = 0; i < n; ++i) {
    int64_t k = hk_ml_find(cats, ncat, &x[i], 1);
    if (k < 0) {
      if (!zeros) return 1;
      continue;
    }
    y[i * ncat + pos[k]] = 1.f;
  }
  return 0;
}

/* LabelEncoder on numbers: each x (int64 or double) looked up in sorted keys, its value (8
 * bytes: int64 or double) written, else the default; nan_value: the value of a NaN key
 * (NULL: the default). */
HK void hk_label_encoder(const void* x, void* y, int64_t n, const void* keys, const void* values, int64_t nk,
                         const void* def, const void* nan_value, int integer) {
  int64_t i;
  for (i = 0; i < n; ++i) {
    const void* src = def;
    if (!integer && isnan(((const double*)x)[i])) {
      if (nan_value) src = nan_value;
    } else {
      int64_t k = hk_ml_find(keys, nk, (const char*)x + i * 8, integer);
      if (k >= 0) src = (const char*)values + k * 8;
    }
    memcpy((char*)y + i * 8, src, 8);
  }
}

/* ArrayFeatureExtractor: y [rows, k] = x [rows, c] at the k indices (esize-byte elements).
 * Returns 1 when an index is out of range. */
HK int hk_array_feature_extractor(const void* x, const int64_t* idx, void* y, int64_t rows, int64_t c, int64_t k,
                                  int64_t esize) {
  int64_t r, j;
  for (j = 0; j < k; ++j)
    if (idx[j] < 0 || idx[j] >= c) return 1;
  for (r = 0; r < rows; ++r)
    for (j = 0; j < k; ++j)
      memcpy((char*)y + (r * k + j) * esize, (const char*)x + (r * c + idx[j]) * esize, (size_t)esize);
  return 0;
}

/* FeatureVectorizer: the first min(dim, width) columns of x [rows, width] into columns
 * [off, off + dim) of y [rows, total] (the rest zero, written by the caller). */
HK void hk_feature_vectorize(const double* x, float* y, int64_t rows, int64_t width, int64_t dim, int64_t total,
                             int64_t off) {
  int64_t r, c, w = dim < width ? dim : width;
  for (r = 0; r < rows; ++r)
    for (c = 0; c < w; ++c) y[r * total + off + c] = (float)x[r * width + c];
}

/* ---- TfIdfVectorizer (ONNX's default domain; the text featurizer of the same pipelines) -- */

/* The entry of gram (s int64s) in a block of count sorted entries of s items and an output
 * index each, or -1. */
HK int64_t hk_tfidf_find(const int64_t* block, int64_t count, int64_t s, const int64_t* gram) {
  int64_t lo = 0, hi = count, k;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2, c = 0;
    const int64_t* e = block + mid * (s + 1);
    for (k = 0; k < s && c == 0; ++k) c = e[k] < gram[k] ? -1 : e[k] > gram[k] ? 1 : 0;
    if (c == 0) return e[s];
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return -1;
}

/* Counts the pool's n-grams (sizes min_gram..max_gram, skips up to max_skip) in each row of
 * x [rows, cols] and weighs them into y [rows, out_size] (mode 0 TF, 1 IDF, 2 TFIDF; weights
 * NULL: 1), as the interpreter (text.cc). grams: the pool by size, start[s] and cnt[s] its
 * block of size-s grams; freq: out_size scratch, gram: max_gram scratch. */
HK void hk_tfidf(const int64_t* x, float* y, int64_t rows, int64_t cols, int64_t out_size, int64_t min_gram,
                 int64_t max_gram, int64_t max_skip, const int64_t* grams, const int64_t* start, const int64_t* cnt,
                 int mode, const float* weights, int64_t* freq, int64_t* gram) {
  int64_t r, i, o;
  for (r = 0; r < rows; ++r) {
    const int64_t* row = x + r * cols;
    int64_t start_size = min_gram, dist, s, size, k;
    for (o = 0; o < out_size; ++o) freq[o] = 0;
#define HK_TFIDF_HIT(sz)                                                          \
  do {                                                                            \
    int64_t at = hk_tfidf_find(grams + start[sz], cnt[sz], (sz), gram);           \
    if (at >= 0) ++freq[at];                                                      \
  } while (0)
    if (start_size == 1) {
      for (i = 0; i < cols; ++i) {
        gram[0] = row[i];
        HK_TFIDF_HIT(1);
      }
      ++start_size;
    }
    if (start_size <= max_gram)
      for (dist = 1; dist <= max_skip + 1; ++dist)
        for (s = 0; s + dist * (start_size - 1) < cols; ++s)
          for (size = 1, k = s; size <= max_gram && k < cols; ++size, k += dist) {
            gram[size - 1] = row[k];
            if (size >= start_size) HK_TFIDF_HIT(size);
          }
#undef HK_TFIDF_HIT
    for (o = 0; o < out_size; ++o) {
      float f = (float)freq[o], w = weights ? weights[o] : 1.0f;
      y[r * out_size + o] = mode == 0 ? f : mode == 1 ? (freq[o] > 0 ? w : 0.0f) : (weights ? f * w : f);
    }
  }
}
