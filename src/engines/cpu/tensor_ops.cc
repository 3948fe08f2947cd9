// Shape and layout ops beyond data_movement.cc's static ones: Split, Pad (constant, reflect,
// edge, wrap), Tile, DepthToSpace/SpaceToDepth, Trilu, Shape, Size, ConstantOfShape, Range,
// NonZero, and Reshape/Flatten/Squeeze/Unsqueeze whose shapes are known only at run time (after
// a NonZero). Every one moves elements by their size, so any dtype of 1, 2, 4 or 8 bytes runs
// here. Index tables are built when the input shapes change, not per run.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "engines/cpu/row_kernels.h"
#include "engines/cpu/tensor_step.h"
#include "passes/graph_utils.h"

namespace hodu::cpu {
namespace {

// Pad and Tile: index tables per dim (gather_by_tables).
class TablesStep : public TensorStep {
 protected:
  void gather(RunState& rs, const Tensor& x, Tensor& y, const void* fill) {
    gather_by_tables(rs.threads, x, y, src_, fill);
  }
  std::vector<int64_t> out_shape_;
  std::vector<std::vector<int64_t>> src_;
};

class PadStep : public TablesStep {
 public:
  PadStep(DType dt, std::string mode, std::vector<int64_t> attr_pads)
      : dt_(dt), mode_(std::move(mode)), attr_pads_(std::move(attr_pads)) {}
  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    const Tensor& x = *in[0];
    const int64_t r = x.rank();
    std::vector<int64_t> pads = in.size() > 1 && in[1] ? in[1]->to_int64s() : attr_pads_;
    std::vector<int64_t> axes;
    if (in.size() > 3 && in[3]) axes = in[3]->to_int64s();
    else
      for (int64_t i = 0; i < r; ++i) axes.push_back(i);
    if (pads != pads_ || axes != axes_ || x.shape() != x_shape_) plan_tables(x, pads, axes);
    Tensor& y = out(rs, 0, dt_, out_shape_);
    const void* fill = nullptr;
    std::vector<uint8_t> zero(8, 0);
    if (mode_ == "constant") fill = in.size() > 2 && in[2] && in[2]->numel() > 0 ? in[2]->raw_data() : zero.data();
    gather(rs, x, y, fill);
  }

 private:
  void plan_tables(const Tensor& x, const std::vector<int64_t>& pads, const std::vector<int64_t>& axes) {
    const int64_t r = x.rank();
    const size_t na = axes.size();
    if (pads.size() != 2 * na)
      fail(ErrorCode::InvalidArgument, "{}: pads has {} values, expected {} (2 × number of axes)", label, pads.size(),
           2 * na);
    std::vector<int64_t> pb(static_cast<size_t>(r), 0), pe(static_cast<size_t>(r), 0);
    std::vector<bool> seen(static_cast<size_t>(r), false);
    for (size_t i = 0; i < na; ++i) {
      auto a = norm_axis(axes[i], r);
      if (!a || seen[static_cast<size_t>(*a)])
        fail(ErrorCode::InvalidArgument, "{}: axis {} is out of range or repeated", label, axes[i]);
      seen[static_cast<size_t>(*a)] = true;
      pb[static_cast<size_t>(*a)] = pads[i];
      pe[static_cast<size_t>(*a)] = pads[na + i];
    }
    out_shape_.assign(static_cast<size_t>(r), 0);
    src_.assign(static_cast<size_t>(r), {});
    for (int64_t d = 0; d < r; ++d) {
      const int64_t n = x.dim(d), o_n = n + pb[d] + pe[d];
      if (o_n < 0) fail(ErrorCode::InvalidArgument, "{}: pads make dim {} negative", label, d);
      if (o_n > 0 && n == 0 && mode_ != "constant")
        fail(ErrorCode::InvalidArgument, "{}: mode '{}' cannot pad an empty dimension {}", label, mode_, d);
      if (mode_ == "reflect" && n == 1 && (pb[d] > 0 || pe[d] > 0))
        fail(ErrorCode::InvalidArgument, "{}: reflect padding needs at least 2 elements on dim {}", label, d);
      out_shape_[static_cast<size_t>(d)] = o_n;
      auto& t = src_[static_cast<size_t>(d)];
      t.resize(static_cast<size_t>(o_n));
      for (int64_t o = 0; o < o_n; ++o) {
        int64_t i = o - pb[d];
        if (i < 0 || i >= n) {
          if (mode_ == "constant") i = -1;
          else if (mode_ == "edge") i = std::clamp<int64_t>(i, 0, n - 1);
          else if (mode_ == "wrap") i = ((i % n) + n) % n;
          else {
            const int64_t period = 2 * (n - 1);
            i = ((i % period) + period) % period;
            if (i >= n) i = period - i;
          }
        }
        t[static_cast<size_t>(o)] = i;
      }
    }
    if (r == 0) out_shape_ = {};
    pads_ = pads;
    axes_ = axes;
    x_shape_ = x.shape();
  }
  DType dt_;
  std::string mode_;
  std::vector<int64_t> attr_pads_, pads_, axes_, x_shape_;
};

bool make_pad(PlanBuilder& b, const Node& n) {
  const DType dt = dtype_of(b, n.inputs[0]);
  auto x = b.static_type(n.inputs[0]);
  if (!movable_dtype(dt) || (x && x->second.empty())) return false;
  std::string mode = n.get_string("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap") return false;
  if (n.has_input(2) && dtype_of(b, n.inputs[2]) != dt) return false;
  add_tensor_step(b, n, std::make_unique<PadStep>(dt, mode, n.get_ints("pads")), {dt}, "pad copy");
  return true;
}

class TileStep : public TablesStep {
 public:
  explicit TileStep(DType dt) : dt_(dt) {}
  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    const Tensor& x = *in[0];
    auto reps = in[1]->to_int64s();
    if (static_cast<int64_t>(reps.size()) != x.rank())
      fail(ErrorCode::InvalidArgument, "{}: repeats has {} values for a rank-{} input", label, reps.size(), x.rank());
    if (reps != reps_ || x.shape() != x_shape_) {
      out_shape_.clear();
      src_.clear();
      for (int64_t d = 0; d < x.rank(); ++d) {
        if (reps[d] < 0) fail(ErrorCode::InvalidArgument, "{}: repeats must be non-negative", label);
        out_shape_.push_back(x.dim(d) * reps[d]);
        std::vector<int64_t> t(static_cast<size_t>(out_shape_.back()));
        for (int64_t o = 0; o < out_shape_.back(); ++o) t[static_cast<size_t>(o)] = o % x.dim(d);
        src_.push_back(std::move(t));
      }
      reps_ = reps;
      x_shape_ = x.shape();
    }
    Tensor& y = out(rs, 0, dt_, out_shape_);
    if (x.rank() == 0) {
      std::memcpy(y.raw_data(), x.raw_data(), x.nbytes());
      return;
    }
    gather(rs, x, y, nullptr);
  }

