// The cpu engine's execution plan for one set of input shapes: the optimized
// graph turned into a list of steps (one kernel per node, plus layout
// reorders), every value a slot, intermediates placed in one arena that is
// allocated when the plan is built, so that running a plan allocates nothing.
#pragma once
#include <oneapi/dnnl/dnnl.hpp>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/runtime_value.h"
#include "engines/cpu/packed_weight_cache.h"
#include "engines/cpu/thread_governor.h"
#include "engines/interp/interpreter.h"
#include "ir/graph.h"

namespace hodu {
class Dispatcher;
namespace winograd {
struct TransformedWeights;
}
}

namespace hodu::cpu {

// One value at run time.
struct Slot {
  enum class Kind {
    Input,     // fed by the caller
    Constant,  // an initializer
    Arena,     // an intermediate with a static size: lives in the arena
    Output,    // a graph output: its own buffer, replaced when the caller still holds it
    Alias,     // a view of another slot's data (Reshape and friends), set by a step at run time
    Part,      // bytes inside another Arena/Part slot (alias_of, at part_offset): a view in an
               // equivalent layout, an in-place result, or a producer's share of a Concat
    Dynamic,   // produced by a kernel that allocates (interpreter fallback, unknown shape)
  };
  std::string name;
  Kind kind = Kind::Dynamic;
  DType dtype = DType::Undefined;
  std::vector<int64_t> shape;
  bool is_static = false;
  // Data kept in a oneDNN blocked layout (then `value` is a flat f32 tensor over the bytes).
  bool blocked = false;
  dnnl::memory::desc md;
  int alias_of = -1;
  size_t part_offset = 0;  // Part: bytes from the start of alias_of
  size_t bytes = 0;
  size_t offset = 0;  // in the arena
  RuntimeValue value;

  const Tensor& tensor() const { return value.tensor; }
  void* data() { return value.tensor.raw_data(); }
};

// Values of run-time shapes from this size up are let go after their last use, into the plan's
// StoragePool; smaller ones keep their buffers for the next run.
constexpr size_t kReleaseAfterUseBytes = size_t{16} << 20;

// Large buffers of values released during a run (Plan::release_after_), handed to later steps
// that allocate the same size (the blocks of a transformer repeat their shapes): the memory of a
// value freed after its last use without the cost of mapping and zeroing it again. Emptied at
// the end of each run, so it holds at most what one run lets go of and has not taken back.
class StoragePool {
 public:
  // A free buffer of `bytes` to at most 1.25x that, or null.
  std::shared_ptr<Storage> take(size_t bytes);
  void put(std::shared_ptr<Storage> storage);
  void clear() {
    free_.clear();
    bytes_ = 0;
  }

