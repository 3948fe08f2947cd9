// Quantized products on the cpu engine, exact on every x86 CPU:
//   QLinearConv, ConvInteger       oneDNN int8 convolution (u8/s8 src, s8 weights, s32 dst)
//   QLinearMatMul, MatMulInteger   oneDNN int8 matmul
// then one loop (the epilogue) that adds the int32 bias and requantizes exactly as the
// interpreter does (in double), or for ConvInteger/MatMulInteger gives the int32 sums — or, when
// the product's only reader is Cast(to float) → Mul(scale) [→ Add(bias)] [→ Relu], as ORT's
// dynamic quantization writes every conv and matmul, the float result of that chain in the
// same f32 operations (those nodes then have no step of their own).
//
// Weights are constants; their zero point is subtracted once, at plan time: d = w - zw, in
// [-255, 255]. oneDNN takes d as s8 in one product when every d fits in s8 and its product is
// exact on this CPU: with VNNI (vpdpbusd sums u8·s8 products in 32 bits) always; without it
// (AVX2, AVX-512 without VNNI) oneDNN multiplies with vpmaddubsw, which adds two neighbouring
// u8·s8 products (neighbours along the input channels / K) in a saturating 16-bit lane, so only
// when no pair of weights can reach ±32767 with inputs in [0, 255] (7-bit weights, ORT's
// reduce_range, always pass). Otherwise d is split as 16·hi + lo, lo in [0, 15], hi in [-16, 15]:
// both halves are pair-safe, run as one product with twice the output channels, and the
// epilogue adds 16·hi + lo in int32 — exact on any CPU, for twice the multiply-adds.
//
// The input zero point may be a constant or a runtime scalar (DynamicQuantizeLinear's); oneDNN
// counts padding as the zero point, as ONNX does. Nodes whose scales or zero points are per row
// or per element, or not available when the product runs, keep the interpreter's kernel.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"
#include "engines/cpu/dnnl_common.h"
#include "engines/cpu/int8_common.h"
#include "engines/cpu/row_kernels.h"
#include "kernels/cpu/int8_avx2.h"
#include "kernels/cpu/vector_math.h"
#include "passes/graph_utils.h"

