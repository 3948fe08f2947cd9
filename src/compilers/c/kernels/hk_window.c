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

/* y [N, C, img...] (zeroed here) = the sum of the blocks of col [N, C * prod(block), L]
 * placed on the image (Col2Im). Returns 1 when the input's dims do not match the blocks. */
HK int hk_col2im(const double* col, double* y, int64_t N, int64_t CK, int64_t L, int64_t nd, const int64_t* img,
                 const int64_t* block, const int64_t* strides, const int64_t* dil, const int64_t* pads) {
  int64_t st[8], grid[8], kidx[8], q[8], kk = 1, nl = 1, imgs = 1, C, n, c, k, p, d;
  if (nd < 1 || nd > 8) return 1;
  for (d = 0; d < nd; ++d) {
    int64_t span = img[d] + pads[d] + pads[d + nd] - ((block[d] - 1) * dil[d] + 1);
    if (block[d] <= 0 || img[d] <= 0 || span < 0) return 1;
    grid[d] = span / strides[d] + 1;
    kk *= block[d], nl *= grid[d], imgs *= img[d];
  }
  if (CK % kk != 0 || nl != L) return 1;
  C = CK / kk;
  hk_strides(nd, img, st);
  for (p = 0; p < N * C * imgs; ++p) y[p] = 0;
  for (n = 0; n < N; ++n)
    for (c = 0; c < C; ++c) {
      double* oc = y + (n * C + c) * imgs;
      for (k = 0; k < kk; ++k) {
        const double* src = col + ((n * C + c) * kk + k) * L;
        int64_t rem = k;
        for (d = nd; d-- > 0;) kidx[d] = rem % block[d], rem /= block[d];
        for (d = 0; d < nd; ++d) q[d] = 0;
        for (p = 0; p < L; ++p) {
          int64_t off = 0;
          int ok = 1;
          for (d = 0; d < nd && ok; ++d) {
            int64_t i = q[d] * strides[d] - pads[d] + kidx[d] * dil[d];
            if (i < 0 || i >= img[d]) ok = 0;
            off += i * st[d];
          }
          if (ok) oc[off] += src[p];
          for (d = nd; d-- > 0;) {
            if (++q[d] < grid[d]) break;
            q[d] = 0;
          }
        }
      }
    }
  return 0;
}

/* y (out dims) = x (in dims) cropped or zero-padded about the centre of each dim
 * (CenterCropPad), moved by element size. */
HK void hk_center_crop_pad(const void* x, void* y, int64_t r, const int64_t* in, const int64_t* out, int64_t es) {
  int64_t st[16], o[16], total = 1, q, d;
  for (d = 0; d < r; ++d) total *= out[d], o[d] = 0;
  hk_strides(r, in, st);
  for (q = 0; q < total; ++q) {
    int64_t off = 0;
    int ok = 1;
    for (d = 0; d < r; ++d) {
      int64_t i = out[d] <= in[d] ? o[d] + (in[d] - out[d]) / 2 : o[d] - (out[d] - in[d]) / 2;
      if (i < 0 || i >= in[d]) ok = 0;
      off += i * st[d];
    }
    if (ok) memcpy((char*)y + q * es, (const char*)x + off * es, (size_t)es);
    else memset((char*)y + q * es, 0, (size_t)es);
    for (d = r; d-- > 0;) {
      if (++o[d] < out[d]) break;
      o[d] = 0;
    }
  }
}

/* ---- signal ---------------------------------------------------------------------------- */

/* DFT along `axis` of x [..., len, 1 or 2] (dims xd) into y (dims yd): n points (n <= 0: the
 * default), onesided, inverse; inverse + onesided is the complex-to-real inverse. Twiddles
 * exp(-+2 pi i (j k mod n) / n) as the interpreter's table. Returns 1 when yd is not the
 * result's shape or an argument is out of range. */
