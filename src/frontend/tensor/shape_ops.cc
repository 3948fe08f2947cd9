// Shape ops: views where the strides allow (reshape, permute, expand, slices
// share storage, as in PyTorch), copies otherwise; joining and splitting.
#include <algorithm>
#include <numeric>

#include "frontend/autograd/node.h"
#include "frontend/capture/tracer.h"
#include "frontend/tensor/ops_internal.h"
#include "kernels/cpu/tensor/kernels.h"
#include "hodu/autograd.h"
#include "passes/graph_utils.h"

namespace hodu::eager {

int64_t wrap_dim(int64_t d, int64_t rank, const char* op) {
  const int64_t r = std::max<int64_t>(rank, 1);
  HODU_CHECK(d >= -r && d < r, ErrorCode::InvalidArgument, "{}: dim {} is out of range for a {}-d tensor", op, d, rank);
  return d < 0 ? d + r : d;
}

namespace {

// The shape with its -1 resolved against numel.
Dims infer_shape(const Dims& shape, int64_t numel, const Dims& from, const char* op) {
  Dims s = shape;
  int64_t known = 1, minus = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      HODU_CHECK(minus < 0, ErrorCode::InvalidArgument, "{}: shape {} has more than one -1", op, shape_to_string(shape));
      minus = static_cast<int64_t>(i);
    } else {
      HODU_CHECK(s[i] >= 0, ErrorCode::InvalidArgument, "{}: shape {} has a negative size", op, shape_to_string(shape));
      known *= s[i];
    }
  }
  if (minus >= 0) {
    HODU_CHECK(known > 0 && numel % known == 0, ErrorCode::InvalidArgument,
               "{}: shape {} is invalid for an input of shape {} ({} elements)", op, shape_to_string(shape),
               shape_to_string(from), numel);
    s[minus] = numel / known;
  } else {
    HODU_CHECK(known == numel, ErrorCode::InvalidArgument,
               "{}: shape {} is invalid for an input of shape {} ({} elements)", op, shape_to_string(shape),
               shape_to_string(from), numel);
  }
  return s;
}

// A view of x with `shape`/`strides`/`offset` (in elements of x's storage).
Tensor view_of(const Tensor& x, const Dims& shape, const Dims& strides, int64_t offset) {
  return make_view(x, core(x).as_strided(shape, strides, offset));
}

Tensor reshape_impl(const Tensor& x, const Dims& shape, bool must_view, const char* op) {
  const hodu::Tensor& c = core(x, op);
  Dims s = infer_shape(shape, c.numel(), c.shape(), op);
  auto st = passes::reshape_strides(c.shape(), c.strides(), s);
  Tensor r;
  if (st) {
    r = view_of(x, s, *st, c.offset());
  } else {
    HODU_CHECK(!must_view, ErrorCode::InvalidArgument,
               "view: a {} tensor with strides {} cannot be viewed as {} without a copy (use reshape)",
               shape_to_string(c.shape()), shape_to_string(c.strides()), shape_to_string(s));
    hodu::Tensor copy = kernels::contiguous(c);
    r = make_tensor(copy.reshape(s));
  }
  if (needs_grad({&x}))
    record("ReshapeBackward", {x}, {&r}, [in = c.shape()](const std::vector<Tensor>& g, const FunctionNode&) {
      return std::vector<Tensor>{g[0].reshape(in)};
    });
  if (trace::active()) trace::record("Reshape", {x, trace::ints(s)}, {r});
  return r;
}

Dims inverse_perm(const Dims& p) {
  Dims inv(p.size());
  for (size_t i = 0; i < p.size(); ++i) inv[p[i]] = static_cast<int64_t>(i);
  return inv;
}

// The gradient of a slice: zeros of the input's shape with g in the sliced positions.
Tensor unslice(const Tensor& g, const Dims& in_shape, int64_t dim, int64_t start, int64_t step) {
  hodu::Tensor out = kernels::empty(g.dtype(), in_shape);
  kernels::fill(out, 0.0);
  hodu::Tensor region = out.slice(dim, start, start + step * (g.size(dim) - 1) + 1, step);
  kernels::copy_into(region, core(g));
  Tensor r = make_tensor(std::move(out));
  if (needs_grad({&g}))
    record("UnsliceBackward", {g}, {&r}, [dim, start, step, n = g.size(dim)](const std::vector<Tensor>& gg,
                                                                               const FunctionNode&) {
      return std::vector<Tensor>{gg[0].slice(dim, start, start + step * (n - 1) + 1, step)};
    });
  return r;
}

}  // namespace

