// If, Loop and Scan run by the cpu engine: their bodies are Subgraphs (planned once per input
// shape, outer values bound without copies), not the interpreter.
//   If    runs the branch the condition picks; outputs of a static type land in the arena.
//   Loop  feeds the body's outputs back as its inputs (the body plan keeps two buffers per
//         output and alternates, so iterations allocate nothing); scan outputs are written in
//         place into one growing buffer.
//   Scan  (opset 9 and later) binds each slice of its scan inputs as a view (axis 0; other axes
//         are moved to the front once), scan outputs written in place at their index.
// Opset-8 Scan (batch axis, sequence_lens) and string or sub-byte scan values stay on the
// interpreter's kernel.
#include <algorithm>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "engines/cpu/subgraph.h"
#include "passes/graph_utils.h"
#include "runtime/profiler.h"

namespace hodu::cpu {
namespace {

bool read_cond(const Node& n, const RuntimeValue& v, const char* what) {
  if (!v.is_tensor() || v.tensor.numel() != 1 || v.tensor.dtype() == DType::String)
    fail(ErrorCode::InvalidArgument, "{}: {} must be a single boolean value", n.describe(), what);
  return v.tensor.get_double(0) != 0;
}

// Element types whose tensors can be stacked by bytes.
bool byte_sized(DType t) { return t != DType::String && t != DType::Undefined && dtype_bits(t) % 8 == 0; }

// Reads of the outer values of `sg` (slots of the parent), appended to `reads`; returns where they start.
size_t read_outer(PlanBuilder& b, const Subgraph& sg, std::vector<int>& reads) {
  size_t at = reads.size();
  for (const auto& name : sg.outer()) reads.push_back(b.plain(name));
  return at;
}

// The slot of a control-flow node's output: in the arena when its type is static and a tensor
// of a byte-sized type (the body writes it there), else a value set at run time.
int define_output(PlanBuilder& b, const std::string& name, bool arena) {
  auto t = b.static_type(name);
  if (arena && t && byte_sized(t->first)) return b.define(name, t->first, t->second);
  return b.define_dynamic(name);
}

// Sets a control-flow node's output slot to `v`: copied into an arena slot, or held (its own copy
// when it lives in the parent's arena, whose bytes later steps reuse).
void set_output(RunState& rs, const Node& n, int slot, RuntimeValue v) {
  Slot& s = rs.slots[slot];
  if (s.kind == Slot::Kind::Dynamic) {
    own_arena_tensors(v, rs.arena);
    if (s.is_static && v.is_tensor() && v.tensor.shape() != s.shape)
      fail(ErrorCode::InvalidModel, "{}: output '{}' has shape {}, its declared type {}", n.describe(), s.name,
           v.tensor.shape_string(), shape_to_string(s.shape));
    s.value = std::move(v);
    return;
  }
  if (!v.is_tensor() || v.tensor.dtype() != s.dtype || v.tensor.shape() != s.shape)
    fail(ErrorCode::InvalidModel, "{}: output '{}' is {}, its declared type {}[{}]", n.describe(), s.name,
         v.is_tensor() ? v.tensor.type_string() : std::string("not a tensor"), dtype_name(s.dtype),
         shape_to_string(s.shape));
  if (v.tensor.raw_data() != s.data()) std::memcpy(s.data(), v.tensor.contiguous().raw_data(), v.tensor.nbytes());
}

// Scan outputs accumulated along a new leading axis, written in place by the body.
class Stack {
 public:
  // Starts a run: `elem` the body output's shape (unknown: nullopt, then outputs are collected).
  void start(DType dtype, std::optional<std::vector<int64_t>> elem, int64_t capacity) {
    count_ = 0;
    loose_.clear();
    known_ = elem.has_value() && byte_sized(dtype);
    if (!known_) return;
    if (!(buf_.defined() && buf_.storage().use_count() == 1 && dtype_ == dtype && elem_ == *elem && cap_ >= capacity)) {
      dtype_ = dtype;
      elem_ = *elem;
      allocate(std::max<int64_t>(capacity, 1));
    }
  }
  // The view the body writes iteration `index`'s output into (growing the buffer), or an
  // undefined tensor when the output's shape was unknown.
  Tensor slot(int64_t index) {
    if (!known_) return Tensor();
    if (index >= cap_) {
      Tensor old = buf_;
      int64_t old_cap = cap_;
      allocate(std::max(index + 1, cap_ * 2));
      std::memcpy(buf_.raw_data(), old.raw_data(), dtype_storage_bytes(dtype_, old_cap * elem_n_));
    }
    return Tensor::from_storage(dtype_, elem_, buf_.storage(), index * elem_n_);
  }
  void add_loose(const Node& n, RuntimeValue v, size_t j) {
    if (!v.is_tensor())
      fail(ErrorCode::Unsupported, "{}: scan output {} of the body is not a tensor", n.describe(), j);
    if (!loose_.empty() && (v.tensor.shape() != loose_[0].shape() || v.tensor.dtype() != loose_[0].dtype()))
      fail(ErrorCode::InvalidModel, "{}: scan output {} is {} at one iteration and {} at another", n.describe(), j,
           loose_[0].type_string(), v.tensor.type_string());
    if (!byte_sized(v.tensor.dtype()))
      fail(ErrorCode::Unsupported, "{}: scan output {} of type {} (the cpu engine stacks byte-sized types)",
           n.describe(), j, dtype_name(v.tensor.dtype()));
    loose_.push_back(v.tensor.contiguous());
  }
  void advance() { ++count_; }
  // A known stack given iteration `index`'s output by value (a body plan that did not know its shape).
  void put(const Node& n, const RuntimeValue& v, int64_t index, size_t j) {
    if (!v.is_tensor() || v.tensor.dtype() != dtype_ || v.tensor.shape() != elem_)
      fail(ErrorCode::InvalidModel, "{}: scan output {} is {} at one iteration, {}{} before", n.describe(), j,
           v.is_tensor() ? v.tensor.type_string() : std::string("not a tensor"), dtype_name(dtype_),
           shape_to_string(elem_));
    Tensor dst = slot(index);
    std::memcpy(dst.raw_data(), v.tensor.contiguous().raw_data(), dst.nbytes());
    ++count_;
  }
  // The stacked result: [count, elem...]; `fallback` gives the type when nothing was produced.
  Tensor result(int64_t count, DType fallback_dtype, const std::vector<int64_t>& fallback_elem) {
    if (known_) {
      std::vector<int64_t> shape = elem_;
      shape.insert(shape.begin(), count);
      return Tensor::from_storage(dtype_, shape, buf_.storage(), 0);
    }
    if (loose_.empty()) {
      std::vector<int64_t> shape = fallback_elem;
      shape.insert(shape.begin(), 0);
      return Tensor::empty(fallback_dtype, shape);
    }
    std::vector<int64_t> shape = loose_[0].shape();
    shape.insert(shape.begin(), static_cast<int64_t>(loose_.size()));
    Tensor out = Tensor::empty(loose_[0].dtype(), shape);
    size_t each = loose_[0].nbytes();
    auto* dst = static_cast<char*>(out.raw_data());
    for (size_t i = 0; i < loose_.size(); ++i) std::memcpy(dst + i * each, loose_[i].raw_data(), each);
    loose_.clear();
    return out;
  }
  bool known() const { return known_; }
  int64_t count() const { return count_; }

