// MatMul, Gemm, hodu.FusedMatMul and hodu.FusedGemm on oneDNN's matmul:
// constant B is packed once per plan (alpha folded in), a constant bias/C is
// the primitive's bias (beta folded in), a variable C a binary post-op, and
// the activation eltwise post-ops. Where oneDNN has only its sgemm (no AVX-512)
// a 2-D product runs as fixed tiles, one sgemm call each (TiledMatMul).
#include <omp.h>

#include <array>

#include "core/error.h"
#include "engines/cpu/dnnl_common.h"
#include "engines/cpu/row_kernels.h"
#include "passes/graph_utils.h"

namespace hodu::cpu {
namespace {

// oneDNN's sgemm splits K across threads when M and N are small, so its sums depend on the
// thread count. Tiles of a fixed size, each one single-threaded sgemm call over all of K,
// give every thread count the same bits (and split the work as evenly).
struct TiledMatMul {
  static constexpr int64_t kRows = 256, kCols = 384;
  int64_t m = 0, n = 0;
  // Element strides: A's rows, B's columns, the addend's rows/columns (0 where broadcast).
  int64_t a_row = 0, b_col = 0, c_row = 0, c_col = 0;
  // The four tile shapes: [full/last row tile][full/last column tile].
  std::array<dnnl::matmul, 4> prims;
  struct Memories {
    dnnl::memory a, b, bias, c, dst;
  };
  std::vector<std::array<Memories, 4>> per_thread;
  std::vector<dnnl::stream> streams;

  // `bias` and `c` null when absent.
  void run(RunState& rs, char* a, char* b, char* bias, char* c, char* y) {
    int64_t rows = (m + kRows - 1) / kRows, cols = (n + kCols - 1) / kCols;
    int threads = std::min<int>(rs.threads, static_cast<int>(per_thread.size()));
    // Each call single-threaded: inside the parallel loop oneDNN runs serially; outside it
    // (one thread or one tile) it would take every OpenMP thread.
    omp_set_num_threads(1);
    parallel_for(rows * cols, threads, [&](int64_t t) {
      int64_t i = t / cols, j = t % cols;
      int shape = (i == rows - 1 && m % kRows ? 2 : 0) + (j == cols - 1 && n % kCols ? 1 : 0);
      int tid = threads > 1 ? omp_get_thread_num() : 0;
      Memories& mm = per_thread[tid][shape];
      int64_t r0 = i * kRows, c0 = j * kCols;
      mm.a.set_data_handle(a + 4 * r0 * a_row);
      mm.b.set_data_handle(b + 4 * c0 * b_col);
      mm.dst.set_data_handle(y + 4 * (r0 * n + c0));
      std::unordered_map<int, dnnl::memory> args = {
          {DNNL_ARG_SRC, mm.a}, {DNNL_ARG_WEIGHTS, mm.b}, {DNNL_ARG_DST, mm.dst}};
      if (bias) {
        mm.bias.set_data_handle(bias + 4 * c0);
        args[DNNL_ARG_BIAS] = mm.bias;
      }
      if (c) {
        mm.c.set_data_handle(c + 4 * (r0 * c_row + c0 * c_col));
        args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1] = mm.c;
      }
      prims[shape].execute(streams[tid], args);
    });
    omp_set_num_threads(rs.threads);
  }
};

class MatMulStep : public Step {
 public:
  void run(RunState& rs) override {
    bind(a_, rs, reads[0]);
    bind(dst_, rs, writes[0]);
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
      args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1] = c_;
    }
    if (tiled_) {
      auto handle = [](const dnnl::memory& m) { return static_cast<char*>(m.get_data_handle()); };
      tiled_->run(rs, handle(a_), handle(args[DNNL_ARG_WEIGHTS]), has_bias_ ? handle(bias_.mem) : nullptr,
                  c_slot_ >= 0 ? handle(c_) : nullptr, handle(dst_));
      return;
    }
    prim_.execute(rs.stream, args);
  }

  dnnl::matmul prim_;
  dnnl::memory a_, b_, c_, dst_;
  PackedConstant packed_b_, bias_;
  bool b_const_ = false, has_bias_ = false;
  int c_slot_ = -1;
  std::unique_ptr<TiledMatMul> tiled_;
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

