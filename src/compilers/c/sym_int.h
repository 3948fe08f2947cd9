// Sizes in generated code. A SymInt is a build-time constant or a polynomial
// (integer coefficients) over run-time dims: the model's free input dims and
// slots the generated code computes from them (floor divisions, minima, ...).
// Each run-time dim is an element S[k] of the shape state the generated code
// fills when it first sees a new set of input dims. Polynomials keep a canonical
// form, so sizes that are equal by algebra compare equal at build time
// (numel(x) / (b * 768) is s when numel(x) is b * s * 768): the generator's
// decisions (fusion, in-place reuse, broadcasting) work on them as on numbers.
// A static model has no run-time dims: every SymInt is a constant and the
// generated code is what it was with plain integers.
#pragma once
#include <fmt/format.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace hodu::compilers::c {

class SymInt {
 public:
  struct Term {
    int64_t coef = 0;
    std::vector<int> atoms;  // run-time dims multiplied, sorted (repeated for powers)
    bool operator==(const Term& o) const { return coef == o.coef && atoms == o.atoms; }
  };

  SymInt() = default;  // 0
  SymInt(int64_t v);   // NOLINT: implicit, sizes mix constants and run-time dims
  SymInt(int v) : SymInt(static_cast<int64_t>(v)) {}  // NOLINT
  static SymInt dim(int atom);

  bool known() const { return terms_.empty() || (terms_.size() == 1 && terms_[0].atoms.empty()); }
  // The constant (Internal error when not known).
  int64_t value() const;
  bool is(int64_t v) const { return known() && value() == v; }
  // The C expression (int64_t) of the value: "3", "S[2]", "(S[0] * S[1] * 768)".
  std::string c() const;
  // Depends on a value computed while the model runs (a NonZero's count), not only on the inputs' dims.
  bool late() const;
  // A lower bound known at build time (run-time dims are >= their bound), if any.
  std::optional<int64_t> lower_bound() const;
  // Equal for every value of the run-time dims (same canonical polynomial).
  bool same(const SymInt& o) const { return terms_ == o.terms_; }
  const std::vector<Term>& terms() const { return terms_; }

  friend SymInt operator+(const SymInt& a, const SymInt& b);
  friend SymInt operator-(const SymInt& a, const SymInt& b);
  friend SymInt operator*(const SymInt& a, const SymInt& b);
  friend SymInt operator-(const SymInt& a) { return SymInt(0) - a; }
  SymInt& operator+=(const SymInt& o) { return *this = *this + o; }
  SymInt& operator-=(const SymInt& o) { return *this = *this - o; }
  SymInt& operator*=(const SymInt& o) { return *this = *this * o; }
  // Provable equality; `a != b` is "not provably equal".
  friend bool operator==(const SymInt& a, const SymInt& b) { return a.same(b); }
  friend bool operator!=(const SymInt& a, const SymInt& b) { return !a.same(b); }

 private:
  void normalize();
  std::vector<Term> terms_;  // sorted by atoms, no zero coefficient
};

using SymShape = std::vector<SymInt>;

// Floor division and modulo (Python's: the result of mod has b's sign), ceil division.
SymInt floordiv(const SymInt& a, const SymInt& b);
SymInt ceildiv(const SymInt& a, const SymInt& b);
SymInt floormod(const SymInt& a, const SymInt& b);
SymInt sym_min(const SymInt& a, const SymInt& b);
SymInt sym_max(const SymInt& a, const SymInt& b);
// cond ? a : b, with cond a 0/1 SymInt.
SymInt sym_select(const SymInt& cond, const SymInt& a, const SymInt& b);
// 0/1 comparisons: known when decidable at build time.
SymInt sym_eq(const SymInt& a, const SymInt& b);
SymInt sym_lt(const SymInt& a, const SymInt& b);
// Provably a >= b for every value of the run-time dims.
bool provably_ge(const SymInt& a, const SymInt& b);
// A run-time dim holding an arbitrary int64 C expression over other run-time dims
// (`lower_bound`: known bound of its value).
SymInt sym_expr(const std::string& c_expr, std::optional<int64_t> lower_bound, bool late);