 private:
  DType dt_;
  std::vector<int64_t> reps_, x_shape_;
};

bool make_tile(PlanBuilder& b, const Node& n) {
  const DType dt = dtype_of(b, n.inputs[0]);
  if (!movable_dtype(dt) || n.inputs.size() != 2 || !dtype_is_integer(dtype_of(b, n.inputs[1]))) return false;
  add_tensor_step(b, n, std::make_unique<TileStep>(dt), {dt}, "tile copy");
  return true;
}

// DepthToSpace by output rows (depth_to_space); SpaceToDepth as x viewed with permuted dims and
// strides, copied contiguous.
class PermuteStep : public TensorStep {
 public:
  PermuteStep(DType dt, std::string op, int64_t block, bool crd) : dt_(dt), op_(std::move(op)), b_(block), crd_(crd) {}
  void configure(const std::vector<const Tensor*>& in) override {
    const Tensor& x = *in[0];
    if (x.rank() != 4) fail(ErrorCode::InvalidArgument, "{}: input must be 4-D, got {}", label, x.shape_string());
    const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3), b = b_;
    std::vector<int64_t> shape, perm;
    if (op_ == "DepthToSpace") {
      if (C % (b * b) != 0)
        fail(ErrorCode::InvalidArgument, "{}: channels {} not divisible by blocksize² {}", label, C, b * b);
      out_shape_ = {N, C / (b * b), H * b, W * b};
      return;  // depth_to_space's own loop
    }
    if (H % b != 0 || W % b != 0)
      fail(ErrorCode::InvalidArgument, "{}: spatial dims {}x{} not divisible by blocksize {}", label, H, W, b);
    shape = {N, C, H / b, b, W / b, b};
    perm = {0, 3, 5, 1, 2, 4};
    out_shape_ = {N, C * b * b, H / b, W / b};
    auto st = contiguous_strides(shape);
    dims_.clear();
    strides_.clear();
    for (int64_t p : perm) {
      dims_.push_back(shape[static_cast<size_t>(p)]);
      strides_.push_back(st[static_cast<size_t>(p)]);
    }
  }
  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    Tensor& y = out(rs, 0, dt_, out_shape_);
    dispatch_bytes(dt_, [&]<typename T>() {
      const T* x = static_cast<const T*>(in[0]->raw_data());
      if (op_ == "DepthToSpace")
        depth_to_space(x, static_cast<T*>(y.raw_data()), in[0]->shape(), rs.threads);
      else
        gather_strided(x, static_cast<T*>(y.raw_data()), dims_, strides_, rs.threads);
    });
  }

 private:
  // Output row by output row: the b input rows that interleave into one are read in order and
  // written b apart within it (a strided gather over the whole tensor read b planes per
  // b outputs: ESPCN's 27 x 224 x 224 at 4.5 ms, twice ONNX Runtime's time).
  template <typename T>
  void depth_to_space(const T* x, T* y, const std::vector<int64_t>& xs, int threads) const {
    const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], b = b_, c2 = C / (b * b);
    const int64_t rows = N * c2 * H;
    parallel_for(rows, rows * W * b * b >= (1 << 15) ? threads : 1, [&](int64_t r) {
      const int64_t h = r % H, c = (r / H) % c2, n = r / H / c2;
      for (int64_t i = 0; i < b; ++i) {
        T* yr = y + (((n * c2 + c) * H + h) * b + i) * W * b;
        for (int64_t j = 0; j < b; ++j) {
          const int64_t ch = crd_ ? (c * b + i) * b + j : (i * b + j) * c2 + c;
          const T* xr = x + ((n * C + ch) * H + h) * W;
          for (int64_t w = 0; w < W; ++w) yr[w * b + j] = xr[w];
        }
      }
    });
  }

  DType dt_;
  std::string op_;
  int64_t b_;
  bool crd_;
  std::vector<int64_t> out_shape_, dims_, strides_;
};

