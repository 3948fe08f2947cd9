// MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool on oneDNN pooling,
// reading the input in whatever layout its producer left it (blocked after a conv).
// A 2-D MaxPool over a channel-blocked input runs hodu's own loop (BlockedMaxPoolStep), a
// MaxPool with its Indices output a plain loop (MaxPoolIndicesStep).
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "engines/cpu/dnnl_common.h"
#include "engines/cpu/row_kernels.h"
#include "kernels/cpu/blocked_layout.h"
#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/vector_math.h"

namespace hodu::cpu {
namespace {

class PoolStep : public Step {
 public:
  void run(RunState& rs) override {
    bind(src_, rs, reads[0]);
    bind(dst_, rs, writes[0]);
    std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, src_}, {DNNL_ARG_DST, dst_}};
    if (ws_) args[DNNL_ARG_WORKSPACE] = ws_;
    prim_.execute(rs.stream, args);
  }
  dnnl::pooling_v2_forward prim_;
  dnnl::memory src_, dst_, ws_;
};

// oneDNN 2.6's AVX2 max pooling took 0.87 ms for SqueezeNet's [1, 64, 111, 111] 3x3/2
// (4.5 ns an output); this loop is a few vector maxes per output vector.
class BlockedMaxPoolStep : public Step {
 public:
  void run(RunState& rs) override {
    const float* x = static_cast<const float*>(rs.slots[reads[0]].data());
    float* y = static_cast<float*>(rs.slots[writes[0]].data());
    parallel_for(rows_, rs.threads, [&](int64_t r) { max_pool_blocked_rows(x, y, p_, r, r + 1); });
  }
  BlockedPool2d p_{};
  int64_t rows_ = 0;
};

// MaxPool with its Indices output (torch's max_pool2d(return_indices=True)): oneDNN gives no
// indices, so a plain-layout loop over 1-3 spatial dims. As the interpreter: NaN entries are
// skipped, the first of equal maxima wins, an index is the flat row-major offset in X.
class MaxPoolIndicesStep : public Step {
 public:
  void run(RunState& rs) override {
    const float* x = static_cast<const float*>(rs.slots[reads[0]].data());
    float* y = static_cast<float*>(rs.slots[writes[0]].data());
    int64_t* ind = static_cast<int64_t*>(rs.slots[writes[1]].data());
    const int64_t ins = in_[0] * in_[1] * in_[2], outs = out_[0] * out_[1] * out_[2];
    parallel_for(planes_, rs.threads, [&](int64_t q) {
      const float* xp = x + q * ins;
      for (int64_t o = 0; o < outs; ++o) {
        const int64_t o2 = o % out_[2], o1 = (o / out_[2]) % out_[1], o0 = o / (out_[2] * out_[1]);
        float best = 0;
        int64_t best_at = -1;
        for (int64_t k0 = 0; k0 < k_[0]; ++k0) {
          const int64_t i0 = o0 * s_[0] - p_[0] + k0 * d_[0];
          if (i0 < 0 || i0 >= in_[0]) continue;
          for (int64_t k1 = 0; k1 < k_[1]; ++k1) {
            const int64_t i1 = o1 * s_[1] - p_[1] + k1 * d_[1];
            if (i1 < 0 || i1 >= in_[1]) continue;
            for (int64_t k2 = 0; k2 < k_[2]; ++k2) {
              const int64_t i2 = o2 * s_[2] - p_[2] + k2 * d_[2];
              if (i2 < 0 || i2 >= in_[2]) continue;
              const int64_t off = (i0 * in_[1] + i1) * in_[2] + i2;
              const float v = xp[off];
              if (std::isnan(v)) continue;
              if (best_at < 0 || v > best) {
                best = v;
                best_at = off;
              }
            }
          }
        }
        y[q * outs + o] = best_at < 0 ? std::numeric_limits<float>::quiet_NaN() : best;
        ind[q * outs + o] = best_at < 0 ? -1 : q * ins + best_at;
      }
    });
  }
  // Spatial dims padded at the front to three (size 1, kernel 1).
  int64_t in_[3] = {1, 1, 1}, out_[3] = {1, 1, 1}, k_[3] = {1, 1, 1}, s_[3] = {1, 1, 1}, d_[3] = {1, 1, 1},
          p_[3] = {0, 0, 0};
  int64_t planes_ = 0;
};

