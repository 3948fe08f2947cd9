// A product of one row by constant weights (a classifier head at batch 1: Gemm [1, 1280] x
// [1280, 1000]) as a matrix-vector loop over the weights' rows, below AVX-512. There oneDNN 2.6
// has only its sgemm (run as tiles, dnnl_matmul.cc), which read MobileNetV3-Small's 576x1024 head
// at 12 GB/s, 200 us of its 2.1 ms at avx2, the loop 100 us; with AVX-512 its brgemm product is as
// fast as the loop and keeps the node. Each output is one row's sum in a fixed order: the same
// bits at every thread count.
#include "core/error.h"
#include "engines/cpu/dnnl_common.h"
#include "engines/cpu/row_kernels.h"
#include "engines/cpu/scalar_activation.h"
#include "kernels/cpu/vector_math.h"
#include "passes/graph_utils.h"

namespace hodu::cpu {
namespace {

class GemvMatMulStep : public Step {
 public:
  void run(RunState& rs) override {
    const float* x = static_cast<const float*>(rs.slots[reads[0]].data());
    float* y = static_cast<float*>(rs.slots[writes[0]].data());
    const float* w = static_cast<const float*>(weights_.mem.get_data_handle());
    const float* bias = bias_.empty() ? nullptr : bias_.data();
    const int64_t rows = rows_, cols = cols_;
    const int64_t chunk = 64, chunks = (rows + chunk - 1) / chunk;
    const int threads = rows * cols >= (1 << 16) ? rs.threads : 1;
    parallel_for(chunks, threads, [&](int64_t c) {
      const int64_t begin = c * chunk, end = std::min(rows, begin + chunk);
      gemv_rows(w, x, bias, y, begin, end, cols);
      if (act_.kind != ScalarActivation::Kind::None)
        for (int64_t o = begin; o < end; ++o) y[o] = act_(y[o]);
    });
  }
  PackedConstant weights_;  // [rows, cols]: B transposed
  std::vector<float> bias_;
  int64_t rows_ = 0, cols_ = 0;
  ScalarActivation act_;
};

}  // namespace

bool make_gemv_matmul(PlanBuilder& b, const Node& n) {
  const bool hodu = n.domain == "hodu";
  const bool gemm = n.op_type == (hodu ? "FusedGemm" : "Gemm");
  const bool matmul = n.op_type == (hodu ? "FusedMatMul" : "MatMul");
  if (!(hodu || n.domain.empty()) || !(gemm || matmul)) return false;
  if (vector_math::cpu_isa() == vector_math::Isa::Avx512) return false;
  if (hodu && n.inputs.size() > 3 && !n.inputs[3].empty()) return false;  // a residual: oneDNN's sum post-op
  auto at = b.static_type(n.inputs[0]), yt = b.static_type(n.outputs[0]);
  const Tensor* w = passes::constant_of(b.graph(), n.inputs[1]);
  if (!at || !yt || !w || at->first != DType::F32 || w->dtype() != DType::F32 || w->rank() != 2) return false;
  const auto& as = at->second;
  const auto& ys = yt->second;
  // One row of A: [K] as a vector times a matrix has no M dim; [1, K], [1, 1, K] ... a row.
  if (as.empty() || shape_numel(as) != as.back() || ys.empty() || shape_numel(ys) != ys.back()) return false;
  const bool tb = (gemm || hodu) && n.get_int("transB", 0);
  if ((gemm || hodu) && n.get_int("transA", 0)) return false;
  const std::vector<int64_t>& ws = w->shape();
  const int64_t k = tb ? ws[1] : ws[0], cols_out = tb ? ws[0] : ws[1];
  if (as.back() != k || ys.back() != cols_out) return false;
  const float alpha = (gemm || hodu) ? n.get_float("alpha", 1.0f) : 1.0f;
  const float beta = gemm ? n.get_float("beta", 1.0f) : 1.0f;
  auto act = ScalarActivation::of(hodu ? n.get_string("activation", "") : "",
                                  hodu ? n.get_floats("activation_params") : std::vector<float>{});
  if (!act) return false;
  std::vector<float> bias;
  const std::string addend = n.inputs.size() > 2 ? n.inputs[2] : "";
  if (!addend.empty()) {
    const Tensor* c = passes::constant_of(b.graph(), addend);
    if (!c || c->dtype() != DType::F32 || c->numel() != cols_out || (c->rank() > 0 && c->shape().back() != cols_out))
      return false;
    for (double v : c->to_doubles()) bias.push_back(static_cast<float>(v) * beta);
  }
  auto step = std::make_unique<GemvMatMulStep>();
  step->rows_ = cols_out;
  step->cols_ = k;
  step->bias_ = std::move(bias);
  step->act_ = *act;
  // B's rows as stored ([K, N] or, transposed, [N, K]), reordered once into [N, K] rows.
  Tensor stored = w->contiguous();
  if (alpha != 1.0f) {
    stored = stored.clone();
    float* p = stored.data<float>();
    for (int64_t i = 0; i < stored.numel(); ++i) p[i] *= alpha;
  }
  const dnnl::memory::dims logical{k, cols_out};
  const dnnl::memory::desc from(logical, dt::f32, tb ? dnnl::memory::dims{1, k} : dnnl::memory::dims{cols_out, 1});
  const dnnl::memory::desc rows_md(logical, dt::f32, dnnl::memory::dims{1, k});
  step->weights_ = b.pack(alpha == 1.0f ? n.inputs[1] : "", stored, from, rows_md);
  step->reads = {b.plain(n.inputs[0])};
  step->writes = {b.define(n.outputs[0], DType::F32, ys)};
  step->label = n.describe() + ": cpu gemv";
  b.add(std::move(step));
  return true;
}

}  // namespace hodu::cpu
