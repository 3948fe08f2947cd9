#include "core/tensor.h"

#include <atomic>
#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <numeric>

#include "core/element_access.h"
#include "core/huge_pages.h"

namespace hodu {
namespace {

std::atomic<uint64_t> g_allocations{0};
constexpr size_t kAlignment = 64;

// Calls fn(storage_index) for every element of a strided view, in row-major order.
template <typename Fn>
void for_each_index(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides, int64_t offset,
                    Fn&& fn) {
  int64_t n = shape_numel(shape);
  if (n == 0) return;
  size_t rank = shape.size();
  if (rank == 0) { fn(offset); return; }
  std::vector<int64_t> idx(rank, 0);
  int64_t pos = offset;
  for (int64_t k = 0; k < n; ++k) {
    fn(pos);
    for (size_t d = rank; d-- > 0;) {
      if (++idx[d] < shape[d]) { pos += strides[d]; break; }
      pos -= strides[d] * (shape[d] - 1);
      idx[d] = 0;
    }
  }
}

}  // namespace

// ---- Storage ---------------------------------------------------------------

namespace {

class SystemHostMemory : public HostMemory {
 public:
  void* allocate(size_t bytes) override {
    void* p = aligned_alloc_large(kAlignment, bytes);  // Storage::allocate passes a multiple of kAlignment
    if (!p) fail(ErrorCode::OutOfMemory, "out of memory allocating {} bytes on the CPU", bytes);
    return p;
  }
  void deallocate(void* ptr) override { std::free(ptr); }
};

std::mutex g_host_memory_mutex;
std::shared_ptr<HostMemory>& host_memory() {
  static auto* memory = new std::shared_ptr<HostMemory>(std::make_shared<SystemHostMemory>());  // never destroyed
  return *memory;
}

}  // namespace

void Storage::set_host_memory(std::shared_ptr<HostMemory> memory) {
  HODU_CHECK(memory, ErrorCode::InvalidArgument, "Storage::set_host_memory: null allocator");
  std::lock_guard lock(g_host_memory_mutex);
  host_memory() = std::move(memory);
}

namespace {

// A block from the installed host allocator (`bytes` rounded up to kAlignment), with the
// release that gives it back.
struct HostBlock {
  void* data;
  size_t bytes;
  std::function<void()> release;
};

HostBlock host_block(size_t bytes) {
  std::shared_ptr<HostMemory> memory;
  {
    std::lock_guard lock(g_host_memory_mutex);
    memory = host_memory();
  }
  size_t rounded = (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  void* p = memory->allocate(rounded);
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return {p, rounded, [p, memory = std::move(memory)] { memory->deallocate(p); }};
}

}  // namespace

std::shared_ptr<Storage> Storage::host(size_t bytes, bool zeroed) {
  auto s = std::shared_ptr<Storage>(new Storage());
  HostBlock block = host_block(bytes);
  if (zeroed) std::memset(block.data, 0, block.bytes);
  s->data_ = block.data;
  s->bytes_ = bytes;
  s->device_ = Device::cpu();
  s->release_ = std::move(block.release);
  return s;
}

std::shared_ptr<Storage> Storage::allocate(size_t bytes, Device device) {
  HODU_CHECK(device.kind == Device::Kind::CPU, ErrorCode::Unsupported,
             "Storage::allocate: device {} needs its engine's allocator", device.to_string());
  return host(bytes, true);
}

std::shared_ptr<Storage> Storage::allocate_uninitialized(size_t bytes) { return host(bytes, false); }

std::shared_ptr<Storage> Storage::wrap(void* data, size_t bytes, std::function<void()> release, Device device) {
  auto s = std::shared_ptr<Storage>(new Storage());
  s->data_ = data;
  s->bytes_ = bytes;
  s->device_ = device;
  s->release_ = std::move(release);
  return s;
}

std::shared_ptr<Storage> Storage::strings(size_t n) {
  auto s = std::shared_ptr<Storage>(new Storage());
  s->strings_ = std::make_unique<std::vector<std::string>>(n);
  s->data_ = s->strings_->data();
  s->bytes_ = n * sizeof(std::string);
  return s;
}

Storage::~Storage() {
  if (release_) release_();
}

bool Storage::release(std::function<void(void*)> rebuild) {
  std::lock_guard lock(restore_mutex_);
  if (strings_ || device_.kind != Device::Kind::CPU || !rebuild || restore_pending_.load()) return false;
  if (release_) release_();
  release_ = nullptr;
  data_ = nullptr;
  rebuild_ = std::move(rebuild);
  restore_pending_.store(true, std::memory_order_release);
  return true;
}

void* Storage::restore() {
  std::lock_guard lock(restore_mutex_);
  if (restore_pending_.load(std::memory_order_relaxed)) {
    HostBlock block = host_block(bytes_);
    rebuild_(block.data);
    data_ = block.data;
    release_ = std::move(block.release);
    rebuild_ = nullptr;
    restore_pending_.store(false, std::memory_order_release);
  }
  return data_;
}

uint64_t Storage::allocation_count() { return g_allocations.load(std::memory_order_relaxed); }

// ---- Tensor construction ---------------------------------------------------

Tensor Tensor::empty(DType dtype, std::vector<int64_t> shape, Device device) {
  int64_t count = 1;
  for (auto d : shape) {
    HODU_CHECK(d >= 0, ErrorCode::InvalidArgument, "tensor shape {} has a negative dim", shape_to_string(shape));
    // Guard the byte count against overflow (absurd shapes from files).
    HODU_CHECK(!__builtin_mul_overflow(count, d, &count) && count <= (int64_t{1} << 56), ErrorCode::InvalidArgument,
               "tensor shape {} has too many elements", shape_to_string(shape));
  }
  Tensor t;
  t.dtype_ = dtype;
  int64_t n = shape_numel(shape);
  t.storage_ = dtype == DType::String ? Storage::strings(static_cast<size_t>(n))
                                      : Storage::allocate(dtype_storage_bytes(dtype, n), device);
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::from_storage(DType dtype, std::vector<int64_t> shape, std::shared_ptr<Storage> storage,
                            int64_t offset) {
  Tensor t;
  t.dtype_ = dtype;
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  t.offset_ = offset;
  HODU_CHECK(dtype == DType::String || dtype_storage_bytes(dtype, offset + t.numel()) <= storage->bytes(),
             ErrorCode::InvalidArgument, "tensor {} does not fit its storage of {} bytes", t.type_string(),
             storage->bytes());
  t.storage_ = std::move(storage);
  return t;
}

Tensor Tensor::from_bytes(DType dtype, std::vector<int64_t> shape, const void* data, size_t bytes) {
  Tensor t = empty(dtype, std::move(shape));
  HODU_CHECK(bytes == t.nbytes(), ErrorCode::InvalidArgument, "tensor {} needs {} bytes, got {}",
             t.type_string(), t.nbytes(), bytes);
  if (bytes) std::memcpy(t.raw_data(), data, bytes);
  return t;
}

Tensor Tensor::from_strings(std::vector<int64_t> shape, const std::vector<std::string>& values) {
  Tensor t = empty(DType::String, std::move(shape));
  HODU_CHECK(static_cast<int64_t>(values.size()) == t.numel(), ErrorCode::InvalidArgument,
             "string tensor {} needs {} values, got {}", t.type_string(), t.numel(), values.size());
  std::copy(values.begin(), values.end(), t.string_data());
  return t;
}

// ---- Tensor queries --------------------------------------------------------

int64_t Tensor::numel() const { return shape_numel(shape_); }

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;  // nothing to address: any strides will do
  int64_t expect = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expect) return false;
    expect *= shape_[i];
  }
  return true;
}

