#include "kernels/cpu/int8_avx2.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/vector_math.h"

namespace hodu::int8_avx2 {
namespace {

constexpr int64_t kPixels = 4;      // output pixels of a tile
constexpr int64_t kBlockCols = 24;  // output channels of a full column block (3 vectors)

int64_t k_pairs(const ConvShape& s) { return s.kh * s.kw * s.cin_pairs(); }
int64_t group_elements(const ConvShape& s) { return (s.cout + 7) / 8 * 8 * k_pairs(s) * 2; }

// acc[p][0, 8·B) += Σ over the taps and channel pairs of px[p]'s pair (broadcast) times the
// block's weight pairs: vpmaddwd (two int16 products summed in int32, exact) and vpaddd.
template <int B>
__attribute__((target("avx2,fma"))) void tile(const int16_t* const* px, const int64_t* tap_off, int64_t taps,
                                              int64_t cpairs, const int16_t* w, int32_t* out, int64_t ldo,
                                              int64_t cols, int64_t pixels) {
  __m256i acc[kPixels][B];
  for (auto& row : acc)
    for (auto& a : row) a = _mm256_setzero_si256();
  for (int64_t t = 0; t < taps; ++t) {
    const int16_t* a0 = px[0] + tap_off[t];
    const int16_t* a1 = px[1] + tap_off[t];
    const int16_t* a2 = px[2] + tap_off[t];
    const int16_t* a3 = px[3] + tap_off[t];
    for (int64_t c = 0; c < cpairs; ++c, w += 16 * B) {
      __m256i wv[B];
      for (int j = 0; j < B; ++j) wv[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16 * j));
      int32_t v0, v1, v2, v3;
      std::memcpy(&v0, a0 + 2 * c, 4);
      std::memcpy(&v1, a1 + 2 * c, 4);
      std::memcpy(&v2, a2 + 2 * c, 4);
      std::memcpy(&v3, a3 + 2 * c, 4);
      const __m256i b0 = _mm256_set1_epi32(v0), b1 = _mm256_set1_epi32(v1), b2 = _mm256_set1_epi32(v2),
                    b3 = _mm256_set1_epi32(v3);
      for (int j = 0; j < B; ++j) {
        acc[0][j] = _mm256_add_epi32(acc[0][j], _mm256_madd_epi16(b0, wv[j]));
        acc[1][j] = _mm256_add_epi32(acc[1][j], _mm256_madd_epi16(b1, wv[j]));
        acc[2][j] = _mm256_add_epi32(acc[2][j], _mm256_madd_epi16(b2, wv[j]));
        acc[3][j] = _mm256_add_epi32(acc[3][j], _mm256_madd_epi16(b3, wv[j]));
      }
    }
  }
  if (cols == 8 * B) {
    for (int64_t p = 0; p < pixels; ++p)
      for (int j = 0; j < B; ++j) _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + p * ldo + 8 * j), acc[p][j]);
    return;
  }
  alignas(32) int32_t tmp[8 * B];
  for (int64_t p = 0; p < pixels; ++p) {
    for (int j = 0; j < B; ++j) _mm256_store_si256(reinterpret_cast<__m256i*>(tmp + 8 * j), acc[p][j]);
    std::memcpy(out + p * ldo, tmp, static_cast<size_t>(cols) * sizeof(int32_t));
  }
}

}  // namespace

int64_t ConvShape::hp() const { return std::max(h + pad_top, (oh - 1) * sh + (kh - 1) * dh + 1); }
int64_t ConvShape::wp() const { return std::max(w + pad_left, (ow - 1) * sw + (kw - 1) * dw + 1); }

bool available() { return vector_math::cpu_isa() != vector_math::Isa::Plain; }

int64_t column_blocks(const ConvShape& s) { return (s.cout + kBlockCols - 1) / kBlockCols; }

std::vector<int16_t> pack_weights(const ConvShape& s, const int32_t* d) {
  const int64_t K = k_pairs(s), taps = s.kh * s.kw, per = s.cin * taps;
  std::vector<int16_t> out(static_cast<size_t>(s.groups * group_elements(s)), 0);
  for (int64_t g = 0; g < s.groups; ++g)
    for (int64_t cb = 0; cb < column_blocks(s); ++cb) {
      const int64_t c0 = cb * kBlockCols, width = std::min(kBlockCols, (s.cout - c0 + 7) / 8 * 8);
      int16_t* blk = out.data() + g * group_elements(s) + c0 * K * 2;
      for (int64_t t = 0; t < taps; ++t)
        for (int64_t cp = 0; cp < s.cin_pairs(); ++cp)
          for (int64_t j = 0; j < width; ++j)
            for (int64_t h = 0; h < 2; ++h) {
              const int64_t m = c0 + j, c = 2 * cp + h;
              int32_t v = m < s.cout && c < s.cin ? d[(g * s.cout + m) * per + c * taps + t] : 0;
              blk[((t * s.cin_pairs() + cp) * width + j) * 2 + h] = static_cast<int16_t>(v);
            }
    }
  return out;
}

namespace {
template <typename T>
__attribute__((target("avx2,fma"))) void pad_rows(const ConvShape& s, const T* x, int32_t zx, int64_t n,
                                                  int16_t* xp) {
  const int64_t hp = s.hp(), wp = s.wp(), ps = s.pixel_stride(), cg2 = s.cin_pairs() * 2, C = s.groups * s.cin;
  int16_t* img = xp + n * hp * wp * ps;
  std::fill_n(img, hp * wp * ps, int16_t{0});
  const int16_t z = static_cast<int16_t>(zx);
  for (int64_t i = 0; i < s.h; ++i) {
    const T* src = x + (n * s.h + i) * s.w * C;
    int16_t* dst = img + ((i + s.pad_top) * wp + s.pad_left) * ps;
    if (cg2 == s.cin && s.groups * cg2 == C) {
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
  for (int64_t a = 0; a < s.kh; ++a)
    for (int64_t b = 0; b < s.kw; ++b) offs[a * s.kw + b] = (a * s.dh * wp + b * s.dw) * ps;
  const int16_t* img = xp + n * hp * wp * ps + g * s.cin_pairs() * 2;
  const int64_t ldo = s.groups * s.cout, P = s.oh * s.ow;
  int32_t* out = acc + n * P * ldo + g * s.cout + c0;
  for (int64_t p = p0; p < p1; p += kPixels) {
    const int64_t pixels = std::min(kPixels, p1 - p);
    const int16_t* px[kPixels];
    for (int64_t i = 0; i < kPixels; ++i) {
      const int64_t q = p + std::min(i, pixels - 1), y = q / s.ow, x = q % s.ow;
      px[i] = img + (y * s.sh * wp + x * s.sw) * ps;
    }
    int32_t* o = out + p * ldo;
    if (B == 3) tile<3>(px, offs, taps, s.cin_pairs(), w, o, ldo, cols, pixels);
    else if (B == 2) tile<2>(px, offs, taps, s.cin_pairs(), w, o, ldo, cols, pixels);
    else tile<1>(px, offs, taps, s.cin_pairs(), w, o, ldo, cols, pixels);
  }
}

}  // namespace hodu::int8_avx2
