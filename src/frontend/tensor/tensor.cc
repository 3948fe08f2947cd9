// The eager Tensor's handle: construction, what it is, element access,
// printing, and its autograd flags.
#include <cmath>
#include <ostream>
#include <sstream>

#include "core/element_access.h"
#include "frontend/autograd/node.h"
#include "kernels/cpu/tensor/kernels.h"
#include "frontend/tensor/tensor_impl.h"
#include "hodu/autograd.h"

namespace hodu::eager {

Tensor::Tensor() = default;
Tensor::Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}
Tensor::~Tensor() = default;
Tensor::Tensor(const Tensor&) = default;
Tensor::Tensor(Tensor&&) noexcept = default;
Tensor& Tensor::operator=(const Tensor&) = default;
Tensor& Tensor::operator=(Tensor&&) noexcept = default;

const hodu::Tensor& core(const Tensor& t, const char* op) {
  HODU_CHECK(t.defined(), ErrorCode::InvalidArgument, "{}: an input is an undefined tensor", op);
  return t.impl()->data;
}

namespace {
const TensorImpl& must(const std::shared_ptr<TensorImpl>& impl, const char* what) {
  HODU_CHECK(impl != nullptr, ErrorCode::InvalidArgument, "Tensor::{}: the tensor is undefined", what);
  return *impl;
}
}  // namespace

DType Tensor::dtype() const { return impl_ ? impl_->data.dtype() : DType::Undefined; }
const Dims& Tensor::shape() const { return must(impl_, "shape").data.shape(); }
const Dims& Tensor::strides() const { return must(impl_, "strides").data.strides(); }
int64_t Tensor::dim() const { return must(impl_, "dim").data.rank(); }
int64_t Tensor::numel() const { return must(impl_, "numel").data.numel(); }
bool Tensor::is_contiguous() const { return must(impl_, "is_contiguous").data.is_contiguous(); }
bool Tensor::is_floating_point() const { return kernels::is_float(dtype()); }

int64_t Tensor::size(int64_t d) const {
  const int64_t r = dim();
  HODU_CHECK(d >= -r && d < r, ErrorCode::InvalidArgument, "Tensor::size: dim {} is out of range for a {}-d tensor",
             d, r);
  return shape()[d < 0 ? d + r : d];
}

std::string Tensor::type_string() const { return impl_ ? impl_->data.type_string() : "undefined"; }

void* Tensor::data_ptr() { return const_cast<void*>(static_cast<const Tensor*>(this)->data_ptr()); }
const void* Tensor::data_ptr() const { return must(impl_, "data_ptr").data.raw_data(); }

void Tensor::check_access(size_t element_size) const {
  const TensorImpl& impl = must(impl_, "data");
  HODU_CHECK(impl.data.is_contiguous(), ErrorCode::InvalidArgument,
             "Tensor::data<T>: the {} view is not contiguous (call contiguous() first)", type_string());
  HODU_CHECK(static_cast<size_t>(dtype_bits(dtype()) / 8) == element_size, ErrorCode::InvalidArgument,
             "Tensor::data<T>: a {}-byte element type for a {} tensor", element_size, dtype_name(dtype()));
}

