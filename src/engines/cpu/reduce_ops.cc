// Reductions along axes: every Reduce* op (any axes, keepdims, noop_with_empty_axes; axes as
// attribute or input), ArgMax/ArgMin, CumSum/CumProd and TopK, in the interpreter's semantics
// (its reduce_row.h is shared: double accumulation for floats, wrapping integer sums; NaN wins
// Max/Min/ArgMax, ties go to the lowest index). Trailing reduced axes are reduced in place, row by row; a sum or
// mean over leading or middle axes accumulates whole rows (no transpose); other patterns pack
// the reduced elements once into a buffer the step keeps.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "engines/cpu/tensor_step.h"
#include "engines/interp/ops/reduce_row.h"

namespace hodu::cpu {
namespace {

using interp::reduce_row;
using interp::RKind;

class ReduceStep : public TensorStep {
 public:
  ReduceStep(RKind kind, DType dt, bool keepdims, bool noop, std::vector<int64_t> attr_axes)
      : kind_(kind), dt_(dt), keepdims_(keepdims), noop_(noop), attr_axes_(std::move(attr_axes)) {}

  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    const Tensor& x = *in[0];
    std::vector<int64_t> axes = in.size() > 1 && in[1] ? in[1]->to_int64s() : attr_axes_;
    if (axes.empty() && noop_) {
      Tensor& y = out(rs, 0, dt_, x.shape());
      std::memcpy(y.raw_data(), x.raw_data(), x.nbytes());
      return;
    }
    if (!ready_ || axes != axes_ || x.shape() != x_shape_) plan(x.shape(), axes);
    Tensor& y = out(rs, 0, dt_, out_shape_);
    dispatch_compute(dt_ == DType::Bool ? DType::U8 : dt_, [&]<typename T>() {
      const T* src = static_cast<const T*>(x.raw_data());
      T* dst = static_cast<T*>(y.raw_data());
      const int64_t n = inner_;
      const int threads = x.numel() >= (1 << 15) ? rs.threads : 1;
      if (mode_ == Mode::Rows) {
        parallel_for(outer_, threads, [&](int64_t o) { dst[o] = reduce_row<T>(kind_, src + o * n, n); });
        return;
      }
      if constexpr (std::is_floating_point_v<T>) {
        if (mode_ == Mode::Columns) {  // [k1, n, k2]: sums of rows of k2, in double
          parallel_for(k1_, threads, [&](int64_t a) {
            std::vector<double> acc(static_cast<size_t>(k2_), 0.0);
            const T* s = src + a * n * k2_;
            for (int64_t r = 0; r < n; ++r)
              for (int64_t j = 0; j < k2_; ++j) acc[static_cast<size_t>(j)] += s[r * k2_ + j];
            T* d = dst + a * k2_;
            const double div = kind_ == RKind::Mean ? static_cast<double>(n) : 1.0;
            for (int64_t j = 0; j < k2_; ++j) d[j] = static_cast<T>(acc[static_cast<size_t>(j)] / div);
          });
          return;
        }
      }
      // Pack each output's elements into a row, then reduce the rows.
      packed_.resize(static_cast<size_t>(outer_ * n) * sizeof(T));
      T* p = reinterpret_cast<T*>(packed_.data());
      parallel_for(outer_, threads, [&](int64_t o) {
        int64_t base = 0, rest = o;
        for (size_t d = kept_dims_.size(); d-- > 0;) {
          base += rest % kept_dims_[d] * kept_strides_[d];
          rest /= kept_dims_[d];
        }
        T* row = p + o * n;
        std::vector<int64_t> idx(red_dims_.size(), 0);
        for (int64_t i = 0; i < n; ++i) {
          int64_t off = base;
          for (size_t d = 0; d < red_dims_.size(); ++d) off += idx[d] * red_strides_[d];
          row[i] = src[off];
          for (size_t d = red_dims_.size(); d-- > 0;) {
            if (++idx[d] < red_dims_[d]) break;
            idx[d] = 0;
          }
        }
        dst[o] = reduce_row<T>(kind_, row, n);
      });
    });
  }

 private:
  enum class Mode { Rows, Columns, Packed };

