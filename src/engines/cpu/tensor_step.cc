#include "engines/cpu/tensor_step.h"

#include <algorithm>
#include <cstring>

#include "passes/graph_utils.h"

namespace hodu::cpu {

void TensorStep::run(RunState& rs) {
  in_.assign(input_reads_.size(), nullptr);
  bool same = configured_;
  shapes_.resize(input_reads_.size());
  for (size_t i = 0; i < input_reads_.size(); ++i) {
    if (input_reads_[i] < 0) continue;
    const RuntimeValue& v = rs.slots[reads[static_cast<size_t>(input_reads_[i])]].value;
    if (!v.is_tensor()) fail(ErrorCode::InvalidArgument, "{}: input {} is not a tensor", label, i);
    in_[i] = &v.tensor;
    if (!same || shapes_[i] != v.tensor.shape()) {
      same = false;
      shapes_[i] = v.tensor.shape();
    }
  }
  if (!same) {
    configure(in_);
    configured_ = true;
  }
  execute(rs, in_);
}

Tensor& TensorStep::out(RunState& rs, size_t i, DType dt, const std::vector<int64_t>& shape) {
  Slot& s = rs.slots[writes[static_cast<size_t>(output_writes_[i])]];
  if (s.kind != Slot::Kind::Dynamic) {
    // The plan's shape came from type inference over the concrete input shapes.
    HODU_CHECK(s.value.tensor.shape() == shape && s.value.tensor.dtype() == dt, ErrorCode::Internal,
               "{}: output {} is {} at run time, the plan has {}", label, i, shape_to_string(shape),
               shape_to_string(s.value.tensor.shape()));
    return s.value.tensor;
  }
  if (!s.value.is_tensor() || s.value.tensor.dtype() != dt || s.value.tensor.shape() != shape ||
      s.value.tensor.storage().use_count() > 1) {
    const size_t bytes = dtype_storage_bytes(dt, shape_numel(shape));
    std::shared_ptr<Storage> reused;
    if (rs.pool && dt != DType::String) reused = rs.pool->take(bytes);
    // A buffer as large as the pool's (which hands them out as they were left) is not zeroed
    // either: a Loop's growing Concat spent half its time clearing 40 MB it then overwrote.
    if (!reused && dt != DType::String && bytes >= kReleaseAfterUseBytes / 5 * 4)
      reused = Storage::allocate_uninitialized(bytes);
    s.value = RuntimeValue(reused ? Tensor::from_storage(dt, shape, std::move(reused)) : Tensor::empty(dt, shape));
  }
  return s.value.tensor;
}

void add_tensor_step(PlanBuilder& b, const Node& n, std::unique_ptr<TensorStep> step, const std::vector<DType>& dtypes,
                     const std::string& what, const std::vector<size_t>& unread) {
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const std::string& in = n.inputs[i];
    if (in.empty() || std::find(unread.begin(), unread.end(), i) != unread.end()) {
      step->input_reads_.push_back(-1);
      continue;
    }
    step->input_reads_.push_back(static_cast<int>(step->reads.size()));
    step->reads.push_back(b.plain(in));
  }
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    if (n.outputs[i].empty()) {
      step->output_writes_.push_back(-1);
      continue;
    }
    const DType dt = i < dtypes.size() ? dtypes[i] : DType::Undefined;
    auto st = b.static_type(n.outputs[i]);
    int id;
    if (st && st->first == dt) {
      id = b.define(n.outputs[i], dt, st->second);
    } else {
      id = b.define(n.outputs[i], dt, {});
      Slot& sl = b.at(id);
      sl.kind = Slot::Kind::Dynamic;
      sl.is_static = false;
      sl.bytes = 0;
    }
    step->output_writes_.push_back(static_cast<int>(step->writes.size()));
    step->writes.push_back(id);
  }
  step->label = n.describe() + ": cpu " + what;
  b.add(std::move(step));
}

DType dtype_of(PlanBuilder& b, const std::string& value) {
  if (value.empty()) return DType::Undefined;
  int s = -1;
  try {
    s = b.slot(value);
  } catch (const Error&) {
    return DType::Undefined;
  }
  if (b.at(s).dtype != DType::Undefined) return b.at(s).dtype;
  auto t = b.graph().type_of(value);
  return t && t->is_tensor() ? t->dtype : DType::Undefined;
}

std::optional<std::vector<int64_t>> constant_ints(PlanBuilder& b, const Node& n, size_t i) {
  if (!n.has_input(i)) return std::nullopt;
  const Tensor* t = passes::constant_of(b.graph(), n.inputs[i]);
  if (!t || !dtype_is_integer(t->dtype())) return std::nullopt;
  return t->to_int64s();
}