// Transpose of a value whose shape is known only at run time (after NonZero: torch.nonzero's
// export transposes NonZero's [rank, count] to [count, rank]); static ones are
// data_movement.cc's strided copy.
class TransposeStep : public TensorStep {
 public:
  TransposeStep(DType dt, Node node) : dt_(dt), node_(std::move(node)) {}
  void configure(const std::vector<const Tensor*>& in) override {
    const Tensor& x = *in[0];
    const size_t r = static_cast<size_t>(x.rank());
    auto perm = passes::transpose_perm(node_, r);
    if (perm.size() != r) fail(ErrorCode::InvalidArgument, "{}: perm has {} entries for rank {}", label, perm.size(), r);
    auto st = contiguous_strides(x.shape());
    std::vector<bool> seen(r, false);
    dims_.clear();
    strides_.clear();
    for (int64_t p : perm) {
      if (p < 0 || p >= static_cast<int64_t>(r) || seen[static_cast<size_t>(p)])
        fail(ErrorCode::InvalidArgument, "{}: perm is not a permutation of rank {}", label, r);
      seen[static_cast<size_t>(p)] = true;
      dims_.push_back(x.dim(p));
      strides_.push_back(st[static_cast<size_t>(p)]);
    }
  }
  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    Tensor& y = out(rs, 0, dt_, dims_);
    if (y.numel() == 0) return;
    if (dims_.empty()) {  // a scalar
      std::memcpy(y.raw_data(), in[0]->raw_data(), dtype_bits(dt_) / 8);
      return;
    }
    dispatch_bytes(dt_, [&]<typename T>() {
      gather_strided(static_cast<const T*>(in[0]->raw_data()), static_cast<T*>(y.raw_data()), dims_, strides_,
                     rs.threads);
    });
  }

 private:
  DType dt_;
  Node node_;
  std::vector<int64_t> dims_, strides_;
};

bool make_dynamic_transpose(PlanBuilder& b, const Node& n) {
  const DType dt = dtype_of(b, n.inputs[0]);
  if (!movable_dtype(dt)) return false;
  add_tensor_step(b, n, std::make_unique<TransposeStep>(dt, n), {dt}, "transpose copy (shape known at run time)");
  return true;
}

bool make_space_depth(PlanBuilder& b, const Node& n) {
  const DType dt = dtype_of(b, n.inputs[0]);
  const int64_t block = n.get_int("blocksize", 0);
  const std::string mode = n.get_string("mode", "DCR");
  if (!movable_dtype(dt) || block <= 0 || (mode != "DCR" && mode != "CRD")) return false;
  add_tensor_step(b, n, std::make_unique<PermuteStep>(dt, n.op_type, block, mode == "CRD"), {dt}, "permute copy");
  return true;
}

// Split along an axis: each output one memcpy per outer row.
class SplitStep : public TensorStep {
 public:
  SplitStep(DType dt, int64_t axis, int64_t num_outputs) : dt_(dt), axis_(axis), num_outputs_(num_outputs) {}
  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    const Tensor& x = *in[0];
    auto a = norm_axis(axis_, x.rank());
    if (!a) fail(ErrorCode::InvalidArgument, "{}: axis {} is out of range for {}", label, axis_, x.shape_string());
    const int64_t dim = x.dim(*a), n_out = static_cast<int64_t>(output_writes_.size());
    std::vector<int64_t> sizes;
    if (in.size() > 1 && in[1]) {
      sizes = in[1]->to_int64s();
      int64_t sum = 0;
      for (int64_t s : sizes) {
        if (s < 0) fail(ErrorCode::InvalidArgument, "{}: split {} has a negative size", label, shape_to_string(sizes));
        sum += s;
      }
      if (static_cast<int64_t>(sizes.size()) != n_out || sum != dim)
        fail(ErrorCode::InvalidArgument, "{}: split {} does not cut axis {} of size {} into {} outputs", label,
             shape_to_string(sizes), *a, dim, n_out);
    } else {
      const int64_t k = num_outputs_ > 0 ? num_outputs_ : n_out;
      if (k != n_out) fail(ErrorCode::InvalidArgument, "{}: num_outputs {} does not match the {} outputs", label, k, n_out);
      if (dim % k == 0) {
        sizes.assign(static_cast<size_t>(k), dim / k);
      } else {
        const int64_t chunk = dim / k + 1;
        sizes.assign(static_cast<size_t>(k), chunk);
        sizes.back() = dim - chunk * (k - 1);
        if (sizes.back() < 0) fail(ErrorCode::InvalidArgument, "{}: cannot split {} into {} outputs", label, dim, k);
      }
    }
    int64_t outer = 1, inner = static_cast<int64_t>(dtype_storage_bytes(dt_, 1));
    for (int64_t d = 0; d < *a; ++d) outer *= x.dim(d);
    for (int64_t d = *a + 1; d < x.rank(); ++d) inner *= x.dim(d);
    const char* src = static_cast<const char*>(x.raw_data());
    int64_t start = 0;
    for (int64_t i = 0; i < n_out; ++i) {
      const int64_t len = sizes[static_cast<size_t>(i)];
      if (output_writes_[static_cast<size_t>(i)] >= 0) {
        auto shape = x.shape();
        shape[static_cast<size_t>(*a)] = len;
        Tensor& y = out(rs, static_cast<size_t>(i), dt_, shape);
        char* dst = static_cast<char*>(y.raw_data());
        const int64_t w = len * inner, s0 = start * inner, row = dim * inner;
        parallel_for(outer, outer * w >= (1 << 17) ? rs.threads : 1,
                     [&](int64_t o) { std::memcpy(dst + o * w, src + o * row + s0, static_cast<size_t>(w)); });
      }
      start += len;
    }
  }

 private:
  DType dt_;
  int64_t axis_, num_outputs_;
};

