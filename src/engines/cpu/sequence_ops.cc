// Sequence ops (SequenceEmpty/Construct/Insert/At/Erase/Length, SplitToSequence,
// ConcatFromSequence): a sequence is a list of tensor handles in its slot. An element
// taken from the arena is copied once (later steps reuse those bytes); any other tensor
// (a constant, a fed input, a run-time allocation) is shared, never copied. SequenceAt
// hands out the element itself. torch's repeat_interleave / split-with-sizes and
// tf2onnx's TensorArrays emit these, often inside Loop bodies (planned by the engine too).
#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "engines/cpu/plan.h"
#include "engines/cpu/tensor_step.h"

namespace hodu::cpu {
namespace {

class SequenceStep : public Step {
 public:
  explicit SequenceStep(const Node& n) : node_(n) {}
  void run(RunState& rs) override {
    in_.assign(node_.inputs.size(), nullptr);
    size_t r = 0;
    for (size_t i = 0; i < node_.inputs.size(); ++i)
      if (!node_.inputs[i].empty()) in_[i] = &rs.slots[reads[r++]].value;
    execute(rs);
  }

 protected:
  virtual void execute(RunState& rs) = 0;

  const RuntimeValue* value(size_t i) const { return i < in_.size() ? in_[i] : nullptr; }
  const TensorSequence& seq(size_t i) const {
    const RuntimeValue* v = value(i);
    if (!v || !v->is_sequence()) fail(ErrorCode::InvalidArgument, "{}: input {} must be a sequence", label, i);
    return v->sequence;
  }
  DType seq_dtype(size_t i) const {
    const RuntimeValue* v = value(i);
    return !v->sequence.empty() ? v->sequence[0].dtype() : v->elem_dtype;
  }
  const Tensor& tensor(size_t i) const {
    const RuntimeValue* v = value(i);
    if (!v || !v->is_tensor()) fail(ErrorCode::InvalidArgument, "{}: input {} must be a tensor", label, i);
    return v->tensor;
  }
  // A tensor kept in a sequence: its own bytes when it lives in the arena or is a view.
  static Tensor keep(const Tensor& t, const RunState& rs) {
    if (t.storage().get() == rs.arena || !t.is_contiguous()) return t.clone();
    return t;
  }
  // Position input i (a scalar int32/int64) normalized against `n`, valid in [-n, n - 1 + extra].
  int64_t position(size_t i, int64_t n, int64_t extra) const {
    const Tensor& p = tensor(i);
    if (p.numel() != 1 || (p.dtype() != DType::I64 && p.dtype() != DType::I32))
      fail(ErrorCode::InvalidArgument, "{}: position must be a scalar int32/int64, got {}", label, p.type_string());
    const int64_t pos = p.get_int64(0);
    if (pos < -n || pos > n - 1 + extra)
      fail(ErrorCode::InvalidArgument, "{}: position {} is out of range for a sequence of length {}", label, pos, n);
    return pos < 0 ? pos + n : pos;
  }
  RuntimeValue& output(RunState& rs) { return rs.slots[writes[0]].value; }
  void set_sequence(RunState& rs, TensorSequence s, DType dt) {
    output(rs) = RuntimeValue::make_sequence(std::move(s), dt);
  }
  // Output 0 as a tensor of this dtype and shape, reused across runs when nothing else holds it.
  Tensor& out_tensor(RunState& rs, DType dt, const std::vector<int64_t>& shape) {
    RuntimeValue& v = output(rs);
    if (!v.is_tensor() || v.tensor.dtype() != dt || v.tensor.shape() != shape || v.tensor.storage().use_count() > 1)
      v = RuntimeValue(Tensor::empty(dt, shape));
    return v.tensor;
  }