 private:
  static constexpr size_t kMaxBytes = size_t{4} << 30;
  std::multimap<size_t, std::shared_ptr<Storage>> free_;
  size_t bytes_ = 0;
};

struct RunState {
  std::vector<Slot>& slots;
  int threads;
  dnnl::engine& engine;
  dnnl::stream& stream;
  const interp::Interpreter& interp;
  const Storage* arena;  // the plan's activation arena, reused across steps
  uint64_t seed_salt = 0;  // EngineOptions::reseed_each_run: mixed into random ops' seeds (0: none)
  StoragePool* pool = nullptr;  // buffers released earlier in the run, for outputs allocated now
};

// One thing the plan does at run time: a node's kernel or a layout change.
class Step {
 public:
  virtual ~Step() = default;
  virtual void run(RunState& rs) = 0;
  // "Conv: onednn" lines for Plan::kernel_choices (a step running subgraphs adds their plans').
  virtual void list_kernels(std::vector<std::string>& out) const {
    if (!label.empty()) out.push_back(label);
  }
  std::string label;  // "node 'conv1' (hodu.FusedConv): onednn"
  int threads = 0;    // the threads it runs on (node_threads); 0: the plan's
  std::vector<int> reads, writes;
  const Node* node = nullptr;  // the node being planned when the step was added (profiles)
};

struct PlanOptions {
  int threads = 1;
  uint64_t seed = 0;  // random ops, mixed per node as the interpreter does
  // The Session's dispatcher: a node whose kernel it chooses as "reference" runs the interpreter's kernel.
  std::shared_ptr<Dispatcher> dispatcher;
  bool verbose = false;   // a note per node on stderr: which kernel, fallbacks
  bool blocked_layouts = true;
  // EngineOptions::exclusive_weights: a weight that every reader packs is released once packed.
  bool release_weights = false;
  // Every input of the model has a static shape, so this is the model's only plan (the Session
  // refuses other shapes): with release_weights, a weight packed in a form that cannot give the
  // original back (Winograd's transformed weights, int8 weights split or offset) is released too.
  bool single_plan = false;
  // EngineOptions::update_state_in_place: an output "<x>.next" is written into the tensor fed as
  // input "<x>" where its producer is the last reader of "<x>" (or reads it elementwise).
  bool state_in_place = false;
  // The level subgraphs (If branches, Loop and Scan bodies) are optimized at when planned.
  int opt_level = 3;
  // Packed weights shared with the model's other plans (one per input shape); null: none.
  std::shared_ptr<PackedWeightCache> weight_cache;
  // A one-node plan of run_time_node.cc, one per input shape of its node. Its convs take no
  // Winograd kernel: each such plan would hold its own transformed weights, 4x the weights
  // (Keypoint R-CNN's eight 512-channel head convs: 300 MB), and a large scratch arena.
  bool per_shape_node = false;
  // The arena the per_shape_node plans under one top-level plan take (set by that plan).
  std::shared_ptr<class SharedArena> node_arena;
};

// One arena for the per_shape_node plans of a top-level plan: each runs within one step of
// its parent and keeps nothing in its arena between runs, and they run one at a time, so they
// share the bytes. They are carved from one address range reserved up front (no memory until
// touched), so the resident size is the largest arena any of them used, not their sum (Mask
// R-CNN's head at 100 detections: 249 MB in four blocks before). A plan needing more than the
// range, or where the range cannot be reserved, gets its own arena.
class SharedArena : public std::enable_shared_from_this<SharedArena> {
 public:
  ~SharedArena();
  // `bytes` at the start of the range (the same bytes for every plan); null when too large.
  std::shared_ptr<Storage> take(size_t bytes);

 private:
  void* base_ = nullptr;
  size_t size_ = 0;
  bool tried_ = false;
};

// A constant reordered once, at plan time, into the layout a primitive wants (or the
// constant itself where the primitive reads it as stored: `buffer` then shares its storage).
struct PackedConstant {
  std::shared_ptr<void> buffer;  // owns the bytes (not zeroed first: the reorder writes every one)
  dnnl::memory mem;
};

class PlanBuilder;

class Plan {
 public:
  // `model` is the optimized model for these input shapes; it must outlive the plan.
  Plan(const Model& model, const std::map<std::string, std::vector<int64_t>>& input_shapes,
       const PlanOptions& options, dnnl::engine& engine);
  // `run_index` > 0 (EngineOptions::reseed_each_run) makes random ops draw that run's numbers.
  std::vector<RuntimeValue> run(const std::map<std::string, RuntimeValue>& inputs, dnnl::stream& stream,
                                uint64_t run_index = 0);
  // The same with the inputs in the graph's input order (a None value: the initializer of an
  // overridable input). Output i is written into `into[i]` where that is a defined tensor (of the
  // output's dtype and shape; a view into a larger buffer is fine), and returned as it.
  // `seed_salt`: RunState::seed_salt (a subgraph runs with its caller's).
  std::vector<RuntimeValue> run(const std::vector<RuntimeValue>& inputs, dnnl::stream& stream,
                                const std::vector<Tensor>* into = nullptr, uint64_t seed_salt = 0);
  // The static shape of output i, when the plan knows it, and its dtype.
  std::optional<std::vector<int64_t>> output_shape(size_t i) const;
  DType output_dtype(size_t i) const { return slots_[output_slots_.at(i)].dtype; }
  // "Conv: onednn" per step, for tests and --verbose.
  std::vector<std::string> kernel_choices() const;
  size_t arena_bytes() const { return arena_bytes_; }
  const Storage* arena() const { return arena_.get(); }
  // Bytes of the constants packed into oneDNN's layouts or hodu's kernels' own forms (each
  // shared copy once), for tests and HODU_CPU_VERBOSE.
  size_t packed_bytes() const { return packed_bytes_; }
  // Outputs written straight into their input's tensor (PlanOptions::state_in_place); the other
  // "<x>.next" outputs are copied into the tensor fed as "<x>" at the end of a run.
  std::vector<std::string> in_place_outputs() const;
  int fallback_count() const { return fallbacks_; }
  // Whether every run uses all the plan's threads (ThreadGovernor::pin), for tests.
  bool threads_pinned() const { return governor_.pinned(); }

