/* hodu kernel library, detection section: NonMaxSuppression. Doubles in, int64 indices out,
 * sizes given at run time, no allocation (the caller's scratch). A C port of hodu's
 * reference interpreter (src/engines/interp/ops/nn_misc.cc). Needs <math.h>, <stdint.h>. */

/* Whether box j suppresses box i: corners (y1, x1, y2, x2), IoU above the threshold. */
static int hk_nms_suppress(const double* a, const double* c, double iou) {
  double ymin = fmax(a[0], c[0]), xmin = fmax(a[1], c[1]), ymax = fmin(a[2], c[2]), xmax = fmin(a[3], c[3]);
  double inter = fmax(0.0, ymax - ymin) * fmax(0.0, xmax - xmin), area_a, area_c, uni;
  if (inter <= 0) return 0;
  area_a = (a[2] - a[0]) * (a[3] - a[1]);
  area_c = (c[2] - c[0]) * (c[3] - c[1]);
  uni = area_a + area_c - inter;
  if (area_a <= 0 || area_c <= 0 || uni <= 0) return 0;
  return inter / uni > iou;
}

/* The selected (batch, class, box) triples of boxes [B, S, 4] and scores [B, K, S] into sel
 * (room for B * K * S triples); returns their count. Scratch: cand and kept S int64s each,
 * bb 4 * S doubles. */
HK int64_t hk_nms(const double* boxes, const double* scores, int64_t B, int64_t S, int64_t K, int64_t max_out,
                  double iou, int has_th, double th, int center_point_box, int64_t* sel, int64_t* cand,
                  int64_t* kept, double* bb) {
  int64_t b, i, j, k, count = 0;
  if (max_out <= 0) return 0;
  for (b = 0; b < B; ++b) {
    for (i = 0; i < S; ++i) {
      const double* p = boxes + (b * S + i) * 4;
      double* q = bb + i * 4;
      if (!center_point_box) {
        q[0] = fmin(p[0], p[2]), q[1] = fmin(p[1], p[3]), q[2] = fmax(p[0], p[2]), q[3] = fmax(p[1], p[3]);
      } else {
        q[0] = p[1] - p[3] / 2, q[1] = p[0] - p[2] / 2, q[2] = p[1] + p[3] / 2, q[3] = p[0] + p[2] / 2;
      }
    }
    for (k = 0; k < K; ++k) {
      const double* s = scores + (b * K + k) * S;
      int64_t nc = 0, nk = 0;
      for (i = 0; i < S; ++i) {
        if (has_th && !(s[i] > th)) continue;
        /* stable insertion by descending score */
        for (j = nc; j > 0 && s[cand[j - 1]] < s[i]; --j) cand[j] = cand[j - 1];
        cand[j] = i;
        ++nc;
      }
      for (i = 0; i < nc && nk < max_out; ++i) {
        int ok = 1;
        for (j = 0; j < nk && ok; ++j) ok = !hk_nms_suppress(bb + cand[i] * 4, bb + kept[j] * 4, iou);
        if (ok) kept[nk++] = cand[i];
      }
      for (i = 0; i < nk; ++i) {
        sel[count * 3] = b, sel[count * 3 + 1] = k, sel[count * 3 + 2] = kept[i];
        ++count;
      }
    }
  }
  return count;
}

/* RoiAlign of x [N, C, H, W] over rois [R, 4] (x1, y1, x2, y2) and their batch indices into
 * y [R, C, OH, OW]: bilinear samples on a gh x gw grid per bin, averaged (is_max 0) or the
 * largest weighted tap (is_max 1), as the reference interpreter (nn_pool.cc) computes them.
 * Returns 1 when a batch index is out of range. */
