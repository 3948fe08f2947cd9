#include "engines/cpu/plan.h"

#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <cstdio>
#include <set>

#include "core/error.h"
#include "engines/cpu/dnnl_common.h"
#include "passes/graph_utils.h"
#include "runtime/dispatcher.h"
#include "runtime/profiler.h"

namespace hodu::cpu {
namespace {

constexpr size_t kAlign = 64;

thread_local int plan_depth = 0;  // Plan::run calls in progress on this thread

size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

std::string layout_key(const dnnl::memory::desc& md) {
  // Descriptors compare by value; a readable key from the raw C struct bytes.
  const auto& d = md.data;
  return std::string(reinterpret_cast<const char*>(&d), sizeof(d));
}

// Copies a slot into another layout.
class ReorderStep : public Step {
 public:
  ReorderStep(PlanBuilder& b, int from, int to) {
    src_ = dnnl::memory(layout_md(b.at(from)), b.engine(), nullptr);
    dst_ = dnnl::memory(layout_md(b.at(to)), b.engine(), nullptr);
    prim_ = dnnl::reorder(src_, dst_);
    reads = {from};
    writes = {to};
    label = "reorder '" + b.at(from).name + "': onednn";
  }
  void run(RunState& rs) override {
    src_.set_data_handle(rs.slots[reads[0]].data());
    dst_.set_data_handle(rs.slots[writes[0]].data());
    prim_.execute(rs.stream, src_, dst_);
  }

 private:
  dnnl::memory src_, dst_;
  dnnl::reorder prim_;
};

// A view of another slot with a new shape (Reshape, Flatten, Squeeze, Unsqueeze).
class AliasStep : public Step {
 public:
  AliasStep(int from, int to, std::vector<int64_t> shape) : shape_(std::move(shape)) {
    reads = {from};
    writes = {to};
  }
  void run(RunState& rs) override {
    if (!fixed_) rs.slots[writes[0]].value = RuntimeValue(rs.slots[reads[0]].tensor().reshape(shape_));
  }
  // A view of bytes in the arena is the same every run: set once, when the arena is placed.
  void fix(std::vector<Slot>& slots) {
    slots[writes[0]].value = RuntimeValue(slots[reads[0]].tensor().reshape(shape_));
    fixed_ = true;
  }

 private:
  std::vector<int64_t> shape_;
  bool fixed_ = false;
};

}  // namespace

dnnl::memory::desc plain_md(const std::vector<int64_t>& shape, dnnl::memory::data_type dt) {
  // A scalar is one element of rank 1 for oneDNN.
  dnnl::memory::dims dims(std::max<size_t>(shape.size(), 1), 1);
  std::copy(shape.begin(), shape.end(), dims.begin());
  dnnl::memory::dims strides(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * dims[i + 1];
  return dnnl::memory::desc(dims, dt, strides);
}

dnnl::memory::data_type dnnl_dtype(DType t) {
  switch (t) {
    case DType::U8: return dnnl::memory::data_type::u8;
    case DType::I8: return dnnl::memory::data_type::s8;
    case DType::I32: return dnnl::memory::data_type::s32;
    default: return dnnl::memory::data_type::f32;
  }
}

bool same_bytes_as_plain(const dnnl::memory::desc& md, const std::vector<int64_t>& shape, dnnl::engine& eng) {
  if (md == plain_md(shape, md.data_type())) return true;
  if (md.data_type() != dnnl::memory::data_type::f32) return false;  // the check below reorders floats
  auto plain = plain_md(shape);
  int64_t n = shape_numel(shape);
  if (n <= 0 || n > (1 << 16) || md.get_size() != plain.get_size()) return false;
  // Reorder 0, 1, 2, ... into `md`: the same bytes come out exactly when every element keeps its offset.
  std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n), -1.0f);
  for (int64_t i = 0; i < n; ++i) a[static_cast<size_t>(i)] = static_cast<float>(i);
  try {
    dnnl::memory from(plain, eng, a.data()), to(md, eng, b.data());
    dnnl::stream s(eng);
    dnnl::reorder(from, to).execute(s, from, to);
    s.wait();
  } catch (const dnnl::error&) {
    return false;
  }
  return a == b;
}

PlanBuilder::PlanBuilder(Plan& plan, const Graph& graph) : plan_(plan), graph_(graph) {
  for (size_t i = 0; i < graph.nodes.size(); ++i)
    for (const auto& v : passes::reads_of(graph.nodes[i])) readers_[v].push_back(i);
}

const std::vector<size_t>& PlanBuilder::readers(const std::string& value) const {
  static const std::vector<size_t> none;
  auto it = readers_.find(value);
  return it == readers_.end() ? none : it->second;
}

bool PlanBuilder::dies_here(const std::string& value) const {
  if (!current_ || graph_.output(value)) return false;
  auto it = by_name_.find(value);
  if (it == by_name_.end()) return false;
  auto kind = plan_.slots_[it->second].kind;
  if (kind != Slot::Kind::Arena && kind != Slot::Kind::Part) return false;
  size_t here = static_cast<size_t>(current_ - graph_.nodes.data());
  for (size_t r : readers(value))
    if (r > here) return false;
  // A view (a Transpose between NCHW and NHWC) shares its bytes with the value it views.
  if (kind == Slot::Kind::Part) {
    const int root = root_of(it->second);
    for (const auto& [name, id] : by_name_) {
      if (root_of(id) != root) continue;
      if (graph_.output(name)) return false;
      for (size_t r : readers(name))
        if (r > here) return false;
    }
  }
  return true;
}

