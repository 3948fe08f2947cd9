// hodu's own Winograd convolutions F(2x2, 3x3) and F(4x4, 3x3) for AVX2+FMA CPUs, on oneDNN's
// nChw8c layout. oneDNN 2.6 has Winograd only for AVX-512; below it a 3x3 stride-1 conv runs
// its direct jit:avx2 kernel, already near the FMA peak, so only fewer multiplies make it
// faster: F(4,3) does 36 products per 16 outputs, F(2,3) 16 per 4, the direct conv 9 per output.
// Three passes: the input's (m+2)x(m+2) tiles transformed (B^T d B) into (m+2)² matrices
// [tiles, Cin], as many products with the weights transformed at construction (G g G^T, on
// packed_gemm.h), and the output transform (A^T m A) with bias, residual and activation fused
// into its store. Rounding differs from a direct conv's: F(4,3)'s transforms (factors up to 8,
// G's 1/6 and 1/24) about double its error (ResNet-18's logits 1.7e-6 → 3.2e-6 rel-L2 against
// ONNX Runtime); F(2,3)'s (factors 1 and 1/2) add little.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cpu/packed_gemm.h"

namespace hodu::winograd {

struct ConvShape {
  int64_t batch = 1, cin = 0, cout = 0;
  int64_t h = 0, w = 0;               // input
  int64_t oh = 0, ow = 0;             // output (oh = h + pads - 2 for a 3x3 stride-1 conv)
  int64_t pad_top = 0, pad_left = 0;  // the bottom/right padding follows from oh/ow
  int tile = 4;                       // outputs per tile side: 2 (F(2x2,3x3)) or 4 (F(4x4,3x3))
  // x, z and y channels-last (nhwc) instead of nChw8c; cin and cout then multiples of 8.
  bool nhwc = false;
};

// A weight [cout, cin, 3, 3] transformed for tiles of m outputs a side (G g G^T, in double):
// (m+2)² packed [cin, cout] matrices, about (m+2)²/9 times the weight. Built once per weight and
// tile and shared by the convs that read that weight (a detector's head over pyramid levels:
// FCOS held a copy per level).
struct TransformedWeights {
  int tile = 4;
  int64_t cin = 0, cout = 0;
  int64_t stride = 0;       // floats from one matrix to the next: packed_gemm::packed_size(cin, cout)
  std::vector<float> data;  // the matrices from data[offset] on (32-byte aligned)
  int64_t offset = 0;
  const float* matrix(int64_t pos) const { return data.data() + offset + pos * stride; }
};
std::shared_ptr<const TransformedWeights> transform_weights(const float* weights, int64_t cin, int64_t cout, int tile);

class Conv {
 public:
  // `weights` [cout, cin, 3, 3] (ONNX's layout), `bias` [cout] or null; `ep`: the activation
  // (its bias and accumulate fields are ignored: bias is given here, the residual to run()).
  Conv(const ConvShape& s, const float* weights, const float* bias, const packed_gemm::Epilogue& ep);
  // The same with weights transformed already for s.tile (and s.cin, s.cout).
  Conv(const ConvShape& s, std::shared_ptr<const TransformedWeights> u, const float* bias,
       const packed_gemm::Epilogue& ep);
  // y = act(conv(x) + bias + z) with x, z and y in nChw8c (channels padded to 8 with zeros;
  // y's padding channels are written as zeros). z may be null and may be y itself. `scratch`:
  // scratch_floats(shape()) floats for the transformed tiles and products, any contents.
  void run(const float* x, const float* z, float* y, float* scratch, int threads) const;
  const ConvShape& shape() const { return s_; }

 private:
  ConvShape s_;
  // The images of a group, tile rows [ti0, ti0 + band_rows) of each (grouping() in the .cc), go
  // through the three passes together.
  void run_group(const ConvShape& s, const float* x, const float* z, float* y, float* scratch, int threads,
                 int64_t ti0, int64_t band_rows) const;
  int64_t cin_p_, cout_p_, tiles_h_, tiles_w_, pos_, group_, band_rows_;
  std::shared_ptr<const TransformedWeights> u_;
  std::vector<float> bias_;  // [cout_p], zero-padded
  packed_gemm::Epilogue act_;
};

// Whether these kernels may run here: AVX2 and FMA, and HODU_MAX_ISA allows AVX2.
bool available();

// HODU_CPU_WINOGRAD: auto (unset; hodu's kernel below AVX-512, oneDNN's Winograd on AVX-512,
// each where its size rule says; the cpu engine refuses oneDNN's F(2x3) kernel for 32 output
// channels or fewer and for expansions of 3x and more), hodu (hodu's wherever AVX2 is and the conv fits, any size;
// the tile by the size rule), hodu-f2 / hodu-f4 (the same with F(2x2,3x3) / F(4x4,3x3) tiles),
// onednn (oneDNN's only: the engine before hodu had its own), off (direct kernels only);
// Invalid for any other value (the cpu engine refuses it; libhodu_kernels reads it as auto).
enum class Policy { Auto, Hodu, HoduF2, HoduF4, OneDnn, Off, Invalid };
Policy policy_from_env();

// The tile (2 or 4) hodu's kernel takes for a 3x3 stride-1 undilated ungrouped conv of shape `s`
// (its tile field ignored) under `policy` on this CPU; 0: not hodu's kernel. The cpu engine's
// rule and libhodu_kernels': below AVX-512 only (auto), outputs of kWinogradMinPixels and more,
// 16 input channels and more, scratch within 256 MB.
int tile_for(Policy policy, const ConvShape& s);

// Floats of scratch a Conv over `s` runs on: the transformed tiles [pos][tiles][cin rounded up
// to 8] and their products [pos][tiles][cout rounded up to 8], pos = (tile + 2)², for the
// images it transforms together (as many as fit about 4 MB, at least one), or for a band of one
// image's tile rows where a whole image would not fit.
int64_t scratch_floats(const ConvShape& s);

}  // namespace hodu::winograd