Tensor Tensor::reshape(const Dims& shape) const { return reshape_impl(*this, shape, false, "reshape"); }
Tensor Tensor::view(const Dims& shape) const { return reshape_impl(*this, shape, true, "view"); }

Tensor Tensor::flatten(int64_t start, int64_t end) const {
  const int64_t r = dim();
  if (r == 0) return reshape({1});
  start = wrap_dim(start, r, "flatten");
  end = wrap_dim(end, r, "flatten");
  HODU_CHECK(start <= end, ErrorCode::InvalidArgument, "flatten: start dim {} is after end dim {}", start, end);
  Dims s(shape().begin(), shape().begin() + start);
  int64_t n = 1;
  for (int64_t i = start; i <= end; ++i) n *= shape()[i];
  s.push_back(n);
  s.insert(s.end(), shape().begin() + end + 1, shape().end());
  return reshape(s);
}

Tensor Tensor::unflatten(int64_t d, const Dims& sizes) const {
  d = wrap_dim(d, dim(), "unflatten");
  Dims s(shape().begin(), shape().begin() + d);
  Dims inner = infer_shape(sizes, shape()[d], {shape()[d]}, "unflatten");
  s.insert(s.end(), inner.begin(), inner.end());
  s.insert(s.end(), shape().begin() + d + 1, shape().end());
  return reshape(s);
}

Tensor Tensor::squeeze() const {
  Dims s;
  for (int64_t d : shape())
    if (d != 1) s.push_back(d);
  return reshape(s);
}

Tensor Tensor::squeeze(int64_t d) const {
  d = wrap_dim(d, dim(), "squeeze");
  if (dim() == 0 || shape()[d] != 1) return *this;
  Dims s = shape();
  s.erase(s.begin() + d);
  return reshape(s);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  const int64_t r = dim() + 1;
  HODU_CHECK(d >= -r && d < r, ErrorCode::InvalidArgument, "unsqueeze: dim {} is out of range for a {}-d tensor", d,
             dim());
  if (d < 0) d += r;
  Dims s = shape();
  s.insert(s.begin() + d, 1);
  return reshape(s);
}

Tensor Tensor::permute(const Dims& perm) const {
  const hodu::Tensor& c = core(*this, "permute");
  HODU_CHECK(static_cast<int64_t>(perm.size()) == c.rank(), ErrorCode::InvalidArgument,
             "permute: {} dims given for a {}-d tensor", perm.size(), c.rank());
  Dims p(perm.size());
  std::vector<bool> seen(perm.size(), false);
  for (size_t i = 0; i < perm.size(); ++i) {
    p[i] = wrap_dim(perm[i], c.rank(), "permute");
    HODU_CHECK(!seen[p[i]], ErrorCode::InvalidArgument, "permute: dim {} repeats in {}", p[i], shape_to_string(perm));
    seen[p[i]] = true;
  }
  Tensor r = make_view(*this, c.permute(p));
  if (needs_grad({this}))
    record("PermuteBackward", {*this}, {&r}, [inv = inverse_perm(p)](const std::vector<Tensor>& g, const FunctionNode&) {
      return std::vector<Tensor>{g[0].permute(inv)};
    });
  if (trace::active()) trace::record("Transpose", {*this}, {r}, {Attribute::make_ints("perm", p)});
  return r;
}

Tensor Tensor::transpose(int64_t a, int64_t b) const {
  const int64_t r = dim();
  if (r < 2) return *this;
  a = wrap_dim(a, r, "transpose");
  b = wrap_dim(b, r, "transpose");
  Dims p(r);
  std::iota(p.begin(), p.end(), 0);
  std::swap(p[a], p[b]);
  return permute(p);
}

Tensor Tensor::t() const {
  HODU_CHECK(dim() <= 2, ErrorCode::InvalidArgument, "t: a {}-d tensor (t() is for 2-d; use transpose)", dim());
  return transpose(0, 1);
}