int PlanBuilder::root_of(int s) const {
  while (plan_.slots_[s].kind == Slot::Kind::Alias || plan_.slots_[s].kind == Slot::Kind::Part)
    s = plan_.slots_[s].alias_of;
  return s;
}

bool PlanBuilder::bytes_die_here(const std::string& value, const std::vector<int>& others) const {
  auto it = by_name_.find(value);
  if (!current_ || it == by_name_.end()) return false;
  // A graph output is read after the last step (copied out): its bytes must outlive the arena's reuse.
  for (const auto& o : current_->outputs)
    if (graph_.output(o)) return false;
  const int root = root_of(it->second);
  if (plan_.slots_[root].kind != Slot::Kind::Arena) return false;
  for (int o : others)
    if (root_of(o) == root) return false;
  const size_t here = static_cast<size_t>(current_ - graph_.nodes.data());
  for (const auto& [name, id] : by_name_) {
    if (root_of(id) != root) continue;
    if (graph_.output(name)) return false;
    for (size_t r : readers(name))
      if (r > here) return false;
  }
  return true;
}

int PlanBuilder::define_part(const std::string& value, int of, std::vector<int64_t> shape,
                             const dnnl::memory::desc& md, size_t offset) {
  while (plan_.slots_[of].kind == Slot::Kind::Alias) of = plan_.slots_[of].alias_of;  // a Reshape: the same bytes
  const Slot& root = plan_.slots_[of];
  HODU_CHECK(root.kind == Slot::Kind::Arena || root.kind == Slot::Kind::Part, ErrorCode::Internal,
             "'{}' cannot live inside '{}'", value, root.name);
  Slot s;
  s.name = value;
  s.kind = Slot::Kind::Part;
  s.dtype = root.dtype;
  s.shape = std::move(shape);
  s.is_static = true;
  s.alias_of = of;
  s.part_offset = offset;
  if (!(md == plain_md_of(s))) {
    s.blocked = true;
    s.md = md;
    s.bytes = md.get_size();
  } else {
    s.bytes = dtype_storage_bytes(s.dtype, shape_numel(s.shape));
  }
  plan_.slots_.push_back(std::move(s));
  int id = static_cast<int>(plan_.slots_.size()) - 1;
  if (!value.empty()) by_name_[value] = id;
  return id;
}

int PlanBuilder::slot(const std::string& value) const {
  auto it = by_name_.find(value);
  if (it == by_name_.end()) fail(ErrorCode::InvalidModel, "value '{}' is read before it is produced", value);
  return it->second;
}

std::optional<std::pair<DType, std::vector<int64_t>>> PlanBuilder::static_type(const std::string& value) const {
  auto it = by_name_.find(value);
  if (it != by_name_.end()) {
    const Slot& s = plan_.slots_[it->second];
    if (s.is_static) return std::make_pair(s.dtype, s.shape);
    return std::nullopt;
  }
  auto t = graph_.type_of(value);
  if (!t || !t->is_tensor() || t->dtype == DType::Undefined) return std::nullopt;
  auto dims = t->shape.to_static();
  if (!dims) return std::nullopt;
  return std::make_pair(t->dtype, *dims);
}

int PlanBuilder::define(const std::string& value, DType dtype, std::vector<int64_t> shape,
                        std::optional<dnnl::memory::desc> md) {
  Slot s;
  s.name = value;
  s.kind = Slot::Kind::Arena;
  s.dtype = dtype;
  s.shape = std::move(shape);
  s.is_static = true;
  if (md && !(*md == plain_md_of(s))) {
    s.blocked = true;
    s.md = *md;
    s.bytes = md->get_size();
  } else {
    s.bytes = dtype_storage_bytes(dtype, shape_numel(s.shape));
  }
  plan_.slots_.push_back(std::move(s));
  int id = static_cast<int>(plan_.slots_.size()) - 1;
  if (!value.empty()) by_name_[value] = id;
  return id;
}

int PlanBuilder::define_dynamic(const std::string& value) {
  int id = define(value, DType::Undefined, {});
  Slot& sl = at(id);
  sl.kind = Slot::Kind::Dynamic;
  sl.is_static = false;
  sl.bytes = 0;
  if (auto t = graph_.type_of(value); t && t->is_tensor()) {
    sl.dtype = t->dtype;
    if (auto d = t->shape.to_static()) {
      sl.shape = *d;
      sl.is_static = true;
    }
  }
  return id;
}

int PlanBuilder::define_alias(const std::string& value, int of, std::vector<int64_t> shape) {
  Slot s;
  s.name = value;
  s.kind = Slot::Kind::Alias;
  s.dtype = plan_.slots_[of].dtype;
  s.shape = shape;
  s.is_static = true;
  s.alias_of = of;
  plan_.slots_.push_back(std::move(s));
  int id = static_cast<int>(plan_.slots_.size()) - 1;
  by_name_[value] = id;
  add(std::make_unique<AliasStep>(of, id, std::move(shape)));
  return id;
}

int PlanBuilder::plain(const std::string& value) {
  int s = slot(value);
  if (!plan_.slots_[s].blocked) return s;
  return as_layout(value, plain_md_of(plan_.slots_[s]));
}