 private:
  void allocate(int64_t cap) {
    elem_n_ = shape_numel(elem_);
    std::vector<int64_t> shape = elem_;
    shape.insert(shape.begin(), cap);
    buf_ = Tensor::empty(dtype_, shape);
    cap_ = cap;
  }
  bool known_ = false;
  DType dtype_ = DType::Undefined;
  std::vector<int64_t> elem_;
  int64_t elem_n_ = 0, cap_ = 0, count_ = 0;
  Tensor buf_;
  std::vector<Tensor> loose_;
};

// The declared element type of body output `i` (dtype, static shape or empty).
std::pair<DType, std::vector<int64_t>> declared(const Graph& body, size_t i) {
  DType dt = DType::F32;
  std::vector<int64_t> shape;
  if (i < body.outputs.size()) {
    const ValueType& t = body.outputs[i].type;
    if (t.is_tensor()) {
      if (t.dtype != DType::Undefined) dt = t.dtype;
      if (auto s = t.shape.to_static()) shape = *s;
    }
  }
  return {dt, shape};
}

// Steps that run subgraphs list their plans' kernels after their own label.
class SubgraphStep : public Step {
 public:
  void list_kernels(std::vector<std::string>& out) const override {
    Step::list_kernels(out);
    for (const auto& sg : subgraphs_)
      for (const Plan* p : sg->plans())
        for (const auto& k : p->kernel_choices()) out.push_back("  " + k);
  }