HK int hk_dft(const double* x, double* y, int64_t r, const int64_t* xd, const int64_t* yd, int64_t axis, int64_t n,
              int inverse, int onesided) {
  const double pi = 3.14159265358979323846, sign = inverse ? 1.0 : -1.0;
  int64_t len, nout, oc, ci, outer = 1, inner = 1, q, k, j, d;
  int c2r = inverse && onesided;
  if (r < 2 || axis < -r || axis >= r) return 1;
  if (axis < 0) axis += r;
  if (axis == r - 1 || (xd[r - 1] != 1 && xd[r - 1] != 2)) return 1;
  len = xd[axis];
  if (n <= 0) n = c2r ? 2 * (len - 1) : len;
  if (n <= 0) return 1;
  nout = c2r ? n : onesided ? n / 2 + 1 : n;
  oc = c2r ? 1 : 2;
  ci = xd[r - 1];
  for (d = 0; d < r - 1; ++d)
    if (yd[d] != (d == axis ? nout : xd[d])) return 1;
  if (yd[r - 1] != oc) return 1;
  for (d = 0; d < axis; ++d) outer *= xd[d];
  for (d = axis + 1; d < r - 1; ++d) inner *= xd[d];
  for (q = 0; q < outer * inner; ++q) {
    int64_t o = q / inner, i = q % inner;
    for (k = 0; k < nout; ++k) {
      double re = 0, im = 0;
      int64_t idx = 0;
      for (j = 0; j < n; ++j) {
        double ar = 0, ai = 0, a = sign * 2.0 * pi * (double)idx / (double)n, wr = cos(a), wi = sin(a);
        int64_t src = j, conj = 0;
        if (c2r && j > n / 2) src = n - j, conj = 1;
        if (src < len) {
          int64_t base = ((o * len + src) * inner + i) * ci;
          ar = x[base], ai = ci == 2 ? x[base + 1] : 0.0;
        }
        if (c2r && (src == 0 || (n % 2 == 0 && src == n / 2))) ai = 0;
        if (conj) ai = -ai;
        re += ar * wr - ai * wi;
        im += ar * wi + ai * wr;
        idx += k;
        if (idx >= n) idx %= n;
      }
      if (inverse) re /= (double)n, im /= (double)n;
      y[((o * nout + k) * inner + i) * oc] = re;
      if (oc == 2) y[((o * nout + k) * inner + i) * oc + 1] = im;
    }
  }
  return 0;
}

/* y [size] = the Hann (0), Hamming (1) or Blackman (2) window. */
HK void hk_window_fn(double* y, int64_t size, int kind, int periodic, int integer) {
  const double pi = 3.14159265358979323846, N = (double)(periodic ? size : size - 1);
  int64_t i;
  for (i = 0; i < size; ++i) {
    double n = (double)i, v;
    if (kind == 0) {
      double s = sin(n * pi / N);
      v = s * s;
    } else if (kind == 1) {
      double a = 25.0 / 46.0;
      v = a - cos(n * pi * 2 / N) * (1 - a);
    } else {
      v = 0.42 - cos(n * pi * 2 / N) * 0.5 + cos(n * pi * 4 / N) * 0.08;
    }
    y[i] = integer ? trunc(v) : v;
  }
}

/* y [N, C, out...] (zeroed here) with x's elements at the flat indices idx, which address
 * the default output dims `def` (MaxUnpool; an explicit output_shape keeps each element at
 * its spatial coordinates). Returns 1 on an index out of range. */
HK int hk_max_unpool(const double* x, const int64_t* idx, double* y, int64_t count, int64_t rank, const int64_t* def,
                     const int64_t* out) {
  int64_t st[16], def_total = 1, def_ins = 1, out_ins = 1, total = 1, i, d;
  if (rank < 3 || rank > 16) return 1;
  for (d = 0; d < rank; ++d) def_total *= def[d], total *= out[d];
  for (d = 2; d < rank; ++d) def_ins *= def[d], out_ins *= out[d];
  hk_strides(rank, out, st);
  for (i = 0; i < total; ++i) y[i] = 0;
  for (i = 0; i < count; ++i) {
    int64_t v = idx[i], plane, rem, off;
    if (v < 0 || v >= def_total) return 1;
    plane = v / def_ins, rem = v % def_ins, off = plane * out_ins;
    for (d = rank; d-- > 2;) {
      int64_t c = rem % def[d];
      rem /= def[d];
      if (c >= out[d]) return 1;
      off += c * st[d];
    }
    y[off] = x[i];
  }
  return 0;
}