int PlanBuilder::as_layout(const std::string& value, const dnnl::memory::desc& md) {
  int s = slot(value);
  const Slot& cur = plan_.slots_[s];
  if (layout_md(cur) == md) return s;
  std::string key = layout_key(md);
  if (auto it = reordered_.find({s, key}); it != reordered_.end()) return it->second;
  bool is_plain = md == plain_md_of(cur);
  // A layout with the same bytes (nhwc of [1, C, 1, 1] read as plain) is a view, not a copy.
  if ((cur.kind == Slot::Kind::Arena || cur.kind == Slot::Kind::Part) && !graph_.output(value) &&
      (is_plain ? same_bytes_as_plain(layout_md(cur), cur.shape, engine())
                : cur.blocked ? false : same_bytes_as_plain(md, cur.shape, engine()))) {
    int id = define_part("", s, cur.shape, md, 0);
    plan_.slots_[id].name = value;
    reordered_[{s, key}] = id;
    return id;
  }
  Slot t;
  t.name = cur.name;
  t.kind = Slot::Kind::Arena;
  t.dtype = cur.dtype;
  t.shape = cur.shape;
  t.is_static = true;
  t.blocked = !is_plain;
  if (!is_plain) t.md = md;
  t.bytes = is_plain ? dtype_storage_bytes(cur.dtype, shape_numel(cur.shape)) : md.get_size();
  plan_.slots_.push_back(std::move(t));
  int id = static_cast<int>(plan_.slots_.size()) - 1;
  add(std::make_unique<ReorderStep>(*this, s, id));
  reordered_[{s, key}] = id;
  return id;
}

std::shared_ptr<Storage> StoragePool::take(size_t bytes) {
  auto it = free_.lower_bound(bytes);
  if (it == free_.end() || it->first > bytes + bytes / 4) return nullptr;
  std::shared_ptr<Storage> s = std::move(it->second);
  bytes_ -= it->first;
  free_.erase(it);
  return s;
}

void StoragePool::put(std::shared_ptr<Storage> storage) {
  const size_t n = storage->bytes();
  if (bytes_ + n > kMaxBytes) return;  // let it go
  bytes_ += n;
  free_.emplace(n, std::move(storage));
}

void PlanBuilder::add(std::unique_ptr<Step> step) {
  step->node = current_;
  plan_.steps_.push_back(std::move(step));
}

PackedConstant PlanBuilder::pack(const std::string& value, const Tensor& t, const dnnl::memory::desc& from,
                                 const dnnl::memory::desc& to) {
  // Across plans (free input dims) the model's PackedWeightCache; within one, pack_cache_.
  auto make = [&] {
    plan_.packed_bytes_ += to.get_size();
    return plan_.options_.weight_cache
               ? plan_.options_.weight_cache->get(t, from, to, [&] { return pack_constant(engine(), t, from, to); })
               : pack_constant(engine(), t, from, to);
  };
  PackedConstant p;
  if (!value.empty()) {
    auto& forms = pack_cache_[value];
    for (const auto& f : forms)
      if (f.from == from && f.to == to) p = f.packed;
    if (!p.buffer) {
      p = make();
      forms.push_back({from, to, p});
    }
  } else {
    p = make();
  }
  if (!value.empty() && current_ && plan_.options_.release_weights && t.nbytes() >= kReleaseMinBytes) {
    // A layout oneDNN cannot reorder back (Winograd's transformed weights) keeps its original,
    // unless this plan is the model's only one.
    try {
      dnnl::reorder::primitive_desc(engine(), to, engine(), from);
    } catch (const dnnl::error&) {
      consumed_at_plan_time(value);
      return p;
    }
    Packing& k = packed_[value];
    k.packers.push_back(static_cast<size_t>(current_ - graph_.nodes.data()));
    if (!k.copy.buffer) {
      k.copy = p;
      k.from = from;
      k.original = t;
    }
  }
  return p;
}

void PlanBuilder::consumed_at_plan_time(const std::string& value) {
  if (value.empty() || !current_ || !plan_.options_.release_weights) return;
  Packing& k = packed_[value];
  if (!plan_.options_.single_plan) {
    k.packers.push_back(kNotReversible);
    return;
  }
  const Tensor* t = graph_.initializer(value);
  if (!t || t->nbytes() < kReleaseMinBytes) {
    k.packers.push_back(kNotReversible);
    return;
  }
  k.packers.push_back(static_cast<size_t>(current_ - graph_.nodes.data()));
  k.rebuildable = false;
  if (!k.original.defined()) k.original = *t;
}

void PlanBuilder::release_packed_inputs(const Node& n) {
  for (const auto& value : n.inputs) {
    auto it = packed_.find(value);
    if (it == packed_.end()) continue;
    Packing& k = it->second;
    const std::vector<size_t>& all = readers(value);
    if (all.empty() || &n != &graph_.nodes[all.back()]) continue;  // a later node reads it too
    const Tensor& t = k.original;
    Storage* storage = t.storage().get();
    if (storage_users_.empty())
      for (const auto& [name, init] : graph_.initializers) ++storage_users_[init.storage().get()];
    // Only an initializer's own storage, whole (a view of part of one cannot give it back), and no
    // other initializer on it.
    bool whole = storage && t.is_contiguous() && t.offset() == 0 && t.nbytes() == storage->bytes() &&
                 storage_users_[storage] == 1;
    bool all_packed = std::set<size_t>(k.packers.begin(), k.packers.end()) == std::set<size_t>(all.begin(), all.end());
    if (whole && all_packed && !graph_.output(value) && !graph_.input(value)) {
      if (!k.rebuildable) {
        // The model's only plan (PlanOptions::single_plan) read it for good: nothing reads it again.
        storage->release([value](void*) {
          fail(ErrorCode::Internal, "weight '{}' was read after the cpu engine released it (a model with static input "
               "shapes is planned once)", value);
        });
        packed_.erase(it);
        continue;
      }
      // Rebuilt, if anything reads the original again (a plan for new shapes), from the packed copy.
      storage->release([copy = k.copy, from = k.from, eng = engine()](void* block) mutable {
        dnnl::memory dst(from, eng, block);
        dnnl::stream s(eng);
        dnnl::reorder(copy.mem, dst).execute(s, copy.mem, dst);
        s.wait();
      });
    }
    packed_.erase(it);
  }
}