// The tiles of a 2-D product [m, n] whose whole primitive is `pd` (null if oneDNN declines
// a tile shape). `c_md`: the addend of a binary post-op (empty desc when none).
template <typename AttrFor>
std::unique_ptr<TiledMatMul> make_tiles(PlanBuilder& b, const dnnl::matmul::primitive_desc& pd, AttrFor&& attr_for,
                                        int64_t m, int64_t n, const dnnl::memory::desc& c_md) {
  auto t = std::make_unique<TiledMatMul>();
  t->m = m;
  t->n = n;
  auto a_md = pd.src_desc(), w_md = pd.weights_desc(), y_md = pd.dst_desc(), bias_md = pd.bias_desc();
  t->a_row = a_md.data.format_desc.blocking.strides[0];
  t->b_col = w_md.data.format_desc.blocking.strides[1];
  bool has_c = c_md.get_size() > 0, has_bias = bias_md.get_size() > 0;
  int64_t cm = has_c ? c_md.dims()[0] : 1, cn = has_c ? c_md.dims()[1] : 1;
  t->c_row = cm > 1 ? cn : 0;
  t->c_col = cn > 1 ? 1 : 0;
  int64_t k = a_md.dims()[1];
  std::array<dnnl::matmul::primitive_desc, 4> pds;
  std::array<std::array<dnnl::memory::desc, 5>, 4> mds;  // a, b, bias, c, dst per shape
  for (int shape = 0; shape < 4; ++shape) {
    int64_t tm = shape & 2 && m % TiledMatMul::kRows ? m % TiledMatMul::kRows : std::min(m, TiledMatMul::kRows);
    int64_t tn = shape & 1 && n % TiledMatMul::kCols ? n % TiledMatMul::kCols : std::min(n, TiledMatMul::kCols);
    auto& d = mds[shape];
    d[0] = a_md.submemory_desc({tm, k}, {0, 0});
    d[1] = w_md.submemory_desc({k, tn}, {0, 0});
    if (has_bias) d[2] = bias_md.submemory_desc({1, tn}, {0, 0});
    if (has_c) d[3] = c_md.submemory_desc({cm > 1 ? tm : 1, cn > 1 ? tn : 1}, {0, 0});
    d[4] = y_md.submemory_desc({tm, tn}, {0, 0});
    try {
      auto desc = has_bias ? dnnl::matmul::desc(d[0], d[1], d[2], d[4]) : dnnl::matmul::desc(d[0], d[1], d[4]);
      pds[shape] = dnnl::matmul::primitive_desc(desc, attr_for(d[3]), b.engine());
    } catch (const dnnl::error&) {
      return nullptr;
    }
    t->prims[shape] = dnnl::matmul(pds[shape]);
  }
  int threads = std::max(b.threads(), 1);
  t->per_thread.resize(threads);
  for (int i = 0; i < threads; ++i) {
    t->streams.emplace_back(b.engine());
    for (int shape = 0; shape < 4; ++shape) {
      auto& d = mds[shape];
      auto& mm = t->per_thread[i][shape];
      mm.a = dnnl::memory(d[0], b.engine(), nullptr);
      mm.b = dnnl::memory(d[1], b.engine(), nullptr);
      if (has_bias) mm.bias = dnnl::memory(d[2], b.engine(), nullptr);
      if (has_c) mm.c = dnnl::memory(d[3], b.engine(), nullptr);
      mm.dst = dnnl::memory(d[4], b.engine(), nullptr);
    }
  }
  return t;
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
  if (bconst && r == 2 && pd.weights_desc() == view_md(bl, false)) {
    Tensor stored = bconst->contiguous();
    auto addr = reinterpret_cast<uintptr_t>(stored.raw_data());
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
  step->prim_ = dnnl::matmul(pd);
  step->reads = {b.plain(n.inputs[0])};
  step->a_ = dnnl::memory(a_md, b.engine(), nullptr);
  if (bconst) {
    step->b_const_ = true;
    Tensor w = *bconst;
    if (alpha != 1.0f) {
      w = w.contiguous().clone();
      float* p = w.data<float>();
      for (int64_t i = 0; i < w.numel(); ++i) p[i] *= alpha;
    }
    if (in_place) {
      Tensor stored = w.contiguous();
      step->packed_b_.buffer = std::shared_ptr<void>(stored.storage(), const_cast<void*>(stored.raw_data()));
      step->packed_b_.mem = dnnl::memory(b_user, b.engine(), const_cast<void*>(stored.raw_data()));
    } else {
      step->packed_b_ = pack_constant(b.engine(), w, b_user, pd.weights_desc());
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
    step->bias_ = pack_constant(b.engine(), c, bias_md, pd.bias_desc());
  } else if (!addend.empty()) {
    step->c_slot_ = b.plain(addend);
    step->reads.push_back(step->c_slot_);
    step->c_ = dnnl::memory(c_md, b.engine(), nullptr);
  }
  step->writes = {b.define(n.outputs[0], DType::F32, ys)};
  step->dst_ = dnnl::memory(y_md, b.engine(), nullptr);
  std::string impl = pd.impl_info_str();
  if (r == 2 && impl.rfind("gemm", 0) == 0) {
    step->tiled_ = make_tiles(b, pd, attr_for, y2[0], y2[1], c_md);
    if (step->tiled_) impl += ", tiled";
  }
  step->label = n.describe() + ": onednn " + impl;
  b.add(std::move(step));
  return true;
}

}  // namespace hodu::cpu