bool make_split(PlanBuilder& b, const Node& n) {
  const DType dt = dtype_of(b, n.inputs[0]);
  if (!movable_dtype(dt)) return false;
  if (n.has_input(1) && !dtype_is_integer(dtype_of(b, n.inputs[1]))) return false;
  std::vector<DType> dts(n.outputs.size(), dt);
  add_tensor_step(b, n, std::make_unique<SplitStep>(dt, n.get_int("axis", 0), n.get_int("num_outputs", 0)), dts,
                  "split copy");
  return true;
}

class TriluStep : public TensorStep {
 public:
  TriluStep(DType dt, bool upper) : dt_(dt), upper_(upper) {}
  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    const Tensor& x = *in[0];
    if (x.rank() < 2) fail(ErrorCode::InvalidArgument, "{}: Trilu needs rank >= 2, got {}", label, x.shape_string());
    int64_t k = 0;
    if (in.size() > 1 && in[1]) {
      if (in[1]->numel() != 1) fail(ErrorCode::InvalidArgument, "{}: k must be one integer", label);
      k = in[1]->get_int64(0);
    }
    Tensor& y = out(rs, 0, dt_, x.shape());
    const int64_t rows = x.dim(-2), cols = x.dim(-1), mats = rows * cols != 0 ? x.numel() / (rows * cols) : 0;
    dispatch_bytes(dt_, [&]<typename T>() {
      const T* s = static_cast<const T*>(x.raw_data());
      T* d = static_cast<T*>(y.raw_data());
      parallel_for(mats * rows, x.numel() >= (1 << 15) ? rs.threads : 1, [&](int64_t q) {
        const int64_t i = q % rows;
        const T* sr = s + q * cols;
        T* dr = d + q * cols;
        // upper keeps j >= i + k, lower keeps j <= i + k.
        const int64_t edge = std::clamp<int64_t>(upper_ ? i + k : i + k + 1, 0, cols);
        for (int64_t j = 0; j < edge; ++j) dr[j] = upper_ ? T{} : sr[j];
        for (int64_t j = edge; j < cols; ++j) dr[j] = upper_ ? sr[j] : T{};
      });
    });
  }

 private:
  DType dt_;
  bool upper_;
};

bool make_trilu(PlanBuilder& b, const Node& n) {
  const DType dt = dtype_of(b, n.inputs[0]);
  if (!movable_dtype(dt)) return false;
  add_tensor_step(b, n, std::make_unique<TriluStep>(dt, n.get_int("upper", 1) != 0), {dt}, "trilu copy");
  return true;
}

// Shape, Size: the input's dims at run time (static ones are folded by the passes).
class ShapeStep : public TensorStep {
 public:
  ShapeStep(bool size, int64_t start, std::optional<int64_t> end) : size_(size), start_(start), end_(end) {}
  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    const Tensor& x = *in[0];
    if (size_) {
      Tensor& y = out(rs, 0, DType::I64, {});
      y.data<int64_t>()[0] = x.numel();
      return;
    }
    const int64_t r = x.rank();
    auto clampi = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + r : v, 0, r); };
    const int64_t s = clampi(start_), e = end_ ? clampi(*end_) : r;
    Tensor& y = out(rs, 0, DType::I64, {std::max<int64_t>(e - s, 0)});
    int64_t* d = y.data<int64_t>();
    for (int64_t i = s; i < e; ++i) d[i - s] = x.dim(i);
  }

 private:
  bool size_;
  int64_t start_;
  std::optional<int64_t> end_;
};

bool make_shape(PlanBuilder& b, const Node& n) {
  const bool size = n.op_type == "Size";
  auto t = b.graph().type_of(n.inputs[0]);
  if (!t || !t->is_tensor()) return false;  // sequences, optionals
  std::optional<int64_t> end;
  if (n.has_attr("end")) end = n.get_int("end", 0);
  add_tensor_step(b, n, std::make_unique<ShapeStep>(size, n.get_int("start", 0), end), {DType::I64}, "shape");
  return true;
}

class ConstantOfShapeStep : public TensorStep {
 public:
  explicit ConstantOfShapeStep(Tensor v) : v_(std::move(v)) {}
  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    auto dims = in[0]->to_int64s();
    for (int64_t d : dims)
      if (d < 0) fail(ErrorCode::InvalidArgument, "{}: shape {} has a negative dim", label, shape_to_string(dims));
    Tensor& y = out(rs, 0, v_.dtype(), dims);
    const int64_t n = y.numel();
    dispatch_bytes(v_.dtype(), [&]<typename T>() {
      T v;
      std::memcpy(&v, v_.raw_data(), sizeof(T));
      T* d = static_cast<T*>(y.raw_data());
      parallel_for((n + 16383) / 16384, n >= (1 << 16) ? rs.threads : 1, [&](int64_t c) {
        for (int64_t i = c * 16384, e = std::min(n, i + 16384); i < e; ++i) d[i] = v;
      });
    });
  }

 private:
  Tensor v_;
};

