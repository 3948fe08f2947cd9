// ai.onnx.ml: ArrayFeatureExtractor, Binarizer, LabelEncoder (opset 4, tensor
// attributes), TreeEnsemble (opset 5), Scaler, Normalizer, Imputer,
// OneHotEncoder, CategoryMapper, FeatureVectorizer, LinearRegressor.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <unordered_map>

#include "engines/interp/ops/tensor_util.h"

namespace hodu::interp {
namespace {

constexpr const char* kMl = "ai.onnx.ml";

// Input as doubles, checking it is one of float/double/int32/int64.
std::vector<double> numeric_input(const KernelContext& ctx, size_t i) {
  const Tensor& x = ctx.input(i);
  switch (x.dtype()) {
    case DType::F32: case DType::F64: case DType::I32: case DType::I64: case DType::F16: break;
    default: ctx.fail(ErrorCode::Unsupported, "input {} has dtype {}; float, double, int32 or int64 needed", i,
                      dtype_name(x.dtype()));
  }
  return x.to_doubles();
}

// [N, C] view of an input of rank 1 ([C] → N = 1) or 2.
std::pair<int64_t, int64_t> rows_cols(const KernelContext& ctx, const Tensor& x) {
  if (x.rank() == 1) return {1, x.dim(0)};
  if (x.rank() == 2) return {x.dim(0), x.dim(1)};
  if (x.rank() == 0) return {1, 1};
  ctx.fail(ErrorCode::InvalidArgument, "input must have rank 1 or 2, got {}", x.type_string());
}

Tensor f32_tensor(const std::vector<double>& v, std::vector<int64_t> shape) {
  Tensor out = Tensor::empty(DType::F32, std::move(shape));
  float* p = out.data<float>();
  for (size_t i = 0; i < v.size(); ++i) p[i] = static_cast<float>(v[i]);
  return out;
}

void array_feature_extractor_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& it = ctx.input(1);
  if (it.rank() > 2 || (it.rank() == 2 && it.dim(0) != 1))
    ctx.fail(ErrorCode::InvalidArgument, "indices must be 1-D or [1, n], got {}", it.type_string());
  if (x.rank() == 0) ctx.fail(ErrorCode::InvalidArgument, "X must have rank >= 1");
  auto ids = it.to_int64s();
  int64_t c = x.dim(-1);
  for (int64_t v : ids)
    if (v < 0 || v >= c) ctx.fail(ErrorCode::InvalidArgument, "index {} is out of range for {} features", v, c);
  int64_t rows = x.numel() / std::max<int64_t>(c, 1);
  if (c == 0) rows = prod(x.shape(), 0, x.rank() - 1);
  int64_t k = static_cast<int64_t>(ids.size());
  std::vector<int64_t> idx;
  idx.reserve(static_cast<size_t>(rows * k));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < k; ++j) idx.push_back(r * c + ids[j]);
  std::vector<int64_t> shape;
  if (x.rank() == 1) shape = {1, k};
  else {
    shape.assign(x.shape().begin(), x.shape().end() - 1);
    shape.push_back(k);
  }
  Tensor src = to_movable(x);
  ctx.set_output(0, from_movable(take_flat(ctx, src, idx, shape), x.dtype()));
}

void binarizer_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  double th = ctx.node.get_float("threshold", 0.f);
  Tensor w = widen(x).contiguous();
  Tensor out = Tensor::empty(w.dtype(), x.shape());
  dispatch_numeric(ctx, w.dtype(), [&]<typename T>() {
    const T* s = w.data<T>();
    T* d = out.data<T>();
    T t = static_cast<T>(th);
    if constexpr (std::is_floating_point_v<T>) {
      for (int64_t i = 0; i < x.numel(); ++i) d[i] = std::isnan(s[i]) ? s[i] : (s[i] > t ? T(1) : T(0));
    } else {
      for (int64_t i = 0; i < x.numel(); ++i) d[i] = static_cast<double>(s[i]) > th ? T(1) : T(0);
    }
  });
  ctx.set_output(0, narrow_to(out, x.dtype()));
}

