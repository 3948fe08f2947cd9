// Concat of tensors kept in a blocked layout (SqueezeNet's fire modules concat
// two conv outputs on channels, DenseNet every layer's features; f32, or int8 convs' u8/s8) on that layout:
// no reorder to plain and back around the copy. Where every input and the output
// share one layout whose channels are whole blocks outside the spatial dims
// (nChw8c/16c, one run of bytes per image and input) or innermost (nhwc, one a
// pixel), the concat is those runs copied (ConcatRowsStep); else oneDNN's concat
// primitive (its "simple" kernel copied DenseNet-121's 56x56 concats at 2-3 GB/s:
// 24 % of the model's time at avx2, ORT's concats 4 %).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "engines/cpu/dnnl_common.h"
#include "engines/cpu/row_kernels.h"
#include "passes/graph_utils.h"

namespace hodu::cpu {
namespace {

class BlockedConcatStep : public Step {
 public:
  void run(RunState& rs) override {
    std::unordered_map<int, dnnl::memory> args;
    for (size_t i = 0; i < srcs_.size(); ++i) {
      bind(srcs_[i], rs, reads[i]);
      args[DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i)] = srcs_[i];
    }
    bind(dst_, rs, writes[0]);
    args[DNNL_ARG_DST] = dst_;
    prim_.execute(rs.stream, args);
  }
  dnnl::concat prim_;
  std::vector<dnnl::memory> srcs_;
  dnnl::memory dst_;
};

// The output is `rows_` rows of every input's row, one after the other (bytes). With `affine_`,
// each value is written as x * scale[c] + shift[c] of its channel c (and max(·, 0) with `relu_`):
// the BatchNormalization (and Relu) that alone read the concat, in the same pass (DenseNet's
// norm → relu before each layer: a second read and write of the whole concat otherwise).
class ConcatRowsStep : public Step {
 public:
  void run(RunState& rs) override {
    char* dst = static_cast<char*>(rs.slots[writes[0]].data());
    std::vector<const char*> src(reads.size());
    for (size_t i = 0; i < reads.size(); ++i) src[i] = static_cast<const char*>(rs.slots[reads[i]].data());
    if (pieces_.empty()) {  // many short rows (channels innermost): the rows split over threads
      // A block of rows input by input: each input read as one run (DenseNet's 56x56 concats of
      // up to 32 inputs, a pixel at a time, read 128-byte runs of every input in turn: 1.8x slower).
      const int64_t per = (rows_ + kRowBlocks - 1) / kRowBlocks;
      parallel_for(kRowBlocks, rs.threads, [&](int64_t blk) {
        const int64_t r0 = std::min(rows_, blk * per), r1 = std::min(rows_, r0 + per);
        int64_t at = 0;
        for (size_t i = 0; i < src.size(); ++i) {
          const int64_t w = widths_[i];
          const char* from = src[i] + r0 * w;
          char* to = dst + r0 * dst_row_ + at;
          if (affine_) {
            affine_strided_rows(reinterpret_cast<const float*>(from), w / 4, reinterpret_cast<float*>(to),
                                dst_row_ / 4, r1 - r0, w / 4, scale_.data() + first_[i], shift_.data() + first_[i],
                                relu_);
          } else {
            for (int64_t r = r0; r < r1; ++r, from += w, to += dst_row_) std::memcpy(to, from, static_cast<size_t>(w));
          }
          at += w;
        }
      });
      return;
    }
    parallel_for(static_cast<int64_t>(pieces_.size()), rs.threads, [&](int64_t k) {
      const Piece& p = pieces_[static_cast<size_t>(k)];
      copy(p.input, src[p.input] + p.src, dst + p.dst, p.at, p.bytes);
    });
  }

  // `bytes` of input i from `from` to `to`; `at`: the bytes of the input's row before them.
  void copy(size_t i, const char* from, char* to, int64_t at, int64_t bytes) const {
    if (!affine_) {
      std::memcpy(to, from, static_cast<size_t>(bytes));
      return;
    }
    const float* x = reinterpret_cast<const float*>(from);
    float* y = reinterpret_cast<float*>(to);
    // Element e of the input's row is channel first_[i] + e / (spatial_ * lanes) * lanes + e % lanes
    // (plain: lanes 1; nChw8c/16c: lanes 8/16; nhwc rows are run()'s own loop).
    const int64_t lanes = lanes_;
    const int64_t per_block = spatial_ * lanes;
    const int64_t e0 = at / int64_t{sizeof(float)}, n = bytes / int64_t{sizeof(float)};
    const bool relu = relu_;
    for (int64_t e = e0; e < e0 + n;) {
      const int64_t block = e / per_block;
      if (lanes == 1) {  // plain: one channel for the rest of its plane
        const int64_t end = std::min(e0 + n, (block + 1) * per_block);
        const float a = scale_[first_[i] + block], b = shift_[first_[i] + block];
        for (int64_t j = e; j < end; ++j) {
          const float v = x[j - e0] * a + b;
          y[j - e0] = relu && v < 0 ? 0.0f : v;
        }
        e = end;
        continue;
      }
      // Runs of `lanes` values start on a lane 0 (pieces and rows are whole vectors).
      const float* a = scale_.data() + first_[i] + block * lanes;
      const float* b = shift_.data() + first_[i] + block * lanes;
      const int64_t end = std::min(e0 + n, (block + 1) * per_block);
      affine_lanes(x + (e - e0), y + (e - e0), a, b, (end - e) / lanes, lanes, relu);
      e = end;
    }
  }

