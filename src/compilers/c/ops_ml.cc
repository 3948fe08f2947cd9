// Emitters for the ai.onnx.ml ops of scikit-learn exports (kernels/hk_ml.c): TreeEnsemble,
// LinearRegressor, Scaler, Normalizer, Binarizer, Imputer, OneHotEncoder, LabelEncoder,
// ArrayFeatureExtractor, FeatureVectorizer. Attributes are read and checked at build time
// as the interpreter (engines/interp/ops/ml.cc) checks them when it runs; trees and lookup
// tables go into the weights. String inputs or outputs are refused before this (the C API
// carries no strings), which leaves CategoryMapper and the string forms of LabelEncoder and
// OneHotEncoder to the interpreter. Also TfIdfVectorizer (ONNX's default domain, the text
// featurizer of the same pipelines) over int32/int64 tokens.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "compilers/c/ops_generic.h"
#include "core/error.h"

namespace hodu::compilers::c {
namespace {

constexpr const char* kMl = "ai.onnx.ml";

void need_ml_kernels(Codegen& cg) {
  need_generic_kernels(cg);
  cg.kernel_sections.insert("ml");
}

// A table of the weights blob as a typed pointer expression.
template <typename T>
std::string weight_table(Codegen& cg, std::vector<T> v, DType dt, const char* type) {
  if (v.empty()) v.push_back(T{});
  Tensor t = Tensor::from_vector(dt, {static_cast<int64_t>(v.size())}, v);
  return fmt::format("((const {}*)(W + {}))", type, cg.weight_offsets[cg.add_weight(t)]);
}

// [N, C] of an input of rank 0 to 2, as the interpreter reads it.
std::pair<SymInt, SymInt> rows_cols(Codegen& cg, const Node& n) {
  auto s = cg.shape_of(n.inputs[0]);
  HODU_CHECK(s.size() <= 2, ErrorCode::InvalidModel, "{}: input must have rank 1 or 2, got rank {}", n.describe(),
             s.size());
  if (s.empty()) return {1, 1};
  if (s.size() == 1) return {1, s[0]};
  return {s[0], s[1]};
}

int post_transform_code(const Node& n, const std::string& p) {
  static const std::map<std::string, int> codes = {
      {"NONE", 0}, {"SOFTMAX", 1}, {"LOGISTIC", 2}, {"SOFTMAX_ZERO", 3}, {"PROBIT", 4}};
  auto it = codes.find(p);
  HODU_CHECK(it != codes.end(), ErrorCode::InvalidModel, "{}: unknown post_transform '{}'", n.describe(), p);
  return it->second;
}

std::vector<double> tensor_attr_doubles(const Node& n, const char* name) {
  if (const Tensor* t = n.get_tensor(name)) return t->to_doubles();
  return {};
}

void emit_tree_ensemble(Codegen& cg, const Node& n) {
  DType dt = cg.dtype_of(n.inputs[0]);
  HODU_CHECK(dtype_is_float(dt), ErrorCode::Unsupported, "{}: X must be a float tensor, got {}", n.describe(),
             dtype_name(dt));
  auto [rows, cols] = rows_cols(cg, n);
  auto feat = n.get_ints("nodes_featureids");
  auto tids = n.get_ints("nodes_truenodeids"), fids = n.get_ints("nodes_falsenodeids");
  auto tleaf = n.get_ints("nodes_trueleafs"), fleaf = n.get_ints("nodes_falseleafs");
  auto leaf_t = n.get_ints("leaf_targetids"), roots = n.get_ints("tree_roots");
  auto splits = tensor_attr_doubles(n, "nodes_splits"), leaf_w = tensor_attr_doubles(n, "leaf_weights");
  auto members = tensor_attr_doubles(n, "membership_values");
  // ints in the spec (some writers use a tensor); nodes_modes a tensor (or ints).
  auto is_tensor = [&](const char* name) {
    const Attribute* a = n.attr(name);
    return a && a->kind == Attribute::Kind::Tensor;
  };
  std::vector<double> miss;
  if (is_tensor("nodes_missing_value_tracks_true")) miss = tensor_attr_doubles(n, "nodes_missing_value_tracks_true");
  else
    for (int64_t v : n.get_ints("nodes_missing_value_tracks_true")) miss.push_back(static_cast<double>(v));
  std::vector<int64_t> modes;
  if (is_tensor("nodes_modes")) modes = n.get_tensor("nodes_modes")->to_int64s();
  else modes = n.get_ints("nodes_modes");
  const size_t nn = feat.size();
  HODU_CHECK(tids.size() == nn && fids.size() == nn && tleaf.size() == nn && fleaf.size() == nn &&
                 splits.size() == nn && modes.size() == nn && (miss.empty() || miss.size() == nn),
             ErrorCode::InvalidModel, "{}: the nodes_* attributes have different lengths", n.describe());
  HODU_CHECK(leaf_t.size() == leaf_w.size(), ErrorCode::InvalidModel,
             "{}: leaf_targetids and leaf_weights differ in length", n.describe());
  const int64_t n_targets = n.get_int("n_targets", 0);
  const int64_t agg = n.get_int("aggregate_function", 1), post = n.get_int("post_transform", 0);
  HODU_CHECK(n_targets > 0, ErrorCode::InvalidModel, "{}: n_targets must be positive", n.describe());
  HODU_CHECK(agg >= 0 && agg <= 3, ErrorCode::InvalidModel, "{}: unknown aggregate_function {}", n.describe(), agg);
  HODU_CHECK(post >= 0 && post <= 4, ErrorCode::InvalidModel, "{}: unknown post_transform {}", n.describe(), post);
  std::vector<int64_t> table;
  std::vector<double> member_vals;
  size_t mpos = 0;
  int64_t max_feature = -1;
  for (size_t i = 0; i < nn; ++i) {
    HODU_CHECK(modes[i] >= 0 && modes[i] <= 6, ErrorCode::InvalidModel, "{}: unknown node mode {}", n.describe(),
               modes[i]);
    HODU_CHECK(feat[i] >= 0, ErrorCode::InvalidModel, "{}: node {} reads feature {}", n.describe(), i, feat[i]);
    max_feature = std::max(max_feature, feat[i]);
    for (int side = 0; side < 2; ++side) {
      int64_t id = side ? fids[i] : tids[i];
      bool leaf = (side ? fleaf[i] : tleaf[i]) != 0;
      HODU_CHECK(id >= 0 && id < static_cast<int64_t>(leaf ? leaf_w.size() : nn), ErrorCode::InvalidModel,
                 "{}: node {} points to a missing {} {}", n.describe(), i, leaf ? "leaf" : "node", id);
    }
    int64_t first = static_cast<int64_t>(member_vals.size()), count = 0;
    if (modes[i] == 6) {
      while (mpos < members.size() && !std::isnan(members[mpos])) member_vals.push_back(members[mpos++]), ++count;
      HODU_CHECK(mpos < members.size() || count > 0, ErrorCode::InvalidModel,
                 "{}: membership_values has no set for node {}", n.describe(), i);
      ++mpos;  // the NaN separator
    }
    table.insert(table.end(), {modes[i], feat[i], tids[i], fids[i], tleaf[i] != 0, fleaf[i] != 0,
                               !miss.empty() && miss[i] != 0, first, count});
  }
  for (int64_t t : leaf_t)
    HODU_CHECK(t >= 0 && t < n_targets, ErrorCode::InvalidModel, "{}: leaf target {} is out of range", n.describe(), t);
  for (int64_t r : roots)
    HODU_CHECK(r >= 0 && r < static_cast<int64_t>(nn), ErrorCode::InvalidModel, "{}: tree root {} is out of range",
               n.describe(), r);
  table.insert(table.end(), leaf_t.begin(), leaf_t.end());
  table.insert(table.end(), roots.begin(), roots.end());
  std::vector<double> dv = splits;
  dv.insert(dv.end(), leaf_w.begin(), leaf_w.end());
  dv.insert(dv.end(), member_vals.begin(), member_vals.end());
  need_ml_kernels(cg);
  if (max_feature >= 0)
    sym_require(sym_lt(max_feature, cols), n.describe() + ": a node reads feature %lld of %lld", {max_feature, cols});
  std::string x = f64_in(cg, n.inputs[0]);
  WideOut y = wide_out(cg, n.outputs[0], cg.shape_of(n.outputs[0]));
  cg.emit_checked(fmt::format("hk_tree_ensemble({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {})", x, y.buffer, rows,
                              cols, weight_table(cg, table, DType::I64, "int64_t"),
                              weight_table(cg, dv, DType::F64, "double"), nn, leaf_w.size(), roots.size(), n_targets,
                              agg, post, dt == DType::F64 ? 0 : 1),
                  n, "a tree has a cycle");
  y.finish(cg);
}

void emit_linear_regressor(Codegen& cg, const Node& n) {
  auto [rows, cols] = rows_cols(cg, n);
  auto coef = n.get_floats("coefficients"), icpt = n.get_floats("intercepts");
  const int64_t targets = n.get_int("targets", 1);
  HODU_CHECK(cols.known(), ErrorCode::Unsupported, "{}: the number of features must be known at build time",
             n.describe());
  HODU_CHECK(targets > 0 && static_cast<int64_t>(coef.size()) == targets * cols.value(), ErrorCode::InvalidModel,
             "{}: coefficients has {} values, expected {} targets x {} features", n.describe(), coef.size(), targets,
             cols.value());
  HODU_CHECK(icpt.empty() || static_cast<int64_t>(icpt.size()) == targets, ErrorCode::InvalidModel,
             "{}: intercepts has {} values for {} targets", n.describe(), icpt.size(), targets);
  int post = post_transform_code(n, n.get_string("post_transform", "NONE"));
  need_ml_kernels(cg);
  std::string x = doubles_in(cg, n.inputs[0]);
  std::string work = fmt::format("((double*){})", cg.scratch(targets * 8));
  cg.define(n.outputs[0], DType::F32, cg.shape_of(n.outputs[0]));
  cg.emit(fmt::format("hk_linear_regressor({}, (float*){}, {}, {}, {}, {}, {}, {}, {});", x, cg.ptr(n.outputs[0]),
                      rows, cols, cg.float_table(coef), icpt.empty() ? "NULL" : cg.float_table(icpt), targets, post,
                      work));
}

void emit_scaler_normalizer(Codegen& cg, const Node& n) {
  auto [rows, cols] = rows_cols(cg, n);
  need_ml_kernels(cg);
  std::string x = doubles_in(cg, n.inputs[0]);
  std::string call;
  if (n.op_type == "Scaler") {
    auto off = n.get_floats("offset"), sc = n.get_floats("scale");
    for (const auto* v : {&off, &sc})
      if (v->size() > 1)
        sym_require(sym_eq(static_cast<int64_t>(v->size()), cols),
                    n.describe() + ": offset/scale have %lld values for %lld features",
                    {static_cast<int64_t>(v->size()), cols});
    call = fmt::format("hk_scaler({}, (float*)@Y@, {}, {}, {}, {}, {}, {});", x, rows, cols, cg.float_table(off),
                       off.size(), cg.float_table(sc), sc.size());
  } else {
    std::string norm = n.get_string("norm", "MAX");
    HODU_CHECK(norm == "MAX" || norm == "L1" || norm == "L2", ErrorCode::InvalidModel, "{}: unknown norm '{}'",
               n.describe(), norm);
    call = fmt::format("hk_normalizer({}, (float*)@Y@, {}, {}, {});", x, rows, cols,
                       norm == "MAX" ? 0 : norm == "L1" ? 1 : 2);
  }
  cg.define(n.outputs[0], DType::F32, cg.shape_of(n.outputs[0]));
  std::string y = cg.ptr(n.outputs[0]);
  call.replace(call.find("@Y@"), 3, y);
  cg.emit(call);
}

void emit_binarizer_imputer(Codegen& cg, const Node& n) {
  need_ml_kernels(cg);
  auto xs = cg.shape_of(n.inputs[0]);
  std::string x = doubles_in(cg, n.inputs[0]);
  if (n.op_type == "Binarizer") {
    WideOut y = wide_out(cg, n.outputs[0], xs);
    cg.emit(fmt::format("hk_binarizer({}, {}, {}, {:.17g});", x, y.buffer, numel(xs),
                        static_cast<double>(n.get_float("threshold", 0.f))));
    y.finish(cg);
    return;
  }
  auto [rows, cols] = rows_cols(cg, n);
  const bool is_float = dtype_is_float(cg.dtype_of(n.inputs[0]));
  std::vector<double> imp;
  double repl;
  if (is_float) {
    for (float f : n.get_floats("imputed_value_floats")) imp.push_back(f);
    repl = n.get_float("replaced_value_float", 0.f);
  } else {
    for (int64_t v : n.get_ints("imputed_value_int64s")) imp.push_back(static_cast<double>(v));
    repl = static_cast<double>(n.get_int("replaced_value_int64", 0));
  }
  HODU_CHECK(!imp.empty(), ErrorCode::InvalidModel, "{}: no imputed values", n.describe());
  if (imp.size() != 1)
    sym_require(sym_eq(static_cast<int64_t>(imp.size()), cols),
                n.describe() + ": imputed values have %lld entries for %lld features",
                {static_cast<int64_t>(imp.size()), cols});
  WideOut y = wide_out(cg, n.outputs[0], xs);
  cg.emit(fmt::format("hk_imputer({}, {}, {}, {}, {}, {}, {});", x, y.buffer, rows, cols,
                      weight_table(cg, imp, DType::F64, "double"), imp.size(),
                      std::isnan(repl) ? std::string("NAN") : fmt::format("{:.17g}", repl)));
  y.finish(cg);
}

// An input of any number type as `const int64_t*` (floats truncated, as the interpreter's
// static_cast does).
std::string ints_in(Codegen& cg, const std::string& v) {
  DType dt = cg.dtype_of(v);
  if (!dtype_is_float(dt)) return i64_in(cg, v);
  SymInt cnt = numel(cg.shape_of(v));
  std::string out = fmt::format("((int64_t*){})", cg.scratch(cnt * 8));
  cg.emit(fmt::format("hk_cast({}, {}, {}, {}, {}, 1, 0);", cg.ptr(v), static_cast<int>(dt), out,
                      static_cast<int>(DType::I64), cnt));
  return out;
}

void emit_one_hot_encoder(Codegen& cg, const Node& n) {
  auto cats = n.get_ints("cats_int64s");
  HODU_CHECK(!cats.empty(), ErrorCode::InvalidModel, "{}: OneHotEncoder has no categories", n.describe());
  // Sorted for the lookup; the first of repeated categories is the one found.
  std::map<int64_t, int64_t> first;
  for (size_t i = 0; i < cats.size(); ++i) first.emplace(cats[i], static_cast<int64_t>(i));
  std::vector<int64_t> keys, pos;
  for (const auto& [k, p] : first) keys.push_back(k), pos.push_back(p);
  need_ml_kernels(cg);
  auto xs = cg.shape_of(n.inputs[0]);
  std::string x = ints_in(cg, n.inputs[0]);
  auto ys = xs;
  ys.push_back(static_cast<int64_t>(cats.size()));
  cg.define(n.outputs[0], DType::F32, ys);
  cg.emit_checked(fmt::format("hk_one_hot_encoder({}, (float*){}, {}, {}, {}, {}, {})", x, cg.ptr(n.outputs[0]),
                              numel(xs), cg.table(keys), cg.table(pos), keys.size(), n.get_int("zeros", 1) ? 1 : 0),
                  n, "input holds a value outside the categories (zeros=0)");
}

void emit_label_encoder(Codegen& cg, const Node& n) {
  Tensor keys, values, def;
  if (const Tensor* t = n.get_tensor("keys_tensor")) keys = *t;
  else if (n.has_attr("keys_int64s")) keys = Tensor::from_vector(DType::I64, {static_cast<int64_t>(n.get_ints("keys_int64s").size())}, n.get_ints("keys_int64s"));
  else if (n.has_attr("keys_floats")) keys = Tensor::from_vector(DType::F32, {static_cast<int64_t>(n.get_floats("keys_floats").size())}, n.get_floats("keys_floats"));
  else fail(ErrorCode::InvalidModel, "{}: LabelEncoder has no numeric keys", n.describe());
  if (const Tensor* t = n.get_tensor("values_tensor")) values = *t;
  else if (n.has_attr("values_int64s")) values = Tensor::from_vector(DType::I64, {static_cast<int64_t>(n.get_ints("values_int64s").size())}, n.get_ints("values_int64s"));
  else if (n.has_attr("values_floats")) values = Tensor::from_vector(DType::F32, {static_cast<int64_t>(n.get_floats("values_floats").size())}, n.get_floats("values_floats"));
  else fail(ErrorCode::InvalidModel, "{}: LabelEncoder has no numeric values", n.describe());
  HODU_CHECK(keys.numel() == values.numel(), ErrorCode::InvalidModel, "{}: LabelEncoder has {} keys and {} values",
             n.describe(), keys.numel(), values.numel());
  const bool int_values = dtype_is_integer(values.dtype()) || values.dtype() == DType::Bool;
  HODU_CHECK(int_values || dtype_is_float(values.dtype()), ErrorCode::Unsupported,
             "{}: values of dtype {} (numbers needed in compiled code)", n.describe(), dtype_name(values.dtype()));
  if (const Tensor* t = n.get_tensor("default_tensor")) {
    HODU_CHECK(t->dtype() == values.dtype() && t->numel() == 1, ErrorCode::InvalidModel,
               "{}: default_tensor must hold one {} value", n.describe(), dtype_name(values.dtype()));
    def = *t;
  } else if (values.dtype() == DType::I64) {
    def = Tensor::from_vector<int64_t>(DType::I64, {1}, {n.get_int("default_int64", -1)});
  } else if (values.dtype() == DType::F32) {
    def = Tensor::from_vector<float>(DType::F32, {1}, {n.get_float("default_float", -0.0f)});
  } else {
    def = Tensor::from_vector<int64_t>(DType::I64, {1}, {0}).cast(values.dtype());
  }
  DType xt = cg.dtype_of(n.inputs[0]);
  const bool integer = !dtype_is_float(keys.dtype()) && !dtype_is_float(xt);
  // Keys sorted for the lookup, the first of repeated keys winning (a NaN key aside).
  const DType wide_v = int_values ? DType::I64 : DType::F64;
  std::vector<int64_t> vbits;  // the values and the default as 8-byte patterns
  auto bits_of = [&](const Tensor& t) {
    Tensor w = t.cast(wide_v).contiguous();
    const auto* p = static_cast<const int64_t*>(w.raw_data());
    return std::vector<int64_t>(p, p + w.numel());
  };
  std::vector<int64_t> all_values = bits_of(values.reshape({values.numel()})), def_bits = bits_of(def.reshape({1}));
  std::vector<int64_t> sorted_vals, ikeys;
  std::vector<double> dkeys;
  int64_t nan_index = -1;
  if (integer) {
    std::map<int64_t, size_t> m;
    auto kv = keys.to_int64s();
    for (size_t i = 0; i < kv.size(); ++i) m.emplace(kv[i], i);
    for (const auto& [k, i] : m) ikeys.push_back(k), sorted_vals.push_back(all_values[i]);
  } else {
    std::map<double, size_t> m;
    auto kv = keys.to_doubles();
    for (size_t i = 0; i < kv.size(); ++i) {
      if (std::isnan(kv[i])) {
        if (nan_index < 0) nan_index = static_cast<int64_t>(i);
      } else {
        m.emplace(kv[i], i);
      }
    }
    for (const auto& [k, i] : m) dkeys.push_back(k), sorted_vals.push_back(all_values[i]);
  }
  std::vector<int64_t> tail = def_bits;
  if (nan_index >= 0) tail.push_back(all_values[nan_index]);
  sorted_vals.insert(sorted_vals.end(), tail.begin(), tail.end());
  need_ml_kernels(cg);
  auto xs = cg.shape_of(n.inputs[0]);
  std::string x = integer ? i64_in(cg, n.inputs[0]) : doubles_in(cg, n.inputs[0]);
  std::string vt = weight_table(cg, sorted_vals, DType::I64, "int64_t");
  const size_t nk = integer ? ikeys.size() : dkeys.size();
  std::string kt = integer ? weight_table(cg, ikeys, DType::I64, "int64_t") : weight_table(cg, dkeys, DType::F64, "double");
  WideOut y = wide_out(cg, n.outputs[0], xs, int_values);
  cg.emit(fmt::format("hk_label_encoder({}, {}, {}, {}, {}, {}, {} + {}, {}, {});", x, y.buffer, numel(xs), kt, vt, nk,
                      vt, nk, nan_index >= 0 ? fmt::format("{} + {}", vt, nk + 1) : "NULL", integer ? 1 : 0));
  y.finish(cg);
}

void emit_array_feature_extractor(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]), is = cg.shape_of(n.inputs[1]), ys = cg.shape_of(n.outputs[0]);
  HODU_CHECK(!xs.empty(), ErrorCode::InvalidModel, "{}: X must have rank >= 1", n.describe());
  HODU_CHECK(is.size() <= 2, ErrorCode::InvalidModel, "{}: indices must be 1-D or [1, n]", n.describe());
  need_ml_kernels(cg);
  SymInt c = xs.back(), k = numel(is);
  SymShape lead(xs.begin(), xs.end() - 1);
  int64_t es = element_bytes(cg, n.inputs[0]);
  std::string x = cg.ptr(n.inputs[0]), idx = i64_in(cg, n.inputs[1]);
  cg.define(n.outputs[0], cg.dtype_of(n.inputs[0]), ys);
  cg.emit_checked(fmt::format("hk_array_feature_extractor({}, {}, {}, {}, {}, {}, {})", x, idx, cg.ptr(n.outputs[0]),
                              numel(lead), c, k, es),
                  n, "an index is out of range of the features");
}

