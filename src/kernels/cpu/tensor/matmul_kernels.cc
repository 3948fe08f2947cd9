// Matrix products: f32 on oneDNN's matmul (operands read through their
// strides, so a transposed view costs no copy; batch dims broadcast; the
// primitive cached per shape and strides), other dtypes on a plain loop.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/tensor/kernels.h"
#include "kernels/cpu/tensor/loops.h"
#include "kernels/cpu/tensor/onednn.h"

namespace hodu::tensor_kernels {
namespace {

// `t` with its batch dims padded to rank r (strides 0 there: broadcast).
void padded(const hodu::Tensor& t, size_t r, std::vector<int64_t>& dims, std::vector<int64_t>& strides) {
  dims.assign(r - t.rank(), 1);
  strides.assign(r - t.rank(), 0);
  dims.insert(dims.end(), t.shape().begin(), t.shape().end());
  strides.insert(strides.end(), t.strides().begin(), t.strides().end());
  for (size_t i = 0; i < r; ++i)
    if (dims[i] == 1) strides[i] = 0;
}

// oneDNN reads a plain operand through its strides when its two inner dims are row-major or
// column-major; other views (slices with gaps in both) are copied first.
bool usable_strides(const std::vector<int64_t>& dims, const std::vector<int64_t>& st) {
  const size_t r = dims.size();
  const bool rows = st[r - 1] == 1 && st[r - 2] >= dims[r - 1];
  const bool cols = st[r - 2] == 1 && st[r - 1] >= dims[r - 2];
  if (!rows && !cols && !(dims[r - 1] == 1 || dims[r - 2] == 1)) return false;
  for (size_t i = 0; i < r; ++i)
    if (st[i] < 0) return false;
  return true;
}

// oneDNN wants a non-zero stride even for dims of 1.
std::vector<int64_t> dnnl_strides(const std::vector<int64_t>& dims, std::vector<int64_t> st) {
  int64_t span = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    if (st[i] == 0 && dims[i] == 1) st[i] = span;
    span = std::max(span, st[i] * dims[i]);
  }
  return st;
}

struct MatMulPrim {
  dnnl::matmul prim;
  dnnl::memory::desc a, b, bias, c;
  bool reference = false;
};

bool matmul_onednn(const hodu::Tensor& a, const hodu::Tensor& b, const hodu::Tensor* bias, hodu::Tensor& c) {
  const size_t r = c.rank();
  std::vector<int64_t> ad, as, bd, bs;
  padded(a, r, ad, as);
  padded(b, r, bd, bs);
  if (!usable_strides(ad, as) || !usable_strides(bd, bs)) return false;
  as = dnnl_strides(ad, as);
  bs = dnnl_strides(bd, bs);
  const std::string key = "matmul/" + onednn::key_of(ad) + "/" + onednn::key_of(as) + "/" + onednn::key_of(bd) + "/" +
                          onednn::key_of(bs) + (bias ? "/b" : "/") + std::to_string(num_threads());
  auto& p = onednn::cached_as<MatMulPrim>(key, [&] {
    MatMulPrim m;
    m.a = onednn::plain_md(ad, as);
    m.b = onednn::plain_md(bd, bs);
    m.c = onednn::plain_md(c.shape());
    if (bias) {
      std::vector<int64_t> bias_dims(r, 1);
      bias_dims[r - 1] = c.dim(-1);
      m.bias = onednn::plain_md(bias_dims);
    }
    try {
      auto desc = bias ? dnnl::matmul::desc(m.a, m.b, m.bias, m.c) : dnnl::matmul::desc(m.a, m.b, m.c);
      dnnl::matmul::primitive_desc pd(desc, onednn::engine());
      m.reference = onednn::is_reference(pd.impl_info_str());
      if (!m.reference) m.prim = dnnl::matmul(pd);
    } catch (const dnnl::error&) {
      m.reference = true;  // no kernel for these strides: the caller copies or loops
    }
    return m;
  });
  if (p.reference) return false;
  onednn::use_eager_threads();
  std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, onednn::memory(p.a, a.raw_data())},
                                                {DNNL_ARG_WEIGHTS, onednn::memory(p.b, b.raw_data())},
                                                {DNNL_ARG_DST, onednn::memory(p.c, c.raw_data())}};
  if (bias) args[DNNL_ARG_BIAS] = onednn::memory(p.bias, bias->raw_data());
  p.prim.execute(onednn::stream(), args);
  onednn::stream().wait();
  return true;
}

