// HoduScript parser: text → Model (grammar in docs/hoduscript.md). A hand-written
// recursive-descent parser over the characters; every error is
// hodu::Error(InvalidModel, "<what>:<line>:<col>: expected ..., found ...").
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

#include "ir/hoduscript.h"

namespace hodu {

namespace hs_detail {  // defined in hoduscript_printer.cc
bool is_narrow_float(DType t);
uint32_t f32_to_narrow(DType t, float v);
}  // namespace hs_detail

namespace {

constexpr int kMaxDepth = 100;  // nesting of graphs, types and lists

bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_ident_char(char c) { return is_ident_start(c) || is_digit(c) || c == '.'; }
bool is_value_char(char c) { return is_ident_char(c) || c == '/'; }

class Parser {
 public:
  Parser(std::string_view text, const std::string& what) : s_(text), what_(what) {}

  Model model() {
    skip();
    expect_keyword("hodu");
    skip();
    size_t vb = pos_;
    int64_t version = integer("the format version");
    if (version != 1) fail_at(vb, fmt::format("HoduScript version 1 (this file says {})", version));
    Model m;
    expect_keyword("model");
    bool seen_ir = false;
    for (;;) {
      skip();
      size_t at = pos_;
      std::string kw = peek_ident();
      if (kw == "graph") break;
      if (kw == "ir") {
        word();
        m.ir_version = integer("an IR version");
        seen_ir = true;
      } else if (kw == "opset") {
        word();
        do {
          skip();
          std::string domain;
          if (!starts_number()) domain = name("an opset domain");
          int64_t v = integer("an opset version");
          m.opset_imports[domain] = v;
        } while (accept(','));
      } else if (kw == "producer") {
        word();
        m.producer_name = string_lit();
        m.producer_version = string_lit();
      } else if (kw == "domain") {
        word();
        m.domain = string_lit();
      } else if (kw == "version") {
        word();
        m.model_version = integer("a model version");
      } else if (kw == "doc") {
        word();
        m.doc = string_lit();
      } else if (kw == "meta") {
        word();
        std::string k = string_lit();
        std::string v = string_lit();
        m.metadata.emplace_back(std::move(k), std::move(v));
      } else {
        pos_ = at;
        fail_here("a model clause (ir, opset, producer, domain, version, doc, meta) or 'graph'");
      }
    }
    if (!seen_ir) {
      // ir is optional; the default of Model stays.
    }
    m.graph = graph();
    skip();
    if (pos_ != s_.size()) fail_here("end of file after the main graph");
    return m;
  }

