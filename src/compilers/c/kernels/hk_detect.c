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
