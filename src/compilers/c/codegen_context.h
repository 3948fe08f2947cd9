// Internal state of the C code generator, shared by the op emitters
// (ops_elementwise.cc, ops_nn.cc, ops_tensor.cc). Values live in one of three
// places: a caller's input tensor, the weights blob, or an arena buffer whose
// offset is known only after planning (written "@id@" until then).
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "compilers/c/c_codegen.h"
#include "compilers/c/memory_plan.h"
#include "compilers/c/strided_views.h"
#include "compilers/c/sym_int.h"
#include "hodu/kernels.h"
#include "ir/graph.h"

namespace hodu::compilers::c {

struct ValueInfo {
  enum class Kind { Input, Weight, Arena, Late };
  Kind kind = Kind::Arena;
  int index = -1;  // input index, weight index, buffer id or late block (L[index])
  SymInt offset = 0;  // bytes into the arena buffer (a part of an in-place Concat)
  DType dtype = DType::Undefined;
  SymShape shape;
};

// Floats of packing scratch one hk_gemm call needs (HK_GEMM_PACK_FLOATS in the kernels).
inline constexpr int64_t kGemmPackBytes = (256 * 512 + 64 * 256) * 4;

const char* c_type(DType t);  // nullptr when compiled code does not support it
std::string c_string_literal(const std::string& s);
std::string c_float(double v);
// Bytes of `n` elements of a dtype compiled code supports.
SymInt storage_bytes(DType t, const SymInt& n);

struct Codegen {
  Codegen(const Graph& g, const CodegenOptions& o);

  const Graph& graph;
  const CodegenOptions& options;
  std::map<std::string, Tensor> constants;  // initializers + build-time folded values
  // Small int64 tensors computed from sizes (Shape → Gather → Concat glue): their elements.
  std::map<std::string, SymShape> sym_values;
  // Shapes of values that are not static (dims bound at run time), from graph_prep.
  std::map<std::string, SymShape> sym_shapes;
  // Data read as sizes: its elements as late dims (read_late), and those read so far.
  std::map<std::string, SymShape> late_values;
  std::set<std::string> late_read;
  std::map<std::string, ValueInfo> values;
  std::vector<std::string> input_names;
  const Model* model = nullptr;             // the model compiled (opsets, for bodies)
  // Control flow (control_flow.cc): bodies compiled as libraries of their own inside this
  // source, one instance each in the model's instance: fields, create and destroy text.
  int cf_count = 0;
  bool cf_helpers = false;
  std::string cf_fields, cf_create, cf_destroy;
  std::map<std::string, int> last_use;      // value (alias root) → last step reading it
  std::map<std::string, std::string> alias_root;
  std::vector<PlanBuffer> buffers;
  std::string weights;                      // the blob: 64-byte header (sealed at the end), then the data
  std::vector<int64_t> weight_offsets;      // per weight index, from the blob start
  std::map<int64_t, int64_t> weight_bytes;  // blob offset → bytes of the weight there
  std::string code;                         // body of the run function
  std::string tables;                       // file-scope constant tables
  std::string functions;                    // file-scope generated functions (fused loops)
  int table_count = 0;
  int late_values_count = 0;  // blocks allocated while running (sizes known only then): L[0..)
  // Optional sections of the kernel library the code uses (kernel_section_source).
  std::set<std::string> kernel_sections;
  int function_count = 0;
  int step = 0;
  int steps_emitted = 0;
  int fused_nodes = 0;
  // An activation the driver fused into the next Conv/Gemm: clamp to
  // [act_lo, act_hi] (act_kind HODU_ACTIVATION_CLIP; default mode also
  // SIGMOID and SILU after a Conv) and write `act_output` instead of the node's output.
  std::string act_output;
  int act_kind = 1;
  // Default mode: a Conv or MatMul whose Add with a same-shaped `residual` was fused
  // (the kernel's sum post-op; the activation, if any, comes after the sum).
  std::string residual;
  float act_lo = 0, act_hi = 0;
  // Default mode: a MatMul whose Add of a constant vector over N was fused (the
  // kernel's bias; the activation, if any, comes after it).
  std::string matmul_bias;
  // Default mode: outputs of Slice/Reshape/Transpose chains read only by library MatMuls
  // (attention's head split): views of their root read in place, no code.
  std::map<std::string, StridedView> strided_views;
  // Default mode: view-op outputs whose input is such a view, but whose readers need
  // row-major bytes: one strided copy from the root.
  std::map<std::string, StridedView> view_copies;
  // Transposes that move only size-1 dims (and prefix Slices): their input's bytes as they are.
  std::set<std::string> free_views;
  // Default mode: a MatMul whose A is Div/Mul(x, scalar c) reads x with alpha 1/c (or c).
  std::string matmul_a;
  float matmul_alpha = 1.f;
  // Default mode: a MatMul whose only reader is a Transpose (attention's head merge) writes
  // the Transpose's output `dst_transpose` directly, through strides (perm: the Transpose's).
  std::string dst_transpose;
  std::vector<int64_t> dst_transpose_perm;
  // Default mode: Softmax (last axis) inputs fused into hodu_softmax, keyed by
  // the Softmax's output: softmax(x * scale + mask[row % mask_rows]).
  struct SoftmaxInput {
    std::string x;
    float scale = 1.f;
    std::string mask;  // empty: none
    int64_t mask_rows = 1;
  };
  std::map<std::string, SoftmaxInput> softmax_inputs;
  // Default mode: ops prepared in libhodu_kernels at create time (`prepare`
  // fills m->ops[i]) and run by the body; a NULL op runs the portable code.
  bool kernel_library = false;
  std::string prepare;
  int library_ops = 0;
  // Conv outputs read only by library Convs (as src or fused residual): left in
  // oneDNN's layout (dst_native); native_op: the producing op of each, once emitted.
  // native_mode: the HODU_DST_* mode each native value's producer is prepared with.
  std::set<std::string> native_values;
  std::map<std::string, int> native_mode;
  std::map<std::string, std::string> native_op;
  // Default mode: Concats on channels whose parts (conv outputs) are written in
  // place into the concat's buffer: part → (concat output, byte offset, the
  // first part the generator emits, whose layout the others follow).
  struct ConcatPart {
    std::string concat;
    SymInt offset = 0;
    std::string first;
  };
  std::map<std::string, ConcatPart> concat_parts;
  std::set<std::string> inplace_concats;
  // Default mode: Mul(x [N,C,H,W], s [.,C,1,1]) outputs computed on x's layout.
  std::set<std::string> channel_scales;

