// MatMul and Gemm over f32 values whose shapes are known only while running (a Loop's
// outputs, a Slice with run-time starts): make_matmul builds oneDNN primitives for the
// shapes the plan knows and refuses these. Each run's product is oneDNN's sgemm (no
// primitive to create per shape), one call per batch matrix; hodu.FusedGemm's activation and
// residual in one pass after it. MatMul of f64 (any shapes) on a plain loop in double.
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cmath>
#include <iterator>

#include "core/error.h"
#include "engines/cpu/plan.h"
#include "engines/cpu/row_kernels.h"
#include "engines/cpu/tensor_step.h"
#include "kernels/cpu/vector_math.h"
#include "passes/graph_utils.h"

namespace hodu::cpu {
namespace {

void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, const float* B, float beta,
           float* C) {
  if (M == 0 || N == 0) return;
  if (K == 0) {  // an empty sum: beta * C
    for (int64_t i = 0; i < M * N; ++i) C[i] = beta == 0 ? 0.0f : beta * C[i];
    return;
  }
  const dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, ta ? M : K, B, tb ? K : N, beta,
                                      C, N);
  HODU_CHECK(st == dnnl_success, ErrorCode::Internal, "oneDNN sgemm failed ({}) on {}x{}x{}", static_cast<int>(st), M,
             N, K);
}

// C[M, N] = A[M, K] · B[K, N] in double (torch exports of double math): each row of C summed
// over k in ascending order, rows split over the threads. oneDNN has no f64 product.
void dgemm(int64_t M, int64_t N, int64_t K, const double* A, const double* B, double* C, int threads) {
  parallel_for(M, M * N * K >= (1 << 16) ? threads : 1, [&](int64_t i) {
    double* c = C + i * N;
    std::fill(c, c + N, 0.0);
    for (int64_t k = 0; k < K; ++k) {
      const double a = A[i * K + k];
      const double* b = B + k * N;
      for (int64_t j = 0; j < N; ++j) c[j] += a * b[j];
    }
  });
}

// hodu.FusedMatMul's parts a run-time product takes: Y = alpha · op(A) op(B) + bias + Z, op
// transposing the last two dims (attention's Q·Kᵀ with its scale, as the passes fuse it).
struct Fused {
  float alpha = 1.0f;
  bool ta = false, tb = false;
};