void label_encoder_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  // Keys.
  Tensor keys;
  if (const Tensor* t = ctx.node.get_tensor("keys_tensor")) keys = *t;
  else if (ctx.node.has_attr("keys_strings")) {
    auto s = ctx.node.get_strings("keys_strings");
    keys = Tensor::from_strings({static_cast<int64_t>(s.size())}, s);
  } else if (ctx.node.has_attr("keys_int64s")) {
    auto v = ctx.node.get_ints("keys_int64s");
    keys = Tensor::from_vector(DType::I64, {static_cast<int64_t>(v.size())}, v);
  } else if (ctx.node.has_attr("keys_floats")) {
    auto v = ctx.node.get_floats("keys_floats");
    keys = Tensor::from_vector(DType::F32, {static_cast<int64_t>(v.size())}, v);
  } else {
    ctx.fail(ErrorCode::InvalidModel, "LabelEncoder has no keys");
  }
  // Values and default.
  Tensor values, def;
  if (const Tensor* t = ctx.node.get_tensor("values_tensor")) {
    values = *t;
  } else if (ctx.node.has_attr("values_strings")) {
    auto s = ctx.node.get_strings("values_strings");
    values = Tensor::from_strings({static_cast<int64_t>(s.size())}, s);
  } else if (ctx.node.has_attr("values_int64s")) {
    auto v = ctx.node.get_ints("values_int64s");
    values = Tensor::from_vector(DType::I64, {static_cast<int64_t>(v.size())}, v);
  } else if (ctx.node.has_attr("values_floats")) {
    auto v = ctx.node.get_floats("values_floats");
    values = Tensor::from_vector(DType::F32, {static_cast<int64_t>(v.size())}, v);
  } else {
    ctx.fail(ErrorCode::InvalidModel, "LabelEncoder has no values");
  }
  if (keys.numel() != values.numel())
    ctx.fail(ErrorCode::InvalidModel, "LabelEncoder has {} keys and {} values", keys.numel(), values.numel());
  if (const Tensor* t = ctx.node.get_tensor("default_tensor")) {
    if (t->dtype() != values.dtype() || t->numel() != 1)
      ctx.fail(ErrorCode::InvalidModel, "default_tensor must hold one {} value", dtype_name(values.dtype()));
    def = *t;
  } else if (values.dtype() == DType::String) {
    def = Tensor::from_strings({1}, {ctx.node.get_string("default_string", "_Unused")});
  } else if (values.dtype() == DType::I64) {
    def = Tensor::from_vector<int64_t>(DType::I64, {1}, {ctx.node.get_int("default_int64", -1)});
  } else if (values.dtype() == DType::F32) {
    def = Tensor::from_vector<float>(DType::F32, {1}, {ctx.node.get_float("default_float", -0.0f)});
  } else {
    def = Tensor::empty(values.dtype(), {1});
  }
  int64_t nk = keys.numel();
  bool str_keys = keys.dtype() == DType::String;
  if (str_keys != (x.dtype() == DType::String))
    ctx.fail(ErrorCode::InvalidArgument, "input {} does not match the {} keys", x.type_string(),
             dtype_name(keys.dtype()));
  int64_t n = x.numel();
  std::vector<int64_t> idx(static_cast<size_t>(n), nk);  // nk → the default
  if (str_keys) {
    Tensor kc = keys.contiguous(), xc = x.contiguous();
    std::unordered_map<std::string, int64_t> m;
    for (int64_t i = nk; i-- > 0;) m[kc.string_data()[i]] = i;
    for (int64_t i = 0; i < n; ++i)
      if (auto f = m.find(xc.string_data()[i]); f != m.end()) idx[i] = f->second;
  } else if (dtype_is_float(keys.dtype()) || dtype_is_float(x.dtype())) {
    auto kv = keys.to_doubles(), xv = x.to_doubles();
    std::map<double, int64_t> m;
    int64_t nan_idx = nk;
    for (int64_t i = nk; i-- > 0;) {
      if (std::isnan(kv[i])) nan_idx = i;
      else m[kv[i]] = i;
    }
    for (int64_t i = 0; i < n; ++i) {
      if (std::isnan(xv[i])) idx[i] = nan_idx;
      else if (auto f = m.find(xv[i]); f != m.end()) idx[i] = f->second;
    }
  } else {
    auto kv = keys.to_int64s(), xv = x.to_int64s();
    std::unordered_map<int64_t, int64_t> m;
    for (int64_t i = nk; i-- > 0;) m[kv[i]] = i;
    for (int64_t i = 0; i < n; ++i)
      if (auto f = m.find(xv[i]); f != m.end()) idx[i] = f->second;
  }
  Tensor table = concat_tensors(ctx, {values.reshape({nk}), def.reshape({1})}, 0);
  Tensor src = to_movable(table);
  ctx.set_output(0, from_movable(take_flat(ctx, src, idx, x.shape()), values.dtype()));
}

