/* hodu kernel library, resampling section: Resize in every mode ONNX defines (cubic,
 * antialias, tf_crop_and_resize, axes, keep_aspect_ratio_policy, scales read while running),
 * GridSample (N-D, every mode and padding mode) and AffineGrid. Doubles in and out (the
 * generated code converts other float types around a call); sizes given at run time; no
 * allocation. A C port of hodu's reference interpreter (src/engines/interp/ops/nn_resize.cc),
 * so compiled code computes what the interpreter does. Needs <math.h>, <stdint.h>. */

/* The most taps one output index reads along one dim: antialiased downscaling by s reads
 * about 4/s + 4 (cubic); a larger window is refused (hk_resize_any returns 2). */
#define HK_RESIZE_MAX_TAPS 128

/* mode: 0 nearest, 1 linear, 2 cubic. ctm: 0 half_pixel, 1 align_corners, 2 asymmetric,
 * 3 pytorch_half_pixel, 4 half_pixel_symmetric, 5 tf_crop_and_resize. nearest: 0
 * round_prefer_floor, 1 round_prefer_ceil, 2 floor, 3 ceil. policy: 0 stretch, 1 not_larger,
 * 2 not_smaller. */

static double hk_cubic_w(double x, double A) {
  x = fabs(x);
  if (x <= 1) return ((A + 2) * x - (A + 3)) * x * x + 1;
  if (x < 2) return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
  return 0;
}

/* The output dims and per-dim scales of a Resize: `scales` (na doubles, read as the float32
 * the op holds) or `sizes` (na int64s, with the aspect-ratio policy) over `axes`. Returns
 * non-zero on a bad scale or size. */
HK int hk_resize_params(int64_t r, const int64_t* in, int64_t na, const int64_t* axes, const double* scales,
                        const int64_t* sizes, int policy, double* scale, int64_t* out) {
  int64_t d, i;
  for (d = 0; d < r; ++d) {
    scale[d] = 1.0;
    out[d] = in[d];
  }
  if (scales) {
    for (i = 0; i < na; ++i) {
      double s = (double)(float)scales[i];
      if (!(s > 0)) return 1;
      scale[axes[i]] = s;
      out[axes[i]] = (int64_t)floor(s * (double)in[axes[i]]);
    }
    return 0;
  }
  for (i = 0; i < na; ++i) {
    if (sizes[i] < 0 || in[axes[i]] == 0) return 1;
    out[axes[i]] = sizes[i];
    scale[axes[i]] = (double)sizes[i] / (double)in[axes[i]];
  }
  if (policy != 0 && na > 0) {
    double s = scale[axes[0]];
    for (i = 0; i < na; ++i) s = policy == 1 ? fmin(s, scale[axes[i]]) : fmax(s, scale[axes[i]]);
    for (i = 0; i < na; ++i) {
      scale[axes[i]] = s;
      out[axes[i]] = (int64_t)(s * (double)in[axes[i]] + 0.5);
    }
  }
  return 0;
}

/* The taps (clamped source index, weight) of output index x along a dim of `in` elements;
 * returns the count, 0 with *extrap set when the point is outside a tf_crop_and_resize roi,
 * -1 when the window has more than HK_RESIZE_MAX_TAPS taps. */