 private:
  friend class PlanBuilder;
  const Model& model_;
  PlanOptions options_;
  dnnl::engine& engine_;
  std::vector<Slot> slots_;
  std::vector<std::unique_ptr<Step>> steps_;
  std::map<std::string, int> input_slots_;
  std::vector<int> feed_slots_;  // input_slots_ in the graph's input order
  std::vector<int> input_views_;  // Alias slots of inputs: let go after a run, as the inputs are
  std::vector<int> output_slots_;
  std::vector<std::pair<int, int>> in_place_;  // (input slot, output slot): the output takes the fed tensor
  std::vector<std::pair<int, int>> copy_back_;  // (input slot, output slot): copied into the fed tensor after a run
  void plan_state_in_place(const PlanBuilder& b);
  // Per output slot, a second buffer: an output the caller still holds from the last run is
  // swapped with it when the caller has let it go (a loop feeding outputs back allocates nothing).
  std::map<int, RuntimeValue> spare_outputs_;
  // Per step, the Dynamic and Alias slots it is the last to use: their values (from
  // kReleaseAfterUseBytes up; smaller ones are kept for the next run's reuse) let go after it.
  std::vector<std::vector<int>> release_after_;
  StoragePool pool_;
  std::shared_ptr<Storage> arena_;
  size_t arena_bytes_ = 0;
  size_t packed_bytes_ = 0;
  int fallbacks_ = 0;
  interp::Interpreter interp_;
  ThreadGovernor governor_;  // all threads or one, run by run
};

// Used by the kernel factories while a plan is built.
class PlanBuilder {
 public:
  PlanBuilder(Plan& plan, const Graph& graph);
  const Graph& graph() const { return graph_; }
  const Model& model() const { return plan_.model_; }
  const PlanOptions& options() const { return plan_.options_; }
  dnnl::engine& engine() { return plan_.engine_; }
  // Threads of the node being planned (one for a small node: node_threads).
  int threads() const { return node_threads_; }
  uint64_t seed() const { return plan_.options_.seed; }
  bool blocked_layouts() const { return plan_.options_.blocked_layouts; }
  // has_channel_zero_pads's answer for this graph, once found (every conv asks).
  std::optional<bool> channel_zero_pads;
  // The convs winograd_within_memory_budget turned away (outputs' names), once found.
  std::optional<std::set<std::string>> winograd_over_budget;
  // hodu's AVX2 Winograd weights by weight value: built once, shared by the convs reading it.
  std::map<std::string, std::shared_ptr<const winograd::TransformedWeights>> winograd_weights;