  const ValueInfo& info(const std::string& name);
  // A size value (sym_values) read as a tensor: written into an arena buffer here, once.
  void materialize(const std::string& name);
  // Data read as sizes (late_values): its elements read into their late dims here, once.
  void read_late(const std::string& name);
  // Memory for `bytes` known only while running (hm_late): a pointer expression of type T*.
  std::string late_alloc(const SymInt& bytes, const char* type);
  DType dtype_of(const std::string& name) const;
  SymShape shape_of(const std::string& name) const;
  bool is_constant(const std::string& name) const { return constants.count(name) > 0; }
  const Tensor& constant(const std::string& name) const { return constants.at(name); }

  int add_weight(const Tensor& t);
  int new_buffer(const SymInt& bytes, int first_step);
  // A new arena value written at this step; reuse_buffer ≥ 0 shares that buffer in place.
  void define(const std::string& name, DType dt, const SymShape& shape, int reuse_buffer = -1);
  // `name` is a view of `of` with another shape (Reshape and friends: no copy).
  void define_alias(const std::string& name, const std::string& of, const SymShape& shape);
  // Typed C pointer expression to a value (marks it read at this step).
  std::string ptr(const std::string& name);
  void touch(const std::string& name);
  // A scratch buffer live during this step only (float*).
  std::string scratch(const SymInt& bytes);
  // A file-scope int64/float table; returns its name. Sizes known only at run time: a
  // local array of the run body, declared here.
  std::string table(const std::vector<int64_t>& v);
  std::string table(const SymShape& v);
  std::string float_table(const std::vector<float>& v);
  void emit(const std::string& line);
  // A kernel call returning non-zero on bad data → run() fails with a message naming the node.
  void emit_checked(const std::string& call, const Node& n, const std::string& what);
  // True when the value dies at this step and its buffer can be written in place.
  bool reusable(const std::string& name, const SymInt& bytes) const;
  int buffer_of(const std::string& name) const;
  // A library op: `prepare_call` (a hodu_*_prepare call whose last argument is
  // written "&OP") runs at create time; returns the op's C expression (m->ops[i]).
  // A dim of n's inputs or outputs is read from the model's data while running (a Range
  // over a size tensor): the kernel library prepares its ops per input shape, before that.
  bool sizes_read_while_running(const Node& n) const;
  std::string library_op(const Node& n, const std::string& desc_type, const std::string& desc,
                         const std::string& prepare_call);
  // The run-time statement: `library_call` when the op was prepared, else `portable`.
  void emit_library_call(const Node& n, const std::string& op, const std::string& library_call,
                         const std::string& portable);
};

// The int64 elements of input i of n: a constant, a value computed from shapes (Shape →
// Gather → Concat) whose elements are sizes, or (a small int tensor computed from data)
// late dims read from it here; Unsupported otherwise.
SymShape sym_ints(Codegen& cg, const Node& n, size_t i);
// A Slice's first index on a dim of `dim` elements (negative starts count from the end, clamped).
SymInt slice_start(const SymInt& start, const SymInt& dim, int64_t step);

// `if (!(cond)) return hm_fail(m, status, message, args...);` for a run-time check on sizes.
std::string runtime_check(const SymTable::Statement& check, int status);

// A Conv that the default mode runs as a vector product (1x1 kernel over 1x1
// pixels, one group: squeeze-excite's fully connected layers), not through oneDNN.
bool conv_as_fc(const Codegen& cg, const Node& n);

// Op emitters. Each returns false when it does not handle the op.
bool emit_nn_op(Codegen& cg, const Node& n);
bool emit_tensor_op(Codegen& cg, const Node& n);
// If, Loop and Scan (control_flow.cc).
bool emit_control_flow_op(Codegen& cg, const Node& n);
std::vector<std::string> control_flow_op_names();
// Elementwise ops: whether a node can join a fused loop, and emitting a group.
bool is_elementwise(const Codegen& cg, const Node& n);
void emit_elementwise_group(Codegen& cg, const std::vector<const Node*>& group);
// Ops that are views of their input (no code): Reshape, Flatten, Squeeze, ...
bool is_view_op(const Node& n);
// `out` (a new arena value) = the elements of view `v` in row-major order.
void emit_view_copy(Codegen& cg, const std::string& out, const StridedView& v);
std::vector<std::string> nn_op_names();
std::vector<std::string> tensor_op_names();
std::vector<std::string> elementwise_op_names();

}  // namespace hodu::compilers::c
