// Indexing ops: Gather (where data_movement.cc's static kernel does not apply: shapes known at
// run time), GatherElements, GatherND, ScatterElements and ScatterND (reduction none, add, mul,
// max, min), in the interpreter's semantics (tensor_index.cc): negative indices wrap, an index
// out of range is an InvalidArgument naming the node, scatter updates apply in index order.
// Elements move by their size; whole inner blocks are memcpy'd.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>

#include "engines/cpu/tensor_step.h"

namespace hodu::cpu {
namespace {

int64_t fix_index(const std::string& label, int64_t v, int64_t dim) {
  const int64_t w = v < 0 ? v + dim : v;
  if (w < 0 || w >= dim)
    fail(ErrorCode::InvalidArgument, "{}: index {} is out of range for a dim of size {}", label, v, dim);
  return w;
}

int64_t prod(const std::vector<int64_t>& s, size_t b, size_t e) {
  int64_t p = 1;
  for (size_t i = b; i < e && i < s.size(); ++i) p *= s[i];
  return p;
}

// Copies `n` blocks of `block` bytes: dst block k from src + offs[k] blocks... in bytes.
void copy_blocks(int threads, const char* src, char* dst, const std::vector<int64_t>& offs, int64_t block_bytes) {
  const int64_t n = static_cast<int64_t>(offs.size());
  const int t = n * block_bytes >= (1 << 17) ? threads : 1;
  if (block_bytes == 4) {
    parallel_for(n, t, [&](int64_t k) { std::memcpy(dst + k * 4, src + offs[static_cast<size_t>(k)], 4); });
    return;
  }
  parallel_for(n, t, [&](int64_t k) {
    std::memcpy(dst + k * block_bytes, src + offs[static_cast<size_t>(k)], static_cast<size_t>(block_bytes));
  });
}

class GatherStep : public TensorStep {
 public:
  GatherStep(DType dt, int64_t axis) : dt_(dt), axis_(axis) {}
  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    const Tensor& x = *in[0];
    const Tensor& it = *in[1];
    auto a = norm_axis(axis_, x.rank());
    if (!a) fail(ErrorCode::InvalidArgument, "{}: axis {} is out of range for {}", label, axis_, x.shape_string());
    const size_t ax = static_cast<size_t>(*a);
    std::vector<int64_t> oshape(x.shape().begin(), x.shape().begin() + *a);
    oshape.insert(oshape.end(), it.shape().begin(), it.shape().end());
    oshape.insert(oshape.end(), x.shape().begin() + *a + 1, x.shape().end());
    const int64_t outer = prod(x.shape(), 0, ax), dim = x.dim(*a);
    const int64_t inner = prod(x.shape(), ax + 1, x.shape().size()) * static_cast<int64_t>(dtype_storage_bytes(dt_, 1));
    auto ids = it.to_int64s();
    for (auto& v : ids) v = fix_index(label, v, dim);
    const int64_t nidx = static_cast<int64_t>(ids.size());
    offs_.resize(static_cast<size_t>(outer * nidx));
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < nidx; ++j) offs_[static_cast<size_t>(o * nidx + j)] = (o * dim + ids[static_cast<size_t>(j)]) * inner;
    Tensor& y = out(rs, 0, dt_, oshape);
    copy_blocks(rs.threads, static_cast<const char*>(x.raw_data()), static_cast<char*>(y.raw_data()), offs_, inner);
  }

 private:
  DType dt_;
  int64_t axis_;
  std::vector<int64_t> offs_;
};