static int hk_resize_taps(int64_t in, int64_t on, int64_t x, double s, double rs, double re, int mode, int ctm,
                          int nearest, double A, int exclude, int antialias, int64_t* idx, double* w, int* extrap) {
  double xd = (double)x, ow = s * (double)in, xo, fl, ratio, sum;
  int64_t base, k, start, end;
  int n = 0, j, m;
  *extrap = 0;
  if (ctm == 1) xo = ow == 1 ? 0.0 : xd * (double)(in - 1) / (ow - 1);
  else if (ctm == 2) xo = xd / s;
  else if (ctm == 5) {
    xo = ow == 1 ? (re - rs) * (double)(in - 1) / 2 : xd * (re - rs) * (double)(in - 1) / (ow - 1);
    xo += rs * (double)(in - 1);
    if (xo < 0 || xo > (double)(in - 1)) {
      *extrap = 1;
      return 0;
    }
  } else if (ctm == 3) xo = ow == 1 ? -0.5 : (xd + 0.5) / s - 0.5;
  else if (ctm == 0) xo = (xd + 0.5) / s - 0.5;
  else xo = (double)in / 2 * (1 - (double)on / ow) + (xd + 0.5) / s - 0.5;
  /* base = ceil(xo) - 1 so that ratio is in (0, 1]. */
  fl = floor(xo);
  base = xo == fl ? (int64_t)fl - 1 : (int64_t)fl;
  ratio = xo == fl ? 1.0 : xo - fl;
  if (mode == 0) {
    int up = xo == fl || (nearest == 0 ? ratio > 0.5 : nearest == 1 ? ratio >= 0.5 : nearest == 3);
    idx[0] = up ? base + 1 : base;
    w[0] = 1.0;
    n = 1;
  } else if (!antialias) {
    if (mode == 1) {
      idx[0] = base, w[0] = 1 - ratio;
      idx[1] = base + 1, w[1] = ratio;
      n = 2;
    } else {
      for (k = -1; k <= 2; ++k, ++n) idx[n] = base + k, w[n] = hk_cubic_w(ratio - (double)k, A);
    }
  } else {
    double sc = s < 1 ? s : 1;
    if (mode == 1) start = (int64_t)floor(-1 / sc) + 1, end = start + 2 - 2 * start;
    else start = (int64_t)floor(-2 / sc) + 1, end = 2 - start;
    if (end - start > HK_RESIZE_MAX_TAPS) return -1;
    for (k = start; k < end; ++k, ++n) {
      double t = mode == 1 ? 1 - fabs(((double)k - ratio) * sc) : hk_cubic_w(sc * ((double)k - ratio), A);
      idx[n] = base + k;
      w[n] = mode == 1 ? (t < 0 ? 0 : t > 1 ? 1 : t) : t;
    }
    for (sum = 0, j = 0; j < n; ++j) sum += w[j];
    for (j = 0; j < n; ++j) w[j] /= sum;
  }
  if (exclude && mode != 0) {
    for (sum = 0, j = 0; j < n; ++j) {
      if (idx[j] < 0 || idx[j] >= in) w[j] = 0;
      sum += w[j];
    }
    for (j = 0; j < n; ++j) w[j] /= sum;
  }
  for (m = 0, j = 0; j < n; ++j) {
    if (w[j] == 0) continue;
    idx[m] = idx[j] < 0 ? 0 : idx[j] >= in ? in - 1 : idx[j];
    w[m++] = w[j];
  }
  return m;
}

/* Dim d's separable sum and the dims inside it (the reference's nesting order). */
static double hk_resize_sum(const double* x, int64_t r, int64_t d, int64_t off, const int64_t* st,
                            int64_t (*ti)[HK_RESIZE_MAX_TAPS], double (*tw)[HK_RESIZE_MAX_TAPS], const int* nt) {
  double acc = 0;
  int j;
  if (d == r) return x[off];
  for (j = 0; j < nt[d]; ++j) acc += tw[d][j] * hk_resize_sum(x, r, d + 1, off + ti[d][j] * st[d], st, ti, tw, nt);
  return acc;
}

/* y (out dims) = x (in dims) resized. roi: 2 * na values over `axes` (NULL: none). Returns 1
 * on a rank above 8, 2 on a window wider than HK_RESIZE_MAX_TAPS. */