namespace hodu::cpu {

// oneDNN's int8 kernels sum u8·s8 products in 32 bits only with VNNI (vpdpbusd); without it
// (vpmaddubsw) a pair of products saturates in 16 bits.
bool int8_exact_isa() {
  static const bool ok = [] {
    auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    auto has = [&](dnnl::cpu_isa want) {
      auto w = static_cast<unsigned>(want);
      return (isa & w) == w;
    };
    return has(dnnl::cpu_isa::avx512_core_vnni) || has(dnnl::cpu_isa::avx2_vnni);
  }();
  return ok;
}

namespace {

// HODU_CPU_INT8_WEIGHTS: "" (unset: the CPU chooses), sums, split or int16 (see below); any other
// value is an InvalidArgument error. Read when a plan is built.
std::string int8_weights_form() {
  const char* v = std::getenv("HODU_CPU_INT8_WEIGHTS");
  const std::string s = v ? v : "";
  if (s.empty() || s == "sums" || s == "split" || s == "int16") return s;
  throw Error(ErrorCode::InvalidArgument,
              "HODU_CPU_INT8_WEIGHTS=" + s +
                  ": expected sums (weights shifted to s8, the zero point by window sums), split (weights as 16*hi + "
                  "lo) or int16 (convs and matmuls on hodu's int16 kernel, CPUs with AVX2); unset lets the CPU "
                  "choose");
}

// ---- weights ----

// The weights as oneDNN's s8 weights, per group of output channels (rows of `per` values; a
// matmul is one group of its N columns), in one of three forms:
//   Plain            d = w - zw, when it fits in s8 and is exact here
//   ZeroPointSums    w' = w - s (s = 128 for u8 weights, 0 for s8, so w' fits in s8): the epilogue
//                    takes Σ(x - zx)(w' - zw') = Σ(x - zx)w' - zw'·Σ(x - zx), zw' = zw - s, with
//                    Σ(x - zx) over each output's window summed by the step itself (WindowSums)
//   Split            d = 16·hi + lo, the Mg high rows then the Mg low ones
struct Int8Weights {
  enum Mode { Plain, ZeroPointSums, Split } mode = Plain;
  std::vector<int8_t> rows;   // [groups · per_group, per]
  int64_t per_group = 0;      // rows of one group: Mg or 2 Mg (and padding)
  std::vector<int32_t> wzp;   // ZeroPointSums: zw' per output channel
};

// Whether vpmaddubsw sums any two weights of each row exactly for inputs in [0, 255]: the two
// largest positive weights add up to at most 128, the two most negative to at least -128. Which
// weights oneDNN pairs depends on its kernel (neighbouring input channels in a direct conv,
// neighbouring kernel taps in its GEMM conv, K in a matmul); any two of one output channel's
// covers them all, and 7-bit weights (|w| <= 64, ORT's reduce_range) always pass.
bool rows_pair_safe(const std::vector<int32_t>& v, int64_t rows, int64_t per) {
  for (int64_t o = 0; o < rows; ++o) {
    int32_t p1 = 0, p2 = 0, n1 = 0, n2 = 0;  // two largest positive, two most negative
    for (int64_t i = 0; i < per; ++i) {
      int32_t x = v[o * per + i];
      if (x > p1) p2 = p1, p1 = x;
      else if (x > p2) p2 = x;
      if (x < n1) n2 = n1, n1 = x;
      else if (x < n2) n2 = x;
    }
    if (p1 + p2 > 128 || n1 + n2 < -128) return false;
  }
  return true;
}

// The weights of product_weights without padding.
Int8Weights product_weights_unpadded(const std::vector<int32_t>& raw, DType wdt, const std::vector<int32_t>& zp,
                                     int64_t M, int64_t per, int64_t groups, bool depthwise) {
  const int64_t Mg = M / groups;
  auto zp_of = [&](int64_t m) { return zp.size() == 1 ? zp[0] : zp[m]; };
  std::vector<int32_t> d(raw.size());
  for (int64_t m = 0; m < M; ++m)
    for (int64_t i = 0; i < per; ++i) d[m * per + i] = raw[m * per + i] - zp_of(m);
  const bool vnni = int8_exact_isa();
  // HODU_CPU_INT8_WEIGHTS=sums|split: that form wherever it is exact (tests run every form on
  // any CPU); int16 (int16_conv_wanted) leaves the choice here to the CPU.
  std::string form = int8_weights_form();
  if (form == "int16") form.clear();
  Int8Weights out;
  auto fits = [](const std::vector<int32_t>& v) {
    return std::all_of(v.begin(), v.end(), [](int32_t x) { return x >= -128 && x <= 127; });
  };
  // Depthwise kernels (one input channel and one output per group) multiply in 32 bits on every
  // ISA; the two forms below add output channels per group, which makes them grouped kernels.
  if (form.empty() && fits(d) && (vnni || depthwise || rows_pair_safe(d, M, per))) {
    out.rows.assign(d.begin(), d.end());
    out.per_group = Mg;
    return out;
  }
  const int32_t shift = wdt == DType::U8 ? 128 : 0;
  std::vector<int32_t> ws(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) ws[i] = raw[i] - shift;
  if (form != "split" && (vnni || rows_pair_safe(ws, M, per))) {
    out.mode = Int8Weights::ZeroPointSums;
    out.per_group = Mg;
    out.rows.assign(ws.begin(), ws.end());
    for (int64_t m = 0; m < M; ++m) out.wzp.push_back(zp_of(m) - shift);
    return out;
  }
  // hi = floor(d / 16), lo = d - 16 hi in [0, 15]: both pair-safe.
  out.mode = Int8Weights::Split;
  out.per_group = 2 * Mg;
  out.rows.resize(static_cast<size_t>(2 * M * per));
  for (int64_t m = 0; m < M; ++m) {
    int64_t g = m / Mg, j = m % Mg;
    int8_t* hi = &out.rows[static_cast<size_t>((g * 2 * Mg + j) * per)];
    int8_t* lo = &out.rows[static_cast<size_t>((g * 2 * Mg + Mg + j) * per)];
    for (int64_t i = 0; i < per; ++i) {
      int32_t v = d[m * per + i];
      hi[i] = static_cast<int8_t>((v - (v & 15)) / 16);
      lo[i] = static_cast<int8_t>(v & 15);
    }
  }
  return out;
}

// raw: M rows of `per` weights (as integers), zp: their zero point (one, or one per row), in
// `groups` groups, each group's rows padded with zero rows to a multiple of `pad_to` (oneDNN's
// AVX2 grouped convs want whole vectors of output channels). Without VNNI only pair-safe weights
// run unsplit.
Int8Weights product_weights(const std::vector<int32_t>& raw, DType wdt, const std::vector<int32_t>& zp, int64_t M,
                            int64_t per, int64_t groups, int64_t pad_to = 1, bool depthwise = false) {
  Int8Weights out = product_weights_unpadded(raw, wdt, zp, M, per, groups, depthwise);
  const int64_t padded = (out.per_group + pad_to - 1) / pad_to * pad_to;
  if (padded == out.per_group) return out;
  std::vector<int8_t> rows(static_cast<size_t>(groups * padded * per), 0);
  for (int64_t g = 0; g < groups; ++g)
    std::copy(out.rows.begin() + g * out.per_group * per, out.rows.begin() + (g + 1) * out.per_group * per,
              rows.begin() + g * padded * per);
  out.rows = std::move(rows);
  out.per_group = padded;
  return out;
}

std::vector<int32_t> as_ints(const Tensor& t) {
  auto v = t.to_int64s();
  return std::vector<int32_t>(v.begin(), v.end());
}

// ---- epilogue ----

// What the epilogue writes from the int32 sums.
struct Epilogue {
  enum Kind { Int32, QLinear, Float } kind = Int32;
  int64_t M = 0, groups = 1;  // output channels (innermost in both buffers), groups of the weights
  Int8Weights::Mode mode = Int8Weights::Plain;
  int64_t per_group = 0;      // sums per group in a row of the int32 sums
  std::vector<int32_t> wzp;   // ZeroPointSums' zw'
  const int32_t* sums = nullptr;  // ZeroPointSums: Σ(x - zx) per row and group, set at each run
  std::vector<int32_t> bias;  // QLinear: int32 bias per channel (empty: none)
  std::vector<double> scale;  // QLinear: per channel (1: all)
  double zero_point = 0, lo = 0, hi = 255;
  DType out = DType::I32;
  // Float: y = float(acc) * s [+ b] [relu], s and b from slots (1 or M values), or b constant.
  // scale2_slot: s is itself the product of two slots' values (ORT's a_scale · b_scale, a Mul
  // the graph puts after the product), taken at each run.
  int scale_slot = -1, scale2_slot = -1, bias_slot = -1;
  bool scale_first = false, bias_first = false;  // operand order of the Mul and Add (f32 + is commutative; kept anyway)
  std::vector<float> bias_const;
  bool relu = false;
  // Float output of a conv: planar (NCHW), `planes` positions per image; rows are the sums' rows
  // (image-major positions). 0: channels innermost like the sums.
  int64_t planes = 0;
};

// Where output channel m's sum sits in a row of the int32 sums: its column, its group, and
// ZeroPointSums' zw' (set once per plan).
struct Columns {
  std::vector<int64_t> col, group;
  int64_t width = 0, Mg = 0;  // a row of sums; the high/low distance of Split
  void make(const Epilogue& e) {
    Mg = e.M / e.groups;
    width = e.groups * e.per_group;
    for (int64_t m = 0; m < e.M; ++m) {
      group.push_back(m / Mg);
      col.push_back(m / Mg * e.per_group + m % Mg);
    }
  }
};

// The exact int32 sum of channel m for rows [begin, end): f(row index in the chunk, value).
// One loop per form, the form chosen outside it.
template <typename F>
inline void channel_sums(const int32_t* acc, const Epilogue& e, const Columns& c, int64_t m, int64_t begin,
                         int64_t end, F&& f) {
  const int32_t* a = acc + c.col[m];
  const int64_t w = c.width;
  if (e.mode == Int8Weights::Split) {
    const int64_t lo = c.Mg;
    for (int64_t r = begin; r < end; ++r) f(r, int64_t{16} * a[r * w] + a[r * w + lo]);
  } else if (e.mode == Int8Weights::ZeroPointSums) {
    const int32_t* sums = e.sums + c.group[m];
    const int64_t zw = e.wzp[m], G = e.groups;
    for (int64_t r = begin; r < end; ++r) f(r, int64_t{a[r * w]} - zw * sums[r * G]);
  } else {
    for (int64_t r = begin; r < end; ++r) f(r, int64_t{a[r * w]});
  }
}

// Rows [begin, end), channels-last output of integers: requantized as the interpreter does
// (QLinearConv / QLinearMatMul: in double, round half to even, saturate), or the int32 sums.
template <typename T>
void integer_rows(const int32_t* acc, T* y, int64_t begin, int64_t end, const Epilogue& e, const Columns& c) {
  for (int64_t m = 0; m < e.M; ++m) {
    if (e.kind == Epilogue::Int32) {
      channel_sums(acc, e, c, m, begin, end, [&](int64_t r, int64_t v) { y[r * e.M + m] = static_cast<T>(v); });
      continue;
    }
    const int64_t bias = e.bias.empty() ? 0 : e.bias[m];
    const double scale = e.scale[e.scale.size() == 1 ? 0 : m];
    channel_sums(acc, e, c, m, begin, end, [&](int64_t r, int64_t v) {
      double q = static_cast<double>(v + bias) * scale + e.zero_point;
      y[r * e.M + m] = static_cast<T>(std::nearbyint(std::clamp(q, e.lo, e.hi)));
    });
  }
}

// Rows [begin, end) (one image's positions when planar) of the float chain: float(sum) · s [+ b]
// [relu] in the graph's own operand order.
void float_rows(const int32_t* acc, float* y, int64_t begin, int64_t end, const Epilogue& e, const Columns& c,
                const float* s, int64_t ns, const float* b, int64_t nb) {
  const int64_t P = e.planes, img = P > 0 ? begin / P : 0;
  for (int64_t m = 0; m < e.M; ++m) {
    const float sv = s[ns == 1 ? 0 : m];
    const float bv = b ? b[nb == 1 ? 0 : m] : 0.0f;
    // Planar: this channel's run of the image; else channels-last.
    float* out = P > 0 ? y + (img * e.M + m) * P - img * P : y + m;
    const int64_t step = P > 0 ? 1 : e.M;
    channel_sums(acc, e, c, m, begin, end, [&](int64_t r, int64_t v) {
      float x = static_cast<float>(v);
      float t = e.scale_first ? sv * x : x * sv;
      if (b) t = e.bias_first ? bv + t : t + bv;
      if (e.relu) t = t > 0.0f ? t : 0.0f;
      out[r * step] = t;
    });
  }
}

// The fast epilogue, one row at a time along the channels (vectorized), where the channels'
// sums sit side by side: one group (any form), or one channel per group (depthwise, unsplit).
// The row's exact sums in int32 (set_fast checked they cannot overflow), then the requantization
// or the float chain on them.
__attribute__((target_clones("avx512f", "avx2,fma", "default"))) void row_totals(const int32_t* a, int64_t M,
                                                                                Int8Weights::Mode mode,
                                                                                const int32_t* zw,
                                                                                const int32_t* sums,
                                                                                bool sum_per_channel, int32_t* t) {
  if (mode == Int8Weights::Split) {
    for (int64_t m = 0; m < M; ++m) t[m] = 16 * a[m] + a[M + m];
  } else if (mode == Int8Weights::ZeroPointSums) {
    if (sum_per_channel)
      for (int64_t m = 0; m < M; ++m) t[m] = a[m] - zw[m] * sums[m];
    else
      for (int64_t m = 0; m < M; ++m) t[m] = a[m] - zw[m] * sums[0];
  } else {
    for (int64_t m = 0; m < M; ++m) t[m] = a[m];
  }
}

// As requantize in integer_rows: (t + bias) · scale + zero point in double, round half to even,
// clamp: the same operations, so the same bits, as the interpreter's.
template <typename T>
__attribute__((target_clones("avx512f", "avx2,fma", "default"))) void requantize_row(
    const int32_t* t, const int32_t* bias, const double* scale, double zp, double lo, double hi, T* y, int64_t M) {
  for (int64_t m = 0; m < M; ++m) {
    double v = static_cast<double>(t[m] + bias[m]) * scale[m] + zp;
    v = std::max(lo, std::min(hi, v));  // vminpd/vmaxpd (no NaN here)
    y[m] = static_cast<T>(static_cast<int32_t>(std::nearbyint(v)));
  }
}

// float(t) · s [+ b] [relu] in the graph's operand order.
__attribute__((target_clones("avx512f", "avx2,fma", "default"))) void float_row(const int32_t* t, const float* s,
                                                                               const float* b, bool scale_first,
                                                                               bool bias_first, bool relu, float* y,
                                                                               int64_t M) {
  if (scale_first)
    for (int64_t m = 0; m < M; ++m) y[m] = s[m] * static_cast<float>(t[m]);
  else
    for (int64_t m = 0; m < M; ++m) y[m] = static_cast<float>(t[m]) * s[m];
  if (b) {
    if (bias_first)
      for (int64_t m = 0; m < M; ++m) y[m] = b[m] + y[m];
    else
      for (int64_t m = 0; m < M; ++m) y[m] = y[m] + b[m];
  }
  if (relu)
    for (int64_t m = 0; m < M; ++m) y[m] = y[m] > 0.0f ? y[m] : 0.0f;
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void flip_signs(const uint8_t* x, uint8_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] ^ 0x80;
}

const char* mode_note(Int8Weights::Mode m) {
  return m == Int8Weights::Split ? " (weights split in two)" : m == Int8Weights::ZeroPointSums ? " (weight zero point by window sums)" : "";
}

// Per group of `cg` channels of one position: Σ x - cg·zx.
template <typename T>
__attribute__((target_clones("avx512f", "avx2", "default"))) void channel_row_sums(const T* __restrict x, int64_t groups,
                                                                                  int64_t cg, int32_t zx,
                                                                                  int32_t* __restrict out) {
  if (cg == 1) {
    for (int64_t g = 0; g < groups; ++g) out[g] = static_cast<int32_t>(x[g]) - zx;
    return;
  }
  for (int64_t g = 0; g < groups; ++g) {
    int32_t acc = 0;
    for (int64_t c = 0; c < cg; ++c) acc += x[g * cg + c];
    out[g] = acc - static_cast<int32_t>(cg) * zx;
  }
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void add_row(int32_t* __restrict dst,
                                                                         const int32_t* __restrict src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

// Σ(x - zx) over the window of every output (and group), for ZeroPointSums. The source is
// channels-last: its channel sums per position first, then those summed over each window
// (padding contributes its zero point, x - zx = 0). A matmul is a conv of one position per row.
struct WindowSums {
  int64_t N = 1, G = 1, Cg = 1;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1}, stride[3] = {1, 1, 1}, dil[3] = {1, 1, 1},
          pad[3] = {0, 0, 0};
  int64_t positions() const { return in[0] * in[1] * in[2]; }
  int64_t outputs() const { return out[0] * out[1] * out[2]; }

  template <typename T>
  void run(const T* x, int32_t zx, int32_t* channel_sums, int32_t* sums, int threads) const {
    const int64_t P = positions(), C = G * Cg;
    parallel_for(N, threads, [&](int64_t n) {
      for (int64_t p = 0; p < P; ++p) channel_row_sums(x + (n * P + p) * C, G, Cg, zx, channel_sums + (n * P + p) * G);
    });
    parallel_for(N * out[0], threads, [&](int64_t no) {
      const int64_t n = no / out[0], o0 = no % out[0];
      for (int64_t o1 = 0; o1 < out[1]; ++o1)
        for (int64_t o2 = 0; o2 < out[2]; ++o2) {
          int32_t* dst = sums + ((n * out[0] + o0) * out[1] * out[2] + o1 * out[2] + o2) * G;
          std::fill_n(dst, G, 0);
          for (int64_t k0 = 0; k0 < k[0]; ++k0) {
            int64_t i0 = o0 * stride[0] - pad[0] + k0 * dil[0];
            if (i0 < 0 || i0 >= in[0]) continue;
            for (int64_t k1 = 0; k1 < k[1]; ++k1) {
              int64_t i1 = o1 * stride[1] - pad[1] + k1 * dil[1];
              if (i1 < 0 || i1 >= in[1]) continue;
              for (int64_t k2 = 0; k2 < k[2]; ++k2) {
                int64_t i2 = o2 * stride[2] - pad[2] + k2 * dil[2];
                if (i2 < 0 || i2 >= in[2]) continue;
                add_row(dst, channel_sums + ((n * in[0] + i0) * in[1] * in[2] + i1 * in[2] + i2) * G, G);
              }
            }
          }
        }
    });
  }
};

// A common zero point passed at run time (oneDNN 2.6's int8 kernels take them so).
struct RuntimeZeroPoint {
  int arg = 0;
  dnnl::memory mem;
  int slot = -1;    // read from this slot at each run (a runtime scalar), else a constant
  int32_t add = 0;  // added to the slot's value (a flipped s8 source: 128)
};

// hodu's int16 convolution (int8_avx2.h) in place of oneDNN's: its shape, packed weights, and
// the source's zero point (a constant, or read from a slot at each run).
struct Int16Conv {
  int8_avx2::ConvShape shape;
  std::vector<int16_t> weights;
  int32_t zx = 0;
  int zx_slot = -1;
  bool src_signed = false;
  int padded = -1;  // writes[padded]: the int16 copy of the input

  // The int32 sums into acc: the padded copy per image, then tasks of (pixels, group, column
  // block), pixels outermost so a chunk's input stays in cache across the weights' blocks.
  void run(RunState& rs, const void* x, int32_t* acc, int16_t* xp) const {
    const int32_t z = zx_slot >= 0 ? static_cast<int32_t>(rs.slots[zx_slot].tensor().get_int64(0)) : zx;
    const auto& s = shape;
    parallel_for(s.batch, rs.threads, [&](int64_t n) { int8_avx2::pad_input(s, x, src_signed, z, n, xp); });
    const int64_t P = s.oh * s.ow, blocks = int8_avx2::column_blocks(s);
    const int64_t chunk = std::min<int64_t>(P, 64), chunks = (P + chunk - 1) / chunk;
    const int64_t per_chunk = s.groups * blocks;
    parallel_for(s.batch * chunks * per_chunk, rs.threads, [&](int64_t t) {
      const int64_t c = t / per_chunk, r = t % per_chunk, n = c / chunks, p0 = c % chunks * chunk;
      int8_avx2::conv(s, xp, weights.data(), n, r / blocks, r % blocks, p0, std::min(P, p0 + chunk), acc);
    });
  }
};

class Int8Step : public Step {
 public:
  void run(RunState& rs) override {
    void* out = rs.slots[writes[0]].data();
    const int32_t* acc;
    if (int16_) {
      auto* sums = static_cast<int32_t*>(rs.slots[writes[1]].data());
      int16_->run(rs, rs.slots[reads[0]].data(), sums,
                  static_cast<int16_t*>(rs.slots[writes[int16_->padded]].data()));
      acc = sums;
    } else {
      acc = run_onednn(rs, out);
      if (direct_) return;
    }
    epilogue(rs, acc, out);
  }

  // oneDNN's product into the output (direct_) or the int32 sums it returns.
  const int32_t* run_onednn(RunState& rs, void* out) {
    if (flip_ >= 0) {
      // s8 → u8 by x + 128 (the sign bit flipped); the zero point moved with it.
      const uint8_t* x = static_cast<const uint8_t*>(rs.slots[reads[0]].data());
      uint8_t* u = static_cast<uint8_t*>(rs.slots[writes[flip_]].data());
      const int64_t n = static_cast<int64_t>(rs.slots[writes[flip_]].bytes), chunk = 1 << 16;
      parallel_for((n + chunk - 1) / chunk, n >= 4 * chunk ? rs.threads : 1, [&](int64_t c) {
        flip_signs(x + c * chunk, u + c * chunk, std::min(chunk, n - c * chunk));
      });
      src_.set_data_handle(u);
    } else {
      bind(src_, rs, reads[0]);
    }
    const int32_t* acc = direct_ ? nullptr : static_cast<const int32_t*>(rs.slots[writes[1]].data());
    dst_.set_data_handle(direct_ ? out : const_cast<int32_t*>(acc));
    std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, weights_.mem}, {DNNL_ARG_DST, dst_}};
    if (has_bias_) args[DNNL_ARG_BIAS] = bias_.mem;
    for (auto& z : zero_points_) {
      if (z.slot >= 0 && z.arg == DNNL_ARG_SRC)
        *static_cast<int32_t*>(z.mem.get_data_handle()) =
            static_cast<int32_t>(rs.slots[z.slot].tensor().get_int64(0)) + z.add;
      args[DNNL_ARG_ATTR_ZERO_POINTS | z.arg] = z.mem;
    }
    prim_.execute(rs.stream, args);
    if (direct_) return nullptr;
    if (epi_.mode == Int8Weights::ZeroPointSums) {
      int32_t zx = 0;
      for (const auto& z : zero_points_)
        if (z.arg == DNNL_ARG_SRC) zx = *static_cast<const int32_t*>(z.mem.get_data_handle());
      auto* cs = static_cast<int32_t*>(rs.slots[writes[sums_]].data());
      auto* ws = static_cast<int32_t*>(rs.slots[writes[sums_ + 1]].data());
      const void* x = src_.get_data_handle();
      if (src_signed_) window_.run(static_cast<const int8_t*>(x), zx, cs, ws, rs.threads);
      else window_.run(static_cast<const uint8_t*>(x), zx, cs, ws, rs.threads);
      epi_.sums = ws;
    }
    rs.stream.wait();
    return acc;
  }

