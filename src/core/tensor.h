// Tensor: shared storage + a view (shape, strides in elements, offset in
// elements). Copies of a Tensor share storage; contiguous() / clone() copy.
// String tensors keep std::string elements; packed 4-bit tensors are always
// contiguous (views of them are not supported).
#pragma once
#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"

namespace hodu {

// Where Storage::allocate takes host memory from. The runtime installs its CPU
// allocator (statistics, limits; runtime/memory); until then the C library's
// aligned_alloc. Blocks must be 64-byte aligned.
class HostMemory {
 public:
  virtual ~HostMemory() = default;
  virtual void* allocate(size_t bytes) = 0;  // throws Error(OutOfMemory) on failure
  virtual void deallocate(void* ptr) = 0;
};

// A block of bytes on a device. Either owned (allocated by hodu) or borrowed
// from the caller with a release callback (numpy arrays, mmapped files).
class Storage {
 public:
  // Blocks allocated before keep their allocator (each holds a reference to it).
  static void set_host_memory(std::shared_ptr<HostMemory> memory);
  static std::shared_ptr<Storage> allocate(size_t bytes, Device device = Device::cpu());
  // Host bytes left as they come (not zeroed): for a buffer its writer fills whole.
  static std::shared_ptr<Storage> allocate_uninitialized(size_t bytes);
  // Wraps memory hodu does not own; `release` runs when the last user is gone.
  static std::shared_ptr<Storage> wrap(void* data, size_t bytes, std::function<void()> release,
                                       Device device = Device::cpu());
  static std::shared_ptr<Storage> strings(size_t n);  // storage of n std::string

  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() { return restore_pending_.load(std::memory_order_acquire) ? restore() : data_; }
  const void* data() const { return const_cast<Storage*>(this)->data(); }
  size_t bytes() const { return bytes_; }

  // Gives the bytes back while keeping a way to rebuild them: the next data() allocates a new
  // block and fills it with `rebuild(block)`. For an engine that holds a weight in its own
  // layout and can rebuild the original from it (EngineOptions::exclusive_weights): the weight
  // is held once. Pointers taken from data() before the release dangle after it. Not for
  // string storage (false, nothing done).
  bool release(std::function<void(void* block)> rebuild);
  bool released() const { return restore_pending_.load(std::memory_order_acquire); }
  Device device() const { return device_; }
  std::vector<std::string>* string_data() { return strings_.get(); }

  // Number of heap allocations made by Storage::allocate since start (tests of
  // "no allocation on the run path" read it).
  static uint64_t allocation_count();

 private:
  Storage() = default;
  static std::shared_ptr<Storage> host(size_t bytes, bool zeroed);
  void* restore();  // data() of a released storage
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
  std::function<void()> release_;
  std::unique_ptr<std::vector<std::string>> strings_;
  std::atomic<bool> restore_pending_{false};
  std::function<void(void*)> rebuild_;
  std::mutex restore_mutex_;
};

class Tensor {
 public:
  Tensor() = default;  // undefined tensor (dtype Undefined); defined() is false

  // New contiguous tensor, zero-filled (strings empty).
  static Tensor empty(DType dtype, std::vector<int64_t> shape, Device device = Device::cpu());
  static Tensor zeros(DType dtype, std::vector<int64_t> shape) { return empty(dtype, std::move(shape)); }
  // Contiguous tensor over existing storage.
  static Tensor from_storage(DType dtype, std::vector<int64_t> shape, std::shared_ptr<Storage> storage,
                             int64_t offset_elements = 0);
  // Copies `bytes` (must match) into a new tensor.
  static Tensor from_bytes(DType dtype, std::vector<int64_t> shape, const void* data, size_t bytes);
  template <typename T>
  static Tensor from_vector(DType dtype, std::vector<int64_t> shape, const std::vector<T>& values) {
    return from_bytes(dtype, std::move(shape), values.data(), values.size() * sizeof(T));
  }
  static Tensor from_strings(std::vector<int64_t> shape, const std::vector<std::string>& values);
  template <typename T>
  static Tensor scalar(DType dtype, T value) { return from_bytes(dtype, {}, &value, sizeof(T)); }

  bool defined() const { return dtype_ != DType::Undefined; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  int64_t offset() const { return offset_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t dim(int64_t i) const { return shape_[i < 0 ? i + rank() : i]; }
  int64_t numel() const;
  size_t nbytes() const { return dtype_storage_bytes(dtype_, numel()); }  // of the view's elements
  bool is_contiguous() const;
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  // Pointer to the first element of the view. Needs a non-string dtype.
  void* raw_data();
  const void* raw_data() const;
  // Typed access to a contiguous view; throws if not contiguous or the size of T
  // does not match the dtype.
  template <typename T> T* data() { check_typed(sizeof(T)); return static_cast<T*>(raw_data()); }
  template <typename T> const T* data() const { check_typed(sizeof(T)); return static_cast<const T*>(raw_data()); }
  // String elements of a contiguous string tensor.
  std::string* string_data();
  const std::string* string_data() const;

  // Views (share storage).
  Tensor reshape(std::vector<int64_t> shape) const;  // needs contiguous; -1 not resolved here
  Tensor permute(const std::vector<int64_t>& perm) const;
  Tensor slice(int64_t axis, int64_t start, int64_t stop, int64_t step = 1) const;
  Tensor as_strided(std::vector<int64_t> shape, std::vector<int64_t> strides, int64_t offset) const;

  // Copies.
  Tensor contiguous() const;  // this when already contiguous, otherwise a packed copy
  Tensor clone() const;       // always a new packed copy
  // Elementwise conversion (ONNX Cast semantics; saturate for float8 targets).
  Tensor cast(DType to, bool saturate = true) const;

  // Element read/write through doubles, for tests and slow generic paths.
  // Index is the flat row-major index in the view.
  double get_double(int64_t flat_index) const;
  void set_double(int64_t flat_index, double value);
  int64_t get_int64(int64_t flat_index) const;
  // Whole tensor as doubles / int64 (row-major).
  std::vector<double> to_doubles() const;
  std::vector<int64_t> to_int64s() const;

  std::string shape_string() const { return shape_to_string(shape_); }
  // "f32[2, 3]"
  std::string type_string() const;

 private:
  void check_typed(size_t elem_size) const;
  int64_t storage_index(int64_t flat_index) const;  // view flat index → storage element index

  DType dtype_ = DType::Undefined;
  std::vector<int64_t> shape_;
  std::vector<int64_t> strides_;  // in elements
  int64_t offset_ = 0;            // in elements
  std::shared_ptr<Storage> storage_;
};

// True when both tensors have the same dtype, shape and element values
// (NaN equal to NaN, bitwise for floats).
bool tensors_bitwise_equal(const Tensor& a, const Tensor& b);

}  // namespace hodu