// C's integer division (ONNX's Div of integers truncates toward zero).
SymInt truncdiv(const SymInt& a, const SymInt& b);
// A Slice index on a dim of `dim` elements: negative counts from the end, then clamped
// ([0, dim] for starts and ends with a positive step; [0, dim - 1] / [-1, dim - 1] with a negative one).
SymInt slice_index(const SymInt& v, const SymInt& dim, bool is_end, int64_t step);
// Elements a Slice [start, end) with `step` keeps (clamped indices).
SymInt slice_length(const SymInt& start, const SymInt& end, int64_t step);
// The stride to read a dim of an input broadcast to an output dim: 0 where the
// input's dim is 1 (decided at run time where that is not known at build time).
SymInt broadcast_stride(const SymInt& in_dim, const SymInt& out_dim, const SymInt& stride);

// Shapes of SymInts.
SymInt numel(const SymShape& s);
SymShape row_major_strides(const SymShape& s);
SymShape to_sym(const std::vector<int64_t>& v);
// The constants, when every dim is one.
std::optional<std::vector<int64_t>> to_static(const SymShape& s);
bool is_static(const SymShape& s);
std::string to_string(const SymShape& s);  // "[S[0], 3, 224, 224]"

// The run-time dims of one generation (thread-local while a SymScope is alive):
// atom k is S[k]. Atoms are interned by expression; the ones computed from the input
// dims make the shape function (statements(), in order), the late ones are read where
// they are used.
class SymTable {
 public:
  struct Atom {
    std::string expr;  // "" for a free input dim (bound from an input's shape) or a late dim
    std::string text;  // how C code reads it: "S[k]", or a late expression itself
    std::string name;  // free input dims: the model's symbol ("batch")
    std::optional<int64_t> lower_bound;
    bool late = false;
  };
  // A free input dim named `name` (>= 1 at run time).
  int input_dim(const std::string& name);
  int define(const std::string& expr, std::optional<int64_t> lower_bound, bool late);
  // A late dim whose value the generated code assigns where it is computed (a NonZero's count).
  int late_dim(std::optional<int64_t> lower_bound);
  // A condition the dims must meet at run time, with the message of the failure (a printf
  // format whose %lld take `args`, int64 C expressions).
  struct Statement {
    int atom = -1;  // >= 0: S[atom] = its expression; else the check below
    std::string cond, message;
    std::vector<std::string> args;
  };
  void check(const Statement& check, bool late);
  const std::vector<Statement>& statements() const { return statements_; }
  const Atom& atom(int k) const { return atoms_.at(static_cast<size_t>(k)); }
  int size() const { return static_cast<int>(atoms_.size()); }
  int num_input_dims() const { return num_inputs_; }
  // Late checks go into the run body where they are made.
  std::function<void(const Statement&)> on_late_check;

 private:
  std::vector<Statement> statements_;
  std::vector<Atom> atoms_;
  std::map<std::string, int> interned_;
  int num_inputs_ = 0;
};

// `cond` (0/1) must hold at run time: a build-time error when it is known false, a check
// in the generated code when it is not known.
void sym_require(const SymInt& cond, const std::string& message, const std::vector<SymInt>& args = {});
// The dim a and b broadcast to (numpy's rule; `what` names the node for the error).
SymInt broadcast_dim(const SymInt& a, const SymInt& b, const std::string& what);

// Makes `table` the one SymInt operations create atoms in, for this thread.
class SymScope {
 public:
  explicit SymScope(SymTable& table);
  ~SymScope();
  SymScope(const SymScope&) = delete;
  SymScope& operator=(const SymScope&) = delete;

 private:
  SymTable* previous_;
};
SymTable* current_sym_table();

}  // namespace hodu::compilers::c

template <>
struct fmt::formatter<hodu::compilers::c::SymInt> : fmt::formatter<std::string> {
  template <typename Ctx>
  auto format(const hodu::compilers::c::SymInt& v, Ctx& ctx) const {
    return fmt::formatter<std::string>::format(v.c(), ctx);
  }
};
