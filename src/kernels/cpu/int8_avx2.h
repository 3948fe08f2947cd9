// An exact int8 convolution for AVX2 CPUs without VNNI, on 16-bit multiplies. oneDNN's
// non-VNNI int8 kernels multiply with vpmaddubsw, which sums a pair of u8·s8 products in a
// saturating 16-bit lane; real quantized weights (full 8-bit range, per-channel zero points)
// can saturate it, so the cpu engine split them (16·hi + lo, twice the multiply-adds). Here the
// input with its zero point subtracted and the weights with theirs, d = w - zw, are int16 (both
// in [-255, 255]) and vpmaddwd sums a pair of int16 products in 32 bits: no saturation possible,
// the same multiply-adds per instruction as vpmaddubsw + vpmaddwd.
//
// The conv is an implicit GEMM over a channels-last int16 copy of the input whose border is the
// padding (zeros: x - zx for x = zx) and whose channels per group are padded to an even count:
// K runs over the window's taps and the group's channel pairs (a window row's taps and channels
// as one run where they are contiguous: one group, no column dilation), a tile is 6 output
// pixels x 16 output channels (12 ymm accumulators), weights packed once.
#pragma once
#include <cstdint>
#include <vector>

namespace hodu::int8_avx2 {

struct ConvShape {
  int64_t batch = 1, groups = 1;
  int64_t cin = 0, cout = 0;          // per group
  int64_t h = 1, w = 0, oh = 1, ow = 0;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
  int64_t pad_top = 0, pad_left = 0;  // bottom/right padding follows from oh/ow
  // One group with undilated columns: a window row's kw · cin values lie side by side in the
  // copy, and K runs over each row's pairs of them (a pair may span two pixels), so an odd
  // channel count needs no padding channel (the 3 of an RGB input: 11 pairs a 7-wide row, not 14).
  bool rows() const { return groups == 1 && dw == 1; }
  // The padded int16 copy: [batch][hp][wp][groups][cpad] (+ 2 values: a row's last pair may
  // read one past the image), cpad = cin in row form, else cin rounded up to even.
  int64_t cpad() const { return rows() ? cin : (cin + 1) / 2 * 2; }
  int64_t hp() const;
  int64_t wp() const;
  int64_t pixel_stride() const { return groups * cpad(); }
  int64_t padded_elements() const { return batch * hp() * wp() * pixel_stride() + 2; }
  // K as runs of pairs contiguous in the copy: a window row's, or a tap's channels.
  int64_t runs() const { return rows() ? kh : kh * kw; }
  int64_t run_pairs() const { return rows() ? (kw * cin + 1) / 2 : cpad() / 2; }
};

// Whether this CPU runs the kernel (AVX2, under HODU_MAX_ISA).
bool available();

// The weights d [groups · cout][cin][kh][kw] (ONNX's order, zero points subtracted, each in
// [-255, 255]) packed for conv().
std::vector<int16_t> pack_weights(const ConvShape& s, const int32_t* d);

// Image n of x (channels-last [h][w][groups · cin], u8 or s8 bytes) minus zx into its part of
// the padded copy xp (border and pad channels zero).
void pad_input(const ConvShape& s, const void* x, bool is_signed, int32_t zx, int64_t n, int16_t* xp);

// Column blocks of one group (16 channels each, the last 8 or 16).
int64_t column_blocks(const ConvShape& s);

// The int32 sums of image n, group g, column block cb for output pixels [p0, p1) (row-major
// over oh x ow) into acc [batch · oh · ow][groups · cout] (channels innermost, group-major).
void conv(const ConvShape& s, const int16_t* xp, const int16_t* packed, int64_t n, int64_t g, int64_t cb, int64_t p0,
          int64_t p1, int32_t* acc);

}  // namespace hodu::int8_avx2