dnnl::memory memory_of(RunState& rs, int slot, const dnnl::memory::desc& md) {
  return dnnl::memory(md, rs.engine, rs.slots[slot].data());
}

namespace {

// A value with a 0 dim, other than an empty 1-D parameter input: exporters give an
// optional parameter that way (Resize's roi and scales from paddle2onnx and tf2onnx), and
// the kernels read it as "not given". Inputs of ops whose every input is data count.
bool has_empty_tensor(const PlanBuilder& b, const Node& n) {
  static const std::set<std::string> all_data = {"Concat", "Sum", "Mean", "Max", "Min"};
  const bool params_after_first = n.domain.empty() && !all_data.count(n.op_type);
  for (const auto* names : {&n.inputs, &n.outputs})
    for (size_t i = 0; i < names->size(); ++i) {
      const std::string& v = (*names)[i];
      if (v.empty()) continue;
      auto t = b.static_type(v);
      if (!t || std::find(t->second.begin(), t->second.end(), 0) == t->second.end()) continue;
      if (names == &n.inputs && i > 0 && params_after_first && t->second.size() == 1) continue;
      return true;
    }
  return false;
}

}  // namespace

SharedArena::~SharedArena() {
  if (base_) munmap(base_, size_);
}

std::shared_ptr<Storage> SharedArena::take(size_t bytes) {
  if (!tried_) {
    tried_ = true;
    // Addresses only: MAP_NORESERVE commits nothing, and a page becomes resident when written.
    constexpr size_t kRange = size_t{4} << 30;
    void* p = mmap(nullptr, kRange, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) {
      base_ = p;
      size_ = kRange;
    }
  }
  if (!base_ || bytes > size_) return nullptr;
  return Storage::wrap(base_, bytes, [keep = shared_from_this()] {});
}