 protected:
  // Runs `sg` on `inputs` (its own, then its outer values from the parent's slots at reads[outer_at...]).
  std::vector<RuntimeValue> run_body(RunState& rs, Subgraph& sg, std::vector<RuntimeValue>& inputs, size_t outer_at,
                                     const std::vector<Tensor>* into = nullptr) {
    for (size_t i = 0; i < sg.outer().size(); ++i) inputs.push_back(rs.slots[reads[outer_at + i]].value);
    Plan& p = sg.plan_for(inputs);
    return p.run(inputs, rs.stream, into, rs.seed_salt);
  }
  // Defines the node's output slots (out_[i], -1 for an omitted output); `writes` lists the real ones.
  void define_outputs(PlanBuilder& b, const Node& n, bool arena) {
    for (const auto& o : n.outputs) {
      out_.push_back(o.empty() ? -1 : define_output(b, o, arena));
      if (out_.back() >= 0) writes.push_back(out_.back());
    }
  }
  std::vector<std::unique_ptr<Subgraph>> subgraphs_;
  std::vector<int> out_;
};

class IfStep : public SubgraphStep {
 public:
  IfStep(PlanBuilder& b, const Node& n) : node_(n) {
    for (const char* name : {"then_branch", "else_branch"})
      subgraphs_.push_back(std::make_unique<Subgraph>(b, *n.get_graph(name), b.options()));
    reads = {b.plain(n.inputs[0])};
    for (auto& sg : subgraphs_) outer_at_.push_back(read_outer(b, *sg, reads));
    define_outputs(b, n, true);
    label = n.describe() + ": cpu subgraph";
  }
  void run(RunState& rs) override {
    bool cond = read_cond(node_, rs.slots[reads[0]].value, "cond");
    size_t which = cond ? 0 : 1;
    std::vector<Tensor> into(out_.size());
    for (size_t i = 0; i < out_.size(); ++i)
      if (out_[i] >= 0 && rs.slots[out_[i]].kind != Slot::Kind::Dynamic) into[i] = rs.slots[out_[i]].value.tensor;
    std::vector<RuntimeValue> in;
    auto outs = run_body(rs, *subgraphs_[which], in, outer_at_[which], &into);
    for (size_t i = 0; i < out_.size(); ++i)
      if (out_[i] >= 0) set_output(rs, node_, out_[i], std::move(outs[i]));
  }

 private:
  const Node& node_;
  std::vector<size_t> outer_at_;
};

class LoopStep : public SubgraphStep {
 public:
  LoopStep(PlanBuilder& b, const Node& n, size_t carried, size_t scans) : node_(n), n_(carried), k_(scans) {
    subgraphs_.push_back(std::make_unique<Subgraph>(b, *n.get_graph("body"), b.options()));
    for (size_t i = 0; i < 2 + n_; ++i) {
      if (n.has_input(i)) {
        input_at_.push_back(static_cast<int>(reads.size()));
        reads.push_back(b.plain(n.inputs[i]));
      } else {
        input_at_.push_back(-1);
      }
    }
    outer_at_ = read_outer(b, *subgraphs_[0], reads);
    define_outputs(b, n, false);
    stacks_.resize(k_);
    label = n.describe() + ": cpu subgraph";
  }