  // The slot holding a value (as produced; maybe blocked).
  int slot(const std::string& value) const;
  bool has_slot(const std::string& value) const { return by_name_.count(value) > 0; }
  // A later node whose work the current node's step does (a fusion: it defines that node's
  // outputs itself); the plan gives it no step.
  void claim(const Node& later) { claimed_.insert(&later); }
  Slot& at(int s) { return plan_.slots_[s]; }
  // A slot with the value in plain row-major layout, adding a reorder when it is blocked.
  int plain(const std::string& value);
  // A slot with the value in layout `md`, adding a reorder when it differs.
  int as_layout(const std::string& value, const dnnl::memory::desc& md);
  // Defines the slot of a node output: plain, or blocked in layout `md` unless that is the plain one.
  int define(const std::string& value, DType dtype, std::vector<int64_t> shape,
             std::optional<dnnl::memory::desc> md = std::nullopt);
  int define_alias(const std::string& value, int of, std::vector<int64_t> shape);
  // Defines the slot of a value a step sets at run time (allocating it itself): dtype and shape
  // from the graph's type where it has one.
  int define_dynamic(const std::string& value);
  // Defines `value` as bytes inside slot `of` (an Arena or Part slot, or an Alias of one) at byte
  // `offset`, in layout `md` (plain when it is the plain layout of `shape`). The plan places `of`
  // to cover both.
  int define_part(const std::string& value, int of, std::vector<int64_t> shape, const dnnl::memory::desc& md,
                  size_t offset);
  // True when no node after the current one reads `value` (nor any subgraph), it is not a graph
  // output, and its slot lives in the arena: its bytes may be overwritten by the current node.
  bool dies_here(const std::string& value) const;
  // True when the bytes of `value`'s slot may become the current node's output: they live in
  // the arena, no value on them (`value`, a Reshape of it, what it views) is read after the
  // current node or is a graph output, none of `others` (the node's other inputs) reads them, and
  // the node's own outputs are not graph outputs.
  bool bytes_die_here(const std::string& value, const std::vector<int>& others) const;
  // The slot whose bytes `s` uses (itself, or the root of an Alias/Part chain).
  int root_of(int s) const;
  // Nodes reading `value` (indices into graph().nodes; subgraph reads count for their node).
  const std::vector<size_t>& readers(const std::string& value) const;
  // Static type of a value, when known.
  std::optional<std::pair<DType, std::vector<int64_t>>> static_type(const std::string& value) const;
  void add(std::unique_ptr<Step> step);
  // The plan's runs keep all their threads even on busy cores (ThreadGovernor::pin).
  void keep_all_threads() { plan_.governor_.pin(); }
  // Constant `t` reordered from layout `from` (its bytes as stored) into `to`. `value` names the
  // graph value `t` is, or is empty for a tensor derived from one (scaled, converted): only a
  // value's exact copy lets its original go (PlanOptions::release_weights).
  PackedConstant pack(const std::string& value, const Tensor& t, const dnnl::memory::desc& from,
                      const dnnl::memory::desc& to);
  // Whether constant `value` was packed by an earlier node, in forms of which none is `to` (a
  // detector's head shared by pyramid levels, whose Winograd weights oneDNN lays out per size).
  bool packed_only_otherwise(const std::string& value, const dnnl::memory::desc& to) const {
    auto it = pack_cache_.find(value);
    if (it == pack_cache_.end() || it->second.empty()) return false;
    for (const auto& f : it->second)
      if (f.to == to) return false;
    return true;
  }
  // The current node read constant `value` only at plan time, into a form of its own (int8
  // weights split or offset, derived tensors): with PlanOptions::single_plan its original may go
  // once every reader has done so; otherwise the original stays.
  void consumed_at_plan_time(const std::string& value);
  // A step holds `bytes` of constants in a form of its own (hodu's Winograd and tap conv
  // weights): counted in Plan::packed_bytes.
  void add_packed_bytes(size_t bytes) { plan_.packed_bytes_ += bytes; }