Plan::Plan(const Model& model, const std::map<std::string, std::vector<int64_t>>& input_shapes,
           const PlanOptions& options, dnnl::engine& engine)
    : model_(model), options_(options), engine_(engine), interp_(model, {options.threads, 0}),
      governor_(options.threads) {
  if (!options_.node_arena) options_.node_arena = std::make_shared<SharedArena>();
  // oneDNN sizes a primitive's parallel split when it is created: with the OpenMP default here,
  // a plan for 1 thread would run its convolutions on every core.
  omp_set_num_threads(options_.threads);
  const Graph& g = model.graph;
  PlanBuilder b(*this, g);
  std::map<std::string, int>& names = b.by_name_;
  auto add_slot = [&](Slot s) {
    slots_.push_back(std::move(s));
    int id = static_cast<int>(slots_.size()) - 1;
    names[slots_.back().name] = id;
    return id;
  };
  for (const auto& [name, t] : g.initializers) {
    if (g.input(name)) continue;
    Slot s;
    s.name = name;
    s.kind = Slot::Kind::Constant;
    s.dtype = t.dtype();
    s.shape = t.shape();
    s.is_static = true;
    s.value = RuntimeValue(t.is_contiguous() || t.dtype() == DType::String ? t : t.contiguous());
    add_slot(std::move(s));
  }
  for (const auto& in : g.inputs) {
    Slot s;
    s.name = in.name;
    s.kind = Slot::Kind::Input;
    if (in.type.is_tensor()) {
      s.dtype = in.type.dtype;
      if (auto it = input_shapes.find(in.name); it != input_shapes.end()) {
        s.shape = it->second;
        s.is_static = true;
      } else if (auto d = in.type.shape.to_static()) {
        s.shape = *d;
        s.is_static = true;
      }
    }
    input_slots_[in.name] = add_slot(std::move(s));
    feed_slots_.push_back(input_slots_[in.name]);
  }

  const KernelFactory factories[] = {make_conv,          make_matmul,        make_pool,
                                     make_attention,     make_normalization, make_channel_zero_pad, make_channel_shuffle, make_blocked_concat, make_data_movement,
                                     make_elementwise,   make_fused_elementwise, make_int8_conv,
                                     make_int8_matmul,   make_quantize,      make_control_flow,
                                     make_rnn,           make_dynamic_quantize, make_lookup_table, make_backward,
                                     make_backward_rows,
                                     // Tensor kernels of any dtype, shapes known at plan or run time.
                                     make_broadcast_ops, make_unary_ops, make_tensor_ops, make_resize, make_deconv,
                                     make_reduce_ops, make_index_ops, make_norm_ops, make_axis_norm_ops, make_rotary, make_einsum,
                                     make_detect_ops,
                                     make_runtime_matmul, make_sequence_ops};
  for (const auto& n : g.nodes) {
    if (b.claimed_.count(&n)) continue;  // done by an earlier node's step
    b.current_ = &n;
    // Primitives size their split when created: a small node's are made for one thread.
    b.node_threads_ = node_threads(g, n, options_.threads);
    omp_set_num_threads(b.node_threads_);
    const size_t first_step = steps_.size();
    bool done = false;
    bool reference = options_.dispatcher &&
                     options_.dispatcher->choose(n, dispatch_dtype(g, n), "cpu").kernel == "reference";
    // A tensor with a 0 dim: nothing to compute, and oneDNN divides by its dims when it
    // makes a primitive (a MatMul of [0, 4] died of SIGFPE). Empty results and concats of
    // empty parts (shape arithmetic behind torch's slicing) take hodu's own steps; the rest the
    // interpreter's kernel, which handles empty tensors.
    // Control flow runs its bodies on plans of their own, which see the empty values (a
    // Loop whose carried value starts as [0, ...]: torch's paste-masks loop).
    const bool empty = has_empty_tensor(b, n) && !(n.domain.empty() && passes::has_subgraph(n));
    if (empty && !reference) done = make_empty_tensor_ops(b, n);
    reference |= empty;
    for (KernelFactory f : factories) {
      if (reference) break;
      if (f(b, n)) {
        done = true;
        break;
      }
    }
    if (!done && !reference && make_run_time_node(b, n)) done = true;
    if (!done) {
      make_fallback(b, n);
      ++fallbacks_;
      if (options_.verbose)
        std::fprintf(stderr, "cpu: %s runs on the interpreter's kernel (%s)\n", n.describe().c_str(),
                     empty       ? "an empty tensor"
                     : reference ? "chosen by the policy"
                                 : "no cpu kernel for these types/attributes");
    }
    b.release_packed_inputs(n);
    for (size_t i = first_step; i < steps_.size(); ++i) steps_[i]->threads = b.node_threads_;
  }
  b.current_ = nullptr;
  b.node_threads_ = options_.threads;
  omp_set_num_threads(options_.threads);
  for (const auto& o : g.outputs) {
    int s = b.plain(o.name);
    if (slots_[s].kind == Slot::Kind::Arena) slots_[s].kind = Slot::Kind::Output;
    output_slots_.push_back(s);
  }

  if (options_.state_in_place) plan_state_in_place(b);

  // Lifetimes in step order; an alias keeps its root alive.
  auto root = [&](int s) { return b.root_of(s); };
  std::vector<int> first(slots_.size(), -1), last(slots_.size(), -1);
  for (size_t i = 0; i < steps_.size(); ++i) {
    for (int w : steps_[i]->writes) {
      int r = root(w);
      if (first[r] < 0) first[r] = static_cast<int>(i);
      last[r] = std::max(last[r], static_cast<int>(i));
    }
    for (int rd : steps_[i]->reads) last[root(rd)] = std::max(last[root(rd)], static_cast<int>(i));
  }
  // Values allocated while running (shapes unknown at plan time) let go after the last step that
  // uses them, when large: they stay otherwise until the next run overwrites them, and a model
  // of such values (MViT-v2 behind its Loop: index tensors of 2.5 GB) held 19.6 GB at its peak.
  {
    std::vector<int> last_use(slots_.size(), -1);
    for (size_t i = 0; i < steps_.size(); ++i) {
      for (int w : steps_[i]->writes) last_use[w] = std::max(last_use[w], static_cast<int>(i));
      for (int rd : steps_[i]->reads) last_use[rd] = std::max(last_use[rd], static_cast<int>(i));
    }
    std::vector<char> is_output(slots_.size(), 0);
    for (int o : output_slots_) is_output[o] = 1;
    release_after_.assign(steps_.size(), {});
    for (size_t s = 0; s < slots_.size(); ++s)
      if (!is_output[s] && last_use[s] >= 0 &&
          (slots_[s].kind == Slot::Kind::Dynamic ||
           // a view of such a value (a view of the arena or of an input is set once, or per run)
           (slots_[s].kind == Slot::Kind::Alias &&
            slots_[b.root_of(static_cast<int>(s))].kind == Slot::Kind::Dynamic)))
        release_after_[static_cast<size_t>(last_use[s])].push_back(static_cast<int>(s));
  }
  // Graph outputs are copied out after the last step: the bytes under one (a Reshape's root
  // too) stay untouched to the end, not just to the last step reading them.
  for (int o : output_slots_)
    if (first[root(o)] >= 0) last[root(o)] = static_cast<int>(steps_.size());
  // Greedy placement, largest first: each slot takes the lowest offset not overlapping a placed
  // slot whose lifetime intersects its own.
  std::vector<int> order;
  for (size_t s = 0; s < slots_.size(); ++s)
    if (slots_[s].kind == Slot::Kind::Arena && first[s] >= 0) order.push_back(static_cast<int>(s));
  std::stable_sort(order.begin(), order.end(), [&](int a, int c) { return slots_[a].bytes > slots_[c].bytes; });
  std::vector<int> placed;
  for (int s : order) {
    std::vector<std::pair<size_t, size_t>> busy;
    for (int p : placed)
      if (!(last[p] < first[s] || last[s] < first[p]))
        busy.emplace_back(slots_[p].offset, slots_[p].offset + align_up(slots_[p].bytes));
    std::sort(busy.begin(), busy.end());
    size_t off = 0, need = align_up(std::max<size_t>(slots_[s].bytes, 1));
    for (const auto& [lo, hi] : busy) {
      if (off + need <= lo) break;
      off = std::max(off, hi);
    }
    slots_[s].offset = off;
    arena_bytes_ = std::max(arena_bytes_, off + need);
    placed.push_back(s);
  }
  if (options_.per_shape_node) arena_ = options_.node_arena->take(std::max<size_t>(arena_bytes_, kAlign));
  if (!arena_) arena_ = Storage::allocate(std::max<size_t>(arena_bytes_, kAlign));
  // Parts sit inside their root: offsets add up along the chain.
  for (auto& sl : slots_) {
    if (sl.kind != Slot::Kind::Part) continue;
    size_t off = sl.part_offset;
    int r = sl.alias_of;
    while (slots_[r].kind == Slot::Kind::Part) {
      off += slots_[r].part_offset;
      r = slots_[r].alias_of;
    }
    HODU_CHECK(slots_[r].kind == Slot::Kind::Arena, ErrorCode::Internal, "'{}' is inside '{}', which is not in the arena",
               sl.name, slots_[r].name);
    sl.offset = slots_[r].offset + off;
  }
  for (size_t s = 0; s < slots_.size(); ++s)
    if (slots_[s].kind == Slot::Kind::Alias && slots_[b.root_of(static_cast<int>(s))].kind == Slot::Kind::Input)
      input_views_.push_back(static_cast<int>(s));
  std::vector<char> in_arena(slots_.size(), 0);
  for (int s : order) in_arena[static_cast<size_t>(s)] = 1;
  for (size_t s = 0; s < slots_.size(); ++s) {
    Slot& sl = slots_[s];
    if (!in_arena[s] && sl.kind != Slot::Kind::Part) continue;
    if (sl.blocked) {
      sl.value = RuntimeValue(Tensor::from_storage(DType::U8, {static_cast<int64_t>(sl.bytes)}, arena_,
                                                   static_cast<int64_t>(sl.offset)));
    } else {
      size_t es = dtype_storage_bytes(sl.dtype, 1);
      HODU_CHECK(es > 0 && sl.offset % es == 0, ErrorCode::Internal, "arena offset of '{}' is misaligned", sl.name);
      sl.value = RuntimeValue(Tensor::from_storage(sl.dtype, sl.shape, arena_, static_cast<int64_t>(sl.offset / es)));
    }
  }
  for (auto& sl : slots_)
    if (sl.kind == Slot::Kind::Output) {
      HODU_CHECK(!sl.blocked, ErrorCode::Internal, "graph output '{}' left in a blocked layout", sl.name);
      // A one-node plan per shape gets a large output at each run, from its caller's pool or
      // allocated then (run()), and keeps none between runs.
      if (options_.per_shape_node && dtype_storage_bytes(sl.dtype, shape_numel(sl.shape)) >= kReleaseAfterUseBytes)
        continue;
      sl.value = RuntimeValue(Tensor::empty(sl.dtype, sl.shape));
    }
  // Views of arena bytes (Reshape and friends of intermediates) never change: no step at run time.
  for (auto& st : steps_)
    if (auto* alias = dynamic_cast<AliasStep*>(st.get())) {
      const Slot& root = slots_[b.root_of(alias->reads[0])];
      if ((root.kind == Slot::Kind::Arena || root.kind == Slot::Kind::Part) && !slots_[alias->reads[0]].blocked &&
          slots_[alias->reads[0]].value.is_tensor())
        alias->fix(slots_);
    }
  if (options_.verbose) {
    for (const auto& st : steps_) std::fprintf(stderr, "cpu: %s\n", st->label.c_str());
    std::fprintf(stderr, "cpu: plan of %zu steps: arena %.1f MiB, packed constants %.1f MiB, %d on the interpreter\n",
                 steps_.size(), arena_bytes_ / 1048576.0, packed_bytes_ / 1048576.0, fallbacks_);
  }
}