// numpy's matmul: 1-D operands promoted (and their dim dropped), batch dims broadcast; f32 or f64.
// With `fused` (f32): hodu.FusedMatMul without activation; its bias [N] (input 2) and Z (input 3,
// the output's shape) are added after the product.
class RuntimeMatMulStep : public TensorStep {
 public:
  explicit RuntimeMatMulStep(DType dt, Fused fused = {}) : dt_(dt), f_(fused) {}
  void configure(const std::vector<const Tensor*>& in) override {
    std::vector<int64_t> a = in[0]->shape(), b = in[1]->shape();
    HODU_CHECK(!a.empty() && !b.empty(), ErrorCode::InvalidArgument, "{}: MatMul of a scalar", label);
    a_vec_ = a.size() == 1;
    b_vec_ = b.size() == 1;
    if (a_vec_) a.insert(a.begin(), 1);
    if (b_vec_) b.push_back(1);
    if (f_.ta && !a_vec_) std::swap(a[a.size() - 2], a[a.size() - 1]);
    if (f_.tb && !b_vec_) std::swap(b[b.size() - 2], b[b.size() - 1]);
    M_ = a[a.size() - 2];
    K_ = a.back();
    N_ = b.back();
    HODU_CHECK(b[b.size() - 2] == K_, ErrorCode::InvalidArgument, "{}: MatMul inner dims differ ({} and {})", label, K_,
               b[b.size() - 2]);
    const size_t rank = std::max(a.size(), b.size());
    a.insert(a.begin(), rank - a.size(), 1);
    b.insert(b.begin(), rank - b.size(), 1);
    batch_.assign(rank - 2, 0);
    a_batch_ = b_batch_ = batch_;
    for (size_t d = 0; d + 2 < rank; ++d) {
      HODU_CHECK(a[d] == b[d] || a[d] == 1 || b[d] == 1, ErrorCode::InvalidArgument,
                 "{}: MatMul batch dims {} and {} do not broadcast", label, a[d], b[d]);
      batch_[d] = std::max(a[d], b[d]);
      a_batch_[d] = a[d];
      b_batch_[d] = b[d];
    }
    out_shape_ = batch_;
    if (!a_vec_) out_shape_.push_back(M_);
    if (!b_vec_) out_shape_.push_back(N_);
    if (in.size() > 2 && in[2])
      HODU_CHECK(in[2]->numel() == N_, ErrorCode::InvalidArgument, "{}: bias {} is not [{}]", label,
                 in[2]->type_string(), N_);
    if (in.size() > 3 && in[3])
      HODU_CHECK(in[3]->shape() == out_shape_, ErrorCode::InvalidArgument, "{}: Z {} is not the output's shape {}",
                 label, in[3]->type_string(), shape_to_string(out_shape_));
  }

  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    Tensor& y = out(rs, 0, dt_, out_shape_);
    const int64_t count = shape_numel(batch_);
    for (int64_t q = 0; q < count; ++q) {
      // The batch index q in the output's batch dims, read back in each operand's (broadcast) dims.
      int64_t rest = q, ai = 0, bi = 0, as = 1, bs = 1;
      for (size_t d = batch_.size(); d-- > 0;) {
        const int64_t i = rest % batch_[d];
        rest /= batch_[d];
        ai += (a_batch_[d] == 1 ? 0 : i) * as;
        bi += (b_batch_[d] == 1 ? 0 : i) * bs;
        as *= a_batch_[d];
        bs *= b_batch_[d];
      }
      if (dt_ == DType::F64)
        dgemm(M_, N_, K_, in[0]->data<double>() + ai * M_ * K_, in[1]->data<double>() + bi * K_ * N_,
              y.data<double>() + q * M_ * N_, rs.threads);
      else
        sgemm(f_.ta, f_.tb, M_, N_, K_, f_.alpha, in[0]->data<float>() + ai * M_ * K_,
              in[1]->data<float>() + bi * K_ * N_, 0.0f, y.data<float>() + q * M_ * N_);
    }
    const float* bias = in.size() > 2 && in[2] ? in[2]->data<float>() : nullptr;
    const float* z = in.size() > 3 && in[3] ? in[3]->data<float>() : nullptr;
    if (!bias && !z) return;
    float* Y = y.data<float>();
    const int64_t rows = y.numel() / N_, N = N_;
    parallel_for(rows, y.numel() >= (1 << 15) ? rs.threads : 1, [&](int64_t r) {
      float* yr = Y + r * N;
      for (int64_t j = 0; j < N; ++j) yr[j] += (bias ? bias[j] : 0.0f) + (z ? z[r * N + j] : 0.0f);
    });
  }

 private:
  DType dt_;
  Fused f_;
  bool a_vec_ = false, b_vec_ = false;
  int64_t M_ = 0, N_ = 0, K_ = 0;
  std::vector<int64_t> batch_, a_batch_, b_batch_, out_shape_;
};

// hodu.FusedGemm's epilogue activations (fused.cc's reference, in float), by index in kActs.
constexpr const char* kActs[] = {"", "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Clip", "HardSigmoid", "Silu", "Gelu"};
int act_index(const std::string& act) {
  for (int i = 0; i < static_cast<int>(std::size(kActs)); ++i)
    if (act == kActs[i]) return i;
  return -1;
}
float activate(int act, const std::vector<float>& p, float x) {
  auto param = [&](size_t i, float def) { return i < p.size() ? p[i] : def; };
  switch (act) {
    case 1: return x > 0 ? x : 0;
    case 2: return x >= 0 ? x : param(0, 0.01f) * x;
    case 3: return 1 / (1 + std::exp(-x));
    case 4: return std::tanh(x);
    case 5: return std::min(std::max(x, param(0, -INFINITY)), param(1, INFINITY));
    case 6: return std::max(0.0f, std::min(1.0f, param(0, 0.2f) * x + param(1, 0.5f)));
    case 7: return x / (1 + std::exp(-x));
    case 8: return 0.5f * x * (1 + std::erf(x / std::sqrt(2.0f)));
    default: return x;
  }
}