// GlobalAveragePool (or ReduceMean over H and W) of a channel-blocked or nhwc tensor: one pass
// over each image's blocks (or pixels), the means written in the plain layout (what the squeeze-excite GEMVs and
// the classifier read). oneDNN 2.6's AVX2 global pooling took EfficientNet-B0's 16 pools 271 µs
// a run, its AVX-512 one 151, both behind a reorder where a ReduceMean read them (MnasNet).
class BlockedMeanStep : public Step {
 public:
  void run(RunState& rs) override {
    const float* x = static_cast<const float*>(rs.slots[reads[0]].data());
    float* y = static_cast<float*>(rs.slots[writes[0]].data());
    float* means = whole_ ? y : padded_.data();
    const int64_t lanes = nhwc_ ? 16 : block_;  // a task's channels
    const int64_t grain = std::max<int64_t>(1, 16384 / (pixels_ * lanes));
    const int threads = rows_ * pixels_ * lanes >= 65536 ? rs.threads : 1;
    parallel_for((rows_ + grain - 1) / grain, threads, [&](int64_t c) {
      const int64_t begin = c * grain, end = std::min(rows_, (c + 1) * grain);
      if (nhwc_)
        nhwc_means(x, means, pixels_, channels_, begin, end);
      else
        blocked_means(x, means, pixels_, block_, begin, end);
    });
    if (!whole_)  // the blocks' padded channels dropped
      for (int64_t n = 0; n < batch_; ++n)
        std::copy_n(means + n * blocks_ * block_, channels_, y + n * channels_);
  }
  int64_t rows_ = 0, pixels_ = 0, block_ = 0, batch_ = 0, blocks_ = 0, channels_ = 0;
  bool whole_ = true;  // channels a multiple of the block (or nhwc): the means go straight to y
  bool nhwc_ = false;
  std::vector<float> padded_;
};

// y = mean of x [N, C, H, W] over H, W when x is channel-blocked or nhwc: GlobalAveragePool, or
// ReduceMean with axes {2, 3} (either sign) given as a constant input.
bool make_blocked_mean(PlanBuilder& b, const Node& n) {
  const bool gap = n.op_type == "GlobalAveragePool";
  if (!gap && n.op_type != "ReduceMean") return false;
  auto x = b.static_type(n.inputs[0]), y = b.static_type(n.outputs[0]);
  if (!x || !y || x->first != DType::F32 || x->second.size() != 4 || !b.has_slot(n.inputs[0])) return false;
  const std::vector<int64_t>& xs = x->second;
  if (!gap) {
    if (!n.has_input(1) || n.get_int("noop_with_empty_axes", 0) != 0) return false;
    const Tensor* axes = b.graph().initializer(n.inputs[1]);
    if (!axes || axes->numel() != 2) return false;
    std::vector<int64_t> a = axes->to_int64s();
    for (auto& v : a) v = v < 0 ? v + 4 : v;
    std::sort(a.begin(), a.end());
    if (a != std::vector<int64_t>{2, 3}) return false;
  }
  const int xslot = b.slot(n.inputs[0]);
  const dnnl::memory::desc md = layout_md(b.at(xslot));
  const bool nhwc = md == dnnl::memory::desc(to_dims(xs), dt::f32, tag::nhwc) && xs[2] * xs[3] > 1;
  const int64_t block = nhwc ? xs[1] : onednn::channel_block(md, to_dims(xs));
  if (!nhwc && block != 8 && block != 16) return false;
  auto step = std::make_unique<BlockedMeanStep>();
  step->block_ = block;
  step->batch_ = xs[0];
  step->channels_ = xs[1];
  step->blocks_ = (xs[1] + block - 1) / block;
  step->nhwc_ = nhwc;
  step->rows_ = nhwc ? xs[0] * ((xs[1] + 15) / 16) : xs[0] * step->blocks_;
  step->pixels_ = xs[2] * xs[3];
  step->whole_ = xs[1] % block == 0;
  if (!step->whole_) step->padded_.assign(static_cast<size_t>(step->rows_ * block), 0.0f);
  step->reads = {xslot};
  step->writes = {b.define(n.outputs[0], DType::F32, y->second)};
  step->label = n.describe() + (nhwc ? ": cpu nhwc mean" : ": cpu blocked mean");
  b.add(std::move(step));
  return true;
}