  static constexpr int64_t kRowBlocks = 64;
  // Few long rows (channel blocks outside the spatial dims): each row of each input cut into pieces.
  static constexpr int64_t kPieceBytes = int64_t{64} << 10;
  struct Piece {
    size_t input;
    int64_t src, dst, bytes, at;  // at: bytes of the input's row before the piece
  };
  int64_t rows_ = 0, dst_row_ = 0;
  std::vector<int64_t> widths_;  // bytes of a row of each input
  std::vector<Piece> pieces_;
  bool affine_ = false, relu_ = false;
  int64_t spatial_ = 1, lanes_ = 1;  // lanes_ 0: nhwc (a row is one pixel's channels)
  std::vector<int64_t> first_;       // each input's first channel in the output
  std::vector<float> scale_, shift_;
};

// The layouts a channel concat copies as rows: plain, channels innermost, 8 or 16 channel blocks.
std::vector<tag> row_layouts(size_t rank) {
  if (rank == 3) return {tag::abc, tag::acb, tag::aBc8b, tag::aBc16b};
  if (rank == 4) return {tag::abcd, tag::acdb, tag::aBcd8b, tag::aBcd16b};
  if (rank == 5) return {tag::abcde, tag::acdeb, tag::aBcde8b, tag::aBcde16b};
  return {};
}

// The channel concat of `mds` into `ys` as a ConcatRowsStep, when they share one of row_layouts
// (blocked: every input's channels whole blocks); null otherwise.
std::unique_ptr<ConcatRowsStep> concat_rows(const std::vector<dnnl::memory::desc>& mds,
                                            const std::vector<int64_t>& ys, dt type, dnnl::memory::desc& dst_md) {
  const int64_t elem = type == dt::f32 ? 4 : 1;
  for (tag t : row_layouts(ys.size())) {
    const int64_t block = t == tag::aBc8b || t == tag::aBcd8b || t == tag::aBcde8b     ? 8
                          : t == tag::aBc16b || t == tag::aBcd16b || t == tag::aBcde16b ? 16
                                                                                        : 1;
    const bool last = t == tag::acb || t == tag::acdb || t == tag::acdeb;
    bool ok = true;
    for (const auto& md : mds) {
      const dnnl::memory::dims d = md.dims();
      ok = ok && d[1] % block == 0 && md == dnnl::memory::desc(d, type, t);
    }
    if (!ok) continue;
    int64_t spatial = 1;
    for (size_t i = 2; i < ys.size(); ++i) spatial *= ys[i];
    auto step = std::make_unique<ConcatRowsStep>();
    step->rows_ = last ? ys[0] * spatial : ys[0];
    for (const auto& md : mds) step->widths_.push_back(md.dims()[1] * (last ? 1 : spatial) * elem);
    for (int64_t w : step->widths_) step->dst_row_ += w;
    if (!last) {
      for (int64_t r = 0; r < step->rows_; ++r) {
        int64_t at = r * step->dst_row_;
        for (size_t i = 0; i < mds.size(); ++i) {
          const int64_t w = step->widths_[i];
          for (int64_t o = 0; o < w; o += ConcatRowsStep::kPieceBytes) {
            const int64_t bytes = std::min(ConcatRowsStep::kPieceBytes, w - o);
            step->pieces_.push_back({i, r * w + o, at + o, bytes, o});
          }
          at += w;
        }
      }
    }
    step->spatial_ = last ? 1 : spatial;
    step->lanes_ = last ? 0 : block;
    int64_t first = 0;
    for (const auto& md : mds) {
      step->first_.push_back(first);
      first += md.dims()[1];
    }
    dst_md = dnnl::memory::desc(to_dims(ys), type, t);
    return step;
  }
  return nullptr;
}

// The node that alone reads `v` (not a graph output), or null.
const Node* sole_reader(const PlanBuilder& b, const std::string& v) {
  const auto& readers = b.readers(v);
  if (readers.size() != 1 || b.graph().output(v)) return nullptr;
  return &b.graph().nodes[readers[0]];
}

const Node* sole_relu_after(const PlanBuilder& b, const std::string& v) {
  const Node* r = sole_reader(b, v);
  return r && r->domain.empty() && r->op_type == "Relu" && r->inputs.size() == 1 && r->outputs.size() == 1 ? r
                                                                                                         : nullptr;
}

// An inference BatchNormalization of `channels` channels with constant statistics and parameters
// that alone reads `v`: its per-channel scale and shift; null if there is none.
const Node* normalization_after(const PlanBuilder& b, const std::string& v, int64_t channels, std::vector<float>& scale,
                                std::vector<float>& shift) {
  const Node* n = sole_reader(b, v);
  if (!n || !n->domain.empty() || n->op_type != "BatchNormalization" || n->inputs.size() < 5 ||
      n->inputs[0] != v || n->get_int("training_mode", 0))
    return nullptr;
  for (size_t i = 1; i < n->outputs.size(); ++i)
    if (n->has_output(i)) return nullptr;
  std::vector<std::vector<double>> p;  // gamma, beta, mean, var
  for (size_t i = 1; i < 5; ++i) {
    const Tensor* t = passes::constant_of(b.graph(), n->inputs[i]);
    if (!t || t->numel() != channels) return nullptr;
    p.push_back(t->to_doubles());
  }
  const double eps = n->get_float("epsilon", 1e-5f);
  scale.resize(static_cast<size_t>(channels));
  shift.resize(static_cast<size_t>(channels));
  for (size_t c = 0; c < scale.size(); ++c) {
    // As oneDNN's batch normalization computes it: (x - mean) * (gamma / sqrt(var + eps)) + beta.
    const float a = static_cast<float>(p[0][c] / std::sqrt(static_cast<float>(p[3][c]) + static_cast<float>(eps)));
    scale[c] = a;
    shift[c] = static_cast<float>(p[1][c]) - static_cast<float>(p[2][c]) * a;
  }
  return n;
}

}  // namespace