  void plan(const std::vector<int64_t>& xs, const std::vector<int64_t>& axes) {
    const int64_t r = static_cast<int64_t>(xs.size());
    std::vector<bool> red(static_cast<size_t>(r), axes.empty());
    for (int64_t a : axes) {
      if (a < -r || a >= r || (r == 0 && a != 0 && a != -1))
        fail(ErrorCode::InvalidArgument, "{}: axis {} is out of range for rank {}", label, a, r);
      if (r == 0) continue;
      const int64_t na = a < 0 ? a + r : a;
      if (red[static_cast<size_t>(na)] && !axes.empty())
        fail(ErrorCode::InvalidArgument, "{}: axis {} is repeated in axes", label, a);
      red[static_cast<size_t>(na)] = true;
    }
    out_shape_.clear();
    kept_dims_.clear();
    kept_strides_.clear();
    red_dims_.clear();
    red_strides_.clear();
    outer_ = 1;
    inner_ = 1;
    const auto st = contiguous_strides(xs);
    for (int64_t d = 0; d < r; ++d) {
      const size_t k = static_cast<size_t>(d);
      if (!red[k]) {
        out_shape_.push_back(xs[k]);
        outer_ *= xs[k];
        kept_dims_.push_back(xs[k]);
        kept_strides_.push_back(st[k]);
      } else {
        if (keepdims_) out_shape_.push_back(1);
        inner_ *= xs[k];
        red_dims_.push_back(xs[k]);
        red_strides_.push_back(st[k]);
      }
    }
    // Which dims (of size > 1) are reduced: all trailing → rows; one run in the middle → columns.
    int first_red = -1, last_red = -1, kept_after = 0;
    for (int64_t d = 0; d < r; ++d) {
      if (xs[static_cast<size_t>(d)] == 1) continue;
      if (red[static_cast<size_t>(d)]) {
        if (first_red < 0) first_red = static_cast<int>(d);
        last_red = static_cast<int>(d);
      }
    }
    bool one_run = true;
    for (int64_t d = 0; d < r; ++d) {
      if (xs[static_cast<size_t>(d)] == 1) continue;
      const bool in_run = first_red >= 0 && d >= first_red && d <= last_red;
      if (in_run != static_cast<bool>(red[static_cast<size_t>(d)])) one_run = false;
      if (d > last_red && !red[static_cast<size_t>(d)]) ++kept_after;
    }
    k1_ = 1;
    k2_ = 1;
    for (int64_t d = 0; d < r; ++d) {
      if (first_red >= 0 && d < first_red) k1_ *= xs[static_cast<size_t>(d)];
      if (d > last_red) k2_ *= xs[static_cast<size_t>(d)];
    }
    if (first_red < 0 || (one_run && kept_after == 0)) mode_ = Mode::Rows;  // only trailing dims reduced
    else if (one_run && (kind_ == RKind::Sum || kind_ == RKind::Mean)) mode_ = Mode::Columns;
    else mode_ = Mode::Packed;
    if (r == 0) {
      outer_ = 1;
      inner_ = 1;
    }
    axes_ = axes;
    x_shape_ = xs;
    ready_ = true;
  }

  RKind kind_;
  DType dt_;
  bool keepdims_, noop_;
  std::vector<int64_t> attr_axes_, axes_, x_shape_, out_shape_;
  std::vector<int64_t> kept_dims_, kept_strides_, red_dims_, red_strides_;
  int64_t outer_ = 1, inner_ = 1, k1_ = 1, k2_ = 1;
  Mode mode_ = Mode::Rows;
  bool ready_ = false;
  std::vector<char> packed_;
};

// ArgMax/ArgMin along one axis: reduction.cc's arg_kernel.
class ArgStep : public TensorStep {
 public:
  ArgStep(DType dt, bool is_max, int64_t axis, bool keepdims, bool last)
      : dt_(dt), max_(is_max), axis_(axis), keepdims_(keepdims), last_(last) {}
  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    const Tensor& x = *in[0];
    auto a = norm_axis(axis_, x.rank());
    if (!a) fail(ErrorCode::InvalidArgument, "{}: axis {} is out of range for {}", label, axis_, x.shape_string());
    int64_t outer = 1, n = x.dim(*a), inner = 1;
    std::vector<int64_t> oshape;
    for (int64_t d = 0; d < x.rank(); ++d) {
      if (d < *a) outer *= x.dim(d);
      if (d > *a) inner *= x.dim(d);
      if (d != *a) oshape.push_back(x.dim(d));
      else if (keepdims_) oshape.push_back(1);
    }
    if (n == 0) fail(ErrorCode::InvalidArgument, "{}: cannot take the arg{} of an empty axis", label, max_ ? "max" : "min");
    Tensor& y = out(rs, 0, DType::I64, oshape);
    int64_t* dst = y.data<int64_t>();
    dispatch_compute(dt_, [&]<typename T>() {
      const T* src = static_cast<const T*>(x.raw_data());
      parallel_for(outer * inner, x.numel() >= (1 << 15) ? rs.threads : 1, [&](int64_t t) {
        const int64_t o = t / inner, i = t % inner;
        const T* p = src + o * n * inner + i;
        int64_t best = 0;
        T bv = p[0];
        for (int64_t k = 1; k < n; ++k) {
          const T v = p[k * inner];
          bool better, equal;
          const bool vn = v != v, bn = bv != bv;
          if (vn || bn) {
            better = vn && !bn;
            equal = vn && bn;
          } else {
            better = max_ ? (v > bv) : (v < bv);
            equal = v == bv;
          }
          if (better || (last_ && equal)) {
            best = k;
            bv = v;
          }
        }
        dst[t] = best;
      });
    });
  }