bool make_max_pool_indices(PlanBuilder& b, const Node& n) {
  auto x = b.static_type(n.inputs[0]), y = b.static_type(n.outputs[0]), ind = b.static_type(n.outputs[1]);
  if (!x || !y || !ind || x->first != DType::F32 || ind->first != DType::I64) return false;
  const auto &xs = x->second, &ys = y->second;
  const int64_t spatial = static_cast<int64_t>(xs.size()) - 2;
  auto win = pool_window(n, xs, ys);  // nullopt for storage_order 1 (column-major indices)
  if (!win || spatial < 1 || spatial > 3 || ind->second != ys) return false;
  auto step = std::make_unique<MaxPoolIndicesStep>();
  const int64_t lead = 3 - spatial;
  for (int64_t i = 0; i < spatial; ++i) {
    step->in_[lead + i] = xs[2 + i];
    step->out_[lead + i] = ys[2 + i];
    step->k_[lead + i] = win->kernel[i];
    step->s_[lead + i] = win->strides[i];
    step->d_[lead + i] = win->dilations[i] + 1;  // oneDNN's convention: 0 is dense
    step->p_[lead + i] = win->pad_l[i];
  }
  step->planes_ = xs[0] * xs[1];
  step->reads = {b.plain(n.inputs[0])};
  step->writes = {b.define(n.outputs[0], DType::F32, ys), b.define(n.outputs[1], DType::I64, ys)};
  step->label = n.describe() + ": cpu max pool with indices";
  b.add(std::move(step));
  return true;
}

}  // namespace

std::optional<PoolWindow> pool_window(const Node& n, const std::vector<int64_t>& xs, const std::vector<int64_t>& ys) {
  const std::string& op = n.op_type;
  bool global = op == "GlobalAveragePool" || op == "GlobalMaxPool";
  int64_t spatial = static_cast<int64_t>(xs.size()) - 2;
  if (spatial < 1 || spatial > 3 || ys.size() != xs.size()) return std::nullopt;
  PoolWindow w;
  std::vector<int64_t> dil(spatial, 1), pads(2 * spatial, 0);
  w.strides.assign(spatial, 1);
  if (global) {
    w.kernel.assign(xs.begin() + 2, xs.end());
  } else {
    w.kernel = n.get_ints("kernel_shape");
    w.strides = n.get_ints("strides", w.strides);
    dil = n.get_ints("dilations", dil);
    pads = n.get_ints("pads", pads);
    if (static_cast<int64_t>(w.kernel.size()) != spatial || static_cast<int64_t>(w.strides.size()) != spatial ||
        static_cast<int64_t>(dil.size()) != spatial || static_cast<int64_t>(pads.size()) != 2 * spatial)
      return std::nullopt;
    if (n.get_int("storage_order", 0) != 0) return std::nullopt;
  }
  std::string auto_pad = global ? "VALID" : n.get_string("auto_pad", "NOTSET");
  bool max = op == "MaxPool" || op == "GlobalMaxPool" || op == "MaxPoolGrad";
  bool include_pad = !max && !global && n.get_int("count_include_pad", 0) != 0;
  w.pad_l.resize(spatial);
  w.pad_r.resize(spatial);
  w.dilations.resize(spatial);
  for (int64_t i = 0; i < spatial; ++i) {
    int64_t in = xs[2 + i], out = ys[2 + i], ext = (w.kernel[i] - 1) * dil[i] + 1;
    std::tie(w.pad_l[i], w.pad_r[i]) = spatial_pads(auto_pad, in, out, w.strides[i], ext, pads[i], pads[i + spatial]);
    // ceil_mode: a last partial window needs more right padding than given.
    if ((in + w.pad_l[i] + w.pad_r[i] - ext) / w.strides[i] + 1 != out) {
      if (include_pad) return std::nullopt;  // the extra padding must not count in the average
      w.pad_r[i] = (out - 1) * w.strides[i] + ext - in - w.pad_l[i];
      if (w.pad_r[i] < 0 || (in + w.pad_l[i] + w.pad_r[i] - ext) / w.strides[i] + 1 != out) return std::nullopt;
    }
    w.dilations[i] = dil[i] - 1;
  }
  w.alg = max ? dnnl::algorithm::pooling_max
              : include_pad ? dnnl::algorithm::pooling_avg_include_padding
                            : dnnl::algorithm::pooling_avg_exclude_padding;
  return w;
}

