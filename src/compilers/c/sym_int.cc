#include "compilers/c/sym_int.h"

#include <algorithm>
#include <map>

#include "core/error.h"

namespace hodu::compilers::c {
namespace {

thread_local SymTable* g_table = nullptr;

// Constants at least this large stand for "no bound" (a Slice's INT64_MAX end).
constexpr int64_t kHuge = int64_t{1} << 40;

SymTable& table() {
  HODU_CHECK(g_table, ErrorCode::Internal, "a run-time size was computed outside a generation (no SymScope)");
  return *g_table;
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

int64_t floor_mod(int64_t a, int64_t b) { return a - floor_div(a, b) * b; }

// A new run-time dim for `expr` built from operands.
SymInt opaque(const std::string& expr, std::optional<int64_t> lb, bool late) { return sym_expr(expr, lb, late); }

bool any_late(const SymInt& a, const SymInt& b) { return a.late() || b.late(); }

}  // namespace

SymInt::SymInt(int64_t v) {
  if (v != 0) terms_.push_back({v, {}});
}

SymInt SymInt::dim(int atom) {
  SymInt s;
  s.terms_.push_back({1, {atom}});
  return s;
}

int64_t SymInt::value() const {
  HODU_CHECK(known(), ErrorCode::Internal, "size {} is not known at build time", c());
  return terms_.empty() ? 0 : terms_[0].coef;
}

void SymInt::normalize() {
  for (auto& t : terms_) std::sort(t.atoms.begin(), t.atoms.end());
  std::sort(terms_.begin(), terms_.end(), [](const Term& a, const Term& b) { return a.atoms < b.atoms; });
  std::vector<Term> out;
  for (auto& t : terms_) {
    if (!out.empty() && out.back().atoms == t.atoms) out.back().coef += t.coef;
    else out.push_back(std::move(t));
  }
  out.erase(std::remove_if(out.begin(), out.end(), [](const Term& t) { return t.coef == 0; }), out.end());
  terms_ = std::move(out);
}

std::string SymInt::c() const {
  if (known()) return std::to_string(value());
  std::string s;
  bool single = terms_.size() == 1 && terms_[0].coef == 1 && terms_[0].atoms.size() == 1;
  for (size_t i = 0; i < terms_.size(); ++i) {
    const Term& t = terms_[i];
    int64_t coef = t.coef;
    if (i > 0) {
      s += coef < 0 ? " - " : " + ";
      coef = coef < 0 ? -coef : coef;
    } else if (coef == -1 && !t.atoms.empty()) {
      s += "-";
      coef = 1;
    }
    std::string term;
    for (int a : t.atoms) term += (term.empty() ? "" : " * ") + (g_table ? g_table->atom(a).text : fmt::format("S[{}]", a));
    if (coef != 1 || term.empty()) term = term.empty() ? std::to_string(coef) : fmt::format("{} * {}", term, coef);
    s += term;
  }
  return single ? s : "(" + s + ")";
}

bool SymInt::late() const {
  if (!g_table) return false;
  for (const auto& t : terms_)
    for (int a : t.atoms)
      if (g_table->atom(a).late) return true;
  return false;
}

std::optional<int64_t> SymInt::lower_bound() const {
  if (known()) return value();
  if (!g_table) return std::nullopt;
  // Every atom a is L_a + t_a with t_a >= 0 (L_a its bound): expanded over the t's, a
  // polynomial whose coefficients are all non-negative is at least its constant term
  // (b * s - b with b, s >= 1 is v + u * v, so >= 0).
  std::map<std::vector<int>, int64_t> expanded;
  for (const auto& t : terms_) {
    std::map<std::vector<int>, int64_t> partial{{{}, t.coef}};
    for (int a : t.atoms) {
      auto b = g_table->atom(a).lower_bound;
      if (!b || *b < 0) return std::nullopt;
      std::map<std::vector<int>, int64_t> next;
      for (const auto& [atoms, c] : partial) {
        next[atoms] += c * *b;
        std::vector<int> with = atoms;
        with.insert(std::upper_bound(with.begin(), with.end(), a), a);
        next[with] += c;
      }
      partial = std::move(next);
      if (partial.size() > 256) return std::nullopt;
    }
    for (const auto& [atoms, c] : partial) expanded[atoms] += c;
  }
  for (const auto& [atoms, c] : expanded)
    if (!atoms.empty() && c < 0) return std::nullopt;
  auto it = expanded.find({});
  return it == expanded.end() ? 0 : it->second;
}

SymInt operator+(const SymInt& a, const SymInt& b) {
  SymInt r = a;
  r.terms_.insert(r.terms_.end(), b.terms_.begin(), b.terms_.end());
  r.normalize();
  return r;
}

SymInt operator-(const SymInt& a, const SymInt& b) {
  SymInt r = a;
  for (auto t : b.terms_) {
    t.coef = -t.coef;
    r.terms_.push_back(std::move(t));
  }
  r.normalize();
  return r;
}

SymInt operator*(const SymInt& a, const SymInt& b) {
  SymInt r;
  for (const auto& x : a.terms_)
    for (const auto& y : b.terms_) {
      SymInt::Term t{x.coef * y.coef, x.atoms};
      t.atoms.insert(t.atoms.end(), y.atoms.begin(), y.atoms.end());
      r.terms_.push_back(std::move(t));
    }
  r.normalize();
  return r;
}

namespace {

// a / b when b divides every term of a exactly (b a monomial), else nullopt.
std::optional<SymInt> exact_div(const SymInt& a, const SymInt& b) {
  if (b.terms().size() != 1) {
    if (!b.terms().empty() && a.same(b)) return SymInt(1);
    // a == q * b for a constant q?
    if (b.terms().empty() || a.terms().empty() || a.terms().size() != b.terms().size()) return std::nullopt;
    const auto& t0 = a.terms()[0];
    const auto& u0 = b.terms()[0];
    if (t0.atoms != u0.atoms || t0.coef % u0.coef != 0) return std::nullopt;
    SymInt q(t0.coef / u0.coef);
    if ((q * b).same(a)) return q;
    return std::nullopt;
  }
  const auto& d = b.terms()[0];
  if (d.coef == 0) return std::nullopt;
  SymInt r;
  for (const auto& t : a.terms()) {
    if (t.coef % d.coef != 0) return std::nullopt;
    std::vector<int> rest = t.atoms;
    for (int atom : d.atoms) {
      auto it = std::find(rest.begin(), rest.end(), atom);
      if (it == rest.end()) return std::nullopt;
      rest.erase(it);
    }
    SymInt term(t.coef / d.coef);
    for (int atom : rest) term = term * SymInt::dim(atom);
    r = r + term;
  }
  return r;
}

}  // namespace

SymInt floordiv(const SymInt& a, const SymInt& b) {
  if (a.known() && b.known()) {
    HODU_CHECK(b.value() != 0, ErrorCode::InvalidModel, "division by zero in a shape computation");
    return floor_div(a.value(), b.value());
  }
  if (b.is(1)) return a;
  if (auto q = exact_div(a, b)) return *q;
  auto la = a.lower_bound(), lb = b.lower_bound();
  bool nonneg = la && *la >= 0 && lb && *lb >= 1;
  if (nonneg) return opaque(fmt::format("{} / {}", a.c(), b.c()), 0, any_late(a, b));
  return opaque(fmt::format("hm_fdiv({}, {})", a.c(), b.c()), std::nullopt, any_late(a, b));
}

SymInt ceildiv(const SymInt& a, const SymInt& b) {
  if (a.known() && b.known()) return -floordiv(-a, b).value();
  if (b.is(1)) return a;
  if (auto q = exact_div(a, b)) return *q;
  return -floordiv(-a, b);
}

SymInt floormod(const SymInt& a, const SymInt& b) {
  if (a.known() && b.known()) {
    HODU_CHECK(b.value() != 0, ErrorCode::InvalidModel, "modulo by zero in a shape computation");
    return floor_mod(a.value(), b.value());
  }
  if (exact_div(a, b)) return 0;
  return a - floordiv(a, b) * b;
}

bool provably_ge(const SymInt& a, const SymInt& b) {
  auto lb = (a - b).lower_bound();
  return lb && *lb >= 0;
}

SymInt sym_min(const SymInt& a, const SymInt& b) {
  if (a.known() && b.known()) return std::min(a.value(), b.value());
  if (a.same(b)) return a;
  if (provably_ge(b, a)) return a;
  if (provably_ge(a, b)) return b;
  auto la = a.lower_bound(), lb = b.lower_bound();
  if (a.known() && a.value() >= kHuge && lb && *lb >= 0) return b;
  if (b.known() && b.value() >= kHuge && la && *la >= 0) return a;
  std::optional<int64_t> bound;
  if (la && lb) bound = std::min(*la, *lb);
  return opaque(fmt::format("hm_min({}, {})", a.c(), b.c()), bound, any_late(a, b));
}

SymInt sym_max(const SymInt& a, const SymInt& b) {
  if (a.known() && b.known()) return std::max(a.value(), b.value());
  if (a.same(b)) return a;
  if (provably_ge(a, b)) return a;
  if (provably_ge(b, a)) return b;
  auto la = a.lower_bound(), lb = b.lower_bound();
  std::optional<int64_t> bound = la && lb ? std::optional<int64_t>(std::max(*la, *lb)) : la ? la : lb;
  return opaque(fmt::format("hm_max({}, {})", a.c(), b.c()), bound, any_late(a, b));
}

SymInt sym_select(const SymInt& cond, const SymInt& a, const SymInt& b) {
  if (cond.known()) return cond.value() ? a : b;
  if (a.same(b)) return a;
  auto la = a.lower_bound(), lb = b.lower_bound();
  std::optional<int64_t> bound;
  if (la && lb) bound = std::min(*la, *lb);
  return opaque(fmt::format("({} ? {} : {})", cond.c(), a.c(), b.c()), bound, cond.late() || any_late(a, b));
}

SymInt sym_eq(const SymInt& a, const SymInt& b) {
  if (a.same(b)) return 1;
  SymInt d = a - b;
  if (d.known()) return d.value() == 0 ? 1 : 0;
  auto lb = d.lower_bound(), ub = (b - a).lower_bound();
  if ((lb && *lb > 0) || (ub && *ub > 0)) return 0;
  return opaque(fmt::format("({} == {})", a.c(), b.c()), 0, any_late(a, b));
}

SymInt sym_lt(const SymInt& a, const SymInt& b) {
  SymInt d = b - a;
  if (d.known()) return d.value() > 0 ? 1 : 0;
  auto lb = d.lower_bound();
  if (lb && *lb > 0) return 1;
  if (provably_ge(a, b)) return 0;
  return opaque(fmt::format("({} < {})", a.c(), b.c()), 0, any_late(a, b));
}

SymInt sym_expr(const std::string& c_expr, std::optional<int64_t> lower_bound, bool late) {
  return SymInt::dim(table().define(c_expr, lower_bound, late));
}

SymInt truncdiv(const SymInt& a, const SymInt& b) {
  if (a.known() && b.known()) {
    HODU_CHECK(b.value() != 0, ErrorCode::InvalidModel, "division by zero in a shape computation");
    return a.value() / b.value();
  }
  auto la = a.lower_bound(), lb = b.lower_bound();
  if (la && *la >= 0 && lb && *lb >= 1) return floordiv(a, b);
  if (auto q = exact_div(a, b)) return *q;
  return opaque(fmt::format("{} / {}", a.c(), b.c()), std::nullopt, any_late(a, b));
}

SymInt slice_index(const SymInt& v, const SymInt& dim, bool is_end, int64_t step) {
  SymInt s = v;
  auto lb = v.lower_bound();
  if (v.known() && v.value() < 0) s = v + dim;
  else if (!(lb && *lb >= 0)) s = sym_select(sym_lt(v, 0), v + dim, v);
  if (step > 0) return sym_min(sym_max(s, 0), dim);
  return is_end ? sym_min(sym_max(s, -1), dim - 1) : sym_min(sym_max(s, 0), dim - 1);
}

SymInt slice_length(const SymInt& start, const SymInt& end, int64_t step) {
  SymInt span = step > 0 ? end - start : start - end;
  int64_t st = step > 0 ? step : -step;
  return sym_max(0, ceildiv(span, st));
}

SymInt broadcast_stride(const SymInt& in_dim, const SymInt& out_dim, const SymInt& stride) {
  if (in_dim.is(1)) return 0;
  if (in_dim == out_dim) return stride;
  return sym_select(sym_eq(in_dim, 1), 0, stride);
}

SymInt numel(const SymShape& s) {
  SymInt n = 1;
  for (const auto& d : s) n = n * d;
  return n;
}

SymShape row_major_strides(const SymShape& s) {
  SymShape st(s.size(), 1);
  for (size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
  return st;
}

SymShape to_sym(const std::vector<int64_t>& v) { return SymShape(v.begin(), v.end()); }

std::optional<std::vector<int64_t>> to_static(const SymShape& s) {
  std::vector<int64_t> out;
  for (const auto& d : s) {
    if (!d.known()) return std::nullopt;
    out.push_back(d.value());
  }
  return out;
}

bool is_static(const SymShape& s) { return to_static(s).has_value(); }

std::string to_string(const SymShape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    const auto& d = s[i];
    if (d.known()) out += std::to_string(d.value());
    else if (g_table && d.terms().size() == 1 && d.terms()[0].coef == 1 && d.terms()[0].atoms.size() == 1 &&
             !g_table->atom(d.terms()[0].atoms[0]).name.empty())
      out += g_table->atom(d.terms()[0].atoms[0]).name;
    else out += d.c();
  }
  return out + "]";
}

int SymTable::input_dim(const std::string& name) {
  for (int k = 0; k < num_inputs_; ++k)
    if (atoms_[k].name == name) return k;
  HODU_CHECK(num_inputs_ == static_cast<int>(atoms_.size()), ErrorCode::Internal,
             "free input dims must come before derived ones");
  atoms_.push_back({"", fmt::format("S[{}]", atoms_.size()), name, 1, false});
  return num_inputs_++;
}

int SymTable::late_dim(std::optional<int64_t> lower_bound) {
  int k = static_cast<int>(atoms_.size());
  atoms_.push_back({"", fmt::format("S[{}]", k), "", lower_bound, true});
  return k;
}

void SymTable::check(const Statement& check, bool late) {
  if (late) {
    HODU_CHECK(on_late_check, ErrorCode::Internal, "a run-time check on late sizes outside emission: {}",
               check.message);
    on_late_check(check);
    return;
  }
  // Partial inference passes (graph_prep) make the same checks again.
  for (const auto& st : statements_)
    if (st.atom < 0 && st.cond == check.cond && st.message == check.message) return;
  statements_.push_back(check);
}

void sym_require(const SymInt& cond, const std::string& message, const std::vector<SymInt>& args) {
  if (cond.known()) {
    std::string m = message;
    for (const auto& a : args)
      if (auto at = m.find("%lld"); at != std::string::npos) m.replace(at, 4, a.known() ? std::to_string(a.value()) : a.c());
    HODU_CHECK(cond.value() != 0, ErrorCode::InvalidModel, "{}", m);
    return;
  }
  SymTable::Statement st{-1, cond.c(), message, {}};
  bool late = cond.late();
  for (const auto& a : args) {
    st.args.push_back(a.c());
    late = late || a.late();
  }
  table().check(st, late);
}

SymInt broadcast_dim(const SymInt& a, const SymInt& b, const std::string& what) {
  if (a.is(1)) return b;
  if (b.is(1) || a == b) return a;
  HODU_CHECK(!(a.known() && b.known()), ErrorCode::InvalidModel, "{}: dims {} and {} do not broadcast", what,
             a.value(), b.value());
  SymInt r = sym_select(sym_eq(a, 1), b, a);
  SymTable::Statement st{-1, fmt::format("({0} == {1} || {0} == 1 || {1} == 1)", a.c(), b.c()),
                         what + ": dims %lld and %lld do not broadcast", {a.c(), b.c()}};
  table().check(st, a.late() || b.late());
  return r;
}

int SymTable::define(const std::string& expr, std::optional<int64_t> lower_bound, bool late) {
  if (auto it = interned_.find(expr); it != interned_.end()) return it->second;
  int k = static_cast<int>(atoms_.size());
  // Late dims are expressions read where they are used (after the values they read are
  // computed); the others are computed once per shape into S[k].
  atoms_.push_back({expr, late ? "(" + expr + ")" : fmt::format("S[{}]", k), "", lower_bound, late});
  interned_[expr] = k;
  if (!late) statements_.push_back({k, "", "", {}});
  return k;
}

SymScope::SymScope(SymTable& table) : previous_(g_table) { g_table = &table; }
SymScope::~SymScope() { g_table = previous_; }
SymTable* current_sym_table() { return g_table; }

}  // namespace hodu::compilers::c