void emit_feature_vectorizer(Codegen& cg, const Node& n) {
  auto dims = n.get_ints("inputdimensions");
  HODU_CHECK(dims.size() == n.inputs.size(), ErrorCode::InvalidModel, "{}: inputdimensions has {} values for {} inputs",
             n.describe(), dims.size(), n.inputs.size());
  int64_t total = 0;
  for (int64_t d : dims) total += d;
  auto ys = cg.shape_of(n.outputs[0]);
  need_ml_kernels(cg);
  std::vector<std::string> xs;
  for (const auto& v : n.inputs) xs.push_back(doubles_in(cg, v));
  cg.define(n.outputs[0], DType::F32, ys);
  std::string y = cg.ptr(n.outputs[0]);
  cg.emit(fmt::format("memset({}, 0, (size_t)({}) * 4);", y, numel(ys)));
  int64_t off = 0;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    auto s = cg.shape_of(n.inputs[i]);
    SymInt rows = s.size() <= 1 ? SymInt(1) : numel(SymShape(s.begin(), s.end() - 1));
    SymInt width = s.empty() ? SymInt(1) : s.back();
    sym_require(sym_eq(rows, ys[0]), n.describe() + ": input has %lld rows, the output %lld", {rows, ys[0]});
    cg.emit(fmt::format("hk_feature_vectorize({}, (float*){}, {}, {}, {}, {}, {});", xs[i], y, rows, width, dims[i],
                        total, off));
    off += dims[i];
  }
}