 private:
  friend class Plan;
  // After the current node: releases the original bytes of its constant inputs that every
  // reader has packed (the last reader was this node).
  void release_packed_inputs(const Node& n);
  static constexpr size_t kNotReversible = ~size_t{0};  // a packer whose layout has no way back
  static constexpr size_t kReleaseMinBytes = 64 << 10;  // smaller constants are not worth a rebuild path
  struct Packing {
    std::vector<size_t> packers;  // nodes that packed the value exactly (or kNotReversible)
    bool rebuildable = true;      // false: a packer's form has no way back (single_plan only)
    PackedConstant copy;
    dnnl::memory::desc from;
    Tensor original;
  };
  std::map<std::string, Packing> packed_;
  // Every packed form of a constant, by the view it was read as and the layout it went to:
  // nodes that read one weight the same way share one copy (a detector's head runs the same
  // convs on every pyramid level, and oneDNN's Winograd weights are 4x the original: RetinaNet
  // held 50 such copies).
  struct PackedForm {
    dnnl::memory::desc from, to;
    PackedConstant packed;
  };
  std::map<std::string, std::vector<PackedForm>> pack_cache_;
  std::map<const Storage*, int> storage_users_;  // initializers per storage (shared ones stay)
  const Node* current_ = nullptr;
  int node_threads_ = 1;
  Plan& plan_;
  const Graph& graph_;
  std::map<std::string, int> by_name_;
  std::set<const Node*> claimed_;
  std::map<std::pair<int, std::string>, int> reordered_;  // (slot, layout) → slot
  std::map<std::string, std::vector<size_t>> readers_;
};

// A node's work (multiply-adds of a product, 16 per element moved otherwise; -1 unknown) and the threads
// its steps run on: one below a few microseconds of work, else `threads` (node_threads.cc).
// HODU_CPU_SERIAL_WORK sets the bound.
int64_t node_work(const Graph& g, const Node& n);
int node_threads(const Graph& g, const Node& n, int threads);

// Plain (row-major) oneDNN descriptor for a tensor shape.
dnnl::memory::desc plain_md(const std::vector<int64_t>& shape, dnnl::memory::data_type dt = dnnl::memory::data_type::f32);
// oneDNN's data type for a dtype: u8, s8 and s32 as they are, f32 for everything else (the
// engine's oneDNN kernels only see f32 or, in dnnl_int8.cc, 8-bit and 32-bit integers).
dnnl::memory::data_type dnnl_dtype(DType t);
// The plain descriptor of a slot's shape in its dtype.
inline dnnl::memory::desc plain_md_of(const Slot& s) { return plain_md(s.shape, dnnl_dtype(s.dtype)); }
// The layout of a slot's data: its blocked descriptor, or the plain one.
inline dnnl::memory::desc layout_md(const Slot& s) { return s.blocked ? s.md : plain_md_of(s); }
// True when data in layout `md` has the same bytes as the plain layout of `shape` (a blocked
// layout over unit dims, e.g. nhwc of [1, C, 1, 1]); checked for small tensors only.
bool same_bytes_as_plain(const dnnl::memory::desc& md, const std::vector<int64_t>& shape, dnnl::engine& eng);
// A oneDNN memory over a slot's current data.
dnnl::memory memory_of(RunState& rs, int slot, const dnnl::memory::desc& md);

// Kernel factories: each returns nullptr when it does not handle the node
// (wrong dtype, unknown shape, unsupported attribute); the plan then uses
// the next, and finally the interpreter's kernel.
using KernelFactory = bool (*)(PlanBuilder& b, const Node& node);
bool make_conv(PlanBuilder& b, const Node& node);            // dnnl_conv.cc
bool make_matmul(PlanBuilder& b, const Node& node);          // dnnl_matmul.cc
bool make_pool(PlanBuilder& b, const Node& node);            // dnnl_pool.cc
bool make_elementwise(PlanBuilder& b, const Node& node);     // elementwise.cc
bool make_normalization(PlanBuilder& b, const Node& node);   // normalization.cc (Softmax, LayerNorm)
bool make_data_movement(PlanBuilder& b, const Node& node);   // data_movement.cc (Reshape, Transpose, Concat, Gather)
bool make_blocked_concat(PlanBuilder& b, const Node& node);  // dnnl_concat.cc (Concat of blocked tensors)
bool make_channel_zero_pad(PlanBuilder& b, const Node& node);  // channel_zero_pad.cc (Concat/Pad of zero channels: a view)
// Whether the graph appends zero channels somewhere as make_channel_zero_pad takes it.
bool has_channel_zero_pads(PlanBuilder& b);
bool make_channel_shuffle(PlanBuilder& b, const Node& node);  // channel_shuffle.cc (Concat/Reshape -> Transpose -> Reshape -> Slices)
bool make_attention(PlanBuilder& b, const Node& node);       // attention.cc
bool make_fused_elementwise(PlanBuilder& b, const Node& node);  // fused_elementwise.cc
bool make_int8_conv(PlanBuilder& b, const Node& node);       // dnnl_int8.cc (QLinearConv, ConvInteger)
bool make_int8_matmul(PlanBuilder& b, const Node& node);     // dnnl_int8.cc (QLinearMatMul, MatMulInteger)
bool make_quantize(PlanBuilder& b, const Node& node);        // quantize.cc (QuantizeLinear, DequantizeLinear)
bool make_dynamic_quantize(PlanBuilder& b, const Node& node);  // quantize.cc (DynamicQuantizeLinear)
bool make_lookup_table(PlanBuilder& b, const Node& node);    // quantize.cc (hodu LookupTable)
bool make_backward(PlanBuilder& b, const Node& node);        // dnnl_backward.cc (hodu's *Grad ops on oneDNN)
bool make_backward_rows(PlanBuilder& b, const Node& node);   // backward_rows.cc (SoftmaxGrad, LayerNormGrad, losses)
bool make_broadcast_ops(PlanBuilder& b, const Node& node);   // broadcast_ops.cc (binary ops of any dtype, Where, Expand, Clip)
bool make_unary_ops(PlanBuilder& b, const Node& node);       // unary_ops.cc (Cast, CastLike, unary math)
bool make_tensor_ops(PlanBuilder& b, const Node& node);      // tensor_ops.cc (Split, Pad, Tile, Range, NonZero, ...)
// tensor_ops.cc: a node with an empty tensor (which oneDNN's primitives cannot take) whose
// outputs are all empty, or a Concat/Shape/Size of empty parts
bool make_empty_tensor_ops(PlanBuilder& b, const Node& node);
bool make_resize(PlanBuilder& b, const Node& node);          // resize.cc (Resize, GridSample)
bool make_deconv(PlanBuilder& b, const Node& node);          // dnnl_deconv.cc (ConvTranspose)
bool make_reduce_ops(PlanBuilder& b, const Node& node);      // reduce_ops.cc (Reduce*, ArgMax/ArgMin, CumSum, TopK)
bool make_index_ops(PlanBuilder& b, const Node& node);       // index_ops.cc (Gather*, Scatter*)
bool make_norm_ops(PlanBuilder& b, const Node& node);        // norm_ops.cc (InstanceNorm, GroupNorm, LRN)
bool make_rotary(PlanBuilder& b, const Node& node);          // rotary.cc (RotaryEmbedding)
bool make_detect_ops(PlanBuilder& b, const Node& node);     // detect_ops.cc (NonMaxSuppression, RoiAlign)
bool make_axis_norm_ops(PlanBuilder& b, const Node& node);   // axis_norm_ops.cc (Softmax/LayerNorm: any axis, f64, Mean)
bool make_einsum(PlanBuilder& b, const Node& node);          // einsum.cc
bool make_sequence_ops(PlanBuilder& b, const Node& node);    // sequence_ops.cc (Sequence*, SplitToSequence, ...)
bool make_runtime_matmul(PlanBuilder& b, const Node& node);  // runtime_matmul.cc (MatMul/Gemm over run-time shapes)
bool make_control_flow(PlanBuilder& b, const Node& node);    // control_flow.cc (If, Loop, Scan)
bool make_rnn(PlanBuilder& b, const Node& node);             // rnn.cc, rnn_onednn.cc (LSTM, GRU, RNN)
// run_time_node.cc: a node of input shapes unknown at plan time planned when it runs, per shape
// (the last resort before the interpreter's kernel)
bool make_run_time_node(PlanBuilder& b, const Node& node);
void make_fallback(PlanBuilder& b, const Node& node);        // fallback.cc: the interpreter's kernel
// A value handed out of a step that may view the arena (a kernel returning its input) gets its
// own copy: later steps reuse the arena's bytes (fallback.cc).
void own_arena_tensors(RuntimeValue& v, const Storage* arena);

}  // namespace hodu::cpu
