// Quantization: QuantizeLinear, DequantizeLinear (per-tensor, per-axis, blocked;
// int2/uint2/int4/uint4/8-bit/16-bit integers, float8, float4), DynamicQuantizeLinear.
// Arithmetic follows ONNX's numpy reference: x / scale in the input's float type,
// round half to even, add the zero point, saturate.
#include <algorithm>
#include <cmath>
#include <limits>

#include "engines/interp/ops/op_utils.h"

namespace hodu::interp {
namespace {

// Rounds v to the precision of float dtype t (numpy arithmetic in t).
double round_to(DType t, double v) {
  if (t == DType::F64) return v;
  unsigned char buf[8];
  store_from_double(t, buf, 0, v);
  return load_as_double(t, buf, 0);
}

struct IntRange {
  bool is_int;
  double lo, hi;
};
IntRange int_range(DType t) {
  switch (t) {
    case DType::U8: return {true, 0, 255};
    case DType::I8: return {true, -128, 127};
    case DType::U16: return {true, 0, 65535};
    case DType::I16: return {true, -32768, 32767};
    case DType::U4: return {true, 0, 15};
    case DType::I4: return {true, -8, 7};
    case DType::U2: return {true, 0, 3};
    case DType::I2: return {true, -2, 1};
    default: return {false, 0, 0};
  }
}

bool is_f8(DType t) {
  return t == DType::F8E4M3FN || t == DType::F8E4M3FNUZ || t == DType::F8E5M2 || t == DType::F8E5M2FNUZ;
}

// Maps each element of x to the element of a scale / zero-point tensor (per-tensor,
// per-axis or blocked), validating the shapes.
std::vector<int64_t> param_index(const KernelContext& ctx, const Tensor& x, const Tensor& p, int64_t axis_attr,
                                 int64_t block, const char* what) {
  int64_t n = x.numel();
  std::vector<int64_t> idx(static_cast<size_t>(n), 0);
  if (p.numel() == 1 && p.rank() <= 1) return idx;
  int64_t r = x.rank();
  if (r == 0) ctx.fail(ErrorCode::InvalidArgument, "{} must be a scalar for a scalar input", what);
  int64_t axis = normalize_axis(ctx, axis_attr, r);
  int64_t outer = 1, inner = 1, D = x.dim(axis);
  for (int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
  for (int64_t d = axis + 1; d < r; ++d) inner *= x.dim(d);
  if (block <= 0) {
    if (p.rank() != 1 || p.numel() != D)
      ctx.fail(ErrorCode::InvalidArgument, "{} of shape {} must be a scalar or 1-D of size {} (axis {})", what,
               p.shape_string(), D, axis);
    for (int64_t i = 0; i < n; ++i) idx[i] = (i / inner) % D;
    return idx;
  }
  int64_t nblk = (D + block - 1) / block;
  bool ok = p.rank() == r;
  for (int64_t d = 0; ok && d < r; ++d) ok = p.dim(d) == (d == axis ? nblk : x.dim(d));
  if (!ok)
    ctx.fail(ErrorCode::InvalidArgument, "{} of shape {} does not match input {} blocked by {} along axis {}", what,
             p.shape_string(), x.shape_string(), block, axis);
  for (int64_t i = 0; i < n; ++i) {
    int64_t o = i / (D * inner), d = (i / inner) % D, in = i % inner;
    idx[i] = (o * nblk + d / block) * inner + in;
  }
  return idx;
}

DType attr_dtype(const KernelContext& ctx, const char* name) {
  int64_t code = ctx.node.get_int(name, 0);
  if (code == 0) return DType::Undefined;
  auto d = dtype_from_onnx(static_cast<int>(code));
  if (!d) ctx.fail(ErrorCode::Unsupported, "{} = {} is not a supported data type", name, code);
  return *d;
}

void quantize_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& scale = ctx.input(1);
  const Tensor* zp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  if (!dtype_is_float(x.dtype()) && x.dtype() != DType::I32)
    ctx.fail(ErrorCode::Unsupported, "input dtype {} is not supported", dtype_name(x.dtype()));
  if (!dtype_is_float(scale.dtype())) ctx.fail(ErrorCode::InvalidArgument, "y_scale must be a float tensor");
  int64_t axis = ctx.node.get_int("axis", 1), block = ctx.node.get_int("block_size", 0);
  bool saturate = ctx.node.get_int("saturate", 1) != 0;
  DType odt = attr_dtype(ctx, "output_dtype");
  DType precision = attr_dtype(ctx, "precision");
  if (zp) {
    if (odt != DType::Undefined && odt != zp->dtype())
      ctx.fail(ErrorCode::InvalidArgument, "output_dtype {} does not match the zero point's dtype {}", dtype_name(odt),
               dtype_name(zp->dtype()));
    odt = zp->dtype();
  }
  if (odt == DType::Undefined) odt = DType::U8;
  IntRange range = int_range(odt);
  if (!range.is_int && !is_f8(odt) && odt != DType::F4E2M1)
    ctx.fail(ErrorCode::Unsupported, "quantizing to {} is not supported", dtype_name(odt));
  if (block < 0) ctx.fail(ErrorCode::InvalidArgument, "block_size must be >= 0");
  auto sidx = param_index(ctx, x, scale, axis, block, "y_scale");
  std::vector<int64_t> zidx;
  std::vector<double> zv;
  if (zp) {
    zidx = param_index(ctx, x, *zp, axis, block, "y_zero_point");
    zv = zp->to_doubles();
  }
  // Division happens in numpy's promoted type of x and the scale (or `precision`).
  DType div_t = precision != DType::Undefined ? precision
                : dtype_bits(x.dtype()) >= dtype_bits(scale.dtype()) ? x.dtype() : scale.dtype();
  if (!dtype_is_float(div_t)) div_t = DType::F64;
  auto xv = x.to_doubles();
  auto sv = scale.to_doubles();
  Tensor out = Tensor::empty(odt, x.shape());
  void* dst = out.raw_data();
  for (int64_t i = 0; i < x.numel(); ++i) {
    double xi = xv[i], si = sv[sidx[i]];
    if (precision != DType::Undefined) { xi = round_to(div_t, xi); si = round_to(div_t, si); }
    double q = round_to(div_t, xi / si);
    if (range.is_int) {
      double v = std::nearbyint(q);
      // numpy: rint(x).astype(int32) + zero_point, then clip.
      if (std::isnan(v)) v = std::numeric_limits<int32_t>::min();
      v = std::clamp(v, -2147483648.0, 2147483647.0);
      if (zp) v += zv[zidx[i]];
      v = std::clamp(v, range.lo, range.hi);
      store_from_int64(odt, dst, i, static_cast<int64_t>(v));
    } else if (odt == DType::F4E2M1) {
      if (zp) q = round_to(div_t, q + zv[zidx[i]]);
      store_from_double(odt, dst, i, q, true);
    } else {
      store_from_double(odt, dst, i, static_cast<float>(q), saturate);
    }
  }
  ctx.set_output(0, out);
}

void dequantize_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& scale = ctx.input(1);
  const Tensor* zp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  DType xt = x.dtype();
  if (!(int_range(xt).is_int || is_f8(xt) || xt == DType::F4E2M1 || xt == DType::I32))
    ctx.fail(ErrorCode::Unsupported, "dequantizing {} is not supported", dtype_name(xt));
  if (!dtype_is_float(scale.dtype())) ctx.fail(ErrorCode::InvalidArgument, "x_scale must be a float tensor");
  int64_t axis = ctx.node.get_int("axis", 1), block = ctx.node.get_int("block_size", 0);
  if (block < 0) ctx.fail(ErrorCode::InvalidArgument, "block_size must be >= 0");
  DType odt = attr_dtype(ctx, "output_dtype");
  if (odt == DType::Undefined) odt = scale.dtype();
  if (!dtype_is_float(odt)) ctx.fail(ErrorCode::InvalidArgument, "output_dtype must be a float type");
  auto sidx = param_index(ctx, x, scale, axis, block, "x_scale");
  bool use_zp = zp && !is_f8(xt) && xt != DType::F4E2M1;
  std::vector<int64_t> zidx;
  std::vector<double> zv;
  if (use_zp) {
    if (zp->dtype() != xt)
      ctx.fail(ErrorCode::InvalidArgument, "x_zero_point has dtype {}, expected {}", dtype_name(zp->dtype()),
               dtype_name(xt));
    zidx = param_index(ctx, x, *zp, axis, block, "x_zero_point");
    zv = zp->to_doubles();
  } else if (zp) {
    for (double v : zp->to_doubles())
      if (v != 0) ctx.fail(ErrorCode::InvalidArgument, "x_zero_point must be zero for {} inputs", dtype_name(xt));
  }
  // numpy: x.astype(f32) - zero_point (f64 when the zero point is int32), times the scale.
  DType work = (use_zp && xt == DType::I32) || scale.dtype() == DType::F64 ? DType::F64 : DType::F32;
  auto xv = x.to_doubles();
  auto sv = scale.to_doubles();
  Tensor out = Tensor::empty(odt, x.shape());
  void* dst = out.raw_data();
  for (int64_t i = 0; i < x.numel(); ++i) {
    double dx = round_to(DType::F32, xv[i]);
    if (use_zp) dx = round_to(work, dx - zv[zidx[i]]);
    double y = round_to(work, dx * sv[sidx[i]]);
    store_from_double(odt, dst, i, y);
  }
  ctx.set_output(0, out);
}

void dynamic_quantize_kernel(KernelContext& ctx) {
  const Tensor& x0 = ctx.input(0);
  if (x0.dtype() != DType::F32 && !is_narrow_float(x0.dtype()))
    ctx.fail(ErrorCode::Unsupported, "input dtype {} is not supported (needs float)", dtype_name(x0.dtype()));
  Tensor x = widen(x0).contiguous();
  const float* xv = x.data<float>();
  int64_t n = x.numel();
  const float qmin = 0.f, qmax = 255.f;
  float mn = 0.f, mx = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    mn = std::min(mn, xv[i]);
    mx = std::max(mx, xv[i]);
  }
  float scale = (mx == mn ? 1.0f : (mx - mn)) / (qmax - qmin);
  float zpf = std::clamp(std::nearbyint(qmin - mn / scale), qmin, qmax);
  Tensor y = Tensor::empty(DType::U8, x.shape());
  uint8_t* yd = y.data<uint8_t>();
  for (int64_t i = 0; i < n; ++i) {
    float v = std::nearbyint(xv[i] / scale) + zpf;
    yd[i] = static_cast<uint8_t>(std::clamp(v, qmin, qmax));
  }
  ctx.set_output(0, y);
  ctx.set_output(1, Tensor::scalar(DType::F32, scale));
  ctx.set_output(2, Tensor::scalar(DType::U8, static_cast<uint8_t>(zpf)));
}