Tensor Tensor::expand(const Dims& shape_in) const {
  const hodu::Tensor& c = core(*this, "expand");
  HODU_CHECK(shape_in.size() >= static_cast<size_t>(c.rank()), ErrorCode::InvalidArgument,
             "expand: shape {} has fewer dims than the tensor's {}", shape_to_string(shape_in), shape_to_string(c.shape()));
  const size_t lead = shape_in.size() - c.rank();
  Dims s(shape_in.size()), st(shape_in.size(), 0);
  for (size_t i = 0; i < shape_in.size(); ++i) {
    if (i < lead) {
      HODU_CHECK(shape_in[i] >= 0, ErrorCode::InvalidArgument, "expand: size -1 for a new leading dim in {}",
                 shape_to_string(shape_in));
      s[i] = shape_in[i];
      continue;
    }
    const int64_t have = c.shape()[i - lead];
    const int64_t want = shape_in[i] == -1 ? have : shape_in[i];
    HODU_CHECK(want == have || have == 1, ErrorCode::InvalidArgument, "expand: the {} tensor cannot expand to {}",
               shape_to_string(c.shape()), shape_to_string(shape_in));
    s[i] = want;
    st[i] = have == 1 && want != 1 ? 0 : c.strides()[i - lead];
  }
  if (s == c.shape()) return *this;
  Tensor r = view_of(*this, s, st, c.offset());
  if (needs_grad({this}))
    record("ExpandBackward", {*this}, {&r}, [in = c.shape()](const std::vector<Tensor>& g, const FunctionNode&) {
      return std::vector<Tensor>{sum_to(g[0], in)};
    });
  if (trace::active()) trace::record("Expand", {*this, trace::ints(s)}, {r});
  return r;
}

Tensor Tensor::repeat(const Dims& repeats) const {
  HODU_CHECK(repeats.size() >= static_cast<size_t>(dim()), ErrorCode::InvalidArgument,
             "repeat: {} repeats for a {}-d tensor", repeats.size(), dim());
  // Each dim d as [repeats[d], size[d]] through an expanded view, then merged.
  const size_t lead = repeats.size() - dim();
  Dims in(lead, 1);
  in.insert(in.end(), shape().begin(), shape().end());
  Dims inter, expanded, out;
  for (size_t i = 0; i < repeats.size(); ++i) {
    inter.push_back(1);
    inter.push_back(in[i]);
    expanded.push_back(repeats[i]);
    expanded.push_back(in[i]);
    out.push_back(repeats[i] * in[i]);
  }
  Tensor r;
  {
    trace::Pause pause;
    r = reshape(inter).expand(expanded).reshape(out);
  }
  if (trace::active()) {
    Tensor x = lead ? reshape(in) : *this;
    trace::record("Tile", {x, trace::ints(repeats)}, {r});
  }
  return r;
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t stop, int64_t step) const {
  const hodu::Tensor& c = core(*this, "slice");
  d = wrap_dim(d, c.rank(), "slice");
  HODU_CHECK(step > 0, ErrorCode::InvalidArgument, "slice: step {} (must be positive; use flip)", step);
  const int64_t n = c.shape()[d];
  if (start < 0) start = std::max<int64_t>(start + n, 0);
  if (stop < 0) stop = std::max<int64_t>(stop + n, 0);
  start = std::min(start, n);
  stop = std::clamp(stop, start, n);
  const int64_t len = (stop - start + step - 1) / step;
  Dims s = c.shape(), st = c.strides();
  s[d] = len;
  st[d] *= step;
  Tensor r = view_of(*this, s, st, c.offset() + start * c.strides()[d]);
  if (needs_grad({this}))
    record("SliceBackward", {*this}, {&r}, [in = c.shape(), d, start, step](const std::vector<Tensor>& g,
                                                                           const FunctionNode&) {
      return std::vector<Tensor>{unslice(g[0], in, d, start, step)};
    });
  if (trace::active()) {
    // A slice to the end is recorded open-ended, so that it holds for any size of that dim.
    const int64_t end = stop >= n ? std::numeric_limits<int64_t>::max() : stop;
    trace::record("Slice", {*this, trace::ints({start}), trace::ints({end}), trace::ints({d}), trace::ints({step})}, {r});
  }
  return r;
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = wrap_dim(d, dim(), "narrow");
  if (start < 0) start += size(d);
  HODU_CHECK(start >= 0 && length >= 0 && start + length <= size(d), ErrorCode::InvalidArgument,
             "narrow: [{}, {}) is out of range for dim {} of size {}", start, start + length, d, size(d));
  return slice(d, start, start + length);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  const hodu::Tensor& c = core(*this, "select");
  HODU_CHECK(c.rank() > 0, ErrorCode::InvalidArgument, "select on a 0-d tensor");
  d = wrap_dim(d, c.rank(), "select");
  const int64_t n = c.shape()[d];
  HODU_CHECK(index >= -n && index < n, ErrorCode::InvalidArgument, "select: index {} is out of range for dim {} of size {}",
             index, d, n);
  if (index < 0) index += n;
  Dims s = c.shape(), st = c.strides();
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  Tensor r = view_of(*this, s, st, c.offset() + index * c.strides()[d]);
  if (needs_grad({this}))
    record("SelectBackward", {*this}, {&r}, [in = c.shape(), d, index](const std::vector<Tensor>& g, const FunctionNode&) {
      return std::vector<Tensor>{unslice(g[0].unsqueeze(d), in, d, index, 1)};
    });
  if (trace::active()) {
    Tensor idx = make_tensor(kernels::cast(core(scalar_tensor(static_cast<double>(index), DType::I64)), DType::I64));
    trace::record("Gather", {*this, idx}, {r}, {Attribute::make_int("axis", d)});
  }
  return r;
}