HK int hk_roi_align(const double* x, const double* rois, const int64_t* bidx, double* y, int64_t N, int64_t C,
                    int64_t H, int64_t W, int64_t R, int64_t OH, int64_t OW, int64_t sr, double scale, int half,
                    int is_max) {
  int64_t r, c, ph, pw, iy, ix;
  for (r = 0; r < R; ++r)
    if (bidx[r] < 0 || bidx[r] >= N) return 1;
  for (r = 0; r < R; ++r) {
    double off = half ? 0.5 : 0.0;
    double sw = rois[r * 4] * scale - off, sh = rois[r * 4 + 1] * scale - off;
    double ew = rois[r * 4 + 2] * scale - off, eh = rois[r * 4 + 3] * scale - off;
    double rw = ew - sw, rh = eh - sh, bh, bw, count;
    int64_t gh, gw;
    if (!half) {
      rw = fmax(rw, 1.0);
      rh = fmax(rh, 1.0);
    }
    bh = rh / (double)OH, bw = rw / (double)OW;
    gh = sr > 0 ? sr : (int64_t)ceil(rh / (double)OH);
    gw = sr > 0 ? sr : (int64_t)ceil(rw / (double)OW);
    if (gh < 0) gh = 0;
    if (gw < 0) gw = 0;
    count = (double)(gh * gw > 1 ? gh * gw : 1);
    for (c = 0; c < C; ++c) {
      const double* xp = x + (bidx[r] * C + c) * H * W;
      for (ph = 0; ph < OH; ++ph)
        for (pw = 0; pw < OW; ++pw) {
          double acc = 0;
          int first = 1;
          for (iy = 0; iy < gh; ++iy) {
            double yy = sh + (double)ph * bh + ((double)iy + 0.5) * bh / (double)gh;
            for (ix = 0; ix < gw; ++ix) {
              double xx = sw + (double)pw * bw + ((double)ix + 0.5) * bw / (double)gw, v;
              if (yy < -1.0 || yy > (double)H || xx < -1.0 || xx > (double)W) {
                v = 0;
              } else {
                double yv = fmax(yy, 0.0), xv = fmax(xx, 0.0), ly, lx;
                int64_t yl = (int64_t)yv, xl = (int64_t)xv, yh, xh;
                if (yl >= H - 1) yh = yl = H - 1, yv = (double)yl;
                else yh = yl + 1;
                if (xl >= W - 1) xh = xl = W - 1, xv = (double)xl;
                else xh = xl + 1;
                ly = yv - (double)yl, lx = xv - (double)xl;
                if (is_max) {
                  double a = (1 - ly) * (1 - lx) * xp[yl * W + xl], b = (1 - ly) * lx * xp[yl * W + xh];
                  double d = ly * (1 - lx) * xp[yh * W + xl], e = ly * lx * xp[yh * W + xh];
                  v = fmax(fmax(fmax(a, b), d), e);
                } else {
                  v = (1 - ly) * (1 - lx) * xp[yl * W + xl] + (1 - ly) * lx * xp[yl * W + xh] +
                      ly * (1 - lx) * xp[yh * W + xl] + ly * lx * xp[yh * W + xh];
                }
              }
              if (is_max) acc = first ? v : fmax(acc, v);
              else acc += v;
              first = 0;
            }
          }
          y[((r * C + c) * OH + ph) * OW + pw] = is_max ? acc : acc / count;
        }
    }
  }
  return 0;
}

/* MaxRoiPool of x [N, C, H, W] over rois [R, 5] (batch, x1, y1, x2, y2) into y [R, C, PH, PW]:
 * the max of each bin (0 for an empty one), as the interpreter (nn_pool.cc). Returns 1 when
 * a batch index is out of range. */
HK int hk_max_roi_pool(const double* x, const double* rois, double* y, int64_t N, int64_t C, int64_t H, int64_t W,
                       int64_t R, int64_t PH, int64_t PW, double scale) {
  int64_t r, c, ph, pw, h, w;
  for (r = 0; r < R; ++r)
    if ((int64_t)rois[r * 5] < 0 || (int64_t)rois[r * 5] >= N) return 1;
  for (r = 0; r < R; ++r) {
    const double* roi = rois + r * 5;
    int64_t b = (int64_t)roi[0];
    int64_t x1 = (int64_t)round(roi[1] * scale), y1 = (int64_t)round(roi[2] * scale);
    int64_t x2 = (int64_t)round(roi[3] * scale), y2 = (int64_t)round(roi[4] * scale);
    int64_t rh = y2 - y1 + 1 > 1 ? y2 - y1 + 1 : 1, rw = x2 - x1 + 1 > 1 ? x2 - x1 + 1 : 1;
    double bh = (double)rh / (double)PH, bw = (double)rw / (double)PW;
    for (c = 0; c < C; ++c) {
      const double* xp = x + (b * C + c) * H * W;
      for (ph = 0; ph < PH; ++ph)
        for (pw = 0; pw < PW; ++pw) {
#define HK_CLAMP(v, hi) ((v) < 0 ? 0 : (v) > (hi) ? (hi) : (v))
          int64_t hs = HK_CLAMP((int64_t)floor((double)ph * bh) + y1, H);
          int64_t he = HK_CLAMP((int64_t)ceil((double)(ph + 1) * bh) + y1, H);
          int64_t ws = HK_CLAMP((int64_t)floor((double)pw * bw) + x1, W);
          int64_t we = HK_CLAMP((int64_t)ceil((double)(pw + 1) * bw) + x1, W);
#undef HK_CLAMP
          double m = (he <= hs || we <= ws) ? 0.0 : -INFINITY;
          for (h = hs; h < he; ++h)
            for (w = ws; w < we; ++w) m = fmax(m, xp[h * W + w]);
          y[((r * C + c) * PH + ph) * PW + pw] = m;
        }
    }
  }
  return 0;
}