  void run(RunState& rs) override {
    auto value = [&](size_t i) -> const RuntimeValue* {
      return input_at_[i] < 0 ? nullptr : &rs.slots[reads[static_cast<size_t>(input_at_[i])]].value;
    };
    int64_t trip = std::numeric_limits<int64_t>::max();
    if (const RuntimeValue* m = value(0); m && !m->is_none()) {
      if (!m->is_tensor() || m->tensor.numel() != 1 || !dtype_is_integer(m->tensor.dtype()))
        fail(ErrorCode::InvalidArgument, "{}: M must be a single integer", node_.describe());
      trip = m->tensor.get_int64(0);
    }
    bool cond = true;
    if (const RuntimeValue* c = value(1); c && !c->is_none()) cond = read_cond(node_, *c, "cond");
    std::vector<RuntimeValue> carried(n_);
    for (size_t i = 0; i < n_; ++i)
      if (const RuntimeValue* v = value(2 + i)) carried[i] = *v;
    Subgraph& body = *subgraphs_[0];
    const Graph& g = *node_.get_graph("body");
    bool started = false;
    std::vector<Tensor> into(1 + n_ + k_);
    int64_t it = 0;
    for (; it < trip && cond; ++it) {
      std::vector<RuntimeValue> in;
      in.reserve(2 + n_ + body.outer().size());
      in.emplace_back(scalar(iter_, DType::I64, it));
      in.emplace_back(scalar(cond_, DType::Bool, 1));
      for (auto& v : carried) in.push_back(std::move(v));
      for (size_t i = 0; i < body.outer().size(); ++i) in.push_back(rs.slots[reads[outer_at_ + i]].value);
      Plan& p = body.plan_for(in);
      if (!started) {
        // Capacity: the trip count when it is known and small enough, else grown by doubling.
        for (size_t j = 0; j < k_; ++j) {
          auto shape = p.output_shape(1 + n_ + j);
          auto [dt, elem] = declared(g, 1 + n_ + j);
          int64_t bytes = shape ? static_cast<int64_t>(dtype_storage_bytes(dt, shape_numel(*shape))) : 0;
          int64_t cap = trip != std::numeric_limits<int64_t>::max() && bytes * trip <= (int64_t{256} << 20)
                            ? trip : 16;
          DType odt = shape ? p.output_dtype(1 + n_ + j) : dt;
          stacks_[j].start(odt, shape, cap);
        }
        started = true;
      }
      for (size_t j = 0; j < k_; ++j) {
        // A body plan for other shapes (carried values that change) may not know the output's.
        auto shape = p.output_shape(1 + n_ + j);
        bool fits = stacks_[j].known() && shape;
        into[1 + n_ + j] = fits ? stacks_[j].slot(it) : Tensor();
      }
      auto out = p.run(in, rs.stream, &into, rs.seed_salt);
      in.clear();
      cond = read_cond(node_, out[0], "the body's condition output");
      for (size_t i = 0; i < n_; ++i) carried[i] = std::move(out[1 + i]);
      for (size_t j = 0; j < k_; ++j) {
        if (into[1 + n_ + j].defined()) stacks_[j].advance();
        else if (stacks_[j].known()) stacks_[j].put(node_, out[1 + n_ + j], it, j);
        else stacks_[j].add_loose(node_, std::move(out[1 + n_ + j]), j);
      }
    }
    for (size_t i = 0; i < n_ && i < out_.size(); ++i)
      if (out_[i] >= 0) set_output(rs, node_, out_[i], std::move(carried[i]));
    for (size_t j = 0; j < k_ && n_ + j < out_.size(); ++j) {
      if (out_[n_ + j] < 0) continue;
      auto [dt, elem] = declared(g, 1 + n_ + j);
      if (!started) stacks_[j].start(dt, std::nullopt, 0);
      set_output(rs, node_, out_[n_ + j], stacks_[j].result(it, dt, elem));
    }
  }

 private:
  // A scalar tensor holding v, reusing `held` when nothing else holds it.
  static Tensor scalar(Tensor& held, DType dt, int64_t v) {
    if (!held.defined() || held.storage().use_count() > 1) held = Tensor::empty(dt, {});
    if (dt == DType::I64) *held.data<int64_t>() = v;
    else *static_cast<uint8_t*>(held.raw_data()) = static_cast<uint8_t>(v != 0);
    return held;
  }
  const Node& node_;
  size_t n_, k_;
  std::vector<int> input_at_;  // M, cond, carried...: index into reads, -1 when absent
  size_t outer_at_ = 0;
  Tensor iter_, cond_;
  std::vector<Stack> stacks_;
};

class ScanStep : public SubgraphStep {
 public:
  ScanStep(PlanBuilder& b, const Node& n, int64_t states, int64_t scans, std::vector<int64_t> in_axes,
           std::vector<int64_t> in_dirs, std::vector<int64_t> out_axes, std::vector<int64_t> out_dirs)
      : node_(n), n_(states), m_(scans), in_axes_(std::move(in_axes)), in_dirs_(std::move(in_dirs)),
        out_axes_(std::move(out_axes)), out_dirs_(std::move(out_dirs)) {
    subgraphs_.push_back(std::make_unique<Subgraph>(b, *n.get_graph("body"), b.options()));
    for (const auto& in : n.inputs) reads.push_back(b.plain(in));
    outer_at_ = read_outer(b, *subgraphs_[0], reads);
    define_outputs(b, n, false);
    stacks_.resize(out_axes_.size());
    label = n.describe() + ": cpu subgraph";
  }