// ---- Tree ensembles ---------------------------------------------------------

enum class Cmp { Leq, Lt, Gte, Gt, Eq, Neq, Member };

struct TreeNode {
  Cmp mode = Cmp::Leq;
  int64_t feature = 0;
  double split = 0;
  bool missing_true = false;
  int64_t t = 0, f = 0;
  bool t_leaf = false, f_leaf = false;
  std::vector<double> members;
};

bool node_true(const TreeNode& n, double v) {
  if (std::isnan(v) && n.missing_true) return true;
  switch (n.mode) {
    case Cmp::Leq: return v <= n.split;
    case Cmp::Lt: return v < n.split;
    case Cmp::Gte: return v >= n.split;
    case Cmp::Gt: return v > n.split;
    case Cmp::Eq: return v == n.split;
    case Cmp::Neq: return v != n.split;
    case Cmp::Member: return std::find(n.members.begin(), n.members.end(), v) != n.members.end();
  }
  return false;
}

// Inverse error function: Giles' single-precision approximation refined by two Newton steps.
double erfinv(double x) {
  if (x <= -1) return -std::numeric_limits<double>::infinity();
  if (x >= 1) return std::numeric_limits<double>::infinity();
  double w = -std::log((1 - x) * (1 + x)), r;
  if (w < 5) {
    w -= 2.5;
    r = 2.81022636e-08;
    for (double c : {3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
                     -0.00417768164, 0.246640727, 1.50140941})
      r = c + r * w;
  } else {
    w = std::sqrt(w) - 3;
    r = -0.000200214257;
    for (double c : {0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613, 0.00943887047,
                     1.00167406, 2.83297682})
      r = c + r * w;
  }
  r *= x;
  for (int k = 0; k < 2; ++k) r -= (std::erf(r) - x) / (2 / std::sqrt(M_PI) * std::exp(-r * r));
  return r;
}

// Post transforms: NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO, PROBIT.
void post_transform(std::vector<double>& s, int kind) {
  switch (kind) {
    case 1: case 3: {
      double mx = -std::numeric_limits<double>::infinity();
      for (double v : s)
        if (kind == 1 || v != 0) mx = std::max(mx, v);
      double sum = 0;
      for (double& v : s) {
        v = (kind == 3 && v == 0) ? 0 : std::exp(v - mx);
        sum += v;
      }
      for (double& v : s) v = sum == 0 ? 0 : v / sum;
      break;
    }
    case 2:
      for (double& v : s) v = 1 / (1 + std::exp(-v));
      break;
    case 4:
      for (double& v : s) v = std::sqrt(2.0) * erfinv(2 * v - 1);
      break;
    default:
      break;
  }
}