void* Tensor::raw_data() {
  HODU_CHECK(storage_, ErrorCode::Internal, "raw_data() on an undefined tensor");
  auto* base = static_cast<uint8_t*>(storage_->data());
  if (dtype_ == DType::String) return static_cast<std::string*>(storage_->data()) + offset_;
  HODU_CHECK(!dtype_is_subbyte(dtype_) || (offset_ * dtype_bits(dtype_)) % 8 == 0, ErrorCode::Internal,
             "{}-bit tensor view starts inside a byte", dtype_bits(dtype_));
  return base + dtype_storage_bytes(dtype_, offset_);
}

const void* Tensor::raw_data() const { return const_cast<Tensor*>(this)->raw_data(); }

std::string* Tensor::string_data() {
  HODU_CHECK(dtype_ == DType::String && is_contiguous(), ErrorCode::Internal,
             "string_data() needs a contiguous string tensor, got {}", type_string());
  return static_cast<std::string*>(raw_data());
}
const std::string* Tensor::string_data() const { return const_cast<Tensor*>(this)->string_data(); }

void Tensor::check_typed(size_t elem_size) const {
  HODU_CHECK(is_contiguous(), ErrorCode::Internal, "typed access to a non-contiguous tensor {}", type_string());
  HODU_CHECK(dtype_bits(dtype_) == static_cast<int>(elem_size * 8), ErrorCode::Internal,
             "typed access of {}-byte elements to a {} tensor", elem_size, dtype_name(dtype_));
}