/* STFT of signal [B, L, 1 or 2] into y [B, frames, nout, 2] (dims yd checked): frames of
 * flen samples every `step`, times the window (NULL: none), each transformed as hk_dft does
 * (nout = flen / 2 + 1 when onesided). Returns 1 on bad sizes. */
HK int hk_stft(const double* x, double* y, int64_t B, int64_t L, int64_t ci, int64_t step, const double* window,
               int64_t flen, int onesided, const int64_t* yd) {
  const double pi = 3.14159265358979323846;
  int64_t frames, nout, q, k, j;
  if (step <= 0 || flen <= 0 || L < flen || (ci == 2 && onesided)) return 1;
  frames = (L - flen) / step + 1;
  nout = onesided ? flen / 2 + 1 : flen;
  if (yd[0] != B || yd[1] != frames || yd[2] != nout || yd[3] != 2) return 1;
  for (q = 0; q < B * frames; ++q) {
    int64_t b = q / frames, f = q % frames;
    for (k = 0; k < nout; ++k) {
      double re = 0, im = 0;
      int64_t idx = 0;
      for (j = 0; j < flen; ++j) {
        int64_t base = (b * L + f * step + j) * ci;
        double w = window ? window[j] : 1.0, a = -2.0 * pi * (double)idx / (double)flen;
        double ar = x[base] * w, ai = (ci == 2 ? x[base + 1] : 0.0) * w, wr = cos(a), wi = sin(a);
        re += ar * wr - ai * wi;
        im += ar * wi + ai * wr;
        idx += k;
        if (idx >= flen) idx %= flen;
      }
      y[(q * nout + k) * 2] = re;
      y[(q * nout + k) * 2 + 1] = im;
    }
  }
  return 0;
}

/* MelWeightMatrix [dft_length / 2 + 1, bins] into y (zeroed here); fb: scratch of bins + 2
 * int64s. The mel edges in float, the rest in double, as the interpreter (signal.cc).
 * Returns 1 when a mel bin maps outside the spectrum. */
HK int hk_mel_weight_matrix(double* y, int64_t bins, int64_t dft_len, int64_t rate, double lo_edge, double hi_edge,
                            int64_t* fb) {
  const float lo = (float)lo_edge, hi = (float)hi_edge;
  const float lo_mel = 2595.0f * log10f(1.0f + lo / 700.0f), hi_mel = 2595.0f * log10f(1.0f + hi / 700.0f);
  const float step = (hi_mel - lo_mel) / (float)(bins + 2);
  const int64_t spec = dft_len / 2 + 1;
  int64_t i, j;
  for (i = 0; i < spec * bins; ++i) y[i] = 0;
  for (i = 0; i < bins + 2; ++i) {
    double f = (double)i * (double)step + (double)lo_mel;
    f = 700.0 * (pow(10.0, f / 2595.0) - 1.0);
    fb[i] = (int64_t)floor((double)(dft_len + 1) * f / (double)rate);
  }
  for (i = 0; i < bins; ++i) {
    int64_t l = fb[i], c = fb[i + 1], h = fb[i + 2];
    if (c - l == 0) {
      if (c < 0 || c >= spec) return 1;
      y[c * bins + i] = 1.0;
    } else {
      for (j = l; j <= c; ++j) {
        if (j < 0 || j >= spec) return 1;
        y[j * bins + i] = (double)(j - l) / (double)(c - l);
      }
    }
    if (h - c > 0)
      for (j = c; j < h; ++j) {
        if (j < 0 || j >= spec) return 1;
        y[j * bins + i] = (double)(h - j) / (double)(h - c);
      }
  }
  return 0;
}

/* GlobalLpPool: y[i] = (sum over the spatial block of |x|^p)^(1/p), as the interpreter. */
HK void hk_global_lp_pool(const double* x, double* y, int64_t nc, int64_t spatial, double p) {
  int64_t i, k;
  for (i = 0; i < nc; ++i) {
    double s = 0;
    for (k = 0; k < spatial; ++k) s += pow(fabs(x[i * spatial + k]), p);
    y[i] = pow(s, 1.0 / p);
  }
}
