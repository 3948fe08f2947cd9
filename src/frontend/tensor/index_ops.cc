// Indexing by integer tensors: index_select, gather, scatter_add, embedding,
// one_hot. Indices are checked against their dim (InvalidArgument naming the
// bad index).
#include <cstring>

#include "frontend/autograd/node.h"
#include "frontend/capture/tracer.h"
#include "kernels/cpu/tensor/kernels.h"
#include "kernels/cpu/tensor/loops.h"
#include "frontend/tensor/ops_internal.h"
#include "hodu/autograd.h"

namespace hodu::eager {
namespace {

// The indices as a row-major i64 buffer, each checked against `size`. Negative indices are
// refused as PyTorch's index_select, gather, embedding and one_hot do (a -1 class or token is
// a bug to report, not the last row).
hodu::Tensor checked_indices(const Tensor& index, int64_t size, const char* op) {
  const hodu::Tensor& c = core(index, op);
  HODU_CHECK(!kernels::is_float(c.dtype()) && c.dtype() != DType::Bool, ErrorCode::InvalidArgument,
             "{}: indices of dtype {} (give an integer tensor)", op, dtype_name(c.dtype()));
  hodu::Tensor idx = kernels::contiguous(kernels::cast(c, DType::I64));
  if (idx.storage() == c.storage()) {
    hodu::Tensor copy = kernels::empty(DType::I64, idx.shape());
    kernels::copy_into(copy, idx);
    idx = copy;
  }
  int64_t* p = static_cast<int64_t*>(idx.raw_data());
  for (int64_t i = 0; i < idx.numel(); ++i) {
    HODU_CHECK(p[i] >= 0 && p[i] < size, ErrorCode::InvalidArgument,
               "{}: index {} is out of range for a dim of size {} (indices run from 0 to {})", op, p[i], size,
               size - 1);
  }
  return idx;
}

// [outer, n, inner] blocks: out[o, j, :] = x[o, idx[j], :] (element size es).
void select_rows(const char* x, char* out, const int64_t* idx, int64_t outer, int64_t n_in, int64_t n_idx,
                 int64_t inner, int64_t es) {
  loops::parallel_range(outer * n_idx, outer * n_idx * inner, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t o = r / n_idx, j = r % n_idx;
      std::memcpy(out + r * inner * es, x + (o * n_in + idx[j]) * inner * es, inner * es);
    }
  });
}

// out[o, idx[j], :] += g[o, j, :] for f32/f64 (rows repeat: serial over j).
template <typename T>
void add_rows(T* out, const T* g, const int64_t* idx, int64_t outer, int64_t n_out, int64_t n_idx, int64_t inner) {
  loops::parallel_range(outer, outer * n_idx * inner, [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o)
      for (int64_t j = 0; j < n_idx; ++j) {
        T* dst = out + (o * n_out + idx[j]) * inner;
        const T* src = g + (o * n_idx + j) * inner;
        for (int64_t k = 0; k < inner; ++k) dst[k] += src[k];
      }
  });
}

// grad of index_select: zeros of `in_shape` with g's rows added at the indices.
Tensor index_add_rows(const Tensor& g, const Dims& in_shape, int64_t dim, const hodu::Tensor& idx) {
  const DType ct = kernels::compute_dtype(g.dtype());
  hodu::Tensor gc = kernels::contiguous(kernels::cast(core(g), ct));
  hodu::Tensor out = kernels::empty(ct, in_shape);
  kernels::fill(out, 0.0);
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < dim; ++i) outer *= in_shape[i];
  for (size_t i = dim + 1; i < in_shape.size(); ++i) inner *= in_shape[i];
  dispatch_compute(ct, "index_select backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    add_rows(static_cast<T*>(out.raw_data()), static_cast<const T*>(gc.raw_data()),
             static_cast<const int64_t*>(idx.raw_data()), outer, in_shape[dim], idx.numel(), inner);
  });
  return make_tensor(out.dtype() == g.dtype() ? out : kernels::cast(out, g.dtype()));
}

// Walks every element of a row-major `shape`, giving (flat index, index along `dim`, flat index
// with that dim's index replaced by `k` in a tensor of `other` size along dim).
template <typename F>
void for_each_along(const Dims& shape, int64_t dim, int64_t other, F&& f) {
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < dim; ++i) outer *= shape[i];
  for (size_t i = dim + 1; i < shape.size(); ++i) inner *= shape[i];
  const int64_t n = shape[dim];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t k = 0; k < inner; ++k) f((o * n + j) * inner + k, o * other * inner + k, inner);
}

}  // namespace

