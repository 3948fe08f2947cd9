// Emitters for resampling outside the table-driven fast path: Resize in every mode ONNX
// defines (cubic, antialias, tf_crop_and_resize, axes, keep_aspect_ratio_policy, linear over
// any dims, scales read while running), GridSample and AffineGrid. Each converts its float
// operands to double, calls one kernel of kernels/hk_resample.c and converts the result back.
#include <fmt/format.h>

#include <map>

#include "compilers/c/ops_generic.h"
#include "core/error.h"

namespace hodu::compilers::c {
namespace {

void need_resample_kernels(Codegen& cg) {
  need_generic_kernels(cg);
  cg.kernel_sections.insert("resample");
}

int code_of(const Node& n, const char* attr, const std::string& value, const std::map<std::string, int>& codes) {
  auto it = codes.find(value);
  HODU_CHECK(it != codes.end(), ErrorCode::InvalidModel, "{}: unknown {} '{}'", n.describe(), attr, value);
  return it->second;
}

// Elements of a value whose count is known at build time (0 for an absent input).
int64_t static_count(Codegen& cg, const Node& n, size_t i) {
  if (!n.has_input(i)) return 0;
  SymInt c = numel(cg.shape_of(n.inputs[i]));
  HODU_CHECK(c.known(), ErrorCode::Unsupported, "{}: input {} ('{}') has a size known only at run time",
             n.describe(), i, n.inputs[i]);
  return c.value();
}

void emit_grid_sample(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]), gs = cg.shape_of(n.inputs[1]), ys = cg.shape_of(n.outputs[0]);
  const int64_t nd = static_cast<int64_t>(xs.size()) - 2;
  HODU_CHECK(nd >= 1 && nd <= 8 && gs.size() == xs.size() && ys.size() == xs.size(), ErrorCode::InvalidModel,
             "{}: X of rank {} and grid of rank {} (grid must be [N, out..., {}])", n.describe(), xs.size(), gs.size(),
             nd);
  std::string mode = n.get_string("mode", "linear");
  const int m = code_of(n, "mode", mode, {{"nearest", 0}, {"linear", 1}, {"bilinear", 1}, {"cubic", 2}, {"bicubic", 2}});
  const int pad =
      code_of(n, "padding_mode", n.get_string("padding_mode", "zeros"), {{"zeros", 0}, {"border", 1}, {"reflection", 2}});
  need_resample_kernels(cg);
  std::string x = f64_in(cg, n.inputs[0]), g = f64_in(cg, n.inputs[1]);
  WideOut y = wide_out(cg, n.outputs[0], ys);
  SymShape dims(xs.begin() + 2, xs.end()), outd(ys.begin() + 2, ys.end());
  cg.emit_checked(fmt::format("hk_grid_sample({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {})", x, g, y.buffer, xs[0], xs[1],
                              nd, cg.table(dims), cg.table(outd), m, pad, n.get_int("align_corners", 0) ? 1 : 0),
                  n, "more than 8 spatial dims");
  y.finish(cg);
}

void emit_affine_grid(Codegen& cg, const Node& n) {
  auto ts = cg.shape_of(n.inputs[0]), ys = cg.shape_of(n.outputs[0]);
  const int64_t nd = static_cast<int64_t>(ys.size()) - 2;
  HODU_CHECK((nd == 2 || nd == 3) && ts.size() == 3, ErrorCode::InvalidModel,
             "{}: theta of rank {} and an output of rank {} (2-D or 3-D grids)", n.describe(), ts.size(), ys.size());
  need_resample_kernels(cg);
  std::string theta = f64_in(cg, n.inputs[0]);
  WideOut y = wide_out(cg, n.outputs[0], ys);
  SymShape sizes(ys.begin() + 1, ys.end() - 1);
  cg.emit(fmt::format("hk_affine_grid({}, {}, {}, {}, {}, {});", theta, y.buffer, ys[0], nd, cg.table(sizes),
                      n.get_int("align_corners", 0) ? 1 : 0));
  y.finish(cg);
}

}  // namespace

