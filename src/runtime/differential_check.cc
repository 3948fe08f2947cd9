#include "runtime/differential_check.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "core/error.h"
#include "passes/passes.h"

namespace hodu {
namespace {

// Every name a graph's nodes read, subgraphs included (a body reads outer values by name).
void collect_reads(const Graph& g, std::set<std::string>& reads) {
  for (const auto& n : g.nodes) {
    for (const auto& in : n.inputs)
      if (!in.empty()) reads.insert(in);
    for (const auto& a : n.attributes) {
      if (a.g) collect_reads(*a.g, reads);
      for (const auto& sg : a.graphs) collect_reads(*sg, reads);
    }
  }
}

std::string shape_text(const std::vector<int64_t>& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

ValueDifference compare_tensors(const std::string& name, const Tensor& got, const Tensor& want, double tol,
                                double abs_tol) {
  ValueDifference d(name);
  if (got.shape() != want.shape() || got.dtype() != want.dtype()) {
    d.matches = false;
    d.note = fmt::format("{}{} vs {}{} expected", dtype_onnx_name(got.dtype()), shape_text(got.shape()),
                         dtype_onnx_name(want.dtype()), shape_text(want.shape()));
    return d;
  }
  if (!dtype_is_float(got.dtype()) && !dtype_is_complex(got.dtype())) {
    // Integers, bools and strings compare exactly (int64 through doubles would round).
    d.matches = tensors_bitwise_equal(got, want);
    if (d.matches || got.dtype() == DType::String) {
      if (!d.matches) d.note = "elements differ (exact comparison)";
      return d;
    }
    // Say how many and by how much (a quantized value one quantum off reads "max abs 1").
    std::vector<int64_t> a = got.to_int64s(), b = want.to_int64s();
    int64_t differing = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i] == b[i]) continue;
      ++differing;
      d.max_abs = std::max(d.max_abs, std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
    }
    d.note = fmt::format("{} of {} elements differ (exact comparison)", differing, a.size());
    return d;
  }
  std::vector<double> a = got.to_doubles(), b = want.to_doubles();
  double num = 0, den = 0;
  int64_t nan_mismatch = 0, exact_mismatch_inf = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    bool an = std::isnan(a[i]), bn = std::isnan(b[i]);
    if (an || bn) {
      nan_mismatch += an != bn;
      continue;
    }
    if (std::isinf(a[i]) || std::isinf(b[i])) {
      if (a[i] != b[i]) {
        ++exact_mismatch_inf;
        d.max_abs = INFINITY;
      }
      continue;
    }
    double e = a[i] - b[i];
    num += e * e;
    den += b[i] * b[i];
    d.max_abs = std::max(d.max_abs, std::abs(e));
  }
  d.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  d.matches = nan_mismatch == 0 && exact_mismatch_inf == 0 && (d.rel_l2 <= tol || d.max_abs <= abs_tol);
  if (nan_mismatch) d.note = fmt::format("NaN in {} places where the other has a number", nan_mismatch);
  return d;
}

std::vector<ValueDifference> compare_runs(const std::vector<NamedValue>& got, const std::vector<NamedValue>& want,
                                          const DifferentialOptions& o) {
  std::vector<ValueDifference> out;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i)
    out.push_back(compare_values(want[i].name, got[i].value, want[i].value, o.tolerance, o.abs_tolerance));
  return out;
}

bool all_match(const std::vector<ValueDifference>& d) {
  for (const auto& v : d)
    if (!v.matches) return false;
  return true;
}

struct Runs {
  std::vector<NamedValue> engine, reference;
};

Runs run_both(Model model, const std::map<std::string, RuntimeValue>& feeds, const DifferentialOptions& o) {
  SessionOptions ref;
  ref.engine = "interp";
  ref.seed = o.engine.seed;
  ref.threads = 1;
  Model optimized = model;
  if (o.opt_level >= 0) passes::optimize(optimized, {o.opt_level, {}});
  Runs r;
  r.reference = Session::from_model(std::move(model), ref)->run(feeds);
  r.engine = Session::from_model(std::move(optimized), o.engine)->run(feeds);
  return r;
}

}  // namespace

std::string ValueDifference::to_string() const {
  std::string s = fmt::format("{}: {} (rel L2 {:.3g}, max abs {:.3g})", value, matches ? "ok" : "DIFFERS", rel_l2,
                              max_abs);
  if (!note.empty()) s += "; " + note;
  return s;
}