HK int hk_resize_any(const double* x, double* y, int64_t r, const int64_t* in, const int64_t* out,
                     const double* scale, int64_t na, const int64_t* axes, const double* roi, int mode, int ctm,
                     int nearest, double A, int exclude, double extrapolation, int antialias) {
  int64_t st[8], o[8], ti[8][HK_RESIZE_MAX_TAPS], total = 1, q, d, i, changed = 0;
  double tw[8][HK_RESIZE_MAX_TAPS], rs[8], re[8];
  int nt[8], ex[8];
  if (r > 8 || r < 1) return 1;
  for (d = 0; d < r; ++d) rs[d] = 0, re[d] = 1, o[d] = 0, total *= out[d];
  if (roi)
    for (i = 0; i < na; ++i) rs[axes[i]] = roi[i], re[axes[i]] = roi[na + i];
  hk_strides(r, in, st);
  for (q = 0; q < total; ++q) {
    int outside = 0;
    for (d = changed; d < r; ++d) { /* the dims whose index moved */
      nt[d] = hk_resize_taps(in[d], out[d], o[d], scale[d], rs[d], re[d], mode, ctm, nearest, A, exclude, antialias,
                             ti[d], tw[d], &ex[d]);
      if (nt[d] < 0) return 2;
    }
    for (d = 0; d < r; ++d) outside |= ex[d];
    y[q] = outside ? extrapolation : hk_resize_sum(x, r, 0, 0, st, ti, tw, nt);
    for (d = r; d-- > 0;) {
      changed = d;
      if (++o[d] < out[d]) break;
      o[d] = 0;
    }
  }
  return 0;
}

/* ---- GridSample, AffineGrid ------------------------------------------------------------ */

static double hk_gs_reflect(double x, double lo, double hi) {
  double rng = hi - lo, dx, rr;
  int64_t n;
  if (x < lo) {
    dx = lo - x;
    n = (int64_t)(dx / rng);
    rr = dx - (double)n * rng;
    return n % 2 == 0 ? lo + rr : hi - rr;
  }
  if (x > hi) {
    dx = x - hi;
    n = (int64_t)(dx / rng);
    rr = dx - (double)n * rng;
    return n % 2 == 0 ? hi - rr : lo + rr;
  }
  return x;
}

static double hk_gs_sum(const double* x, int64_t nd, int64_t d, int64_t off, int ok, const int64_t* st,
                        int64_t (*ix)[4], double (*w)[4], int (*valid)[4], const int* nt) {
  double acc = 0;
  int j;
  if (d == nd) return ok ? x[off] : 0.0;
  for (j = 0; j < nt[d]; ++j)
    acc += w[d][j] * hk_gs_sum(x, nd, d + 1, off + ix[d][j] * st[d], ok && valid[d][j], st, ix, w, valid, nt);
  return acc;
}

/* y [N, C, out...] = x [N, C, dims...] sampled at grid [N, out..., nd] (x, y[, z]: the last
 * spatial dim first). mode: 0 nearest, 1 linear, 2 cubic; pad: 0 zeros, 1 border, 2
 * reflection. Returns 1 on more than 8 spatial dims. */