// Flat element offsets into `data_shape` for every element of `idx_shape`, the coordinate along
// `axis` replaced by the index (tensor_index.cc's element_offsets).
void element_offsets(const std::string& label, const std::vector<int64_t>& data_shape,
                     const std::vector<int64_t>& idx_shape, int64_t axis, std::vector<int64_t>& ids) {
  const int64_t r = static_cast<int64_t>(data_shape.size());
  if (static_cast<int64_t>(idx_shape.size()) != r)
    fail(ErrorCode::InvalidArgument, "{}: indices {} must have the rank of data {}", label, shape_to_string(idx_shape),
         shape_to_string(data_shape));
  for (int64_t d = 0; d < r; ++d)
    if (d != axis && idx_shape[static_cast<size_t>(d)] > data_shape[static_cast<size_t>(d)])
      fail(ErrorCode::InvalidArgument, "{}: indices {} is larger than data {} along axis {}", label,
           shape_to_string(idx_shape), shape_to_string(data_shape), d);
  const auto ds = contiguous_strides(data_shape);
  const int64_t n = shape_numel(idx_shape);
  std::vector<int64_t> coord(static_cast<size_t>(r), 0);
  int64_t base = 0;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t v = fix_index(label, ids[static_cast<size_t>(k)], data_shape[static_cast<size_t>(axis)]);
    ids[static_cast<size_t>(k)] = base + v * ds[static_cast<size_t>(axis)];
    for (int64_t d = r; d-- > 0;) {
      const size_t u = static_cast<size_t>(d);
      if (++coord[u] < idx_shape[u]) {
        if (d != axis) base += ds[u];
        break;
      }
      if (d != axis) base -= ds[u] * (idx_shape[u] - 1);
      coord[u] = 0;
    }
  }
}

class GatherElementsStep : public TensorStep {
 public:
  GatherElementsStep(DType dt, int64_t axis) : dt_(dt), axis_(axis) {}
  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    const Tensor& x = *in[0];
    const Tensor& it = *in[1];
    auto a = norm_axis(axis_, x.rank());
    if (!a) fail(ErrorCode::InvalidArgument, "{}: axis {} is out of range for {}", label, axis_, x.shape_string());
    offs_ = it.to_int64s();
    element_offsets(label, x.shape(), it.shape(), *a, offs_);
    Tensor& y = out(rs, 0, dt_, it.shape());
    dispatch_bytes(dt_, [&]<typename T>() {
      const T* s = static_cast<const T*>(x.raw_data());
      T* d = static_cast<T*>(y.raw_data());
      const int64_t n = static_cast<int64_t>(offs_.size());
      parallel_for((n + 4095) / 4096, n >= (1 << 15) ? rs.threads : 1, [&](int64_t c) {
        for (int64_t k = c * 4096, e = std::min(n, k + 4096); k < e; ++k) d[k] = s[offs_[static_cast<size_t>(k)]];
      });
    });
  }

 private:
  DType dt_;
  int64_t axis_;
  std::vector<int64_t> offs_;
};