void gather_by_tables(int threads, const Tensor& x, Tensor& y, const std::vector<std::vector<int64_t>>& src,
                      const void* fill) {
  const auto& out_shape = y.shape();
  const size_t r = out_shape.size();
  const int64_t total = y.numel();
  if (total == 0) return;
  if (r == 0) {
    std::memcpy(y.raw_data(), x.raw_data(), x.nbytes());
    return;
  }
  const int64_t inner = out_shape.back(), rows = total / inner;
  const auto strides = contiguous_strides(x.shape());
  const std::vector<int64_t>& last = src.back();
  bool contiguous = true, any_fill = false;  // the last table: one run of consecutive sources?
  for (int64_t j = 0; j < inner; ++j) {
    any_fill |= last[static_cast<size_t>(j)] < 0;
    contiguous &= last[static_cast<size_t>(j)] == last[0] + j;
  }
  dispatch_bytes(x.dtype(), [&]<typename T>() {
    const T* xs = static_cast<const T*>(x.raw_data());
    T* ys = static_cast<T*>(y.raw_data());
    T f{};
    if (fill) std::memcpy(&f, fill, sizeof(T));
    const int64_t chunk = std::max<int64_t>(1, (1 << 14) / inner), chunks = (rows + chunk - 1) / chunk;
    parallel_for(chunks, total >= (1 << 15) ? threads : 1, [&](int64_t c) {
      int64_t prev = -2;  // the source offset of the previous row in this chunk (-1: a padded row)
      for (int64_t row = c * chunk, end = std::min(rows, row + chunk); row < end; ++row) {
        int64_t rest = row, off = 0;
        bool pad = false;
        for (size_t d = r - 1; d-- > 0;) {
          const int64_t o = rest % out_shape[d];
          rest /= out_shape[d];
          const int64_t s = src[d][static_cast<size_t>(o)];
          pad |= s < 0;
          off += s * strides[d];
        }
        if (pad) off = -1;
        T* yr = ys + row * inner;
        if (off == prev) {
          std::memcpy(yr, yr - inner, static_cast<size_t>(inner) * sizeof(T));
        } else if (pad) {
          for (int64_t j = 0; j < inner; ++j) yr[j] = f;
        } else if (contiguous) {
          std::memcpy(yr, xs + off + last[0], static_cast<size_t>(inner) * sizeof(T));
        } else if (any_fill) {
          const T* xr = xs + off;
          for (int64_t j = 0; j < inner; ++j) {
            const int64_t s = last[static_cast<size_t>(j)];
            yr[j] = s < 0 ? f : xr[s];
          }
        } else {
          const T* xr = xs + off;
          for (int64_t j = 0; j < inner; ++j) yr[j] = xr[last[static_cast<size_t>(j)]];
        }
        prev = off;
      }
    });
  });
}

std::optional<std::vector<int64_t>> Broadcast::shape_of(const std::vector<std::vector<int64_t>>& in) {
  size_t rank = 0;
  for (const auto& s : in) rank = std::max(rank, s.size());
  std::vector<int64_t> out(rank, 1);
  for (const auto& s : in) {
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[rank - s.size() + i];
      if (s[i] == o) continue;
      if (o == 1) o = s[i];
      else if (s[i] != 1) return std::nullopt;
    }
  }
  return out;
}

std::optional<Broadcast> Broadcast::make(const std::vector<int64_t>& out, const std::vector<std::vector<int64_t>>& in) {
  Broadcast bc;
  bc.inputs = static_cast<int>(in.size());
  if (bc.inputs > kMax) return std::nullopt;
  bc.total = shape_numel(out);
  const size_t r = out.size();
  std::vector<std::array<int64_t, kMax>> st(r);
  for (int k = 0; k < bc.inputs; ++k) {
    const auto& s = in[static_cast<size_t>(k)];
    if (s.size() > r) return std::nullopt;
    std::vector<int64_t> full(r - s.size(), 1);
    full.insert(full.end(), s.begin(), s.end());
    auto cs = contiguous_strides(full);
    for (size_t d = 0; d < r; ++d) {
      if (full[d] != out[d] && full[d] != 1) return std::nullopt;
      st[d][k] = full[d] == 1 ? 0 : cs[d];
    }
  }
  for (size_t d = 0; d < r; ++d) {
    if (out[d] == 1) continue;
    if (!bc.dims.empty()) {
      bool merge = true;
      for (int k = 0; k < bc.inputs; ++k) merge &= bc.strides.back()[k] == st[d][k] * out[d];
      if (merge) {
        bc.dims.back() *= out[d];
        bc.strides.back() = st[d];
        continue;
      }
    }
    bc.dims.push_back(out[d]);
    bc.strides.push_back(st[d]);
  }
  if (bc.dims.empty()) {
    bc.dims = {1};
    bc.strides = {std::array<int64_t, kMax>{}};
  }
  if (bc.dims.size() > 8) return std::nullopt;  // for_rows' counters
  return bc;
}

}  // namespace hodu::cpu
