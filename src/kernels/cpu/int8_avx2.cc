#include "kernels/cpu/int8_avx2.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/vector_math.h"

namespace hodu::int8_avx2 {
namespace {

// A tile: 6 output pixels x 16 output channels, 12 accumulators, two weight vectors, a
// broadcast and a product: the 16 ymm registers (4 x 24 would spill accumulators).
constexpr int64_t kPixels = 6;      // output pixels of a tile
constexpr int64_t kBlockCols = 16;  // output channels of a full column block (2 vectors)

int64_t k_pairs(const ConvShape& s) { return s.runs() * s.run_pairs(); }
int64_t group_elements(const ConvShape& s) { return (s.cout + 7) / 8 * 8 * k_pairs(s) * 2; }

// Writes (or with `add` adds) the tile's sums acc[p][0, cols) to out[p · ldo ...].
template <int B>
__attribute__((target("avx2,fma"))) inline void store_tile(const __m256i (&acc)[kPixels][B], int32_t* out,
                                                           int64_t ldo, int64_t cols, int64_t pixels, bool add) {
  if (cols == 8 * B) {
    for (int64_t p = 0; p < pixels; ++p)
      for (int j = 0; j < B; ++j) {
        auto* o = reinterpret_cast<__m256i*>(out + p * ldo + 8 * j);
        _mm256_storeu_si256(o, add ? _mm256_add_epi32(acc[p][j], _mm256_loadu_si256(o)) : acc[p][j]);
      }
    return;
  }
  alignas(32) int32_t tmp[8 * B];
  for (int64_t p = 0; p < pixels; ++p) {
    for (int j = 0; j < B; ++j) _mm256_store_si256(reinterpret_cast<__m256i*>(tmp + 8 * j), acc[p][j]);
    int32_t* o = out + p * ldo;
    for (int64_t j = 0; j < cols; ++j) o[j] = add ? o[j] + tmp[j] : tmp[j];
  }
}

__attribute__((target("avx2,fma"))) inline __m256i pair_at(const int16_t* a) {
  int32_t v;
  std::memcpy(&v, a, 4);
  return _mm256_set1_epi32(v);
}

// out[p][0, cols) (=, or += with `add`) Σ over `cpairs` channel pairs of px[p]'s pair (at
// px[p] + off, broadcast) times the block's weight pairs: vpmaddwd (two int16 products summed
// in int32, exact) and vpaddd. Named accumulators: with arrays GCC -O3 spilled some to the stack.
__attribute__((target("avx2,fma"))) void tile16(const int16_t* const* px, const int64_t* offs, int64_t nruns,
                                                int64_t cpairs, const int16_t* w, int32_t* out, int64_t ldo,
                                                int64_t cols, int64_t pixels, bool add) {
  __m256i c00 = _mm256_setzero_si256(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00,
          c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (int64_t r = 0; r < nruns; ++r) {
    const int64_t off = offs[r];
    const int16_t *a0 = px[0] + off, *a1 = px[1] + off, *a2 = px[2] + off, *a3 = px[3] + off, *a4 = px[4] + off,
                  *a5 = px[5] + off;
    for (int64_t c = 0; c < cpairs; ++c, w += 32) {
      const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
      const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16));
      __m256i b = pair_at(a0 + 2 * c);
      c00 = _mm256_add_epi32(c00, _mm256_madd_epi16(b, w0));
      c01 = _mm256_add_epi32(c01, _mm256_madd_epi16(b, w1));
      b = pair_at(a1 + 2 * c);
      c10 = _mm256_add_epi32(c10, _mm256_madd_epi16(b, w0));
      c11 = _mm256_add_epi32(c11, _mm256_madd_epi16(b, w1));
      b = pair_at(a2 + 2 * c);
      c20 = _mm256_add_epi32(c20, _mm256_madd_epi16(b, w0));
      c21 = _mm256_add_epi32(c21, _mm256_madd_epi16(b, w1));
      b = pair_at(a3 + 2 * c);
      c30 = _mm256_add_epi32(c30, _mm256_madd_epi16(b, w0));
      c31 = _mm256_add_epi32(c31, _mm256_madd_epi16(b, w1));
      b = pair_at(a4 + 2 * c);
      c40 = _mm256_add_epi32(c40, _mm256_madd_epi16(b, w0));
      c41 = _mm256_add_epi32(c41, _mm256_madd_epi16(b, w1));
      b = pair_at(a5 + 2 * c);
      c50 = _mm256_add_epi32(c50, _mm256_madd_epi16(b, w0));
      c51 = _mm256_add_epi32(c51, _mm256_madd_epi16(b, w1));
    }
  }
  const __m256i acc[kPixels][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  store_tile<2>(acc, out, ldo, cols, pixels, add);
}

// The same for a block of 8 channels (a group's last).
__attribute__((target("avx2,fma"))) void tile8(const int16_t* const* px, const int64_t* offs, int64_t nruns,
                                               int64_t cpairs, const int16_t* w, int32_t* out, int64_t ldo,
                                               int64_t cols, int64_t pixels, bool add) {
  __m256i acc[kPixels][1];
  for (auto& r : acc) r[0] = _mm256_setzero_si256();
  for (int64_t r = 0; r < nruns; ++r)
    for (int64_t c = 0; c < cpairs; ++c, w += 16) {
      const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
      for (int64_t i = 0; i < kPixels; ++i)
        acc[i][0] = _mm256_add_epi32(acc[i][0], _mm256_madd_epi16(pair_at(px[i] + offs[r] + 2 * c), w0));
    }
  store_tile<1>(acc, out, ldo, cols, pixels, add);
}

}  // namespace

int64_t ConvShape::hp() const { return std::max(h + pad_top, (oh - 1) * sh + (kh - 1) * dh + 1); }
int64_t ConvShape::wp() const { return std::max(w + pad_left, (ow - 1) * sw + (kw - 1) * dw + 1); }

bool available() { return vector_math::cpu_isa() != vector_math::Isa::Plain; }

int64_t column_blocks(const ConvShape& s) { return (s.cout + kBlockCols - 1) / kBlockCols; }

std::vector<int16_t> pack_weights(const ConvShape& s, const int32_t* d) {
  const int64_t K = k_pairs(s), taps = s.kh * s.kw, per = s.cin * taps, rp = s.run_pairs();
  // The weight of output m at element e of run r (0 past the run's values and channels).
  auto at = [&](int64_t g, int64_t m, int64_t r, int64_t e) -> int32_t {
    int64_t tap, c;
    if (s.rows()) {
      if (e >= s.kw * s.cin) return 0;
      tap = r * s.kw + e / s.cin;
      c = e % s.cin;
    } else {
      if (e >= s.cin) return 0;
      tap = r;
      c = e;
    }
    return d[(g * s.cout + m) * per + c * taps + tap];
  };
  std::vector<int16_t> out(static_cast<size_t>(s.groups * group_elements(s)), 0);
  for (int64_t g = 0; g < s.groups; ++g)
    for (int64_t cb = 0; cb < column_blocks(s); ++cb) {
      const int64_t c0 = cb * kBlockCols, width = std::min(kBlockCols, (s.cout - c0 + 7) / 8 * 8);
      int16_t* blk = out.data() + g * group_elements(s) + c0 * K * 2;
      for (int64_t r = 0; r < s.runs(); ++r)
        for (int64_t cp = 0; cp < rp; ++cp)
          for (int64_t j = 0; j < width && c0 + j < s.cout; ++j)
            for (int64_t h = 0; h < 2; ++h)
              blk[((r * rp + cp) * width + j) * 2 + h] = static_cast<int16_t>(at(g, c0 + j, r, 2 * cp + h));
    }
  return out;
}

namespace {
template <typename T>
__attribute__((target("avx2,fma"))) void pad_rows(const ConvShape& s, const T* x, int32_t zx, int64_t n,
                                                  int16_t* xp) {
  const int64_t hp = s.hp(), wp = s.wp(), ps = s.pixel_stride(), cg2 = s.cpad(), C = s.groups * s.cin;
  int16_t* img = xp + n * hp * wp * ps;
  // The image's padded plane and, after the last image, the 2 values a last pair may read.
  std::fill_n(img, hp * wp * ps + (n + 1 == s.batch ? 2 : 0), int16_t{0});
  const int16_t z = static_cast<int16_t>(zx);
  for (int64_t i = 0; i < s.h; ++i) {
    const T* src = x + (n * s.h + i) * s.w * C;
    int16_t* dst = img + ((i + s.pad_top) * wp + s.pad_left) * ps;
    if (ps == C) {
      for (int64_t k = 0; k < s.w * C; ++k) dst[k] = static_cast<int16_t>(static_cast<int16_t>(src[k]) - z);
      continue;
    }
    for (int64_t j = 0; j < s.w; ++j)
      for (int64_t g = 0; g < s.groups; ++g)
        for (int64_t c = 0; c < s.cin; ++c)
          dst[j * ps + g * cg2 + c] = static_cast<int16_t>(static_cast<int16_t>(src[j * C + g * s.cin + c]) - z);
  }
}
}  // namespace

void pad_input(const ConvShape& s, const void* x, bool is_signed, int32_t zx, int64_t n, int16_t* xp) {
  if (is_signed) pad_rows(s, static_cast<const int8_t*>(x), zx, n, xp);
  else pad_rows(s, static_cast<const uint8_t*>(x), zx, n, xp);
}

void conv(const ConvShape& s, const int16_t* xp, const int16_t* packed, int64_t n, int64_t g, int64_t cb, int64_t p0,
          int64_t p1, int32_t* acc) {
  const int64_t hp = s.hp(), wp = s.wp(), ps = s.pixel_stride(), taps = s.kh * s.kw, K = k_pairs(s);
  const int64_t c0 = cb * kBlockCols, cols = std::min(kBlockCols, s.cout - c0);
  const int64_t B = (cols + 7) / 8;
  const int16_t* w = packed + g * group_elements(s) + c0 * K * 2;
  int64_t tap_off[256];
  int64_t* offs = tap_off;
  std::vector<int64_t> big;
  if (taps > 256) {
    big.resize(static_cast<size_t>(taps));
    offs = big.data();
  }
  const int64_t runs = s.runs(), pairs = s.run_pairs();
  for (int64_t a = 0; a < s.kh; ++a)
    for (int64_t b = 0; b < s.kw; ++b) offs[a * s.kw + b] = (a * s.dh * wp + b * s.dw) * ps;
  if (s.rows())
    for (int64_t a = 0; a < s.kh; ++a) offs[a] = a * s.dh * wp * ps;
  const int16_t* img = xp + n * hp * wp * ps + g * s.cpad();
  const int64_t ldo = s.groups * s.cout, P = s.oh * s.ow;
  int32_t* out = acc + n * P * ldo + g * s.cout + c0;
  // K in chunks of about kChunk pairs (16 KiB of the block's weights: whole runs, or a part of a
  // longer one), each over every tile of a group of pixels while it stays in L1; the sums of a
  // chunk after the first added to the output's. The tiles' pixel addresses computed once a group.
  constexpr int64_t kChunk = 256, kGroupTiles = 16;
  const int64_t per_chunk = std::max<int64_t>(1, kChunk / pairs), piece = std::min(pairs, kChunk);
  const int16_t* px[kGroupTiles][kPixels];
  for (int64_t pg = p0; pg < p1; pg += kGroupTiles * kPixels) {
    const int64_t pend = std::min(p1, pg + kGroupTiles * kPixels), tiles = (pend - pg + kPixels - 1) / kPixels;
    for (int64_t t = 0; t < tiles; ++t)
      for (int64_t i = 0; i < kPixels; ++i) {
        const int64_t q = std::min(pg + t * kPixels + i, pend - 1), y = q / s.ow, x = q % s.ow;
        px[t][i] = img + (y * s.sh * wp + x * s.sw) * ps;
      }
    for (int64_t r = 0; r < runs; r += per_chunk)
      for (int64_t k0 = 0; k0 < pairs; k0 += piece) {
        // Runs [r, r + nr), pairs [k0, k0 + nk) of each (nr > 1 only for whole runs).
        const int64_t nr = std::min(per_chunk, runs - r), nk = std::min(piece, pairs - k0);
        int64_t off[256];
        for (int64_t i = 0; i < nr; ++i) off[i] = offs[r + i] + 2 * k0;
        const int16_t* wk = w + (r * pairs + k0) * 16 * B;
        const bool add = r > 0 || k0 > 0;
        for (int64_t t = 0; t < tiles; ++t) {
          const int64_t p = pg + t * kPixels, pixels = std::min(kPixels, pend - p);
          int32_t* o = out + p * ldo;
          if (B == 2) tile16(px[t], off, nr, nk, wk, o, ldo, cols, pixels, add);
          else tile8(px[t], off, nr, nk, wk, o, ldo, cols, pixels, add);
        }
      }
  }
}

}  // namespace hodu::int8_avx2
