// Kernels on core tensors (hodu::Tensor: any strides, the dtypes of training):
// elementwise ops with broadcasting, reductions, softmax, matmul and
// convolution and pooling with their backward passes on oneDNN, layer and batch
// normalization forward and backward. They know no graph and no autograd: the
// C++ frontend's eager ops (src/frontend/tensor) and the cpu engine's training
// kernels (src/engines/cpu/training_ops.cc) both call them. Threads:
// set_num_threads, or a ThreadScope for the calling thread.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace hodu::tensor_kernels {

template <typename T>
struct Tag {
  using type = T;
};

// Runs f(Tag<T>{}) for the C++ type of a compute dtype (f32, f64, i64, i32).
template <typename F>
void dispatch_compute(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::F32: f(Tag<float>{}); return;
    case DType::F64: f(Tag<double>{}); return;
    case DType::I64: f(Tag<int64_t>{}); return;
    case DType::I32: f(Tag<int32_t>{}); return;
    default: fail(ErrorCode::Unsupported, "{}: no kernel for dtype {}", op, dtype_name(dt));
  }
}
// f32 and f64 only.
template <typename F>
void dispatch_float(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::F32: f(Tag<float>{}); return;
    case DType::F64: f(Tag<double>{}); return;
    default: fail(ErrorCode::Unsupported, "{}: no kernel for dtype {} (f32 and f64 only)", op, dtype_name(dt));
  }
}

// The dtype a kernel computes a dtype in: f16/bf16 in f32, narrow integers and bool in i64.
DType compute_dtype(DType dt);
bool is_float(DType dt);  // f16, bf16, f32, f64
// A new row-major tensor, its bytes uninitialized (64-byte aligned).
hodu::Tensor empty(DType dtype, const std::vector<int64_t>& shape);
// `t` in dtype `dt` (t itself when it already is).
hodu::Tensor cast(const hodu::Tensor& t, DType dt);
// `t` row-major (t itself when it already is).
hodu::Tensor contiguous(const hodu::Tensor& t);
// dst[...] = src broadcast to dst's shape, converted to dst's dtype (dst may be any view).
void copy_into(hodu::Tensor& dst, const hodu::Tensor& src);
void fill(hodu::Tensor& dst, double value);

enum class BinaryOp { Add, Sub, Mul, Div, Pow, Max, Min, Eq, Ne, Lt, Le, Gt, Ge, And, Or };
bool is_comparison(BinaryOp op);
// out = a op b, broadcast; a and b in the compute dtype `dt`; comparisons give bool.
hodu::Tensor binary(BinaryOp op, const hodu::Tensor& a, const hodu::Tensor& b, const char* name);
// out (already shaped, a view or not) = a op b in place of out: in-place ops.
void binary_into(BinaryOp op, hodu::Tensor& out, const hodu::Tensor& a, const hodu::Tensor& b, const char* name);
// a + alpha * b (axpy form of add/sub).
hodu::Tensor add_scaled(const hodu::Tensor& a, const hodu::Tensor& b, double alpha);

enum class UnaryOp {
  Neg, Abs, Exp, Log, Log1p, Sqrt, Rsqrt, Square, Reciprocal, Sin, Cos, Tanh, Sigmoid, Relu, Erf, Sign, Floor, Ceil,
  Round, Gelu, GeluTanh, Silu, LeakyRelu, Elu, Softplus, Clamp, PowScalar, Not,
  // gradients: out = g * f'(x) given (g, x) — binary_grad
};
struct UnaryParams {
  double a = 0, b = 0;  // LeakyRelu slope; Elu alpha; Softplus beta, threshold; Clamp min, max; PowScalar exponent
};
hodu::Tensor unary(UnaryOp op, const hodu::Tensor& x, const UnaryParams& p = {});
void unary_into(UnaryOp op, hodu::Tensor& out, const hodu::Tensor& x, const UnaryParams& p = {});

// Gradients of the activations: out = g * f'(x) (or of y = f(x) where noted).
enum class GradOp { Relu, Gelu, GeluTanh, Silu, Sigmoid /* of y */, Tanh /* of y */, LeakyRelu, Elu, Softplus,
                    Clamp, Erf };
hodu::Tensor unary_grad(GradOp op, const hodu::Tensor& g, const hodu::Tensor& x, const UnaryParams& p = {});

// out = where(cond, a, b), a/b in one dtype.
hodu::Tensor where(const hodu::Tensor& cond, const hodu::Tensor& a, const hodu::Tensor& b);

enum class ReduceOp { Sum, Mean, Max, Min, Prod, ArgMax, ArgMin, Any, All };
// Reduces dims `dims` (sorted, unique, non-negative) of x; argmax/argmin need one dim, give i64.
hodu::Tensor reduce(ReduceOp op, const hodu::Tensor& x, const std::vector<int64_t>& dims, bool keepdim);