  // The output from the int32 sums.
  void epilogue(RunState& rs, const int32_t* acc, void* out) {
    const Epilogue& e = epi_;
    // Chunks of rows that stay inside one image when the output is planar.
    const int64_t rows = rows_, grain = std::max<int64_t>(16, 16384 / std::max<int64_t>(e.M, 1));
    const int64_t span = e.planes > 0 ? e.planes : rows, per_span = (span + grain - 1) / grain;
    const int64_t chunks = rows / span * per_span;
    auto each = [&](auto&& f) {
      parallel_for(chunks, rs.threads, [&](int64_t c) {
        int64_t begin = c / per_span * span + c % per_span * grain;
        f(begin, std::min(begin + grain, (c / per_span + 1) * span));
      });
    };
    if (fast_) {
      run_fast(rs, acc, out, each);
      return;
    }
    if (e.kind != Epilogue::Float) {
      if (e.out == DType::U8) each([&](int64_t b, int64_t en) { integer_rows(acc, static_cast<uint8_t*>(out), b, en, e, columns_); });
      else if (e.out == DType::I8) each([&](int64_t b, int64_t en) { integer_rows(acc, static_cast<int8_t*>(out), b, en, e, columns_); });
      else each([&](int64_t b, int64_t en) { integer_rows(acc, static_cast<int32_t*>(out), b, en, e, columns_); });
      return;
    }
    const float *s, *bias;
    int64_t ns, nb;
    float_operands(rs, s, ns, bias, nb);
    each([&](int64_t b, int64_t en) { float_rows(acc, static_cast<float*>(out), b, en, e, columns_, s, ns, bias, nb); });
  }