 private:
  DType dt_;
  bool max_;
  int64_t axis_;
  bool keepdims_, last_;
};

// CumSum/CumProd along one axis, rows of the inner dims advanced together.
class CumStep : public TensorStep {
 public:
  CumStep(DType dt, bool prod, bool exclusive, bool reverse) : dt_(dt), prod_(prod), excl_(exclusive), rev_(reverse) {}
  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    const Tensor& x = *in[0];
    auto av = in[1]->to_int64s();
    if (av.size() != 1) fail(ErrorCode::InvalidArgument, "{}: axis must be a scalar (or 1-element) tensor", label);
    auto a = norm_axis(av[0], x.rank());
    if (!a) fail(ErrorCode::InvalidArgument, "{}: axis {} is out of range for {}", label, av[0], x.shape_string());
    int64_t outer = 1, n = x.dim(*a), inner = 1;
    for (int64_t d = 0; d < x.rank(); ++d) {
      if (d < *a) outer *= x.dim(d);
      if (d > *a) inner *= x.dim(d);
    }
    Tensor& y = out(rs, 0, dt_, x.shape());
    dispatch_compute(dt_, [&]<typename T>() {
      using Acc = std::conditional_t<std::is_floating_point_v<T>, T, uint64_t>;
      const T* src = static_cast<const T*>(x.raw_data());
      T* dst = static_cast<T*>(y.raw_data());
      parallel_for(outer, x.numel() >= (1 << 15) ? rs.threads : 1, [&](int64_t o) {
        std::vector<Acc> acc(static_cast<size_t>(inner), prod_ ? Acc(1) : Acc(0));
        for (int64_t c = 0; c < n; ++c) {
          const int64_t k = rev_ ? n - 1 - c : c;
          const T* p = src + (o * n + k) * inner;
          T* q = dst + (o * n + k) * inner;
          for (int64_t i = 0; i < inner; ++i) {
            Acc v;
            if constexpr (std::is_floating_point_v<T>) v = p[i];
            else v = static_cast<Acc>(static_cast<int64_t>(p[i]));
            Acc& s = acc[static_cast<size_t>(i)];
            if (excl_) {
              q[i] = static_cast<T>(s);
              s = prod_ ? Acc(s * v) : Acc(s + v);
            } else {
              s = prod_ ? Acc(s * v) : Acc(s + v);
              q[i] = static_cast<T>(s);
            }
          }
        }
      });
    });
  }

 private:
  DType dt_;
  bool prod_, excl_, rev_;
};

