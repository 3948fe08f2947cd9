// The AVX2+FMA Winograd F(2x2, 3x3) and F(4x4, 3x3) convolutions of winograd_avx2.h.
#include "kernels/cpu/winograd_avx2.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <cstdint>
#include <immintrin.h>

#include "kernels/cpu/vector_math.h"
#include "kernels/cpu/winograd.h"

namespace hodu::winograd {
namespace {

constexpr int64_t kRowsPerGemm = 96;  // tiles per product call: its A (96 x Cin) stays in L2

#define HODU_AVX2 __attribute__((target("avx2,fma")))
#define HODU_AVX2_INLINE __attribute__((target("avx2,fma"), always_inline)) inline

// GCC 12's intrinsics headers fill unused lanes from undefined values: false warnings.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// B^T d for F(2,3): four vectors (interpolation points 0, ±1, ∞).
HODU_AVX2_INLINE void input_1d(std::integral_constant<int, 2>, const __m256 d[4], __m256 r[4]) {
  r[0] = _mm256_sub_ps(d[0], d[2]);
  r[1] = _mm256_add_ps(d[1], d[2]);
  r[2] = _mm256_sub_ps(d[2], d[1]);
  r[3] = _mm256_sub_ps(d[1], d[3]);
}

// A^T m for F(2,3): two outputs of four vectors.
HODU_AVX2_INLINE void output_1d(std::integral_constant<int, 2>, const __m256 m[4], __m256 o[2]) {
  const __m256 s12 = _mm256_add_ps(m[1], m[2]);
  o[0] = _mm256_add_ps(m[0], s12);
  o[1] = _mm256_sub_ps(_mm256_sub_ps(m[1], m[2]), m[3]);
}

// B^T d for six vectors (Lavin & Gray's F(4,3), interpolation points 0, ±1, ±2, ∞).
HODU_AVX2_INLINE void input_1d(std::integral_constant<int, 4>, const __m256 d[6], __m256 r[6]) {
  const __m256 four = _mm256_set1_ps(4.0f), five = _mm256_set1_ps(5.0f), two = _mm256_set1_ps(2.0f);
  r[0] = _mm256_add_ps(_mm256_fnmadd_ps(five, d[2], _mm256_mul_ps(four, d[0])), d[4]);
  const __m256 a = _mm256_fnmadd_ps(four, d[2], d[4]);  // d4 - 4 d2
  const __m256 b = _mm256_fnmadd_ps(four, d[1], d[3]);  // d3 - 4 d1
  r[1] = _mm256_add_ps(a, b);
  r[2] = _mm256_sub_ps(a, b);
  const __m256 c = _mm256_sub_ps(d[4], d[2]);              // d4 - d2
  const __m256 e = _mm256_mul_ps(two, _mm256_sub_ps(d[3], d[1]));  // 2 (d3 - d1)
  r[3] = _mm256_add_ps(c, e);
  r[4] = _mm256_sub_ps(c, e);
  r[5] = _mm256_add_ps(_mm256_fnmadd_ps(five, d[3], _mm256_mul_ps(four, d[1])), d[5]);
}

// A^T m for F(4,3): four outputs of six vectors.
HODU_AVX2_INLINE void output_1d(std::integral_constant<int, 4>, const __m256 m[6], __m256 o[4]) {
  const __m256 two = _mm256_set1_ps(2.0f), four = _mm256_set1_ps(4.0f), eight = _mm256_set1_ps(8.0f);
  const __m256 s12 = _mm256_add_ps(m[1], m[2]), d12 = _mm256_sub_ps(m[1], m[2]);
  const __m256 s34 = _mm256_add_ps(m[3], m[4]), d34 = _mm256_sub_ps(m[3], m[4]);
  o[0] = _mm256_add_ps(_mm256_add_ps(m[0], s12), s34);
  o[1] = _mm256_fmadd_ps(two, d34, d12);
  o[2] = _mm256_fmadd_ps(four, s34, s12);
  o[3] = _mm256_add_ps(_mm256_fmadd_ps(eight, d34, d12), m[5]);
}

// The tile rows [ti0, ti0 + rows) of each image of a group: where the group's transformed
// tiles and products sit in scratch (tile t of the band at row t of each position's matrix).
struct Band {
  int64_t ti0, rows, tiles_w;
  int64_t tile(int64_t n, int64_t ti, int64_t tj) const { return (n * rows + ti - ti0) * tiles_w + tj; }
};

// Pass 1: the (M+2)x(M+2) input tiles of tile row `ti` of image `n`, channel block `cb`,
// transformed into v[pos][tile][cb * 8 .. +8]; zeros where a tile reaches past the input.
template <int M>
HODU_AVX2 void transform_input(const ConvShape& s, int64_t cin_p, const Band& band, int64_t tiles, const float* x,
                               float* v, int64_t n, int64_t ti, int64_t cb) {
  const int64_t tiles_w = band.tiles_w;
  constexpr int A = M + 2;
  const std::integral_constant<int, M> tag;
  const int64_t cblocks = cin_p / 8;
  // A pixel's 8 channels of block cb: nChw8c's planes of 8, or nhwc's rows of cin.
  const int64_t pix = s.nhwc ? cin_p : 8;
  const float* xc = s.nhwc ? x + n * s.h * s.w * cin_p + cb * 8 : x + ((n * cblocks + cb) * s.h * s.w) * 8;
  const int64_t h0 = ti * M - s.pad_top;
  const int64_t pos_stride = tiles * cin_p;
  for (int64_t tj = 0; tj < tiles_w; ++tj) {
    const int64_t w0 = tj * M - s.pad_left;
    const int64_t t = band.tile(n, ti, tj);
    __m256 d[A][A];
    const bool inside = h0 >= 0 && h0 + A <= s.h && w0 >= 0 && w0 + A <= s.w;
    for (int r = 0; r < A; ++r) {
      const int64_t ih = h0 + r;
      for (int c = 0; c < A; ++c) {
        const int64_t iw = w0 + c;
        d[r][c] = inside || (ih >= 0 && ih < s.h && iw >= 0 && iw < s.w) ? _mm256_loadu_ps(xc + (ih * s.w + iw) * pix)
                                                                          : _mm256_setzero_ps();
      }
    }
    // Columns of each row, then rows of each column.
    __m256 rows[A][A];
    for (int r = 0; r < A; ++r) input_1d(tag, d[r], rows[r]);
    float* vt = v + t * cin_p + cb * 8;
    for (int c = 0; c < A; ++c) {
      __m256 col[A], out[A];
      for (int r = 0; r < A; ++r) col[r] = rows[r][c];
      input_1d(tag, col, out);
      for (int r = 0; r < A; ++r) _mm256_storeu_ps(vt + (r * A + c) * pos_stride, out[r]);
    }
  }
}

// The activation of an Epilogue on one vector (packed_gemm::activate does every kind; the
// common ones inline).
HODU_AVX2_INLINE __m256 activate_common(__m256 v, const packed_gemm::Epilogue& ep) {
  switch (ep.act) {
    case packed_gemm::Act::None: return v;
    case packed_gemm::Act::Relu: return _mm256_max_ps(v, _mm256_setzero_ps());
    case packed_gemm::Act::Clip: return _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(ep.p0)), _mm256_set1_ps(ep.p1));
    default: return v;
  }
}