std::string Tensor::type_string() const {
  return fmt::format("{}{}", dtype_name(dtype_), shape_to_string(shape_));
}

int64_t Tensor::storage_index(int64_t flat) const {
  int64_t pos = offset_;
  for (size_t d = shape_.size(); d-- > 0;) {
    int64_t i = flat % shape_[d];
    flat /= shape_[d];
    pos += i * strides_[d];
  }
  return pos;
}

// ---- Views -----------------------------------------------------------------

Tensor Tensor::reshape(std::vector<int64_t> shape) const {
  HODU_CHECK(shape_numel(shape) == numel(), ErrorCode::InvalidArgument, "cannot reshape {} to {}",
             type_string(), shape_to_string(shape));
  Tensor src = is_contiguous() ? *this : contiguous();
  Tensor t = src;
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::permute(const std::vector<int64_t>& perm) const {
  HODU_CHECK(perm.size() == shape_.size(), ErrorCode::InvalidArgument, "permute of rank {} with {} axes",
             rank(), perm.size());
  HODU_CHECK(!dtype_is_subbyte(dtype_), ErrorCode::Unsupported, "strided views of sub-byte ({}) tensors",
             dtype_name(dtype_));
  Tensor t = *this;
  std::vector<bool> seen(perm.size(), false);
  for (size_t i = 0; i < perm.size(); ++i) {
    int64_t p = perm[i];
    HODU_CHECK(p >= 0 && p < rank() && !seen[p], ErrorCode::InvalidArgument, "invalid permutation");
    seen[p] = true;
    t.shape_[i] = shape_[p];
    t.strides_[i] = strides_[p];
  }
  return t;
}

Tensor Tensor::slice(int64_t axis, int64_t start, int64_t stop, int64_t step) const {
  HODU_CHECK(axis >= 0 && axis < rank() && step != 0, ErrorCode::InvalidArgument, "invalid slice");
  HODU_CHECK(!dtype_is_subbyte(dtype_), ErrorCode::Unsupported, "strided views of sub-byte ({}) tensors",
             dtype_name(dtype_));
  Tensor t = *this;
  int64_t n = step > 0 ? std::max<int64_t>(0, (stop - start + step - 1) / step)
                       : std::max<int64_t>(0, (start - stop - step - 1) / -step);
  // The first and the last selected index must lie inside the axis.
  int64_t last = start + (n - 1) * step;
  HODU_CHECK(n == 0 || (start >= 0 && start < shape_[axis] && last >= 0 && last < shape_[axis]),
             ErrorCode::InvalidArgument, "slice [{}:{}:{}] out of range for axis {} of {}", start, stop, step, axis,
             type_string());
  if (n == 0) start = 0;
  t.offset_ += start * strides_[axis];
  t.shape_[axis] = n;
  t.strides_[axis] = strides_[axis] * step;
  return t;
}

Tensor Tensor::as_strided(std::vector<int64_t> shape, std::vector<int64_t> strides, int64_t offset) const {
  HODU_CHECK(shape.size() == strides.size(), ErrorCode::InvalidArgument, "as_strided: rank mismatch");
  Tensor t = *this;
  t.shape_ = std::move(shape);
  t.strides_ = std::move(strides);
  t.offset_ = offset;
  return t;
}

// ---- Copies ----------------------------------------------------------------

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor out = empty(dtype_, shape_);
  if (dtype_ == DType::String) {
    std::string* dst = out.string_data();
    const std::string* base = static_cast<const std::string*>(storage_->data());
    int64_t k = 0;
    for_each_index(shape_, strides_, offset_, [&](int64_t pos) { dst[k++] = base[pos]; });
    return out;
  }
  if (dtype_is_subbyte(dtype_)) {
    HODU_CHECK(is_contiguous(), ErrorCode::Internal, "4-bit tensors are always contiguous");
    std::memcpy(out.raw_data(), raw_data(), nbytes());
    return out;
  }
  size_t es = dtype_bits(dtype_) / 8;
  if (is_contiguous()) {
    std::memcpy(out.raw_data(), raw_data(), nbytes());
    return out;
  }
  auto* dst = static_cast<uint8_t*>(out.raw_data());
  const auto* base = static_cast<const uint8_t*>(storage_->data());
  for_each_index(shape_, strides_, offset_, [&](int64_t pos) {
    std::memcpy(dst, base + pos * es, es);
    dst += es;
  });
  return out;
}