// MaxPool over 2-D windows of a plain NCHW tensor, one (image, channel) plane per task: u8/s8
// (ONNX Runtime's QOperator models pool the quantized activations; oneDNN 2.6 has only its
// reference kernel for plain int8 pooling, 2.4x slower than the interpreter's on ResNet-18's
// 112x112 maxpool) and f32 where oneDNN has no jit kernel for the plain layout (below AVX-512:
// its simple_nchw took 16 ms for quantized SqueezeNet's first 3x3/2 pool, 64x111x111). Each
// output row is the max over the window's (kh, kw) of a strided run of an input row, the
// runs' bounds computed once: the inner loop has no branch. A max is exact: the interpreter's
// values (a NaN input is skipped, as by its kernel).
// The max's start: -inf for floats (a window of -inf gives -inf), the type's least otherwise.
template <typename T>
constexpr T lowest_of() {
  return std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::lowest();
}

template <typename T>
void max_pool_planes(const T* x, T* y, int64_t planes, const int64_t* p, int threads) {
  const int64_t H = p[0], W = p[1], OH = p[2], OW = p[3], KH = p[4], KW = p[5], SH = p[6], SW = p[7], PT = p[8],
                PL = p[9], DH = p[10], DW = p[11];
  // Output columns [lo[kw], hi[kw]) read column ow * SW - PL + kw * DW inside the row.
  std::vector<int64_t> lo(static_cast<size_t>(KW)), hi(static_cast<size_t>(KW));
  for (int64_t kw = 0; kw < KW; ++kw) {
    const int64_t off = kw * DW - PL;  // iw = ow * SW + off
    lo[kw] = off >= 0 ? 0 : std::min(OW, (-off + SW - 1) / SW);
    hi[kw] = W - 1 - off < 0 ? 0 : std::min(OW, (W - 1 - off) / SW + 1);
  }
  parallel_for(planes, threads, [&](int64_t q) {
    const T* xp = x + q * H * W;
    T* yp = y + q * OH * OW;
    for (int64_t oh = 0; oh < OH; ++oh) {
      T* yr = yp + oh * OW;
      std::fill_n(yr, OW, lowest_of<T>());
      for (int64_t kh = 0; kh < KH; ++kh) {
        const int64_t ih = oh * SH - PT + kh * DH;
        if (ih < 0 || ih >= H) continue;
        for (int64_t kw = 0; kw < KW; ++kw) {
          const T* xr = xp + ih * W + kw * DW - PL;
          for (int64_t ow = lo[kw]; ow < hi[kw]; ++ow) yr[ow] = std::max(yr[ow], xr[ow * SW]);
        }
      }
    }
  });
}