// TfIdfVectorizer over integer tokens: the pool checked and sorted by n-gram size at build
// time (as text.cc's read_config and build_pool check it), counted while running.
void emit_tfidf(Codegen& cg, const Node& n) {
  DType xt = cg.dtype_of(n.inputs[0]);
  HODU_CHECK(xt == DType::I32 || xt == DType::I64, ErrorCode::Unsupported,
             "{}: pool_int64s needs an int32 or int64 input, got {}", n.describe(), dtype_name(xt));
  HODU_CHECK(n.has_attr("pool_int64s") && !n.has_attr("pool_strings"), ErrorCode::InvalidModel,
             "{}: exactly one of pool_strings and pool_int64s must be set (int64s in compiled code)", n.describe());
  const std::string mode = n.get_string("mode", "");
  HODU_CHECK(mode == "TF" || mode == "IDF" || mode == "TFIDF", ErrorCode::InvalidModel,
             "{}: mode must be 'TF', 'IDF' or 'TFIDF', got '{}'", n.describe(), mode);
  for (const char* a : {"min_gram_length", "max_gram_length", "max_skip_count", "ngram_counts", "ngram_indexes"})
    HODU_CHECK(n.has_attr(a), ErrorCode::InvalidModel, "{}: attribute '{}' is required", n.describe(), a);
  const int64_t min_gram = n.get_int("min_gram_length", 1), max_gram = n.get_int("max_gram_length", 1);
  const int64_t max_skip = n.get_int("max_skip_count", 0);
  HODU_CHECK(min_gram >= 1 && max_gram >= min_gram && max_skip >= 0, ErrorCode::InvalidModel,
             "{}: min_gram_length {}, max_gram_length {}, max_skip_count {} are inconsistent", n.describe(), min_gram,
             max_gram, max_skip);
  auto indexes = n.get_ints("ngram_indexes"), counts = n.get_ints("ngram_counts"), items = n.get_ints("pool_int64s");
  auto weights = n.get_floats("weights");
  HODU_CHECK(!indexes.empty() && !counts.empty() && max_gram <= static_cast<int64_t>(counts.size()),
             ErrorCode::InvalidModel, "{}: ngram_indexes/ngram_counts are empty or too short", n.describe());
  int64_t out_size = 0;
  for (int64_t o : indexes) {
    HODU_CHECK(o >= 0, ErrorCode::InvalidModel, "{}: ngram_indexes has a negative entry {}", n.describe(), o);
    out_size = std::max(out_size, o + 1);
  }
  HODU_CHECK(weights.empty() || (weights.size() == indexes.size() && static_cast<int64_t>(weights.size()) >= out_size),
             ErrorCode::InvalidModel, "{}: weights has {} entries for {} ngram_indexes and {} outputs", n.describe(),
             weights.size(), indexes.size(), out_size);
  // The pool's n-grams of each used size, sorted, each with its output index.
  std::vector<std::map<std::vector<int64_t>, int64_t>> by_size(static_cast<size_t>(max_gram + 1));
  const int64_t total = static_cast<int64_t>(items.size());
  int64_t id = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const int64_t size = static_cast<int64_t>(i) + 1, begin = counts[i];
    const int64_t end = i + 1 < counts.size() ? counts[i + 1] : total;
    HODU_CHECK(begin >= 0 && end >= begin && end <= total && (end - begin) % size == 0, ErrorCode::InvalidModel,
               "{}: ngram_counts {} for {}-grams does not cut the pool's {} items into whole {}-grams", n.describe(),
               begin, size, total, size);
    for (int64_t k = begin; k < end; k += size, ++id) {
      if (size < min_gram || size > max_gram) continue;
      HODU_CHECK(id < static_cast<int64_t>(indexes.size()), ErrorCode::InvalidModel,
                 "{}: the pool holds more n-grams than ngram_indexes has entries", n.describe());
      std::vector<int64_t> gram(items.begin() + k, items.begin() + k + size);
      HODU_CHECK(by_size[size].emplace(std::move(gram), indexes[id]).second, ErrorCode::InvalidModel,
                 "{}: the pool holds a {}-gram twice (pool entry {})", n.describe(), size, k);
    }
  }
  HODU_CHECK(id <= static_cast<int64_t>(indexes.size()), ErrorCode::InvalidModel,
             "{}: the pool holds {} n-grams but ngram_indexes has only {} entries", n.describe(), id, indexes.size());
  std::vector<int64_t> grams, start(static_cast<size_t>(max_gram + 1), 0), cnt(static_cast<size_t>(max_gram + 1), 0);
  for (int64_t s = 1; s <= max_gram; ++s) {
    start[s] = static_cast<int64_t>(grams.size());
    cnt[s] = static_cast<int64_t>(by_size[s].size());
    for (const auto& [g, o] : by_size[s]) {
      grams.insert(grams.end(), g.begin(), g.end());
      grams.push_back(o);
    }
  }
  auto xs = cg.shape_of(n.inputs[0]);
  HODU_CHECK(xs.size() <= 2, ErrorCode::InvalidModel, "{}: input must be [C] or [N, C]", n.describe());
  SymInt rows = xs.size() == 2 ? xs[0] : SymInt(1), cols = xs.empty() ? SymInt(1) : xs.back();
  if (xs.size() == 2 && !rows.known())
    cg.emit(fmt::format("if ({} < 1) return hm_fail(m, 4, \"%s\", {});", rows,
                        c_string_literal(n.describe() + ": the input has no rows")));
  need_ml_kernels(cg);
  std::string x = i64_in(cg, n.inputs[0]);
  std::string freq = fmt::format("((int64_t*){})", cg.scratch(out_size * 8));
  std::string gram = fmt::format("((int64_t*){})", cg.scratch(max_gram * 8));
  cg.define(n.outputs[0], DType::F32, cg.shape_of(n.outputs[0]));
  cg.emit(fmt::format("hk_tfidf({}, (float*){}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {});", x,
                      cg.ptr(n.outputs[0]), rows, cols, out_size, min_gram, max_gram, max_skip,
                      weight_table(cg, grams, DType::I64, "int64_t"), cg.table(start), cg.table(cnt),
                      mode == "TF" ? 0 : mode == "IDF" ? 1 : 2, weights.empty() ? "NULL" : cg.float_table(weights),
                      freq, gram));
}

}  // namespace

