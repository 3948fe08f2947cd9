/* hodu/tensor.h — the eager tensor of hodu's C++ frontend (public).
 *
 *   hodu::Tensor x = hodu::randn({64, 3, 8, 8});
 *   hodu::Tensor w = hodu::zeros({16, 3, 3, 3}).requires_grad_();
 *   hodu::Tensor y = hodu::conv2d(x, w, {}, {1, 1}, {1, 1}).relu().mean();
 *   y.backward();                       // w.grad() now holds dy/dw
 *
 * A Tensor is a reference to shared storage plus a view (shape, strides,
 * offset); copies of a Tensor share it, clone() copies. Ops broadcast like
 * numpy and run at once on the CPU kernels of hodu's cpu engine (oneDNN for
 * matmul, convolution and pooling; vectorized loops elsewhere). Every op
 * records itself on the autograd tape when one of its inputs requires grad
 * and grad mode is on (see hodu/autograd.h). Errors are hodu::Error
 * (hodu/error.h), naming the op and the shapes concerned.
 *
 * Everything here lives in namespace hodu::eager; <hodu/hodu.h> makes it
 * visible as hodu::Tensor, hodu::zeros, ... */
#pragma once
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "hodu/dtype.h"
#include "hodu/error.h"

struct DLManagedTensor;  // <dlpack/dlpack.h>

namespace hodu::eager {

struct TensorImpl;  // internal
class Generator;

using Dims = std::vector<int64_t>;

inline constexpr DType kBool = DType::Bool;
inline constexpr DType kUInt8 = DType::U8;
inline constexpr DType kInt8 = DType::I8;
inline constexpr DType kInt16 = DType::I16;
inline constexpr DType kInt32 = DType::I32;
inline constexpr DType kInt64 = DType::I64;
inline constexpr DType kFloat16 = DType::F16;
inline constexpr DType kBFloat16 = DType::BF16;
inline constexpr DType kFloat32 = DType::F32;
inline constexpr DType kFloat64 = DType::F64;

// One index of Tensor::index: an integer (selects and drops the dim), a Slice,
// NewAxis (inserts a dim of 1), Ellipsis (as many full slices as needed).
inline constexpr int64_t kEnd = std::numeric_limits<int64_t>::max();
struct Slice {
  int64_t start = 0, stop = kEnd, step = 1;
};
struct NewAxisT {};
struct EllipsisT {};
inline constexpr NewAxisT NewAxis{};
inline constexpr EllipsisT Ellipsis{};
using TensorIndex = std::variant<int64_t, Slice, NewAxisT, EllipsisT>;

class Tensor {
 public:
  Tensor();  // undefined: defined() is false
  explicit Tensor(std::shared_ptr<TensorImpl> impl);
  ~Tensor();
  Tensor(const Tensor&);
  Tensor(Tensor&&) noexcept;
  Tensor& operator=(const Tensor&);
  Tensor& operator=(Tensor&&) noexcept;

  // ---- what it is --------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  DType dtype() const;
  const Dims& shape() const;
  const Dims& sizes() const { return shape(); }
  int64_t size(int64_t dim) const;  // negative dims count from the end
  int64_t dim() const;
  int64_t numel() const;
  const Dims& strides() const;  // in elements
  bool is_contiguous() const;
  bool is_floating_point() const;
  std::string type_string() const;  // "f32[2, 3]"
  // The elements as text, cut with a count for large tensors.
  std::string to_string(int64_t max_elements = 64) const;

  // ---- element access --------------------------------------------------
  // First element of the view. Typed form checks the element size and that
  // the view is contiguous.
  void* data_ptr();
  const void* data_ptr() const;
  template <typename T> T* data() { check_access(sizeof(T)); return static_cast<T*>(data_ptr()); }
  template <typename T> const T* data() const { check_access(sizeof(T)); return static_cast<const T*>(data_ptr()); }
  // The value of a one-element tensor, converted.
  double item() const;
  template <typename T> T item() const { return static_cast<T>(item()); }
  // Every element in row-major order, converted (float, double, int32_t, int64_t, uint8_t, bool).
  template <typename T> std::vector<T> to_vector() const;