void tree_ensemble_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (!dtype_is_float(x.dtype())) ctx.fail(ErrorCode::Unsupported, "X must be a float tensor, got {}", x.type_string());
  auto [rows, cols] = rows_cols(ctx, x);
  auto xv = x.to_doubles();
  const Node& nd = ctx.node;
  auto feat = nd.get_ints("nodes_featureids");
  auto tids = nd.get_ints("nodes_truenodeids"), fids = nd.get_ints("nodes_falsenodeids");
  auto tleaf = nd.get_ints("nodes_trueleafs"), fleaf = nd.get_ints("nodes_falseleafs");
  auto leaf_t = nd.get_ints("leaf_targetids");
  auto roots = nd.get_ints("tree_roots");
  std::vector<double> splits, leaf_w, members, miss;
  if (const Tensor* t = nd.get_tensor("nodes_splits")) splits = t->to_doubles();
  if (const Tensor* t = nd.get_tensor("leaf_weights")) leaf_w = t->to_doubles();
  if (const Tensor* t = nd.get_tensor("membership_values")) members = t->to_doubles();
  // ints in the spec (some writers use a tensor); nodes_modes a tensor (or ints).
  auto is_tensor = [&](const char* name) {
    const Attribute* a = nd.attr(name);
    return a && a->kind == Attribute::Kind::Tensor;
  };
  if (is_tensor("nodes_missing_value_tracks_true")) miss = nd.get_tensor("nodes_missing_value_tracks_true")->to_doubles();
  else for (int64_t v : nd.get_ints("nodes_missing_value_tracks_true")) miss.push_back(static_cast<double>(v));
  std::vector<int64_t> modes;
  if (is_tensor("nodes_modes")) modes = nd.get_tensor("nodes_modes")->to_int64s();
  else modes = nd.get_ints("nodes_modes");
  size_t nn = feat.size();
  if (tids.size() != nn || fids.size() != nn || tleaf.size() != nn || fleaf.size() != nn || splits.size() != nn ||
      modes.size() != nn || (!miss.empty() && miss.size() != nn))
    ctx.fail(ErrorCode::InvalidModel, "the nodes_* attributes have different lengths");
  if (leaf_t.size() != leaf_w.size()) ctx.fail(ErrorCode::InvalidModel, "leaf_targetids and leaf_weights differ in length");
  int64_t n_targets = nd.get_int("n_targets", 0);
  int agg = static_cast<int>(nd.get_int("aggregate_function", 1));
  int post = static_cast<int>(nd.get_int("post_transform", 0));
  if (n_targets <= 0) ctx.fail(ErrorCode::InvalidModel, "n_targets must be positive");
  std::vector<TreeNode> nodes(nn);
  size_t mpos = 0;
  for (size_t i = 0; i < nn; ++i) {
    TreeNode& n = nodes[i];
    if (modes[i] < 0 || modes[i] > 6) ctx.fail(ErrorCode::InvalidModel, "unknown node mode {}", modes[i]);
    n.mode = static_cast<Cmp>(modes[i]);
    n.feature = feat[i];
    if (n.feature < 0 || n.feature >= cols)
      ctx.fail(ErrorCode::InvalidArgument, "node {} reads feature {} of {}", i, n.feature, cols);
    n.split = splits[i];
    n.missing_true = !miss.empty() && miss[i] != 0;
    n.t = tids[i];
    n.f = fids[i];
    n.t_leaf = tleaf[i] != 0;
    n.f_leaf = fleaf[i] != 0;
    for (int side = 0; side < 2; ++side) {
      int64_t id = side ? n.f : n.t;
      bool leaf = side ? n.f_leaf : n.t_leaf;
      if (id < 0 || id >= static_cast<int64_t>(leaf ? leaf_w.size() : nn))
        ctx.fail(ErrorCode::InvalidModel, "node {} points to a missing {} {}", i, leaf ? "leaf" : "node", id);
    }
    if (n.mode == Cmp::Member) {
      while (mpos < members.size() && !std::isnan(members[mpos])) n.members.push_back(members[mpos++]);
      if (mpos >= members.size() && n.members.empty())
        ctx.fail(ErrorCode::InvalidModel, "membership_values has no set for node {}", i);
      ++mpos;  // the NaN separator
    }
  }
  for (int64_t t : leaf_t)
    if (t < 0 || t >= n_targets) ctx.fail(ErrorCode::InvalidModel, "leaf target {} is out of range", t);
  for (int64_t r : roots)
    if (r < 0 || r >= static_cast<int64_t>(nn)) ctx.fail(ErrorCode::InvalidModel, "tree root {} is out of range", r);
  bool is_f64 = x.dtype() == DType::F64;
  auto round = [&](double v) { return is_f64 ? v : static_cast<double>(static_cast<float>(v)); };
  double init = agg == 2 ? std::numeric_limits<double>::max() : agg == 3 ? std::numeric_limits<double>::lowest() : 0.0;
  if (!is_f64 && agg == 2) init = std::numeric_limits<float>::max();
  if (!is_f64 && agg == 3) init = std::numeric_limits<float>::lowest();
  std::vector<double> out(static_cast<size_t>(rows * n_targets));
  double ntrees = static_cast<double>(roots.size());
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = xv.data() + r * cols;
    std::vector<double> acc(n_targets, init);
    for (int64_t root : roots) {
      int64_t leaf;
      const TreeNode& rn = nodes[root];
      if (rn.t_leaf && rn.f_leaf && rn.t == rn.f) {
        leaf = root;
      } else {
        int64_t cur = root;
        size_t steps = 0;
        for (;;) {
          const TreeNode& n = nodes[cur];
          bool go = node_true(n, row[n.feature]);
          int64_t next = go ? n.t : n.f;
          if (go ? n.t_leaf : n.f_leaf) { leaf = next; break; }
          cur = next;
          if (++steps > nn) ctx.fail(ErrorCode::InvalidModel, "tree from root {} has a cycle", root);
        }
      }
      double w = leaf_w[leaf];
      double& a = acc[leaf_t[leaf]];
      switch (agg) {
        case 0: a = round(a + w / ntrees); break;
        case 1: a = round(a + w); break;
        case 2: a = std::min(a, round(w)); break;
        case 3: a = std::max(a, round(w)); break;
        default: ctx.fail(ErrorCode::InvalidModel, "unknown aggregate_function {}", agg);
      }
    }
    post_transform(acc, post);
    std::copy(acc.begin(), acc.end(), out.begin() + r * n_targets);
  }
  Tensor res = Tensor::from_vector(DType::F64, {rows, n_targets}, out);
  ctx.set_output(0, res.cast(x.dtype()));
}