HK int hk_grid_sample(const double* x, const double* grid, double* y, int64_t N, int64_t C, int64_t nd,
                      const int64_t* dims, const int64_t* outd, int mode, int pad, int align) {
  int64_t st[8], ix[8][4], ins = 1, outs = 1, q, d, ch;
  double lo[8], hi[8], c[8], w[8][4];
  int valid[8][4], nt[8];
  if (nd < 1 || nd > 8) return 1;
  for (d = 0; d < nd; ++d) ins *= dims[d], outs *= outd[d];
  hk_strides(nd, dims, st);
  for (d = 0; d < nd; ++d) {
    lo[d] = align ? 0.0 : -0.5;
    hi[d] = align ? (double)(dims[d] - 1) : (double)dims[d] - 0.5;
  }
  for (q = 0; q < N * outs; ++q) {
    int64_t n = q / outs, p = q % outs;
    const double* gp = grid + q * nd;
    for (d = 0; d < nd; ++d) {
      double v = gp[nd - 1 - d], len = (double)dims[d];
      c[d] = align ? (v + 1) / 2 * (len - 1) : ((v + 1) * len - 1) / 2;
      if (mode == 0) c[d] = nearbyint(c[d]);
      if (c[d] < lo[d] || c[d] > hi[d]) {
        /* cubic with border padding clamps each tap, not the point (as torch and ONNX Runtime) */
        if (pad == 1 && mode != 2) c[d] = c[d] < 0 ? 0 : c[d] > (double)(dims[d] - 1) ? (double)(dims[d] - 1) : c[d];
        else if (pad == 2) c[d] = hk_gs_reflect(c[d], lo[d], hi[d]);
      }
    }
    for (d = 0; d < nd; ++d) {
      int64_t i0, tap[4], k;
      double wt[4], f = floor(c[d]), t;
      if (mode == 0) {
        nt[d] = 1, tap[0] = (int64_t)c[d], wt[0] = 1;
      } else if (mode == 1) {
        i0 = (int64_t)f, t = c[d] - f;
        nt[d] = 2, tap[0] = i0, wt[0] = 1 - t, tap[1] = i0 + 1, wt[1] = t;
      } else {
        const double a = -0.75;
        i0 = (int64_t)f, t = fabs(c[d] - f);
        nt[d] = 4;
        wt[0] = ((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a;
        wt[1] = ((a + 2) * t - (a + 3)) * t * t + 1;
        wt[2] = ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1;
        wt[3] = ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a;
        for (k = 0; k < 4; ++k) tap[k] = i0 - 1 + k;
      }
      for (k = 0; k < nt[d]; ++k) {
        int64_t i = tap[k];
        int ok = 1;
        if (pad == 0) ok = i >= 0 && i < dims[d];
        else if (pad == 1) i = i < 0 ? 0 : i >= dims[d] ? dims[d] - 1 : i;
        else i = (int64_t)hk_gs_reflect((double)i, lo[d], hi[d]);
        if (ok && (i < 0 || i >= dims[d])) i = i < 0 ? 0 : dims[d] - 1;
        if (!ok) i = 0;
        ix[d][k] = i, w[d][k] = wt[k], valid[d][k] = ok;
      }
    }
    for (ch = 0; ch < C; ++ch)
      y[(n * C + ch) * outs + p] = hk_gs_sum(x + (n * C + ch) * ins, nd, 0, 0, 1, st, ix, w, valid, nt);
  }
  return 0;
}

/* y [N, sizes..., nd] = theta [N, nd, nd + 1] applied to the normalized grid of `sizes`
 * (nd = 2 or 3; x the last spatial dim). */
HK void hk_affine_grid(const double* theta, double* y, int64_t N, int64_t nd, const int64_t* sizes, int align) {
  int64_t outs = 1, n, p, d, j, k, idx[8];
  double base[9];
  for (d = 0; d < nd; ++d) outs *= sizes[d];
  for (n = 0; n < N; ++n)
    for (p = 0; p < outs; ++p) {
      int64_t rem = p;
      const double* tn = theta + n * nd * (nd + 1);
      for (d = nd; d-- > 0;) idx[d] = rem % sizes[d], rem /= sizes[d];
      for (k = 0; k < nd; ++k) {
        int64_t i = idx[nd - 1 - k], m = sizes[nd - 1 - k];
        base[k] = align ? (m == 1 ? 0.0 : -1.0 + 2.0 * (double)i / (double)(m - 1))
                        : (2.0 * (double)i + 1.0) / (double)m - 1.0;
      }
      base[nd] = 1;
      for (j = 0; j < nd; ++j) {
        double acc = 0;
        for (k = 0; k <= nd; ++k) acc += base[k] * tn[j * (nd + 1) + k];
        y[(n * outs + p) * nd + j] = acc;
      }
    }
}