 private:
  std::string_view s_;
  const std::string& what_;
  size_t pos_ = 0;
  int depth_ = 0;

  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxDepth) p.fail_here("less nesting (more than 100 levels)");
    }
    ~DepthGuard() { --p.depth_; }
  };

  // ---- errors -------------------------------------------------------------

  [[noreturn]] void fail_at(size_t at, const std::string& expected) {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < s_.size(); ++i) {
      if (s_[i] == '\n') { ++line; col = 1; }
      else ++col;
    }
    std::string found;
    if (at >= s_.size()) {
      found = "end of file";
    } else if (s_[at] == '\n' || s_[at] == '\r') {
      found = "end of line";
    } else {
      size_t n = 0;
      while (at + n < s_.size() && n < 16 && s_[at + n] != '\n') ++n;
      found = "'";
      for (char c : s_.substr(at, n)) {
        if (static_cast<unsigned char>(c) < 0x20) found += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
        else found += c;
      }
      found += "'";
    }
    fail(ErrorCode::InvalidModel, "{}:{}:{}: expected {}, found {}", what_, line, col, expected, found);
  }
  [[noreturn]] void fail_here(const std::string& expected) { fail_at(pos_, expected); }

  // ---- lexing -------------------------------------------------------------

  bool eof() const { return pos_ >= s_.size(); }
  char cur() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  char at(size_t k) const { return pos_ + k < s_.size() ? s_[pos_ + k] : '\0'; }

  // Skips whitespace and '#' comments.
  void skip() {
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  bool accept(char c) {
    skip();
    if (cur() == c) { ++pos_; return true; }
    return false;
  }
  void expect(char c) {
    skip();
    if (cur() != c) fail_here(fmt::format("'{}'", c));
    ++pos_;
  }
  bool accept_str(std::string_view t) {
    skip();
    if (s_.substr(pos_, t.size()) == t) { pos_ += t.size(); return true; }
    return false;
  }

  // The bare identifier at the cursor (not consumed), "" if none.
  std::string peek_ident() {
    skip();
    if (!is_ident_start(cur())) return "";
    size_t e = pos_;
    while (e < s_.size() && is_ident_char(s_[e])) ++e;
    return std::string(s_.substr(pos_, e - pos_));
  }
  std::string word() {
    std::string w = peek_ident();
    pos_ += w.size();
    return w;
  }
  void expect_keyword(std::string_view kw) {
    if (peek_ident() != kw) fail_here(fmt::format("'{}'", kw));
    pos_ += kw.size();
  }
  bool accept_keyword(std::string_view kw) {
    if (peek_ident() != kw) return false;
    pos_ += kw.size();
    return true;
  }

  int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  std::string string_lit() {
    skip();
    if (cur() != '"') fail_here("a string");
    ++pos_;
    std::string out;
    for (;;) {
      if (eof()) fail_here("a closing '\"'");
      char c = s_[pos_];
      if (c == '"') { ++pos_; return out; }
      if (c == '\n') fail_here("a closing '\"' before the end of the line");
      if (c != '\\') { out += c; ++pos_; continue; }
      ++pos_;
      char e = cur();
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'x': {
          int h = hex_digit(at(1)), l = hex_digit(at(2));
          if (h < 0 || l < 0) fail_here("two hex digits after \\x");
          out += static_cast<char>(h * 16 + l);
          pos_ += 2;
          break;
        }
        default: fail_here("an escape (\\\" \\\\ \\n \\t \\r \\xHH)");
      }
      ++pos_;
    }
  }

  // A bare identifier or a quoted string.
  std::string name(const char* what) {
    skip();
    if (cur() == '"') return string_lit();
    std::string w = word();
    if (w.empty()) fail_here(what);
    return w;
  }

  // %name or %"name".
  std::string value_ref() {
    skip();
    if (cur() != '%') fail_here("a value ('%name')");
    ++pos_;
    if (cur() == '"') return string_lit();
    size_t b = pos_;
    while (pos_ < s_.size() && is_value_char(s_[pos_])) ++pos_;
    if (pos_ == b) fail_here("a value name after '%'");
    return std::string(s_.substr(b, pos_ - b));
  }
  // A node input/output: %name, or _ for an omitted one.
  std::string use_ref() {
    skip();
    if (cur() == '_' && !is_value_char(at(1))) { ++pos_; return ""; }
    return value_ref();
  }

  bool starts_number() {
    skip();
    char c = cur();
    return is_digit(c) || ((c == '-' || c == '+') && is_digit(at(1)));
  }

  // A number token as text (sign, digits, '.', exponent); not consumed past it.
  std::string number_text() {
    skip();
    size_t b = pos_;
    if (cur() == '-' || cur() == '+') ++pos_;
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (is_digit(c) || c == '.' || c == 'e' || c == 'E' || c == 'x' || c == 'X' ||
          (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')) {
        ++pos_;
      } else if ((c == '+' || c == '-') && (s_[pos_ - 1] == 'e' || s_[pos_ - 1] == 'E')) {
        ++pos_;
      } else {
        break;
      }
    }
    return std::string(s_.substr(b, pos_ - b));
  }

  int64_t integer(const char* what) {
    skip();
    size_t b = pos_;
    if (!starts_number()) fail_here(what);
    std::string t = number_text();
    int64_t v = 0;
    const char* p = t.data();
    if (*p == '+') ++p;
    auto r = std::from_chars(p, t.data() + t.size(), v);
    if (r.ec != std::errc() || r.ptr != t.data() + t.size()) fail_at(b, fmt::format("{} (an integer)", what));
    return v;
  }

  uint64_t parse_u64(const std::string& t, size_t b, int base, const char* what) {
    uint64_t v = 0;
    auto r = std::from_chars(t.data(), t.data() + t.size(), v, base);
    if (t.empty() || r.ec != std::errc() || r.ptr != t.data() + t.size()) fail_at(b, what);
    return v;
  }

  // ---- floats -------------------------------------------------------------

  // f32: decimal, inf, -inf, nan, -nan, nan(0xBITS). `text`-level helper used by
  // attributes and tensor elements alike.
  template <typename F, typename Bits>
  F special_or_decimal(const char* what) {
    skip();
    size_t b = pos_;
    bool neg = false;
    if (cur() == '-' || cur() == '+') {
      neg = cur() == '-';
      if (is_ident_start(at(1))) ++pos_;
    }
    if (is_ident_start(cur())) {
      std::string w = word();
      if (w == "inf") return neg ? -std::numeric_limits<F>::infinity() : std::numeric_limits<F>::infinity();
      if (w == "nan") {
        if (!neg && accept('(')) {
          skip();
          size_t hb = pos_;
          std::string t = number_text();
          if (t.size() < 3 || t[0] != '0' || (t[1] != 'x' && t[1] != 'X')) fail_at(hb, "hex bits 0x...");
          uint64_t v = parse_u64(t.substr(2), hb, 16, "hex bits 0x...");
          if (v > std::numeric_limits<Bits>::max()) fail_at(hb, "NaN bits that fit the type");
          expect(')');
          Bits bits = static_cast<Bits>(v);
          F f;
          std::memcpy(&f, &bits, sizeof f);
          return f;
        }
        F f = std::numeric_limits<F>::quiet_NaN();
        return neg ? -f : f;
      }
      fail_at(b, what);
    }
    if (!starts_number() && !(cur() == '.' || ((cur() == '-' || cur() == '+') && at(1) == '.'))) fail_here(what);
    std::string t = number_text();
    const char* p = t.data();
    if (*p == '+') ++p;
    F v = 0;
    auto r = std::from_chars(p, t.data() + t.size(), v);
    if (r.ec != std::errc() || r.ptr != t.data() + t.size()) fail_at(b, what);
    return v;
  }
  float f32_value(const char* what = "a float") { return special_or_decimal<float, uint32_t>(what); }
  double f64_value(const char* what = "a float") { return special_or_decimal<double, uint64_t>(what); }

  // ---- types --------------------------------------------------------------

  DType dtype_name(const char* what) {
    skip();
    size_t b = pos_;
    std::string w = word();
    if (w == "undefined") return DType::Undefined;
    auto dt = parse_dtype(w);
    if (w.empty() || !dt || std::string(hodu::dtype_name(*dt)) != w) fail_at(b, what);
    return *dt;
  }

  Dim dim() {
    skip();
    if (accept('?')) return Dim::unknown();
    if (starts_number()) return Dim(integer("a dim"));
    Dim d = Dim::sym(name("a dim (integer, name or ?)"));
    if (accept('=')) d.value = integer("a dim value");
    return d;
  }

  Shape shape() {
    expect('[');
    if (accept('*')) {
      expect(']');
      return Shape::unknown_rank();
    }
    std::vector<Dim> dims;
    if (!accept(']')) {
      do dims.push_back(dim());
      while (accept(','));
      expect(']');
    }
    return Shape(std::move(dims));
  }

  ValueType type() {
    DepthGuard g(*this);
    skip();
    if (accept('?')) return ValueType{};
    size_t b = pos_;
    std::string w = peek_ident();
    ValueType t;
    auto elem = [&] {
      if (accept('<')) {
        t.elem = std::make_shared<ValueType>(type());
        expect('>');
      }
    };
    if (w == "seq") {
      word();
      t.kind = ValueType::Kind::Sequence;
      elem();
    } else if (w == "opt") {
      word();
      t.kind = ValueType::Kind::Optional;
      elem();
    } else if (w == "map") {
      word();
      t.kind = ValueType::Kind::Map;
      expect('<');
      t.key_type = dtype_name("a map key type");
      if (accept(',')) t.elem = std::make_shared<ValueType>(type());
      expect('>');
    } else if (w == "sparse") {
      word();
      t.kind = ValueType::Kind::SparseTensor;
      expect('<');
      t.dtype = dtype_name("an element type");
      t.shape = shape();
      expect('>');
    } else if (!w.empty()) {
      t.kind = ValueType::Kind::Tensor;
      t.dtype = dtype_name("a type (f32[...], seq<...>, opt<...>, map<...>, sparse<...> or ?)");
      t.shape = shape();
    } else {
      fail_at(b, "a type (f32[...], seq<...>, opt<...>, map<...>, sparse<...> or ?)");
    }
    return t;
  }

  // ---- tensors ------------------------------------------------------------

  std::vector<uint8_t> base64_decode(size_t b, const std::string& s) {
    auto val = [](char c) -> int {
      if (c >= 'A' && c <= 'Z') return c - 'A';
      if (c >= 'a' && c <= 'z') return c - 'a' + 26;
      if (c >= '0' && c <= '9') return c - '0' + 52;
      if (c == '+') return 62;
      if (c == '/') return 63;
      return -1;
    };
    if (s.size() % 4 != 0) fail_at(b, "base64 text (a multiple of 4 characters)");
    std::vector<uint8_t> out;
    out.reserve(s.size() / 4 * 3);
    for (size_t i = 0; i < s.size(); i += 4) {
      int v[4];
      int pad = 0;
      for (int k = 0; k < 4; ++k) {
        char c = s[i + k];
        if (c == '=' && i + 4 == s.size() && k >= 2) { v[k] = 0; ++pad; continue; }
        if (pad) fail_at(b, "base64 text ('=' only at the end)");
        v[k] = val(c);
        if (v[k] < 0) fail_at(b, "base64 text");
      }
      uint32_t w = (uint32_t(v[0]) << 18) | (uint32_t(v[1]) << 12) | (uint32_t(v[2]) << 6) | uint32_t(v[3]);
      out.push_back(static_cast<uint8_t>(w >> 16));
      if (pad < 2) out.push_back(static_cast<uint8_t>(w >> 8));
      if (pad < 1) out.push_back(static_cast<uint8_t>(w));
    }
    return out;
  }

  template <typename T>
  static void put(std::vector<uint8_t>& out, T v) {
    size_t n = out.size();
    out.resize(n + sizeof(T));
    std::memcpy(out.data() + n, &v, sizeof(T));
  }

  // An integer element that must fit [lo, hi].
  int64_t int_element(int64_t lo, int64_t hi) {
    skip();
    size_t b = pos_;
    int64_t v = integer("an integer element");
    if (v < lo || v > hi) fail_at(b, fmt::format("an integer in [{}, {}]", lo, hi));
    return v;
  }

  // Raw bits written as 0x..., used for narrow floats whose value would not round trip.
  bool accept_hex_bits(uint64_t max, uint64_t& bits) {
    skip();
    if (!(cur() == '0' && (at(1) == 'x' || at(1) == 'X'))) return false;
    size_t b = pos_;
    std::string t = number_text();
    bits = parse_u64(t.substr(2), b, 16, "hex bits 0x...");
    if (bits > max) fail_at(b, "bits that fit the element type");
    return true;
  }

  // Parses one element of numeric dtype `t`, appending its bytes (or its
  // nibble to `nibbles` for the packed 4-bit types).
  void element(DType t, std::vector<uint8_t>& out, std::vector<uint8_t>& nibbles) {
    switch (t) {
      case DType::Bool: {
        std::string w = peek_ident();
        if (w == "true" || w == "false") {
          word();
          out.push_back(w == "true" ? 1 : 0);
        } else {
          out.push_back(static_cast<uint8_t>(int_element(0, 255)));
        }
        return;
      }
      case DType::U8: out.push_back(static_cast<uint8_t>(int_element(0, 255))); return;
      case DType::U16: put<uint16_t>(out, static_cast<uint16_t>(int_element(0, 65535))); return;
      case DType::U32: put<uint32_t>(out, static_cast<uint32_t>(int_element(0, 4294967295LL))); return;
      case DType::U64: {
        skip();
        size_t b = pos_;
        std::string txt = number_text();
        put<uint64_t>(out, parse_u64(txt, b, 10, "an unsigned 64-bit integer"));
        return;
      }
      case DType::I8: out.push_back(static_cast<uint8_t>(static_cast<int8_t>(int_element(-128, 127)))); return;
      case DType::I16: put<int16_t>(out, static_cast<int16_t>(int_element(-32768, 32767))); return;
      case DType::I32:
        put<int32_t>(out, static_cast<int32_t>(int_element(std::numeric_limits<int32_t>::min(),
                                                           std::numeric_limits<int32_t>::max())));
        return;
      case DType::I64: put<int64_t>(out, integer("an integer element")); return;
      case DType::U4: nibbles.push_back(static_cast<uint8_t>(int_element(0, 15))); return;
      case DType::I4: nibbles.push_back(static_cast<uint8_t>(int_element(-8, 7) & 0xF)); return;
      case DType::F32: put<float>(out, f32_value("a float element")); return;
      case DType::F64: put<double>(out, f64_value("a float element")); return;
      case DType::C64:
        expect('(');
        put<float>(out, f32_value("a real part"));
        expect(',');
        put<float>(out, f32_value("an imaginary part"));
        expect(')');
        return;
      case DType::C128:
        expect('(');
        put<double>(out, f64_value("a real part"));
        expect(',');
        put<double>(out, f64_value("an imaginary part"));
        expect(')');
        return;
      default: break;
    }
    if (hs_detail::is_narrow_float(t)) {
      int bits = dtype_bits(t);
      uint64_t raw = 0;
      if (!accept_hex_bits((uint64_t(1) << bits) - 1, raw)) raw = hs_detail::f32_to_narrow(t, f32_value("a float element"));
      if (t == DType::F4E2M1) nibbles.push_back(static_cast<uint8_t>(raw));
      else if (bits == 16) put<uint16_t>(out, static_cast<uint16_t>(raw));
      else out.push_back(static_cast<uint8_t>(raw));
      return;
    }
    fail_here("an element of a supported type");
  }

  // <tensor> | DTYPE[dims] [elements] | DTYPE[dims] base64 "..."
  Tensor tensor() {
    skip();
    if (accept_str("<tensor>")) return Tensor();
    size_t b = pos_;
    DType dt = dtype_name("a tensor (f32[2, 2] [1, 2, 3, 4] or <tensor>)");
    if (dt == DType::Undefined) fail_at(b, "a tensor element type");
    expect('[');
    std::vector<int64_t> dims;
    int64_t numel = 1;
    if (!accept(']')) {
      do {
        skip();
        size_t db = pos_;
        int64_t d = integer("a tensor dim");
        if (d < 0) fail_at(db, "a dim >= 0");
        if (d != 0 && numel > std::numeric_limits<int64_t>::max() / 4 / d) fail_at(db, "a smaller tensor");
        numel *= d;
        dims.push_back(d);
      } while (accept(','));
      expect(']');
    }
    skip();
    size_t pb = pos_;
    if (accept_keyword("base64")) {
      if (dt == DType::String) fail_at(pb, "'[' (string tensors are written inline)");
      skip();
      size_t sb = pos_;
      std::string text = string_lit();
      std::vector<uint8_t> bytes = base64_decode(sb, text);
      size_t need = dtype_storage_bytes(dt, numel);
      if (bytes.size() != need)
        fail_at(sb, fmt::format("{} bytes of base64 data for {}{}, got {}", need, hodu::dtype_name(dt),
                                shape_to_string(dims), bytes.size()));
      return Tensor::from_bytes(dt, std::move(dims), bytes.data(), bytes.size());
    }
    expect('[');
    if (dt == DType::String) {
      std::vector<std::string> values;
      if (!accept(']')) {
        do values.push_back(string_lit());
        while (accept(','));
        expect(']');
      }
      if (static_cast<int64_t>(values.size()) != numel)
        fail_at(pb, fmt::format("{} elements, got {}", numel, values.size()));
      return Tensor::from_strings(std::move(dims), values);
    }
    std::vector<uint8_t> out, nibbles;
    int64_t count = 0;
    if (!accept(']')) {
      do {
        element(dt, out, nibbles);
        ++count;
      } while (accept(','));
      expect(']');
    }
    if (count != numel) fail_at(pb, fmt::format("{} elements for {}{}, got {}", numel, hodu::dtype_name(dt),
                                                 shape_to_string(dims), count));
    if (dtype_is_packed4(dt)) {
      out.assign((nibbles.size() + 1) / 2, 0);
      for (size_t i = 0; i < nibbles.size(); ++i) out[i / 2] |= static_cast<uint8_t>(nibbles[i] << ((i % 2) * 4));
    }
    return Tensor::from_bytes(dt, std::move(dims), out.data(), out.size());
  }

  // ---- attributes ---------------------------------------------------------

  // `<kind>`: an attribute of that kind holding the default value.
  bool kind_keyword(Attribute& a) {
    skip();
    if (cur() != '<') return false;
    size_t b = pos_;
    ++pos_;
    std::string w = word();
    expect('>');
    using K = Attribute::Kind;
    for (K k : {K::Undefined, K::Float, K::Int, K::String, K::Tensor, K::Graph, K::Floats, K::Ints, K::Strings,
                K::Tensors, K::Graphs, K::TypeProto, K::TypeProtos, K::SparseTensor}) {
      if (w == attribute_kind_name(k)) {
        a.kind = k;
        return true;
      }
    }
    fail_at(b, "an attribute kind (<int>, <floats>, <tensor>, ...)");
  }

  enum class ListKind { None, Number, String, Tensor, Graph, Type };

  void attr_value(Attribute& a) {
    DepthGuard g(*this);
    skip();
    size_t b = pos_;
    if (kind_keyword(a)) return;
    char c = cur();
    if (c == '"') {
      a.kind = Attribute::Kind::String;
      a.s = string_lit();
      return;
    }
    if (c == '[') {
      list_value(a);
      return;
    }
    std::string w = peek_ident();
    if (w == "graph") {
      a.kind = Attribute::Kind::Graph;
      a.g = std::make_shared<Graph>(graph());
      return;
    }
    if (w == "type") {
      word();
      a.kind = Attribute::Kind::TypeProto;
      a.types.push_back(type());
      return;
    }
    if (w == "sparse") {
      word();
      a.kind = Attribute::Kind::SparseTensor;
      a.t = tensor();
      return;
    }
    if (!w.empty() && w != "nan" && w != "inf") {
      a.kind = Attribute::Kind::Tensor;
      a.t = tensor();
      return;
    }
    if (w.empty() && !starts_number() && c != '-' && c != '+' && c != '.')
      fail_at(b, "an attribute value (number, string, [list], tensor, graph, type or <kind>)");
    bool is_float = false;
    std::string text = number_token(is_float);
    if (is_float) {
      a.kind = Attribute::Kind::Float;
      a.f = float_from(text, b);
    } else {
      a.kind = Attribute::Kind::Int;
      a.i = int_from(text, b);
    }
  }

  // The text of a number/inf/nan token; is_float when it is not a plain integer.
  std::string number_token(bool& is_float) {
    skip();
    size_t b = pos_;
    size_t save = pos_;
    if (cur() == '-' || cur() == '+') ++pos_;
    if (is_ident_start(cur())) {
      pos_ = save;
      f32_value();  // validates inf/nan/nan(0x...)
      is_float = true;
      return std::string(s_.substr(b, pos_ - b));
    }
    pos_ = save;
    std::string t = number_text();
    is_float = t.find_first_of(".eExX") != std::string::npos;
    if (t.find_first_of("xX") != std::string::npos) fail_at(b, "a decimal number");
    return t;
  }
  float float_from(const std::string& text, size_t b) {
    size_t save = pos_;
    // Re-parse the token text with the float reader.
    Parser sub(text, what_);
    float v;
    try {
      v = sub.f32_value();
      sub.skip();
      if (!sub.eof()) fail_at(b, "a float");
    } catch (const Error&) {
      fail_at(b, "a float");
    }
    pos_ = save;
    return v;
  }
  int64_t int_from(const std::string& text, size_t b) {
    const char* p = text.data();
    if (*p == '+') ++p;
    int64_t v = 0;
    auto r = std::from_chars(p, text.data() + text.size(), v);
    if (text.empty() || r.ec != std::errc() || r.ptr != text.data() + text.size()) fail_at(b, "an integer that fits 64 bits");
    return v;
  }

  void list_value(Attribute& a) {
    expect('[');
    skip();
    size_t b = pos_;
    if (accept(']')) fail_at(b, "a list element (an empty list is written <ints>, <floats>, ...)");
    ListKind kind = ListKind::None;
    std::vector<std::pair<std::string, size_t>> numbers;
    bool any_float = false;
    do {
      skip();
      size_t eb = pos_;
      char c = cur();
      std::string w = peek_ident();
      ListKind k;
      if (c == '"') k = ListKind::String;
      else if (w == "graph") k = ListKind::Graph;
      else if (w == "type") k = ListKind::Type;
      else if ((!w.empty() && w != "nan" && w != "inf") || c == '<') k = ListKind::Tensor;
      else k = ListKind::Number;
      if (kind != ListKind::None && k != kind) fail_at(eb, "a list element of the same kind as the first");
      kind = k;
      switch (k) {
        case ListKind::String: a.strings.push_back(string_lit()); break;
        case ListKind::Graph: {
          DepthGuard g(*this);
          a.graphs.push_back(std::make_shared<Graph>(graph()));
          break;
        }
        case ListKind::Type: word(); a.types.push_back(type()); break;
        case ListKind::Tensor: a.tensors.push_back(tensor()); break;
        case ListKind::Number: {
          if (!starts_number() && c != '-' && c != '+' && c != '.' && w.empty()) fail_at(eb, "a list element");
          bool f = false;
          numbers.emplace_back(number_token(f), eb);
          any_float = any_float || f;
          break;
        }
        case ListKind::None: break;
      }
    } while (accept(','));
    expect(']');
    switch (kind) {
      case ListKind::String: a.kind = Attribute::Kind::Strings; break;
      case ListKind::Graph: a.kind = Attribute::Kind::Graphs; break;
      case ListKind::Type: a.kind = Attribute::Kind::TypeProtos; break;
      case ListKind::Tensor: a.kind = Attribute::Kind::Tensors; break;
      case ListKind::Number:
        if (any_float) {
          a.kind = Attribute::Kind::Floats;
          for (auto& [t, at] : numbers) a.floats.push_back(float_from(t, at));
        } else {
          a.kind = Attribute::Kind::Ints;
          for (auto& [t, at] : numbers) a.ints.push_back(int_from(t, at));
        }
        break;
      case ListKind::None: break;
    }
  }

  std::vector<Attribute> attributes() {
    std::vector<Attribute> attrs;
    expect('{');
    if (accept('}')) return attrs;
    do {
      Attribute a;
      a.name = name("an attribute name");
      expect(':');
      attr_value(a);
      skip();
      if (accept('@')) a.ref_attr_name = name("a referenced attribute name");
      if (accept_keyword("doc")) a.doc = string_lit();
      attrs.push_back(std::move(a));
    } while (accept(','));
    expect('}');
    return attrs;
  }

  // ---- graphs -------------------------------------------------------------

  std::vector<Value> params() {
    std::vector<Value> vs;
    expect('(');
    if (accept(')')) return vs;
    do {
      Value v;
      v.name = value_ref();
      expect(':');
      v.type = type();
      if (accept_keyword("doc")) v.doc = string_lit();
      vs.push_back(std::move(v));
    } while (accept(','));
    expect(')');
    return vs;
  }

  Graph graph() {
    DepthGuard guard(*this);
    expect_keyword("graph");
    Graph g;
    skip();
    if (cur() != '(') g.name = name("a graph name or '('");
    g.inputs = params();
    if (!accept_str("->")) fail_here("'->'");
    g.outputs = params();
    expect('{');
    for (;;) {
      skip();
      if (accept('}')) break;
      if (eof()) fail_here("a statement or '}'");
      std::string kw = peek_ident();
      if (kw == "doc") {
        word();
        g.doc = string_lit();
      } else if (kw == "init") {
        word();
        std::string n = value_ref();
        expect('=');
        g.initializers.emplace_back(std::move(n), tensor());
      } else {
        statement(g);
      }
    }
    return g;
  }

  // Outputs [= call] — a node, or a lone "%v: type" declaration.
  void statement(Graph& g) {
    skip();
    size_t b = pos_;
    Node n;
    std::vector<std::pair<std::string, ValueType>> typed;
    if (accept('(')) {
      expect(')');
    } else {
      if (cur() != '%' && cur() != '_') fail_here("a statement (%out = Op(...), %v: type, init, doc) or '}'");
      do {
        std::string o = use_ref();
        if (!o.empty() && accept(':')) typed.emplace_back(o, type());
        n.outputs.push_back(std::move(o));
      } while (accept(','));
    }
    skip();
    if (cur() != '=') {
      if (n.outputs.size() == 1 && typed.size() == 1) {
        g.value_types[typed[0].first] = std::move(typed[0].second);
        return;
      }
      fail_here("'='");
    }
    ++pos_;
    for (auto& [k, t] : typed) g.value_types[k] = std::move(t);
    std::string first = name("an op name");
    if (accept_str("::")) {
      n.domain = std::move(first);
      n.op_type = name("an op name");
    } else {
      n.op_type = std::move(first);
    }
    expect('(');
    if (!accept(')')) {
      do n.inputs.push_back(use_ref());
      while (accept(','));
      expect(')');
    }
    skip();
    if (cur() == '{') n.attributes = attributes();
    if (accept_keyword("name")) n.name = string_lit();
    if (accept_keyword("doc")) n.doc = string_lit();
    (void)b;
    g.nodes.push_back(std::move(n));
  }
};

}  // namespace

Model parse_hoduscript(std::string_view text, const std::string& what) {
  Parser p(text, what);
  return p.model();
}

}  // namespace hodu