// ---- Simple transforms ------------------------------------------------------

void scaler_kernel(KernelContext& ctx) {
  auto xv = numeric_input(ctx, 0);
  const Tensor& x = ctx.input(0);
  auto [rows, cols] = rows_cols(ctx, x);
  auto off = ctx.node.get_floats("offset"), sc = ctx.node.get_floats("scale");
  auto pick = [&](const std::vector<float>& v, int64_t c, float def) -> double {
    if (v.empty()) return def;
    if (v.size() == 1) return v[0];
    if (static_cast<int64_t>(v.size()) != cols)
      ctx.fail(ErrorCode::InvalidModel, "offset/scale have {} values for {} features", v.size(), cols);
    return v[c];
  };
  std::vector<float> out(xv.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      size_t i = r * cols + c;
      out[i] = (static_cast<float>(xv[i]) - static_cast<float>(pick(off, c, 0))) * static_cast<float>(pick(sc, c, 1));
    }
  ctx.set_output(0, Tensor::from_vector(DType::F32, x.shape(), out));
}

void normalizer_kernel(KernelContext& ctx) {
  auto xv = numeric_input(ctx, 0);
  const Tensor& x = ctx.input(0);
  auto [rows, cols] = rows_cols(ctx, x);
  std::string norm = ctx.node.get_string("norm", "MAX");
  if (norm != "MAX" && norm != "L1" && norm != "L2") ctx.fail(ErrorCode::InvalidModel, "unknown norm '{}'", norm);
  std::vector<float> out(xv.size());
  for (int64_t r = 0; r < rows; ++r) {
    float d = 0;
    if (norm == "MAX") {
      d = -std::numeric_limits<float>::infinity();
      for (int64_t c = 0; c < cols; ++c) d = std::max(d, static_cast<float>(xv[r * cols + c]));
    } else if (norm == "L1") {
      for (int64_t c = 0; c < cols; ++c) d += std::abs(static_cast<float>(xv[r * cols + c]));
    } else {
      for (int64_t c = 0; c < cols; ++c) d += static_cast<float>(xv[r * cols + c]) * static_cast<float>(xv[r * cols + c]);
      d = std::sqrt(d);
    }
    for (int64_t c = 0; c < cols; ++c) {
      float v = static_cast<float>(xv[r * cols + c]);
      out[r * cols + c] = d == 0 ? v : v / d;
    }
  }
  ctx.set_output(0, Tensor::from_vector(DType::F32, x.shape(), out));
}