  // ---- autograd (hodu/autograd.h) ----------------------------------------
  bool requires_grad() const;
  // Marks a leaf as needing its gradient; InvalidArgument on a non-leaf or an integer tensor.
  Tensor& requires_grad_(bool requires_grad = true);
  // The accumulated gradient (undefined until a backward reaches this tensor).
  Tensor grad() const;
  void set_grad(const Tensor& grad);
  // Computes the gradients of this tensor with respect to the leaves of its
  // graph and accumulates them into their grad(). `gradient` is dL/dthis
  // (may be left out for a one-element tensor). retain_graph keeps the saved
  // values for another backward; create_graph records the backward itself.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false, bool create_graph = false) const;
  bool is_leaf() const;
  void retain_grad();  // a non-leaf keeps its grad() too
  bool retains_grad() const;
  std::string grad_fn_name() const;  // "" for leaves
  Tensor detach() const;             // same storage, no history
  Tensor& detach_();
  // Bumped by every in-place change of the storage (shared by views).
  uint64_t version() const;

  // ---- copies and conversions ------------------------------------------
  Tensor to(DType dtype) const;  // this when already of that dtype
  Tensor contiguous() const;     // this when already contiguous
  Tensor clone() const;

  // ---- in-place (the tensor keeps its identity; version() moves) ----------
  Tensor& zero_();
  Tensor& fill_(double value);
  Tensor& copy_(const Tensor& src);  // src broadcast to this shape, cast to this dtype
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& add_(double other);
  Tensor& sub_(const Tensor& other, double alpha = 1.0);
  Tensor& sub_(double other);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(double other);
  Tensor& div_(const Tensor& other);
  Tensor& div_(double other);
  Tensor& clamp_(double min, double max);
  Tensor& relu_();
  Tensor& uniform_(double from = 0.0, double to = 1.0, Generator* gen = nullptr);
  Tensor& normal_(double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
  // Replaces the data (shape, dtype, storage) keeping this tensor's identity and
  // autograd flags, like PyTorch's `p.data = t`; no history is recorded.
  void set_data(const Tensor& data);
  Tensor operator+=(const Tensor& o) { return add_(o); }
  Tensor operator+=(double o) { return add_(o); }
  Tensor operator-=(const Tensor& o) { return sub_(o); }
  Tensor operator-=(double o) { return sub_(o); }
  Tensor operator*=(const Tensor& o) { return mul_(o); }
  Tensor operator*=(double o) { return mul_(o); }
  Tensor operator/=(const Tensor& o) { return div_(o); }
  Tensor operator/=(double o) { return div_(o); }

  // ---- shape (views where the strides allow, like PyTorch) ----------------
  Tensor reshape(const Dims& shape) const;  // one dim may be -1
  Tensor view(const Dims& shape) const;     // as reshape, but never copies (InvalidArgument if it must)
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor unflatten(int64_t dim, const Dims& sizes) const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor permute(const Dims& perm) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  // 2-D transpose
  Tensor expand(const Dims& shape) const;  // -1 keeps a dim
  Tensor expand_as(const Tensor& other) const { return expand(other.shape()); }
  Tensor repeat(const Dims& repeats) const;
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;
  Tensor flip(const Dims& dims) const;

  // ---- indexing ------------------------------------------------------------
  Tensor select(int64_t dim, int64_t index) const;  // drops the dim
  Tensor slice(int64_t dim, int64_t start = 0, int64_t stop = kEnd, int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor operator[](int64_t index) const { return select(0, index); }
  Tensor index(const std::vector<TensorIndex>& indices) const;
  Tensor index_select(int64_t dim, const Tensor& index) const;
  Tensor gather(int64_t dim, const Tensor& index) const;
  Tensor masked_fill(const Tensor& mask, double value) const;

  // ---- math ----------------------------------------------------------------
  Tensor abs() const;
  Tensor neg() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor log1p() const;
  Tensor sqrt() const;
  Tensor rsqrt() const;
  Tensor square() const;
  Tensor reciprocal() const;
  Tensor sin() const;
  Tensor cos() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor relu() const;
  Tensor erf() const;
  Tensor sign() const;
  Tensor floor() const;
  Tensor ceil() const;
  Tensor round() const;
  Tensor pow(double exponent) const;
  Tensor pow(const Tensor& exponent) const;
  Tensor clamp(double min, double max) const;
  Tensor clamp_min(double min) const;
  Tensor clamp_max(double max) const;
  Tensor matmul(const Tensor& other) const;
  Tensor mm(const Tensor& other) const;  // 2-D only
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;

  // Reductions: over every element, or over `dims` (negative ones count from
  // the end). sum/mean of integers give i64 / f32.
  Tensor sum() const;
  Tensor sum(const Dims& dims, bool keepdim = false) const;
  Tensor sum(int64_t dim, bool keepdim = false) const { return sum(Dims{dim}, keepdim); }
  Tensor mean() const;
  Tensor mean(const Dims& dims, bool keepdim = false) const;
  Tensor mean(int64_t dim, bool keepdim = false) const { return mean(Dims{dim}, keepdim); }
  Tensor prod(int64_t dim, bool keepdim = false) const;
  Tensor var(const Dims& dims, bool unbiased = true, bool keepdim = false) const;
  Tensor std(const Dims& dims, bool unbiased = true, bool keepdim = false) const;
  Tensor amax(const Dims& dims, bool keepdim = false) const;
  Tensor amin(const Dims& dims, bool keepdim = false) const;
  Tensor amax(int64_t dim, bool keepdim = false) const { return amax(Dims{dim}, keepdim); }
  Tensor amin(int64_t dim, bool keepdim = false) const { return amin(Dims{dim}, keepdim); }
  Tensor max() const;  // of all elements
  Tensor min() const;
  std::pair<Tensor, Tensor> max(int64_t dim, bool keepdim = false) const;  // values, indices (i64)
  std::pair<Tensor, Tensor> min(int64_t dim, bool keepdim = false) const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  Tensor argmin(int64_t dim, bool keepdim = false) const;
  Tensor logsumexp(const Dims& dims, bool keepdim = false) const;
  Tensor norm(double p = 2.0) const;  // of all elements

  // Comparisons give bool tensors (no gradient).
  Tensor eq(const Tensor& o) const;
  Tensor ne(const Tensor& o) const;
  Tensor lt(const Tensor& o) const;
  Tensor le(const Tensor& o) const;
  Tensor gt(const Tensor& o) const;
  Tensor ge(const Tensor& o) const;
  Tensor eq(double o) const;
  Tensor ne(double o) const;
  Tensor lt(double o) const;
  Tensor le(double o) const;
  Tensor gt(double o) const;
  Tensor ge(double o) const;
  Tensor logical_not() const;
  Tensor any() const;
  Tensor all() const;

  // The implementation (frontend internals).
  const std::shared_ptr<TensorImpl>& impl() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

 private:
  void check_access(size_t element_size) const;
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// ---- creation ------------------------------------------------------------
Tensor empty(const Dims& shape, DType dtype = kFloat32);  // uninitialized
Tensor zeros(const Dims& shape, DType dtype = kFloat32);
Tensor ones(const Dims& shape, DType dtype = kFloat32);
Tensor full(const Dims& shape, double value, DType dtype = kFloat32);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
Tensor scalar_tensor(double value, DType dtype = kFloat32);  // 0-dim
Tensor arange(double end, DType dtype = kInt64);
Tensor arange(double start, double end, double step = 1.0, DType dtype = kInt64);
Tensor linspace(double start, double end, int64_t steps, DType dtype = kFloat32);
Tensor eye(int64_t n, DType dtype = kFloat32);
// Copies the values (their count must match the shape; {} shape = 1-D of all values).
Tensor tensor(const std::vector<float>& values, const Dims& shape = {});
Tensor tensor(const std::vector<double>& values, const Dims& shape = {});
Tensor tensor(const std::vector<int64_t>& values, const Dims& shape = {});
Tensor tensor(const std::vector<int32_t>& values, const Dims& shape = {});
// hodu::tensor({1.5f, 2.0f}), hodu::tensor({1, 2, 3}, {3, 1}): the list's element type picks the dtype.
inline Tensor tensor(std::initializer_list<float> v, const Dims& shape = {}) { return tensor(std::vector<float>(v), shape); }
inline Tensor tensor(std::initializer_list<double> v, const Dims& shape = {}) { return tensor(std::vector<double>(v), shape); }
inline Tensor tensor(std::initializer_list<int64_t> v, const Dims& shape = {}) { return tensor(std::vector<int64_t>(v), shape); }
inline Tensor tensor(std::initializer_list<int32_t> v, const Dims& shape = {}) { return tensor(std::vector<int32_t>(v), shape); }
// A tensor over the caller's memory, no copy: `data` must outlive every tensor sharing it.
// strides in elements ({}: row-major).
Tensor from_blob(void* data, const Dims& shape, DType dtype = kFloat32, const Dims& strides = {});
// DLPack: the returned DLManagedTensor holds a reference to t's storage (compact views only);
// from_dlpack takes ownership of `m` and calls its deleter when the last user is gone.
DLManagedTensor* to_dlpack(const Tensor& t);
Tensor from_dlpack(DLManagedTensor* m);
// .npy files (numpy's format): one tensor.
Tensor load_npy(const std::string& path);
void save_npy(const std::string& path, const Tensor& t);

// ---- random (hodu/random.h has Generator; nullptr: the default generator) --
void manual_seed(uint64_t seed);  // seeds the default generator
Tensor rand(const Dims& shape, Generator* gen = nullptr, DType dtype = kFloat32);   // U[0, 1)
Tensor randn(const Dims& shape, Generator* gen = nullptr, DType dtype = kFloat32);  // N(0, 1)
Tensor randint(int64_t low, int64_t high, const Dims& shape, Generator* gen = nullptr, DType dtype = kInt64);
Tensor randperm(int64_t n, Generator* gen = nullptr);  // i64
Tensor bernoulli(const Tensor& p, Generator* gen = nullptr);

// ---- elementwise with broadcasting ---------------------------------------
Tensor add(const Tensor& a, const Tensor& b, double alpha = 1.0);
Tensor sub(const Tensor& a, const Tensor& b, double alpha = 1.0);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& condition, const Tensor& a, double b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator-(const Tensor& a);
// The dtype an op of a and b computes in (PyTorch's promotion: bool < integers
// < floats; a 0-dim tensor does not widen a tensor of its own kind).
DType result_type(const Tensor& a, const Tensor& b);

// ---- joining -----------------------------------------------------------------
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);

// ---- linear algebra and neural-network ops --------------------------------
Tensor matmul(const Tensor& a, const Tensor& b);  // numpy semantics (1-D, batched, broadcast)
// y = x · weightᵀ + bias; weight [out, in], bias [out] or undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// x [N, C, L] / [N, C, H, W]; weight [O, C / groups, k...]; bias [O] or undefined.
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), int64_t stride = 1,
              int64_t padding = 0, int64_t dilation = 1, int64_t groups = 1);
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), Dims stride = {1, 1},
              Dims padding = {0, 0}, Dims dilation = {1, 1}, int64_t groups = 1);