// Softmax / log-softmax over the last dim of a contiguous [rows, n] view (f32/f64).
hodu::Tensor softmax_last(const hodu::Tensor& x, bool log);
// Their gradients given the output y: softmax: y * (g - sum(g * y)); log: g - exp(y) * sum(g).
hodu::Tensor softmax_last_grad(const hodu::Tensor& g, const hodu::Tensor& y, bool log);

// C = A · B for row-major or transposed-view 2-D+ operands with broadcast batch dims
// (numpy matmul on rank >= 2 tensors, no 1-D promotion); bias [N] added when given.
hodu::Tensor matmul(const hodu::Tensor& a, const hodu::Tensor& b, const hodu::Tensor* bias = nullptr);

}  // namespace hodu::tensor_kernels

namespace hodu::tensor_kernels {

// 2-D convolution, NCHW; weights [O, C / groups, kh, kw]; inputs row-major.
struct ConvParams {
  std::vector<int64_t> stride, padding, dilation;  // 2 each
  int64_t groups = 1;
};
std::vector<int64_t> conv2d_output_shape(const std::vector<int64_t>& x, const std::vector<int64_t>& w,
                                         const ConvParams& p);
hodu::Tensor conv2d(const hodu::Tensor& x, const hodu::Tensor& w, const hodu::Tensor* bias, const ConvParams& p);
hodu::Tensor conv2d_backward_input(const hodu::Tensor& g, const hodu::Tensor& w, const std::vector<int64_t>& x_shape,
                                   const ConvParams& p);
// dw (and db when with_bias) from the output gradient g and the input x.
void conv2d_backward_weight(const hodu::Tensor& g, const hodu::Tensor& x, const std::vector<int64_t>& w_shape,
                            const ConvParams& p, bool with_bias, hodu::Tensor& dw, hodu::Tensor& db);

// 2-D pooling, NCHW, row-major input.
struct PoolParams {
  std::vector<int64_t> kernel, stride, padding, dilation;  // 2 each
  bool ceil_mode = false;
  bool count_include_pad = true;  // average pooling
};
std::vector<int64_t> pool2d_output_shape(const std::vector<int64_t>& x, const PoolParams& p);
// Max pooling keeps what its backward needs in `saved` (oneDNN's workspace or the argmax indices).
hodu::Tensor max_pool2d(const hodu::Tensor& x, const PoolParams& p, hodu::Tensor& saved);
hodu::Tensor max_pool2d_backward(const hodu::Tensor& g, const std::vector<int64_t>& x_shape, const hodu::Tensor& saved,
                                 const PoolParams& p);
hodu::Tensor avg_pool2d(const hodu::Tensor& x, const PoolParams& p);
hodu::Tensor avg_pool2d_backward(const hodu::Tensor& g, const std::vector<int64_t>& x_shape, const PoolParams& p);

}  // namespace hodu::tensor_kernels

namespace hodu::tensor_kernels {

// Layer normalization over the last D values of each of `rows` rows (x row-major [rows, D]);
// weight/bias [D] or null. Gives y and each row's mean and 1/std (for the backward).
void layer_norm(const hodu::Tensor& x, const hodu::Tensor* weight, const hodu::Tensor* bias, double eps,
                hodu::Tensor& y, hodu::Tensor& mean, hodu::Tensor& rstd);
// dx, and dw/db when weight is given.
void layer_norm_backward(const hodu::Tensor& g, const hodu::Tensor& x, const hodu::Tensor& mean,
                         const hodu::Tensor& rstd, const hodu::Tensor* weight, hodu::Tensor& dx, hodu::Tensor& dw,
                         hodu::Tensor& db);

// Batch normalization of a row-major [N, C, S] (S: the spatial size). training: batch
// statistics (biased variance), given back in mean/invstd (and the unbiased variance in
// var_unbiased); else running_mean/running_var are used. weight/bias [C] or null.
void batch_norm(const hodu::Tensor& x, const hodu::Tensor* weight, const hodu::Tensor* bias,
                const hodu::Tensor* running_mean, const hodu::Tensor* running_var, bool training, double eps,
                hodu::Tensor& y, hodu::Tensor& mean, hodu::Tensor& invstd, hodu::Tensor& var_unbiased);
void batch_norm_backward(const hodu::Tensor& g, const hodu::Tensor& x, const hodu::Tensor& mean,
                         const hodu::Tensor& invstd, const hodu::Tensor* weight, bool training, hodu::Tensor& dx,
                         hodu::Tensor& dw, hodu::Tensor& db);

}  // namespace hodu::tensor_kernels