bool make_constant_of_shape(PlanBuilder& b, const Node& n) {
  const Tensor* value = n.get_tensor("value");
  Tensor v = value ? value->contiguous() : Tensor::scalar(DType::F32, 0.0f);
  if (v.numel() != 1 || !movable_dtype(v.dtype()) || dtype_of(b, n.inputs[0]) != DType::I64) return false;
  add_tensor_step(b, n, std::make_unique<ConstantOfShapeStep>(v), {v.dtype()}, "fill");
  return true;
}

class RangeStep : public TensorStep {
 public:
  explicit RangeStep(DType dt) : dt_(dt) {}
  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    for (int i = 0; i < 3; ++i)
      if (in[static_cast<size_t>(i)]->numel() != 1)
        fail(ErrorCode::InvalidArgument, "{}: start, limit and delta must be scalars", label);
    dispatch_compute(dt_, [&]<typename T>() {
      const T s = in[0]->data<T>()[0], l = in[1]->data<T>()[0], d = in[2]->data<T>()[0];
      int64_t n = 0;
      if constexpr (std::is_floating_point_v<T>) {
        const double start = s, limit = l, delta = d;
        if (delta == 0 || !std::isfinite(delta) || !std::isfinite(start) || !std::isfinite(limit))
          fail(ErrorCode::InvalidArgument, "{}: Range needs finite start/limit and a non-zero finite delta", label);
        const double cnt = std::ceil((limit - start) / delta);
        if (cnt > 1e10) fail(ErrorCode::InvalidArgument, "{}: Range would produce {} elements", label, cnt);
        n = cnt > 0 ? static_cast<int64_t>(cnt) : 0;
      } else {
        if (d == 0) fail(ErrorCode::InvalidArgument, "{}: Range needs a non-zero delta", label);
        const __int128 span = static_cast<__int128>(l) - s;
        __int128 q = span / d;
        if (span % d != 0 && ((span < 0) == (d < 0))) ++q;
        if (q > static_cast<__int128>(1e10)) fail(ErrorCode::InvalidArgument, "{}: Range is too long", label);
        n = q > 0 ? static_cast<int64_t>(q) : 0;
      }
      Tensor& y = out(rs, 0, dt_, {n});
      T* p = static_cast<T*>(y.raw_data());
      if constexpr (std::is_same_v<T, double>) {
        for (int64_t i = 0; i < n; ++i) p[i] = s + static_cast<double>(i) * d;
      } else if constexpr (std::is_floating_point_v<T>) {
        for (int64_t i = 0; i < n; ++i) p[i] = s + static_cast<T>(i) * d;
      } else {
        for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(static_cast<int64_t>(s) + i * static_cast<int64_t>(d));
      }
    });
  }

 private:
  DType dt_;
};

bool make_range(PlanBuilder& b, const Node& n) {
  const DType dt = dtype_of(b, n.inputs[0]);
  if (n.inputs.size() != 3 || !is_compute_dtype(dt) || dt == DType::U8 || dt == DType::I8) return false;
  for (const auto& in : n.inputs)
    if (dtype_of(b, in) != dt) return false;
  add_tensor_step(b, n, std::make_unique<RangeStep>(dt), {dt}, "range");
  return true;
}

class NonZeroStep : public TensorStep {
 public:
  explicit NonZeroStep(DType dt) : dt_(dt) {}
  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    const Tensor& x = *in[0];
    std::vector<int64_t> shape = x.shape();
    if (shape.empty()) shape = {1};
    const int64_t r = static_cast<int64_t>(shape.size()), n = x.numel();
    flags_.resize(static_cast<size_t>(n));
    dispatch_compute(dt_, [&]<typename T>() {
      const T* p = static_cast<const T*>(x.raw_data());
      for (int64_t i = 0; i < n; ++i) flags_[static_cast<size_t>(i)] = p[i] != T(0);
    });
    int64_t nnz = 0;
    for (uint8_t f : flags_) nnz += f;
    Tensor& y = out(rs, 0, DType::I64, {r, nnz});
    int64_t* d = y.data<int64_t>();
    std::vector<int64_t> coord(static_cast<size_t>(r), 0);
    int64_t j = 0;
    for (int64_t k = 0; k < n; ++k) {
      if (flags_[static_cast<size_t>(k)]) {
        for (int64_t a = 0; a < r; ++a) d[a * nnz + j] = coord[static_cast<size_t>(a)];
        ++j;
      }
      for (int64_t a = r; a-- > 0;) {
        if (++coord[static_cast<size_t>(a)] < shape[static_cast<size_t>(a)]) break;
        coord[static_cast<size_t>(a)] = 0;
      }
    }
  }

 private:
  DType dt_;
  std::vector<uint8_t> flags_;
};

bool make_nonzero(PlanBuilder& b, const Node& n) {
  DType dt = dtype_of(b, n.inputs[0]);
  if (dt == DType::Bool) dt = DType::U8;
  if (!is_compute_dtype(dt)) return false;
  add_tensor_step(b, n, std::make_unique<NonZeroStep>(dt), {DType::I64}, "nonzero");
  return true;
}