bool resize_needs_general(Codegen& cg, const Node& n) {
  const std::string mode = n.get_string("mode", "nearest");
  if (mode == "cubic" || n.get_string("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize" ||
      n.get_int("antialias", 0) != 0 || !n.get_ints("axes").empty() ||
      n.get_string("keep_aspect_ratio_policy", "stretch") != "stretch")
    return true;
  // Scales read while running: the output dims are computed then.
  if (n.has_input(2) && !cg.is_constant(n.inputs[2]) && !numel(cg.shape_of(n.inputs[2])).is(0)) return true;
  if (mode != "linear") return false;
  auto xs = cg.shape_of(n.inputs[0]), ys = cg.shape_of(n.outputs[0]);
  if (cg.dtype_of(n.inputs[0]) != DType::F32 || xs.size() < 2) return true;
  for (size_t d = 0; d + 2 < xs.size(); ++d)
    if (!(xs[d] == ys[d])) return true;
  return false;
}

void emit_resize_general(Codegen& cg, const Node& n) {
  const std::string& x0 = n.inputs[0];
  auto xs = cg.shape_of(x0), ys = cg.shape_of(n.outputs[0]);
  const int64_t r = static_cast<int64_t>(xs.size());
  HODU_CHECK(dtype_is_float(cg.dtype_of(x0)), ErrorCode::Unsupported,
             "{}: compiled code runs this Resize (mode '{}', cubic, antialias, tf_crop_and_resize, axes or an aspect "
             "ratio policy, or scales read while running) on float tensors only; the input is {}",
             n.describe(), n.get_string("mode", "nearest"), dtype_name(cg.dtype_of(x0)));
  HODU_CHECK(r >= 1 && r <= 8 && ys.size() == xs.size(), ErrorCode::Unsupported, "{}: Resize of rank {} (1 to 8)",
             n.describe(), r);
  const int mode = code_of(n, "mode", n.get_string("mode", "nearest"), {{"nearest", 0}, {"linear", 1}, {"cubic", 2}});
  const std::string ctm_name = n.get_string("coordinate_transformation_mode", "half_pixel");
  const int ctm = code_of(n, "coordinate_transformation_mode", ctm_name,
                          {{"half_pixel", 0}, {"align_corners", 1}, {"asymmetric", 2}, {"pytorch_half_pixel", 3},
                           {"half_pixel_symmetric", 4}, {"tf_crop_and_resize", 5}});
  const int nearest = code_of(n, "nearest_mode", n.get_string("nearest_mode", "round_prefer_floor"),
                              {{"round_prefer_floor", 0}, {"round_prefer_ceil", 1}, {"floor", 2}, {"ceil", 3}});
  const int policy = code_of(n, "keep_aspect_ratio_policy", n.get_string("keep_aspect_ratio_policy", "stretch"),
                             {{"stretch", 0}, {"not_larger", 1}, {"not_smaller", 2}});
  std::vector<int64_t> axes = n.get_ints("axes");
  if (axes.empty())
    for (int64_t d = 0; d < r; ++d) axes.push_back(d);
  std::vector<bool> seen(r, false);
  for (auto& a : axes) {
    a = normalized_axis(n, a, r);
    HODU_CHECK(!seen[a], ErrorCode::InvalidModel, "{}: axes repeat axis {}", n.describe(), a);
    seen[a] = true;
  }
  const int64_t na = static_cast<int64_t>(axes.size());
  const int64_t n_scales = static_count(cg, n, 2), n_sizes = static_count(cg, n, 3);
  HODU_CHECK((n_scales > 0) != (n_sizes > 0), ErrorCode::InvalidModel,
             "{}: exactly one of 'scales' and 'sizes' must be given", n.describe());
  HODU_CHECK(std::max(n_scales, n_sizes) == na, ErrorCode::InvalidModel, "{}: {} has {} values for {} axes",
             n.describe(), n_scales > 0 ? "scales" : "sizes", std::max(n_scales, n_sizes), na);
  need_resample_kernels(cg);
  std::string scales = n_scales > 0 ? f64_in(cg, n.inputs[2]) : "NULL";
  std::string sizes = n_sizes > 0 ? i64_in(cg, n.inputs[3]) : "NULL";
  std::string roi = "NULL";
  if (ctm == 5) {
    HODU_CHECK(static_count(cg, n, 1) == 2 * na, ErrorCode::InvalidModel,
               "{}: tf_crop_and_resize needs a roi of {} values", n.describe(), 2 * na);
    roi = f64_in(cg, n.inputs[1]);
  }
  // Scales and output dims computed while running (the scales may be data); dims shape
  // inference left to run time are set here, the others checked.
  const int k = cg.table_count++;
  const std::string sc = fmt::format("RSC{}", k), od = fmt::format("ROD{}", k), xt = cg.table(xs),
                    at = cg.table(axes);
  cg.emit(fmt::format("double {}[{}];", sc, r));
  cg.emit(fmt::format("int64_t {}[{}];", od, r));
  cg.emit_checked(fmt::format("hk_resize_params({}, {}, {}, {}, {}, {}, {}, {}, {})", r, xt, na, at, scales, sizes,
                              policy, sc, od),
                  n, "a scale is not positive, or a size negative or of an empty dim");
  for (int64_t d = 0; d < r; ++d) assign_late(cg, n, ys[d], fmt::format("{}[{}]", od, d));
  std::string x = f64_in(cg, x0);
  WideOut y = wide_out(cg, n.outputs[0], ys);
  cg.emit_checked(fmt::format("hk_resize_any({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {:.17g}, {}, {:.17g}, {})",
                              x, y.buffer, r, xt, od, sc, na, at, roi, mode, ctm, nearest,
                              static_cast<double>(n.get_float("cubic_coeff_a", -0.75f)),
                              n.get_int("exclude_outside", 0) ? 1 : 0,
                              static_cast<double>(n.get_float("extrapolation_value", 0.0f)),
                              n.get_int("antialias", 0) ? 1 : 0),
                  n, "an antialiasing window wider than 128 taps");
  y.finish(cg);
}

std::vector<std::string> resample_op_names() { return {"GridSample", "AffineGrid"}; }

bool emit_resample_op(Codegen& cg, const Node& n) {
  if (!n.domain.empty()) return false;
  if (n.op_type == "GridSample") emit_grid_sample(cg, n);
  else if (n.op_type == "AffineGrid") emit_affine_grid(cg, n);
  else return false;
  return true;
}

}  // namespace hodu::compilers::c