  // The float chain's scale and bias (null: none) and how many values each has.
  void float_operands(RunState& rs, const float*& s, int64_t& ns, const float*& bias, int64_t& nb) {
    const Epilogue& e = epi_;
    const Tensor& st = rs.slots[e.scale_slot].tensor();
    s = st.data<float>();
    ns = st.numel();
    if (e.scale2_slot >= 0) {
      // The scale's own Mul, in f32 as that node computes it (one or M values each).
      const Tensor& st2 = rs.slots[e.scale2_slot].tensor();
      const float* s2 = st2.data<float>();
      const int64_t n2 = st2.numel(), n = std::max(ns, n2);
      scale_product_.resize(static_cast<size_t>(n));
      for (int64_t m = 0; m < n; ++m) scale_product_[m] = s[ns == 1 ? 0 : m] * s2[n2 == 1 ? 0 : m];
      s = scale_product_.data();
      ns = n;
    }
    bias = nullptr;
    nb = 0;
    if (e.bias_slot >= 0) {
      bias = rs.slots[e.bias_slot].tensor().data<float>();
      nb = rs.slots[e.bias_slot].tensor().numel();
    } else if (!e.bias_const.empty()) {
      bias = e.bias_const.data();
      nb = static_cast<int64_t>(e.bias_const.size());
    }
  }

  // The row-wise vectorized epilogue (fast_).
  template <typename Each>
  void run_fast(RunState& rs, const int32_t* acc, void* out, Each&& each) {
    const Epilogue& e = epi_;
    const int64_t M = e.M, width = columns_.width;
    const bool per_channel_sums = e.groups > 1;
    const float* bias = nullptr;
    if (e.kind == Epilogue::Float) {
      const float* s;
      int64_t ns, nb;
      float_operands(rs, s, ns, bias, nb);
      for (int64_t m = 0; m < M; ++m) {
        sv_[m] = s[ns == 1 ? 0 : m];
        if (bias) bv_[m] = bias[nb == 1 ? 0 : m];
      }
    }
    each([&](int64_t b, int64_t en) {
      thread_local std::vector<int32_t> t;
      thread_local std::vector<float> tile;
      t.resize(static_cast<size_t>(M));
      const bool planar = e.kind == Epilogue::Float && e.planes > 0;
      if (planar) tile.resize(static_cast<size_t>((en - b) * M));
      for (int64_t r = b; r < en; ++r) {
        const int32_t* sums = e.sums ? e.sums + r * e.groups : nullptr;
        row_totals(acc + r * width, M, e.mode, e.wzp.data(), sums, per_channel_sums, t.data());
        if (e.kind == Epilogue::Int32) {
          std::memcpy(static_cast<int32_t*>(out) + r * M, t.data(), static_cast<size_t>(M) * sizeof(int32_t));
        } else if (e.kind == Epilogue::QLinear) {
          if (e.out == DType::U8)
            requantize_row(t.data(), bias_i_.data(), scale_d_.data(), e.zero_point, e.lo, e.hi,
                           static_cast<uint8_t*>(out) + r * M, M);
          else
            requantize_row(t.data(), bias_i_.data(), scale_d_.data(), e.zero_point, e.lo, e.hi,
                           static_cast<int8_t*>(out) + r * M, M);
        } else {
          float_row(t.data(), sv_.data(), bias ? bv_.data() : nullptr, e.scale_first, e.bias_first, e.relu,
                    planar ? tile.data() + (r - b) * M : static_cast<float*>(out) + r * M, M);
        }
      }
      if (!planar) return;
      // Planar output: the chunk's rows are one image's positions.
      const int64_t P = e.planes, img = b / P, p0 = b - img * P, rows = en - b;
      float* y = static_cast<float*>(out);
      for (int64_t m = 0; m < M; ++m) {
        float* o = y + (img * M + m) * P + p0;
        for (int64_t k = 0; k < rows; ++k) o[k] = tile[k * M + m];
      }
    });
  }

  // Whether the row-wise epilogue applies: the channels' sums side by side (one group, or one
  // unsplit channel per group) and every sum of K products fits in int32 exactly.
  void set_fast(int64_t K) {
    const Epilogue& e = epi_;
    sv_.resize(static_cast<size_t>(e.M));
    bv_.resize(static_cast<size_t>(e.M));
    const double bound = 255.0 * 255.0 * static_cast<double>(K);  // |sum|, |zw'·Σ(x - zx)|
    const bool fits = e.mode == Int8Weights::Split ? 2 * 16.0 * 128.0 * 255.0 * static_cast<double>(K) < 2147483647.0
                                                   : 2 * bound + 2147483648.0 < 4294967295.0;
    const bool side_by_side = (e.groups == 1 && e.per_group == (e.mode == Int8Weights::Split ? 2 * e.M : e.M)) ||
                              (e.groups == e.M && e.per_group == 1 && e.mode != Int8Weights::Split);
    fast_ = fits && side_by_side;
    // The requantization's bias and scale per channel.
    bias_i_.assign(static_cast<size_t>(e.M), 0);
    scale_d_.assign(static_cast<size_t>(e.M), 0.0);
    for (int64_t m = 0; m < e.M; ++m) {
      if (!e.bias.empty()) bias_i_[m] = e.bias[m];
      if (!e.scale.empty()) scale_d_[m] = e.scale[e.scale.size() == 1 ? 0 : m];
    }
    // Adding the bias in int32 must not overflow either.
    if (!e.bias.empty()) {
      int64_t most = 0;
      for (int32_t v : e.bias) most = std::max<int64_t>(most, std::abs(static_cast<int64_t>(v)));
      fast_ = fast_ && 2 * bound + static_cast<double>(most) < 2147483647.0;
    }
  }

