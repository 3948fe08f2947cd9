// String ops: StringNormalizer, StringConcat, StringSplit, RegexFullMatch.
// Case changes are ASCII-only; RegexFullMatch uses std::regex (ECMAScript),
// which agrees with RE2 on the common subset (classes, \w \W \b, anchors,
// groups, alternation, bounded repetition).
#include <regex>
#include <set>
#include <string>

#include "engines/interp/ops/elementwise_common.h"

namespace hodu::interp {
namespace {

const Tensor& string_input(const KernelContext& ctx, size_t i) {
  const Tensor& t = ctx.input(i);
  if (t.dtype() != DType::String)
    ctx.fail(ErrorCode::InvalidArgument, "input {} must be a string tensor, got {}", i, dtype_name(t.dtype()));
  return t;
}

std::string to_lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string to_upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// Splits on single spaces and drops the words found in `stops` (the ONNX reference's rule).
std::string remove_stopwords(const std::string& text, const std::set<std::string>& stops) {
  std::string out;
  bool first = true;
  size_t start = 0;
  while (true) {
    size_t sp = text.find(' ', start);
    std::string w = text.substr(start, sp == std::string::npos ? std::string::npos : sp - start);
    if (!stops.count(w)) {
      if (!first) out += ' ';
      out += w;
      first = false;
    }
    if (sp == std::string::npos) break;
    start = sp + 1;
  }
  return out;
}

void k_string_normalizer(KernelContext& ctx) {
  Tensor x = string_input(ctx, 0).contiguous();
  const std::string action = ctx.node.get_string("case_change_action", "NONE");
  if (action != "NONE" && action != "LOWER" && action != "UPPER")
    ctx.fail(ErrorCode::InvalidArgument, "case_change_action must be NONE, LOWER or UPPER, got '{}'", action);
  const bool case_sensitive = ctx.node.get_int("is_case_sensitive", 0) != 0;
  const auto stopwords = ctx.node.get_strings("stopwords");
  if (x.rank() != 1 && !(x.rank() == 2 && x.dim(0) == 1))
    ctx.fail(ErrorCode::InvalidArgument, "input must have shape [C] or [1, C], got {}", x.shape_string());
  std::set<std::string> raw_stops(stopwords.begin(), stopwords.end()), stops;
  for (const auto& w : stopwords)
    stops.insert(action == "LOWER" ? to_lower(w) : action == "UPPER" ? to_upper(w) : w);

  std::vector<std::string> kept;
  for (int64_t i = 0; i < x.numel(); ++i) {
    std::string s = strs(x)[i];
    if (case_sensitive && !stops.empty()) s = remove_stopwords(s, raw_stops);
    if (action == "LOWER") s = to_lower(s);
    else if (action == "UPPER") s = to_upper(s);
    if (!case_sensitive && !stops.empty()) s = remove_stopwords(s, stops);
    if (!s.empty()) kept.push_back(std::move(s));
  }
  if (kept.empty()) kept.push_back("");
  const int64_t c = static_cast<int64_t>(kept.size());
  std::vector<int64_t> shape = x.rank() == 1 ? std::vector<int64_t>{c} : std::vector<int64_t>{1, c};
  ctx.set_output(0, Tensor::from_strings(shape, kept));
}

void k_string_concat(KernelContext& ctx) {
  Tensor a = string_input(ctx, 0).contiguous(), b = string_input(ctx, 1).contiguous();
  auto shape = broadcast_shapes(ctx, a.shape(), b.shape());
  Tensor out = Tensor::empty(DType::String, shape);
  const std::string* pa = strs(a);
  const std::string* pb = strs(b);
  std::string* po = strs(out);
  broadcast_for<2>(ctx.threads, shape, {a.shape(), b.shape()},
                   [&](int64_t i, const std::array<int64_t, 2>& o) { po[i] = pa[o[0]] + pb[o[1]]; });
  ctx.set_output(0, out);
}

bool is_py_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f); }

// Python's str.split(sep, maxsplit): sep empty → runs of whitespace, no empty pieces.
std::vector<std::string> py_split(const std::string& s, const std::string& sep, int64_t maxsplit) {
  std::vector<std::string> parts;
  if (sep.empty()) {
    size_t i = 0, n = s.size();
    int64_t splits = 0;
    while (i < n) {
      while (i < n && is_py_space(static_cast<unsigned char>(s[i]))) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && splits >= maxsplit) {
        size_t e = n;
        while (e > i && is_py_space(static_cast<unsigned char>(s[e - 1]))) --e;
        parts.push_back(s.substr(i, e - i));
        break;
      }
      size_t j = i;
      while (j < n && !is_py_space(static_cast<unsigned char>(s[j]))) ++j;
      parts.push_back(s.substr(i, j - i));
      ++splits;
      i = j;
    }
    return parts;
  }
  size_t start = 0;
  int64_t splits = 0;
  while (true) {
    if (maxsplit >= 0 && splits >= maxsplit) break;
    size_t p = s.find(sep, start);
    if (p == std::string::npos) break;
    parts.push_back(s.substr(start, p - start));
    start = p + sep.size();
    ++splits;
  }
  parts.push_back(s.substr(start));
  return parts;
}

void k_string_split(KernelContext& ctx) {
  Tensor x = string_input(ctx, 0).contiguous();
  const std::string delim = ctx.node.get_string("delimiter", "");
  const int64_t maxsplit = ctx.node.has_attr("maxsplit") ? ctx.node.get_int("maxsplit", -1) : -1;
  const int64_t n = x.numel();
  std::vector<std::vector<std::string>> parts(static_cast<size_t>(n));
  int64_t width = 0;
  for (int64_t i = 0; i < n; ++i) {
    parts[i] = py_split(strs(x)[i], delim, maxsplit);
    width = std::max<int64_t>(width, static_cast<int64_t>(parts[i].size()));
  }
  std::vector<int64_t> yshape = x.shape();
  yshape.push_back(width);
  Tensor y = Tensor::empty(DType::String, yshape);
  Tensor z = Tensor::empty(DType::I64, x.shape());
  for (int64_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < parts[i].size(); ++k) strs(y)[i * width + static_cast<int64_t>(k)] = parts[i][k];
    elems<int64_t>(z)[i] = static_cast<int64_t>(parts[i].size());
  }
  ctx.set_output(0, y);
  ctx.set_output(1, z);
}

void k_regex_full_match(KernelContext& ctx) {
  Tensor x = string_input(ctx, 0).contiguous();
  const std::string pattern = ctx.node.get_string("pattern", "");
  std::regex re;
  try {
    re = std::regex(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    ctx.fail(ErrorCode::InvalidArgument, "invalid regular expression '{}': {}", pattern, e.what());
  }
  Tensor y = Tensor::empty(DType::Bool, x.shape());
  bool* o = elems<bool>(y);
  for (int64_t i = 0; i < x.numel(); ++i) {
    try {
      o[i] = std::regex_match(strs(x)[i], re);
    } catch (const std::regex_error& e) {
      ctx.fail(ErrorCode::InvalidArgument, "regular expression '{}' failed on input {}: {}", pattern, i, e.what());
    }
  }
  ctx.set_output(0, y);
}

}  // namespace

void register_string_ops(OpTable& t) {
  t.add("", "StringNormalizer", k_string_normalizer);
  t.add("", "StringConcat", k_string_concat);
  t.add("", "StringSplit", k_string_split);
  t.add("", "RegexFullMatch", k_regex_full_match);
}

}  // namespace hodu::interp
