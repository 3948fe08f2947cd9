// Einsum on f32 as batched matrix products: for two operands, every label is a batch label
// (in both inputs and the output), a row label (first input and output), a column label
// (second input and output) or a contracted label (both inputs, not the output); the operands
// are gathered once into [batch, rows, k] and [batch, k, cols], multiplied row by row (the
// inner loop over columns vectorizes) and the result scattered into the output's label order.
// One operand: a permutation with sums over the labels the output drops. Labels the interpreter
// handles and this does not (ellipsis, a label repeated in one term — diagonals —, labels of
// one operand summed away in a two-operand product, size-1 broadcasting) keep its kernel.
#include <algorithm>
#include <cctype>
#include <cstring>

#include "engines/cpu/tensor_step.h"

namespace hodu::cpu {
namespace {

struct Equation {
  std::vector<std::string> terms;
  std::string out;
};

// Letters only, each at most once per term; implicit output: the letters seen once, sorted.
std::optional<Equation> parse(const std::string& eq, size_t inputs) {
  std::string clean;
  for (char ch : eq)
    if (ch != ' ') clean += ch;
  Equation e;
  std::string lhs = clean;
  bool explicit_out = false;
  if (auto pos = clean.find("->"); pos != std::string::npos) {
    lhs = clean.substr(0, pos);
    e.out = clean.substr(pos + 2);
    explicit_out = true;
  }
  size_t s = 0;
  while (true) {
    size_t c = lhs.find(',', s);
    e.terms.push_back(lhs.substr(s, c == std::string::npos ? std::string::npos : c - s));
    if (c == std::string::npos) break;
    s = c + 1;
  }
  if (e.terms.size() != inputs) return std::nullopt;
  auto letters_only = [](const std::string& t) {
    for (size_t i = 0; i < t.size(); ++i) {
      if (!std::isalpha(static_cast<unsigned char>(t[i]))) return false;
      if (t.find(t[i], i + 1) != std::string::npos) return false;
    }
    return true;
  };
  for (const auto& t : e.terms)
    if (!letters_only(t)) return std::nullopt;
  if (!explicit_out) {
    std::map<char, int> counts;
    for (const auto& t : e.terms)
      for (char ch : t) counts[ch]++;
    for (auto& [ch, c] : counts)
      if (c == 1) e.out += ch;
  }
  if (!letters_only(e.out)) return std::nullopt;
  for (char ch : e.out) {
    bool found = false;
    for (const auto& t : e.terms) found |= t.find(ch) != std::string::npos;
    if (!found) return std::nullopt;
  }
  return e;
}

class EinsumStep : public TensorStep {
 public:
  explicit EinsumStep(Equation e) : e_(std::move(e)) {}

  void configure(const std::vector<const Tensor*>& in) override {
    sizes_.clear();
    for (size_t i = 0; i < in.size(); ++i) {
      const std::string& t = e_.terms[i];
      if (static_cast<int64_t>(t.size()) != in[i]->rank())
        fail(ErrorCode::InvalidArgument, "{}: term '{}' has {} labels but input {} has rank {}", label, t, t.size(), i,
             in[i]->rank());
      for (size_t d = 0; d < t.size(); ++d) {
        auto [it, fresh] = sizes_.emplace(t[d], in[i]->dim(static_cast<int64_t>(d)));
        if (!fresh && it->second != in[i]->dim(static_cast<int64_t>(d)))
          fail(ErrorCode::InvalidArgument, "{}: label '{}' has sizes {} and {}", label, t[d], it->second,
               in[i]->dim(static_cast<int64_t>(d)));
      }
    }
    out_shape_.clear();
    for (char ch : e_.out) out_shape_.push_back(sizes_[ch]);
  }

  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    Tensor& y = out(rs, 0, DType::F32, out_shape_);
    float* dst = y.data<float>();
    if (in.size() == 1) return reduce_one(rs, *in[0], dst);
    const std::string &ta = e_.terms[0], &tb = e_.terms[1], &to = e_.out;
    std::string batch, rows, cols, k;
    for (char ch : to) {
      const bool a = ta.find(ch) != std::string::npos, b = tb.find(ch) != std::string::npos;
      (a && b ? batch : a ? rows : cols) += ch;
    }
    for (char ch : ta)
      if (to.find(ch) == std::string::npos) k += ch;
    auto strides_of = [&](const std::string& term, const Tensor& t, const std::string& order) {
      const auto cs = contiguous_strides(t.shape());
      std::vector<int64_t> dims, st;
      for (char ch : order) {
        dims.push_back(sizes_[ch]);
        st.push_back(cs[term.find(ch)]);
      }
      return std::make_pair(dims, st);
    };
    const int64_t B = prod(batch), M = prod(rows), N = prod(cols), K = prod(k);
    a_.resize(static_cast<size_t>(B * M * K));
    b_.resize(static_cast<size_t>(B * K * N));
    c_.resize(static_cast<size_t>(B * M * N));
    auto [ad, as] = strides_of(ta, *in[0], batch + rows + k);
    auto [bd, bs] = strides_of(tb, *in[1], batch + k + cols);
    gather_strided(in[0]->data<float>(), a_.data(), ad, as, rs.threads);
    gather_strided(in[1]->data<float>(), b_.data(), bd, bs, rs.threads);
    const float* A = a_.data();
    const float* Bm = b_.data();
    float* C = c_.data();
    parallel_for(B * M, B * M * N * K >= (1 << 16) ? rs.threads : 1, [&](int64_t q) {
      const int64_t bt = q / M;
      float* cr = C + q * N;
      for (int64_t j = 0; j < N; ++j) cr[j] = 0;
      const float* ar = A + q * K;
      for (int64_t kk = 0; kk < K; ++kk) {
        const float av = ar[kk];
        const float* br = Bm + (bt * K + kk) * N;
        for (int64_t j = 0; j < N; ++j) cr[j] += av * br[j];
      }
    });
    // C is [batch, rows, cols]; the output's labels in its own order read it through strides.
    const std::string corder = batch + rows + cols;
    std::vector<int64_t> cdims_full;
    for (char ch : corder) cdims_full.push_back(sizes_[ch]);
    const auto cfs = contiguous_strides(cdims_full);
    std::vector<int64_t> st;
    for (char ch : to) st.push_back(cfs[corder.find(ch)]);
    gather_strided(C, dst, out_shape_, st, rs.threads);
  }

