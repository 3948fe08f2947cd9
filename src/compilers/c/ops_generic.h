// Helpers of the emitters for the ops outside the hot path (ops_generic.cc, ops_index.cc,
// ...): they call the kernel library's generic section (kernels/hk_ops.c), which computes
// floats in double and integers in int64, with sizes given at run time.
#pragma once
#include <functional>
#include <string>

#include "compilers/c/codegen_context.h"

namespace hodu::compilers::c {

// The generic section (and the dtype section it needs) in the artifact.
void need_generic_kernels(Codegen& cg);
// A float value as `const double*`: itself (f64) or a converted copy in scratch.
std::string f64_in(Codegen& cg, const std::string& v);
// An integer or bool value as `const int64_t*`: itself (i64) or a converted copy.
std::string i64_in(Codegen& cg, const std::string& v);
// Any number value as `const double*` (integers converted, exact below 2^53).
std::string doubles_in(Codegen& cg, const std::string& v);
// A result the kernel writes as doubles (or int64s: integer) into `buffer`; finish() converts
// it into the value `name` (defined by f64_out, of its graph dtype and `shape`).
struct WideOut {
  std::string name, buffer;
  DType dtype = DType::F64;
  SymInt count;
  bool converted = false;
  bool integer = false;
  void finish(Codegen& cg) const;
};
WideOut wide_out(Codegen& cg, const std::string& name, const SymShape& shape, bool integer = false);
// `v` broadcast to `shape` (numpy, unidirectional): its pointer, or a copy expanded in scratch.
std::string expanded(Codegen& cg, const std::string& v, const SymShape& shape);
// Element size in bytes of a dtype compiled code moves (Unsupported for 4- and 2-bit ones).
int64_t element_bytes(Codegen& cg, const std::string& v);
// The late dim `d` (a single run-time dim made by shape inference) set to `expr` here; a
// dim known otherwise is checked against it (ops_index.cc).
void assign_late(Codegen& cg, const Node& n, const SymInt& d, const std::string& expr);
// Axis normalized to [0, rank).
int64_t normalized_axis(const Node& n, int64_t axis, int64_t rank);

// Op emitters of these families; false when the op is not one of theirs.
bool emit_generic_op(Codegen& cg, const Node& n);
std::vector<std::string> generic_op_names();
bool emit_index_op(Codegen& cg, const Node& n);  // ops_index.cc
std::vector<std::string> index_op_names();
bool emit_attention_op(Codegen& cg, const Node& n);  // ops_attention.cc
std::vector<std::string> attention_op_names();
bool emit_rnn_op(Codegen& cg, const Node& n);  // ops_rnn.cc
std::vector<std::string> rnn_op_names();
bool emit_resample_op(Codegen& cg, const Node& n);  // ops_resample.cc
std::vector<std::string> resample_op_names();
// Resize in the modes the table-driven kernels of ops_tensor.cc do not take (ops_resample.cc).
bool resize_needs_general(Codegen& cg, const Node& n);
void emit_resize_general(Codegen& cg, const Node& n);
void emit_einsum(Codegen& cg, const Node& n);  // ops_einsum.cc
bool emit_window_op(Codegen& cg, const Node& n);  // ops_window.cc
// Random ops and Dropout with a training_mode input (ops_random.cc).
bool emit_random_op(Codegen& cg, const Node& n);
std::vector<std::string> random_op_names();
bool is_training_dropout(const Node& n);
// The ai.onnx.preview.training optimizers Adagrad, Adam, Momentum (ops_training.cc): their
// outputs' shapes are those of the tensors they update.
bool emit_training_op(Codegen& cg, const Node& n);
bool is_compiled_training_op(const Node& n);
std::vector<SymShape> training_op_shapes(const Node& n, const std::function<SymShape(const std::string&)>& shape);
// The ai.onnx.ml ops compiled code runs (ops_ml.cc; other domains are refused).
bool emit_ml_op(Codegen& cg, const Node& n);
bool is_compiled_ml_op(const Node& n);
std::vector<std::string> ml_op_names();
std::vector<std::string> window_op_names();
// Pooling the float32 1-D/2-D kernels of ops_nn.cc do not take (ops_window.cc).
bool pool_needs_general(Codegen& cg, const Node& n);
void emit_pool_general(Codegen& cg, const Node& n);

}  // namespace hodu::compilers::c
