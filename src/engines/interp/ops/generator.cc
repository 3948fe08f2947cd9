// Generators: Constant, ConstantOfShape, Range, EyeLike, and the random ops
// (RandomNormal/Uniform[Like], Bernoulli, Multinomial). Random ops are seeded
// from the node's `seed` attribute when present, else from ctx.seed; they draw
// sequentially (one stream per node), so results do not depend on ctx.threads.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <string>

#include "engines/interp/ops/elementwise_common.h"

namespace hodu::interp {
namespace {

// ---- Constant ------------------------------------------------------------------

void k_constant(KernelContext& ctx) {
  const Node& n = ctx.node;
  static const char* kNames[] = {"value",      "sparse_value", "value_float",  "value_floats",
                                 "value_int",  "value_ints",   "value_string", "value_strings"};
  const Attribute* found = nullptr;
  int count = 0;
  for (const char* name : kNames)
    if (const Attribute* a = n.attr(name)) {
      found = a;
      ++count;
    }
  if (count != 1)
    ctx.fail(ErrorCode::InvalidModel, "Constant needs exactly one of value, sparse_value, value_float(s), "
                                      "value_int(s), value_string(s); got {}",
             count);
  const std::string& name = found->name;
  using K = Attribute::Kind;
  if (name == "value" || name == "sparse_value") {
    if (found->kind != K::Tensor && found->kind != K::SparseTensor)
      ctx.fail(ErrorCode::InvalidModel, "attribute '{}' must be a tensor", name);
    if (!found->t.defined()) ctx.fail(ErrorCode::InvalidModel, "attribute '{}' holds no tensor", name);
    ctx.set_output(0, found->t);
  } else if (name == "value_float") {
    ctx.set_output(0, Tensor::scalar(DType::F32, n.get_float(name, 0.f)));
  } else if (name == "value_floats") {
    auto v = n.get_floats(name);
    ctx.set_output(0, Tensor::from_vector(DType::F32, {static_cast<int64_t>(v.size())}, v));
  } else if (name == "value_int") {
    ctx.set_output(0, Tensor::scalar(DType::I64, n.get_int(name, 0)));
  } else if (name == "value_ints") {
    auto v = n.get_ints(name);
    ctx.set_output(0, Tensor::from_vector(DType::I64, {static_cast<int64_t>(v.size())}, v));
  } else if (name == "value_string") {
    ctx.set_output(0, Tensor::from_strings({}, {n.get_string(name, "")}));
  } else {
    auto v = n.get_strings(name);
    ctx.set_output(0, Tensor::from_strings({static_cast<int64_t>(v.size())}, v));
  }
}

// Validated output shape from a 1-D int64 shape tensor.
std::vector<int64_t> shape_from_input(const KernelContext& ctx, const Tensor& s) {
  if (s.rank() > 1) ctx.fail(ErrorCode::InvalidArgument, "shape input must be 1-D, got shape {}", s.shape_string());
  if (!dtype_is_integer(s.dtype()))
    ctx.fail(ErrorCode::InvalidArgument, "shape input must be int64, got {}", dtype_name(s.dtype()));
  auto dims = s.to_int64s();
  int64_t total = 1;
  for (int64_t d : dims) {
    if (d < 0) ctx.fail(ErrorCode::InvalidArgument, "shape {} has a negative dimension", shape_to_string(dims));
    if (d > 0 && total > std::numeric_limits<int64_t>::max() / d)
      ctx.fail(ErrorCode::InvalidArgument, "shape {} is too large", shape_to_string(dims));
    total *= d;
  }
  return dims;
}

void k_constant_of_shape(KernelContext& ctx) {
  auto dims = shape_from_input(ctx, ctx.input(0));
  const Tensor* value = ctx.node.get_tensor("value");
  Tensor v = value ? value->contiguous() : Tensor::scalar(DType::F32, 0.0f);
  if (v.numel() != 1)
    ctx.fail(ErrorCode::InvalidModel, "attribute 'value' must hold one element, got shape {}", v.shape_string());
  Tensor out = Tensor::empty(v.dtype(), dims);
  const int64_t n = out.numel();
  if (v.dtype() == DType::String) {
    for (int64_t i = 0; i < n; ++i) strs(out)[i] = strs(v)[0];
  } else if (dtype_is_packed4(v.dtype())) {
    const double d = v.get_double(0);
    for (int64_t i = 0; i < n; ++i) out.set_double(i, d);
  } else {
    const size_t es = static_cast<size_t>(dtype_bits(v.dtype()) / 8);
    auto* dst = static_cast<uint8_t*>(out.raw_data());
    const auto* src = static_cast<const uint8_t*>(v.raw_data());
    for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * es, src, es);
  }
  ctx.set_output(0, out);
}

// ---- Range ---------------------------------------------------------------------

void k_range(KernelContext& ctx) {
  const Tensor& s = ctx.input(0);
  const Tensor& l = ctx.input(1);
  const Tensor& d = ctx.input(2);
  const DType dt = s.dtype();
  if (l.dtype() != dt || d.dtype() != dt)
    ctx.fail(ErrorCode::InvalidArgument, "start, limit and delta must have the same dtype");
  for (const Tensor* t : {&s, &l, &d})
    if (t->numel() != 1) ctx.fail(ErrorCode::InvalidArgument, "start, limit and delta must be scalars");
  Tensor result;
  if (dtype_is_float(dt)) {
    const double start = s.get_double(0), limit = l.get_double(0), delta = d.get_double(0);
    if (delta == 0 || !std::isfinite(delta) || !std::isfinite(start) || !std::isfinite(limit))
      ctx.fail(ErrorCode::InvalidArgument, "Range needs finite start/limit and a non-zero finite delta");
    const double cnt = std::ceil((limit - start) / delta);
    if (cnt > 1e10) ctx.fail(ErrorCode::InvalidArgument, "Range would produce {} elements", cnt);
    const int64_t n = cnt > 0 ? static_cast<int64_t>(cnt) : 0;
    Tensor wide = Tensor::empty(dt == DType::F64 ? DType::F64 : DType::F32, {n});
    if (dt == DType::F64) {
      double* p = elems<double>(wide);
      for (int64_t i = 0; i < n; ++i) p[i] = start + static_cast<double>(i) * delta;
    } else {
      // The reference computes in the input type: start + i * delta in float.
      float* p = elems<float>(wide);
      const float fs = static_cast<float>(start), fd = static_cast<float>(delta);
      for (int64_t i = 0; i < n; ++i) p[i] = fs + static_cast<float>(i) * fd;
    }
    result = narrow_to(wide, dt);
  } else if (dtype_is_integer(dt)) {
    const int64_t start = s.get_int64(0), limit = l.get_int64(0), delta = d.get_int64(0);
    if (delta == 0) ctx.fail(ErrorCode::InvalidArgument, "Range needs a non-zero delta");
    // ceil((limit - start) / delta) without overflow, in wide arithmetic.
    const __int128 span = static_cast<__int128>(limit) - start;
    __int128 q = span / delta;
    if (span % delta != 0 && ((span < 0) == (delta < 0))) ++q;
    if (q > (__int128)1e10) ctx.fail(ErrorCode::InvalidArgument, "Range would produce too many elements");
    const int64_t n = q > 0 ? static_cast<int64_t>(q) : 0;
    Tensor wide = Tensor::empty(DType::I64, {n});
    int64_t* p = elems<int64_t>(wide);
    for (int64_t i = 0; i < n; ++i) p[i] = start + i * delta;
    result = dt == DType::I64 ? wide : wide.cast(dt);
  } else {
    ctx.fail(ErrorCode::Unsupported, "dtype {} is not supported by Range", dtype_name(dt));
  }
  ctx.set_output(0, result);
}

// ---- EyeLike -------------------------------------------------------------------

void k_eye_like(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (x.rank() != 2) ctx.fail(ErrorCode::InvalidArgument, "input must be 2-D, got shape {}", x.shape_string());
  DType dt = x.dtype();
  if (ctx.node.has_attr("dtype")) {
    auto d = dtype_from_onnx(static_cast<int>(ctx.node.get_int("dtype", 0)));
    if (!d) ctx.fail(ErrorCode::Unsupported, "dtype {} is not supported", ctx.node.get_int("dtype", 0));
    dt = *d;
  }
  if (dt == DType::String || dtype_is_complex(dt))
    ctx.fail(ErrorCode::Unsupported, "dtype {} is not supported by EyeLike", dtype_name(dt));
  const int64_t k = ctx.node.get_int("k", 0);
  const int64_t r = x.dim(0), c = x.dim(1);
  Tensor out = Tensor::empty(dt, {r, c});
  for (int64_t i = 0; i < r; ++i) {
    const int64_t j = i + k;
    if (j >= 0 && j < c) out.set_double(i * c + j, 1.0);
  }
  ctx.set_output(0, out);
}

// ---- random --------------------------------------------------------------------

// splitmix64-seeded xoshiro256** : portable and deterministic.
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (auto& s : s_) {
      seed += 0x9E3779B97F4A7C15ull;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      s = z ^ (z >> 31);
    }
  }
  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double normal() {
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

Rng make_rng(const KernelContext& ctx) {
  if (ctx.node.has_attr("seed")) {
    const float s = ctx.node.get_float("seed", 0.f);
    uint32_t bits;
    std::memcpy(&bits, &s, 4);
    return Rng(0x5EEDull ^ (static_cast<uint64_t>(bits) << 16));
  }
  return Rng(ctx.seed);
}

DType random_dtype(const KernelContext& ctx, DType def) {
  DType dt = def;
  if (ctx.node.has_attr("dtype")) {
    auto d = dtype_from_onnx(static_cast<int>(ctx.node.get_int("dtype", 0)));
    if (!d) ctx.fail(ErrorCode::Unsupported, "dtype {} is not supported", ctx.node.get_int("dtype", 0));
    dt = *d;
  }
  return dt;
}

Tensor random_fill(const KernelContext& ctx, DType dt, const std::vector<int64_t>& shape, bool normal) {
  if (!dtype_is_float(dt) || dtype_is_complex(dt))
    ctx.fail(ErrorCode::Unsupported, "dtype {} is not supported (needs a float type)", dtype_name(dt));
  for (int64_t d : shape)
    if (d < 0) ctx.fail(ErrorCode::InvalidArgument, "shape {} has a negative dimension", shape_to_string(shape));
  Rng rng = make_rng(ctx);
  Tensor out = Tensor::empty(DType::F64, shape);
  double* p = elems<double>(out);
  if (normal) {
    const double mean = ctx.node.get_float("mean", 0.f), scale = ctx.node.get_float("scale", 1.f);
    for (int64_t i = 0; i < out.numel(); ++i) p[i] = mean + scale * rng.normal();
  } else {
    const double lo = ctx.node.get_float("low", 0.f), hi = ctx.node.get_float("high", 1.f);
    for (int64_t i = 0; i < out.numel(); ++i) p[i] = lo + (hi - lo) * rng.uniform();
  }
  return dt == DType::F64 ? out : out.cast(dt);
}

void k_random_normal(KernelContext& ctx) {
  ctx.set_output(0, random_fill(ctx, random_dtype(ctx, DType::F32), ctx.node.get_ints("shape"), true));
}
void k_random_uniform(KernelContext& ctx) {
  ctx.set_output(0, random_fill(ctx, random_dtype(ctx, DType::F32), ctx.node.get_ints("shape"), false));
}
void k_random_normal_like(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ctx.set_output(0, random_fill(ctx, random_dtype(ctx, x.dtype()), x.shape(), true));
}
void k_random_uniform_like(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ctx.set_output(0, random_fill(ctx, random_dtype(ctx, x.dtype()), x.shape(), false));
}

void k_bernoulli(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (!dtype_is_float(x.dtype())) ctx.fail(ErrorCode::Unsupported, "input must be a float type");
  const DType dt = random_dtype(ctx, x.dtype());
  if (dt == DType::String || dtype_is_complex(dt))
    ctx.fail(ErrorCode::Unsupported, "dtype {} is not supported by Bernoulli", dtype_name(dt));
  Rng rng = make_rng(ctx);
  auto probs = x.to_doubles();
  for (size_t i = 0; i < probs.size(); ++i)
    if (!(probs[i] >= 0.0 && probs[i] <= 1.0))
      ctx.fail(ErrorCode::InvalidArgument, "input element {} is {}, not a probability in [0, 1]", i, probs[i]);
  Tensor out = Tensor::empty(dt, x.shape());
  for (int64_t i = 0; i < out.numel(); ++i) out.set_double(i, rng.uniform() < probs[i] ? 1.0 : 0.0);
  ctx.set_output(0, out);
}

void k_multinomial(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (x.rank() != 2) ctx.fail(ErrorCode::InvalidArgument, "input must be 2-D [batch, classes], got {}", x.shape_string());
  if (!dtype_is_float(x.dtype())) ctx.fail(ErrorCode::Unsupported, "input must be a float type");
  const int64_t samples = ctx.node.get_int("sample_size", 1);
  if (samples < 0) ctx.fail(ErrorCode::InvalidArgument, "sample_size must be >= 0, got {}", samples);
  const DType dt = random_dtype(ctx, DType::I32);
  if (dt != DType::I32 && dt != DType::I64)
    ctx.fail(ErrorCode::InvalidArgument, "dtype must be int32 or int64, got {}", dtype_name(dt));
  const int64_t batch = x.dim(0), classes = x.dim(1);
  if (classes == 0 && samples > 0) ctx.fail(ErrorCode::InvalidArgument, "input has no classes");
  auto logits = x.to_doubles();
  Rng rng = make_rng(ctx);
  Tensor out = Tensor::empty(DType::I64, {batch, samples});
  int64_t* o = elems<int64_t>(out);
  std::vector<double> cdf(static_cast<size_t>(classes));
  for (int64_t b = 0; b < batch; ++b) {
    // Unnormalized log-probabilities → cumulative distribution.
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < classes; ++c) mx = std::max(mx, logits[b * classes + c]);
    double total = 0;
    for (int64_t c = 0; c < classes; ++c) {
      total += std::isfinite(mx) ? std::exp(logits[b * classes + c] - mx) : 1.0;
      cdf[c] = total;
    }
    for (int64_t s = 0; s < samples; ++s) {
      const double u = rng.uniform() * total;
      int64_t k = std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin();
      o[b * samples + s] = std::min(k, classes - 1);
    }
  }
  ctx.set_output(0, dt == DType::I64 ? out : out.cast(dt));
}

}  // namespace

void register_generator_ops(OpTable& t) {
  t.add("", "Constant", k_constant);
  t.add("", "ConstantOfShape", k_constant_of_shape);
  t.add("", "Range", k_range);
  t.add("", "EyeLike", k_eye_like);
  t.add("", "RandomNormal", k_random_normal);
  t.add("", "RandomUniform", k_random_uniform);
  t.add("", "RandomNormalLike", k_random_normal_like);
  t.add("", "RandomUniformLike", k_random_uniform_like);
  t.add("", "Bernoulli", k_bernoulli);
  t.add("", "Multinomial", k_multinomial);
}

}  // namespace hodu::interp
