// generate_c: prepares the graph, applies build-time rewrites (BatchNorm folded
// into Conv, activations fused into Conv/Gemm/MatMul, elementwise chains
// grouped), emits the steps, plans the arena and assembles the C text.
#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <set>
#include <tuple>

#include "compilers/c/api_emitter.h"
#include "compilers/c/c_codegen.h"
#include "compilers/c/codegen_context.h"
#include "compilers/c/graph_prep.h"
#include "compilers/c/sequence_lowering.h"
#include "compilers/c/ops_generic.h"
#include "compilers/c/strided_views.h"
#include "compilers/c/weight_store.h"
#include "core/error.h"
#include "ir/model_check.h"
#include "ir/schema.h"
#include "passes/graph_utils.h"
#include "passes/passes.h"

namespace hodu::compilers::c {
namespace {

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  return s;
}

bool is_identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

// Conv(x, W, B) → BatchNormalization with constant parameters becomes one
// Conv with scaled weights and a shifted bias.
void fold_batchnorm_into_conv(Graph& g, Codegen& cg) {
  auto uses = passes::use_counts(g);
  std::set<size_t> removed;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& conv = g.nodes[i];
    if (conv.op_type != "Conv" || !conv.domain.empty() || !cg.is_constant(conv.inputs[1]) ||
        (conv.has_input(2) && !cg.is_constant(conv.inputs[2])) || uses[conv.outputs[0]] != 1 ||
        cg.dtype_of(conv.inputs[1]) != DType::F32)
      continue;
    for (size_t j = i + 1; j < g.nodes.size(); ++j) {
      const Node& bn = g.nodes[j];
      if (bn.inputs.empty() || bn.inputs[0] != conv.outputs[0]) continue;
      if (bn.op_type != "BatchNormalization" || !bn.domain.empty() || bn.get_int("training_mode", 0) != 0 ||
          bn.outputs.size() > 1 || bn.inputs.size() < 5)
        break;
      bool consts = true;
      for (size_t k = 1; k < 5; ++k) consts = consts && cg.is_constant(bn.inputs[k]);
      if (!consts) break;
      auto gamma = cg.constant(bn.inputs[1]).to_doubles(), beta = cg.constant(bn.inputs[2]).to_doubles(),
           mean = cg.constant(bn.inputs[3]).to_doubles(), var = cg.constant(bn.inputs[4]).to_doubles();
      double eps = bn.get_float("epsilon", 1e-5f);
      Tensor w = cg.constant(conv.inputs[1]).clone();
      int64_t M = w.dim(0), per = w.numel() / M;
      if (static_cast<int64_t>(gamma.size()) != M) break;
      std::vector<float> bias(M, 0.f);
      if (conv.has_input(2)) {
        auto b = cg.constant(conv.inputs[2]).to_doubles();
        for (int64_t m = 0; m < M; ++m) bias[m] = static_cast<float>(b[m]);
      }
      float* wd = w.data<float>();
      for (int64_t m = 0; m < M; ++m) {
        double s = gamma[m] / std::sqrt(var[m] + eps);
        for (int64_t k = 0; k < per; ++k) wd[m * per + k] = static_cast<float>(wd[m * per + k] * s);
        bias[m] = static_cast<float>((bias[m] - mean[m]) * s + beta[m]);
      }
      std::string wname = conv.inputs[1] + "\x01bnfold" + std::to_string(i), bname = wname + "b";
      cg.constants[wname] = w;
      cg.constants[bname] = Tensor::from_vector(DType::F32, {M}, bias);
      conv.inputs.resize(3);
      conv.inputs[1] = wname;
      conv.inputs[2] = bname;
      conv.outputs[0] = bn.outputs[0];
      removed.insert(j);
      break;
    }
  }
  passes::erase_nodes(g, removed);
}

// Clamp bounds of an activation that can run in a Conv/Gemm epilogue.
std::optional<std::pair<float, float>> clamp_of(const Codegen& cg, const Node& n) {
  if (!n.domain.empty()) return std::nullopt;
  if (n.op_type == "Relu") return std::make_pair(0.f, INFINITY);
  if (n.op_type == "Clip") {
    float lo = -INFINITY, hi = INFINITY;
    if (n.has_input(1)) {
      if (!cg.is_constant(n.inputs[1])) return std::nullopt;
      lo = static_cast<float>(cg.constant(n.inputs[1]).get_double(0));
    }
    if (n.has_input(2)) {
      if (!cg.is_constant(n.inputs[2])) return std::nullopt;
      hi = static_cast<float>(cg.constant(n.inputs[2]).get_double(0));
    }
    return std::make_pair(lo, hi);
  }
  return std::nullopt;
}

// Why an op the interpreter runs stays with it (appended to the refusal), or "".
std::string refusal_reason(const Node& n) {
  static const std::map<std::pair<std::string, std::string>, const char*> reasons = {
      {{"", "ImageDecoder"},
       ": it decodes JPEG/PNG/BMP/TIFF/WebP bytes with the interpreter's codecs, and its output's size is known only "
       "once decoded; compiled code has no image codecs (decode before calling the library, or run the model with "
       "hodu run --engine cpu)"},
      {{"", "SequenceMap"}, ": it runs its body once per sequence element; compiled code has no sequences"},
      {{"ai.onnx.preview", "FlexAttention"},
       ": its score_mod/mask_mod/prob_mod graphs are run per score by the interpreter and not compiled (the "
       "function's expanded form compiles)"},
      {{"ai.onnx.preview.training", "Gradient"},
       ": it differentiates its graph while running with the interpreter's autodiff"},
  };
  if (auto it = reasons.find({n.domain, n.op_type}); it != reasons.end()) return it->second;
  if (n.domain == "hodu")
    return ": hodu's own fused and gradient ops are made by its passes for its engines; compile the ONNX model "
           "they came from";
  return "";
}

}  // namespace

std::vector<std::string> supported_ops() {
  std::set<std::string> all;
  for (const auto& v : {nn_op_names(), tensor_op_names(), elementwise_op_names(), generic_op_names(), index_op_names(),
                        attention_op_names(), rnn_op_names(), control_flow_op_names(), resample_op_names(),
                        window_op_names(), random_op_names()})
    all.insert(v.begin(), v.end());
  all.insert({"Constant", "Shape", "Size"});
  all.insert("TfIdfVectorizer");  // ops_ml.cc  // folded at build time (or sizes known at run time)
  return {all.begin(), all.end()};
}