// Reshape/Flatten/Squeeze/Unsqueeze of a value whose shape the plan does not know: the new shape
// computed at run time, the bytes copied (the input may live in the arena, reused later).
class DynamicReshapeStep : public TensorStep {
 public:
  DynamicReshapeStep(DType dt, const Node& n) : dt_(dt), op_(n.op_type), allowzero_(n.get_int("allowzero", 0) != 0) {
    axis_ = n.get_int("axis", 1);
    attr_axes_ = n.get_ints("axes");
  }
  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    const Tensor& x = *in[0];
    std::vector<int64_t> shape = x.shape();
    const int64_t r = x.rank();
    std::vector<int64_t> axes = in.size() > 1 && in[1] ? in[1]->to_int64s() : attr_axes_;
    if (op_ == "Reshape") {
      shape = in[1]->to_int64s();
      int64_t known = 1, infer = -1;
      for (size_t i = 0; i < shape.size(); ++i) {
        if (shape[i] == 0 && !allowzero_) {
          if (static_cast<int64_t>(i) >= r) fail(ErrorCode::InvalidArgument, "{}: 0 copies a dim the input lacks", label);
          shape[i] = x.dim(static_cast<int64_t>(i));
        }
        if (shape[i] == -1) {
          if (infer >= 0) fail(ErrorCode::InvalidArgument, "{}: more than one -1 in the shape", label);
          infer = static_cast<int64_t>(i);
        } else if (shape[i] < 0) {
          fail(ErrorCode::InvalidArgument, "{}: negative dim {} in the shape", label, shape[i]);
        } else {
          known *= shape[i];
        }
      }
      if (infer >= 0) {
        if (known == 0 || x.numel() % known != 0)
          fail(ErrorCode::InvalidArgument, "{}: cannot reshape {} into {}", label, x.shape_string(),
               shape_to_string(shape));
        shape[static_cast<size_t>(infer)] = x.numel() / known;
      }
    } else if (op_ == "Flatten") {
      const int64_t a = axis_ < 0 ? axis_ + r : axis_;
      if (a < 0 || a > r) fail(ErrorCode::InvalidArgument, "{}: axis {} is out of range", label, axis_);
      int64_t o = 1;
      for (int64_t d = 0; d < a; ++d) o *= x.dim(d);
      shape = {o, o ? x.numel() / o : 0};
      if (o == 0) {
        int64_t i = 1;
        for (int64_t d = a; d < r; ++d) i *= x.dim(d);
        shape[1] = i;
      }
    } else if (op_ == "Squeeze") {
      std::vector<bool> drop(static_cast<size_t>(r), axes.empty());
      for (int64_t a : axes) {
        auto na = norm_axis(a, r);
        if (!na || x.dim(*na) != 1) fail(ErrorCode::InvalidArgument, "{}: cannot squeeze axis {} of {}", label, a, x.shape_string());
        drop[static_cast<size_t>(*na)] = true;
      }
      shape.clear();
      for (int64_t d = 0; d < r; ++d)
        if (!(drop[static_cast<size_t>(d)] && x.dim(d) == 1)) shape.push_back(x.dim(d));
    } else {  // Unsqueeze
      const int64_t nr = r + static_cast<int64_t>(axes.size());
      std::vector<bool> ins(static_cast<size_t>(nr), false);
      for (int64_t a : axes) {
        auto na = norm_axis(a, nr);
        if (!na || ins[static_cast<size_t>(*na)]) fail(ErrorCode::InvalidArgument, "{}: bad axis {}", label, a);
        ins[static_cast<size_t>(*na)] = true;
      }
      shape.clear();
      int64_t k = 0;
      for (int64_t d = 0; d < nr; ++d) shape.push_back(ins[static_cast<size_t>(d)] ? 1 : x.dim(k++));
    }
    if (shape_numel(shape) != x.numel())
      fail(ErrorCode::InvalidArgument, "{}: cannot reshape {} into {}", label, x.shape_string(), shape_to_string(shape));
    // An input allocated while running (not the arena's, whose bytes later values reuse, nor the
    // caller's) is viewed, not copied: a decoder stacking its growing cache (Unsqueeze -> Concat)
    // copied it twice a step. Its producer allocates anew while the view holds the bytes.
    Slot& ys = rs.slots[writes[static_cast<size_t>(output_writes_[0])]];
    const Slot& xs = rs.slots[reads[static_cast<size_t>(input_reads_[0])]];
    if (ys.kind == Slot::Kind::Dynamic && xs.kind == Slot::Kind::Dynamic && x.is_contiguous()) {
      ys.value = RuntimeValue(x.reshape(shape));
      return;
    }
    Tensor& y = out(rs, 0, dt_, shape);
    if (y.raw_data() != x.raw_data()) std::memcpy(y.raw_data(), x.raw_data(), x.nbytes());
  }

 private:
  DType dt_;
  std::string op_;
  bool allowzero_;
  int64_t axis_ = 1;
  std::vector<int64_t> attr_axes_;
};

bool make_dynamic_reshape(PlanBuilder& b, const Node& n) {
  if (!passes::is_reshape_op(n)) return false;
  if (n.op_type != "Reshape" && n.op_type != "Flatten" && n.op_type != "Squeeze" && n.op_type != "Unsqueeze")
    return false;
  const DType dt = dtype_of(b, n.inputs[0]);
  if (!movable_dtype(dt) || (n.op_type == "Reshape" && n.inputs.size() < 2)) return false;
  add_tensor_step(b, n, std::make_unique<DynamicReshapeStep>(dt, n), {dt}, "reshape copy (shape known at run time)");
  return true;
}