  const Node& node_;
  std::vector<const RuntimeValue*> in_;
};

class EmptyStep : public SequenceStep {
 public:
  EmptyStep(const Node& n, DType dt) : SequenceStep(n), dt_(dt) {}
  void execute(RunState& rs) override { set_sequence(rs, {}, dt_); }
  DType dt_;
};

class ConstructStep : public SequenceStep {
 public:
  using SequenceStep::SequenceStep;
  void execute(RunState& rs) override {
    TensorSequence s;
    s.reserve(in_.size());
    for (size_t i = 0; i < in_.size(); ++i) {
      const Tensor& t = tensor(i);
      if (!s.empty() && t.dtype() != s[0].dtype())
        fail(ErrorCode::InvalidArgument, "{}: input {} has dtype {}, input 0 has {}", label, i, dtype_name(t.dtype()),
             dtype_name(s[0].dtype()));
      s.push_back(keep(t, rs));
    }
    DType dt = s.empty() ? DType::Undefined : s[0].dtype();
    set_sequence(rs, std::move(s), dt);
  }
};

class InsertStep : public SequenceStep {
 public:
  using SequenceStep::SequenceStep;
  void execute(RunState& rs) override {
    const Tensor& t = tensor(1);
    (void)seq(0);  // checks input 0 is a sequence
    const DType dt = seq_dtype(0);
    if (dt != DType::Undefined && dt != t.dtype())
      fail(ErrorCode::InvalidArgument, "{}: cannot insert a {} tensor into a sequence of {}", label,
           dtype_name(t.dtype()), dtype_name(dt));
    TensorSequence s = seq(0);  // handles: no element is copied
    const int64_t n = static_cast<int64_t>(s.size());
    const int64_t pos = value(2) ? position(2, n, 1) : n;
    s.insert(s.begin() + pos, keep(t, rs));
    set_sequence(rs, std::move(s), t.dtype());
  }
};

class EraseStep : public SequenceStep {
 public:
  using SequenceStep::SequenceStep;
  void execute(RunState& rs) override {
    TensorSequence s = seq(0);
    const int64_t n = static_cast<int64_t>(s.size());
    if (n == 0) fail(ErrorCode::InvalidArgument, "{}: cannot erase from an empty sequence", label);
    const int64_t pos = value(1) ? position(1, n, 0) : n - 1;
    s.erase(s.begin() + pos);
    set_sequence(rs, std::move(s), seq_dtype(0));
  }
};

class AtStep : public SequenceStep {
 public:
  using SequenceStep::SequenceStep;
  void execute(RunState& rs) override {
    const TensorSequence& s = seq(0);
    output(rs) = RuntimeValue(s[static_cast<size_t>(position(1, static_cast<int64_t>(s.size()), 0))]);
  }
};

class LengthStep : public SequenceStep {
 public:
  using SequenceStep::SequenceStep;
  void execute(RunState& rs) override {
    const int64_t n = static_cast<int64_t>(seq(0).size());
    *out_tensor(rs, DType::I64, {}).data<int64_t>() = n;
  }
};

// Copies `parts` (equal shapes but along `axis`) into `y` one block of outer rows at a time.
void concat_blocks(const TensorSequence& parts, const std::vector<int64_t>& inner_bytes, int64_t outer, Tensor& y) {
  int64_t row = 0;
  for (int64_t b : inner_bytes) row += b;
  auto* dst = static_cast<uint8_t*>(y.raw_data());
  int64_t off = 0;
  for (size_t k = 0; k < parts.size(); ++k) {
    const auto* src = static_cast<const uint8_t*>(parts[k].raw_data());
    const int64_t b = inner_bytes[k];
    for (int64_t o = 0; o < outer; ++o) std::memcpy(dst + o * row + off, src + o * b, static_cast<size_t>(b));
    off += b;
  }
}

class SplitStep : public SequenceStep {
 public:
  SplitStep(const Node& n, int64_t axis, bool keepdims) : SequenceStep(n), axis_(axis), keepdims_(keepdims) {}
  void execute(RunState& rs) override {
    const Tensor& x = tensor(0);
    const int64_t r = x.rank();
    if (r == 0) fail(ErrorCode::InvalidArgument, "{}: SplitToSequence needs rank >= 1", label);
    auto ax = norm_axis(axis_, r);
    if (!ax) fail(ErrorCode::InvalidArgument, "{}: axis {} is out of range for rank {}", label, axis_, r);
    const int64_t axis = *ax, dim = x.dim(axis);
    std::vector<int64_t> sizes;
    bool squeeze = false;
    if (value(1)) {
      const Tensor& sp = tensor(1);
      if (!dtype_is_integer(sp.dtype()) || sp.rank() > 1)
        fail(ErrorCode::InvalidArgument, "{}: split must be a scalar or 1-D integer tensor, got {}", label,
             sp.type_string());
      auto v = sp.to_int64s();
      if (sp.rank() == 0) {
        if (v[0] <= 0) fail(ErrorCode::InvalidArgument, "{}: split size must be positive, got {}", label, v[0]);
        for (int64_t s = 0; s < dim; s += v[0]) sizes.push_back(std::min(v[0], dim - s));
      } else {
        int64_t sum = 0;
        for (int64_t s : v) {
          if (s < 0) fail(ErrorCode::InvalidArgument, "{}: split {} has a negative size", label, shape_to_string(v));
          sum += s;
        }
        if (sum != dim)
          fail(ErrorCode::InvalidArgument, "{}: split {} sums to {}, axis has size {}", label, shape_to_string(v), sum,
               dim);
        sizes = std::move(v);
      }
    } else {
      sizes.assign(static_cast<size_t>(dim), 1);
      squeeze = !keepdims_;
    }
    const auto& xs = x.shape();
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= xs[d];
    for (int64_t d = axis + 1; d < r; ++d) inner *= xs[d];
    const int64_t esize = dtype_bits(x.dtype()) / 8, row = dim * inner * esize;
    const auto* src = static_cast<const uint8_t*>(x.raw_data());
    TensorSequence out;
    out.reserve(sizes.size());
    int64_t start = 0;
    for (int64_t s : sizes) {
      std::vector<int64_t> shape = xs;
      shape[axis] = s;
      if (squeeze) shape.erase(shape.begin() + axis);
      Tensor part = Tensor::empty(x.dtype(), shape);
      auto* dst = static_cast<uint8_t*>(part.raw_data());
      const int64_t b = s * inner * esize;
      for (int64_t o = 0; o < outer; ++o) std::memcpy(dst + o * b, src + o * row + start * inner * esize, b);
      start += s;
      out.push_back(std::move(part));
    }
    set_sequence(rs, std::move(out), x.dtype());
  }
  int64_t axis_;
  bool keepdims_;
};

class ConcatStep : public SequenceStep {
 public:
  ConcatStep(const Node& n, int64_t axis, bool new_axis) : SequenceStep(n), axis_(axis), new_axis_(new_axis) {}
  void execute(RunState& rs) override {
    const TensorSequence& s = seq(0);
    if (s.empty()) fail(ErrorCode::InvalidArgument, "{}: cannot concatenate an empty sequence", label);
    const DType dt = s[0].dtype();
    if (!movable_dtype(dt))
      fail(ErrorCode::Unsupported, "{}: sequence of {} tensors (the cpu engine concatenates fixed-size elements)",
           label, dtype_name(dt));
    const int64_t r = s[0].rank(), out_rank = new_axis_ ? r + 1 : r;
    auto ax = norm_axis(axis_, out_rank);
    if (!ax || (!new_axis_ && r == 0))
      fail(ErrorCode::InvalidArgument, "{}: axis {} is out of range for rank {}{}", label, axis_, r,
           new_axis_ ? " with new_axis" : "");
    const int64_t axis = *ax;
    std::vector<int64_t> shape = s[0].shape();
    if (new_axis_) shape.insert(shape.begin() + axis, 1);
    const int64_t esize = dtype_bits(dt) / 8;
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= shape[d];
    for (int64_t d = axis + 1; d < out_rank; ++d) inner *= shape[d];
    std::vector<int64_t> inner_bytes;
    int64_t total = 0;
    TensorSequence parts;
    parts.reserve(s.size());
    for (size_t k = 0; k < s.size(); ++k) {
      std::vector<int64_t> ks = s[k].shape();
      if (new_axis_) ks.insert(ks.begin() + axis, 1);
      bool ok = s[k].dtype() == dt && ks.size() == shape.size();
      for (size_t d = 0; ok && d < ks.size(); ++d) ok = static_cast<int64_t>(d) == axis || ks[d] == shape[d];
      if (!ok)
        fail(ErrorCode::InvalidArgument, "{}: element {} is {}, element 0 is {}: they do not concatenate on axis {}",
             label, k, s[k].type_string(), s[0].type_string(), axis_);
      total += ks[axis];
      inner_bytes.push_back(ks[axis] * inner * esize);
      parts.push_back(s[k].is_contiguous() ? s[k] : s[k].contiguous());
    }
    shape[axis] = total;
    Tensor& y = out_tensor(rs, dt, shape);
    concat_blocks(parts, inner_bytes, outer, y);
  }
  int64_t axis_;
  bool new_axis_;
};

// The element dtype of a sequence value as type inference gave it (Undefined when unknown).
DType elem_dtype(const PlanBuilder& b, const std::string& value) {
  auto t = b.graph().type_of(value);
  if (!t || t->kind != ValueType::Kind::Sequence || !t->elem || !t->elem->is_tensor()) return DType::Undefined;
  return t->elem->dtype;
}

}  // namespace

bool make_sequence_ops(PlanBuilder& b, const Node& n) {
  if (!n.domain.empty() || n.outputs.empty() || n.outputs[0].empty()) return false;
  const std::string& op = n.op_type;
  std::unique_ptr<SequenceStep> step;
  if (op == "SequenceEmpty") {
    DType dt = DType::F32;
    if (n.attr("dtype")) {
      auto d = dtype_from_onnx(static_cast<int>(n.get_int("dtype", 1)));
      if (!d) return false;  // the interpreter's kernel names the bad dtype
      dt = *d;
    }
    step = std::make_unique<EmptyStep>(n, dt);
  } else if (op == "SequenceConstruct") {
    step = std::make_unique<ConstructStep>(n);
  } else if (op == "SequenceInsert") {
    step = std::make_unique<InsertStep>(n);
  } else if (op == "SequenceErase") {
    step = std::make_unique<EraseStep>(n);
  } else if (op == "SequenceAt") {
    step = std::make_unique<AtStep>(n);
  } else if (op == "SequenceLength") {
    step = std::make_unique<LengthStep>(n);
  } else if (op == "SplitToSequence") {
    if (!movable_dtype(dtype_of(b, n.inputs[0]))) return false;  // strings: the interpreter's kernel
    step = std::make_unique<SplitStep>(n, n.get_int("axis", 0), n.get_int("keepdims", 1) != 0);
  } else if (op == "ConcatFromSequence") {
    if (!n.attr("axis")) return false;  // required: the interpreter's kernel reports it
    if (!movable_dtype(elem_dtype(b, n.inputs[0]))) return false;  // strings, or not known at plan time
    step = std::make_unique<ConcatStep>(n, n.get_int("axis", 0), n.get_int("new_axis", 0) != 0);
  } else {
    return false;
  }
  for (const auto& in : n.inputs)
    if (!in.empty()) step->reads.push_back(b.plain(in));
  step->writes.push_back(b.define_dynamic(n.outputs[0]));
  step->label = n.describe() + ": cpu sequence";
  b.add(std::move(step));
  return true;
}

}  // namespace hodu::cpu