Tensor Tensor::index(const std::vector<TensorIndex>& indices) const {
  int64_t consumed = 0, ellipsis = 0;
  for (const auto& ix : indices) {
    if (std::holds_alternative<EllipsisT>(ix)) ++ellipsis;
    else if (!std::holds_alternative<NewAxisT>(ix)) ++consumed;
  }
  HODU_CHECK(ellipsis <= 1, ErrorCode::InvalidArgument, "index: more than one Ellipsis");
  HODU_CHECK(consumed <= dim(), ErrorCode::InvalidArgument, "index: {} indices for a {}-d tensor", consumed, dim());
  Tensor r = *this;
  int64_t d = 0;  // the dim of r the next index applies to
  for (const auto& ix : indices) {
    if (const int64_t* i = std::get_if<int64_t>(&ix)) {
      r = r.select(d, *i);
    } else if (const Slice* s = std::get_if<Slice>(&ix)) {
      r = r.slice(d, s->start, s->stop, s->step);
      ++d;
    } else if (std::holds_alternative<NewAxisT>(ix)) {
      r = r.unsqueeze(d);
      ++d;
    } else {
      d += dim() - consumed;
    }
  }
  return r;
}

std::vector<Tensor> Tensor::split(int64_t size, int64_t d) const {
  d = wrap_dim(d, dim(), "split");
  HODU_CHECK(size > 0, ErrorCode::InvalidArgument, "split: size {} (must be positive)", size);
  std::vector<Tensor> parts;
  for (int64_t s = 0; s < this->size(d); s += size) parts.push_back(slice(d, s, std::min(s + size, this->size(d))));
  if (parts.empty()) parts.push_back(slice(d, 0, 0));
  return parts;
}

std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t d) const {
  HODU_CHECK(chunks > 0, ErrorCode::InvalidArgument, "chunk: {} chunks", chunks);
  d = wrap_dim(d, dim(), "chunk");
  return split(std::max<int64_t>((size(d) + chunks - 1) / chunks, 1), d);
}