class GatherNDStep : public TensorStep {
 public:
  GatherNDStep(DType dt, int64_t batch_dims) : dt_(dt), b_(batch_dims) {}
  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    const Tensor& x = *in[0];
    const Tensor& it = *in[1];
    const int64_t r = x.rank(), q = it.rank(), b = b_;
    if (r < 1 || q < 1 || b < 0 || b >= std::min(r, q))
      fail(ErrorCode::InvalidArgument, "{}: batch_dims {} must be below the ranks of data {} and indices {}", label, b,
           x.shape_string(), it.shape_string());
    for (int64_t d = 0; d < b; ++d)
      if (x.dim(d) != it.dim(d)) fail(ErrorCode::InvalidArgument, "{}: batch dims of data and indices differ", label);
    const int64_t m = it.dim(q - 1);
    if (m < 1 || m > r - b) fail(ErrorCode::InvalidArgument, "{}: indices last dim {} must be in [1, {}]", label, m, r - b);
    std::vector<int64_t> oshape(it.shape().begin(), it.shape().end() - 1);
    oshape.insert(oshape.end(), x.shape().begin() + b + m, x.shape().end());
    const size_t es = dtype_storage_bytes(dt_, 1);
    const int64_t batches = prod(x.shape(), 0, static_cast<size_t>(b));
    const int64_t per_batch = prod(it.shape(), static_cast<size_t>(b), static_cast<size_t>(q - 1));
    const int64_t inner = prod(x.shape(), static_cast<size_t>(b + m), static_cast<size_t>(r));
    const int64_t batch_stride = prod(x.shape(), static_cast<size_t>(b), static_cast<size_t>(r));
    const auto ds = contiguous_strides(x.shape());
    if (it.is_contiguous() && it.dtype() == DType::I64) {
      gather_in_place(rs, x, it, oshape, m, batches, per_batch, inner * static_cast<int64_t>(es), batch_stride, ds,
                      static_cast<int64_t>(es));
      return;
    }
    const auto ids = it.to_int64s();
    offs_.resize(static_cast<size_t>(batches * per_batch));
    for (int64_t bt = 0; bt < batches; ++bt)
      for (int64_t j = 0; j < per_batch; ++j) {
        const int64_t* tup = ids.data() + (bt * per_batch + j) * m;
        int64_t off = bt * batch_stride;
        for (int64_t k = 0; k < m; ++k)
          off += fix_index(label, tup[k], x.dim(b + k)) * ds[static_cast<size_t>(b + k)];
        offs_[static_cast<size_t>(bt * per_batch + j)] = off * static_cast<int64_t>(es);
      }
    Tensor& y = out(rs, 0, dt_, oshape);
    copy_blocks(rs.threads, static_cast<const char*>(x.raw_data()), static_cast<char*>(y.raw_data()), offs_,
                inner * static_cast<int64_t>(es));
  }

 private:
  // Contiguous int64 indices read where they lie, each tuple's block copied as its offset
  // is found: no copy of the indices, no offset table. A detector's score filter (RetinaNet:
  // GatherND of 11M scores by NonZero's indices) took 554 ms and 176 MB of those two.
  void gather_in_place(RunState& rs, const Tensor& x, const Tensor& it, const std::vector<int64_t>& oshape, int64_t m,
                       int64_t batches, int64_t per_batch, int64_t block, int64_t batch_stride,
                       const std::vector<int64_t>& ds, int64_t es) {
    Tensor& y = out(rs, 0, dt_, oshape);
    const char* src = static_cast<const char*>(x.raw_data());
    char* dst = static_cast<char*>(y.raw_data());
    const int64_t* ids = it.data<int64_t>();
    const int64_t total = batches * per_batch, b = b_;
    std::atomic<int64_t> bad{-1};  // an index out of range (its position in `it`): the error after the loop
    const int threads = total * block >= (1 << 17) ? rs.threads : 1;
    // Chunks of 4096 tuples within one batch entry: no division per tuple.
    constexpr int64_t kChunk = 4096;
    const int64_t chunks = (per_batch + kChunk - 1) / kChunk;
    const int64_t* dims = x.shape().data() + b;
    const int64_t* strides = ds.data() + b;
    parallel_for(batches * chunks, threads, [&](int64_t c) {
      const int64_t bt = c / chunks, j0 = bt * per_batch + (c % chunks) * kChunk;
      const int64_t j1 = std::min(j0 + kChunk, (bt + 1) * per_batch);
      for (int64_t j = j0; j < j1; ++j) {
        int64_t off = bt * batch_stride;
        for (int64_t k = 0; k < m; ++k) {
          const int64_t v = ids[j * m + k], w = v < 0 ? v + dims[k] : v;
          if (w < 0 || w >= dims[k]) {
            bad.store(j * m + k, std::memory_order_relaxed);
            return;
          }
          off += w * strides[k];
        }
        if (block == 4) std::memcpy(dst + j * 4, src + off * es, 4);
        else std::memcpy(dst + j * block, src + off * es, static_cast<size_t>(block));
      }
    });
    if (const int64_t at = bad.load(); at >= 0)
      fix_index(label, ids[at], x.dim(b + at % m));
  }

  DType dt_;
  int64_t b_;
  std::vector<int64_t> offs_;
};