double Tensor::item() const {
  const TensorImpl& impl = must(impl_, "item");
  HODU_CHECK(impl.data.numel() == 1, ErrorCode::InvalidArgument,
             "Tensor::item: a tensor of shape {} has {} elements, not one", shape_to_string(impl.data.shape()),
             impl.data.numel());
  return impl.data.get_double(0);
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  const TensorImpl& impl = must(impl_, "to_vector");
  DType want = std::is_same_v<T, float> ? DType::F32 : std::is_same_v<T, double> ? DType::F64
             : std::is_same_v<T, int64_t> ? DType::I64 : std::is_same_v<T, int32_t> ? DType::I32
             : std::is_same_v<T, bool> ? DType::Bool : DType::U8;
  hodu::Tensor c = kernels::contiguous(kernels::cast(impl.data, want));
  std::vector<T> out(c.numel());
  if constexpr (std::is_same_v<T, bool>) {
    const uint8_t* p = static_cast<const uint8_t*>(c.raw_data());
    for (size_t i = 0; i < out.size(); ++i) out[i] = p[i] != 0;
  } else {
    std::memcpy(out.data(), c.raw_data(), out.size() * sizeof(T));
  }
  return out;
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;
template std::vector<uint8_t> Tensor::to_vector<uint8_t>() const;
template std::vector<bool> Tensor::to_vector<bool>() const;

std::string Tensor::to_string(int64_t max_elements) const {
  if (!impl_) return "undefined";
  const hodu::Tensor& d = impl_->data;
  std::ostringstream os;
  os << d.type_string() << " ";
  const int64_t n = d.numel();
  const int64_t shown = std::min(n, std::max<int64_t>(max_elements, 0));
  std::vector<double> v;
  v.reserve(shown);
  for (int64_t i = 0; i < shown; ++i) v.push_back(d.get_double(i));
  // Nested brackets over the shape, as numpy prints.
  int64_t k = 0;
  std::function<void(size_t)> rec = [&](size_t axis) {
    if (axis == d.shape().size()) {
      if (k < shown) {
        double x = v[k];
        if (kernels::is_float(d.dtype())) os << x;
        else os << static_cast<int64_t>(x);
      }
      ++k;
      return;
    }
    os << "[";
    for (int64_t i = 0; i < d.shape()[axis] && k < shown; ++i) {
      if (i) os << ", ";
      rec(axis + 1);
    }
    os << "]";
  };
  rec(0);
  if (shown < n) os << " ... (" << n << " elements)";
  if (requires_grad()) os << (impl_->grad_fn ? " grad_fn=" + impl_->grad_fn->name() : std::string(" requires_grad"));
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.to_string(); }

void set_num_threads(int threads) { kernels::set_num_threads(threads); }
int get_num_threads() { return kernels::num_threads(); }

// ---- autograd flags --------------------------------------------------------

bool Tensor::requires_grad() const { return impl_ && (impl_->requires_grad || impl_->grad_fn); }

Tensor& Tensor::requires_grad_(bool on) {
  TensorImpl& impl = const_cast<TensorImpl&>(must(impl_, "requires_grad_"));
  HODU_CHECK(!impl.grad_fn || on, ErrorCode::InvalidArgument,
             "requires_grad_(false) on a non-leaf tensor (made by {}): use detach()", impl.grad_fn->name());
  if (impl.grad_fn) return *this;
  HODU_CHECK(!on || kernels::is_float(impl.data.dtype()), ErrorCode::InvalidArgument,
             "requires_grad_: only floating-point tensors can require gradients, not {}", dtype_name(impl.data.dtype()));
  impl.requires_grad = on;
  return *this;
}

Tensor Tensor::grad() const { return must(impl_, "grad").grad; }

void Tensor::set_grad(const Tensor& g) {
  TensorImpl& impl = const_cast<TensorImpl&>(must(impl_, "set_grad"));
  if (g.defined())
    HODU_CHECK(g.shape() == impl.data.shape(), ErrorCode::InvalidArgument,
               "set_grad: a gradient of shape {} for a tensor of shape {}", shape_to_string(g.shape()),
               shape_to_string(impl.data.shape()));
  impl.grad = g;
}

bool Tensor::is_leaf() const { return !must(impl_, "is_leaf").grad_fn; }

void Tensor::retain_grad() {
  TensorImpl& impl = const_cast<TensorImpl&>(must(impl_, "retain_grad"));
  HODU_CHECK(requires_grad(), ErrorCode::InvalidArgument, "retain_grad on a tensor that does not require grad");
  if (!impl.grad_fn) return;  // leaves keep their grad anyway
  impl.retains_grad = true;
  impl.grad_fn->retained[impl.output_nr] = impl_;
}

bool Tensor::retains_grad() const { return impl_ && impl_->retains_grad; }

std::string Tensor::grad_fn_name() const { return impl_ && impl_->grad_fn ? impl_->grad_fn->name() : ""; }

Tensor Tensor::detach() const {
  const TensorImpl& impl = must(impl_, "detach");
  auto out = std::make_shared<TensorImpl>();
  out->data = impl.data;
  out->version = impl.version;
  out->is_view = true;
  return Tensor(std::move(out));
}

Tensor& Tensor::detach_() {
  TensorImpl& impl = const_cast<TensorImpl&>(must(impl_, "detach_"));
  impl.grad_fn.reset();
  impl.requires_grad = false;
  return *this;
}

uint64_t Tensor::version() const { return must(impl_, "version").version->load(std::memory_order_relaxed); }

void Tensor::set_data(const Tensor& data) {
  TensorImpl& impl = const_cast<TensorImpl&>(must(impl_, "set_data"));
  const hodu::Tensor& d = core(data, "set_data");
  HODU_CHECK(!impl.requires_grad || kernels::is_float(d.dtype()), ErrorCode::InvalidArgument,
             "set_data: a tensor that requires grad cannot take {} data", dtype_name(d.dtype()));
  impl.data = d;
  impl.version = data.impl()->version;
  impl.grad_accumulator.reset();  // its recorded shape may be stale
}

}  // namespace hodu::eager
