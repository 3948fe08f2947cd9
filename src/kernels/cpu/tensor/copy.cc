// Allocation, strided copies with broadcasting and dtype conversion, fills.
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "core/float_convert.h"
#include "core/huge_pages.h"
#include "kernels/cpu/tensor/kernels.h"
#include "kernels/cpu/tensor/loops.h"

namespace hodu::tensor_kernels {
namespace {

// Storage types with a conversion rule: the plain arithmetic ones, and these.
struct Half { uint16_t bits; };
struct BFloat { uint16_t bits; };
struct Boolean { uint8_t v; };

template <typename S> inline auto value_of(S s) { return s; }
inline float value_of(Half h) { return f16_to_f32(h.bits); }
inline float value_of(BFloat b) { return bf16_to_f32(b.bits); }
inline uint8_t value_of(Boolean b) { return b.v != 0; }

template <typename D> struct Store {
  template <typename V> static D of(V v) { return static_cast<D>(v); }
};
template <> struct Store<Half> {
  template <typename V> static Half of(V v) { return Half{f32_to_f16(static_cast<float>(v))}; }
};
template <> struct Store<BFloat> {
  template <typename V> static BFloat of(V v) { return BFloat{f32_to_bf16(static_cast<float>(v))}; }
};
template <> struct Store<Boolean> {
  template <typename V> static Boolean of(V v) { return Boolean{static_cast<uint8_t>(v != 0)}; }
};

template <typename F>
bool dispatch_storage(DType dt, F&& f) {
  switch (dt) {
    case DType::F32: f(Tag<float>{}); return true;
    case DType::F64: f(Tag<double>{}); return true;
    case DType::I64: f(Tag<int64_t>{}); return true;
    case DType::I32: f(Tag<int32_t>{}); return true;
    case DType::I16: f(Tag<int16_t>{}); return true;
    case DType::I8: f(Tag<int8_t>{}); return true;
    case DType::U8: f(Tag<uint8_t>{}); return true;
    case DType::Bool: f(Tag<Boolean>{}); return true;
    case DType::F16: f(Tag<Half>{}); return true;
    case DType::BF16: f(Tag<BFloat>{}); return true;
    default: return false;
  }
}

template <typename S, typename D>
void convert_loop(const loops::Iter& it) {
  loops::for_each(it, [](char* const* p, const int64_t* s, int64_t n) {
    D* d = reinterpret_cast<D*>(p[0]);
    const S* x = reinterpret_cast<const S*>(p[1]);
    if (s[0] == sizeof(D) && s[1] == sizeof(S)) {
      for (int64_t i = 0; i < n; ++i) d[i] = Store<D>::of(value_of(x[i]));
    } else if (s[0] == sizeof(D) && s[1] == 0) {
      const D v = Store<D>::of(value_of(x[0]));
      for (int64_t i = 0; i < n; ++i) d[i] = v;
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<D*>(p[0] + i * s[0]) = Store<D>::of(value_of(*reinterpret_cast<const S*>(p[1] + i * s[1])));
    }
  });
}

// Same dtype: a byte copy per element of `size` bytes.
template <typename W>
void copy_loop(const loops::Iter& it) {
  loops::for_each(it, [](char* const* p, const int64_t* s, int64_t n) {
    if (s[0] == sizeof(W) && s[1] == sizeof(W)) {
      std::memcpy(p[0], p[1], n * sizeof(W));
    } else if (s[0] == sizeof(W) && s[1] == 0) {
      W v;
      std::memcpy(&v, p[1], sizeof(W));
      W* d = reinterpret_cast<W*>(p[0]);
      for (int64_t i = 0; i < n; ++i) d[i] = v;
    } else {
      for (int64_t i = 0; i < n; ++i) std::memcpy(p[0] + i * s[0], p[1] + i * s[1], sizeof(W));
    }
  });
}

// Freed tensor buffers kept by size for the next tensor of that size: an eager training step
// allocates the same sizes every step, and fresh pages cost a page fault each (a tenth of a
// small transformer's step). At most 512 MiB are held; never destroyed (tensors may outlive
// static destructors).
class BufferCache {
 public:
  static BufferCache& get() {
    static BufferCache* cache = new BufferCache();
    return *cache;
  }
  void* take(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(bytes);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        held_ -= bytes;
        return p;
      }
    }
    return aligned_alloc_large(64, bytes);
  }
  void give(void* p, size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (held_ + bytes <= kMaxHeld) {
        free_[bytes].push_back(p);
        held_ += bytes;
        return;
      }
    }
    std::free(p);
  }

 private:
  static constexpr size_t kMaxHeld = size_t{512} << 20;
  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t held_ = 0;
};

}  // namespace