// hodu LookupTable: Y[i] = Table[X[i]'s byte] (quantized_lookup.cc writes it).
void lookup_table_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& table = ctx.input(1);
  const DType xt = x.dtype(), tt = table.dtype();
  if ((xt != DType::U8 && xt != DType::I8) || (tt != DType::U8 && tt != DType::I8))
    ctx.fail(ErrorCode::InvalidModel, "takes uint8/int8 values and table, got {} and {}", dtype_name(xt), dtype_name(tt));
  if (table.numel() != 256) ctx.fail(ErrorCode::InvalidModel, "the table has {} entries, not 256", table.numel());
  Tensor xc = x.contiguous(), tc = table.contiguous();
  Tensor y = Tensor::empty(tt, x.shape());
  const auto* in = static_cast<const uint8_t*>(xc.raw_data());
  const auto* t = static_cast<const uint8_t*>(tc.raw_data());
  auto* out = static_cast<uint8_t*>(y.raw_data());
  for (int64_t i = 0; i < x.numel(); ++i) out[i] = t[in[i]];
  ctx.set_output(0, y);
}

}  // namespace

void register_quantization_ops(OpTable& t) {
  t.add("hodu", "LookupTable", lookup_table_kernel);
  t.add("", "QuantizeLinear", quantize_kernel);
  t.add("", "DequantizeLinear", dequantize_kernel);
  t.add("", "DynamicQuantizeLinear", dynamic_quantize_kernel);
}

}  // namespace hodu::interp
