// GridSample's sampling loop (opset 20, N-D): the interpreter's kernel and the cpu engine's
// step run this one code, so both give the same bits.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace hodu::interp {

struct GridSampleMode {
  int mode;     // 0 nearest, 1 linear, 2 cubic
  int padding;  // 0 zeros, 1 border, 2 reflection
  bool align_corners;
};

template <typename T>
T gs_reflect(T x, T lo, T hi) {
  T rng = hi - lo;
  if (x < lo) {
    T dx = lo - x;
    int64_t n = static_cast<int64_t>(dx / rng);
    T rr = dx - static_cast<T>(n) * rng;
    return n % 2 == 0 ? lo + rr : hi - rr;
  }
  if (x > hi) {
    T dx = x - hi;
    int64_t n = static_cast<int64_t>(dx / rng);
    T rr = dx - static_cast<T>(n) * rng;
    return n % 2 == 0 ? hi - rr : lo + rr;
  }
  return x;
}

// y[N, C, out...] sampled from x[N, C, dims...] at grid[N, out..., nd] (x first). `parallel`
// (count, range(begin, end)) splits the N * out points over threads.
template <typename T, typename Parallel>
void grid_sample_points(const T* x, const T* grid, T* y, int64_t N, int64_t C, const std::vector<int64_t>& dims,
                        const std::vector<int64_t>& outd, const GridSampleMode& m, Parallel&& parallel) {
  const int64_t nd = static_cast<int64_t>(dims.size());
  int64_t ins = 1, outs = 1;
  for (auto v : dims) ins *= v;
  for (auto v : outd) outs *= v;
  std::vector<int64_t> st(static_cast<size_t>(nd), 1);
  for (int64_t d = nd - 2; d >= 0; --d) st[d] = st[d + 1] * dims[d + 1];
  std::vector<T> lo(nd), hi(nd);
  for (int64_t d = 0; d < nd; ++d) {
    lo[d] = m.align_corners ? T(0) : T(-0.5);
    hi[d] = m.align_corners ? static_cast<T>(dims[d] - 1) : static_cast<T>(dims[d]) - T(0.5);
  }
  parallel(N * outs, [&](int64_t q0, int64_t q1) {
    std::vector<T> c(nd);
    std::vector<int64_t> base(nd);
    std::vector<std::vector<T>> w(nd);
    std::vector<std::vector<int64_t>> ix(nd);
    std::vector<std::vector<char>> valid(nd);
    for (int64_t q = q0; q < q1; ++q) {
      int64_t n = q / outs, p = q % outs;
      const T* gp = grid + q * nd;
      for (int64_t d = 0; d < nd; ++d) {
        T v = gp[nd - 1 - d];
        T len = static_cast<T>(dims[d]);
        c[d] = m.align_corners ? (v + 1) / T(2) * (len - 1) : ((v + 1) * len - 1) / T(2);
      }
      if (m.mode == 0) {
        for (int64_t d = 0; d < nd; ++d)
          c[d] = std::nearbyint(c[d]);
      }
      for (int64_t d = 0; d < nd; ++d) {
        if (c[d] < lo[d] || c[d] > hi[d]) {
          // Cubic with border padding clamps each tap, not the point (as torch and ONNX Runtime do):
          // the point's fraction keeps its weights.
          if (m.padding == 1 && m.mode != 2) c[d] = std::clamp(c[d], T(0), static_cast<T>(dims[d] - 1));
          else if (m.padding == 2) c[d] = gs_reflect(c[d], lo[d], hi[d]);
        }
      }
      // Per-dim taps.
      for (int64_t d = 0; d < nd; ++d) {
        ix[d].clear(); w[d].clear(); valid[d].clear();
        auto add = [&](int64_t i, T wt) {
          bool ok = true;
          if (m.padding == 0) ok = i >= 0 && i < dims[d];
          else if (m.padding == 1) i = std::clamp<int64_t>(i, 0, dims[d] - 1);
          else i = static_cast<int64_t>(gs_reflect(static_cast<T>(i), lo[d], hi[d]));
          if (ok && (i < 0 || i >= dims[d])) i = std::clamp<int64_t>(i, 0, dims[d] - 1);
          ix[d].push_back(i); w[d].push_back(wt); valid[d].push_back(ok);
        };
        if (m.mode == 0) {
          add(static_cast<int64_t>(c[d]), T(1));
        } else if (m.mode == 1) {
          T f = std::floor(c[d]);
          int64_t i0 = static_cast<int64_t>(f);
          T t = c[d] - f;
          add(i0, 1 - t);
          add(i0 + 1, t);
        } else {
          T f = std::floor(c[d]);
          int64_t i0 = static_cast<int64_t>(f);
          T t = std::fabs(c[d] - f);
          const T a = T(-0.75);
          T cf[4] = {((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a,
                     ((a + 2) * t - (a + 3)) * t * t + 1,
                     ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1,
                     ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a};
          for (int k = 0; k < 4; ++k) add(i0 - 1 + k, cf[k]);
        }
      }
      for (int64_t ch = 0; ch < C; ++ch) {
        const T* xp = x + (n * C + ch) * ins;
        auto eval = [&](auto&& self, int64_t d, int64_t off, bool ok) -> T {
          if (d == nd) return ok ? xp[off] : T(0);
          T acc = 0;
          for (size_t k = 0; k < ix[d].size(); ++k)
            acc += w[d][k] * self(self, d + 1, off + ix[d][k] * st[d], ok && valid[d][k]);
          return acc;
        };
        y[(n * C + ch) * outs + p] = eval(eval, 0, 0, true);
      }
    }
  });
}

}  // namespace hodu::interp