class TopKStep : public TensorStep {
 public:
  TopKStep(DType dt, int64_t axis, bool largest) : dt_(dt), axis_(axis), largest_(largest) {}
  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    const Tensor& x = *in[0];
    auto kv = in[1]->to_int64s();
    if (kv.size() != 1) fail(ErrorCode::InvalidArgument, "{}: K must be a 1-element tensor", label);
    auto a = norm_axis(axis_, x.rank());
    if (!a) fail(ErrorCode::InvalidArgument, "{}: axis {} is out of range for {}", label, axis_, x.shape_string());
    int64_t outer = 1, n = x.dim(*a), inner = 1;
    for (int64_t d = 0; d < x.rank(); ++d) {
      if (d < *a) outer *= x.dim(d);
      if (d > *a) inner *= x.dim(d);
    }
    const int64_t k = kv[0];
    if (k < 0 || k > n) fail(ErrorCode::InvalidArgument, "{}: K = {} is out of range for an axis of size {}", label, k, n);
    auto oshape = x.shape();
    oshape[static_cast<size_t>(*a)] = k;
    Tensor* vals = output_writes_[0] >= 0 ? &out(rs, 0, dt_, oshape) : nullptr;
    Tensor* idxs = output_writes_.size() > 1 && output_writes_[1] >= 0 ? &out(rs, 1, DType::I64, oshape) : nullptr;
    dispatch_compute(dt_, [&]<typename T>() {
      const T* src = static_cast<const T*>(x.raw_data());
      T* vd = vals ? static_cast<T*>(vals->raw_data()) : nullptr;
      int64_t* id = idxs ? idxs->data<int64_t>() : nullptr;
      parallel_for(outer * inner, x.numel() >= (1 << 14) ? rs.threads : 1, [&](int64_t t) {
        const int64_t o = t / inner, i = t % inner;
        const T* p = src + o * n * inner + i;
        std::vector<int64_t> order(static_cast<size_t>(n));
        std::iota(order.begin(), order.end(), 0);
        auto key_less = [&](int64_t u, int64_t v) {
          const T a = p[u * inner], c = p[v * inner];
          if constexpr (std::is_floating_point_v<T>) {
            const bool na = a != a, nc = c != c;
            if (na || nc) return !na && nc;
          }
          return a < c;
        };
        auto cmp = [&](int64_t u, int64_t v) {
          if (largest_ ? key_less(v, u) : key_less(u, v)) return true;
          if (largest_ ? key_less(u, v) : key_less(v, u)) return false;
          return u < v;
        };
        std::partial_sort(order.begin(), order.begin() + k, order.end(), cmp);
        for (int64_t j = 0; j < k; ++j) {
          const int64_t q = (o * k + j) * inner + i;
          if (vd) vd[q] = p[order[static_cast<size_t>(j)] * inner];
          if (id) id[q] = order[static_cast<size_t>(j)];
        }
      });
    });
  }

 private:
  DType dt_;
  int64_t axis_;
  bool largest_;
};

}  // namespace

bool make_reduce_ops(PlanBuilder& b, const Node& n) {
  if (!n.domain.empty() || n.inputs.empty() || n.inputs[0].empty()) return false;
  static const std::map<std::string, RKind> kinds = {
      {"ReduceSum", RKind::Sum},       {"ReduceMean", RKind::Mean},     {"ReduceMax", RKind::Max},
      {"ReduceMin", RKind::Min},       {"ReduceProd", RKind::Prod},     {"ReduceL1", RKind::L1},
      {"ReduceL2", RKind::L2},         {"ReduceLogSum", RKind::LogSum}, {"ReduceLogSumExp", RKind::LogSumExp},
      {"ReduceSumSquare", RKind::SumSquare}};
  const DType dt = dtype_of(b, n.inputs[0]);
  if (auto it = kinds.find(n.op_type); it != kinds.end()) {
    const bool bool_ok = dt == DType::Bool && (it->second == RKind::Max || it->second == RKind::Min);
    if (!is_compute_dtype(dt) && !bool_ok) return false;
    if (n.has_input(1) && !dtype_is_integer(dtype_of(b, n.inputs[1]))) return false;
    add_tensor_step(b, n,
                    std::make_unique<ReduceStep>(it->second, dt, n.get_int("keepdims", 1) != 0,
                                                 n.get_int("noop_with_empty_axes", 0) != 0, n.get_ints("axes")),
                    {dt}, "reduce");
    return true;
  }
  if (!is_compute_dtype(dt)) return false;
  if (n.op_type == "ArgMax" || n.op_type == "ArgMin") {
    add_tensor_step(b, n,
                    std::make_unique<ArgStep>(dt, n.op_type == "ArgMax", n.get_int("axis", 0),
                                              n.get_int("keepdims", 1) != 0, n.get_int("select_last_index", 0) != 0),
                    {DType::I64}, "arg reduce");
    return true;
  }
  if (n.op_type == "CumSum" || n.op_type == "CumProd") {
    if (n.inputs.size() != 2 || !dtype_is_integer(dtype_of(b, n.inputs[1]))) return false;
    add_tensor_step(b, n,
                    std::make_unique<CumStep>(dt, n.op_type == "CumProd", n.get_int("exclusive", 0) != 0,
                                              n.get_int("reverse", 0) != 0),
                    {dt}, "cumulative loop");
    return true;
  }
  if (n.op_type == "TopK") {
    if (n.inputs.size() != 2 || !dtype_is_integer(dtype_of(b, n.inputs[1]))) return false;
    add_tensor_step(b, n, std::make_unique<TopKStep>(dt, n.get_int("axis", -1), n.get_int("largest", 1) != 0),
                    {dt, DType::I64}, "top-k");
    return true;
  }
  return false;
}

}  // namespace hodu::cpu