  void run(RunState& rs) override {
    const size_t n = static_cast<size_t>(n_), m = static_cast<size_t>(m_), k = out_axes_.size();
    // Scan inputs with the scan axis first, contiguous: slice t is then a view.
    std::vector<Tensor> xs(m);
    int64_t len = -1;
    for (size_t j = 0; j < m; ++j) {
      const RuntimeValue& v = rs.slots[reads[n + j]].value;
      if (!v.is_tensor() || v.tensor.rank() == 0 || !byte_sized(v.tensor.dtype()))
        fail(ErrorCode::InvalidArgument, "{}: scan input {} must be a tensor of rank 1 or more", node_.describe(), j);
      const Tensor& x = v.tensor;
      int64_t axis = in_axes_[j] < 0 ? in_axes_[j] + x.rank() : in_axes_[j];
      if (axis < 0 || axis >= x.rank())
        fail(ErrorCode::InvalidArgument, "{}: scan_input_axes {} is out of range for {}", node_.describe(),
             in_axes_[j], x.shape_string());
      int64_t l = x.dim(axis);
      if (len >= 0 && l != len)
        fail(ErrorCode::InvalidArgument, "{}: scan inputs have different lengths ({} and {})", node_.describe(), len, l);
      len = l;
      if (axis == 0) {
        xs[j] = x;
      } else {
        std::vector<int64_t> perm{axis};
        for (int64_t d = 0; d < x.rank(); ++d)
          if (d != axis) perm.push_back(d);
        xs[j] = x.permute(perm).contiguous();
      }
    }
    Subgraph& body = *subgraphs_[0];
    const Graph& g = *node_.get_graph("body");
    std::vector<RuntimeValue> states(n);
    for (size_t i = 0; i < n; ++i) states[i] = rs.slots[reads[i]].value;
    std::vector<Tensor> into(n + k);
    bool started = false;
    for (int64_t t = 0; t < len; ++t) {
      std::vector<RuntimeValue> in;
      in.reserve(n + m + body.outer().size());
      for (auto& s : states) in.push_back(std::move(s));
      for (size_t j = 0; j < m; ++j) {
        int64_t idx = in_dirs_[j] ? len - 1 - t : t;
        std::vector<int64_t> shape(xs[j].shape().begin() + 1, xs[j].shape().end());
        in.emplace_back(Tensor::from_storage(xs[j].dtype(), shape, xs[j].storage(),
                                             xs[j].offset() + idx * shape_numel(shape)));
      }
      for (size_t i = 0; i < body.outer().size(); ++i) in.push_back(rs.slots[reads[outer_at_ + i]].value);
      Plan& p = body.plan_for(in);
      if (!started) {
        for (size_t j = 0; j < k; ++j) {
          auto shape = p.output_shape(n + j);
          stacks_[j].start(shape ? p.output_dtype(n + j) : DType::Undefined, shape, len);
        }
        started = true;
      }
      for (size_t j = 0; j < k; ++j)
        into[n + j] = stacks_[j].known() && p.output_shape(n + j) ? stacks_[j].slot(out_dirs_[j] ? len - 1 - t : t)
                                                                 : Tensor();
      auto out = p.run(in, rs.stream, &into, rs.seed_salt);
      in.clear();
      for (size_t i = 0; i < n; ++i) states[i] = std::move(out[i]);
      for (size_t j = 0; j < k; ++j) {
        if (into[n + j].defined()) continue;
        if (stacks_[j].known()) stacks_[j].put(node_, out[n + j], out_dirs_[j] ? len - 1 - t : t, j);
        else stacks_[j].add_loose(node_, std::move(out[n + j]), j);
      }
    }
    for (size_t i = 0; i < n && i < out_.size(); ++i)
      if (out_[i] >= 0) set_output(rs, node_, out_[i], std::move(states[i]));
    for (size_t j = 0; j < k && n + j < out_.size(); ++j) {
      if (out_[n + j] < 0) continue;
      auto [dt, elem] = declared(g, n + j);
      if (!started) stacks_[j].start(dt, std::nullopt, 0);
      Tensor y = stacks_[j].result(len, dt, elem);
      if (!stacks_[j].known() && out_dirs_[j] && y.dim(0) > 1) {
        // Collected in iteration order: reversed into place.
        Tensor r = Tensor::empty(y.dtype(), y.shape());
        size_t each = y.nbytes() / static_cast<size_t>(y.dim(0));
        for (int64_t t = 0; t < y.dim(0); ++t)
          std::memcpy(static_cast<char*>(r.raw_data()) + t * each,
                      static_cast<const char*>(y.raw_data()) + (y.dim(0) - 1 - t) * each, each);
        y = r;
      }
      int64_t axis = out_axes_[j] < 0 ? out_axes_[j] + y.rank() : out_axes_[j];
      if (axis < 0 || axis >= y.rank())
        fail(ErrorCode::InvalidArgument, "{}: scan_output_axes {} is out of range for rank {}", node_.describe(),
             out_axes_[j], y.rank());
      if (axis != 0) {
        std::vector<int64_t> perm;
        for (int64_t d = 1; d <= axis; ++d) perm.push_back(d);
        perm.push_back(0);
        for (int64_t d = axis + 1; d < y.rank(); ++d) perm.push_back(d);
        y = y.permute(perm).contiguous();
      }
      set_output(rs, node_, out_[n + j], RuntimeValue(y));
    }
  }

