// Creating tensors: filled, ranges, from values, over the caller's memory,
// DLPack, .npy files.
#include <cmath>
#include <cstring>

#include "core/dlpack_tensor.h"
#include "formats/tensor_io.h"
#include "kernels/cpu/tensor/kernels.h"
#include "frontend/tensor/tensor_impl.h"

namespace hodu::eager {

Tensor empty(const Dims& shape, DType dtype) { return make_tensor(kernels::empty(dtype, shape)); }

Tensor full(const Dims& shape, double value, DType dtype) {
  hodu::Tensor t = kernels::empty(dtype, shape);
  kernels::fill(t, value);
  return make_tensor(std::move(t));
}
Tensor zeros(const Dims& shape, DType dtype) { return full(shape, 0.0, dtype); }
Tensor ones(const Dims& shape, DType dtype) { return full(shape, 1.0, dtype); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.dtype()); }
Tensor full_like(const Tensor& t, double value) { return full(t.shape(), value, t.dtype()); }
Tensor scalar_tensor(double value, DType dtype) { return full({}, value, dtype); }

Tensor arange(double end, DType dtype) { return arange(0.0, end, 1.0, dtype); }

Tensor arange(double start, double end, double step, DType dtype) {
  HODU_CHECK(step != 0 && std::isfinite(start) && std::isfinite(end) && std::isfinite(step),
             ErrorCode::InvalidArgument, "arange: start {}, end {}, step {} (step must be non-zero, all finite)", start,
             end, step);
  HODU_CHECK((end - start) * step >= 0, ErrorCode::InvalidArgument,
             "arange: step {} goes away from end {} starting at {}", step, end, start);
  const int64_t n = static_cast<int64_t>(std::ceil((end - start) / step));
  hodu::Tensor t = kernels::empty(DType::F64, {n});
  double* p = static_cast<double*>(t.raw_data());
  for (int64_t i = 0; i < n; ++i) p[i] = start + static_cast<double>(i) * step;
  return make_tensor(kernels::cast(t, dtype));
}

Tensor linspace(double start, double end, int64_t steps, DType dtype) {
  HODU_CHECK(steps >= 0, ErrorCode::InvalidArgument, "linspace: {} steps", steps);
  hodu::Tensor t = kernels::empty(DType::F64, {steps});
  double* p = static_cast<double*>(t.raw_data());
  const double step = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0;
  // Both halves counted from their end, as PyTorch does, so that the last value is exactly `end`.
  for (int64_t i = 0; i < steps; ++i)
    p[i] = i < steps / 2 ? start + step * static_cast<double>(i) : end - step * static_cast<double>(steps - 1 - i);
  return make_tensor(kernels::cast(t, dtype));
}

Tensor eye(int64_t n, DType dtype) {
  Tensor t = zeros({n, n}, dtype);
  hodu::Tensor& c = t.impl()->data;
  for (int64_t i = 0; i < n; ++i) c.set_double(i * n + i, 1.0);
  return t;
}

namespace {
template <typename T>
Tensor from_values(const std::vector<T>& values, const Dims& shape, DType dtype) {
  Dims s = shape.empty() ? Dims{static_cast<int64_t>(values.size())} : shape;
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  HODU_CHECK(n == static_cast<int64_t>(values.size()), ErrorCode::InvalidArgument,
             "tensor: {} values for shape {} ({} elements)", values.size(), shape_to_string(s), n);
  hodu::Tensor t = kernels::empty(dtype, s);
  if (n) std::memcpy(t.raw_data(), values.data(), n * sizeof(T));
  return make_tensor(std::move(t));
}
}  // namespace

Tensor tensor(const std::vector<float>& v, const Dims& s) { return from_values(v, s, DType::F32); }
Tensor tensor(const std::vector<double>& v, const Dims& s) { return from_values(v, s, DType::F64); }
Tensor tensor(const std::vector<int64_t>& v, const Dims& s) { return from_values(v, s, DType::I64); }
Tensor tensor(const std::vector<int32_t>& v, const Dims& s) { return from_values(v, s, DType::I32); }

Tensor from_blob(void* data, const Dims& shape, DType dtype, const Dims& strides) {
  HODU_CHECK(data != nullptr || shape_numel(shape) == 0, ErrorCode::InvalidArgument, "from_blob: null data");
  HODU_CHECK(strides.empty() || strides.size() == shape.size(), ErrorCode::InvalidArgument,
             "from_blob: {} strides for a {}-d shape", strides.size(), shape.size());
  Dims st = strides.empty() ? contiguous_strides(shape) : strides;
  int64_t span = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    HODU_CHECK(shape[i] >= 0 && st[i] >= 0, ErrorCode::InvalidArgument, "from_blob: negative size or stride");
    if (shape[i] > 0) span += (shape[i] - 1) * st[i];
  }
  if (shape_numel(shape) == 0) span = 0;
  auto storage = Storage::wrap(data, dtype_storage_bytes(dtype, span), [] {});
  hodu::Tensor t = hodu::Tensor::from_storage(dtype, Dims(span ? Dims{span} : Dims{0}), std::move(storage));
  return make_tensor(t.as_strided(shape, st, 0));
}

DLManagedTensor* to_dlpack(const Tensor& t) {
  return hodu::to_managed(kernels::contiguous(core(t, "to_dlpack")), "to_dlpack");
}

Tensor from_dlpack(DLManagedTensor* m) {
  HODU_CHECK(m != nullptr, ErrorCode::InvalidArgument, "from_dlpack: null DLManagedTensor");
  return make_tensor(hodu::from_managed(m, "from_dlpack"));
}

Tensor load_npy(const std::string& path) { return make_tensor(read_single_tensor(path)); }

void save_npy(const std::string& path, const Tensor& t) {
  write_tensor_file(path, {{"", kernels::contiguous(core(t, "save_npy"))}});
}

}  // namespace hodu::eager