template <typename T>
void matmul_loop(const hodu::Tensor& a, const hodu::Tensor& b, const hodu::Tensor* bias, hodu::Tensor& c) {
  const size_t r = c.rank();
  std::vector<int64_t> ad, as, bd, bs;
  padded(a, r, ad, as);
  padded(b, r, bd, bs);
  const int64_t M = c.dim(-2), N = c.dim(-1), K = ad[r - 1];
  int64_t batch = 1;
  for (size_t i = 0; i + 2 < r; ++i) batch *= c.dim(i);
  const T* A = static_cast<const T*>(a.raw_data());
  const T* B = static_cast<const T*>(b.raw_data());
  const T* bias_p = bias ? static_cast<const T*>(bias->raw_data()) : nullptr;
  T* C = static_cast<T*>(c.raw_data());
  loops::parallel_range(batch * M, batch * M * N * K, [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; ++row) {
      int64_t bi = row / M, i = row % M;
      // Batch offsets of a and b from the output's batch index.
      int64_t ao = 0, bo = 0, rem = bi;
      for (size_t d = r - 2; d-- > 0;) {
        const int64_t idx = rem % c.dim(d);
        rem /= c.dim(d);
        ao += (ad[d] == 1 ? 0 : idx) * as[d];
        bo += (bd[d] == 1 ? 0 : idx) * bs[d];
      }
      T* crow = C + row * N;
      for (int64_t j = 0; j < N; ++j) crow[j] = bias_p ? bias_p[j] : T(0);
      for (int64_t k = 0; k < K; ++k) {
        const T aik = A[ao + i * as[r - 2] + k * as[r - 1]];
        const T* brow = B + bo + k * bs[r - 2];
        const int64_t bsj = bs[r - 1];
        for (int64_t j = 0; j < N; ++j) crow[j] += aik * brow[j * bsj];
      }
    }
  });
}

}  // namespace

hodu::Tensor matmul(const hodu::Tensor& a, const hodu::Tensor& b, const hodu::Tensor* bias) {
  HODU_CHECK(a.rank() >= 2 && b.rank() >= 2, ErrorCode::Internal, "matmul kernel on ranks {} and {}", a.rank(), b.rank());
  HODU_CHECK(a.dim(-1) == b.dim(-2), ErrorCode::InvalidArgument,
             "matmul: shapes {} and {} do not multiply ({} columns against {} rows)", shape_to_string(a.shape()),
             shape_to_string(b.shape()), a.dim(-1), b.dim(-2));
  std::vector<int64_t> ab(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  std::vector<int64_t> shape = loops::broadcast_shapes(ab, bb, "matmul");
  shape.push_back(a.dim(-2));
  shape.push_back(b.dim(-1));
  hodu::Tensor c = empty(a.dtype(), shape);
  if (c.numel() == 0) return c;
  if (a.dim(-1) == 0) {
    if (bias) copy_into(c, *bias);
    else fill(c, 0.0);
    return c;
  }
  if (a.dtype() == DType::F32) {
    if (matmul_onednn(a, b, bias, c)) return c;
    hodu::Tensor ac = contiguous(a), bc = contiguous(b);
    if (matmul_onednn(ac, bc, bias, c)) return c;
  }
  dispatch_compute(a.dtype(), "matmul", [&](auto tag) { matmul_loop<typename decltype(tag)::type>(a, b, bias, c); });
  return c;
}

}  // namespace hodu::tensor_kernels