 private:
  const Node& node_;
  int64_t n_, m_;
  std::vector<int64_t> in_axes_, in_dirs_, out_axes_, out_dirs_;
  size_t outer_at_ = 0;
  std::vector<Stack> stacks_;
};

// A body output that is a string or a sub-byte type cannot be stacked by bytes.
bool stackable_outputs(const Graph& body, size_t from) {
  for (size_t i = from; i < body.outputs.size(); ++i) {
    const ValueType& t = body.outputs[i].type;
    if (t.is_tensor() && t.dtype != DType::Undefined && !byte_sized(t.dtype)) return false;
  }
  return true;
}

}  // namespace

bool make_control_flow(PlanBuilder& b, const Node& n) {
  if (!n.domain.empty()) return false;
  if (n.op_type == "Identity") {
    // What identity elimination leaves: a body passing a value through to its output. A view.
    auto x = b.static_type(n.inputs[0]);
    if (!x || x->first == DType::String || !n.has_output(0)) return false;
    b.define_alias(n.outputs[0], b.plain(n.inputs[0]), x->second);
    return true;
  }
  if (n.op_type == "If") {
    const Graph* t = n.get_graph("then_branch");
    const Graph* e = n.get_graph("else_branch");
    if (!t || !e || !n.has_input(0) || !t->inputs.empty() || !e->inputs.empty()) return false;
    if (t->outputs.size() != n.outputs.size() || e->outputs.size() != n.outputs.size()) return false;
    b.add(std::make_unique<IfStep>(b, n));
    return true;
  }
  if (n.op_type == "Loop") {
    const Graph* body = n.get_graph("body");
    if (!body) return false;
    size_t carried = n.inputs.size() > 2 ? n.inputs.size() - 2 : 0;
    if (body->inputs.size() != carried + 2 || body->outputs.size() < carried + 1) return false;
    size_t scans = body->outputs.size() - 1 - carried;
    if (n.outputs.size() > carried + scans || !stackable_outputs(*body, 1 + carried)) return false;
    for (size_t i = 2; i < n.inputs.size(); ++i)
      if (n.inputs[i].empty()) return false;  // an omitted carried value: the interpreter's semantics
    b.add(std::make_unique<LoopStep>(b, n, carried, scans));
    return true;
  }
  if (n.op_type == "Scan") {
    const Graph* body = n.get_graph("body");
    int64_t m = n.get_int("num_scan_inputs", -1);
    int64_t total = static_cast<int64_t>(n.inputs.size());
    if (!body || m < 1 || m > total || static_cast<int64_t>(body->inputs.size()) != total) return false;  // opset 8
    for (const auto& in : n.inputs)
      if (in.empty()) return false;
    int64_t states = total - m;
    int64_t k = static_cast<int64_t>(body->outputs.size()) - states;
    if (k < 0 || static_cast<int64_t>(n.outputs.size()) > states + k) return false;
    if (!stackable_outputs(*body, static_cast<size_t>(states))) return false;
    auto in_axes = n.get_ints("scan_input_axes", std::vector<int64_t>(m, 0));
    auto in_dirs = n.get_ints("scan_input_directions", std::vector<int64_t>(m, 0));
    auto out_axes = n.get_ints("scan_output_axes", std::vector<int64_t>(k, 0));
    auto out_dirs = n.get_ints("scan_output_directions", std::vector<int64_t>(k, 0));
    if (static_cast<int64_t>(in_axes.size()) != m || static_cast<int64_t>(in_dirs.size()) != m ||
        static_cast<int64_t>(out_axes.size()) != k || static_cast<int64_t>(out_dirs.size()) != k)
      return false;
    b.add(std::make_unique<ScanStep>(b, n, states, m, std::move(in_axes), std::move(in_dirs), std::move(out_axes),
                                     std::move(out_dirs)));
    return true;
  }
  return false;
}

}  // namespace hodu::cpu
