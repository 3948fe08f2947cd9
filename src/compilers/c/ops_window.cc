// Emitters for window ops outside the float32 1-D/2-D fast path of ops_nn.cc: MaxPool (any
// rank, int8/uint8/float types, the Indices output, storage_order), AveragePool of any rank,
// LpPool. One call of kernels/hk_window.c over doubles.
#include <fmt/format.h>

#include "compilers/c/ops_generic.h"
#include "core/error.h"

namespace hodu::compilers::c {
namespace {

// Any numeric value as `const double*` (integers converted exactly below 2^53).
std::string doubles_in(Codegen& cg, const std::string& v) {
  DType dt = cg.dtype_of(v);
  if (dtype_is_float(dt)) return f64_in(cg, v);
  HODU_CHECK(dtype_is_integer(dt), ErrorCode::Unsupported, "value '{}' has dtype {}, a number type is needed", v,
             dtype_name(dt));
  SymInt cnt = numel(cg.shape_of(v));
  std::string p = cg.ptr(v);
  std::string out = fmt::format("((double*){})", cg.scratch(cnt * 8));
  cg.emit(fmt::format("hk_cast({}, {}, {}, {}, {}, 1, 0);", p, static_cast<int>(dt), out, static_cast<int>(DType::F64),
                      cnt));
  return out;
}

}  // namespace

bool pool_needs_general(Codegen& cg, const Node& n) {
  if (n.op_type == "LpPool") return true;
  size_t rank = cg.shape_of(n.inputs[0]).size();
  return cg.dtype_of(n.inputs[0]) != DType::F32 || rank < 3 || rank > 4 || n.has_output(1) ||
         n.get_int("storage_order", 0) != 0;
}

void emit_pool_general(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]), ys = cg.shape_of(n.outputs[0]);
  HODU_CHECK(xs.size() >= 3 && xs.size() <= 10 && ys.size() == xs.size(), ErrorCode::InvalidModel,
             "{}: X must be [N, C, spatial...] with 1 to 8 spatial dims, got rank {}", n.describe(), xs.size());
  const size_t nd = xs.size() - 2;
  const int kind = n.op_type == "MaxPool" ? 0 : n.op_type == "AveragePool" ? 1 : 2;
  HODU_CHECK(kind == 0 || dtype_is_float(cg.dtype_of(n.inputs[0])), ErrorCode::Unsupported,
             "{}: {} of {} (float types only)", n.describe(), n.op_type, dtype_name(cg.dtype_of(n.inputs[0])));
  auto kernel = n.get_ints("kernel_shape");
  auto strides = n.get_ints("strides", std::vector<int64_t>(nd, 1));
  auto dil = n.get_ints("dilations", std::vector<int64_t>(nd, 1));
  auto pads = n.get_ints("pads", std::vector<int64_t>(2 * nd, 0));
  HODU_CHECK(kernel.size() == nd && strides.size() == nd && dil.size() == nd && pads.size() == 2 * nd,
             ErrorCode::InvalidModel, "{}: kernel_shape/strides/dilations/pads do not match {} spatial dims",
             n.describe(), nd);
  SymShape in(xs.begin() + 2, xs.end()), out(ys.begin() + 2, ys.end()), begin, end;
  const std::string auto_pad = n.get_string("auto_pad", "NOTSET");
  for (size_t d = 0; d < nd; ++d) {
    HODU_CHECK(kernel[d] > 0 && strides[d] > 0 && dil[d] > 0, ErrorCode::InvalidModel,
               "{}: kernel_shape, strides and dilations must be positive", n.describe());
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      SymInt total = sym_max(0, (out[d] - 1) * strides[d] + (kernel[d] - 1) * dil[d] + 1 - in[d]);
      begin.push_back(auto_pad == "SAME_UPPER" ? floordiv(total, 2) : total - floordiv(total, 2));
      end.push_back(total - begin.back());
    } else if (auto_pad == "VALID") {
      begin.push_back(0), end.push_back(0);
    } else {
      begin.push_back(pads[d]), end.push_back(pads[d + nd]);
    }
  }
  need_generic_kernels(cg);
  cg.kernel_sections.insert("window");
  std::string x = doubles_in(cg, n.inputs[0]);
  WideOut y = wide_out(cg, n.outputs[0], ys);
  std::string ind = "NULL";
  if (n.has_output(1)) {
    cg.define(n.outputs[1], DType::I64, cg.shape_of(n.outputs[1]));
    ind = fmt::format("((int64_t*){})", cg.ptr(n.outputs[1]));
  }
  cg.emit_checked(
      fmt::format("hk_pool_nd({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {})", x, y.buffer, ind,
                  xs[0] * xs[1], nd, cg.table(in), cg.table(out), cg.table(kernel), cg.table(strides), cg.table(dil),
                  cg.table(begin), cg.table(end), kind, n.get_int("count_include_pad", 0) ? 1 : 0,
                  static_cast<double>(n.get_int("p", 2)), n.get_int("storage_order", 0) ? 1 : 0),
      n, "more than 8 spatial dims");
  y.finish(cg);
}

std::vector<std::string> window_op_names() { return {"LpPool"}; }

bool emit_window_op(Codegen& cg, const Node& n) {
  if (!n.domain.empty() || n.op_type != "LpPool") return false;
  emit_pool_general(cg, n);
  return true;
}

}  // namespace hodu::compilers::c
