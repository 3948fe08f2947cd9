// MatMul, Gemm, hodu.FusedMatMul and hodu.FusedGemm on oneDNN's matmul:
// constant B is packed once per plan (alpha folded in), a constant bias/C is
// the primitive's bias (beta folded in), a variable C a binary post-op, and
// the activation eltwise post-ops; a residual Z (FusedMatMul/FusedGemm input 3)
// is dst's starting value under a sum post-op. Where oneDNN has only its sgemm (no AVX-512),
// or the product has at most 4 rows (onednn::kMaxConvRows),
// a 2-D product with constant B runs as oneDNN's 1x1 convolution over channels-last rows
// (weights packed once: kernels/cpu/matmul_as_conv.h; at 2+ threads in column chunks the threads
// take in turn: make_column_chunks), any other 2-D product as fixed tiles, one sgemm
// call each (onednn::TiledMatMul). A few rows against a constant [N, K] B (Gemm's transB)
// read B where it lies, row by row (StreamGemvStep).
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "core/error.h"
#include "engines/cpu/dnnl_common.h"
#include "engines/cpu/row_kernels.h"
#include "kernels/cpu/matmul_as_conv.h"
#include "kernels/cpu/tiled_matmul.h"
#include "passes/graph_utils.h"

namespace hodu::cpu {
namespace {

class MatMulStep : public Step {
 public:
  void run(RunState& rs) override {
    bind(a_, rs, reads[0]);
    bind(dst_, rs, writes[0]);
    if (z_slot_ >= 0) {
      // The residual enters dst first; the sum post-op adds the product onto it.
      const void* z = rs.slots[z_slot_].data();
      if (z != dst_.get_data_handle()) std::memcpy(dst_.get_data_handle(), z, z_bytes_);
    }
    if (!chunks_.empty()) {
      run_chunks(rs);
      return;
    }
    std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, a_}, {DNNL_ARG_DST, dst_}};
    if (b_const_) {
      args[DNNL_ARG_WEIGHTS] = packed_b_.mem;
    } else {
      bind(b_, rs, reads[1]);
      args[DNNL_ARG_WEIGHTS] = b_;
    }
    if (has_bias_) args[DNNL_ARG_BIAS] = bias_.mem;
    if (c_slot_ >= 0) {
      bind(c_, rs, c_slot_);
      args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(c_post_op_) | DNNL_ARG_SRC_1] = c_;
    }
    if (conv_) {
      conv_.execute(rs.stream, args);
      return;
    }
    if (tiled_) {
      auto handle = [](const dnnl::memory& m) { return static_cast<float*>(m.get_data_handle()); };
      tiled_->run(rs.threads, handle(a_), handle(args[DNNL_ARG_WEIGHTS]), has_bias_ ? handle(bias_.mem) : nullptr,
                  c_slot_ >= 0 ? handle(c_) : nullptr, handle(dst_));
      return;
    }
    prim_.execute(rs.stream, args);
  }

  // The 1x1 conv's columns in chunks (make_column_chunks): each thread takes the next chunk left, runs
  // its primitive on one thread into its own [rows, chunk] buffer and copies that into dst's
  // columns (the residual's columns copied in first: the sum post-op adds onto them).
  void run_chunks(RunState& rs) {
    const float* a = static_cast<const float*>(a_.get_data_handle());
    float* y = static_cast<float*>(dst_.get_data_handle());
    const int64_t chunks = static_cast<int64_t>(chunks_.size());
    std::atomic<int64_t> next{0};
    const int threads = static_cast<int>(std::min<int64_t>({rs.threads, chunks, static_cast<int64_t>(lanes_.size())}));
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
      const int tid = omp_get_thread_num();
      Lane& lane = lanes_[static_cast<size_t>(tid)];
      lane.src.set_data_handle(const_cast<float*>(a));
      float* t = static_cast<float*>(rs.slots[writes[buffer_write_]].data()) + tid * lane_floats_;
      for (int64_t c; (c = next.fetch_add(1)) < chunks;) {
        Chunk& ch = chunks_[static_cast<size_t>(c)];
        if (z_slot_ >= 0)
          for (int64_t i = 0; i < rows_; ++i) std::memcpy(t + i * ch.cols, y + i * cols_ + ch.col0, ch.cols * 4);
        dnnl::memory& dst = ch.cols == chunks_[0].cols ? lane.dst : lane.dst_last;
        dst.set_data_handle(t);
        std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, lane.src}, {DNNL_ARG_WEIGHTS, ch.weights},
                                                      {DNNL_ARG_DST, dst}};
        if (has_bias_) args[DNNL_ARG_BIAS] = ch.bias;
        ch.prim.execute(lane.stream, args);
        for (int64_t i = 0; i < rows_; ++i) std::memcpy(y + i * cols_ + ch.col0, t + i * ch.cols, ch.cols * 4);
      }
    }
  }
  struct Chunk {
    dnnl::convolution_forward prim;
    dnnl::memory weights, bias;  // views of packed_b_'s and bias_'s bytes
    int64_t col0 = 0, cols = 0;
  };
  struct Lane {  // one thread's: its stream and the primitive's memories
    dnnl::stream stream;
    dnnl::memory src, dst, dst_last;
  };
  std::vector<Chunk> chunks_;
  std::vector<Lane> lanes_;
  int64_t rows_ = 0, cols_ = 0;
  // The lanes' chunk buffers, lane_floats_ apart: writes[buffer_write_], an arena slot alive
  // during this step only.
  int buffer_write_ = -1;
  int64_t lane_floats_ = 0;

  dnnl::matmul prim_;
  dnnl::convolution_forward conv_;  // the product as a 1x1 conv (matmul_as_conv): a_, dst_ are its src, dst
  dnnl::memory a_, b_, c_, dst_;
  PackedConstant packed_b_, bias_;
  bool b_const_ = false, has_bias_ = false;
  int c_slot_ = -1, c_post_op_ = 0;
  int z_slot_ = -1;  // the residual Z (FusedMatMul/FusedGemm input 3): dst's starting values
  size_t z_bytes_ = 0;
  std::unique_ptr<onednn::TiledMatMul> tiled_;
};

