// .npy: numpy's array file. Magic "\x93NUMPY", version 1.0 / 2.0 / 3.0, a
// Python-literal header {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// then the raw elements. Reads C and Fortran order, either byte order, bool,
// every integer/float/complex numpy type, and fixed-width strings (S and U).
#include <algorithm>
#include <cctype>
#include <optional>

#include "formats/tensor_files.h"

namespace hodu {
namespace {

using tensor_files::ByteReader;

constexpr std::string_view kMagic = "\x93NUMPY";

// The parsed 'descr': element type, byte size, and byte order.
struct NpyType {
  DType dtype = DType::Undefined;
  size_t item_size = 0;       // bytes per element in the file
  bool big_endian = false;
  char string_kind = 0;       // 'S' (bytes) or 'U' (UTF-32) for string arrays
};

struct NpyHeader {
  NpyType type;
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

// A tiny parser for the header's Python dict literal.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& what) : text_(text), what_(what) {}

  NpyHeader parse() {
    NpyHeader h;
    bool have_descr = false, have_order = false, have_shape = false;
    expect('{');
    while (!peek_is('}')) {
      std::string key = parse_string();
      expect(':');
      if (key == "descr") {
        skip_space();
        if (peek_is('['))
          fail(ErrorCode::Unsupported, "{}: structured numpy arrays (descr is a list) are not supported", what_);
        h.type = parse_descr(parse_string());
        have_descr = true;
      } else if (key == "fortran_order") {
        h.fortran_order = parse_bool();
        have_order = true;
      } else if (key == "shape") {
        h.shape = parse_shape();
        have_shape = true;
      } else {
        fail(ErrorCode::InvalidArgument, "{}: unexpected key '{}' in the .npy header", what_, key);
      }
      skip_space();
      if (!peek_is(',')) break;
      ++pos_;
    }
    expect('}');
    skip_space();
    HODU_CHECK(pos_ == text_.size(), ErrorCode::InvalidArgument, "{}: junk after the .npy header dict", what_);
    HODU_CHECK(have_descr && have_order && have_shape, ErrorCode::InvalidArgument,
               "{}: the .npy header needs 'descr', 'fortran_order' and 'shape'", what_);
    return h;
  }

 private:
  [[noreturn]] void bad(const char* expected) {
    fail(ErrorCode::InvalidArgument, "{}: malformed .npy header: expected {} at column {} of \"{}\"", what_,
         expected, pos_, std::string(text_));
  }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool peek_is(char c) {
    skip_space();
    return pos_ < text_.size() && text_[pos_] == c;
  }
  void expect(char c) {
    if (!peek_is(c)) {
      char expected[4] = {'\'', c, '\'', 0};
      bad(expected);
    }
    ++pos_;
  }
  std::string parse_string() {
    skip_space();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) bad("a quoted string");
    char quote = text_[pos_++];
    size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos) bad("a closing quote");
    std::string s(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return s;
  }
  bool parse_bool() {
    skip_space();
    if (text_.substr(pos_, 4) == "True") { pos_ += 4; return true; }
    if (text_.substr(pos_, 5) == "False") { pos_ += 5; return false; }
    bad("True or False");
  }
  std::vector<int64_t> parse_shape() {
    std::vector<int64_t> shape;
    expect('(');
    while (!peek_is(')')) {
      skip_space();
      size_t start = pos_;
      int64_t v = 0;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        if (v > (int64_t{1} << 50)) bad("a reasonable dimension");
        v = v * 10 + (text_[pos_++] - '0');
      }
      if (pos_ == start) bad("a non-negative integer dimension");
      if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;  // Python 2 longs
      shape.push_back(v);
      if (shape.size() > 64) bad("at most 64 dimensions");
      if (!peek_is(',')) break;
      ++pos_;
    }
    expect(')');
    return shape;
  }
  NpyType parse_descr(const std::string& descr) {
    NpyType t;
    size_t i = 0;
    char order = '=';
    if (i < descr.size() && std::string_view("<>|=").find(descr[i]) != std::string_view::npos) order = descr[i++];
    if (i >= descr.size()) bad("a dtype in 'descr'");
    char kind = descr[i++];
    std::string digits = descr.substr(i);
    if (digits.empty() || digits.size() > 6 || !std::all_of(digits.begin(), digits.end(), ::isdigit))
      fail(ErrorCode::Unsupported, "{}: unsupported numpy dtype '{}'", what_, descr);
    size_t size = std::stoul(digits);
    t.item_size = size;
    t.big_endian = order == '>';
    auto pick = [&](std::initializer_list<std::pair<size_t, DType>> options) {
      for (auto [s, d] : options)
        if (s == size) { t.dtype = d; return; }
    };
    switch (kind) {
      case 'b': pick({{1, DType::Bool}}); break;
      case 'i': pick({{1, DType::I8}, {2, DType::I16}, {4, DType::I32}, {8, DType::I64}}); break;
      case 'u': pick({{1, DType::U8}, {2, DType::U16}, {4, DType::U32}, {8, DType::U64}}); break;
      case 'f': pick({{2, DType::F16}, {4, DType::F32}, {8, DType::F64}}); break;
      case 'c': pick({{8, DType::C64}, {16, DType::C128}}); break;
      case 'S': t.dtype = DType::String; t.string_kind = 'S'; break;
      case 'U': t.dtype = DType::String; t.string_kind = 'U'; t.item_size = size * 4; break;
      default: break;
    }
    if (t.dtype == DType::Undefined)
      fail(ErrorCode::Unsupported, "{}: unsupported numpy dtype '{}' (bool, int, uint, float, complex, S and U are)",
           what_, descr);
    return t;
  }