// Y = act(alpha * A' * B' + beta * C + Z), C broadcast to [M, N]; Z (hodu.FusedGemm's residual)
// [M, N] or [N]. Gemm has no activation and no Z.
class RuntimeGemmStep : public TensorStep {
 public:
  RuntimeGemmStep(bool ta, bool tb, float alpha, float beta, int act = 0, std::vector<float> act_params = {})
      : ta_(ta), tb_(tb), alpha_(alpha), beta_(beta), act_(act), act_params_(std::move(act_params)) {}

  void configure(const std::vector<const Tensor*>& in) override {
    const Tensor &a = *in[0], &b = *in[1];
    HODU_CHECK(a.rank() == 2 && b.rank() == 2, ErrorCode::InvalidArgument, "{}: Gemm takes 2-D A and B (ranks {}, {})",
               label, a.rank(), b.rank());
    M_ = ta_ ? a.dim(1) : a.dim(0);
    K_ = ta_ ? a.dim(0) : a.dim(1);
    N_ = tb_ ? b.dim(0) : b.dim(1);
    const int64_t kb = tb_ ? b.dim(1) : b.dim(0);
    HODU_CHECK(kb == K_, ErrorCode::InvalidArgument, "{}: Gemm inner dims differ ({} and {})", label, K_, kb);
    if (in.size() > 2 && in[2]) {
      const auto& c = in[2]->shape();
      HODU_CHECK(c.size() <= 2, ErrorCode::InvalidArgument, "{}: Gemm's C has rank {}", label, c.size());
      c_rows_ = c.size() == 2 ? c[0] : 1;
      c_cols_ = c.empty() ? 1 : c.back();
      HODU_CHECK((c_rows_ == 1 || c_rows_ == M_) && (c_cols_ == 1 || c_cols_ == N_), ErrorCode::InvalidArgument,
                 "{}: Gemm's C does not broadcast to [{}, {}]", label, M_, N_);
    }
  }

  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    Tensor& y = out(rs, 0, DType::F32, {M_, N_});
    float* Y = y.data<float>();
    const bool with_c = in.size() > 2 && in[2] && beta_ != 0.0f;
    if (with_c) {
      const float* c = in[2]->data<float>();
      const int64_t N = N_, cr = c_rows_, cc = c_cols_;
      parallel_for(M_, M_ * N_ >= (1 << 15) ? rs.threads : 1, [&](int64_t i) {
        const float* row = c + (cr == 1 ? 0 : i) * cc;
        for (int64_t j = 0; j < N; ++j) Y[i * N + j] = row[cc == 1 ? 0 : j];
      });
    }
    sgemm(ta_, tb_, M_, N_, K_, alpha_, in[0]->data<float>(), in[1]->data<float>(), with_c ? beta_ : 0.0f, Y);
    const Tensor* z = in.size() > 3 ? in[3] : nullptr;
    if (act_ == 0 && !z) return;
    if (z && z->numel() != M_ * N_ && z->numel() != N_)
      fail(ErrorCode::InvalidModel, "{}: addend {} does not match the output [{}, {}]", label, z->type_string(), M_,
           N_);
    const float* zp = z ? z->data<float>() : nullptr;
    const int64_t zrow = z && z->numel() == N_ ? 0 : N_;
    parallel_for(M_, M_ * N_ >= (1 << 15) ? rs.threads : 1, [&](int64_t i) {
      float* y = Y + i * N_;
      const float* zr = zp ? zp + i * zrow : nullptr;
      for (int64_t j = 0; j < N_; ++j) y[j] = activate(act_, act_params_, zr ? y[j] + zr[j] : y[j]);
    });
  }

 private:
  bool ta_, tb_;
  float alpha_, beta_;
  int act_;
  std::vector<float> act_params_;
  int64_t M_ = 0, N_ = 0, K_ = 0, c_rows_ = 1, c_cols_ = 1;
};

}  // namespace