// Descriptor of a tensor stored row-major as `stored`, seen with its last two dims swapped when `transposed`.
dnnl::memory::desc view_md(const std::vector<int64_t>& stored, bool transposed) {
  size_t r = stored.size();
  dnnl::memory::dims dims(stored.begin(), stored.end());
  dnnl::memory::dims strides(r, 1);
  for (int i = static_cast<int>(r) - 2; i >= 0; --i) strides[i] = strides[i + 1] * stored[i + 1];
  if (transposed) {
    std::swap(dims[r - 1], dims[r - 2]);
    std::swap(strides[r - 1], strides[r - 2]);
  }
  return dnnl::memory::desc(dims, dt::f32, strides);
}

std::vector<int64_t> pad_rank(std::vector<int64_t> s, size_t r) {
  s.insert(s.begin(), r - s.size(), 1);
  return s;
}

// HODU_CPU_MATMUL allows the 1x1 conv (kernels/cpu/matmul_as_conv.h); a bad value is an error.
// y = x·Wᵀ + bias (then Relu) for a few rows x against a constant W [N, K], as torch's Linear
// exports to Gemm with transB: the product streams W once per run whatever W's layout, so W is
// read where it lies. A packed copy bought no speed and held the weights twice while it was
// made (VGG-11's 411 MB classifier weight took the peak RSS past ONNX Runtime's); oneDNN's 1x1
// conv of one row took 2.5x as long as these four-row dot products (openWakeWord's 3264 -> 128
// head at AVX2: 78 -> 31 us; the 1280 -> 1000 classifiers of MobileNetV2 and EfficientNet-B0:
// 1-4 % of the whole run).
class StreamGemvStep : public Step {
 public:
  void run(RunState& rs) override {
    const float* x = static_cast<const float*>(rs.slots[reads[0]].data());
    float* y = static_cast<float*>(rs.slots[writes[0]].data());
    const float* w = w_.data<float>();  // through the tensor: bytes another plan released come back
    const float* bias = bias_.empty() ? nullptr : bias_.data();
    const int64_t chunks = (n_ + kRows - 1) / kRows;
    parallel_for(chunks, rs.threads, [&](int64_t c) {
      const int64_t begin = c * kRows, end = std::min(n_, begin + kRows);
      for (int64_t m = 0; m < m_; ++m) {  // the chunk of W stays in cache for the next row of x
        float* ym = y + m * n_;
        gemv_rows(w, x + m * k_, bias, ym, begin, end, k_);
        if (relu_)
          for (int64_t o = begin; o < end; ++o) ym[o] = std::max(ym[o], 0.0f);
      }
    });
  }
  static constexpr int64_t kRows = 16;  // rows of W a task: 1.6 MB at VGG's K = 25088
  Tensor w_;
  std::vector<float> bias_;  // [N] (beta folded in) or empty
  int64_t m_ = 0, n_ = 0, k_ = 0;
  bool relu_ = false;
};
// Streamed, not packed: B against at most this many rows of A.
constexpr int64_t kStreamRowsMax = 4;