  std::string_view text_;
  const std::string& what_;
  size_t pos_ = 0;
};

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// UTF-8 → code points; invalid bytes become U+FFFD.
std::vector<uint32_t> utf8_to_code_points(const std::string& s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    int extra = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
    if (extra < 0 || (extra > 0 && i + extra >= s.size())) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    uint32_t cp = extra == 0 ? c : c & (0x3F >> extra);
    bool ok = true;
    for (int k = 1; k <= extra; ++k) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) { ok = false; break; }
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (!ok) { out.push_back(0xFFFD); ++i; continue; }
    out.push_back(cp);
    i += extra + 1;
  }
  return out;
}

Tensor read_string_elements(std::string_view data, const NpyHeader& h, int64_t n, const std::vector<int64_t>& shape,
                            const std::string& what) {
  std::vector<std::string> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    std::string_view item = data.substr(static_cast<size_t>(i) * h.type.item_size, h.type.item_size);
    std::string& s = values[static_cast<size_t>(i)];
    if (h.type.string_kind == 'S') {
      s.assign(item.substr(0, item.find('\0')));
      continue;
    }
    for (size_t k = 0; k + 4 <= item.size(); k += 4) {
      auto b = reinterpret_cast<const unsigned char*>(item.data() + k);
      uint32_t cp = h.type.big_endian ? (uint32_t{b[0]} << 24 | uint32_t{b[1]} << 16 | uint32_t{b[2]} << 8 | b[3])
                                      : (uint32_t{b[3]} << 24 | uint32_t{b[2]} << 16 | uint32_t{b[1]} << 8 | b[0]);
      if (cp == 0) break;
      HODU_CHECK(cp <= 0x10FFFF, ErrorCode::InvalidArgument, "{}: invalid code point {:#x} in a unicode array", what,
                 cp);
      append_utf8(s, cp);
    }
  }
  return Tensor::from_strings(shape, values);
}

// Byte-swaps every scalar (complex numbers: each half on its own).
void swap_elements(std::string& data, size_t item_size, DType dtype) {
  size_t scalar = dtype_is_complex(dtype) ? item_size / 2 : item_size;
  if (scalar <= 1) return;
  for (size_t i = 0; i + scalar <= data.size(); i += scalar) std::reverse(data.begin() + i, data.begin() + i + scalar);
}

std::string_view npy_descr(DType t) {
  switch (t) {
    case DType::Bool: return "|b1";
    case DType::U8: return "|u1";
    case DType::U16: return "<u2";
    case DType::U32: return "<u4";
    case DType::U64: return "<u8";
    case DType::I8: return "|i1";
    case DType::I16: return "<i2";
    case DType::I32: return "<i4";
    case DType::I64: return "<i8";
    case DType::F16: return "<f2";
    case DType::F32: return "<f4";
    case DType::F64: return "<f8";
    case DType::C64: return "<c8";
    case DType::C128: return "<c16";
    default: return "";
  }
}

}  // namespace