// The same MaxPool over a channels-last (nhwc) tensor, the output channels-last too: an int8
// conv's output (the next int8 conv's layout; quantized ResNet-18's 112x112 pool: 1.6 ms planar
// after a 0.2 ms reorder), or an f32 one from AVX-512's brgemm convs (oneDNN 2.6's jit kernel
// took 167 us for SqueezeNet's first 3x3/2 pool, 64 x 111 x 111, ONNX Runtime's 114). Each
// output pixel is the lane-wise max of its window's pixels, output rows [r0, r1) of the
// N * OH. The body is inlined into one function per ISA, so the channel loop is vectorized
// for the ISA the cap allows (an out-of-line max per window pixel cost more than the maxes).
template <typename T>
__attribute__((always_inline)) inline void max_pool_nhwc_rows(const T* __restrict x, T* __restrict y, int64_t C,
                                                               const int64_t* p, int64_t r0, int64_t r1) {
  const int64_t H = p[0], W = p[1], OH = p[2], OW = p[3], KH = p[4], KW = p[5], SH = p[6], SW = p[7], PT = p[8],
                PL = p[9], DH = p[10], DW = p[11];
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t n = r / OH, oh = r % OH;
    for (int64_t ow = 0; ow < OW; ++ow) {
      T* __restrict yo = y + (r * OW + ow) * C;
      for (int64_t c = 0; c < C; ++c) yo[c] = lowest_of<T>();
      for (int64_t kh = 0; kh < KH; ++kh) {
        const int64_t ih = oh * SH - PT + kh * DH;
        if (ih < 0 || ih >= H) continue;
        for (int64_t kw = 0; kw < KW; ++kw) {
          const int64_t iw = ow * SW - PL + kw * DW;
          if (iw < 0 || iw >= W) continue;
          const T* __restrict xi = x + ((n * H + ih) * W + iw) * C;
          for (int64_t c = 0; c < C; ++c) yo[c] = xi[c] > yo[c] ? xi[c] : yo[c];  // a NaN is skipped
        }
      }
    }
  }
}

// One copy of the rows' loop per ISA (isa_dispatch.h, under HODU_MAX_ISA), per element type.
#define HODU_MAX_POOL_NHWC(T, name)                                                                          \
  HODU_ISA_BODY void name##_body(const T* x, T* y, int64_t C, const int64_t* p, int64_t r0, int64_t r1) { \
    max_pool_nhwc_rows(x, y, C, p, r0, r1);                                                               \
  }                                                                                                       \
  HODU_ISA_VARIANTS(void, name, (const T* x, T* y, int64_t C, const int64_t* p, int64_t r0, int64_t r1),  \
                    (x, y, C, p, r0, r1))
HODU_MAX_POOL_NHWC(float, max_pool_nhwc_rows_isa)
HODU_MAX_POOL_NHWC(int8_t, max_pool_nhwc_rows_isa)
HODU_MAX_POOL_NHWC(uint8_t, max_pool_nhwc_rows_isa)
#undef HODU_MAX_POOL_NHWC

template <typename T>
void max_pool_nhwc(const T* x, T* y, int64_t N, int64_t C, const int64_t* p, int threads) {
  parallel_for(N * p[2], threads, [&](int64_t r) { max_pool_nhwc_rows_isa(x, y, C, p, r, r + 1); });
}

class PlaneMaxPoolStep : public Step {
 public:
  void run(RunState& rs) override {
    // Raw bytes: a slot in a oneDNN layout (an nhwc conv output) holds no typed tensor.
    const void* x = rs.slots[reads[0]].data();
    void* y = rs.slots[writes[0]].data();
    const int th = planes_ * p_[2] * p_[3] >= (1 << 14) ? rs.threads : 1;
    switch (dtype_) {
      case DType::I8: return pool(static_cast<const int8_t*>(x), static_cast<int8_t*>(y), th);
      case DType::U8: return pool(static_cast<const uint8_t*>(x), static_cast<uint8_t*>(y), th);
      default: return pool(static_cast<const float*>(x), static_cast<float*>(y), th);
    }
  }
  template <typename T>
  void pool(const T* x, T* y, int th) const {
    if (nhwc_)
      max_pool_nhwc(x, y, planes_ / channels_, channels_, p_.data(), th);
    else
      max_pool_planes(x, y, planes_, p_.data(), th);
  }
  DType dtype_ = DType::F32;
  int64_t planes_ = 0;
  bool nhwc_ = false;  // channels-last in and out (max_pool_nhwc)
  int64_t channels_ = 1;
  std::array<int64_t, 12> p_{};  // H W OH OW KH KW SH SW pad_top pad_left dil_h dil_w
};