// Pass 3: the products of tile row `ti` of image `n`, output channel block `cb`, turned back
// into MxM outputs, plus bias and residual, activated, stored where inside the output.
template <int M>
HODU_AVX2 void transform_output(const ConvShape& s, int64_t cout_p, const Band& band, int64_t tiles, const float* m,
                                const float* bias, const float* z, float* y, int64_t n, int64_t ti, int64_t cb,
                                const packed_gemm::Epilogue& ep) {
  const int64_t tiles_w = band.tiles_w;
  constexpr int A = M + 2;
  const std::integral_constant<int, M> tag;
  const int64_t cblocks = cout_p / 8;
  const int64_t pix = s.nhwc ? cout_p : 8;
  const size_t plane = static_cast<size_t>(s.nhwc ? n * s.oh * s.ow * cout_p + cb * 8
                                                  : ((n * cblocks + cb) * s.oh * s.ow) * 8);
  float* yc = y + plane;
  const float* zc = z ? z + plane : nullptr;
  const __m256 b = _mm256_loadu_ps(bias + cb * 8);
  // Lanes past cout in the last block stay zero (an activation of 0 need not be 0).
  const int64_t valid = std::min<int64_t>(8, s.cout - cb * 8);
  const __m256 keep = _mm256_castsi256_ps(
      _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(valid)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
  const bool inline_act = ep.act == packed_gemm::Act::None || ep.act == packed_gemm::Act::Relu ||
                          ep.act == packed_gemm::Act::Clip;
  const int64_t pos_stride = tiles * cout_p;
  for (int64_t tj = 0; tj < tiles_w; ++tj) {
    const int64_t t = band.tile(n, ti, tj);
    const float* mt = m + t * cout_p + cb * 8;
    __m256 rows[A][M];
    for (int r = 0; r < A; ++r) {
      __m256 mr[A];
      for (int c = 0; c < A; ++c) mr[c] = _mm256_loadu_ps(mt + (r * A + c) * pos_stride);
      output_1d(tag, mr, rows[r]);
    }
    alignas(32) float out[M][M][8];
    for (int c = 0; c < M; ++c) {
      __m256 col[A], o[M];
      for (int r = 0; r < A; ++r) col[r] = rows[r][c];
      output_1d(tag, col, o);
      for (int r = 0; r < M; ++r) _mm256_store_ps(out[r][c], _mm256_add_ps(o[r], b));
    }
    const int64_t oh0 = ti * M, ow0 = tj * M;
    const int rmax = static_cast<int>(std::min<int64_t>(M, s.oh - oh0)), cmax = static_cast<int>(std::min<int64_t>(M, s.ow - ow0));
    for (int r = 0; r < rmax; ++r)
      for (int c = 0; c < cmax; ++c) {
        __m256 v = _mm256_load_ps(out[r][c]);
        if (zc) v = _mm256_add_ps(v, _mm256_loadu_ps(zc + ((oh0 + r) * s.ow + ow0 + c) * pix));
        _mm256_store_ps(out[r][c], inline_act ? activate_common(v, ep) : v);
      }
    if (!inline_act) packed_gemm::activate(&out[0][0][0], M * M * 8, ep);
    for (int r = 0; r < rmax; ++r)
      for (int c = 0; c < cmax; ++c)
        _mm256_storeu_ps(yc + ((oh0 + r) * s.ow + ow0 + c) * pix, _mm256_and_ps(_mm256_load_ps(out[r][c]), keep));
  }
}

#pragma GCC diagnostic pop

}  // namespace

