#include "engines/interp/ops/op_utils.h"

#include <algorithm>
#include <thread>

namespace hodu::interp {

std::vector<int64_t> broadcast_shapes(const KernelContext& ctx, const std::vector<int64_t>& a,
                                      const std::vector<int64_t>& b) {
  size_t r = std::max(a.size(), b.size());
  std::vector<int64_t> out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da == db || db == 1) out[i] = da;
    else if (da == 1) out[i] = db;
    else
      ctx.fail(ErrorCode::InvalidArgument, "shapes {} and {} cannot be broadcast", shape_to_string(a),
               shape_to_string(b));
  }
  return out;
}

std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& in, const std::vector<int64_t>& out) {
  std::vector<int64_t> s(out.size(), 0);
  auto cs = contiguous_strides(in);
  size_t off = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) s[i + off] = in[i] == 1 ? 0 : cs[i];
  return s;
}

std::vector<int64_t> broadcast_offsets(const std::vector<int64_t>& in, const std::vector<int64_t>& out) {
  int64_t n = shape_numel(out);
  std::vector<int64_t> offs(static_cast<size_t>(n));
  if (n == 0) return offs;
  auto st = broadcast_strides(in, out);
  size_t r = out.size();
  std::vector<int64_t> idx(r, 0);
  int64_t pos = 0;
  for (int64_t k = 0; k < n; ++k) {
    offs[k] = pos;
    for (size_t d = r; d-- > 0;) {
      if (++idx[d] < out[d]) { pos += st[d]; break; }
      pos -= st[d] * (out[d] - 1);
      idx[d] = 0;
    }
  }
  return offs;
}

int64_t normalize_axis(const KernelContext& ctx, int64_t axis, int64_t rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= std::max<int64_t>(rank, 1))
    ctx.fail(ErrorCode::InvalidArgument, "axis {} is out of range for rank {}", axis, rank);
  return a;
}

std::vector<int64_t> tensor_to_int64_vector(const Tensor& t) { return t.to_int64s(); }

bool is_narrow_float(DType t) {
  switch (t) {
    case DType::F16: case DType::BF16: case DType::F8E4M3FN: case DType::F8E4M3FNUZ: case DType::F8E5M2:
    case DType::F8E5M2FNUZ: case DType::F8E8M0: case DType::F4E2M1:
      return true;
    default:
      return false;
  }
}

Tensor widen(const Tensor& t) { return is_narrow_float(t.dtype()) ? t.cast(DType::F32) : t; }

Tensor narrow_to(const Tensor& r, DType target) {
  return r.dtype() == target ? r : r.cast(target);
}

void parallel_for(int threads, int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  int64_t workers = std::min<int64_t>(std::max(threads, 1), std::max<int64_t>(1, n / std::max<int64_t>(min_chunk, 1)));
  if (workers <= 1) { fn(0, n); return; }
  std::vector<std::thread> pool;
  int64_t chunk = (n + workers - 1) / workers;
  for (int64_t w = 1; w < workers; ++w) {
    int64_t b = w * chunk, e = std::min(n, b + chunk);
    if (b < e) pool.emplace_back([&fn, b, e] { fn(b, e); });
  }
  fn(0, std::min(n, chunk));
  for (auto& th : pool) th.join();
}

}  // namespace hodu::interp