bool make_blocked_concat(PlanBuilder& b, const Node& n) {
  if (!n.domain.empty() || n.op_type != "Concat" || n.inputs.size() < 2) return false;
  auto y = b.static_type(n.outputs[0]);
  // f32, or the bytes of int8 convs' outputs (quantized fire modules: copies only).
  if (!y || (y->first != DType::F32 && y->first != DType::U8 && y->first != DType::I8)) return false;
  const DType type = y->first;
  const auto& ys = y->second;
  int64_t axis = n.get_int("axis", 0);
  if (axis < 0) axis += static_cast<int64_t>(ys.size());
  // Only on channels of blocked inputs (conv outputs); a plain concat stays a plain copy.
  if (axis != 1 || ys.size() < 3) return false;
  const Slot& first = b.at(b.slot(n.inputs[0]));
  if (!first.blocked) return false;
  std::vector<int> reads;
  std::vector<dnnl::memory::desc> mds;
  for (const auto& in : n.inputs) {
    int s = b.slot(in);
    const Slot& sl = b.at(s);
    if (sl.dtype != type || !sl.is_static || sl.shape.size() != ys.size()) return false;
    // Mixed plain and blocked inputs are left to the plain Concat.
    if (!sl.blocked) return false;
    mds.push_back(sl.md);
    reads.push_back(s);
  }
  dnnl::memory::desc rows_md;
  if (auto rows = concat_rows(mds, ys, dnnl_dtype(type), rows_md)) {
    std::string out = n.outputs[0];
    const Node* bn = type == DType::F32 ? normalization_after(b, out, ys[1], rows->scale_, rows->shift_) : nullptr;
    const Node* relu = bn ? sole_relu_after(b, bn->outputs[0]) : nullptr;
    if (bn) {
      b.claim(*bn);
      rows->affine_ = true;
      out = bn->outputs[0];
    }
    if (relu) {
      b.claim(*relu);
      rows->relu_ = true;
      out = relu->outputs[0];
    }
    rows->reads = reads;
    rows->writes = {b.define(out, type, ys, rows_md)};
    rows->label = n.describe() + ": cpu blocked concat" +
                  (bn ? relu ? ", batch normalization and relu fused" : ", batch normalization fused" : "");
    b.add(std::move(rows));
    return true;
  }
  dnnl::concat::primitive_desc pd;
  try {
    pd = dnnl::concat::primitive_desc(dnnl::memory::desc(to_dims(ys), dnnl_dtype(type), tag::any), static_cast<int>(axis),
                                      mds, b.engine());
  } catch (const dnnl::error&) {
    return false;
  }
  auto step = std::make_unique<BlockedConcatStep>();
  step->prim_ = dnnl::concat(pd);
  for (const auto& md : mds) step->srcs_.emplace_back(md, b.engine(), nullptr);
  step->dst_ = dnnl::memory(pd.dst_desc(), b.engine(), nullptr);
  step->reads = reads;
  step->writes = {b.define(n.outputs[0], type, ys, pd.dst_desc())};
  step->label = n.describe() + ": onednn concat " + std::string(pd.impl_info_str());
  b.add(std::move(step));
  return true;
}

}  // namespace hodu::cpu