// out = data, then out[target_i + j] (op)= updates[i * block + j] in index order.
class ScatterStep : public TensorStep {
 public:
  ScatterStep(DType dt, bool nd, int64_t axis, int red) : dt_(dt), nd_(nd), axis_(axis), red_(red) {}
  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    const Tensor& data = *in[0];
    const Tensor& it = *in[1];
    const Tensor& upd = *in[2];
    int64_t block = 1;
    if (nd_) {
      const int64_t r = data.rank(), q = it.rank();
      if (r < 1 || q < 1) fail(ErrorCode::InvalidArgument, "{}: ScatterND needs data and indices of rank >= 1", label);
      const int64_t k = it.dim(q - 1);
      if (k > r) fail(ErrorCode::InvalidArgument, "{}: indices last dim {} exceeds data rank {}", label, k, r);
      std::vector<int64_t> ushape(it.shape().begin(), it.shape().end() - 1);
      ushape.insert(ushape.end(), data.shape().begin() + k, data.shape().end());
      if (upd.shape() != ushape)
        fail(ErrorCode::InvalidArgument, "{}: updates {} must have shape {}", label, upd.shape_string(),
             shape_to_string(ushape));
      const auto ds = contiguous_strides(data.shape());
      if (red_ == 0 && it.dtype() == DType::I64 && it.is_contiguous()) {
        scatter_nd_in_place(rs, data, it, upd, k, ds);
        return;
      }
      const auto ids = it.to_int64s();
      const int64_t n = prod(it.shape(), 0, static_cast<size_t>(q - 1));
      offs_.resize(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        int64_t off = 0;
        for (int64_t j = 0; j < k; ++j) off += fix_index(label, ids[static_cast<size_t>(i * k + j)], data.dim(j)) * ds[static_cast<size_t>(j)];
        offs_[static_cast<size_t>(i)] = off;
      }
      block = prod(data.shape(), static_cast<size_t>(k), static_cast<size_t>(r));
    } else {
      auto a = norm_axis(axis_, data.rank());
      if (!a) fail(ErrorCode::InvalidArgument, "{}: axis {} is out of range for {}", label, axis_, data.shape_string());
      if (upd.shape() != it.shape())
        fail(ErrorCode::InvalidArgument, "{}: updates {} must have the shape of indices {}", label, upd.shape_string(),
             it.shape_string());
      if (it.dtype() == DType::I64 && it.is_contiguous())  // to_int64s() reads element by element
        offs_.assign(it.data<int64_t>(), it.data<int64_t>() + it.numel());
      else
        offs_ = it.to_int64s();
      element_offsets(label, data.shape(), it.shape(), *a, offs_);
    }
    Tensor& y = out(rs, 0, dt_, data.shape());
    if (y.raw_data() != data.raw_data()) std::memcpy(y.raw_data(), data.raw_data(), data.nbytes());
    if (red_ == 0) {
      const size_t es = dtype_storage_bytes(dt_, 1);
      const char* s = static_cast<const char*>(upd.raw_data());
      char* d = static_cast<char*>(y.raw_data());
      if (block == 1 && dispatch_bytes(dt_, [&]<typename T>() {  // element by element: no memcpy call each
            T* dt = reinterpret_cast<T*>(d);
            const T* st = reinterpret_cast<const T*>(s);
            for (size_t i = 0; i < offs_.size(); ++i) dt[offs_[i]] = st[i];
          }))
        return;
      const size_t bb = static_cast<size_t>(block) * es;
      for (size_t i = 0; i < offs_.size(); ++i) std::memcpy(d + static_cast<size_t>(offs_[i]) * es, s + i * bb, bb);
      return;
    }
    dispatch_compute(dt_, [&]<typename T>() {
      T* d = static_cast<T*>(y.raw_data());
      const T* s = static_cast<const T*>(upd.raw_data());
      for (size_t i = 0; i < offs_.size(); ++i)
        for (int64_t j = 0; j < block; ++j) {
          T& a = d[offs_[i] + j];
          const T v = s[static_cast<int64_t>(i) * block + j];
          switch (red_) {
            case 1: a = static_cast<T>(a + v); break;
            case 2: a = static_cast<T>(a * v); break;
            case 3: a = std::max(a, v); break;
            default: a = std::min(a, v); break;
          }
        }
    });
  }

 private:
  // ScatterND without reduction, contiguous int64 indices read where they lie and each tuple's
  // block written as its offset is found: no copy of the indices, no offset table, over the
  // threads. Torch exports a slice assignment (`attn[:, :, 1:, 1:] = ...`, MViT) as a ScatterND
  // of one 4-index tuple per element: 78M tuples (2.5 GB of indices) took 8.4 s element by
  // element after copying them. The spec allows no duplicate targets; the order the interpreter
  // keeps for them anyway (the last in index order wins) holds whenever the targets increase
  // through the indices (a slice's do), else the blocks are written again in order on one thread.
  void scatter_nd_in_place(RunState& rs, const Tensor& data, const Tensor& it, const Tensor& upd, int64_t k,
                           const std::vector<int64_t>& ds) {
    Tensor& y = out(rs, 0, dt_, data.shape());
    char* dst = static_cast<char*>(y.raw_data());
    if (dst != data.raw_data()) std::memcpy(dst, data.raw_data(), data.nbytes());
    const int64_t es = static_cast<int64_t>(dtype_storage_bytes(dt_, 1));
    const int64_t block = prod(data.shape(), static_cast<size_t>(k), data.shape().size()) * es;
    const int64_t n = prod(it.shape(), 0, it.shape().size() - 1);
    const int64_t* ids = it.data<int64_t>();
    const char* src = static_cast<const char*>(upd.raw_data());
    const int64_t* dims = data.shape().data();
    constexpr int64_t kChunk = 8192;
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    std::atomic<int64_t> bad{std::numeric_limits<int64_t>::max()};  // the first index out of range (its position in `it`)
    // Each chunk's targets increasing (checked while writing) and each chunk's first above the
    // last of the one before: every target once, in index order.
    std::atomic<bool> ordered{true};
    std::vector<int64_t> first(static_cast<size_t>(chunks), -1), last(static_cast<size_t>(chunks), -1);
    auto scatter = [&](int64_t j0, int64_t j1, int64_t chunk) {
      int64_t prev = -1;
      for (int64_t j = j0; j < j1; ++j) {
        int64_t off = 0;
        for (int64_t d = 0; d < k; ++d) {
          const int64_t v = ids[j * k + d], w = v < 0 ? v + dims[d] : v;
          if (w < 0 || w >= dims[d]) {
            int64_t seen = bad.load(std::memory_order_relaxed);
            while (j * k + d < seen && !bad.compare_exchange_weak(seen, j * k + d)) {
            }
            return;
          }
          off += w * ds[static_cast<size_t>(d)];
        }
        if (chunk >= 0) {
          if (off <= prev) ordered.store(false, std::memory_order_relaxed);
          if (j == j0) first[static_cast<size_t>(chunk)] = off;
          last[static_cast<size_t>(chunk)] = off;
        }
        prev = off;
        std::memcpy(dst + off * es, src + j * block, static_cast<size_t>(block));
      }
    };
    const int threads = n * block >= (1 << 17) ? rs.threads : 1;
    parallel_for(chunks, threads, [&](int64_t c) { scatter(c * kChunk, std::min(n, (c + 1) * kChunk), c); });
    if (const int64_t at = bad.load(); at != std::numeric_limits<int64_t>::max()) fix_index(label, ids[at], dims[at % k]);
    bool in_order = ordered.load();
    for (int64_t c = 1; c < chunks && in_order; ++c) in_order = last[static_cast<size_t>(c - 1)] < first[static_cast<size_t>(c)];
    if (!in_order) scatter(0, n, -1);
  }

  DType dt_;
  bool nd_;
  int64_t axis_;
  int red_;  // 0 none, 1 add, 2 mul, 3 max, 4 min
  std::vector<int64_t> offs_;
};

}  // namespace