void imputer_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  auto xv = numeric_input(ctx, 0);
  auto [rows, cols] = rows_cols(ctx, x);
  bool is_float = dtype_is_float(x.dtype());
  std::vector<double> imp;
  double repl;
  if (is_float) {
    for (float f : ctx.node.get_floats("imputed_value_floats")) imp.push_back(f);
    repl = ctx.node.get_float("replaced_value_float", 0.f);
  } else {
    for (int64_t v : ctx.node.get_ints("imputed_value_int64s")) imp.push_back(static_cast<double>(v));
    repl = static_cast<double>(ctx.node.get_int("replaced_value_int64", 0));
  }
  if (imp.empty() || (imp.size() != 1 && static_cast<int64_t>(imp.size()) != cols))
    ctx.fail(ErrorCode::InvalidModel, "imputed values have {} entries for {} features", imp.size(), cols);
  Tensor out = x.clone();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      int64_t i = r * cols + c;
      double v = xv[i];
      bool hit = std::isnan(repl) ? std::isnan(v) : v == repl;
      if (hit) out.set_double(i, imp.size() == 1 ? imp[0] : imp[c]);
    }
  ctx.set_output(0, out);
}

void one_hot_encoder_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  bool zeros = ctx.node.get_int("zeros", 1) != 0;
  int64_t n = x.numel();
  std::vector<int64_t> pos(static_cast<size_t>(n), -1);
  int64_t ncat;
  if (x.dtype() == DType::String) {
    auto cats = ctx.node.get_strings("cats_strings");
    ncat = static_cast<int64_t>(cats.size());
    std::unordered_map<std::string, int64_t> m;
    for (int64_t i = 0; i < ncat; ++i) m.emplace(cats[i], i);
    Tensor xc = x.contiguous();
    for (int64_t i = 0; i < n; ++i)
      if (auto f = m.find(xc.string_data()[i]); f != m.end()) pos[i] = f->second;
  } else {
    auto cats = ctx.node.get_ints("cats_int64s");
    ncat = static_cast<int64_t>(cats.size());
    std::unordered_map<int64_t, int64_t> m;
    for (int64_t i = 0; i < ncat; ++i) m.emplace(cats[i], i);
    auto xv = numeric_input(ctx, 0);
    for (int64_t i = 0; i < n; ++i)
      if (auto f = m.find(static_cast<int64_t>(xv[i])); f != m.end()) pos[i] = f->second;
  }
  if (ncat == 0) ctx.fail(ErrorCode::InvalidModel, "OneHotEncoder has no categories");
  if (!zeros)
    for (int64_t p : pos)
      if (p < 0) ctx.fail(ErrorCode::InvalidArgument, "input holds a value outside the categories (zeros=0)");
  auto shape = x.shape();
  shape.push_back(ncat);
  Tensor out = Tensor::empty(DType::F32, shape);
  float* d = out.data<float>();
  for (int64_t i = 0; i < n; ++i)
    if (pos[i] >= 0) d[i * ncat + pos[i]] = 1.f;
  ctx.set_output(0, out);
}

void category_mapper_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  auto cs = ctx.node.get_strings("cats_strings");
  auto ci = ctx.node.get_ints("cats_int64s");
  if (cs.size() != ci.size()) ctx.fail(ErrorCode::InvalidModel, "cats_strings and cats_int64s differ in length");
  int64_t n = x.numel();
  if (x.dtype() == DType::String) {
    std::unordered_map<std::string, int64_t> m;
    for (size_t i = 0; i < cs.size(); ++i) m.emplace(cs[i], ci[i]);
    int64_t def = ctx.node.get_int("default_int64", -1);
    Tensor xc = x.contiguous();
    Tensor out = Tensor::empty(DType::I64, x.shape());
    int64_t* d = out.data<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
      auto f = m.find(xc.string_data()[i]);
      d[i] = f == m.end() ? def : f->second;
    }
    ctx.set_output(0, out);
  } else if (x.dtype() == DType::I64) {
    std::unordered_map<int64_t, std::string> m;
    for (size_t i = 0; i < cs.size(); ++i) m.emplace(ci[i], cs[i]);
    std::string def = ctx.node.get_string("default_string", "_Unused");
    auto xv = x.to_int64s();
    std::vector<std::string> out(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      auto f = m.find(xv[i]);
      out[i] = f == m.end() ? def : f->second;
    }
    ctx.set_output(0, Tensor::from_strings(x.shape(), out));
  } else {
    ctx.fail(ErrorCode::Unsupported, "input must be string or int64, got {}", x.type_string());
  }
}