 private:
  int64_t prod(const std::string& labels) {
    int64_t p = 1;
    for (char ch : labels) p *= sizes_[ch];
    return p;
  }

  // One operand: out[o] = Σ over the dropped labels, through strides.
  void reduce_one(RunState& rs, const Tensor& x, float* dst) {
    const std::string& t = e_.terms[0];
    const auto cs = contiguous_strides(x.shape());
    std::string dropped;
    for (char ch : t)
      if (e_.out.find(ch) == std::string::npos) dropped += ch;
    std::vector<int64_t> odims = out_shape_, ost, ddims, dst_;
    for (char ch : e_.out) ost.push_back(cs[t.find(ch)]);
    for (char ch : dropped) {
      ddims.push_back(sizes_[ch]);
      dst_.push_back(cs[t.find(ch)]);
    }
    const float* src = x.data<float>();
    const int64_t total = shape_numel(odims), n = shape_numel(ddims);
    parallel_for(total, total * n >= (1 << 15) ? rs.threads : 1, [&](int64_t o) {
      int64_t rest = o, base = 0;
      for (size_t d = odims.size(); d-- > 0;) {
        base += rest % odims[d] * ost[d];
        rest /= odims[d];
      }
      double acc = 0;
      for (int64_t i = 0; i < n; ++i) {
        int64_t r2 = i, off = base;
        for (size_t d = ddims.size(); d-- > 0;) {
          off += r2 % ddims[d] * dst_[d];
          r2 /= ddims[d];
        }
        acc += src[off];
      }
      dst[o] = static_cast<float>(acc);
    });
  }

  Equation e_;
  std::map<char, int64_t> sizes_;
  std::vector<int64_t> out_shape_;
  std::vector<float> a_, b_, c_;
};

}  // namespace

bool make_einsum(PlanBuilder& b, const Node& n) {
  if (!n.domain.empty() || n.op_type != "Einsum" || n.inputs.empty() || n.inputs.size() > 2) return false;
  for (const auto& in : n.inputs)
    if (in.empty() || dtype_of(b, in) != DType::F32) return false;
  auto e = parse(n.get_string("equation", ""), n.inputs.size());
  if (!e) return false;
  if (e->terms.size() == 2) {
    // A label of one operand alone that the output drops would need a sum first: not here.
    for (int i = 0; i < 2; ++i)
      for (char ch : e->terms[static_cast<size_t>(i)])
        if (e->out.find(ch) == std::string::npos && e->terms[static_cast<size_t>(1 - i)].find(ch) == std::string::npos)
          return false;
  }
  // Sizes must agree exactly (no size-1 broadcasting), checked on static shapes here.
  std::map<char, int64_t> sizes;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    auto t = b.static_type(n.inputs[i]);
    if (!t) continue;
    if (t->second.size() != e->terms[i].size()) return false;
    for (size_t d = 0; d < t->second.size(); ++d) {
      auto [it, fresh] = sizes.emplace(e->terms[i][d], t->second[d]);
      if (!fresh && it->second != t->second[d]) return false;
    }
  }
  add_tensor_step(b, n, std::make_unique<EinsumStep>(std::move(*e)), {DType::F32}, "einsum as batched products");
  return true;
}

}  // namespace hodu::cpu