bool is_float(DType dt) { return dt == DType::F32 || dt == DType::F64 || dt == DType::F16 || dt == DType::BF16; }

DType compute_dtype(DType dt) {
  switch (dt) {
    case DType::F16:
    case DType::BF16: return DType::F32;
    case DType::F32:
    case DType::F64:
    case DType::I64:
    case DType::I32: return dt;
    default: return DType::I64;
  }
}

hodu::Tensor empty(DType dtype, const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    HODU_CHECK(d >= 0, ErrorCode::InvalidArgument, "shape {} has a negative dim", shape_to_string(shape));
    HODU_CHECK(!__builtin_mul_overflow(n, d, &n) && n <= (int64_t{1} << 50), ErrorCode::InvalidArgument,
               "shape {} has too many elements", shape_to_string(shape));
  }
  HODU_CHECK(dtype != DType::String && !dtype_is_subbyte(dtype), ErrorCode::Unsupported,
             "eager tensors of dtype {} are not supported", dtype_name(dtype));
  size_t bytes = dtype_storage_bytes(dtype, n);
  size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  void* p = BufferCache::get().take(rounded);
  if (!p) fail(ErrorCode::OutOfMemory, "out of memory allocating {} bytes for a tensor of shape {}", bytes,
               shape_to_string(shape));
  auto storage = Storage::wrap(p, bytes, [p, rounded] { BufferCache::get().give(p, rounded); });
  return hodu::Tensor::from_storage(dtype, shape, std::move(storage));
}

void copy_into(hodu::Tensor& dst, const hodu::Tensor& src) {
  if (dst.numel() == 0) return;
  loops::Iter it = loops::make_iter(dst, {&src}, "copy");
  if (dst.dtype() == src.dtype()) {
    switch (dtype_bits(dst.dtype())) {
      case 8: return copy_loop<uint8_t>(it);
      case 16: return copy_loop<uint16_t>(it);
      case 32: return copy_loop<uint32_t>(it);
      case 64: return copy_loop<uint64_t>(it);
      default: break;
    }
  }
  bool done = false;
  dispatch_storage(src.dtype(), [&](auto s) {
    dispatch_storage(dst.dtype(), [&](auto d) {
      convert_loop<typename decltype(s)::type, typename decltype(d)::type>(it);
      done = true;
    });
  });
  if (!done) {
    // Rare dtypes (f8, complex, ...): the core tensor's conversion.
    hodu::Tensor c = src.cast(dst.dtype());
    loops::Iter it2 = loops::make_iter(dst, {&c}, "copy");
    int bits = dtype_bits(dst.dtype());
    HODU_CHECK(bits % 8 == 0, ErrorCode::Unsupported, "copy to dtype {}", dtype_name(dst.dtype()));
    if (bits == 8) copy_loop<uint8_t>(it2);
    else if (bits == 16) copy_loop<uint16_t>(it2);
    else if (bits == 32) copy_loop<uint32_t>(it2);
    else if (bits == 64) copy_loop<uint64_t>(it2);
    else fail(ErrorCode::Unsupported, "copy to dtype {}", dtype_name(dst.dtype()));
  }
}

hodu::Tensor cast(const hodu::Tensor& t, DType dt) {
  if (t.dtype() == dt) return t;
  hodu::Tensor out = empty(dt, t.shape());
  copy_into(out, t);
  return out;
}

hodu::Tensor contiguous(const hodu::Tensor& t) {
  if (t.is_contiguous()) return t;
  hodu::Tensor out = empty(t.dtype(), t.shape());
  copy_into(out, t);
  return out;
}

void fill(hodu::Tensor& dst, double value) {
  hodu::Tensor v = empty(DType::F64, {});
  *static_cast<double*>(v.raw_data()) = value;
  if (dst.dtype() == DType::F64 || !dtype_is_integer(dst.dtype())) {
    copy_into(dst, v);
  } else {
    hodu::Tensor iv = empty(DType::I64, {});
    *static_cast<int64_t*>(iv.raw_data()) = static_cast<int64_t>(value);
    copy_into(dst, iv);
  }
}

}  // namespace hodu::tensor_kernels