void Plan::plan_state_in_place(const PlanBuilder& b) {
  const std::string suffix = ".next";
  for (int oi : output_slots_) {
    Slot& out = slots_[oi];
    if (out.name.size() <= suffix.size() ||
        out.name.compare(out.name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    auto in = input_slots_.find(out.name.substr(0, out.name.size() - suffix.size()));
    if (in == input_slots_.end()) continue;
    const Slot& x = slots_[in->second];
    if (!x.is_static || x.dtype != out.dtype || x.shape != out.shape || x.dtype == DType::String) continue;
    copy_back_.emplace_back(in->second, oi);  // unless it can be written in place (below)
    if (out.kind != Slot::Kind::Output) continue;  // a view or the interpreter's result: copied
    // The producer must come after every reader of x, or be the last reader and read it elementwise.
    int producer = -1, last_read = -1;
    for (size_t i = 0; i < steps_.size(); ++i) {
      for (int w : steps_[i]->writes)
        if (w == oi) producer = static_cast<int>(i);
      for (int r : steps_[i]->reads)
        if (b.root_of(r) == in->second) last_read = static_cast<int>(i);
    }
    if (producer < 0 || producer < last_read) continue;
    if (producer == last_read) {
      const Node* n = steps_[producer]->node;
      bool elementwise = n && ((n->domain == "hodu" && n->op_type == "FusedElementwise") ||
                               (n->domain.empty() && (n->op_type == "Add" || n->op_type == "Sub" ||
                                                      n->op_type == "Mul" || n->op_type == "Div")));
      if (!elementwise || steps_[producer]->writes.size() != 1) continue;
    }
    copy_back_.pop_back();
    in_place_.emplace_back(in->second, oi);
    if (options_.verbose) std::fprintf(stderr, "cpu: '%s' is written into input '%s'\n", out.name.c_str(), x.name.c_str());
  }
}

std::vector<std::string> Plan::in_place_outputs() const {
  std::vector<std::string> out;
  for (const auto& [x, o] : in_place_) out.push_back(slots_[o].name);
  return out;
}

std::vector<std::string> Plan::kernel_choices() const {
  std::vector<std::string> out;
  for (const auto& s : steps_) s->list_kernels(out);
  return out;
}

std::vector<RuntimeValue> Plan::run(const std::map<std::string, RuntimeValue>& inputs, dnnl::stream& stream,
                                    uint64_t run_index) {
  std::vector<RuntimeValue> feeds(feed_slots_.size());
  for (size_t i = 0; i < feed_slots_.size(); ++i) {
    const std::string& name = slots_[feed_slots_[i]].name;
    auto it = inputs.find(name);
    if (it != inputs.end()) feeds[i] = it->second;
    else HODU_CHECK(model_.graph.initializer(name), ErrorCode::InvalidArgument, "missing input '{}'", name);
  }
  // All threads or one for this run (the ThreadGovernor: one while other processes keep the cores busy).
  ThreadGovernor::Run governed(governor_);
  return run(feeds, stream, nullptr, run_index * 0x9E3779B97F4A7C15ull);
}

std::optional<std::vector<int64_t>> Plan::output_shape(size_t i) const {
  const Slot& s = slots_[output_slots_.at(i)];
  if (!s.is_static) return std::nullopt;
  return s.shape;
}

std::vector<RuntimeValue> Plan::run(const std::vector<RuntimeValue>& inputs, dnnl::stream& stream,
                                    const std::vector<Tensor>* into, uint64_t seed_salt) {
  // One inside a run the ThreadGovernor put on one thread (OpenMP's active levels are 0 then),
  // a subgraph's run within it too.
  const int threads = omp_get_max_active_levels() == 0 ? 1 : options_.threads;
  omp_set_num_threads(threads);
  HODU_CHECK(inputs.size() == feed_slots_.size(), ErrorCode::Internal, "{} inputs for a plan of {}", inputs.size(),
             feed_slots_.size());
  for (size_t i = 0; i < feed_slots_.size(); ++i) {
    Slot& s = slots_[feed_slots_[i]];
    if (inputs[i].is_none()) {
      const Tensor* init = model_.graph.initializer(s.name);
      HODU_CHECK(init, ErrorCode::InvalidArgument, "missing input '{}'", s.name);
      s.value = RuntimeValue(*init);
    } else {
      s.value = inputs[i];
    }
    if (s.value.is_tensor() && s.dtype != DType::String && !s.value.tensor.is_contiguous())
      s.value = RuntimeValue(s.value.tensor.contiguous());
  }
  // Updated state goes straight into the tensor fed for it.
  for (const auto& [x, o] : in_place_) slots_[o].value = slots_[x].value;
  auto wants = [&](size_t i) { return into && i < into->size() && (*into)[i].defined(); };
  // Outputs written straight into the caller's buffers; the plan's own ones come back after.
  std::vector<std::pair<int, RuntimeValue>> own;
  for (size_t i = 0; i < output_slots_.size(); ++i) {
    int id = output_slots_[i];
    Slot& s = slots_[id];
    if (s.kind != Slot::Kind::Output) continue;
    if (std::any_of(in_place_.begin(), in_place_.end(), [&](const auto& p) { return p.second == id; })) continue;
    bool bound = false;
    for (const auto& [o, v] : own) bound |= o == id;
    if (wants(i) && !bound) {
      const Tensor& t = (*into)[i];
      HODU_CHECK(t.dtype() == s.dtype && t.shape() == s.shape && t.is_contiguous(), ErrorCode::InvalidModel,
                 "output '{}' is {}{}, expected {}", s.name, dtype_name(s.dtype), shape_to_string(s.shape),
                 t.type_string());
      own.emplace_back(id, std::move(s.value));
      s.value = RuntimeValue(t);
      continue;
    }
    if (!bound && !s.value.tensor.defined()) {  // let go after the last run (per_shape_node)
      s.value = RuntimeValue(Tensor::empty(s.dtype, s.shape));
      continue;
    }
    if (bound || s.value.tensor.storage().use_count() <= 1) continue;
    // A graph output buffer the caller still holds from the last run is left to the caller; the
    // spare takes its place when the caller has let that one go.
    RuntimeValue& spare = spare_outputs_[id];
    if (spare.is_tensor() && spare.tensor.storage().use_count() == 1) std::swap(spare, s.value);
    else {
      spare = std::move(s.value);
      s.value = RuntimeValue(Tensor::empty(s.dtype, s.shape));
    }
  }
  RunState rs{slots_, threads, engine_, stream, interp_, arena_.get(), seed_salt, &pool_};
  struct ClearPool {  // also when a step throws
    StoragePool& pool;
    ~ClearPool() { pool.clear(); }
  } clear_pool{pool_};
  Profiler* profiler = Profiler::active();
  struct Nesting {  // plans run inside a step of another plan (subgraphs) count one deeper
    Nesting() { ++plan_depth; }
    ~Nesting() { --plan_depth; }
  } nesting;
  for (auto& step : steps_) {
    rs.threads = step->threads > 0 ? std::min(step->threads, threads) : threads;
    if (omp_get_max_threads() != rs.threads) omp_set_num_threads(rs.threads);
    double t0 = profiler ? profiler->now_us() : 0;
    try {
      step->run(rs);
    } catch (const dnnl::error& e) {
      fail(ErrorCode::Internal, "{}: oneDNN: {}", step->label, e.what());
    }
    if (profiler) {
      stream.wait();
      ProfileEvent e;
      e.category = "Node";
      bool reorder = step->label.rfind("reorder", 0) == 0;
      e.op = reorder || !step->node ? "Reorder" : step->node->op_type;
      e.node = step->node ? step->node->name : "";
      e.name = (e.node.empty() ? e.op : e.node) + "_kernel_time";
      e.engine = "cpu";
      e.kernel = step->label.substr(step->label.rfind(": ") == std::string::npos ? 0 : step->label.rfind(": ") + 2);
      for (int r : step->reads) {
        const Slot& sl = slots_[r];
        if (sl.value.is_tensor() && !sl.blocked) e.input_shapes.emplace_back(sl.value.tensor.dtype(), sl.value.tensor.shape());
        else if (sl.is_static) e.input_shapes.emplace_back(sl.dtype, sl.shape);  // blocked: the logical shape
      }
      for (int w : step->writes) {
        const Slot& sl = slots_[w];
        e.output_bytes += sl.value.is_tensor() && !sl.blocked ? static_cast<int64_t>(sl.value.tensor.nbytes())
                                                              : static_cast<int64_t>(sl.bytes);
      }
      e.ts_us = t0;
      e.dur_us = profiler->now_us() - t0;
      e.tid = profiler_thread_id();
      e.depth = plan_depth - 1;  // a subgraph's steps inside their If/Loop/Scan step's span
      profiler->add(std::move(e));
    }
    for (int s : release_after_[static_cast<size_t>(&step - steps_.data())]) {
      RuntimeValue& v = slots_[s].value;
      if (!v.is_tensor() || v.tensor.nbytes() < kReleaseAfterUseBytes) continue;
      if (v.tensor.dtype() != DType::String && v.tensor.storage().use_count() == 1) pool_.put(v.tensor.storage());
      v = RuntimeValue();
    }
  }
  stream.wait();
  // State outputs not written in place: copied into the fed tensors, which are the outputs.
  std::map<int, int> fed_output;  // output slot → input slot
  for (const auto& [x, o] : copy_back_) {
    Tensor in = slots_[x].value.tensor, out = slots_[o].value.tensor;
    if (!slots_[x].value.is_tensor() || !slots_[o].value.is_tensor() || !in.is_contiguous() || !out.is_contiguous() ||
        in.nbytes() != out.nbytes())
      continue;
    if (in.raw_data() != out.raw_data()) std::memcpy(in.raw_data(), out.raw_data(), out.nbytes());
    fed_output[o] = x;
  }
  std::vector<RuntimeValue> outs;
  outs.reserve(output_slots_.size());
  for (size_t i = 0; i < output_slots_.size(); ++i) {
    Slot& s = slots_[output_slots_[i]];
    // A view of the arena is copied out (later runs reuse the bytes); a view of an input or a
    // constant is handed out as it is.
    int root = output_slots_[i];
    while (slots_[root].kind == Slot::Kind::Alias || slots_[root].kind == Slot::Kind::Part) root = slots_[root].alias_of;
    bool in_arena = slots_[root].kind == Slot::Kind::Arena;
    if (auto f = fed_output.find(output_slots_[i]); f != fed_output.end()) {
      outs.push_back(slots_[f->second].value);
    } else if (wants(i) && !(s.kind == Slot::Kind::Output && s.value.tensor.raw_data() == (*into)[i].raw_data())) {
      Tensor dst = (*into)[i];
      const Tensor& src = s.value.tensor;
      HODU_CHECK(s.value.is_tensor() && src.dtype() == dst.dtype() && src.shape() == dst.shape() &&
                     dst.is_contiguous() && src.dtype() != DType::String,
                 ErrorCode::InvalidModel, "output '{}' is {}, expected {}", s.name,
                 s.value.is_tensor() ? src.type_string() : std::string("not a tensor"), dst.type_string());
      std::memcpy(dst.raw_data(), src.contiguous().raw_data(), dst.nbytes());
      outs.emplace_back(std::move(dst));
    } else if (in_arena) {
      outs.emplace_back(s.value.tensor.clone());
    } else {
      outs.push_back(s.value);
    }
  }
  for (auto& [id, v] : own) slots_[id].value = std::move(v);
  // A one-node plan per shape keeps no large output for the next run: it would hold the last
  // result of each shape's plan (Mask R-CNN's head at 100 detections: 196 MB).
  if (options_.per_shape_node)
    for (int id : output_slots_) {
      Slot& s = slots_[id];
      if (s.kind != Slot::Kind::Output || !s.value.is_tensor() || s.value.tensor.nbytes() < kReleaseAfterUseBytes) continue;
      s.value = RuntimeValue();
      spare_outputs_.erase(id);
    }
  // Drop references to the caller's inputs (and views of them).
  for (int id : feed_slots_) slots_[id].value = RuntimeValue();
  for (int id : input_views_) slots_[id].value = RuntimeValue();
  return outs;
}

}  // namespace hodu::cpu