Tensor Tensor::cast(DType to, bool saturate) const {
  if (to == dtype_) return clone();
  HODU_CHECK(dtype_ != DType::String && to != DType::String, ErrorCode::Unsupported,
             "Tensor::cast between {} and {} (string casts live in the Cast op)", dtype_name(dtype_),
             dtype_name(to));
  Tensor src = contiguous();
  Tensor out = empty(to, shape_);
  int64_t n = numel();
  const void* s = src.raw_data();
  void* d = out.raw_data();
  bool int_path = (dtype_is_integer(dtype_) || dtype_ == DType::Bool) && (dtype_is_integer(to) || to == DType::Bool);
  if (int_path) {
    if (dtype_ == DType::U64)
      for (int64_t i = 0; i < n; ++i) store_from_uint64(to, d, i, load_as_uint64(dtype_, s, i));
    else
      for (int64_t i = 0; i < n; ++i) store_from_int64(to, d, i, load_as_int64(dtype_, s, i));
  } else if (dtype_is_integer(dtype_) && dtype_bits(dtype_) == 64 && to != DType::F64 && to != DType::C128) {
    // i64/u64 → f32 and narrower: round once to f32 from the exact integer (as
    // numpy and ONNX do), not through a double first.
    for (int64_t i = 0; i < n; ++i) {
      float f = dtype_ == DType::U64 ? static_cast<float>(load_as_uint64(dtype_, s, i))
                                     : static_cast<float>(load_as_int64(dtype_, s, i));
      store_from_double(to, d, i, f, saturate);
    }
  } else if (dtype_is_integer(to) && dtype_bits(to) == 64) {
    for (int64_t i = 0; i < n; ++i) {
      if (to == DType::U64) store_from_uint64(to, d, i, load_as_uint64(dtype_, s, i));
      else store_from_int64(to, d, i, load_as_int64(dtype_, s, i));
    }
  } else {
    // Floats (f64 → f16/f8/f4 round once from the double: see store_from_double).
    for (int64_t i = 0; i < n; ++i) store_from_double(to, d, i, load_as_double(dtype_, s, i), saturate);
  }
  return out;
}

// ---- Element access --------------------------------------------------------

double Tensor::get_double(int64_t flat) const {
  return load_as_double(dtype_, storage_->data(), storage_index(flat));
}
void Tensor::set_double(int64_t flat, double v) {
  store_from_double(dtype_, storage_->data(), storage_index(flat), v);
}
int64_t Tensor::get_int64(int64_t flat) const {
  return load_as_int64(dtype_, storage_->data(), storage_index(flat));
}

std::vector<double> Tensor::to_doubles() const {
  std::vector<double> out(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) out[i] = get_double(i);
  return out;
}

std::vector<int64_t> Tensor::to_int64s() const {
  std::vector<int64_t> out(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) out[i] = get_int64(i);
  return out;
}

bool tensors_bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  if (a.dtype() == DType::String) {
    auto ca = a.contiguous(), cb = b.contiguous();
    for (int64_t i = 0; i < a.numel(); ++i)
      if (ca.string_data()[i] != cb.string_data()[i]) return false;
    return true;
  }
  auto ca = a.contiguous(), cb = b.contiguous();
  if (dtype_is_subbyte(a.dtype())) {  // the unused bits of the last byte are padding
    DType raw = dtype_is_packed2(a.dtype()) ? DType::U2 : DType::U4;
    for (int64_t i = 0; i < a.numel(); ++i)
      if (load_as_int64(raw, ca.raw_data(), i) != load_as_int64(raw, cb.raw_data(), i)) return false;
    return true;
  }
  return a.nbytes() == 0 || std::memcmp(ca.raw_data(), cb.raw_data(), a.nbytes()) == 0;
}

}  // namespace hodu