// Slice whose starts/ends/axes/steps are computed while running (data-dependent bounds): read
// and clamped every run by ONNX's rules, as the interpreter does, then one strided gather.
// Static bounds take data_movement.cc's planned strided copy instead.
class DynamicSliceStep : public TensorStep {
 public:
  explicit DynamicSliceStep(DType dt) : dt_(dt) {}
  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    const Tensor& x = *in[0];
    const int64_t r = x.rank();
    auto ints = [&](size_t i) -> std::optional<std::vector<int64_t>> {
      if (in.size() <= i || !in[i]) return std::nullopt;
      return in[i]->to_int64s();
    };
    const std::vector<int64_t> starts = ints(1).value_or(std::vector<int64_t>{}),
                               ends = ints(2).value_or(std::vector<int64_t>{});
    const size_t n = starts.size();
    if (ends.size() != n) fail(ErrorCode::InvalidArgument, "{}: starts has {} values, ends {}", label, n, ends.size());
    std::vector<int64_t> axes = ints(3).value_or(std::vector<int64_t>{}), steps = ints(4).value_or(std::vector<int64_t>(n, 1));
    if (!ints(3))
      for (size_t i = 0; i < n; ++i) axes.push_back(static_cast<int64_t>(i));
    if (axes.size() != n || steps.size() != n)
      fail(ErrorCode::InvalidArgument, "{}: starts, ends, axes and steps must have the same length", label);
    std::vector<int64_t> dims = x.shape(), strides = contiguous_strides(dims);
    int64_t base = 0;
    std::vector<bool> seen(static_cast<size_t>(r), false);
    for (size_t i = 0; i < n; ++i) {
      auto a = norm_axis(axes[i], r);
      if (!a) fail(ErrorCode::InvalidArgument, "{}: axis {} is out of range for {}", label, axes[i], x.shape_string());
      const size_t ax = static_cast<size_t>(*a);
      if (seen[ax]) fail(ErrorCode::InvalidArgument, "{}: axes {} has a repeated axis", label, shape_to_string(axes));
      seen[ax] = true;
      const int64_t step = steps[i], dim = dims[ax];
      if (step == 0) fail(ErrorCode::InvalidArgument, "{}: steps must not be 0", label);
      int64_t s = starts[i], e = ends[i];
      if (s < 0) s += dim;
      if (e < 0) e += dim;
      if (step > 0) {
        s = std::clamp<int64_t>(s, 0, dim);
        e = std::clamp<int64_t>(e, 0, dim);
      } else {
        s = std::clamp<int64_t>(s, 0, std::max<int64_t>(dim - 1, 0));
        e = std::clamp<int64_t>(e, -1, dim - 1);
      }
      const int64_t len = step > 0 ? (e > s ? (e - s + step - 1) / step : 0) : (s > e ? (s - e - step - 1) / -step : 0);
      base += len > 0 ? s * strides[ax] : 0;
      dims[ax] = dim == 0 ? 0 : len;
      strides[ax] *= step;
    }
    Tensor& y = out(rs, 0, dt_, dims);
    if (y.numel() == 0) return;
    dispatch_bytes(dt_, [&]<typename T>() {
      gather_strided(static_cast<const T*>(x.raw_data()) + base, static_cast<T*>(y.raw_data()), dims, strides,
                     rs.threads);
    });
  }

 private:
  DType dt_;
};

bool make_dynamic_slice(PlanBuilder& b, const Node& n) {
  const DType dt = dtype_of(b, n.inputs[0]);
  if (!movable_dtype(dt) || n.inputs.size() < 3) return false;
  add_tensor_step(b, n, std::make_unique<DynamicSliceStep>(dt), {dt}, "strided gather (bounds known while running)");
  return true;
}

// n rows of w bytes from `src` (rows back to back) to `dst` (rows `ld` bytes apart).
template <size_t W>
void copy_fixed_rows(const char* src, char* dst, int64_t ld, int64_t n) {
  for (int64_t r = 0; r < n; ++r) std::memcpy(dst + r * ld, src + r * static_cast<int64_t>(W), W);
}
void copy_rows(const char* src, int64_t w, char* dst, int64_t ld, int64_t n) {
  switch (w) {
    case 1: return copy_fixed_rows<1>(src, dst, ld, n);
    case 2: return copy_fixed_rows<2>(src, dst, ld, n);
    case 4: return copy_fixed_rows<4>(src, dst, ld, n);
    case 8: return copy_fixed_rows<8>(src, dst, ld, n);
    case 16: return copy_fixed_rows<16>(src, dst, ld, n);
    default:
      for (int64_t r = 0; r < n; ++r) std::memcpy(dst + r * ld, src + r * w, static_cast<size_t>(w));
  }
}