// stride {}: the kernel size. x [N, C, H, W] (or [N, C, L] for the 1-D forms).
Tensor max_pool2d(const Tensor& x, Dims kernel, Dims stride = {}, Dims padding = {0, 0}, Dims dilation = {1, 1},
                  bool ceil_mode = false);
Tensor avg_pool2d(const Tensor& x, Dims kernel, Dims stride = {}, Dims padding = {0, 0}, bool ceil_mode = false,
                  bool count_include_pad = true);
Tensor max_pool1d(const Tensor& x, int64_t kernel, int64_t stride = 0, int64_t padding = 0);
Tensor avg_pool1d(const Tensor& x, int64_t kernel, int64_t stride = 0, int64_t padding = 0);
Tensor adaptive_avg_pool2d(const Tensor& x, Dims output_size);  // output sizes dividing the input's
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
Tensor relu(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor abs(const Tensor& x);
// approximate: "none" (erf) or "tanh".
Tensor gelu(const Tensor& x, const std::string& approximate = "none");
Tensor silu(const Tensor& x);
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
Tensor elu(const Tensor& x, double alpha = 1.0);
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
Tensor hardtanh(const Tensor& x, double min = -1.0, double max = 1.0);
// Normalization over the last dims `normalized_shape`; weight/bias may be undefined.
Tensor layer_norm(const Tensor& x, const Dims& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// x [N, C, ...]. training: batch statistics (running_mean/var updated in place when defined,
// with the unbiased variance, as PyTorch); else the running statistics.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum = 0.1, double eps = 1e-5);
Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx = -1);
Tensor one_hot(const Tensor& indices, int64_t num_classes);  // i64
Tensor dropout(const Tensor& x, double p, bool training, Generator* gen = nullptr);

// ---- comparing -----------------------------------------------------------------
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
bool equal(const Tensor& a, const Tensor& b);  // same shape and values

// ---- threads ---------------------------------------------------------------------
// Threads of every eager kernel (oneDNN included); default: HODU_NUM_THREADS, else the cores.
void set_num_threads(int threads);
int get_num_threads();

}  // namespace hodu::eager