bool available() { return packed_gemm::available(); }

Policy policy_from_env() {
  const char* v = std::getenv("HODU_CPU_WINOGRAD");
  const std::string s = v ? v : "";
  if (s.empty() || s == "auto") return Policy::Auto;
  if (s == "hodu") return Policy::Hodu;
  if (s == "hodu-f2") return Policy::HoduF2;
  if (s == "hodu-f4") return Policy::HoduF4;
  if (s == "onednn") return Policy::OneDnn;
  if (s == "off") return Policy::Off;
  return Policy::Invalid;
}

// Outputs of this many pixels a channel and more take F(4x4,3x3) tiles, smaller ones F(2x2,3x3).
constexpr int64_t kF4MinPixels = 400;
// Fewer input channels keep the direct kernel (auto): oneDNN's own Winograd rule too.
constexpr int64_t kMinInputChannels = 16;

int tile_for(Policy policy, const ConvShape& s) {
  if (policy == Policy::OneDnn || policy == Policy::Off || policy == Policy::Invalid || !available()) return 0;
  // Auto: only below AVX-512, where oneDNN has no Winograd and its direct kernel is what we beat;
  // on AVX-512 oneDNN's own F(4,3) kernels stay. Small outputs keep the direct kernel: their
  // few tiles leave the products short of rows while every weight is still read
  // (onednn::kWinogradMinPixels, measured for this kernel too: docs/performance.md). Nor few
  // input channels (an image's 3): products of depth 3-8 cost more than the direct kernel
  // (3 → 32 at 224x224: 6.6x its time, 8 → 32 at 112x112 1.3x, 16 → 16 at 56x56 0.97x).
  const int64_t pixels = s.oh * s.ow;
  if (policy == Policy::Auto && (vector_math::cpu_isa() != vector_math::Isa::Avx2 ||
                                 pixels < onednn::kWinogradMinPixels || s.cin < kMinInputChannels))
    return 0;
  ConvShape t = s;
  t.tile = policy == Policy::HoduF2 ? 2 : policy == Policy::HoduF4 ? 4 : pixels >= kF4MinPixels ? 4 : 2;
  // The transformed tiles and products: a huge batch keeps the direct kernel.
  if (scratch_floats(t) > (int64_t{256} << 20) / 4) return 0;
  return t.tile;
}