Tensor Tensor::flip(const Dims& dims) const {
  const hodu::Tensor& c = core(*this, "flip");
  Tensor r = *this;
  {
    trace::Pause pause;
    NoGradGuard guard;
    hodu::Tensor out = kernels::empty(c.dtype(), c.shape());
    Dims st = c.strides();
    int64_t off = c.offset();
    for (int64_t d : dims) {
      d = wrap_dim(d, c.rank(), "flip");
      off += (c.shape()[d] - 1) * st[d];
      st[d] = -st[d];
    }
    // Negative strides through a raw view: copy element by element in reverse.
    hodu::Tensor src = c.as_strided(c.shape(), st, off);
    kernels::copy_into(out, src);
    r = make_tensor(std::move(out));
  }
  Dims fd;
  for (int64_t d : dims) fd.push_back(wrap_dim(d, c.rank(), "flip"));
  if (needs_grad({this}))
    record("FlipBackward", {*this}, {&r}, [fd](const std::vector<Tensor>& g, const FunctionNode&) {
      return std::vector<Tensor>{g[0].flip(fd)};
    });
  if (trace::active()) {
    std::vector<int64_t> starts, ends, axes, steps;
    for (int64_t d : fd) {
      starts.push_back(-1);
      ends.push_back(std::numeric_limits<int64_t>::min());
      axes.push_back(d);
      steps.push_back(-1);
    }
    trace::record("Slice", {*this, trace::ints(starts), trace::ints(ends), trace::ints(axes), trace::ints(steps)}, {r});
  }
  return r;
}

Tensor cat(const std::vector<Tensor>& ts, int64_t d) {
  HODU_CHECK(!ts.empty(), ErrorCode::InvalidArgument, "cat: no tensors");
  const hodu::Tensor& first = core(ts[0], "cat");
  d = wrap_dim(d, first.rank(), "cat");
  DType dt = first.dtype();
  for (size_t i = 1; i < ts.size(); ++i) dt = result_type(ts[0].to(dt), ts[i]);
  Dims s = first.shape();
  int64_t total = 0;
  std::vector<Tensor> xs;
  for (size_t i = 0; i < ts.size(); ++i) {
    const hodu::Tensor& c = core(ts[i], "cat");
    HODU_CHECK(c.rank() == first.rank(), ErrorCode::InvalidArgument, "cat: tensor {} is {}-d, tensor 0 {}-d", i, c.rank(),
               first.rank());
    for (int64_t k = 0; k < c.rank(); ++k)
      HODU_CHECK(k == d || c.shape()[k] == s[k], ErrorCode::InvalidArgument,
                 "cat: tensor {} has shape {}, tensor 0 {} (they may differ only in dim {})", i,
                 shape_to_string(c.shape()), shape_to_string(s), d);
    total += c.shape()[d];
    xs.push_back(ts[i].dtype() == dt ? ts[i] : ts[i].to(dt));
  }
  s[d] = total;
  hodu::Tensor out = kernels::empty(dt, s);
  int64_t at = 0;
  Dims sizes;
  for (const Tensor& x : xs) {
    const int64_t n = x.size(d);
    hodu::Tensor region = out.slice(d, at, at + n);
    kernels::copy_into(region, core(x));
    at += n;
    sizes.push_back(n);
  }
  Tensor r = make_tensor(std::move(out));
  if (needs_grad(xs))
    record("CatBackward", xs, {&r}, [sizes, d](const std::vector<Tensor>& g, const FunctionNode& n) {
      std::vector<Tensor> grads(sizes.size());
      int64_t at = 0;
      for (size_t i = 0; i < sizes.size(); ++i) {
        if (n.needs_input_grad(i)) grads[i] = g[0].slice(d, at, at + sizes[i]);
        at += sizes[i];
      }
      return grads;
    });
  if (trace::active()) trace::record("Concat", xs, {r}, {Attribute::make_int("axis", d)});
  return r;
}

Tensor stack(const std::vector<Tensor>& ts, int64_t d) {
  HODU_CHECK(!ts.empty(), ErrorCode::InvalidArgument, "stack: no tensors");
  const int64_t r = core(ts[0], "stack").rank() + 1;
  HODU_CHECK(d >= -r && d < r, ErrorCode::InvalidArgument, "stack: dim {} is out of range", d);
  if (d < 0) d += r;
  std::vector<Tensor> parts;
  for (size_t i = 0; i < ts.size(); ++i) {
    HODU_CHECK(core(ts[i], "stack").shape() == core(ts[0]).shape(), ErrorCode::InvalidArgument,
               "stack: tensor {} has shape {}, tensor 0 {}", i, shape_to_string(ts[i].shape()),
               shape_to_string(ts[0].shape()));
    parts.push_back(ts[i].unsqueeze(d));
  }
  return cat(parts, d);
}

}  // namespace hodu::eager