// MaxPool on PlaneMaxPoolStep over a plain input (u8/s8 always; f32 where oneDNN's kernel for
// the plain layout is a reference one).
bool make_plane_max_pool(PlanBuilder& b, const Node& n, const std::pair<DType, std::vector<int64_t>>& x,
                         const std::pair<DType, std::vector<int64_t>>& y) {
  const auto& xs = x.second;
  const auto& ys = y.second;
  if (xs.size() != 4 || ys.size() != 4 || y.first != x.first || ys[0] != xs[0] || ys[1] != xs[1]) return false;
  auto win = pool_window(n, xs, ys);
  if (!win || win->alg != dnnl::algorithm::pooling_max) return false;
  auto step = std::make_unique<PlaneMaxPoolStep>();
  step->dtype_ = x.first;
  step->planes_ = xs[0] * xs[1];
  step->p_ = {xs[2],          xs[3],          ys[2],          ys[3],           win->kernel[0],       win->kernel[1],
              win->strides[0], win->strides[1], win->pad_l[0], win->pad_l[1], win->dilations[0] + 1, win->dilations[1] + 1};
  // An input the plan holds channels-last stays so.
  const dnnl::memory::desc nhwc_in(to_dims(xs), dnnl_dtype(x.first), dnnl::memory::format_tag::nhwc);
  step->nhwc_ = b.has_slot(n.inputs[0]) && layout_md(b.at(b.slot(n.inputs[0]))) == nhwc_in;
  step->channels_ = xs[1];
  if (step->nhwc_) {
    step->reads = {b.as_layout(n.inputs[0], nhwc_in)};
    step->writes = {
        b.define(n.outputs[0], x.first, ys, dnnl::memory::desc(to_dims(ys), dnnl_dtype(x.first), dnnl::memory::format_tag::nhwc))};
  } else {
    step->reads = {b.plain(n.inputs[0])};
    step->writes = {b.define(n.outputs[0], x.first, ys)};
  }
  const bool f32 = x.first == DType::F32;
  step->label = n.describe() + (f32 ? ": cpu" : ": cpu int8") +
                (step->nhwc_ ? " max pool (nhwc)" : f32 ? " plain max pool" : " max pool");
  b.add(std::move(step));
  return true;
}