std::vector<std::string> ml_op_names() {
  return {"TreeEnsemble", "LinearRegressor",   "Scaler", "Normalizer", "Binarizer", "Imputer", "OneHotEncoder",
          "LabelEncoder", "ArrayFeatureExtractor", "FeatureVectorizer"};
}

bool is_compiled_ml_op(const Node& n) {
  if (n.domain != kMl) return false;
  auto names = ml_op_names();
  return std::find(names.begin(), names.end(), n.op_type) != names.end();
}

bool emit_ml_op(Codegen& cg, const Node& n) {
  if (n.domain.empty() && n.op_type == "TfIdfVectorizer") {
    emit_tfidf(cg, n);
    return true;
  }
  if (!is_compiled_ml_op(n)) return false;
  const std::string& op = n.op_type;
  if (op == "TreeEnsemble") emit_tree_ensemble(cg, n);
  else if (op == "LinearRegressor") emit_linear_regressor(cg, n);
  else if (op == "Scaler" || op == "Normalizer") emit_scaler_normalizer(cg, n);
  else if (op == "Binarizer" || op == "Imputer") emit_binarizer_imputer(cg, n);
  else if (op == "OneHotEncoder") emit_one_hot_encoder(cg, n);
  else if (op == "LabelEncoder") emit_label_encoder(cg, n);
  else if (op == "ArrayFeatureExtractor") emit_array_feature_extractor(cg, n);
  else emit_feature_vectorizer(cg, n);
  return true;
}

}  // namespace hodu::compilers::c