Tensor read_npy(std::string_view bytes, const std::string& what) {
  ByteReader r(bytes, what);
  HODU_CHECK(bytes.substr(0, kMagic.size()) == kMagic, ErrorCode::InvalidArgument,
             "{}: not a .npy file (bad magic)", what);
  r.take(kMagic.size(), "magic");
  auto major = r.read<uint8_t>("version");
  auto minor = r.read<uint8_t>("version");
  HODU_CHECK(major >= 1 && major <= 3 && minor == 0, ErrorCode::InvalidArgument,
             "{}: unsupported .npy version {}.{} (1.0, 2.0 and 3.0 are known)", what, major, minor);
  uint64_t header_len = major == 1 ? r.read<uint16_t>("header length") : r.read<uint32_t>("header length");
  std::string_view header_text = r.take(header_len, "header");
  // The header is ASCII (version 3: UTF-8) and ends with a newline, padded with spaces.
  HODU_CHECK(!header_text.empty() && header_text.back() == '\n', ErrorCode::InvalidArgument,
             "{}: the .npy header does not end with a newline", what);
  NpyHeader h = HeaderParser(header_text, what).parse();

  int64_t n = tensor_files::checked_numel(h.shape, what);
  HODU_CHECK(h.type.item_size == 0 || static_cast<uint64_t>(n) <= r.remaining() / h.type.item_size,
             ErrorCode::InvalidArgument, "{}: truncated: shape {} needs {} bytes of data, the file has {}", what,
             shape_to_string(h.shape), static_cast<uint64_t>(n) * h.type.item_size, r.remaining());
  uint64_t data_bytes = static_cast<uint64_t>(n) * h.type.item_size;
  HODU_CHECK(data_bytes == r.remaining(), ErrorCode::InvalidArgument,
             "{}: {} bytes after the data of shape {} (the file is longer than its header says)", what,
             r.remaining() - data_bytes, shape_to_string(h.shape));
  std::string_view data = r.take(data_bytes, "data");

  // Fortran order: the file holds the transpose; read it as such, then permute back.
  std::vector<int64_t> file_shape = h.shape;
  if (h.fortran_order) std::reverse(file_shape.begin(), file_shape.end());

  Tensor t;
  if (h.type.dtype == DType::String) {
    t = read_string_elements(data, h, n, file_shape, what);
  } else {
    std::string copy(data);
    if (h.type.big_endian) swap_elements(copy, h.type.item_size, h.type.dtype);
    t = Tensor::from_bytes(h.type.dtype, file_shape, copy.data(), copy.size());
  }
  if (h.fortran_order && t.rank() > 1) {
    std::vector<int64_t> reverse_axes(t.rank());
    for (int64_t i = 0; i < t.rank(); ++i) reverse_axes[i] = t.rank() - 1 - i;
    t = t.permute(reverse_axes).contiguous();
  }
  return t;
}

std::string write_npy(const Tensor& t) {
  std::string descr(npy_descr(t.dtype()));
  std::vector<std::vector<uint32_t>> code_points;
  size_t max_len = 1;
  if (t.dtype() == DType::String) {
    Tensor c = t.contiguous();
    for (int64_t i = 0; i < c.numel(); ++i) {
      code_points.push_back(utf8_to_code_points(c.string_data()[i]));
      max_len = std::max(max_len, code_points.back().size());
    }
    descr = fmt::format("<U{}", max_len);
  }
  if (descr.empty())
    fail(ErrorCode::Unsupported, "{} tensors have no numpy dtype; save them as .hdt (or .safetensors) instead",
         dtype_name(t.dtype()));

  std::string shape = "(";
  for (size_t i = 0; i < t.shape().size(); ++i) shape += fmt::format("{}{}", i ? ", " : "", t.shape()[i]);
  shape += t.shape().size() == 1 ? ",)" : ")";
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", descr, shape);

  // Pad with spaces so that the data starts on a 64-byte boundary, as numpy does.
  bool v1 = header.size() + 1 + 10 <= 65535;
  size_t prefix = kMagic.size() + 2 + (v1 ? 2 : 4);
  size_t total = (prefix + header.size() + 1 + 63) / 64 * 64;
  header.append(total - prefix - header.size() - 1, ' ');
  header += '\n';

  std::string out(kMagic);
  out += static_cast<char>(v1 ? 1 : 2);
  out += '\0';
  if (v1) tensor_files::append_le<uint16_t>(out, static_cast<uint16_t>(header.size()));
  else tensor_files::append_le<uint32_t>(out, static_cast<uint32_t>(header.size()));
  out += header;
  if (t.dtype() == DType::String) {
    for (const auto& cps : code_points)
      for (size_t k = 0; k < max_len; ++k) tensor_files::append_le<uint32_t>(out, k < cps.size() ? cps[k] : 0);
  } else {
    out += tensor_files::tensor_bytes(t);
  }
  return out;
}

}  // namespace hodu
