// Einsum: the equation parsed at build time (letters, one ellipsis per term, diagonals,
// size-1 broadcasting, implicit output) into a label list whose output labels come first,
// each operand's stride per label, and one call of the generic kernel hk_einsum over doubles.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>

#include "compilers/c/ops_generic.h"
#include "core/error.h"

namespace hodu::compilers::c {
namespace {

constexpr int kEllipsis = 256;  // label of ellipsis dim e: kEllipsis + e (right-aligned)

// The labels of one term: letters, and the term's ellipsis dims (`rank` - letters of them,
// right-aligned among `ell` dims; rank < 0: the output, whose ellipsis takes all `ell`).
std::vector<int> term_labels(const Node& n, const std::string& term, int64_t rank, int64_t ell, int64_t* ell_here) {
  std::vector<int> letters;
  int at = -1;
  for (size_t i = 0; i < term.size(); ++i) {
    if (term[i] == '.') {
      HODU_CHECK(term.compare(i, 3, "...") == 0 && at < 0, ErrorCode::InvalidModel, "{}: bad ellipsis in '{}'",
                 n.describe(), term);
      at = static_cast<int>(letters.size());
      i += 2;
    } else {
      HODU_CHECK(std::isalpha(static_cast<unsigned char>(term[i])), ErrorCode::InvalidModel,
                 "{}: bad character '{}' in the equation", n.describe(), term[i]);
      letters.push_back(static_cast<unsigned char>(term[i]));
    }
  }
  int64_t ne = at < 0 ? 0 : rank < 0 ? ell : rank - static_cast<int64_t>(letters.size());
  HODU_CHECK(at >= 0 || rank < 0 || static_cast<int64_t>(letters.size()) == rank, ErrorCode::InvalidModel,
             "{}: term '{}' has {} labels for an input of rank {}", n.describe(), term, letters.size(), rank);
  HODU_CHECK(ne >= 0, ErrorCode::InvalidModel, "{}: term '{}' has more labels than its input's rank {}", n.describe(),
             term, rank);
  if (ell_here) *ell_here = ne;
  std::vector<int> out;
  for (size_t i = 0; i <= letters.size(); ++i) {
    if (static_cast<int>(i) == at)
      for (int64_t e = 0; e < ne; ++e) out.push_back(kEllipsis + static_cast<int>(ell - ne + e));
    if (i < letters.size()) out.push_back(letters[i]);
  }
  return out;
}

}  // namespace

void emit_einsum(Codegen& cg, const Node& n) {
  std::string eq;
  for (char ch : n.get_string("equation", ""))
    if (ch != ' ') eq += ch;
  std::string lhs = eq, rhs;
  const bool explicit_out = eq.find("->") != std::string::npos;
  if (explicit_out) lhs = eq.substr(0, eq.find("->")), rhs = eq.substr(eq.find("->") + 2);
  std::vector<std::string> terms;
  for (size_t s = 0;;) {
    size_t c = lhs.find(',', s);
    terms.push_back(lhs.substr(s, c == std::string::npos ? std::string::npos : c - s));
    if (c == std::string::npos) break;
    s = c + 1;
  }
  const size_t nops = terms.size();
  HODU_CHECK(nops == n.inputs.size(), ErrorCode::InvalidModel, "{}: the equation has {} operands for {} inputs",
             n.describe(), nops, n.inputs.size());
  std::vector<std::vector<int64_t>> shapes;
  for (const auto& in : n.inputs) {
    auto s = to_static(cg.shape_of(in));
    HODU_CHECK(s.has_value(), ErrorCode::Unsupported,
               "{}: Einsum over sizes known only at run time; bind the inputs' dims with --dim or --shape",
               n.describe());
    HODU_CHECK(dtype_is_float(cg.dtype_of(in)), ErrorCode::Unsupported, "{}: Einsum of {} (float types only)",
               n.describe(), dtype_name(cg.dtype_of(in)));
    shapes.push_back(*s);
  }
  int64_t ell = 0;
  for (size_t k = 0; k < nops; ++k) {
    int64_t e = 0;
    term_labels(n, terms[k], static_cast<int64_t>(shapes[k].size()), 0, &e);
    ell = std::max(ell, e);
  }
  std::vector<std::vector<int>> labels;
  std::map<int, int64_t> sizes;
  std::map<int, int> counts;
  for (size_t k = 0; k < nops; ++k) {
    labels.push_back(term_labels(n, terms[k], static_cast<int64_t>(shapes[k].size()), ell, nullptr));
    for (size_t d = 0; d < labels[k].size(); ++d) {
      int l = labels[k][d];
      int64_t s = shapes[k][d];
      ++counts[l];
      auto it = sizes.find(l);
      if (it == sizes.end() || it->second == 1) sizes[l] = s;
      else
        HODU_CHECK(s == 1 || s == it->second, ErrorCode::InvalidModel, "{}: a label has sizes {} and {}",
                   n.describe(), it->second, s);
    }
  }
  std::vector<int> all;  // output labels first, then the summed ones
  if (explicit_out) {
    all = term_labels(n, rhs, -1, ell, nullptr);
    for (size_t i = 0; i < all.size(); ++i) {
      HODU_CHECK(sizes.count(all[i]), ErrorCode::InvalidModel, "{}: an output label is in no input", n.describe());
      for (size_t j = 0; j < i; ++j)
        HODU_CHECK(all[j] != all[i], ErrorCode::InvalidModel, "{}: an output label repeats", n.describe());
    }
  } else {
    for (int64_t e = 0; e < ell; ++e) all.push_back(kEllipsis + static_cast<int>(e));
    for (auto& [l, c] : counts)
      if (l < kEllipsis && c == 1) all.push_back(l);
  }
  const size_t nout = all.size();
  for (auto& [l, s] : sizes)
    if (std::find(all.begin(), all.end(), l) == all.end()) all.push_back(l);
  HODU_CHECK(all.size() <= 64, ErrorCode::Unsupported, "{}: more than 64 labels", n.describe());
  std::vector<int64_t> dims, strides(nops * all.size(), 0);
  for (int l : all) dims.push_back(sizes[l]);
  std::vector<std::string> ptrs;
  for (size_t k = 0; k < nops; ++k) {
    int64_t st = 1;
    for (size_t d = labels[k].size(); d-- > 0;) {
      size_t at = std::find(all.begin(), all.end(), labels[k][d]) - all.begin();
      if (shapes[k][d] != 1) strides[k * all.size() + at] += st;
      st *= shapes[k][d];
    }
    ptrs.push_back(f64_in(cg, n.inputs[k]));
  }
  auto ys = cg.shape_of(n.outputs[0]);
  HODU_CHECK(ys.size() == nout, ErrorCode::InvalidModel, "{}: the output's rank differs from the equation's",
             n.describe());
  for (size_t i = 0; i < nout; ++i)
    HODU_CHECK(i < ys.size() && ys[i] == SymInt(dims[i]), ErrorCode::InvalidModel,
               "{}: the output's shape differs from the equation's", n.describe());
  need_generic_kernels(cg);
  WideOut y = wide_out(cg, n.outputs[0], ys);
  std::string list = fmt::format("EO{}", cg.table_count++), joined;
  for (const auto& p : ptrs) joined += (joined.empty() ? "" : ", ") + p;
  cg.emit(fmt::format("const double* {}[{}] = {{{}}};", list, nops, joined));
  cg.emit(fmt::format("hk_einsum({}, {}, {}, {}, {}, {}, {});", nops, list, all.size(), cg.table(dims),
                      cg.table(strides), nout, y.buffer));
  y.finish(cg);
}


}  // namespace hodu::compilers::c