GeneratedModel generate_c(const Model& model, const CodegenOptions& options) {
  HODU_CHECK(is_identifier(options.name), ErrorCode::InvalidArgument,
             "--name '{}': the API prefix must be a C identifier ([A-Za-z_][A-Za-z0-9_]*)", options.name);
  HODU_CHECK(options.opt_level >= 0 && options.opt_level <= 3, ErrorCode::InvalidArgument,
             "optimization level {} (expected 0 to 3)", options.opt_level);
  HODU_CHECK(!options.weight_store || !options.embed_weights, ErrorCode::Internal,
             "a shared weights blob is read at create time: embed_weights must be off");
  // Sizes bound at run time (free input dims, data-dependent counts): SymInts over this table.
  SymTable sym_table;
  SymScope sym_scope(sym_table);
  PreparedGraph prep = prepare_graph(model, options.input_shapes, options.dims);
  Graph& g = prep.graph;
  // Default mode: the erf-form GELU chain (Div, Erf, Add, Mul, Mul) becomes one
  // ONNX Gelu, which a MatMul runs as its epilogue (oneDNN's gelu_erf post-op)
  // and a fused loop computes otherwise.
  if (options.opt_level >= 2 && options.kernel_library && !options.standalone) {
    if (passes::fuse_gelu(g))
      for (auto& n : g.nodes)
        if (n.op_type == "Gelu" && n.domain == "hodu") {
          n.domain.clear();
          n.attributes.clear();
        }
  }
  // Default mode: a Concat that only feeds a conv (or a pool, then a conv) becomes per-part
  // convs summed (as the cpu engine does), so the convs keep oneDNN's nhwc brgemm kernels
  // instead of writing 16-channel blocks into an in-place concat. Before the Codegen: the
  // split weights are new initializers.
  if (options.opt_level >= 2 && options.kernel_library && !options.standalone && passes::split_concat_convs(g, /*pool_only_into_one_conv=*/true))
    infer_types(g);
  if (!prep.free_inputs.empty()) refresh_sym_shapes(g, prep.free_inputs, prep.sym);
  Codegen cg(g, options);
  cg.model = &model;
  cg.kernel_library = options.kernel_library && !options.standalone;
  cg.sym_shapes = prep.sym.shapes;
  cg.sym_values = prep.sym.values;
  cg.late_values = prep.sym.late_values;
  for (const auto& [name, shape] : prep.free_inputs) cg.values.at(name).shape = shape;
  // Checks on sizes known only while running (a NonZero's count) go where they are made.
  sym_table.on_late_check = [&](const SymTable::Statement& st) { cg.emit(runtime_check(st, 4)); };

  // Every op must be supported: one error listing what is not, and what is.
  {
    auto names = supported_ops();
    std::set<std::string> ok(names.begin(), names.end());
    for (const auto& n : g.nodes) {
      // Strings: the C API (DLPack) carries none, so compiled code has none.
      for (const auto& v : n.inputs)
        HODU_CHECK(v.empty() || !g.type_of(v) || g.type_of(v)->dtype != DType::String, ErrorCode::Unsupported,
                   "{}: input '{}' is a string tensor, not supported by compiled code: it has no strings (the C API carries numbers and "
                   "bools only)", n.describe(), v);
      for (const auto& v : n.outputs)
        HODU_CHECK(v.empty() || !g.type_of(v) || g.type_of(v)->dtype != DType::String, ErrorCode::Unsupported,
                   "{}: output '{}' is a string tensor, not supported by compiled code: it has no strings (the C API carries numbers "
                   "and bools only)", n.describe(), v);
    }
    for (const auto& n : g.nodes)
      if (n.domain.empty() ? !ok.count(n.op_type) : !is_compiled_ml_op(n) && !is_compiled_training_op(n)) {
        if (is_sequence_op(n)) refuse_sequence_op(n);
        std::string list;
        for (const auto& s : names) list += (list.empty() ? "" : ", ") + s;
        list += "; in domain 'ai.onnx.ml': ";
        for (const auto& s : ml_op_names()) list += s + (s == ml_op_names().back() ? "" : ", ");
        list += "; in domain 'ai.onnx.preview.training': Adagrad, Adam, Momentum";
        fail(ErrorCode::Unsupported, "{}{}: op not supported by the C compiler (hodu build){}; supported ops: {}",
             n.describe(), n.domain.empty() ? "" : " in domain '" + n.domain + "'", refusal_reason(n), list);
      }
    // Every op is supported; a model that still cannot run (an Add of f32 and i64, Where on a
    // float condition) is refused as hodu run and ONNX Runtime refuse it: compiled code checks
    // no dtypes and would run it anyway.
    if (auto problems = find_model_problems(model); !problems.empty())
      fail(ErrorCode::InvalidModel, "the model cannot run as it is: {}{}", problems[0].message,
           problems.size() == 1 ? std::string()
                                : fmt::format(" (and {} more problems: hodu info --check lists them)", problems.size() - 1));
    for (const auto& o : g.outputs) {
      auto t = g.type_of(o.name);
      HODU_CHECK(t && t->is_tensor() && c_type(t->dtype), ErrorCode::Unsupported,
                 "output '{}' has type {}: compiled code supports tensors of numbers and bools (no strings, "
                 "complex numbers, sequences or optionals)", o.name, t ? t->to_string() : "unknown");
    }
  }
  if (options.opt_level >= 2) fold_batchnorm_into_conv(g, cg);

  const size_t count = g.nodes.size();
  auto uses = passes::use_counts(g);
  std::set<std::string> graph_outputs;
  for (const auto& o : g.outputs) graph_outputs.insert(o.name);
  std::map<std::string, int> producer;
  for (size_t i = 0; i < count; ++i)
    for (const auto& o : g.nodes[i].outputs)
      if (!o.empty()) producer[o] = static_cast<int>(i);

  // Activations fused into the producing Conv/Gemm/MatMul (O2+).
  std::vector<int> act_of(count, -1);         // producer → activation node
  std::vector<int> act_kind(count, HODU_ACTIVATION_CLIP);
  std::vector<int> emitted_at(count, -1);     // node → the step that computes it
  for (size_t i = 0; i < count; ++i) emitted_at[i] = static_cast<int>(i);
  auto readers = passes::consumers(g);
  // The one node reading `v` (read once, not a graph output), or -1.
  auto sole_reader = [&](const std::string& v) -> int {
    auto r = readers.find(v);
    if (uses[v] != 1 || graph_outputs.count(v) || r == readers.end() || r->second.size() != 1) return -1;
    return static_cast<int>(r->second[0]);
  };
  // Default mode: MatMul [+ Add of a constant vector over N] [+ Gelu / Relu / Clip]
  // runs as one oneDNN matmul with the bias and the activation inside (transformers'
  // projections and feed-forward layers).
  std::vector<int> bias_add_of(count, -1);  // matmul → fused bias Add
  std::map<int, std::string> bias_value;    // matmul → the constant bias
  std::vector<int> matmul_residual_add(count, -1);  // matmul → fused residual Add
  std::map<int, std::string> matmul_residual;       // matmul → the residual value
  if (options.opt_level >= 2 && cg.kernel_library) {
    for (size_t i = 0; i < count; ++i) {
      const Node& n = g.nodes[i];
      if (n.op_type != "MatMul" || !n.domain.empty() || n.inputs.size() != 2 ||
          cg.dtype_of(n.outputs[0]) != DType::F32 || cg.shape_of(n.inputs[0]).size() < 2 ||
          cg.shape_of(n.inputs[1]).size() < 2)
        continue;
      const auto ys = cg.shape_of(n.outputs[0]);
      std::string y = n.outputs[0];
      int j = sole_reader(y);
      // The other operand of an Add that is y's only reader, or nullptr.
      auto add_operand = [&]() -> const std::string* {
        if (j < 0 || g.nodes[j].op_type != "Add" || !g.nodes[j].domain.empty() || g.nodes[j].inputs.size() != 2 ||
            g.nodes[j].inputs[0] == g.nodes[j].inputs[1])
          return nullptr;
        const Node& add = g.nodes[j];
        return add.inputs[0] == y ? &add.inputs[1] : &add.inputs[0];
      };
      if (const std::string* c = add_operand()) {
        const Node& add = g.nodes[j];
        auto cs = cg.shape_of(*c);
        if (cg.is_constant(*c) && cg.dtype_of(*c) == DType::F32 && !cs.empty() && cs.back() == ys.back() &&
            numel(cs) == ys.back() && cs.size() <= ys.size() && cg.shape_of(add.outputs[0]) == ys) {
          bias_add_of[i] = j;
          bias_value[static_cast<int>(i)] = *c;
          emitted_at[j] = static_cast<int>(i);
          y = add.outputs[0];
          j = sole_reader(y);
        }
      }
      // A residual Add (transformers' skip connections): the other input same-shaped and
      // computed before this product, added by the matmul's sum post-op after the bias.
      if (const std::string* zv = add_operand()) {
        const Node& add = g.nodes[j];
        const std::string z = *zv;
        auto zp = producer.find(z);
        if (!z.empty() && !cg.is_constant(z) && cg.dtype_of(z) == DType::F32 && cg.shape_of(z) == ys &&
            cg.shape_of(add.outputs[0]) == ys && (zp == producer.end() || emitted_at[zp->second] < static_cast<int>(i))) {
          matmul_residual_add[i] = j;
          matmul_residual[static_cast<int>(i)] = z;
          emitted_at[j] = static_cast<int>(i);
          y = add.outputs[0];
          j = sole_reader(y);
        }
      }
      if (j < 0 || g.nodes[j].inputs.empty() || g.nodes[j].inputs[0] != y || cg.shape_of(g.nodes[j].outputs[0]) != ys)
        continue;
      const Node& a = g.nodes[j];
      if (a.op_type == "Gelu" && a.domain.empty() && a.get_string("approximate", "none") == "none") {
        act_of[i] = j;
        act_kind[i] = HODU_ACTIVATION_GELU;
        emitted_at[j] = static_cast<int>(i);
      } else if (clamp_of(cg, a)) {
        act_of[i] = j;
        emitted_at[j] = static_cast<int>(i);
      }
    }
  }
  if (options.opt_level >= 2) {
    for (size_t i = 0; i < count; ++i) {
      const Node& n = g.nodes[i];
      if (!(n.op_type == "Conv" || n.op_type == "Gemm" || n.op_type == "MatMul") || !n.domain.empty()) continue;
      if (act_of[i] >= 0 || bias_add_of[i] >= 0) continue;
      const std::string& y = n.outputs[0];
      if (uses[y] != 1 || graph_outputs.count(y) || cg.dtype_of(y) != DType::F32) continue;
      for (size_t j = i + 1; j < count; ++j) {
        const Node& a = g.nodes[j];
        if (a.inputs.empty() || a.inputs[0] != y) continue;
        if (clamp_of(cg, a) && cg.shape_of(a.outputs[0]) == cg.shape_of(y)) {
          act_of[i] = static_cast<int>(j);
          emitted_at[j] = static_cast<int>(i);
        }
        break;
      }
    }
  }
  // Default mode: Sigmoid, SiLU (x * Sigmoid(x)) and HardSwish after a Conv with constant
  // weights run as oneDNN post-ops instead of loops after the conv (EfficientNet,
  // MobileNetV3: the conv's result then keeps oneDNN's layout for the next conv).
  if (options.opt_level >= 2 && cg.kernel_library) {
    for (size_t i = 0; i < count; ++i) {
      const Node& n = g.nodes[i];
      if (act_of[i] >= 0 || n.op_type != "Conv" || !n.domain.empty() || !cg.is_constant(n.inputs[1]) ||
          (n.has_input(2) && !cg.is_constant(n.inputs[2])))
        continue;
      const std::string& y = n.outputs[0];
      if (graph_outputs.count(y) || cg.dtype_of(y) != DType::F32 || (uses[y] != 1 && uses[y] != 2)) continue;
      const auto& r = readers[y];
      auto is = [&](size_t j, const char* op) { return g.nodes[j].op_type == op && g.nodes[j].domain.empty(); };
      if (uses[y] == 1 && r.size() == 1 && (is(r[0], "Sigmoid") || is(r[0], "HardSwish")) &&
          cg.shape_of(g.nodes[r[0]].outputs[0]) == cg.shape_of(y)) {
        act_of[i] = static_cast<int>(r[0]);
        act_kind[i] = is(r[0], "Sigmoid") ? HODU_ACTIVATION_SIGMOID : HODU_ACTIVATION_HARDSWISH;
        emitted_at[r[0]] = static_cast<int>(i);
      } else if (uses[y] == 2 && r.size() == 2 && is(r[0], "Sigmoid") && is(r[1], "Mul")) {
        const std::string& s = g.nodes[r[0]].outputs[0];
        const Node& mul = g.nodes[r[1]];
        bool silu = uses[s] == 1 && !graph_outputs.count(s) && mul.inputs.size() == 2 &&
                    ((mul.inputs[0] == y && mul.inputs[1] == s) || (mul.inputs[0] == s && mul.inputs[1] == y));
        if (!silu) continue;
        act_of[i] = static_cast<int>(r[1]);
        act_kind[i] = HODU_ACTIVATION_SILU;
        emitted_at[r[0]] = emitted_at[r[1]] = static_cast<int>(i);
      }
    }
  }
  auto library_conv = [&](const Node& n) {
    return n.op_type == "Conv" && n.domain.empty() && cg.is_constant(n.inputs[1]) &&
           (!n.has_input(2) || cg.is_constant(n.inputs[2])) && cg.dtype_of(n.inputs[0]) == DType::F32 &&
           cg.shape_of(n.inputs[0]).size() == 4 && !conv_as_fc(cg, n);
  };
  // Default mode: Add(Conv(...), Z) [+ Relu/Clip] with Z of the same shape, already
  // computed when the Conv runs, becomes the Conv's sum post-op (ResNet's residual
  // Adds: Z is the block input or the downsample conv, whichever runs first).
  std::vector<int> add_of(count, -1);          // conv → fused Add
  std::map<int, std::string> residual_of_add;  // fused Add → Z
  if (options.opt_level >= 2 && cg.kernel_library) {
    for (size_t i = 0; i < count; ++i) {
      const Node& n = g.nodes[i];
      if (act_of[i] >= 0 || !library_conv(n)) continue;
      const std::string& y = n.outputs[0];
      if (uses[y] != 1 || graph_outputs.count(y) || cg.dtype_of(y) != DType::F32) continue;
      size_t j = i + 1;
      while (j < count && std::find(g.nodes[j].inputs.begin(), g.nodes[j].inputs.end(), y) == g.nodes[j].inputs.end())
        ++j;
      if (j == count) continue;
      const Node& a = g.nodes[j];
      if (a.op_type != "Add" || !a.domain.empty() || a.inputs.size() != 2 || a.inputs[0] == a.inputs[1]) continue;
      const std::string& z = a.inputs[0] == y ? a.inputs[1] : a.inputs[0];
      const std::string& sum = a.outputs[0];
      auto zp = producer.find(z);
      if (z.empty() || cg.dtype_of(z) != DType::F32 || cg.shape_of(z) != cg.shape_of(y) ||
          cg.shape_of(sum) != cg.shape_of(y) || (zp != producer.end() && emitted_at[zp->second] >= static_cast<int>(i)))
        continue;
      add_of[i] = static_cast<int>(j);
      residual_of_add[static_cast<int>(j)] = z;
      emitted_at[j] = static_cast<int>(i);
      if (uses[sum] != 1 || graph_outputs.count(sum)) continue;
      for (size_t r = j + 1; r < count; ++r) {
        const Node& act = g.nodes[r];
        if (std::find(act.inputs.begin(), act.inputs.end(), sum) == act.inputs.end()) continue;
        if (act.inputs[0] == sum && clamp_of(cg, act) && cg.shape_of(act.outputs[0]) == cg.shape_of(sum)) {
          act_of[i] = static_cast<int>(r);
          emitted_at[r] = static_cast<int>(i);
        }
        break;
      }
    }
  }
  // Default mode: values that stay in the layout oneDNN picked (no reorder to
  // NCHW and back): results of library Convs (after their fused Add and
  // activation) and pools, in-place Concats and per-channel Muls, when every
  // reader can take that layout: a library Conv (as src or fused residual), a
  // library pool, a per-channel Mul (SIMPLE layouts), an in-place Concat (CONCAT).
  if (options.opt_level >= 2 && cg.kernel_library) {
    auto result_of = [&](size_t i) -> const std::string& {
      return act_of[i] >= 0 ? g.nodes[act_of[i]].outputs[0] : add_of[i] >= 0 ? g.nodes[add_of[i]].outputs[0]
                                                                                : g.nodes[i].outputs[0];
    };
    auto is_op = [&](const Node& n, const char* op) { return n.op_type == op && n.domain.empty(); };
    auto f32_4d = [&](const std::string& v) { return cg.dtype_of(v) == DType::F32 && cg.shape_of(v).size() == 4; };
    auto library_pool = [&](const Node& n) {
      return (is_op(n, "MaxPool") || is_op(n, "AveragePool") || is_op(n, "GlobalAveragePool") ||
              is_op(n, "GlobalMaxPool")) &&
             f32_4d(n.inputs[0]) && (n.outputs.size() == 1 || !n.has_output(1)) &&
             n.get_int("storage_order", 0) == 0;
    };
    std::map<std::string, int> made_by;  // a value a library op (conv, pool) writes → its step
    for (size_t i = 0; i < count; ++i) {
      if (emitted_at[i] != static_cast<int>(i)) continue;
      const Node& n = g.nodes[i];
      if (library_conv(n) || (library_pool(n) && !is_op(n, "GlobalAveragePool") &&
                                                      !is_op(n, "GlobalMaxPool")))
        made_by[result_of(i)] = static_cast<int>(i);
    }
    // In-place Concats: batch 1, on channels, every part a library conv's result
    // read only here, channels whole 16-blocks.
    std::map<std::string, int> concat_step;
    for (size_t j = 0; j < count; ++j) {
      const Node& c = g.nodes[j];
      if (!is_op(c, "Concat") || c.inputs.size() < 2 || graph_outputs.count(c.outputs[0]) || !f32_4d(c.outputs[0]))
        continue;
      auto ys = cg.shape_of(c.outputs[0]);
      int64_t axis = c.get_int("axis", 0);
      if (!ys[0].is(1) || (axis != 1 && axis != -3)) continue;
      std::set<std::string> seen;
      bool ok = true;
      for (const auto& in : c.inputs) {
        auto p = made_by.find(in);
        ok = ok && !in.empty() && seen.insert(in).second && p != made_by.end() && library_conv(g.nodes[p->second]) &&
             uses[in] == 1 && !graph_outputs.count(in) && cg.shape_of(in)[1].known() &&
             cg.shape_of(in)[1].value() % 16 == 0;
      }
      if (!ok) continue;
      cg.inplace_concats.insert(c.outputs[0]);
      concat_step[c.outputs[0]] = static_cast<int>(j);
      SymInt at = 0;
      std::string first;
      int first_step = INT_MAX;
      for (const auto& in : c.inputs)
        if (made_by[in] < first_step) first_step = made_by[in], first = in;
      for (const auto& in : c.inputs) {
        auto s = cg.shape_of(in);
        cg.concat_parts[in] = {c.outputs[0], at * s[2] * s[3] * 4, first};
        at += s[1];
      }
      made_by[c.outputs[0]] = static_cast<int>(j);
    }
    // Per-channel Muls (squeeze-excite): Mul(x, s) with x a library op's result
    // [N,C,H,W] and s [1 or N, C, 1, 1].
    std::set<int> scale_candidates;
    for (size_t j = 0; j < count; ++j) {
      const Node& n = g.nodes[j];
      if (!is_op(n, "Mul") || emitted_at[j] != static_cast<int>(j) || n.inputs.size() != 2 ||
          graph_outputs.count(n.outputs[0]) || !f32_4d(n.outputs[0]))
        continue;
      auto zs = cg.shape_of(n.outputs[0]);
      for (int k = 0; k < 2; ++k) {
        const std::string &x = n.inputs[k], &sv = n.inputs[1 - k];
        if (x == sv || !made_by.count(x) || cg.shape_of(x) != zs || cg.dtype_of(sv) != DType::F32) continue;
        auto ss = cg.shape_of(sv);
        if (ss.size() == 4 && (ss[0].is(1) || ss[0] == zs[0]) && ss[1] == zs[1] && ss[2].is(1) && ss[3].is(1) &&
            !(zs[2] * zs[3]).is(1))
          scale_candidates.insert(static_cast<int>(j));
      }
    }
    for (int j : scale_candidates) made_by[g.nodes[j].outputs[0]] = j;
    // Last value first: whether a reader takes a native input can depend on its own result.
    std::map<int, bool> scale_ok;
    std::vector<std::pair<int, std::string>> order;
    for (const auto& [v, step] : made_by) order.push_back({step, v});
    std::sort(order.rbegin(), order.rend());
    for (const auto& [step, y] : order) {
      if (graph_outputs.count(y)) continue;
      int readers = 0, mode = HODU_DST_NATIVE;
      bool ok = true;
      for (size_t j = 0; j < count && ok; ++j) {
        const Node& r = g.nodes[j];
        int reads = static_cast<int>(std::count(r.inputs.begin(), r.inputs.end(), y));
        if (!reads) continue;
        readers += reads;
        auto z = residual_of_add.find(static_cast<int>(j));
        if (reads != 1) ok = false;
        else if (z != residual_of_add.end() && z->second == y) ok = true;
        else if (emitted_at[j] != static_cast<int>(j)) ok = false;
        else if (library_conv(r)) ok = r.inputs[0] == y;
        else if (library_pool(r)) ok = r.inputs[0] == y;
        else if (scale_candidates.count(static_cast<int>(j))) {
          ok = cg.native_values.count(r.outputs[0]) > 0;
          scale_ok[static_cast<int>(j)] = ok;
          mode = std::max(mode, HODU_DST_SIMPLE);
        } else if (cg.inplace_concats.count(r.outputs[0])) {
          ok = cg.native_values.count(r.outputs[0]) > 0;
          mode = HODU_DST_CONCAT;
        } else ok = false;
      }
      if (ok && readers > 0 && readers == uses[y]) {
        cg.native_values.insert(y);
        cg.native_mode[y] = mode;
      }
    }
    for (const auto& [j, ok] : scale_ok)
      if (ok) cg.channel_scales.insert(g.nodes[j].outputs[0]);
    // A part of a plain in-place Concat is written plain, whatever its readers.
    for (const auto& [part, info] : cg.concat_parts)
      if (!cg.native_values.count(info.concat)) cg.native_values.erase(part);
  }
  // Default mode: Softmax over the last axis of Div/Mul(x, scalar) [+ Add of a
  // constant mask] (attention scores) runs as one hodu_softmax with the scale and
  // the mask: mask [1, ..., 1, R, cols] with R 1 or the rows' last dim.
  if (options.opt_level >= 2 && cg.kernel_library) {
    for (size_t k = 0; k < count; ++k) {
      const Node& sm = g.nodes[k];
      if (sm.op_type != "Softmax" || !sm.domain.empty() || cg.dtype_of(sm.inputs[0]) != DType::F32) continue;
      const auto xs = cg.shape_of(sm.inputs[0]);
      int64_t r = static_cast<int64_t>(xs.size()), axis = sm.get_int("axis", -1);
      if (r < 1 || (axis != -1 && axis != r - 1)) continue;
      Codegen::SoftmaxInput in;
      in.x = sm.inputs[0];
      std::vector<int> fused;
      auto unclaimed_producer = [&](const std::string& v) -> int {
        auto p = producer.find(v);
        if (p == producer.end() || emitted_at[p->second] != p->second || sole_reader(v) < 0) return -1;
        const Node& pn = g.nodes[p->second];
        return pn.domain.empty() && pn.inputs.size() == 2 && pn.outputs.size() == 1 ? p->second : -1;
      };
      int p = unclaimed_producer(in.x);
      if (p >= 0 && g.nodes[p].op_type == "Add" && r >= 2) {
        const Node& add = g.nodes[p];
        for (int side = 0; side < 2; ++side) {
          const std::string &m = add.inputs[side], &other = add.inputs[1 - side];
          if (m == other || !cg.is_constant(m) || cg.dtype_of(m) != DType::F32 || cg.shape_of(other) != xs) continue;
          auto ms = cg.shape_of(m);
          if (static_cast<int64_t>(ms.size()) > r) continue;
          ms.insert(ms.begin(), r - ms.size(), 1);
          bool ok = ms[r - 1] == xs[r - 1] && (ms[r - 2].is(1) || ms[r - 2] == xs[r - 2]);
          for (int64_t d = 0; d + 2 < r; ++d) ok = ok && ms[d].is(1);
          if (!ok) continue;
          in.mask = m;
          in.mask_rows = ms[r - 2].value();
          in.x = other;
          fused.push_back(p);
          break;
        }
        p = in.mask.empty() ? -1 : unclaimed_producer(in.x);
      }
      if (p >= 0 && (g.nodes[p].op_type == "Div" || g.nodes[p].op_type == "Mul")) {
        const Node& d = g.nodes[p];
        for (int side = 0; side < 2; ++side) {
          if (d.op_type == "Div" && side == 0) continue;  // c / x is no scale
          const std::string &c = d.inputs[side], &other = d.inputs[1 - side];
          if (!cg.is_constant(c) || !numel(cg.shape_of(c)).is(1) || cg.dtype_of(c) != DType::F32 ||
              cg.shape_of(other) != xs || cg.dtype_of(other) != DType::F32)
            continue;
          double v = cg.constant(c).get_double(0);
          if (d.op_type == "Div" && v == 0) continue;
          in.scale = static_cast<float>(d.op_type == "Div" ? 1.0 / v : v);
          in.x = other;
          fused.push_back(p);
          break;
        }
      }
      for (int f : fused) emitted_at[f] = static_cast<int>(k);
      if (!fused.empty()) cg.fused_nodes += static_cast<int>(fused.size());
      cg.softmax_inputs[sm.outputs[0]] = in;
    }
  }
  // Default mode: attention's head split and merge without copies.
  std::vector<int> dst_transpose_of(count, -1);  // matmul → the Transpose it writes (head merge)
  std::map<int, std::pair<std::string, float>> matmul_scale;  // matmul → (A read instead, alpha)
  auto perm_of = [&](const Node& t) { return passes::transpose_perm(t, cg.shape_of(t.inputs[0]).size()); };
  auto is_f32 = [&](const std::string& v) { return cg.dtype_of(v) == DType::F32; };
  if (options.opt_level >= 2 && cg.kernel_library) {
    auto library_matmul = [&](size_t k) {
      const Node& m = g.nodes[k];
      if (m.op_type != "MatMul" || !m.domain.empty() || m.inputs.size() != 2 || emitted_at[k] != static_cast<int>(k))
        return false;
      auto a = cg.shape_of(m.inputs[0]), b = cg.shape_of(m.inputs[1]);
      return is_f32(m.inputs[0]) && is_f32(m.inputs[1]) && a.size() >= 2 && b.size() >= 2 &&
             std::max(a.size(), b.size()) <= 6;
    };
    // A scalar scale on A (ViT's q / sqrt(d) before Q·Kᵀ): the product's alpha. A variable B
    // takes it as oneDNN's output scale, which does not combine with a bias here.
    std::vector<int> scale_into(count, -1);  // Div/Mul node → the matmul taking it as alpha
    for (size_t i = 0; i < count; ++i) {
      if (!library_matmul(i) || (!cg.is_constant(g.nodes[i].inputs[1]) && bias_add_of[i] >= 0)) continue;
      auto p = producer.find(g.nodes[i].inputs[0]);
      if (p == producer.end() || emitted_at[p->second] != p->second || sole_reader(g.nodes[i].inputs[0]) != static_cast<int>(i))
        continue;
      const Node& d = g.nodes[p->second];
      if ((d.op_type != "Div" && d.op_type != "Mul") || !d.domain.empty() || d.inputs.size() != 2) continue;
      for (int side = 0; side < 2; ++side) {
        if (d.op_type == "Div" && side == 0) continue;  // c / x is no scale
        const std::string &c = d.inputs[side], &x = d.inputs[1 - side];
        if (!cg.is_constant(c) || !numel(cg.shape_of(c)).is(1) || !is_f32(c) || !is_f32(x) ||
            cg.shape_of(x) != cg.shape_of(d.outputs[0]))
          continue;
        double v = cg.constant(c).get_double(0);
        if (v == 0 || !std::isfinite(v)) continue;
        matmul_scale[static_cast<int>(i)] = {x, static_cast<float>(d.op_type == "Div" ? 1.0 / v : v)};
        scale_into[p->second] = static_cast<int>(i);
        emitted_at[p->second] = static_cast<int>(i);
        ++cg.fused_nodes;
        break;
      }
    }
    auto result_of = [&](size_t k) -> const std::string& {
      return act_of[k] >= 0        ? g.nodes[act_of[k]].outputs[0]
             : bias_add_of[k] >= 0 ? g.nodes[bias_add_of[k]].outputs[0]
                                   : g.nodes[k].outputs[0];
    };
    // Head merge: a Transpose that is the only reader of a library MatMul's result (no
    // residual) is written by the MatMul through strides.
    for (size_t j = 0; j < count; ++j) {
      const Node& t = g.nodes[j];
      if (t.op_type != "Transpose" || !t.domain.empty() || emitted_at[j] != static_cast<int>(j) ||
          !is_f32(t.inputs[0]) || graph_outputs.count(t.outputs[0]))
        continue;
      auto p = producer.find(t.inputs[0]);
      if (p == producer.end()) continue;
      size_t i = static_cast<size_t>(emitted_at[p->second]);
      if (library_matmul(i) && matmul_residual_add[i] < 0 && dst_transpose_of[i] < 0 && result_of(i) == t.inputs[0] &&
          sole_reader(t.inputs[0]) == static_cast<int>(j) &&
          cg.shape_of(g.nodes[i].outputs[0]).size() == perm_of(t).size()) {
        dst_transpose_of[i] = static_cast<int>(j);
        emitted_at[j] = static_cast<int>(i);
        ++cg.fused_nodes;
      }
    }
    // Head split: outputs of Slice/Reshape/Transpose chains whose every reader takes a
    // strided view (a library MatMul, as A, its scaled A or a variable B; another view op)
    // stay views of the chain's root. Readers first: whether a value can stay a view
    // depends on the values read from it.
    auto view_op = [&](size_t k) {
      const Node& n = g.nodes[k];
      return emitted_at[k] == static_cast<int>(k) && is_view_producer(cg, n) && is_f32(n.inputs[0]) &&
             !cg.native_values.count(n.inputs[0]) && !cg.concat_parts.count(n.inputs[0]) &&
             !cg.inplace_concats.count(n.inputs[0]);
    };
    std::set<std::string> wanted;
    for (size_t k = count; k-- > 0;) {
      if (!view_op(k)) continue;
      const std::string& v = g.nodes[k].outputs[0];
      auto r = readers.find(v);
      bool ok = !graph_outputs.count(v) && r != readers.end() && !r->second.empty() &&
                uses[v] == static_cast<int>(r->second.size());
      for (size_t q = 0; ok && q < r->second.size(); ++q) {
        size_t j = r->second[q];
        const Node& m = g.nodes[j];
        if (scale_into[j] >= 0) ok = true;  // the scaled A of a library matmul
        else if (library_matmul(j)) ok = m.inputs[0] != m.inputs[1];
        else ok = view_op(j) && m.inputs[0] == v;
      }
      if (ok) wanted.insert(v);
    }
    for (size_t k = 0; k < count; ++k) {
      if (!view_op(k)) continue;
      const Node& n = g.nodes[k];
      const std::string &u = n.inputs[0], &v = n.outputs[0];
      auto in = cg.strided_views.find(u);
      if (in == cg.strided_views.end()) {
        auto d = view_through(cg, n, whole_view(cg, u));
        if (!d || is_view_op(n)) continue;  // a reshape of row-major bytes is a plain alias already
        if (is_row_major(*d)) cg.free_views.insert(v);  // a Transpose moving size-1 dims, a prefix Slice
        else if (wanted.count(v)) cg.strided_views[v] = *d;
        continue;
      }
      auto d = view_through(cg, n, in->second);
      if (d && wanted.count(v)) cg.strided_views[v] = *d;
      else if (d) cg.view_copies[v] = *d;
      else cg.view_copies[v] = in->second;  // a reshape: the input's elements in their order
    }
  }
  // Elementwise groups (O1+): a node absorbs the groups of single-use inputs of its shape.
  std::vector<std::vector<int>> group(count);
  std::vector<bool> absorbed(count, false);
  for (size_t i = 0; i < count; ++i) {
    const Node& n = g.nodes[i];
    if (emitted_at[i] != static_cast<int>(i) || !is_elementwise(cg, n) || cg.channel_scales.count(n.outputs[0]))
      continue;
    std::vector<int> members;
    if (options.opt_level >= 1) {
      auto out_shape = cg.shape_of(n.outputs[0]);
      for (const auto& in : n.inputs) {
        auto p = producer.find(in);
        if (in.empty() || p == producer.end()) continue;
        int j = p->second;
        if (group[j].empty() || absorbed[j] || uses[in] != 1 || graph_outputs.count(in) ||
            cg.shape_of(in) != out_shape)
          continue;
        members.insert(members.end(), group[j].begin(), group[j].end());
        for (int k : group[j]) emitted_at[k] = static_cast<int>(i);
        absorbed[j] = true;
      }
    }
    members.push_back(static_cast<int>(i));
    std::sort(members.begin(), members.end());
    group[i] = members;
  }
  // Liveness: the last step reading each buffer (views read their root).
  for (size_t i = 0; i < count; ++i) {
    const Node& n = g.nodes[i];
    if ((is_view_op(n) && !cg.view_copies.count(n.outputs[0])) || cg.strided_views.count(n.outputs[0]) ||
        cg.free_views.count(n.outputs[0])) {
      auto r = cg.alias_root.find(n.inputs[0]);
      cg.alias_root[n.outputs[0]] = r == cg.alias_root.end() ? n.inputs[0] : r->second;
    }
    // A control-flow node also reads the outer values its bodies read.
    for (const auto& in : passes::has_subgraph(n) ? passes::reads_of(n) : std::set<std::string>(n.inputs.begin(), n.inputs.end())) {
      if (in.empty()) continue;
      auto r = cg.alias_root.find(in);
      const std::string& root = r == cg.alias_root.end() ? in : r->second;
      cg.last_use[root] = std::max(cg.last_use[root], emitted_at[i]);
    }
  }
  for (const auto& o : g.outputs) {
    auto r = cg.alias_root.find(o.name);
    cg.last_use[r == cg.alias_root.end() ? o.name : r->second] = INT_MAX;
  }

  // Emission. The nodes each step emits (a node fused into another's step is emitted there).
  std::vector<std::vector<int>> nodes_at(count);
  for (size_t k = 0; k < count; ++k)
    if (emitted_at[k] >= 0 && static_cast<size_t>(emitted_at[k]) < count) nodes_at[emitted_at[k]].push_back(static_cast<int>(k));
  for (size_t i = 0; i < count; ++i) {
    const Node& n = g.nodes[i];
    cg.step = static_cast<int>(i);
    if (emitted_at[i] != static_cast<int>(i) || (is_elementwise(cg, n) && absorbed[i])) continue;
    // Size values read as tensors (not as sizes) are written out first, data read as sizes
    // is read into its late dims, and the checks on late sizes of the nodes run here are made.
    for (int k : nodes_at[i])
      for (size_t j = 0; j < g.nodes[k].inputs.size(); ++j) {
        const std::string& in = g.nodes[k].inputs[j];
        if (!in.empty() && cg.sym_values.count(in) && !is_size_input(g.nodes[k].op_type, j)) cg.materialize(in);
        if (!in.empty() && cg.late_values.count(in)) cg.read_late(in);
      }
    for (int k : nodes_at[i])
      if (auto c = prep.sym.late_checks.find(g.nodes[k].outputs.empty() ? "" : g.nodes[k].outputs[0]);
          c != prep.sym.late_checks.end())
        for (const auto& st : c->second) cg.emit(runtime_check(st, 4));
    if (!group[i].empty()) {
      std::vector<const Node*> members;
      for (int k : group[i]) members.push_back(&g.nodes[k]);
      emit_elementwise_group(cg, members);
      ++cg.steps_emitted;
      continue;
    }
    // A fused Add: the op writes the Add's output, through an open clip until an activation follows.
    auto absorb_add = [&](int add) {
      cg.act_output = g.nodes[add].outputs[0];
      cg.act_kind = HODU_ACTIVATION_CLIP;
      cg.act_lo = -INFINITY;
      cg.act_hi = INFINITY;
      ++cg.fused_nodes;
    };
    if (add_of[i] >= 0) {
      cg.residual = residual_of_add[add_of[i]];
      absorb_add(add_of[i]);
    }
    if (bias_add_of[i] >= 0) {
      cg.matmul_bias = bias_value[static_cast<int>(i)];
      absorb_add(bias_add_of[i]);
    }
    if (matmul_residual_add[i] >= 0) {
      cg.residual = matmul_residual[static_cast<int>(i)];
      absorb_add(matmul_residual_add[i]);
    }
    if (dst_transpose_of[i] >= 0) {
      cg.dst_transpose = g.nodes[dst_transpose_of[i]].outputs[0];
      cg.dst_transpose_perm = perm_of(g.nodes[dst_transpose_of[i]]);
    }
    if (matmul_scale.count(static_cast<int>(i))) std::tie(cg.matmul_a, cg.matmul_alpha) = matmul_scale[static_cast<int>(i)];
    if (auto v = cg.strided_views.find(n.outputs[0]); v != cg.strided_views.end()) {  // read in place: no code
      cg.define_alias(n.outputs[0], v->second.root, cg.shape_of(n.outputs[0]));
      continue;
    }
    if (cg.free_views.count(n.outputs[0])) {
      cg.define_alias(n.outputs[0], n.inputs[0], cg.shape_of(n.outputs[0]));
      continue;
    }
    if (auto v = cg.view_copies.find(n.outputs[0]); v != cg.view_copies.end()) {
      emit_view_copy(cg, n.outputs[0], v->second);
      ++cg.steps_emitted;
      continue;
    }
    if (act_of[i] >= 0) {
      cg.act_output = g.nodes[act_of[i]].outputs[0];
      cg.act_kind = act_kind[i];
      cg.act_lo = -INFINITY;
      cg.act_hi = INFINITY;
      if (act_kind[i] == HODU_ACTIVATION_CLIP) std::tie(cg.act_lo, cg.act_hi) = *clamp_of(cg, g.nodes[act_of[i]]);
      if (act_kind[i] == HODU_ACTIVATION_SILU) ++cg.fused_nodes;  // the Sigmoid of a SiLU
      ++cg.fused_nodes;
    }
    try {
      if (!emit_ml_op(cg, n) && !emit_training_op(cg, n) && !emit_random_op(cg, n) && !emit_nn_op(cg, n) &&
          !emit_index_op(cg, n) && !emit_tensor_op(cg, n) && !emit_attention_op(cg, n) &&
          !emit_rnn_op(cg, n) && !emit_control_flow_op(cg, n) && !emit_resample_op(cg, n) &&
          !emit_window_op(cg, n) &&
          !emit_generic_op(cg, n))
        fail(ErrorCode::Unsupported, "{}: op not supported by the C compiler", n.describe());
    } catch (const Error& e) {
      std::string msg = e.what();
      if (msg.find(n.describe()) != std::string::npos) throw;
      throw e.with_context(n.describe() + ": ");
    }
    cg.act_output.clear();
    cg.residual.clear();
    cg.matmul_bias.clear();
    cg.dst_transpose.clear();
    cg.matmul_a.clear();
    cg.matmul_alpha = 1.f;
    if (!is_view_op(n)) ++cg.steps_emitted;
  }

  // Outputs live in the arena until the next run; inputs and weights are copied there.
  cg.step = static_cast<int>(count);
  std::vector<std::string> output_values;
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const std::string& name = g.outputs[k].name;
    if (cg.sym_values.count(name)) cg.materialize(name);
    const ValueInfo& v = cg.info(name);
    if (v.kind == ValueInfo::Kind::Arena || v.kind == ValueInfo::Kind::Late) {
      cg.touch(name);
      output_values.push_back(name);
      continue;
    }
    std::string copy = fmt::format("\x01output{}", k);
    std::string src = cg.ptr(name);
    const ValueInfo& vi = cg.info(name);  // ptr() may add the weight
    SymInt bytes = storage_bytes(vi.dtype, numel(vi.shape));
    cg.define(copy, vi.dtype, vi.shape);
    cg.emit(fmt::format("memcpy({}, {}, {});", cg.ptr(copy), src, bytes));
    output_values.push_back(copy);
  }
  for (const auto& name : output_values)
    if (cg.info(name).kind == ValueInfo::Kind::Arena) cg.buffers[cg.info(name).index].last_step = INT_MAX / 2;
  if (options.opt_level == 0)  // no sharing at all: every buffer lives for the whole run
    for (auto& b : cg.buffers) {
      b.first_step = 0;
      b.last_step = INT_MAX / 2;
      b.reuse = -1;
    }
  // Sizes known at run time: the arena is planned by the generated code for each shape.
  const bool dynamic = sym_table.size() > 0;
  MemoryPlan plan;
  if (dynamic) plan.offsets.assign(cg.buffers.size(), 0);
  else plan = plan_memory(cg.buffers);
  // Outputs written straight into caller-given memory: each output whose bytes are a whole
  // arena buffer of its own (every reference to that buffer in the body becomes `oK`, the
  // caller's memory or the arena). The buffers in place of which it was defined keep their
  // own bytes, and nothing is defined in place of an output (it lives to the end).
  std::map<int, size_t> direct_buffer;  // buffer id → output index
  {
    std::map<int, int> seen;
    for (const auto& name : output_values)
      if (cg.info(name).kind == ValueInfo::Kind::Arena) ++seen[cg.info(name).index];
    for (size_t k = 0; k < output_values.size(); ++k) {
      const ValueInfo& v = cg.info(output_values[k]);
      // The buffer is exactly the output (not a larger tensor it is a prefix view of).
      const SymInt bytes = storage_bytes(v.dtype, numel(v.shape));
      if (v.kind != ValueInfo::Kind::Arena || !v.offset.is(0) || seen[v.index] != 1 ||
          cg.native_values.count(output_values[k]) || cg.buffers[v.index].bytes != sym_max(bytes, 1) ||
          cg.prepare.find(fmt::format("@{}@", v.index)) != std::string::npos)
        continue;
      direct_buffer[v.index] = k;
    }
  }

  // Resolve the arena placeholders "@id@" ("A + @id@" of a direct output: its pointer).
  auto resolve = [&](const std::string& text, bool body) {
    static const std::string kBase = "A + ";
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '@') {
        size_t end = text.find('@', i + 1);
        if (end != std::string::npos && end > i + 1 && text.find_first_not_of("0123456789", i + 1) == end) {
          const int id = std::stoi(text.substr(i + 1, end - i - 1));
          auto d = body ? direct_buffer.find(id) : direct_buffer.end();
          if (d != direct_buffer.end() && out.size() >= kBase.size() &&
              out.compare(out.size() - kBase.size(), kBase.size(), kBase) == 0) {
            out.replace(out.size() - kBase.size(), kBase.size(), fmt::format("o{}", d->second));
          } else {
            out += dynamic ? fmt::format("O[{}]", id) : std::to_string(plan.offsets[id]);
          }
          i = end;
          continue;
        }
      }
      out += text[i];
    }
    return out;
  };

  ApiSpec spec;
  spec.name = options.name;
  spec.embed_weights = options.embed_weights;
  spec.standalone = options.standalone;
  spec.weights_file = options.weights_file.empty() ? options.name + ".weights" : options.weights_file;
  auto shape_doc = [&](const SymShape& shape) {
    std::string d;
    for (const auto& x : shape) {
      std::string t = x.known() ? std::to_string(x.value()) : "?";
      if (x.terms().size() == 1 && x.terms()[0].coef == 1 && x.terms()[0].atoms.size() == 1 &&
          x.terms()[0].atoms[0] < sym_table.num_input_dims())
        t = sym_table.atom(x.terms()[0].atoms[0]).name;
      d += (d.empty() ? "" : ", ") + t;
    }
    return "[" + d + "]";
  };
  for (const auto& in : cg.input_names) {
    const ValueInfo& v = cg.values.at(in);
    ApiTensor t;
    t.name = in;
    t.dtype = v.dtype;
    t.shape = v.shape;
    spec.inputs.push_back(t);
    spec.inputs.back().shape_doc = shape_doc(v.shape);
    for (const auto& d : v.shape) {
      const bool free = !d.known() && d.terms().size() == 1 && d.terms()[0].atoms.size() == 1 && d.terms()[0].coef == 1;
      HODU_CHECK(d.known() || free, ErrorCode::Internal, "input '{}': dim {} is no free dim", in, d.c());
      spec.inputs.back().free_dims.push_back(free ? d.terms()[0].atoms[0] : -1);
    }
  }
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const ValueInfo& v = cg.info(output_values[k]);
    ApiTensor t;
    t.name = g.outputs[k].name;
    t.dtype = v.dtype;
    t.shape = v.shape;
    // A late output's index counts late blocks, not arena buffers.
    const bool arena = v.kind == ValueInfo::Kind::Arena;
    t.arena_offset = arena ? plan.offsets[v.index] : 0;
    t.direct = arena && direct_buffer.count(v.index) > 0;
    spec.outputs.push_back(t);
    spec.outputs.back().shape_doc = shape_doc(v.shape);
    if (!dynamic) continue;
    ApiTensor& o = spec.outputs.back();
    for (const auto& d : v.shape) {
      o.shape_c.push_back(d.c());
      o.late = o.late || d.late();
      const bool free = !d.known() && d.terms().size() == 1 && d.terms()[0].atoms.size() == 1 &&
                        d.terms()[0].coef == 1 && d.terms()[0].atoms[0] < sym_table.num_input_dims();
      o.free_dims.push_back(free ? d.terms()[0].atoms[0] : -1);
    }
    HODU_CHECK(!(o.late && o.direct), ErrorCode::Internal, "output '{}': late and direct", o.name);
    o.data = resolve(cg.ptr(output_values[k]), false);
  }
  if (dynamic) {
    spec.dynamic = true;
    spec.num_slots = sym_table.size();
    spec.num_buffers = static_cast<int>(cg.buffers.size());
    spec.num_late = cg.late_values_count;
    for (int k = 0; k < sym_table.num_input_dims(); ++k) spec.dim_names.push_back(sym_table.atom(k).name);
    for (const auto& st : sym_table.statements()) {
      if (st.atom >= 0) spec.shape_function += fmt::format("  S[{}] = {};\n", st.atom, sym_table.atom(st.atom).expr);
      else spec.shape_function += "  " + runtime_check(st, 1) + "\n";
    }
    for (size_t b = 0; b < cg.buffers.size(); ++b) {
      const PlanBuffer& pb = cg.buffers[b];
      HODU_CHECK(!pb.bytes.late(), ErrorCode::Internal, "arena buffer {} has a late size", b);
      spec.plan_function += fmt::format("  bytes[{}] = {};\n", b, pb.bytes);
      spec.buffer_first += fmt::format("{}{}", b ? ", " : "", pb.first_step);
      spec.buffer_last += fmt::format("{}{}", b ? ", " : "", pb.last_step);
      spec.buffer_reuse += fmt::format("{}{}", b ? ", " : "", pb.reuse);
    }
  }
  spec.arena_bytes = plan.arena_bytes;
  const WeightStore* store = options.weight_store;
  const int64_t weight_bytes =
      store ? store->data_bytes() : static_cast<int64_t>(cg.weights.size()) - kWeightsHeaderBytes;
  spec.weights_bytes = weight_bytes;
  spec.fingerprint = store ? store->fingerprint() : fingerprint_of(std::string_view(cg.weights).substr(kWeightsHeaderBytes));
  spec.tables = cg.tables + cg.functions;
  spec.body = resolve(cg.code, true);
  if (dynamic) spec.body = replace_all(spec.body, "m->ops[", "hs->ops[");
  spec.model_doc = fmt::format("{} nodes, {} steps, arena {}, weights {} bytes, -O{}{}", count, cg.steps_emitted,
                               dynamic ? "planned per shape" : fmt::format("{} bytes", plan.arena_bytes),
                               weight_bytes, options.opt_level,
                               options.standalone       ? ", standalone"
                               : cg.kernel_library ? fmt::format(", {} libhodu_kernels ops", cg.library_ops)
                                                   : ", portable kernels");
  spec.kernel_library = cg.kernel_library;
  spec.library_ops = cg.library_ops;
  spec.prepare = resolve(cg.prepare, false);
  spec.extra_fields = cg.cf_fields;
  spec.extra_create = cg.cf_create;
  spec.extra_destroy = cg.cf_destroy;

  GeneratedModel out;
  out.name = options.name;
  out.header = emit_header(spec);
  std::string kernels = kernel_library_source();
  for (const auto& section : cg.kernel_sections) kernels += kernel_section_source(section);
  // A nested body's source goes inside its parent's, which has the kernels and the ABI.
  out.source = options.nested ? emit_source(spec, "", "") : emit_source(spec, kernels, kernel_library_abi());
  out.kernel_sections = cg.kernel_sections;
  out.library_ops = cg.library_ops;
  out.main_source = emit_main(spec);
  seal_weights_blob(cg.weights, spec.fingerprint);
  out.weights = std::move(cg.weights);
  out.arena_bytes = plan.arena_bytes;
  out.naive_arena_bytes = plan.naive_bytes;
  out.weight_bytes = weight_bytes;
  out.nodes = static_cast<int>(count);
  out.steps = cg.steps_emitted;
  out.fused_nodes = cg.fused_nodes;
  out.folded_nodes = prep.folded_nodes;
  return out;
}

}  // namespace hodu::compilers::c
