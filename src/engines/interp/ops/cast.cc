// Cast and CastLike: every pair of dtypes, strings both ways (numbers are
// written the way numpy's astype(str) writes them: shortest round-trip digits,
// positional for 1e-4 <= |x| < 1e16, else scientific "1.5e-05"), float8
// saturation, and float8e8m0's round_mode.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "core/float_convert.h"
#include "engines/interp/ops/elementwise_common.h"

namespace hodu::interp {
namespace {

std::string lower_ascii(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// Shortest digits that identify `v` in dtype `dt`: digits (no dot) and the
// decimal exponent of the first digit.
void shortest_digits(DType dt, double v, std::string& digits, int& exp10) {
  char buf[64];
  std::string sci;
  if (dt == DType::F64) {
    auto r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
    sci.assign(buf, r.ptr);
  } else if (dt == DType::F32) {
    auto r = std::to_chars(buf, buf + sizeof(buf), static_cast<float>(v), std::chars_format::scientific);
    sci.assign(buf, r.ptr);
  } else {
    // Narrow floats: the fewest significant digits that convert back to the same value.
    for (int p = 0; p < 17; ++p) {
      std::snprintf(buf, sizeof(buf), "%.*e", p, v);
      uint8_t tmp[8] = {};
      store_from_double(dt, tmp, 0, std::strtod(buf, nullptr));
      if (load_as_double(dt, tmp, 0) == v) break;
    }
    sci = buf;
  }
  // sci: [-]d[.ddd]e[+-]XX
  size_t epos = sci.find('e');
  std::string mant = sci.substr(0, epos);
  exp10 = std::atoi(sci.c_str() + epos + 1);
  digits.clear();
  for (char c : mant)
    if (c >= '0' && c <= '9') digits.push_back(c);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
}

std::string format_float(DType dt, double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  std::string digits;
  int e = 0;
  shortest_digits(dt, v, digits, e);
  std::string out = v < 0 ? "-" : "";
  const double a = std::fabs(v);
  if (a >= 1e-4 && a < 1e16) {
    if (e >= 0) {
      std::string ip = digits.substr(0, std::min<size_t>(digits.size(), static_cast<size_t>(e) + 1));
      while (ip.size() < static_cast<size_t>(e) + 1) ip.push_back('0');
      std::string fp = digits.size() > static_cast<size_t>(e) + 1 ? digits.substr(static_cast<size_t>(e) + 1) : "0";
      out += ip + "." + fp;
    } else {
      out.append("0.");
      out.append(static_cast<size_t>(-e - 1), '0');
      out.append(digits);
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) {
      out += '.';
      out += digits.substr(1);
    }
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", e < 0 ? '-' : '+', std::abs(e));
    out += eb;
  }
  return out;
}

// One element of any numeric tensor → string (numpy's astype(str)).
std::string element_to_string(DType dt, const void* base, int64_t i) {
  if (dt == DType::Bool) return load_as_int64(dt, base, i) ? "True" : "False";
  if (dt == DType::U64) return std::to_string(load_as_uint64(dt, base, i));
  if (dtype_is_integer(dt)) return std::to_string(load_as_int64(dt, base, i));
  if (dtype_is_float(dt) && !dtype_is_complex(dt)) return format_float(dt, load_as_double(dt, base, i));
  fail(ErrorCode::Unsupported, "Cast from {} to string is not supported", dtype_name(dt));
}

double parse_double(const std::string& s0) {
  std::string s = lower_ascii(trim(s0));
  if (s == "inf" || s == "+inf" || s == "infinity" || s == "+infinity") return std::numeric_limits<double>::infinity();
  if (s == "-inf" || s == "-infinity") return -std::numeric_limits<double>::infinity();
  if (s == "nan" || s == "+nan" || s == "-nan") return std::numeric_limits<double>::quiet_NaN();
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size())
    fail(ErrorCode::InvalidArgument, "Cast: cannot parse '{}' as a number", s0);
  return v;
}

// String tensor (contiguous) → `to`.
Tensor cast_from_string(const Tensor& x, DType to, bool saturate, const std::string& round_mode,
                        const KernelContext& ctx) {
  const std::string* s = strs(x);
  const int64_t n = x.numel();
  if (to == DType::F32) {
    Tensor out = Tensor::empty(DType::F32, x.shape());
    float* p = elems<float>(out);
    for (int64_t i = 0; i < n; ++i) {
      std::string t = lower_ascii(trim(s[i]));
      double d = parse_double(s[i]);
      if (std::isfinite(d)) {
        p[i] = std::strtof(t.c_str(), nullptr);  // round once, from the decimal string
      } else {
        p[i] = static_cast<float>(d);
      }
    }
    return out;
  }
  if (dtype_is_integer(to) || to == DType::Bool) {
    const bool is_u64 = to == DType::U64;
    Tensor tmp = Tensor::empty(is_u64 ? DType::U64 : DType::I64, x.shape());
    for (int64_t i = 0; i < n; ++i) {
      std::string t = trim(s[i]);
      if (to == DType::Bool) {
        std::string l = lower_ascii(t);
        if (l == "true") { elems<int64_t>(tmp)[i] = 1; continue; }
        if (l == "false") { elems<int64_t>(tmp)[i] = 0; continue; }
      }
      const char* b = t.c_str();
      const char* e = b + t.size();
      if (!t.empty() && t[0] == '+') ++b;
      bool ok;
      if (is_u64) {
        uint64_t v = 0;
        auto r = std::from_chars(b, e, v);
        ok = r.ec == std::errc() && r.ptr == e;
        if (ok) elems<uint64_t>(tmp)[i] = v;
      } else {
        int64_t v = 0;
        auto r = std::from_chars(b, e, v);
        ok = r.ec == std::errc() && r.ptr == e;
        if (ok) elems<int64_t>(tmp)[i] = v;
      }
      if (!ok) {  // "100.5", "1e3": through a double, truncating
        double d = parse_double(s[i]);
        store_from_double(tmp.dtype(), tmp.raw_data(), i, d);
      }
    }
    return cast_tensor(ctx, tmp, to, saturate, round_mode);
  }
  if (dtype_is_float(to) && !dtype_is_complex(to)) {
    // Parse to f32 (the reference goes through float32 for narrow floats) or f64.
    Tensor tmp = Tensor::empty(to == DType::F64 ? DType::F64 : DType::F32, x.shape());
    for (int64_t i = 0; i < n; ++i) {
      double d = parse_double(s[i]);
      if (to == DType::F64) elems<double>(tmp)[i] = d;
      else elems<float>(tmp)[i] = std::isfinite(d) ? std::strtof(trim(s[i]).c_str(), nullptr) : static_cast<float>(d);
    }
    return cast_tensor(ctx, tmp, to, saturate, round_mode);
  }
  ctx.fail(ErrorCode::Unsupported, "Cast from string to {} is not supported", dtype_name(to));
}

uint8_t to_e8m0(float f, bool saturate, const std::string& mode) {
  if (mode == "down") {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    uint32_t e = (bits >> 23) & 0xFF;
    return static_cast<uint8_t>(e);  // 0xFF (Inf/NaN) stays 0xFF
  }
  return f32_to_f8e8m0(f, saturate, mode == "nearest");
}

}  // namespace

Tensor cast_tensor(const KernelContext& ctx, const Tensor& x0, DType to, bool saturate, const std::string& round_mode) {
  if (round_mode != "up" && round_mode != "down" && round_mode != "nearest")
    ctx.fail(ErrorCode::InvalidArgument, "round_mode must be 'up', 'down' or 'nearest', got '{}'", round_mode);
  const DType from = x0.dtype();
  Tensor x = x0.contiguous();
  if (from == to) return x.clone();
  if (dtype_is_complex(from) || dtype_is_complex(to))
    ctx.fail(ErrorCode::Unsupported, "Cast between {} and {} is not supported", dtype_name(from), dtype_name(to));
  if (from == DType::String) return cast_from_string(x, to, saturate, round_mode, ctx);
  if (to == DType::String) {
    Tensor out = Tensor::empty(DType::String, x.shape());
    std::string* o = strs(out);
    const void* base = x.raw_data();
    for (int64_t i = 0; i < x.numel(); ++i) o[i] = element_to_string(from, base, i);
    return out;
  }
  if (to == DType::F8E8M0) {
    // The reference converts to float32 first, then takes the exponent.
    Tensor f = from == DType::F32 ? x : x.cast(DType::F32);
    Tensor out = Tensor::empty(DType::F8E8M0, x.shape());
    const float* p = elems<float>(f);
    uint8_t* o = static_cast<uint8_t*>(out.raw_data());
    for (int64_t i = 0; i < x.numel(); ++i) o[i] = to_e8m0(p[i], saturate, round_mode);
    return out;
  }
#if defined(__FLT16_MAX__)
  if (from == DType::F64 && to == DType::F16) {
    // numpy rounds double → half once (no detour through float).
    Tensor out = Tensor::empty(DType::F16, x.shape());
    const double* p = elems<double>(x);
    uint16_t* o = static_cast<uint16_t*>(out.raw_data());
    for (int64_t i = 0; i < x.numel(); ++i) {
      _Float16 h = static_cast<_Float16>(p[i]);
      std::memcpy(&o[i], &h, 2);
    }
    return out;
  }
#endif
  return x.cast(to, saturate);
}

namespace {

void k_cast(KernelContext& ctx) {
  const Attribute* a = ctx.node.attr("to");
  if (!a) ctx.fail(ErrorCode::InvalidModel, "attribute 'to' is required");
  const int64_t code = ctx.node.get_int("to", 0);
  auto to = dtype_from_onnx(static_cast<int>(code));
  if (!to) ctx.fail(ErrorCode::Unsupported, "Cast to ONNX data type {} is not supported", code);
  const bool saturate = ctx.node.get_int("saturate", 1) != 0;
  const std::string round_mode = ctx.node.get_string("round_mode", "up");
  ctx.set_output(0, cast_tensor(ctx, ctx.input(0), *to, saturate, round_mode));
}

void k_cast_like(KernelContext& ctx) {
  const DType to = ctx.input(1).dtype();
  const bool saturate = ctx.node.get_int("saturate", 1) != 0;
  const std::string round_mode = ctx.node.get_string("round_mode", "up");
  ctx.set_output(0, cast_tensor(ctx, ctx.input(0), to, saturate, round_mode));
}

}  // namespace

void register_cast_ops(OpTable& t) {
  t.add("", "Cast", k_cast);
  t.add("", "CastLike", k_cast_like);
}

}  // namespace hodu::interp