  dnnl::primitive prim_;
  dnnl::memory src_, dst_;
  PackedConstant weights_;
  std::vector<RuntimeZeroPoint> zero_points_;
  PackedConstant bias_;  // oneDNN's int32 bias where it requantizes
  bool has_bias_ = false;
  int flip_ = -1;        // an s8 source flipped to u8 (no VNNI) into writes[flip_]
  int sums_ = -1;        // ZeroPointSums: channel sums in writes[sums_], window sums in writes[sums_ + 1]
  bool src_signed_ = false;  // the source oneDNN reads is s8
  WindowSums window_;
  Columns columns_;
  std::vector<float> sv_, bv_;     // the float chain's scale and bias, one per channel
  std::vector<float> scale_product_;  // the scale when it is a product of two slots (scale2_slot)
  std::vector<int32_t> bias_i_;    // QLinear: the int32 bias per channel (zeros: none)
  std::vector<double> scale_d_;    // QLinear: the requantization factor per channel
  bool fast_ = false;              // the row-wise vectorized epilogue applies (set_fast)
  bool direct_ = false;  // oneDNN writes the output itself (ConvInteger/MatMulInteger, unsplit)
  int64_t rows_ = 0;     // else its int32 sums go to writes[1] (arena bytes of this step only)
  Epilogue epi_;
  std::unique_ptr<Int16Conv> int16_;  // hodu's int16 kernel runs the product, not oneDNN
};

// The source zero point: a constant scalar, or a runtime scalar slot of the source's type.
struct SrcZeroPoint {
  int32_t value = 0;
  int slot = -1;
};
std::optional<SrcZeroPoint> src_zero_point(PlanBuilder& b, const Node& n, size_t i, DType dt) {
  if (!n.has_input(i)) return SrcZeroPoint{};
  if (const Tensor* t = passes::constant_of(b.graph(), n.inputs[i])) {
    if (t->dtype() != dt || t->numel() != 1) return std::nullopt;
    return SrcZeroPoint{static_cast<int32_t>(t->get_int64(0)), -1};
  }
  auto t = b.static_type(n.inputs[i]);
  if (!t || t->first != dt || shape_numel(t->second) != 1) return std::nullopt;
  return SrcZeroPoint{0, b.plain(n.inputs[i])};
}

// Without VNNI oneDNN halves s8·s8 weights (its 0.5 weights scale against saturation), so an s8
// source is flipped to u8 (x + 128, zero point + 128) and the product is u8·s8.
bool flip_s8_source(DType src) { return src == DType::I8 && !int8_exact_isa(); }

std::vector<RuntimeZeroPoint> set_src_zero_point(dnnl::primitive_attr& attr, dnnl::engine& eng, const SrcZeroPoint& z,
                                                 bool flip) {
  if (z.slot < 0 && z.value == 0 && !flip) return {};
  attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
  RuntimeZeroPoint r{DNNL_ARG_SRC, dnnl::memory(dnnl::memory::desc({1}, dt::s32, tag::x), eng), z.slot,
                     flip ? 128 : 0};
  *static_cast<int32_t*>(r.mem.get_data_handle()) = z.value + r.add;
  return {std::move(r)};
}

// QLinearConv / QLinearMatMul's requantization: y_scale (input 6), y_zero_point (input 7, whose
// type is the output's; absent: the input's), and the factor per channel as the interpreter
// computes it.
bool qlinear_epilogue(PlanBuilder& b, const Node& n, DType input_dtype, int64_t M, bool conv, Epilogue& e) {
  auto xsc = scales_of(const_input(b, n, 1).t, 0), wsc = scales_of(const_input(b, n, 4).t, M),
       ysc = scales_of(const_input(b, n, 6).t, 0);
  if (!xsc || !wsc || !ysc) return false;
  e.kind = Epilogue::QLinear;
  e.out = input_dtype;
  ConstIn yz = const_input(b, n, 7);
  if (yz.present) {
    if (!yz.t || !is_8bit(yz.t->dtype())) return false;
    e.out = yz.t->dtype();
  }
  auto yzv = zero_points_of(yz, e.out, 0);
  if (!yzv) return false;
  e.zero_point = (*yzv)[0];
  e.lo = e.out == DType::I8 ? -128 : 0;
  e.hi = e.out == DType::I8 ? 127 : 255;
  const float xs = (*xsc)[0], ys = (*ysc)[0];
  for (float ws : *wsc) {
    // QLinearConv: x_scale * w_scale / y_scale in f32; QLinearMatMul: (a_scale * b_scale) / y_scale,
    // each product rounded to f32 (numpy in the scales' type).
    float f = conv ? xs * ws / ys : static_cast<float>(static_cast<float>(xs * ws) / ys);
    e.scale.push_back(static_cast<double>(f));
  }
  return true;
}

// The chain ORT's dynamic quantization puts after ConvInteger/MatMulInteger: Cast(to float) →
// Mul(scale) [→ Add(bias)] [→ Relu], each the only reader of the last, scale and bias of one
// value or one per output channel (broadcast along `channel_axis` of the output), available when
// the product runs. Claims the nodes and returns the chain's last value, "" when it is not there.
std::string fuse_float_chain(PlanBuilder& b, const Node& n, int64_t M, size_t rank, size_t channel_axis, Epilogue& e) {
  const Graph& g = b.graph();
  auto sole = [&](const std::string& v) -> const Node* {
    if (v.empty() || g.output(v)) return nullptr;
    const auto& rd = b.readers(v);
    if (rd.size() != 1) return nullptr;
    const Node& r = g.nodes[rd[0]];
    if (!r.domain.empty()) return nullptr;
    int uses = 0;
    for (const auto& in : r.inputs) uses += in == v;
    return uses == 1 ? &r : nullptr;
  };
  // A per-channel (or single) f32 operand ready now: its numel is 1 or M along the channel axis.
  auto channel_operand = [&](const std::string& v) -> bool {
    auto t = b.static_type(v);
    if (!t || t->first != DType::F32) return false;
    const auto& s = t->second;
    if (s.size() > rank) return false;
    int64_t numel = shape_numel(s);
    if (numel == 1) return true;
    if (numel != M) return false;
    // Right-aligned broadcast: the M values sit on the channel axis.
    size_t at = rank - s.size();
    return channel_axis >= at && s[channel_axis - at] == M;
  };
  auto ready = [&](const std::string& v) { return passes::constant_of(g, v) || b.has_slot(v); };
  const Node* cast = sole(n.outputs[0]);
  if (!cast || cast->op_type != "Cast" || cast->get_int("to", 0) != 1) return "";
  const Node* mul = sole(cast->outputs[0]);
  if (!mul || mul->op_type != "Mul" || mul->inputs.size() != 2) return "";
  const std::string& sv = mul->inputs[0] == cast->outputs[0] ? mul->inputs[1] : mul->inputs[0];
  if (!channel_operand(sv)) return "";
  // A scale not computed yet: ORT's quantizer writes a_scale · b_scale as a Mul after the
  // product. Where that Mul's operands are ready and the chain alone reads its result, the
  // epilogue multiplies them itself (the same f32 product) and the Mul is claimed.
  const Node* scale_mul = nullptr;
  if (!ready(sv)) {
    if (g.output(sv) || b.readers(sv).size() != 1) return "";
    if (int p = g.producer_of(sv); p >= 0) scale_mul = &g.nodes[p];
    if (!scale_mul || !scale_mul->domain.empty() || scale_mul->op_type != "Mul" || scale_mul->inputs.size() != 2)
      return "";
    for (const auto& v : scale_mul->inputs)
      if (!channel_operand(v) || !ready(v)) return "";
  }
  e.kind = Epilogue::Float;
  e.out = DType::F32;
  e.scale_first = mul->inputs[0] == sv;
  std::vector<const Node*> chain = {cast, mul};
  std::string last = mul->outputs[0];
  if (const Node* add = sole(last); add && add->op_type == "Add" && add->inputs.size() == 2) {
    const std::string& bv = add->inputs[0] == last ? add->inputs[1] : add->inputs[0];
    if (channel_operand(bv) && ready(bv)) {
      e.bias_first = add->inputs[0] == bv;
      chain.push_back(add);
      last = add->outputs[0];
    }
  }
  if (const Node* relu = sole(last); relu && relu->op_type == "Relu") {
    e.relu = true;
    chain.push_back(relu);
    last = relu->outputs[0];
  }
  auto y = b.static_type(last);
  if (!y || y->first != DType::F32) return "";
  if (scale_mul) {
    e.scale_slot = b.plain(scale_mul->inputs[0]);
    e.scale2_slot = b.plain(scale_mul->inputs[1]);
    b.claim(*scale_mul);
  } else {
    e.scale_slot = b.plain(sv);
  }
  if (chain.size() > 2 && chain[2]->op_type == "Add") {
    const std::string& bv = chain[2]->inputs[0] == mul->outputs[0] ? chain[2]->inputs[1] : chain[2]->inputs[0];
    if (const Tensor* t = passes::constant_of(g, bv)) {
      Tensor c = t->contiguous();
      e.bias_const.assign(c.data<float>(), c.data<float>() + c.numel());
    } else {
      e.bias_slot = b.plain(bv);
    }
  }
  for (size_t i = 1; i < chain.size(); ++i) b.claim(*chain[i]);
  b.claim(*cast);
  return last;
}

// A Max with a constant or a Clip with constant bounds reading a QLinear product's output alone
// (fuse_qdq writes them for a Relu or Clip before the QuantizeLinear): the requantization clamps
// there instead (clamping the rounded value to integers equals rounding the clamped one). The
// node and the bounds it leaves; null when there is none.
struct IntegerClamp {
  const Node* node = nullptr;
  double lo = 0, hi = 0;
};
IntegerClamp find_integer_clamp(PlanBuilder& b, const Node& n, const Epilogue& e) {
  const Graph& g = b.graph();
  const std::string& y = n.outputs[0];
  const auto& rd = b.readers(y);
  IntegerClamp out{nullptr, e.lo, e.hi};
  if (g.output(y) || rd.size() != 1) return out;
  const Node& c = g.nodes[rd[0]];
  if (!c.domain.empty() || (c.op_type != "Max" && c.op_type != "Clip") || c.inputs.empty() || c.inputs[0] != y)
    return out;
  auto bound = [&](size_t i) -> std::optional<double> {
    if (!c.has_input(i)) return std::nullopt;
    const Tensor* t = passes::constant_of(g, c.inputs[i]);
    if (!t || t->dtype() != e.out || t->numel() != 1) return std::nullopt;
    return t->get_double(0);
  };
  auto lo = bound(1), hi = c.op_type == "Clip" ? bound(2) : std::nullopt;
  if (c.op_type == "Max" ? (c.inputs.size() != 2 || !lo) : ((c.has_input(1) && !lo) || (c.has_input(2) && !hi)))
    return out;
  if (lo) out.lo = std::max(out.lo, *lo);
  if (hi) out.hi = std::min(out.hi, *hi);
  out.node = &c;
  return out;
}

// The product's last value and its type once the nodes its epilogue does are claimed: the clamp
// after a QLinear product, ORT's dynamic-quantization chain after an integer one.
std::pair<std::string, DType> claim_epilogue_nodes(PlanBuilder& b, const Node& n, bool qlinear,
                                                    const IntegerClamp& clamp, int64_t M, size_t rank,
                                                    size_t channel_axis, Epilogue& e) {
  if (qlinear) {
    if (!clamp.node) return {n.outputs[0], e.out};
    e.lo = clamp.lo;
    e.hi = clamp.hi;
    b.claim(*clamp.node);
    return {clamp.node->outputs[0], e.out};
  }
  std::string fused = fuse_float_chain(b, n, M, rank, channel_axis, e);
  if (fused.empty()) return {n.outputs[0], DType::I32};
  return {fused, DType::F32};
}

// oneDNN requantizes a QLinear product itself (output scales in f32, the destination zero point,
// the clamp as a clip post-op) where the weights run unsplit: one pass and no int32 sums, within
// one quantum of the interpreter's double (a product on the other side of a .5 in f32).
// HODU_CPU_INT8_EXACT=1 keeps the exact epilogue everywhere.
bool onednn_requantizes() {
  const char* v = std::getenv("HODU_CPU_INT8_EXACT");  // read when a plan is built
  return !(v && *v && std::string(v) != "0");
}

// Sets oneDNN's requantization of a QLinear product on `attr` (mask: the output scales' channel
// bit); the destination zero point's memory is appended to `zps`.
void set_requantization(dnnl::primitive_attr& attr, dnnl::engine& eng, const Epilogue& e, const IntegerClamp& clamp,
                        int channel_mask, std::vector<RuntimeZeroPoint>& zps) {
  std::vector<float> scales(e.scale.begin(), e.scale.end());
  attr.set_output_scales(scales.size() == 1 ? 0 : channel_mask, scales);
  const double full_lo = e.out == DType::I8 ? -128 : 0, full_hi = e.out == DType::I8 ? 127 : 255;
  if (clamp.lo > full_lo || clamp.hi < full_hi) {
    // Before the zero point is added: clip to [lo - zp, hi - zp].
    dnnl::post_ops po;
    po.append_eltwise(1.0f, dnnl::algorithm::eltwise_clip_v2, static_cast<float>(clamp.lo - e.zero_point),
                      static_cast<float>(clamp.hi - e.zero_point));
    attr.set_post_ops(po);
  }
  if (e.zero_point != 0) {
    attr.set_zero_points(DNNL_ARG_DST, 0, {DNNL_RUNTIME_S32_VAL});
    RuntimeZeroPoint r{DNNL_ARG_DST, dnnl::memory(dnnl::memory::desc({1}, dt::s32, tag::x), eng)};
    *static_cast<int32_t*>(r.mem.get_data_handle()) = static_cast<int32_t>(e.zero_point);
    zps.push_back(std::move(r));
  }
}

}  // namespace