ValueDifference compare_values(const std::string& name, const RuntimeValue& got, const RuntimeValue& expected,
                               double tolerance, double abs_tolerance) {
  if (got.kind != expected.kind) {
    ValueDifference d(name);
    d.matches = false;
    d.note = "different kinds of value (tensor / sequence / optional)";
    return d;
  }
  if (got.is_tensor()) return compare_tensors(name, got.tensor, expected.tensor, tolerance, abs_tolerance);
  if (got.is_sequence()) {
    ValueDifference d(name);
    if (got.sequence.size() != expected.sequence.size()) {
      d.matches = false;
      d.note = fmt::format("sequence of {} vs {} expected", got.sequence.size(), expected.sequence.size());
      return d;
    }
    for (size_t i = 0; i < got.sequence.size(); ++i) {
      auto e = compare_tensors(name, got.sequence[i], expected.sequence[i], tolerance, abs_tolerance);
      d.rel_l2 = std::max(d.rel_l2, e.rel_l2);
      d.max_abs = std::max(d.max_abs, e.max_abs);
      if (!e.matches) {
        d.matches = false;
        d.note = fmt::format("element {}: {}", i, e.note);
      }
    }
    return d;
  }
  return ValueDifference(name);
}

Model prefix_model(const Model& model, int last) {
  const Graph& g = model.graph;
  HODU_CHECK(last >= 0 && last < static_cast<int>(g.nodes.size()), ErrorCode::InvalidArgument,
             "prefix_model: node index {} out of range", last);
  Model m;
  m.ir_version = model.ir_version;
  m.opset_imports = model.opset_imports;
  m.producer_name = model.producer_name;
  m.graph.name = g.name;
  m.graph.inputs = g.inputs;
  m.graph.nodes.assign(g.nodes.begin(), g.nodes.begin() + last + 1);
  Graph rest;
  rest.nodes.assign(g.nodes.begin() + last + 1, g.nodes.end());
  std::set<std::string> read_later, read_here;
  collect_reads(rest, read_later);
  for (const auto& o : g.outputs) read_later.insert(o.name);
  collect_reads(m.graph, read_here);
  std::set<std::string> added;
  auto add_output = [&](const std::string& name) {
    if (name.empty() || !added.insert(name).second) return;
    Value v;
    v.name = name;
    if (auto t = g.type_of(name)) v.type = *t;
    m.graph.outputs.push_back(v);
  };
  for (int i = 0; i <= last; ++i)
    for (const auto& out : g.nodes[i].outputs)
      if (read_later.count(out)) add_output(out);
  for (const auto& out : g.nodes[last].outputs) add_output(out);
  for (const auto& [name, t] : g.initializers)
    if (read_here.count(name)) m.graph.initializers.emplace_back(name, t);
  for (const auto& [name, t] : g.value_types)
    if (read_here.count(name) || added.count(name)) m.graph.value_types.emplace(name, t);
  return m;
}

DifferentialReport differential_check(const Model& model, const std::map<std::string, RuntimeValue>& feeds,
                                      const DifferentialOptions& options) {
  DifferentialReport report;
  Runs full = run_both(model, feeds, options);
  report.outputs = compare_runs(full.engine, full.reference, options);
  report.ok = all_match(report.outputs);
  if (report.ok || !options.bisect) return report;
  const int n = static_cast<int>(model.graph.nodes.size());
  if (n == 0) return report;
  // Smallest k whose prefix differs; the whole model (k = n-1) does.
  std::map<int, bool> differs{{n - 1, true}};
  auto probe = [&](int k) {
    auto it = differs.find(k);
    if (it != differs.end()) return it->second;
    ++report.prefixes_run;
    Runs r = run_both(prefix_model(model, k), feeds, options);
    return differs[k] = !all_match(compare_runs(r.engine, r.reference, options));
  };
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (probe(mid)) hi = mid;
    else lo = mid + 1;
  }
  if (!probe(lo)) {
    report.note = "no prefix of the model differs on its own: the difference needs the whole graph";
    return report;
  }
  const Node& node = model.graph.nodes[lo];
  DifferentialReport::Divergence d;
  d.node_index = lo;
  d.node = node.describe();
  Runs r = run_both(prefix_model(model, lo), feeds, options);
  auto diffs = compare_runs(r.engine, r.reference, options);
  for (const auto& v : diffs)
    for (const auto& out : node.outputs)
      if (v.value == out) d.values.push_back(v);
  // A fused group may make an earlier frontier value differ only with this node included.
  for (const auto& v : diffs)
    if (!v.matches && std::find_if(d.values.begin(), d.values.end(),
                                   [&](const ValueDifference& x) { return x.value == v.value; }) == d.values.end())
      d.values.push_back(v);
  report.first = std::move(d);
  return report;
}

}  // namespace hodu