// What goes through the three passes together: as many images as keep the tiles and products
// within about 4 MB (L2/L3), or, where one image's exceed that, a band of its tile rows that
// fits (at least one row). A batch of 8 56x56x64 images as one group (29 MB) took 1.33x the
// direct kernel's time; ESPCN's 64 -> 32 conv at 224x224 (43 MB an image) 1.16x before bands.
// Each band reads all the transformed weights again, so an image is banded only where those
// re-reads cost less than its tiles' and products' second trip through memory: FCN's
// 2048 -> 512 head at 28x28 (151 MB of weights, 18 MB of tiles) ran in 7 bands of one tile
// row, products of 7 rows, 200 ms at 1 thread; whole, 78.
struct Grouping {
  int64_t images, rows;  // images of a group; tile rows of a band (all of them for whole images)
};
Grouping grouping(const ConvShape& s) {
  constexpr int64_t kBudget = int64_t{1} << 20;  // floats
  const int64_t m = s.tile == 2 ? 2 : 4, tiles_h = (s.oh + m - 1) / m, tiles_w = (s.ow + m - 1) / m;
  const int64_t cin_p = (s.cin + 7) / 8 * 8, cout_p = (s.cout + 7) / 8 * 8;
  const int64_t per_row = (m + 2) * (m + 2) * tiles_w * (cin_p + cout_p);
  const int64_t per_image = per_row * tiles_h;
  if (per_image > kBudget) {
    const int64_t rows = std::clamp<int64_t>(kBudget / std::max<int64_t>(per_row, 1), 1, tiles_h);
    const int64_t bands = (tiles_h + rows - 1) / rows, weights = (m + 2) * (m + 2) * cin_p * cout_p;
    return {1, (bands - 1) * weights < 2 * per_image ? rows : tiles_h};
  }
  return {std::max<int64_t>(1, std::min<int64_t>(s.batch, kBudget / std::max<int64_t>(per_image, 1))), tiles_h};
}

int64_t scratch_floats(const ConvShape& s) {
  const int64_t m = s.tile == 2 ? 2 : 4, tiles_w = (s.ow + m - 1) / m;
  const Grouping g = grouping(s);
  return g.images * g.rows * tiles_w * (m + 2) * (m + 2) * ((s.cin + 7) / 8 * 8 + (s.cout + 7) / 8 * 8);
}

