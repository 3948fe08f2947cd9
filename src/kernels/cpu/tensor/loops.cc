#include "kernels/cpu/tensor/loops.h"

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "core/error.h"

namespace hodu::tensor_kernels {
namespace {

int default_threads() {
  if (const char* env = std::getenv("HODU_NUM_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
  }
  unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? static_cast<int>(hw) : 1;
}

int& thread_setting() {
  static int threads = default_threads();
  return threads;
}

thread_local int scoped_threads = 0;  // a ThreadScope's, 0 when none

}  // namespace

void set_num_threads(int threads) {
  HODU_CHECK(threads > 0, ErrorCode::InvalidArgument, "set_num_threads: {} threads (give at least 1)", threads);
  thread_setting() = threads;
}

int num_threads() { return scoped_threads > 0 ? scoped_threads : thread_setting(); }

ThreadScope::ThreadScope(int threads) : saved_(scoped_threads) { scoped_threads = threads > 0 ? threads : 0; }
ThreadScope::~ThreadScope() { scoped_threads = saved_; }

namespace loops {

int num_threads() { return tensor_kernels::num_threads(); }

std::vector<int64_t> broadcast_shapes(const std::vector<int64_t>& a, const std::vector<int64_t>& b, const char* op) {
  const size_t r = std::max(a.size(), b.size());
  std::vector<int64_t> out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t x = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t y = i < r - b.size() ? 1 : b[i - (r - b.size())];
    HODU_CHECK(x == y || x == 1 || y == 1, ErrorCode::InvalidArgument,
               "{}: shapes {} and {} do not broadcast (dim {} is {} against {})", op, shape_to_string(a),
               shape_to_string(b), i, x, y);
    out[i] = x == 1 ? y : x;
  }
  return out;
}

Iter make_iter_strided(const std::vector<int64_t>& shape, const std::vector<char*>& bases,
                       const std::vector<std::vector<int64_t>>& strides, const std::vector<int64_t>& elem_sizes) {
  Iter it;
  it.nops = static_cast<int>(bases.size());
  HODU_CHECK(it.nops <= kMaxOperands, ErrorCode::Internal, "make_iter: {} operands", it.nops);
  for (int k = 0; k < it.nops; ++k) it.base[k] = bases[k];
  it.numel = 1;
  for (int64_t d : shape) it.numel *= d;
  // Drop dims of 1; merge a dim into the next inner one when every operand steps through the
  // pair as one dim.
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    std::array<int64_t, kMaxOperands> s{};
    for (int k = 0; k < it.nops; ++k) s[k] = strides[k][d] * elem_sizes[k];
    if (!it.shape.empty()) {
      bool merge = true;
      for (int k = 0; k < it.nops; ++k)
        if (it.strides.back()[k] != s[k] * shape[d]) merge = false;
      if (merge) {
        it.shape.back() *= shape[d];
        it.strides.back() = s;
        continue;
      }
    }
    it.shape.push_back(shape[d]);
    it.strides.push_back(s);
  }
  HODU_CHECK(it.shape.size() <= static_cast<size_t>(kMaxDims), ErrorCode::Unsupported,
             "elementwise loop over {} dims that do not merge (at most {})", it.shape.size(), kMaxDims);
  return it;
}

Iter make_iter(hodu::Tensor& out, const std::vector<const hodu::Tensor*>& inputs, const char* op) {
  const auto& shape = out.shape();
  const size_t r = shape.size();
  std::vector<char*> bases{static_cast<char*>(out.raw_data())};
  std::vector<std::vector<int64_t>> strides{out.strides()};
  std::vector<int64_t> sizes{static_cast<int64_t>(dtype_bits(out.dtype()) / 8)};
  for (const hodu::Tensor* t : inputs) {
    const auto& ts = t->shape();
    HODU_CHECK(ts.size() <= r, ErrorCode::InvalidArgument, "{}: an input of shape {} does not broadcast to {}", op,
               shape_to_string(ts), shape_to_string(shape));
    std::vector<int64_t> st(r, 0);
    const size_t lead = r - ts.size();
    for (size_t i = 0; i < ts.size(); ++i) {
      HODU_CHECK(ts[i] == shape[lead + i] || ts[i] == 1, ErrorCode::InvalidArgument,
                 "{}: an input of shape {} does not broadcast to {}", op, shape_to_string(ts), shape_to_string(shape));
      st[lead + i] = ts[i] == 1 ? 0 : t->strides()[i];
    }
    bases.push_back(static_cast<char*>(const_cast<void*>(t->raw_data())));
    strides.push_back(std::move(st));
    sizes.push_back(dtype_bits(t->dtype()) / 8);
  }
  return make_iter_strided(shape, bases, strides, sizes);
}

}  // namespace loops
}  // namespace hodu::tensor_kernels