bool make_index_ops(PlanBuilder& b, const Node& n) {
  if (!n.domain.empty() || n.inputs.size() < 2) return false;
  const std::string& op = n.op_type;
  const DType dt = dtype_of(b, n.inputs[0]), it = dtype_of(b, n.inputs[1]);
  if (!movable_dtype(dt)) return false;
  auto x = b.static_type(n.inputs[0]);
  if (x && x->second.empty()) return false;  // rank 0: the interpreter's error
  if (op == "Gather" || op == "GatherElements") {
    if (it != DType::I64 && it != DType::I32) return false;
    if (op == "Gather") add_tensor_step(b, n, std::make_unique<GatherStep>(dt, n.get_int("axis", 0)), {dt}, "gather");
    else add_tensor_step(b, n, std::make_unique<GatherElementsStep>(dt, n.get_int("axis", 0)), {dt}, "gather elements");
    return true;
  }
  if (op == "GatherND") {
    if (it != DType::I64) return false;
    add_tensor_step(b, n, std::make_unique<GatherNDStep>(dt, n.get_int("batch_dims", 0)), {dt}, "gather nd");
    return true;
  }
  if (op == "ScatterND" || op == "ScatterElements" || op == "Scatter") {
    const bool nd = op == "ScatterND";
    if (n.inputs.size() != 3 || dtype_of(b, n.inputs[2]) != dt) return false;
    if (nd ? it != DType::I64 : (it != DType::I64 && it != DType::I32)) return false;
    const std::string red = n.get_string("reduction", "none");
    const int r = red == "none" ? 0 : red == "add" ? 1 : red == "mul" ? 2 : red == "max" ? 3 : red == "min" ? 4 : -1;
    if (r < 0 || (r > 0 && !is_compute_dtype(dt))) return false;
    add_tensor_step(b, n, std::make_unique<ScatterStep>(dt, nd, n.get_int("axis", 0), r), {dt},
                    nd ? "scatter nd" : "scatter elements");
    return true;
  }
  return false;
}

}  // namespace hodu::cpu