// Whether hodu's int16 convolution (int8_avx2.h) can run a product: 1-D and 2-D, not depthwise
// (oneDNN's depthwise kernels are exact everywhere), every sum of products within int32.
bool int16_conv_possible(int64_t per, int64_t spatial, bool depthwise) {
  return int8_avx2::available() && spatial <= 2 && !depthwise && 255.0 * 255.0 * static_cast<double>(per) < 2147483647.0;
}

// Whether it runs this product (a matmul as a 1x1 conv) in oneDNN's place: on AVX2 without VNNI
// where oneDNN would need the weights split (HODU_CPU_INT8_WEIGHTS=int16: wherever it can, on
// any CPU with AVX2).
bool int16_conv_wanted(const std::vector<int32_t>& raw, DType wdt, const std::vector<int32_t>& zp, int64_t M,
                       int64_t per, int64_t groups, int64_t spatial, bool depthwise) {
  if (!int16_conv_possible(per, spatial, depthwise)) return false;
  const std::string form = int8_weights_form();
  if (form == "int16") return true;
  if (!form.empty() || int8_exact_isa() || vector_math::cpu_isa() != vector_math::Isa::Avx2) return false;
  return product_weights_unpadded(raw, wdt, zp, M, per, groups, false).mode == Int8Weights::Split;
}

// A product on hodu's int16 kernel (its shape set in c; a matmul is a 1x1 conv over its rows):
// sums of Σ(x - zx)(w - zw) in int32 [positions, M] (one column per channel, group-major), then
// the epilogue as for oneDNN's unsplit products. raw: the M rows of weights (as integers), zp their
// zero points; the input read channels-last (a conv) or as it is (a matmul's rows of K).
bool add_int16_step(PlanBuilder& b, const Node& n, std::unique_ptr<Int16Conv> c, const std::vector<int32_t>& raw,
                    const std::vector<int32_t>& zp, DType xdt, const SrcZeroPoint& xzp, size_t w_in, bool qlinear,
                    const IntegerClamp& clamp, Epilogue e, const std::vector<int64_t>& xs,
                    const std::vector<int64_t>& ys, bool conv) {
  const int8_avx2::ConvShape& s = c->shape;
  const int64_t M = s.groups * s.cout, per = static_cast<int64_t>(raw.size()) / M;
  std::vector<int32_t> d(raw.size());
  for (int64_t m = 0; m < M; ++m)
    for (int64_t i = 0; i < per; ++i) d[m * per + i] = raw[m * per + i] - zp[zp.size() == 1 ? 0 : m];
  c->weights = int8_avx2::pack_weights(s, d.data());
  c->zx = xzp.value;
  c->zx_slot = xzp.slot;
  c->src_signed = xdt == DType::I8;
  e.mode = Int8Weights::Plain;
  e.per_group = s.cout;

  auto [out_name, out_dt] = claim_epilogue_nodes(b, n, qlinear, clamp, M, ys.size(), conv ? 1 : ys.size() - 1, e);
  auto step = std::make_unique<Int8Step>();
  auto channels_last = [&](const std::vector<int64_t>& shape, dt type) {
    return dnnl::memory::desc(to_dims(shape), type, shape.size() == 3 ? tag::nwc : tag::nhwc);
  };
  step->reads = {conv ? b.as_layout(n.inputs[0], channels_last(xs, dnnl_dtype(xdt))) : b.plain(n.inputs[0])};
  b.consumed_at_plan_time(n.inputs[w_in]);  // read into the packed weights only
  if (xzp.slot >= 0) step->reads.push_back(xzp.slot);
  for (int sl : {e.scale_slot, e.scale2_slot, e.bias_slot})
    if (sl >= 0) step->reads.push_back(sl);
  step->rows_ = shape_numel(ys) / M;
  step->epi_ = std::move(e);
  step->columns_.make(step->epi_);
  step->set_fast(per);
  // A conv's float result planar, as the engine's other kernels read it; its int8 and int32
  // outputs channels-last, as the next int8 conv reads them. A matmul's rows as they are.
  if (conv && step->epi_.kind == Epilogue::Float) step->epi_.planes = step->rows_ / ys[0];
  if (conv && step->epi_.kind != Epilogue::Float)
    step->writes = {b.define(out_name, out_dt, ys, channels_last(ys, dnnl_dtype(out_dt)))};
  else
    step->writes = {b.define(out_name, out_dt, ys)};
  step->writes.push_back(b.define("", DType::I32, {step->rows_, M}));
  c->padded = static_cast<int>(step->writes.size());
  step->writes.push_back(b.define("", DType::I16, {s.padded_elements()}));
  step->label = n.describe() + (conv ? ": hodu int8 conv on int16 products" : ": hodu int8 matmul on int16 products") +
                (step->epi_.kind == Epilogue::Float ? " + float epilogue" : "");
  step->int16_ = std::move(c);
  b.add(std::move(step));
  return true;
}