// HODU_CPU_MATMUL_SPLIT: auto (unset) lets a product on the 1x1 conv run in column chunks at 2+
// threads (make_column_chunks); whole keeps one primitive, which oneDNN splits between the
// threads evenly. An error for any other value.
bool column_chunks_allowed() {
  const char* v = std::getenv("HODU_CPU_MATMUL_SPLIT");
  const std::string s = v ? v : "";
  if (s.empty() || s == "auto") return true;
  if (s == "whole") return false;
  throw Error(ErrorCode::InvalidArgument,
              "HODU_CPU_MATMUL_SPLIT=" + s +
                  ": expected auto (a product on the 1x1 conv runs in column chunks the threads take in turn) "
                  "or whole (one primitive, split evenly between the threads)");
}

// The 1x1 conv of step (m rows, k deep, n columns; its weights and bias packed whole) as about
// four column chunks a thread, each its own primitive run on one thread, taken by whichever
// thread is free (MatMulStep::run_chunks). oneDNN's own split gives each thread the same share;
// on a shared machine one core often runs slower than the other and the faster thread then
// waits: chunks taken in turn took 2-12 % less time on average on single transformer products
// at AVX2 and 1-10 % less on BERT, GPT-2 and ViT (2 threads, Cascade Lake, bench/ab_env.py),
// with the same fastest runs. A chunk reads its columns of the
// whole packed weights in place (the blocked layout keeps each 8 output channels' weights
// together: a chunk of whole blocks is a contiguous range with the same strides), so nothing is
// held twice. Each output is the same sum whatever the thread count (the kernel's order over k
// does not depend on the columns). False (nothing made) at one thread, for a product too narrow
// to cut, or where oneDNN answers a chunk with another kernel, layout or a scratchpad.
bool make_column_chunks(PlanBuilder& b, MatMulStep& step, int64_t m, int64_t k, int64_t n, bool bias,
                        const dnnl::primitive_attr& attr, const dnnl::memory::desc& whole_weights) {
  const int threads = b.threads();
  if (threads < 2 || !column_chunks_allowed()) return false;
  const int64_t width = std::max<int64_t>(64, ((n + 4 * threads - 1) / (4 * threads) + 7) / 8 * 8);
  if (width >= n) return false;
  const int64_t count = (n + width - 1) / width, last = n - (count - 1) * width;
  auto pd = onednn::conv_1x1_pd(b.engine(), m, k, width, bias, attr);
  auto pd_last = last == width ? pd : onednn::conv_1x1_pd(b.engine(), m, k, last, bias, attr);
  if (!pd || !pd_last || pd->scratchpad_desc().get_size() != 0 || pd_last->scratchpad_desc().get_size() != 0)
    return false;
  // The chunks' weights must be the whole's blocked layout with output channels in outermost
  // blocks of `block`, `width` a multiple of it: then chunk c starts (c·width / block) outer
  // strides into the whole.
  const auto& wb = whole_weights.data.format_desc.blocking;
  if (whole_weights.data.format_kind != dnnl_blocked || wb.inner_nblks < 1 || wb.inner_idxs[wb.inner_nblks - 1] != 0)
    return false;
  const int64_t block = wb.inner_blks[wb.inner_nblks - 1];
  if (width % block != 0) return false;
  for (const auto* cpd : {&*pd, &*pd_last}) {
    const auto w = cpd->weights_desc().data;
    if (w.format_kind != dnnl_blocked || w.ndims != whole_weights.data.ndims ||
        w.format_desc.blocking.inner_nblks != wb.inner_nblks)
      return false;
    for (int i = 0; i < w.ndims; ++i)
      if (w.format_desc.blocking.strides[i] != wb.strides[i]) return false;
    for (int i = 0; i < wb.inner_nblks; ++i)
      if (w.format_desc.blocking.inner_blks[i] != wb.inner_blks[i] || w.format_desc.blocking.inner_idxs[i] != wb.inner_idxs[i])
        return false;
  }
  const dnnl::convolution_forward prim(*pd), prim_last = last == width ? prim : dnnl::convolution_forward(*pd_last);
  float* weights = static_cast<float*>(step.packed_b_.mem.get_data_handle());
  float* biases = bias ? static_cast<float*>(step.bias_.mem.get_data_handle()) : nullptr;
  for (int64_t c = 0; c < count; ++c) {
    MatMulStep::Chunk ch;
    ch.col0 = c * width;
    ch.cols = std::min(width, n - ch.col0);
    const auto& cpd = ch.cols == width ? *pd : *pd_last;
    ch.prim = ch.cols == width ? prim : prim_last;
    ch.weights = dnnl::memory(cpd.weights_desc(), b.engine(), weights + ch.col0 / block * wb.strides[0]);
    if (bias) ch.bias = dnnl::memory(cpd.bias_desc(), b.engine(), biases + ch.col0);
    step.chunks_.push_back(std::move(ch));
  }
  for (int t = 0; t < threads; ++t) {
    MatMulStep::Lane lane;
    lane.stream = dnnl::stream(b.engine());
    lane.src = dnnl::memory(pd->src_desc(), b.engine(), nullptr);
    lane.dst = dnnl::memory(pd->dst_desc(), b.engine(), nullptr);
    lane.dst_last = dnnl::memory(pd_last->dst_desc(), b.engine(), nullptr);
    step.lanes_.push_back(std::move(lane));
  }
  step.rows_ = m;
  step.cols_ = n;
  step.lane_floats_ = (m * width + 15) / 16 * 16;
  return true;
}

}  // namespace