// Concat of inputs whose shapes are known only while running (the proposals and boxes of a
// detector's postprocess): checked every run, then one block copy per input per outer row.
// Static shapes take data_movement.cc's planned copy (or dnnl_concat.cc's blocked one).
class DynamicConcatStep : public TensorStep {
 public:
  DynamicConcatStep(DType dt, int64_t axis) : dt_(dt), axis_(axis) {}
  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    const Tensor& first = *in[0];
    auto a = norm_axis(axis_, first.rank());
    if (!a) fail(ErrorCode::InvalidArgument, "{}: axis {} is out of range for {}", label, axis_, first.shape_string());
    const size_t ax = static_cast<size_t>(*a);
    std::vector<int64_t> shape = first.shape();
    shape[ax] = 0;
    for (const Tensor* t : in) {
      bool same = t->rank() == first.rank();
      for (size_t d = 0; same && d < shape.size(); ++d) same = d == ax || t->dim(static_cast<int64_t>(d)) == shape[d];
      if (!same)
        fail(ErrorCode::InvalidArgument, "{}: inputs {} and {} differ outside axis {}", label, first.shape_string(),
             t->shape_string(), *a);
      shape[ax] += t->dim(static_cast<int64_t>(ax));
    }
    Tensor& y = out(rs, 0, dt_, shape);
    if (y.numel() == 0) return;
    const size_t es = dtype_storage_bytes(dt_, 1);
    int64_t outer = 1, inner = static_cast<int64_t>(es);
    for (size_t d = 0; d < ax; ++d) outer *= shape[d];
    for (size_t d = ax + 1; d < shape.size(); ++d) inner *= shape[d];
    const int64_t out_row = shape[ax] * inner;
    char* dst = static_cast<char*>(y.raw_data());
    // Blocks of about 32 KiB of output rows, every part's share of a block copied in turn: a
    // part of a few bytes a row (torch's index tuples, MViT: four int64 columns of 78M rows
    // stacked on the last axis) costs a fixed-size copy a row, not a memcpy call through a
    // per-row task.
    const int64_t rows = std::max<int64_t>(1, (int64_t{1} << 15) / out_row), blocks = (outer + rows - 1) / rows;
    parallel_for(blocks, outer * out_row >= (1 << 16) ? rs.threads : 1, [&](int64_t bk) {
      const int64_t r0 = bk * rows, n = std::min(outer, r0 + rows) - r0;
      int64_t col = 0;
      for (const Tensor* t : in) {
        const int64_t w = t->dim(static_cast<int64_t>(ax)) * inner;
        if (w == 0) continue;  // an empty part
        copy_rows(static_cast<const char*>(t->raw_data()) + r0 * w, w, dst + r0 * out_row + col, out_row, n);
        col += w;
      }
    });
  }

 private:
  DType dt_;
  int64_t axis_;
};

bool make_dynamic_concat(PlanBuilder& b, const Node& n) {
  const DType dt = dtype_of(b, n.inputs[0]);
  if (!movable_dtype(dt) || !n.has_attr("axis")) return false;
  for (const auto& i : n.inputs)
    if (i.empty() || dtype_of(b, i) != dt) return false;
  add_tensor_step(b, n, std::make_unique<DynamicConcatStep>(dt, n.get_int("axis", 0)), {dt},
                  "block copies (shapes known while running)");
  return true;
}

// A node whose every output is empty: nothing to compute, the outputs are their shapes.
class EmptyResultStep : public TensorStep {
 public:
  explicit EmptyResultStep(std::vector<std::pair<DType, std::vector<int64_t>>> outs) : outs_(std::move(outs)) {}
  void execute(RunState& rs, const std::vector<const Tensor*>&) override {
    for (size_t i = 0; i < outs_.size(); ++i)
      if (output_writes_[i] >= 0) out(rs, i, outs_[i].first, outs_[i].second);
  }

 private:
  std::vector<std::pair<DType, std::vector<int64_t>>> outs_;
};

}  // namespace

bool make_empty_tensor_ops(PlanBuilder& b, const Node& n) {
  for (const auto& a : n.attributes)
    if (a.g || !a.graphs.empty()) return false;
  std::vector<std::pair<DType, std::vector<int64_t>>> outs;
  bool all_empty = !n.outputs.empty();
  for (const auto& o : n.outputs) {
    if (o.empty()) {
      outs.emplace_back(DType::Undefined, std::vector<int64_t>{});
      continue;
    }
    auto t = b.static_type(o);
    all_empty = all_empty && t && t->first != DType::String && shape_numel(t->second) == 0;
    if (!all_empty) break;
    outs.push_back(*t);
  }
  if (all_empty) {
    std::vector<DType> dtypes;
    for (const auto& o : outs) dtypes.push_back(o.first);
    add_tensor_step(b, n, std::make_unique<EmptyResultStep>(std::move(outs)), dtypes, "empty result");
    return true;
  }
  // Copies and shape reads, which take empty parts: a shape computation's Concat of a [0] slice.
  if (n.domain.empty() && (n.op_type == "Concat" || n.op_type == "Shape" || n.op_type == "Size"))
    return make_tensor_ops(b, n);
  return false;
}

bool make_tensor_ops(PlanBuilder& b, const Node& n) {
  if (!n.domain.empty() || n.inputs.empty() || n.inputs[0].empty()) return false;
  const std::string& op = n.op_type;
  if (op == "Pad") return make_pad(b, n);
  if (op == "Tile") return make_tile(b, n);
  if (op == "DepthToSpace" || op == "SpaceToDepth") return make_space_depth(b, n);
  if (op == "Split") return make_split(b, n);
  if (op == "Slice") return make_dynamic_slice(b, n);
  if (op == "Trilu") return make_trilu(b, n);
  if (op == "Shape" || op == "Size") return make_shape(b, n);
  if (op == "ConstantOfShape") return make_constant_of_shape(b, n);
  if (op == "Range") return make_range(b, n);
  if (op == "NonZero") return make_nonzero(b, n);
  if (op == "Transpose") return make_dynamic_transpose(b, n);
  if (op == "Concat") return make_dynamic_concat(b, n);
  return make_dynamic_reshape(b, n);
}

}  // namespace hodu::cpu