bool make_runtime_matmul(PlanBuilder& b, const Node& n) {
  if (n.domain == "hodu" && n.op_type == "FusedMatMul" && n.inputs.size() >= 2) {
    // Attention's scaled Q·Kᵀ over a sequence length known only while running (a decoder's
    // growing cache, planned once for every length). An activation keeps the interpreter's kernel.
    if (!n.get_string("activation", "").empty()) return false;
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (!n.inputs[i].empty() && dtype_of(b, n.inputs[i]) != DType::F32) return false;
    Fused f;
    f.alpha = n.get_float("alpha", 1.0f);
    f.ta = n.get_int("transA", 0) != 0;
    f.tb = n.get_int("transB", 0) != 0;
    add_tensor_step(b, n, std::make_unique<RuntimeMatMulStep>(DType::F32, f), {DType::F32},
                    "sgemm (shapes known while running)");
    return true;
  }
  if (n.domain == "hodu" && n.op_type == "FusedGemm" && n.inputs.size() >= 2) {
    // Gemm + activation (+ residual) fused over run-time rows: torchvision's box head (Flatten
    // of the RoiAlign of however many proposals the RPN kept -> Linear -> ReLU). With constant
    // weights on AVX-512 the node is planned per row count instead (run_time_node.cc): oneDNN's
    // brgemm matmul on weights packed once, where sgemm here repacks them every run (Faster
    // R-CNN's 12544 x 1024 box head 30.8 → 19.1 ms a run, 2 threads). Below AVX-512 the static
    // product of 150 rows (1x1 convs in column chunks) was slower than sgemm: 88-91 against 82 ms.
    if (passes::constant_of(b.graph(), n.inputs[1]) && vector_math::cpu_isa() == vector_math::Isa::Avx512)
      return false;
    const int act = act_index(n.get_string("activation", ""));
    if (act < 0) return false;  // GeluTanh, unknown names: the interpreter's kernel
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (!n.inputs[i].empty() && dtype_of(b, n.inputs[i]) != DType::F32) return false;
    add_tensor_step(b, n,
                    std::make_unique<RuntimeGemmStep>(n.get_int("transA", 0) != 0, n.get_int("transB", 0) != 0,
                                                      n.get_float("alpha", 1.0f), n.get_float("beta", 1.0f), act,
                                                      n.get_floats("activation_params")),
                    {DType::F32}, "sgemm and epilogue (shapes known while running)");
    return true;
  }
  if (!n.domain.empty() || (n.op_type != "MatMul" && n.op_type != "Gemm") || n.inputs.size() < 2) return false;
  if (n.op_type == "MatMul" && dtype_of(b, n.inputs[0]) == DType::F64 && dtype_of(b, n.inputs[1]) == DType::F64) {
    add_tensor_step(b, n, std::make_unique<RuntimeMatMulStep>(DType::F64), {DType::F64}, "f64 product loop");
    return true;
  }
  for (size_t i = 0; i < n.inputs.size(); ++i)
    if (!n.inputs[i].empty() && dtype_of(b, n.inputs[i]) != DType::F32) return false;
  if (n.op_type == "MatMul") {
    add_tensor_step(b, n, std::make_unique<RuntimeMatMulStep>(DType::F32), {DType::F32},
                    "sgemm (shapes known while running)");
    return true;
  }
  add_tensor_step(b, n,
                  std::make_unique<RuntimeGemmStep>(n.get_int("transA", 0) != 0, n.get_int("transB", 0) != 0,
                                                    n.get_float("alpha", 1.0f), n.get_float("beta", 1.0f)),
                  {DType::F32}, "sgemm (shapes known while running)");
  return true;
}

}  // namespace hodu::cpu