bool make_matmul(PlanBuilder& b, const Node& n) {
  bool hodu = n.domain == "hodu";
  bool gemm = n.op_type == (hodu ? "FusedGemm" : "Gemm");
  bool matmul = n.op_type == (hodu ? "FusedMatMul" : "MatMul");
  if (!(hodu || n.domain.empty()) || !(gemm || matmul)) return false;
  auto at = b.static_type(n.inputs[0]), bt = b.static_type(n.inputs[1]), yt = b.static_type(n.outputs[0]);
  if (!at || !bt || !yt || at->first != DType::F32 || bt->first != DType::F32) return false;
  auto as = at->second, bs = bt->second, ys = yt->second;
  if (as.size() < 2 || bs.size() < 2 || ys.size() < 2 || (gemm && (as.size() != 2 || bs.size() != 2))) return false;
  bool ta = (gemm || hodu) && n.get_int("transA", 0), tb = (gemm || hodu) && n.get_int("transB", 0);
  float alpha = (gemm || hodu) ? n.get_float("alpha", 1.0f) : 1.0f;
  float beta = gemm ? n.get_float("beta", 1.0f) : 1.0f;
  std::string act = hodu ? n.get_string("activation", "") : "";
  auto act_params = hodu ? n.get_floats("activation_params") : std::vector<float>{};
  size_t r = ys.size();
  if (as.size() > r || bs.size() > r) return false;
  as = pad_rank(as, r);
  bs = pad_rank(bs, r);
  auto logical = [](std::vector<int64_t> s, bool t) {
    if (t) std::swap(s[s.size() - 1], s[s.size() - 2]);
    return s;
  };
  std::vector<int64_t> al = logical(as, ta), bl = logical(bs, tb);
  if (al[r - 1] != bl[r - 2] || al[r - 2] != ys[r - 2] || bl[r - 1] != ys[r - 1]) return false;
  int64_t ncols = ys[r - 1];

  const Graph& g = b.graph();
  const Tensor* bconst = passes::constant_of(g, n.inputs[1]);
  if (alpha != 1.0f && !bconst) return false;
  // The addend: FusedMatMul's bias, Gemm's C.
  std::string addend = n.inputs.size() > 2 && !n.inputs[2].empty() ? n.inputs[2] : "";
  const Tensor* cconst = passes::constant_of(g, addend);
  // The residual Z: the output's exact shape, added by a sum post-op onto dst's starting values.
  std::string residual = hodu && n.inputs.size() > 3 ? n.inputs[3] : "";
  if (!residual.empty()) {
    auto zt = b.static_type(residual);
    if (!zt || zt->first != DType::F32 || zt->second != ys) return false;
  }
  bool bias_vector = false;
  std::optional<std::pair<DType, std::vector<int64_t>>> ct;
  if (!addend.empty()) {
    ct = b.static_type(addend);
    if (!ct || ct->first != DType::F32 || ct->second.size() > r) return false;
    bias_vector = cconst && cconst->numel() == ncols && (ct->second.empty() || ct->second.back() == ncols);
    if (!bias_vector && beta != 1.0f) return false;
  }

  // B shared by every batch (2-D weights) and A row-major: fold A's batch dims into M, one
  // [batch·M, K] × [K, N] product instead of `batch` small ones ([197, 1, 768] in ViT is 197 GEMVs).
  bool b_broadcast = true;
  for (size_t i = 0; i + 2 < r; ++i) b_broadcast &= bs[i] == 1;
  if (r > 2 && b_broadcast && !ta && (addend.empty() || bias_vector)) {
    int64_t rows = shape_numel(as) / as[r - 1];
    as = {rows, as[r - 1]};
    bs = {bs[r - 2], bs[r - 1]};
    r = 2;
  }
  if (bconst && r == 2 && tb && !ta && alpha == 1.0f && residual.empty() && (addend.empty() || bias_vector) &&
      (act.empty() || (act == "Relu" && act_params.empty())) && as[0] <= kStreamRowsMax &&
      bconst->is_contiguous()) {
    auto step = std::make_unique<StreamGemvStep>();
    step->w_ = *bconst;
    step->m_ = as[0];
    step->n_ = bs[0];
    step->k_ = bs[1];
    step->relu_ = act == "Relu";
    if (bias_vector) {
      Tensor c = cconst->contiguous();
      step->bias_.assign(c.data<float>(), c.data<float>() + c.numel());
      for (float& v : step->bias_) v *= beta;
    }
    step->reads = {b.plain(n.inputs[0])};
    step->writes = {b.define(n.outputs[0], DType::F32, ys)};
    step->label = n.describe() + ": cpu stream gemv";
    b.add(std::move(step));
    return true;
  }
  dnnl::memory::desc a_md = view_md(as, ta);
  dnnl::memory::desc b_user = view_md(bs, tb);
  std::vector<int64_t> y2 = ys;
  if (r == 2 && ys.size() > 2) y2 = {shape_numel(ys) / ys.back(), ys.back()};
  bl = logical(bs, tb);
  dnnl::memory::desc b_md = bconst ? dnnl::memory::desc(to_dims(bl), dt::f32, tag::any) : b_user;
  dnnl::memory::desc y_md = plain_md(y2);
  std::vector<int64_t> bias_shape(r, 1);
  bias_shape[r - 1] = ncols;
  dnnl::memory::desc bias_md = plain_md(bias_shape);
  dnnl::memory::desc c_md;
  dnnl::post_ops po;
  if (!residual.empty()) po.append_sum(1.0f);
  if (!addend.empty() && !bias_vector) {
    c_md = plain_md(pad_rank(ct->second, r));
    po.append_binary(dnnl::algorithm::binary_add, c_md);
  }
  if (!append_activation(po, act, act_params)) return false;
  dnnl::primitive_attr attr;
  attr.set_post_ops(po);
  // The same post-ops with the addend seen as `c` (a tile of it).
  auto attr_for = [&](const dnnl::memory::desc& c) {
    dnnl::post_ops tile_po;
    if (!residual.empty()) tile_po.append_sum(1.0f);
    if (!addend.empty() && !bias_vector) tile_po.append_binary(dnnl::algorithm::binary_add, c);
    append_activation(tile_po, act, act_params);
    dnnl::primitive_attr a;
    a.set_post_ops(tile_po);
    return a;
  };
  auto make_pd = [&](const dnnl::memory::desc& weights) {
    auto desc = bias_vector ? dnnl::matmul::desc(a_md, weights, bias_md, y_md) : dnnl::matmul::desc(a_md, weights, y_md);
    return dnnl::matmul::primitive_desc(desc, attr, b.engine());
  };
  dnnl::matmul::primitive_desc pd;
  try {
    pd = make_pd(b_md);
  } catch (const dnnl::error&) {
    return false;
  }
  // Without AVX-512 oneDNN picks its sgemm, which reads a constant B in plain rows, in any
  // row order: read the initializer where it lies (no second copy of the weights) unless
  // its placement is one that sgemm runs slowly on Zen 3 (measured with 768x3072 weights:
  // 16.5 ms for rows a multiple of 4 KiB apart or a 32-byte aligned start, 7-8 ms otherwise).
  // Those are copied with their rows 64 bytes further apart.
  bool in_place = false;
  Tensor stored_b = bconst ? bconst->contiguous() : Tensor();
  if (bconst && r == 2 && pd.weights_desc() == view_md(bl, false)) {
    auto addr = reinterpret_cast<uintptr_t>(stored_b.raw_data());
    bool rows_alias = (bs[1] * 4) % 4096 == 0;
    if (alpha == 1.0f && !rows_alias && addr % 32 != 0) {
      try {
        auto direct = make_pd(b_user);
        if (direct.weights_desc() == b_user) {
          pd = direct;
          in_place = true;
        }
      } catch (const dnnl::error&) {
      }
    }
    if (!in_place) {
      dnnl::memory::desc padded(to_dims(bl), dt::f32, dnnl::memory::dims{bl[1] + 16, 1});
      try {
        auto padded_pd = make_pd(padded);
        if (padded_pd.weights_desc() == padded) pd = padded_pd;
      } catch (const dnnl::error&) {
      }
    }
  }
  auto step = std::make_unique<MatMulStep>();
  std::string impl = pd.impl_info_str();
  std::optional<dnnl::convolution_forward::primitive_desc> conv;
  const bool few_rows = as[0] <= onednn::kMaxConvRows;  // a batch-1 classifier: any 1x1 kernel
  if (bconst && matmul_as_conv_allowed() && r == 2 && !ta && (addend.empty() || bias_vector) &&
      (impl.rfind("gemm", 0) == 0 || few_rows))
    conv = onednn::conv_1x1_pd(b.engine(), as[0], as[1], ncols, bias_vector, attr, few_rows);
  if (conv) {
    step->conv_ = dnnl::convolution_forward(*conv);
    impl = std::string(conv->impl_info_str()) + ", as 1x1 conv";
  } else if (r == 2 && impl.rfind("gemm", 0) == 0)
    step->tiled_ = onednn::TiledMatMul::make(b.engine(), b.threads(), pd, attr_for, c_md);
  if (step->tiled_)
    impl += ", tiled";
  else if (!conv)
    step->prim_ = dnnl::matmul(pd);  // the whole product's primitive only runs untiled
  step->reads = {b.plain(n.inputs[0])};
  step->a_ = dnnl::memory(conv ? conv->src_desc() : a_md, b.engine(), nullptr);
  // alpha folded into the weights.
  auto scaled_b = [&] {
    Tensor w = stored_b;
    if (alpha != 1.0f) {
      w = w.clone();
      float* p = w.data<float>();
      for (int64_t i = 0; i < w.numel(); ++i) p[i] *= alpha;
    }
    return w;
  };
  if (bconst) {
    step->b_const_ = true;
    if (conv) {
      step->packed_b_ = b.pack(alpha == 1.0f ? n.inputs[1] : "", scaled_b(), onednn::conv_1x1_weights(as[1], ncols, tb),
                               conv->weights_desc());
    } else if (in_place) {
      void* data = const_cast<void*>(stored_b.raw_data());
      step->packed_b_.buffer = std::shared_ptr<void>(stored_b.storage(), data);
      step->packed_b_.mem = dnnl::memory(b_user, b.engine(), data);
    } else {
      step->packed_b_ = b.pack(alpha == 1.0f ? n.inputs[1] : "", scaled_b(), b_user, pd.weights_desc());
    }
  } else {
    step->reads.push_back(b.plain(n.inputs[1]));
    step->b_ = dnnl::memory(b_user, b.engine(), nullptr);
  }
  if (bias_vector) {
    Tensor c = cconst->contiguous().clone();
    if (beta != 1.0f) {
      float* p = c.data<float>();
      for (int64_t i = 0; i < c.numel(); ++i) p[i] *= beta;
    }
    step->has_bias_ = true;
    step->bias_ = conv ? b.pack("", c, conv->bias_desc(), conv->bias_desc()) : b.pack("", c, bias_md, pd.bias_desc());
  } else if (!addend.empty()) {
    step->c_slot_ = b.plain(addend);
    step->c_post_op_ = onednn::binary_post_op_index(pd);
    step->reads.push_back(step->c_slot_);
    step->c_ = dnnl::memory(c_md, b.engine(), nullptr);
  }
  if (conv && !few_rows &&
      make_column_chunks(b, *step, as[0], as[1], ncols, bias_vector, attr, conv->weights_desc())) {
    step->conv_ = {};  // the chunks run the product
    impl += " in " + std::to_string(step->chunks_.size()) + " column chunks";
  }
  int dst = -1;
  if (!residual.empty()) {
    step->z_slot_ = b.plain(residual);
    step->z_bytes_ = dtype_storage_bytes(DType::F32, shape_numel(ys));
    step->reads.push_back(step->z_slot_);
    // A residual read nowhere after this product is its output's buffer: nothing is copied.
    std::vector<int> others(step->reads.begin(), step->reads.end() - 1);
    if (b.bytes_die_here(residual, others)) dst = b.define_part(n.outputs[0], step->z_slot_, ys, plain_md(ys), 0);
  }
  if (dst < 0) dst = b.define(n.outputs[0], DType::F32, ys);
  step->writes = {dst};
  if (!step->chunks_.empty()) {
    step->buffer_write_ = static_cast<int>(step->writes.size());
    step->writes.push_back(
        b.define("", DType::F32, {static_cast<int64_t>(step->lanes_.size()) * step->lane_floats_}));
  }
  step->dst_ = dnnl::memory(conv ? conv->dst_desc() : y_md, b.engine(), nullptr);
  step->label = n.describe() + ": onednn " + impl +
                (residual.empty() ? "" : b.at(dst).kind == Slot::Kind::Part ? ", residual in place" : ", residual");
  b.add(std::move(step));
  return true;
}

}  // namespace hodu::cpu