Tensor Tensor::index_select(int64_t d, const Tensor& index) const {
  const hodu::Tensor& c = core(*this, "index_select");
  d = wrap_dim(d, c.rank(), "index_select");
  HODU_CHECK(core(index, "index_select").rank() <= 1, ErrorCode::InvalidArgument,
             "index_select: the index must be 1-d, not {}", shape_to_string(index.shape()));
  hodu::Tensor idx = checked_indices(index, c.rank() ? c.shape()[d] : 1, "index_select");
  hodu::Tensor x = kernels::contiguous(c);
  Dims s = c.shape();
  if (s.empty()) s = {1};
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= s[i];
  for (size_t i = d + 1; i < s.size(); ++i) inner *= s[i];
  const int64_t n_in = s[d];
  s[d] = idx.numel();
  hodu::Tensor out = kernels::empty(c.dtype(), c.rank() ? s : Dims{});
  select_rows(static_cast<const char*>(x.raw_data()), static_cast<char*>(out.raw_data()),
              static_cast<const int64_t*>(idx.raw_data()), outer, n_in, idx.numel(), inner, dtype_bits(c.dtype()) / 8);
  Tensor r = make_tensor(std::move(out));
  if (needs_grad({this}))
    record("IndexSelectBackward", {*this}, {&r}, [in = c.shape(), d, idx](const std::vector<Tensor>& g,
                                                                          const FunctionNode&) {
      return std::vector<Tensor>{index_add_rows(g[0], in, d, idx)};
    });
  if (trace::active()) trace::record("Gather", {*this, index}, {r}, {Attribute::make_int("axis", d)});
  return r;
}

Tensor Tensor::gather(int64_t d, const Tensor& index) const {
  const hodu::Tensor& c = core(*this, "gather");
  d = wrap_dim(d, c.rank(), "gather");
  const hodu::Tensor& ic = core(index, "gather");
  HODU_CHECK(ic.rank() == c.rank(), ErrorCode::InvalidArgument, "gather: index {} and input {} differ in rank",
             shape_to_string(ic.shape()), shape_to_string(c.shape()));
  for (int64_t i = 0; i < c.rank(); ++i)
    HODU_CHECK(i == d || ic.shape()[i] <= c.shape()[i], ErrorCode::InvalidArgument,
               "gather: index {} is larger than input {} in dim {}", shape_to_string(ic.shape()),
               shape_to_string(c.shape()), i);
  hodu::Tensor idx = checked_indices(index, c.shape()[d], "gather");
  // The input restricted to the index's extent in the other dims.
  hodu::Tensor x = c;
  for (int64_t i = 0; i < c.rank(); ++i)
    if (i != d) x = x.slice(i, 0, ic.shape()[i]);
  hodu::Tensor xc = kernels::contiguous(x);
  hodu::Tensor out = kernels::empty(c.dtype(), ic.shape());
  const int64_t es = dtype_bits(c.dtype()) / 8;
  const char* xp = static_cast<const char*>(xc.raw_data());
  char* op = static_cast<char*>(out.raw_data());
  const int64_t* ip = static_cast<const int64_t*>(idx.raw_data());
  const int64_t n_in = c.shape()[d];
  for_each_along(ic.shape(), d, n_in, [&](int64_t flat, int64_t base, int64_t inner) {
    std::memcpy(op + flat * es, xp + (base + ip[flat] * inner) * es, es);
  });
  Tensor r = make_tensor(std::move(out));
  if (needs_grad({this}))
    record("GatherBackward", {*this}, {&r}, [in = c.shape(), d, si = Saved(index)](const std::vector<Tensor>& g,
                                                                                   const FunctionNode&) {
      return std::vector<Tensor>{scatter_add(zeros(in, g[0].dtype()), d, si.get(), g[0])};
    });
  if (trace::active()) trace::record("GatherElements", {*this, index}, {r}, {Attribute::make_int("axis", d)});
  return r;
}