bool make_pool(PlanBuilder& b, const Node& n) {
  if (!n.domain.empty()) return false;
  const std::string& op = n.op_type;
  bool global = op == "GlobalAveragePool" || op == "GlobalMaxPool";
  if ((op == "GlobalAveragePool" || op == "ReduceMean") && make_blocked_mean(b, n)) return true;
  if (!global && op != "MaxPool" && op != "AveragePool") return false;
  if (n.outputs.size() > 1 && !n.outputs[1].empty()) return op == "MaxPool" && make_max_pool_indices(b, n);
  auto x = b.static_type(n.inputs[0]), y = b.static_type(n.outputs[0]);
  if (x && y && op == "MaxPool" && (x->first == DType::U8 || x->first == DType::I8)) return make_plane_max_pool(b, n, *x, *y);
  if (!x || !y || x->first != DType::F32) return false;
  const auto& xs = x->second;
  const auto& ys = y->second;
  int64_t spatial = static_cast<int64_t>(xs.size()) - 2;
  if (spatial < 1 || spatial > 3 || ys.size() != xs.size()) return false;
  auto win = pool_window(n, xs, ys);
  if (!win) return false;
  const std::vector<int64_t>& kernel = win->kernel;
  const std::vector<int64_t>& strides = win->strides;
  const dnnl::memory::dims &pl = win->pad_l, &pr = win->pad_r, &dd = win->dilations;
  const bool max = win->alg == dnnl::algorithm::pooling_max;
  dnnl::memory::desc src_md = layout_md(b.at(b.slot(n.inputs[0])));
  int64_t block = onednn::channel_block(src_md, to_dims(xs));
  if (max && !global && spatial == 2 && dd[0] == 0 && dd[1] == 0 && block > 0 && pl[0] < kernel[0] &&
      pl[1] < kernel[1]) {
    auto step = std::make_unique<BlockedMaxPoolStep>();
    step->p_ = {block, xs[2], xs[3], ys[2], ys[3], kernel[0], kernel[1], strides[0], strides[1], pl[0], pl[1]};
    step->rows_ = ys[0] * ((ys[1] + block - 1) / block) * ys[2];  // images x channel blocks x output rows
    step->reads = {b.slot(n.inputs[0])};
    step->writes = {b.define(n.outputs[0], DType::F32, ys, onednn::channel_blocked_md(to_dims(ys), block))};
    step->label = n.describe() + ": cpu blocked max pool";
    b.add(std::move(step));
    return true;
  }
  // A channels-last input (AVX-512's brgemm convs write it): hodu's loop, a few vector maxes
  // per output pixel. oneDNN 2.6's jit kernel took 167 us for SqueezeNet's first 3x3/2 pool
  // (64 x 111 x 111, nhwc) where ONNX Runtime's channel-blocked one takes 114.
  if (max && !global && spatial == 2 && src_md == dnnl::memory::desc(to_dims(xs), dt::f32, tag::nhwc) &&
      make_plane_max_pool(b, n, *x, *y))
    return true;
  dnnl::memory::desc dst_md(to_dims(ys), dt::f32, tag::any);
  dnnl::pooling_v2_forward::primitive_desc pd;
  try {
    dnnl::pooling_v2_forward::desc d(dnnl::prop_kind::forward_inference, win->alg, src_md, dst_md, to_dims(strides),
                                     to_dims(kernel), dd, pl, pr);
    pd = dnnl::pooling_v2_forward::primitive_desc(d, b.engine());
  } catch (const dnnl::error&) {
    return false;
  }
  std::string impl = pd.impl_info_str();
  const bool slow_plain = src_md == plain_md(xs) && (reference_impl(impl.c_str()) || impl.rfind("simple_nchw", 0) == 0);
  if (max && !global && spatial == 2 && slow_plain && make_plane_max_pool(b, n, *x, *y)) return true;
  // Any other pool of a plain input where oneDNN has only its reference kernels for that layout
  // (below AVX-512): the input reordered to channel blocks, which its jit kernels take. An
  // AveragePool of Inception v3's 768 x 17 x 17 ran 4.7 ms on simple_nchw at AVX2, 0.3 with the reorder.
  int read = b.slot(n.inputs[0]);
  if (slow_plain && b.blocked_layouts() && spatial == 2) {
    const int64_t want = vector_math::cpu_isa() == vector_math::Isa::Avx512 ? 16 : 8;
    try {
      const auto blocked = onednn::channel_blocked_md(to_dims(xs), want);
      dnnl::pooling_v2_forward::desc d(dnnl::prop_kind::forward_inference, win->alg, blocked, dst_md, to_dims(strides),
                                       to_dims(kernel), dd, pl, pr);
      dnnl::pooling_v2_forward::primitive_desc jit(d, b.engine());
      if (std::string(jit.impl_info_str()).rfind("jit", 0) == 0) {
        pd = jit;
        src_md = blocked;
        read = b.as_layout(n.inputs[0], blocked);
        impl = pd.impl_info_str();
      }
    } catch (const dnnl::error&) {
    }
  }
  auto step = std::make_unique<PoolStep>();
  step->prim_ = dnnl::pooling_v2_forward(pd);
  step->reads = {read};
  step->src_ = dnnl::memory(src_md, b.engine(), nullptr);
  step->writes = {b.define(n.outputs[0], DType::F32, ys, pd.dst_desc())};
  step->dst_ = dnnl::memory(pd.dst_desc(), b.engine(), nullptr);
  if (pd.workspace_desc().get_size() > 0) step->ws_ = dnnl::memory(pd.workspace_desc(), b.engine());
  step->label = n.describe() + ": onednn " + impl;
  b.add(std::move(step));
  return true;
}

}  // namespace hodu::cpu