// A conv on hodu's int16 kernel: its window as the kernel's shape (false, nothing planned, for
// a window it cannot take: the caller goes on to oneDNN's).
bool make_int16_conv(PlanBuilder& b, const Node& n, DType xdt, const std::vector<int64_t>& xs,
                     const std::vector<int64_t>& ys, const Tensor& w, size_t w_in, const std::vector<int32_t>& raw,
                     const std::vector<int32_t>& zp, const ConvWindow& win, const SrcZeroPoint& xzp, bool qlinear,
                     const IntegerClamp& clamp, const Epilogue& e) {
  const int64_t M = ys[1], G = win.group;
  auto c = std::make_unique<Int16Conv>();
  int8_avx2::ConvShape& s = c->shape;
  s.batch = xs[0];
  s.groups = G;
  s.cin = xs[1] / G;
  s.cout = M / G;
  if (xs.size() == 4) {
    s.h = xs[2];
    s.oh = ys[2];
    s.kh = w.dim(2);
    s.sh = win.strides[0];
    s.dh = win.dilations[0] + 1;  // oneDNN counts 0 as none
    s.pad_top = win.pad_l[0];
  }
  s.w = xs.back();
  s.ow = ys.back();
  s.kw = w.shape().back();
  s.sw = win.strides.back();
  s.dw = win.dilations.back() + 1;
  s.pad_left = win.pad_l.back();
  if (s.pad_top < 0 || s.pad_left < 0) return false;
  return add_int16_step(b, n, std::move(c), raw, zp, xdt, xzp, w_in, qlinear, clamp, e, xs, ys, true);
}

// QLinearConv(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B) and ConvInteger(x, w, x_zp, w_zp).
bool make_int8_conv(PlanBuilder& b, const Node& n) {
  if (!n.domain.empty() || (n.op_type != "QLinearConv" && n.op_type != "ConvInteger")) return false;
  const bool qlinear = n.op_type == "QLinearConv";
  const size_t w_in = qlinear ? 3 : 1, xzp_in = 2, wzp_in = qlinear ? 5 : 3;
  auto x = b.static_type(n.inputs[0]);
  auto y = b.static_type(n.outputs[0]);
  const Tensor* w = passes::constant_of(b.graph(), n.inputs[w_in]);
  if (!x || !y || !w || !is_8bit(x->first) || !is_8bit(w->dtype())) return false;
  const auto& xs = x->second;
  const auto& ys = y->second;
  const int64_t spatial = static_cast<int64_t>(xs.size()) - 2;
  if (spatial < 1 || spatial > 3 || w->rank() != spatial + 2 || ys.size() != xs.size()) return false;
  const int64_t M = ys[1];
  if (w->dim(0) != M || shape_numel(ys) == 0) return false;
  auto xzp = src_zero_point(b, n, xzp_in, x->first);
  auto wzp = zero_points_of(const_input(b, n, wzp_in), w->dtype(), M);
  if (!xzp || !wzp) return false;
  auto win = conv_window(n, xs, ys, w->shape());
  if (!win) return false;

  Epilogue e;
  e.M = M;
  e.groups = win->group;
  if (qlinear) {
    if (!qlinear_epilogue(b, n, x->first, M, true, e)) return false;
    if (n.has_input(8)) {
      const Tensor* bias = passes::constant_of(b.graph(), n.inputs[8]);
      if (!bias || bias->dtype() != DType::I32 || bias->numel() != M) return false;
      for (int64_t v : bias->to_int64s()) e.bias.push_back(static_cast<int32_t>(v));
    }
  }
  if (y->first != (qlinear ? e.out : DType::I32)) return false;
  const int64_t G = win->group, per = w->numel() / M;
  const IntegerClamp clamp = qlinear ? find_integer_clamp(b, n, e) : IntegerClamp{};
  auto channels_last = [&](const std::vector<int64_t>& s, dt type) {
    return dnnl::memory::desc(to_dims(s), type, spatial == 1 ? tag::nwc : spatial == 2 ? tag::nhwc : tag::ndhwc);
  };
  const bool flip = flip_s8_source(x->first);
  dnnl::memory::desc src_md(to_dims(xs), flip ? dt::u8 : dnnl_dtype(x->first), tag::any);
  const auto raw = as_ints(*w);
  const bool depthwise = G > 1 && w->dim(1) == 1 && M == G;
  if (int16_conv_wanted(raw, w->dtype(), *wzp, M, per, G, spatial, depthwise) &&
      make_int16_conv(b, n, x->first, xs, ys, *w, w_in, raw, *wzp, *win, *xzp, qlinear, clamp, e))
    return true;
  // Grouped convs whose groups have few output channels: oneDNN's AVX2 kernels want a whole
  // vector of them per group, so the groups are padded with zero channels when the first try
  // gives only its reference kernel (~100x slower than the interpreter's).
  Int8Weights w8;
  dnnl::convolution_forward::primitive_desc pd;
  std::vector<RuntimeZeroPoint> zps;
  std::vector<int64_t> acc_shape;
  dnnl::memory::desc acc_md, w_user;
  const dnnl::memory::desc b_md({M}, dt::s32, tag::x);
  bool found = false, requantized = false;
  for (int64_t pad_to : {int64_t{1}, int64_t{8}, int64_t{16}}) {
    if (pad_to > 1 && G == 1) break;
    w8 = product_weights(raw, w->dtype(), *wzp, M, per, G, pad_to, G > 1 && w->dim(1) == 1 && M == G);
    // Window sums read the source channels-last.
    if (w8.mode == Int8Weights::ZeroPointSums) src_md = channels_last(xs, flip ? dt::u8 : dnnl_dtype(x->first));
    const int64_t M2 = G * w8.per_group;
    acc_shape = ys;
    acc_shape[1] = M2;
    dnnl::memory::dims wdims = win->weight_dims;
    wdims[G > 1 ? 1 : 0] = G > 1 ? w8.per_group : M2;
    w_user = dnnl::memory::desc(wdims, dt::s8, win->weight_tag);
    dnnl::memory::desc w_md(wdims, dt::s8, tag::any);
    dnnl::primitive_attr attr;
    zps = set_src_zero_point(attr, b.engine(), *xzp, flip);
    // Unsplit QLinear weights: oneDNN writes the requantized output itself.
    requantized = qlinear && w8.mode == Int8Weights::Plain && M2 == M && onednn_requantizes();
    if (requantized) set_requantization(attr, b.engine(), e, clamp, 1 << 1, zps);
    acc_md = requantized ? channels_last(ys, dnnl_dtype(e.out)) : channels_last(acc_shape, dt::s32);
    try {
      pd = dnnl::convolution_forward::primitive_desc(
          win->desc(dnnl::algorithm::convolution_direct, src_md, w_md, requantized && !e.bias.empty() ? &b_md : nullptr,
                    acc_md),
          attr, b.engine());
    } catch (const dnnl::error&) {
      continue;
    }
    if (!reference_impl(pd.impl_info_str())) {
      found = true;
      break;
    }
  }
  // No jit kernel for this conv (AVX-VNNI's has no grouped int8 conv of 2 input channels a
  // group; the conv went to the interpreter): hodu's int16 conv, where it runs.
  if (!found)
    return int16_conv_possible(per, spatial, depthwise) &&
           make_int16_conv(b, n, x->first, xs, ys, *w, w_in, raw, *wzp, *win, *xzp, qlinear, clamp, e);
  e.mode = w8.mode;
  e.per_group = w8.per_group;
  e.wzp = w8.wzp;
  std::vector<int64_t> w_shape = w->shape();
  w_shape[0] = acc_shape[1];
  Tensor w_s8 = Tensor::from_vector(DType::I8, w_shape, w8.rows);

  auto [out_name, out_dt] = claim_epilogue_nodes(b, n, qlinear, clamp, M, ys.size(), 1, e);
  auto step = std::make_unique<Int8Step>();
  step->direct_ = requantized || (e.kind == Epilogue::Int32 && e.mode == Int8Weights::Plain && acc_shape[1] == M);
  step->prim_ = dnnl::convolution_forward(pd);
  step->weights_ = pack_constant(b.engine(), w_s8, w_user, pd.weights_desc());
  b.consumed_at_plan_time(n.inputs[w_in]);  // read into w_s8 only: the original may go
  if (requantized && !e.bias.empty()) {
    step->bias_ = pack_constant(b.engine(), Tensor::from_vector(DType::I32, {M}, e.bias), b_md, pd.bias_desc());
    step->has_bias_ = true;
  }
  step->zero_points_ = std::move(zps);
  for (auto& z : step->zero_points_)
    if (z.slot >= 0) step->reads.push_back(z.slot);
  dnnl::memory::desc src_in = pd.src_desc();
  if (flip) {
    dnnl_memory_desc_t c = src_in.data;
    c.data_type = dnnl_s8;
    src_in = dnnl::memory::desc(c);
  }
  step->reads.insert(step->reads.begin(), b.as_layout(n.inputs[0], src_in));
  for (int s : {e.scale_slot, e.scale2_slot, e.bias_slot})
    if (s >= 0) step->reads.push_back(s);
  step->src_ = dnnl::memory(pd.src_desc(), b.engine(), nullptr);
  step->dst_ = dnnl::memory(pd.dst_desc(), b.engine(), nullptr);
  step->rows_ = shape_numel(ys) / M;
  step->epi_ = std::move(e);
  step->columns_.make(step->epi_);
  step->set_fast(per);
  // The float chain's result planar, as the engine's other kernels read it; int8 and int32 outputs
  // channels-last, as the next int8 conv reads them.
  if (step->epi_.kind == Epilogue::Float) {
    step->epi_.planes = step->rows_ / ys[0];
    step->writes = {b.define(out_name, out_dt, ys)};
  } else {
    step->writes = {b.define(out_name, out_dt, ys, channels_last(ys, dnnl_dtype(out_dt)))};
  }
  if (!step->direct_) step->writes.push_back(b.define("", DType::I32, acc_shape, acc_md));
  if (flip) {
    step->flip_ = static_cast<int>(step->writes.size());
    step->writes.push_back(b.define("", DType::U8, xs, pd.src_desc()));
  }
  step->src_signed_ = x->first == DType::I8 && !flip;
  if (step->epi_.mode == Int8Weights::ZeroPointSums) {
    WindowSums& ws = step->window_;
    ws.N = xs[0];
    ws.G = G;
    ws.Cg = xs[1] / G;
    for (int64_t d = 0; d < spatial; ++d) {
      ws.in[d] = xs[2 + d];
      ws.out[d] = ys[2 + d];
      ws.k[d] = w->dim(2 + d);
      ws.stride[d] = win->strides[d];
      ws.dil[d] = win->dilations[d] + 1;  // oneDNN counts 0 as none
      ws.pad[d] = win->pad_l[d];
    }
    step->sums_ = static_cast<int>(step->writes.size());
    step->writes.push_back(b.define("", DType::I32, {ws.N * ws.positions() * G}));
    step->writes.push_back(b.define("", DType::I32, {ws.N * ws.outputs() * G}));
  }
  step->label = n.describe() + ": onednn int8 " + std::string(pd.impl_info_str()) +
                mode_note(step->epi_.mode) +
                (step->epi_.kind == Epilogue::Float ? " + float epilogue" : "");
  b.add(std::move(step));
  return true;
}