Tensor scatter_add(const Tensor& self, int64_t d, const Tensor& index, const Tensor& src) {
  const hodu::Tensor& c = core(self, "scatter_add");
  d = wrap_dim(d, c.rank(), "scatter_add");
  const hodu::Tensor& ic = core(index, "scatter_add");
  HODU_CHECK(ic.shape() == core(src, "scatter_add").shape(), ErrorCode::InvalidArgument,
             "scatter_add: index {} and src {} differ in shape", shape_to_string(ic.shape()),
             shape_to_string(src.shape()));
  hodu::Tensor idx = checked_indices(index, c.shape()[d], "scatter_add");
  const DType ct = kernels::compute_dtype(c.dtype());
  hodu::Tensor out = kernels::empty(ct, c.shape());
  kernels::copy_into(out, c);
  hodu::Tensor sc = kernels::contiguous(kernels::cast(core(src), ct));
  // Index positions address `out` through its full extent in the other dims.
  const Dims& os = c.shape();
  Dims ostr = contiguous_strides(os);
  const int64_t* ip = static_cast<const int64_t*>(idx.raw_data());
  dispatch_compute(ct, "scatter_add", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = static_cast<T*>(out.raw_data());
    const T* s = static_cast<const T*>(sc.raw_data());
    const Dims& is = ic.shape();
    std::vector<int64_t> pos(is.size(), 0);
    for (int64_t flat = 0; flat < ic.numel(); ++flat) {
      int64_t off = 0;
      for (size_t k = 0; k < is.size(); ++k) off += (static_cast<int64_t>(k) == d ? ip[flat] : pos[k]) * ostr[k];
      o[off] += s[flat];
      for (size_t k = is.size(); k-- > 0;) {
        if (++pos[k] < is[k]) break;
        pos[k] = 0;
      }
    }
  });
  Tensor r = make_tensor(out.dtype() == c.dtype() ? out : kernels::cast(out, c.dtype()));
  if (needs_grad({&self, &src}))
    record("ScatterAddBackward", {self, src}, {&r}, [d, si = Saved(index)](const std::vector<Tensor>& g,
                                                                           const FunctionNode& n) {
      std::vector<Tensor> out(2);
      if (n.needs_input_grad(0)) out[0] = g[0];
      if (n.needs_input_grad(1)) out[1] = g[0].gather(d, si.get());
      return out;
    });
  if (trace::active())
    trace::record("ScatterElements", {self, index, src}, {r},
                  {Attribute::make_int("axis", d), Attribute::make_string("reduction", "add")});
  return r;
}

Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx) {
  const hodu::Tensor& w = core(weight, "embedding");
  HODU_CHECK(w.rank() == 2, ErrorCode::InvalidArgument, "embedding: weight {} is not [num_embeddings, dim]",
             shape_to_string(w.shape()));
  const Dims ishape = core(indices, "embedding").shape();
  Tensor flat_idx = make_tensor(kernels::contiguous(core(indices)).reshape(Dims{core(indices).numel()}));
  hodu::Tensor idx = checked_indices(flat_idx, w.shape()[0], "embedding");
  hodu::Tensor wc = kernels::contiguous(w);
  hodu::Tensor out = kernels::empty(w.dtype(), {idx.numel(), w.shape()[1]});
  select_rows(static_cast<const char*>(wc.raw_data()), static_cast<char*>(out.raw_data()),
              static_cast<const int64_t*>(idx.raw_data()), 1, w.shape()[0], idx.numel(), w.shape()[1],
              dtype_bits(w.dtype()) / 8);
  Dims os = ishape;
  os.push_back(w.shape()[1]);
  Tensor r = make_tensor(out.reshape(os));
  if (needs_grad({&weight}))
    record("EmbeddingBackward", {weight}, {&r}, [ws = w.shape(), idx, padding_idx](const std::vector<Tensor>& g,
                                                                                    const FunctionNode&) {
      Tensor gw = index_add_rows(g[0].reshape({idx.numel(), ws[1]}), ws, 0, idx);
      if (padding_idx >= 0) {
        NoGradGuard guard;
        Tensor row = gw.select(0, padding_idx);
        kernels::fill(row.impl()->data, 0.0);
      }
      return std::vector<Tensor>{gw};
    });
  if (trace::active()) trace::record("Gather", {weight, indices}, {r}, {Attribute::make_int("axis", 0)});
  return r;
}

Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  HODU_CHECK(num_classes > 0, ErrorCode::InvalidArgument, "one_hot: {} classes", num_classes);
  checked_indices(indices, num_classes, "one_hot");
  return indices.unsqueeze(-1).eq(arange(static_cast<double>(num_classes), indices.dtype())).to(DType::I64);
}

}  // namespace hodu::eager