void feature_vectorizer_kernel(KernelContext& ctx) {
  auto dims = ctx.node.get_ints("inputdimensions");
  if (dims.size() != ctx.num_inputs())
    ctx.fail(ErrorCode::InvalidModel, "inputdimensions has {} values for {} inputs", dims.size(), ctx.num_inputs());
  int64_t total = 0;
  for (int64_t d : dims) total += d;
  int64_t rows = -1;
  std::vector<std::vector<double>> vals;
  std::vector<int64_t> widths;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const Tensor& t = ctx.input(i);
    int64_t r = t.rank() <= 1 ? 1 : prod(t.shape(), 0, t.rank() - 1);
    int64_t w = t.rank() == 0 ? 1 : t.dim(-1);
    if (rows >= 0 && r != rows) ctx.fail(ErrorCode::InvalidArgument, "inputs have different batch sizes");
    rows = r;
    vals.push_back(numeric_input(ctx, i));
    widths.push_back(w);
  }
  if (rows < 0) rows = 0;
  std::vector<double> out(static_cast<size_t>(rows * total), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t off = 0;
    for (size_t i = 0; i < vals.size(); ++i) {
      for (int64_t c = 0; c < std::min(dims[i], widths[i]); ++c) out[r * total + off + c] = vals[i][r * widths[i] + c];
      off += dims[i];
    }
  }
  ctx.set_output(0, f32_tensor(out, {rows, total}));
}

int post_transform_code(const KernelContext& ctx) {
  std::string p = ctx.node.get_string("post_transform", "NONE");
  if (p == "NONE") return 0;
  if (p == "SOFTMAX") return 1;
  if (p == "LOGISTIC") return 2;
  if (p == "SOFTMAX_ZERO") return 3;
  if (p == "PROBIT") return 4;
  ctx.fail(ErrorCode::InvalidModel, "unknown post_transform '{}'", p);
}

void linear_regressor_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  auto xv = numeric_input(ctx, 0);
  auto [rows, cols] = rows_cols(ctx, x);
  auto coef = ctx.node.get_floats("coefficients");
  auto icpt = ctx.node.get_floats("intercepts");
  int64_t targets = ctx.node.get_int("targets", 1);
  int post = post_transform_code(ctx);
  if (targets <= 0 || static_cast<int64_t>(coef.size()) != targets * cols)
    ctx.fail(ErrorCode::InvalidModel, "coefficients has {} values, expected {} targets x {} features", coef.size(),
             targets, cols);
  if (!icpt.empty() && static_cast<int64_t>(icpt.size()) != targets)
    ctx.fail(ErrorCode::InvalidModel, "intercepts has {} values for {} targets", icpt.size(), targets);
  std::vector<double> out(static_cast<size_t>(rows * targets));
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> s(targets);
    for (int64_t t = 0; t < targets; ++t) {
      float acc = icpt.empty() ? 0.f : icpt[t];
      for (int64_t c = 0; c < cols; ++c) acc += static_cast<float>(xv[r * cols + c]) * coef[t * cols + c];
      s[t] = acc;
    }
    post_transform(s, post);
    std::copy(s.begin(), s.end(), out.begin() + r * targets);
  }
  ctx.set_output(0, f32_tensor(out, {rows, targets}));
}

}  // namespace

void register_ml_ops(OpTable& t) {
  t.add(kMl, "ArrayFeatureExtractor", array_feature_extractor_kernel);
  t.add(kMl, "Binarizer", binarizer_kernel);
  t.add(kMl, "LabelEncoder", label_encoder_kernel);
  t.add(kMl, "TreeEnsemble", tree_ensemble_kernel);
  t.add(kMl, "Scaler", scaler_kernel);
  t.add(kMl, "Normalizer", normalizer_kernel);
  t.add(kMl, "Imputer", imputer_kernel);
  t.add(kMl, "OneHotEncoder", one_hot_encoder_kernel);
  t.add(kMl, "CategoryMapper", category_mapper_kernel);
  t.add(kMl, "FeatureVectorizer", feature_vectorizer_kernel);
  t.add(kMl, "LinearRegressor", linear_regressor_kernel);
}

}  // namespace hodu::interp