// QLinearMatMul(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp) and MatMulInteger(a, b, a_zp, b_zp),
// with a constant 2-D b.
bool make_int8_matmul(PlanBuilder& b, const Node& n) {
  if (!n.domain.empty() || (n.op_type != "QLinearMatMul" && n.op_type != "MatMulInteger")) return false;
  const bool qlinear = n.op_type == "QLinearMatMul";
  const size_t b_in = qlinear ? 3 : 1, azp_in = 2, bzp_in = qlinear ? 5 : 3;
  auto at = b.static_type(n.inputs[0]), yt = b.static_type(n.outputs[0]);
  const Tensor* w = passes::constant_of(b.graph(), n.inputs[b_in]);
  if (!at || !yt || !w || !is_8bit(at->first) || !is_8bit(w->dtype()) || w->rank() != 2) return false;
  const auto& as = at->second;
  const auto& ys = yt->second;
  if (as.size() < 2 || ys.size() != as.size()) return false;
  const int64_t K = as.back(), N = w->dim(1);
  if (w->dim(0) != K || ys.back() != N || shape_numel(ys) == 0) return false;
  for (size_t i = 0; i + 1 < as.size(); ++i)
    if (ys[i] != as[i]) return false;
  auto azp = src_zero_point(b, n, azp_in, at->first);
  auto bzp = zero_points_of(const_input(b, n, bzp_in), w->dtype(), N);
  if (!azp || !bzp) return false;
  Epilogue e;
  e.M = N;
  if (qlinear && !qlinear_epilogue(b, n, at->first, N, false, e)) return false;
  if (yt->first != (qlinear ? e.out : DType::I32)) return false;
  // B's columns as rows of K: one group of N output channels.
  std::vector<int32_t> cols(static_cast<size_t>(K * N));
  {
    auto v = as_ints(*w);
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n2 = 0; n2 < N; ++n2) cols[n2 * K + k] = v[k * N + n2];
  }
  // Unforced, not below 4 rows: a tile computes 6 (oneDNN's split GEMV does less).
  const bool forced = int8_weights_form() == "int16";
  if ((forced || shape_numel(as) / K >= 4) && int16_conv_wanted(cols, w->dtype(), *bzp, N, K, 1, 1, false)) {
    // Rows of K as a 1 x rows image of K channels, the product a 1x1 conv.
    auto c = std::make_unique<Int16Conv>();
    c->shape.cin = K;
    c->shape.cout = N;
    c->shape.w = c->shape.ow = shape_numel(as) / K;
    const IntegerClamp clamp = qlinear ? find_integer_clamp(b, n, e) : IntegerClamp{};
    return add_int16_step(b, n, std::move(c), cols, *bzp, at->first, *azp, b_in, qlinear, clamp, std::move(e), as, ys,
                          false);
  }
  Int8Weights w8 = product_weights(cols, w->dtype(), *bzp, N, K, 1);
  e.mode = w8.mode;
  e.per_group = w8.per_group;
  e.wzp = w8.wzp;

  // A's batch dims folded into its rows: one [rows, K] × [K, N'] product.
  const int64_t rows = shape_numel(as) / K, N2 = w8.per_group;
  Tensor w_s8 = Tensor::from_vector(DType::I8, {N2, K}, w8.rows);
  const bool flip = flip_s8_source(at->first);
  const IntegerClamp clamp = qlinear ? find_integer_clamp(b, n, e) : IntegerClamp{};
  // Unsplit QLinear weights: oneDNN writes the requantized output itself.
  const bool requantized = qlinear && w8.mode == Int8Weights::Plain && onednn_requantizes();
  dnnl::memory::desc a_md = plain_md({rows, K}, flip ? dt::u8 : dnnl_dtype(at->first)),
                     acc_md = requantized ? plain_md({rows, N}, dnnl_dtype(e.out)) : plain_md({rows, N2}, dt::s32);
  dnnl::memory::desc w_user({K, N2}, dt::s8, tag::ba), w_md({K, N2}, dt::s8, tag::any);
  dnnl::primitive_attr attr;
  auto zps = set_src_zero_point(attr, b.engine(), *azp, flip);
  if (requantized) set_requantization(attr, b.engine(), e, clamp, 1 << 1, zps);
  dnnl::matmul::primitive_desc pd;
  try {
    pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, w_md, acc_md), attr, b.engine());
  } catch (const dnnl::error&) {
    return false;
  }
  if (reference_impl(pd.impl_info_str())) return false;
  auto [out_name, out_dt] = claim_epilogue_nodes(b, n, qlinear, clamp, N, ys.size(), ys.size() - 1, e);
  auto step = std::make_unique<Int8Step>();
  step->direct_ = requantized || (e.kind == Epilogue::Int32 && e.mode == Int8Weights::Plain);
  step->prim_ = dnnl::matmul(pd);
  step->weights_ = pack_constant(b.engine(), w_s8, w_user, pd.weights_desc());
  b.consumed_at_plan_time(n.inputs[b_in]);  // read into w_s8 only: the original may go
  step->zero_points_ = std::move(zps);
  step->reads = {b.plain(n.inputs[0])};
  for (auto& z : step->zero_points_)
    if (z.slot >= 0) step->reads.push_back(z.slot);
  for (int s : {e.scale_slot, e.scale2_slot, e.bias_slot})
    if (s >= 0) step->reads.push_back(s);
  step->src_ = dnnl::memory(a_md, b.engine(), nullptr);
  step->dst_ = dnnl::memory(acc_md, b.engine(), nullptr);
  step->rows_ = rows;
  step->epi_ = std::move(e);
  step->columns_.make(step->epi_);
  step->set_fast(K);
  step->writes = {b.define(out_name, out_dt, ys)};
  if (!step->direct_) step->writes.push_back(b.define("", DType::I32, {rows, N2}));
  if (flip) {
    step->flip_ = static_cast<int>(step->writes.size());
    step->writes.push_back(b.define("", DType::U8, {rows, K}));
  }
  step->src_signed_ = at->first == DType::I8 && !flip;
  if (step->epi_.mode == Int8Weights::ZeroPointSums) {
    // Each row one position of K channels.
    step->window_.N = rows;
    step->window_.Cg = K;
    step->sums_ = static_cast<int>(step->writes.size());
    step->writes.push_back(b.define("", DType::I32, {rows}));
    step->writes.push_back(b.define("", DType::I32, {rows}));
  }
  step->label = n.describe() + ": onednn int8 " + std::string(pd.impl_info_str()) +
                mode_note(step->epi_.mode) +
                (step->epi_.kind == Epilogue::Float ? " + float epilogue" : "");
  b.add(std::move(step));
  return true;
}

}  // namespace hodu::cpu