std::shared_ptr<const TransformedWeights> transform_weights(const float* weights, int64_t cin, int64_t cout, int tile) {
  auto t = std::make_shared<TransformedWeights>();
  t->tile = tile == 2 ? 2 : 4;
  t->cin = cin;
  t->cout = cout;
  const int m = t->tile, a = m + 2, pos = a * a;
  // U = G g G^T per (out, in) pair, in double: F(4,3)'s 1/6, 1/12, 1/24 rounded once.
  static const double g4[6][3] = {{1.0 / 4, 0, 0},           {-1.0 / 6, -1.0 / 6, -1.0 / 6}, {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                  {1.0 / 24, 1.0 / 12, 1.0 / 6}, {1.0 / 24, -1.0 / 12, 1.0 / 6}, {0, 0, 1}};
  static const double g2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
  const double(*g)[3] = m == 4 ? g4 : g2;
  std::vector<float> plain(static_cast<size_t>(pos * cin * cout));  // [pos][cin][cout]
  for (int64_t o = 0; o < cout; ++o)
    for (int64_t i = 0; i < cin; ++i) {
      const float* k = weights + (o * cin + i) * 9;
      double u[6][3];
      for (int r = 0; r < a; ++r)
        for (int c = 0; c < 3; ++c) u[r][c] = g[r][0] * k[c] + g[r][1] * k[3 + c] + g[r][2] * k[6 + c];
      for (int r = 0; r < a; ++r)
        for (int c = 0; c < a; ++c)
          plain[static_cast<size_t>(((r * a + c) * cin + i) * cout + o)] =
              static_cast<float>(u[r][0] * g[c][0] + u[r][1] * g[c][1] + u[r][2] * g[c][2]);
    }
  t->stride = packed_gemm::packed_size(cin, cout);
  t->data.assign(static_cast<size_t>(pos * t->stride + 8), 0.0f);
  t->offset = static_cast<int64_t>(((32 - (reinterpret_cast<uintptr_t>(t->data.data()) & 31)) & 31) / 4);
  for (int64_t p = 0; p < pos; ++p)
    packed_gemm::pack_b(plain.data() + p * cin * cout, cout, 1, cin, cout, t->data.data() + t->offset + p * t->stride);
  return t;
}

Conv::Conv(const ConvShape& s, const float* weights, const float* bias, const packed_gemm::Epilogue& ep)
    : Conv(s, transform_weights(weights, s.cin, s.cout, s.tile), bias, ep) {}

Conv::Conv(const ConvShape& s, std::shared_ptr<const TransformedWeights> u, const float* bias,
           const packed_gemm::Epilogue& ep)
    : s_(s), u_(std::move(u)), act_(ep) {
  if (s_.tile != 2) s_.tile = 4;
  if (u_->tile != s_.tile || u_->cin != s.cin || u_->cout != s.cout)
    throw std::invalid_argument("winograd::Conv: weights transformed for another tile or shape");
  act_.bias = nullptr;
  act_.accumulate = false;
  const int m = s_.tile, a = m + 2;
  cin_p_ = (s.cin + 7) / 8 * 8;
  cout_p_ = (s.cout + 7) / 8 * 8;
  tiles_h_ = (s.oh + m - 1) / m;
  tiles_w_ = (s.ow + m - 1) / m;
  const Grouping grp = grouping(s_);
  group_ = grp.images;
  band_rows_ = grp.rows;
  pos_ = a * a;
  bias_.assign(static_cast<size_t>(cout_p_), 0.0f);
  if (bias) std::copy(bias, bias + s.cout, bias_.begin());
}

void Conv::run(const float* x, const float* z, float* y, float* scratch, int threads) const {
  for (int64_t n0 = 0; n0 < s_.batch; n0 += group_) {
    ConvShape s = s_;  // the group's images as a batch of their own
    s.batch = std::min(group_, s_.batch - n0);
    const size_t in_img = static_cast<size_t>(cin_p_ * s.h * s.w), out_img = static_cast<size_t>(cout_p_ * s.oh * s.ow);
    for (int64_t ti0 = 0; ti0 < tiles_h_; ti0 += band_rows_)
      run_group(s, x + n0 * in_img, z ? z + n0 * out_img : nullptr, y + n0 * out_img, scratch, threads, ti0,
                std::min(band_rows_, tiles_h_ - ti0));
  }
}

void Conv::run_group(const ConvShape& s, const float* x, const float* z, float* y, float* scratch, int threads,
                     int64_t ti0, int64_t band_rows) const {
  const Band band{ti0, band_rows, tiles_w_};
  const int64_t tiles = s.batch * band_rows * tiles_w_;
  const int64_t in_units = s.batch * band_rows * (cin_p_ / 8);
  const int64_t chunks = (tiles + kRowsPerGemm - 1) / kRowsPerGemm;
  const int64_t rows = ((tiles + chunks - 1) / chunks + 5) / 6 * 6;
  const int64_t gemm_units = pos_ * chunks;
  const int64_t out_units = s.batch * band_rows * (cout_p_ / 8);
  // The products never write m's padding columns (cout..cout_p): those lanes of the output
  // transform hold whatever was there and are stored as zeros.
  float* v = scratch;
  float* m = scratch + pos_ * tiles * cin_p_;
  const int64_t cin_blocks = cin_p_ / 8, cout_blocks = cout_p_ / 8;
  const bool four = s.tile == 4;
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
#pragma omp for schedule(static)
    for (int64_t i = 0; i < in_units; ++i) {
      const int64_t cb = i % cin_blocks, ti = ti0 + (i / cin_blocks) % band_rows, n = i / cin_blocks / band_rows;
      if (four) transform_input<4>(s, cin_p_, band, tiles, x, v, n, ti, cb);
      else transform_input<2>(s, cin_p_, band, tiles, x, v, n, ti, cb);
    }
#pragma omp for schedule(static)
    for (int64_t i = 0; i < gemm_units; ++i) {
      const int64_t p = i / chunks, r0 = (i % chunks) * rows, r = std::min(rows, tiles - r0);
      if (r <= 0) continue;
      packed_gemm::gemm(r, s.cout, s.cin, {v + (p * tiles + r0) * cin_p_, cin_p_, 8}, u_->matrix(p),
                        {m + (p * tiles + r0) * cout_p_, cout_p_, 8}, {}, 1);
    }
#pragma omp for schedule(static)
    for (int64_t i = 0; i < out_units; ++i) {
      const int64_t cb = i % cout_blocks, ti = ti0 + (i / cout_blocks) % band_rows, n = i / cout_blocks / band_rows;
      if (four) transform_output<4>(s, cout_p_, band, tiles, m, bias_.data(), z, y, n, ti, cb, act_);
      else transform_output<2>(s, cout_p_, band, tiles, m, bias_.data(), z, y, n, ti, cb, act_);
    }
  }
}

}  // namespace hodu::winograd
