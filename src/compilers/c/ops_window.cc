// Emitters for window ops: pooling outside the float32 1-D/2-D fast path of ops_nn.cc
// (MaxPool of any rank, int8/uint8/float types, the Indices output, storage_order;
// AveragePool of any rank; LpPool), MaxUnpool, Col2Im, CenterCropPad, and the signal ops DFT,
// STFT and the Hann/Hamming/Blackman windows (kernels/hk_window.c), and NonMaxSuppression
// (kernels/hk_detect.c). One kernel call each, over doubles.
#include <fmt/format.h>

#include "compilers/c/ops_generic.h"
#include "core/error.h"

namespace hodu::compilers::c {

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

namespace {

void need_window_kernels(Codegen& cg) {
  need_generic_kernels(cg);
  cg.kernel_sections.insert("window");
}

// A scalar int input read while running (or a constant) as a C expression.
std::string scalar_int(Codegen& cg, const Node& n, size_t i) {
  HODU_CHECK(numel(cg.shape_of(n.inputs[i])).is(1), ErrorCode::InvalidModel, "{}: input {} ('{}') must be a scalar",
             n.describe(), i, n.inputs[i]);
  if (cg.is_constant(n.inputs[i])) return fmt::format("{}", cg.constant(n.inputs[i]).get_int64(0));
  return fmt::format("{}[0]", i64_in(cg, n.inputs[i]));
}

void emit_col2im(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]), ys = cg.shape_of(n.outputs[0]);
  HODU_CHECK(xs.size() == 3 && ys.size() >= 3, ErrorCode::InvalidModel,
             "{}: input must be [N, C*prod(block), L] and the output [N, C, image...]", n.describe());
  const size_t nd = ys.size() - 2;
  SymShape img = sym_ints(cg, n, 1), block = sym_ints(cg, n, 2);
  HODU_CHECK(img.size() == nd && block.size() == nd, ErrorCode::InvalidModel,
             "{}: image_shape and block_shape must have {} values", n.describe(), nd);
  for (size_t d = 0; d < nd; ++d) assign_late(cg, n, ys[d + 2], fmt::format("({})", img[d].c()));
  auto strides = n.get_ints("strides", std::vector<int64_t>(nd, 1));
  auto dil = n.get_ints("dilations", std::vector<int64_t>(nd, 1));
  auto pads = n.get_ints("pads", std::vector<int64_t>(2 * nd, 0));
  HODU_CHECK(strides.size() == nd && dil.size() == nd && pads.size() == 2 * nd, ErrorCode::InvalidModel,
             "{}: strides/dilations/pads do not match {} image dims", n.describe(), nd);
  need_window_kernels(cg);
  std::string x = f64_in(cg, n.inputs[0]);
  WideOut y = wide_out(cg, n.outputs[0], ys);
  SymShape image(ys.begin() + 2, ys.end());
  cg.emit_checked(fmt::format("hk_col2im({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {})", x, y.buffer, xs[0], xs[1], xs[2],
                              nd, cg.table(image), cg.table(block), cg.table(strides), cg.table(dil), cg.table(pads)),
                  n, "the input's dims do not match image_shape and block_shape");
  y.finish(cg);
}

void emit_center_crop_pad(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]), ys = cg.shape_of(n.outputs[0]);
  const int64_t r = static_cast<int64_t>(xs.size());
  HODU_CHECK(r <= 16 && ys.size() == xs.size(), ErrorCode::Unsupported, "{}: rank {} (at most 16)", n.describe(), r);
  std::vector<int64_t> axes = n.get_ints("axes");
  if (axes.empty())
    for (int64_t d = 0; d < r; ++d) axes.push_back(d);
  SymShape shape = sym_ints(cg, n, 1);
  HODU_CHECK(shape.size() == axes.size(), ErrorCode::InvalidModel, "{}: shape has {} values for {} axes", n.describe(),
             shape.size(), axes.size());
  std::vector<bool> on_axis(r, false);
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t a = normalized_axis(n, axes[i], r);
    on_axis[a] = true;
    assign_late(cg, n, ys[a], fmt::format("({})", shape[i].c()));
  }
  for (int64_t d = 0; d < r; ++d)
    HODU_CHECK(on_axis[d] || xs[d] == ys[d], ErrorCode::InvalidModel, "{}: dim {} is not cropped but changes size",
               n.describe(), d);
  need_window_kernels(cg);
  int64_t es = element_bytes(cg, n.inputs[0]);
  std::string x = cg.ptr(n.inputs[0]);
  cg.define(n.outputs[0], cg.dtype_of(n.inputs[0]), ys);
  cg.emit(fmt::format("hk_center_crop_pad({}, {}, {}, {}, {}, {});", x, cg.ptr(n.outputs[0]), r, cg.table(xs),
                      cg.table(ys), es));
}

void emit_dft(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]), ys = cg.shape_of(n.outputs[0]);
  const int64_t r = static_cast<int64_t>(xs.size());
  HODU_CHECK(r >= 2 && ys.size() == xs.size(), ErrorCode::InvalidModel, "{}: input must be [..., signal, 1 or 2]",
             n.describe());
  need_window_kernels(cg);
  std::string axis = n.has_input(2) ? scalar_int(cg, n, 2) : fmt::format("{}", n.get_int("axis", -2));
  std::string length = n.has_input(1) ? scalar_int(cg, n, 1) : "0";
  std::string x = f64_in(cg, n.inputs[0]);
  WideOut y = wide_out(cg, n.outputs[0], ys);
  cg.emit_checked(fmt::format("hk_dft({}, {}, {}, {}, {}, {}, {}, {}, {})", x, y.buffer, r, cg.table(xs), cg.table(ys),
                              axis, length, n.get_int("inverse", 0) ? 1 : 0, n.get_int("onesided", 0) ? 1 : 0),
                  n, "the axis or dft_length is out of range or does not give the output's shape");
  y.finish(cg);
}

void emit_signal_window(Codegen& cg, const Node& n) {
  auto ys = cg.shape_of(n.outputs[0]);
  HODU_CHECK(ys.size() == 1, ErrorCode::InvalidModel, "{}: the output must be 1-D", n.describe());
  need_window_kernels(cg);
  assign_late(cg, n, ys[0], fmt::format("({})", scalar_int(cg, n, 0)));
  const int kind = n.op_type == "HannWindow" ? 0 : n.op_type == "HammingWindow" ? 1 : 2;
  WideOut y = wide_out(cg, n.outputs[0], ys);
  cg.emit(fmt::format("hk_window_fn({}, {}, {}, {}, {});", y.buffer, ys[0], kind, n.get_int("periodic", 1) ? 1 : 0,
                      dtype_is_integer(cg.dtype_of(n.outputs[0])) ? 1 : 0));
  y.finish(cg);
}

void emit_global_lp_pool(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]);
  HODU_CHECK(xs.size() >= 3, ErrorCode::InvalidModel, "{}: X must be [N, C, spatial...]", n.describe());
  need_window_kernels(cg);
  std::string x = f64_in(cg, n.inputs[0]);
  WideOut y = wide_out(cg, n.outputs[0], cg.shape_of(n.outputs[0]));
  cg.emit(fmt::format("hk_global_lp_pool({}, {}, {}, {}, {:.17g});", x, y.buffer, xs[0] * xs[1],
                      numel(SymShape(xs.begin() + 2, xs.end())), static_cast<double>(n.get_int("p", 2))));
  y.finish(cg);
}

void emit_max_roi_pool(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]), rs = cg.shape_of(n.inputs[1]), ys = cg.shape_of(n.outputs[0]);
  HODU_CHECK(xs.size() == 4 && rs.size() == 2, ErrorCode::InvalidModel, "{}: X must be 4-D and rois [num_rois, 5]",
             n.describe());
  sym_require(sym_eq(rs[1], 5), n.describe() + ": rois have %lld values each, 5 needed", {rs[1]});
  auto pooled = n.get_ints("pooled_shape");
  HODU_CHECK(pooled.size() == 2 && pooled[0] > 0 && pooled[1] > 0, ErrorCode::InvalidModel,
             "{}: pooled_shape must be 2 positive values", n.describe());
  cg.kernel_sections.insert("detect");
  need_generic_kernels(cg);
  std::string x = f64_in(cg, n.inputs[0]), rois = f64_in(cg, n.inputs[1]);
  WideOut y = wide_out(cg, n.outputs[0], ys);
  cg.emit_checked(fmt::format("hk_max_roi_pool({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {:.17g})", x, rois, y.buffer,
                              xs[0], xs[1], xs[2], xs[3], rs[0], pooled[0], pooled[1],
                              static_cast<double>(n.get_float("spatial_scale", 1.f))),
                  n, "a roi's batch index is out of range");
  y.finish(cg);
}

// MelWeightMatrix: its sizes (num_mel_bins, dft_length) read while running are its output's dims.
void emit_mel_weight_matrix(Codegen& cg, const Node& n) {
  auto ys = cg.shape_of(n.outputs[0]);
  HODU_CHECK(ys.size() == 2, ErrorCode::InvalidModel, "{}: the output must be 2-D", n.describe());
  need_window_kernels(cg);
  std::string bins = scalar_int(cg, n, 0), dft = scalar_int(cg, n, 1), rate = scalar_int(cg, n, 2);
  cg.emit(fmt::format("if (!({} > 0 && {} > 0 && {} > 0)) return hm_fail(m, 4, \"%s\", {});", bins, dft, rate,
                      c_string_literal(n.describe() + ": num_mel_bins, dft_length and sample_rate must be positive")));
  assign_late(cg, n, ys[0], fmt::format("({} / 2 + 1)", dft));
  assign_late(cg, n, ys[1], fmt::format("({})", bins));
  for (size_t i : {3, 4})
    HODU_CHECK(numel(cg.shape_of(n.inputs[i])).is(1), ErrorCode::InvalidModel,
               "{}: lower/upper_edge_hertz must be scalars", n.describe());
  std::string lo = fmt::format("{}[0]", doubles_in(cg, n.inputs[3])), hi = fmt::format("{}[0]", doubles_in(cg, n.inputs[4]));
  std::string fb = fmt::format("((int64_t*){})", cg.scratch((ys[1] + 2) * 8));
  WideOut y = wide_out(cg, n.outputs[0], ys);
  cg.emit_checked(fmt::format("hk_mel_weight_matrix({}, {}, {}, {}, {}, {}, {})", y.buffer, bins, dft, rate, lo, hi, fb),
                  n, "a mel bin maps to a frequency bin outside the spectrum");
  y.finish(cg);
}

void emit_max_unpool(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]), ys = cg.shape_of(n.outputs[0]);
  const size_t nd = xs.size() - 2;
  HODU_CHECK(xs.size() >= 3 && xs.size() <= 16 && ys.size() == xs.size() && cg.shape_of(n.inputs[1]) == xs,
             ErrorCode::InvalidModel, "{}: X and I must be [N, C, spatial...] of one shape", n.describe());
  auto ks = n.get_ints("kernel_shape");
  auto strides = n.get_ints("strides", std::vector<int64_t>(nd, 1));
  auto pads = n.get_ints("pads", std::vector<int64_t>(2 * nd, 0));
  HODU_CHECK(ks.size() == nd && strides.size() == nd && pads.size() == 2 * nd, ErrorCode::InvalidModel,
             "{}: kernel_shape/strides/pads do not match {} spatial dims", n.describe(), nd);
  // The dims the indices address (those of the pooled input), and the output's.
  SymShape def{xs[0], xs[1]};
  for (size_t d = 0; d < nd; ++d) def.push_back((xs[d + 2] - 1) * strides[d] + ks[d] - pads[d] - pads[d + nd]);
  if (n.has_input(2)) {
    SymShape os = sym_ints(cg, n, 2);
    HODU_CHECK(os.size() == ys.size(), ErrorCode::InvalidModel, "{}: output_shape has {} values, expected {}",
               n.describe(), os.size(), ys.size());
    for (size_t d = 0; d < os.size(); ++d) assign_late(cg, n, ys[d], fmt::format("({})", os[d].c()));
  } else {
    for (size_t d = 0; d < ys.size(); ++d) assign_late(cg, n, ys[d], fmt::format("({})", def[d].c()));
  }
  need_window_kernels(cg);
  std::string x = f64_in(cg, n.inputs[0]), idx = i64_in(cg, n.inputs[1]);
  WideOut y = wide_out(cg, n.outputs[0], ys);
  cg.emit_checked(fmt::format("hk_max_unpool({}, {}, {}, {}, {}, {}, {})", x, idx, y.buffer, numel(xs), ys.size(),
                              cg.table(def), cg.table(ys)),
                  n, "an index is out of range of the output");
  y.finish(cg);
}

void emit_stft(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]), ys = cg.shape_of(n.outputs[0]);
  HODU_CHECK(xs.size() == 3 && ys.size() == 4, ErrorCode::InvalidModel,
             "{}: signal must be [batch, length, 1 or 2] and the output [batch, frames, bins, 2]", n.describe());
  need_window_kernels(cg);
  std::string step = scalar_int(cg, n, 1), window = "NULL", flen;
  if (n.has_input(2)) {
    auto ws = cg.shape_of(n.inputs[2]);
    HODU_CHECK(ws.size() == 1, ErrorCode::InvalidModel, "{}: the window must be 1-D", n.describe());
    window = f64_in(cg, n.inputs[2]);
    flen = fmt::format("({})", ws[0].c());
  }
  if (n.has_input(3)) {
    std::string given = scalar_int(cg, n, 3);
    if (!flen.empty())
      cg.emit(fmt::format("if ({} != {}) return hm_fail(m, 4, \"%s\", {});", given, flen,
                          c_string_literal(n.describe() + ": the window's length differs from frame_length")));
    flen = given;
  }
  HODU_CHECK(!flen.empty(), ErrorCode::InvalidModel, "{}: frame_length or a window is needed", n.describe());
  std::string x = f64_in(cg, n.inputs[0]);
  WideOut y = wide_out(cg, n.outputs[0], ys);
  cg.emit_checked(fmt::format("hk_stft({}, {}, {}, {}, {}, {}, {}, {}, {}, {})", x, y.buffer, xs[0], xs[1], xs[2], step,
                              window, flen, n.get_int("onesided", 1) ? 1 : 0, cg.table(ys)),
                  n, "frame_step, frame_length or the window do not give the output's shape");
  y.finish(cg);
}

// RoiAlign: bilinear samples of each region's bins, over doubles (kernels/hk_detect.c).
void emit_roi_align(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]), rs = cg.shape_of(n.inputs[1]), ys = cg.shape_of(n.outputs[0]);
  HODU_CHECK(xs.size() == 4 && rs.size() == 2 && ys.size() == 4, ErrorCode::InvalidModel,
             "{}: X must be [N, C, H, W] and rois [num_rois, 4]", n.describe());
  const std::string ctm = n.get_string("coordinate_transformation_mode", "half_pixel");
  const std::string mode = n.get_string("mode", "avg");
  HODU_CHECK(ctm == "half_pixel" || ctm == "output_half_pixel", ErrorCode::InvalidModel,
             "{}: unknown coordinate_transformation_mode '{}'", n.describe(), ctm);
  HODU_CHECK(mode == "avg" || mode == "max", ErrorCode::InvalidModel, "{}: unknown mode '{}'", n.describe(), mode);
  const int64_t oh = n.get_int("output_height", 1), ow = n.get_int("output_width", 1);
  const int64_t sr = n.get_int("sampling_ratio", 0);
  HODU_CHECK(oh > 0 && ow > 0 && sr >= 0, ErrorCode::InvalidModel,
             "{}: output_height/output_width must be positive and sampling_ratio not negative", n.describe());
  sym_require(sym_eq(rs[1], 4), n.describe() + ": rois have %lld coordinates, 4 needed", {rs[1]});
  cg.kernel_sections.insert("detect");
  need_generic_kernels(cg);
  std::string x = f64_in(cg, n.inputs[0]), rois = f64_in(cg, n.inputs[1]), bidx = i64_in(cg, n.inputs[2]);
  WideOut y = wide_out(cg, n.outputs[0], ys);
  cg.emit_checked(fmt::format("hk_roi_align({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {})", x, rois, bidx,
                              y.buffer, xs[0], xs[1], xs[2], xs[3], rs[0], oh, ow, sr,
                              c_float(n.get_float("spatial_scale", 1.f)), ctm == "half_pixel" ? 1 : 0,
                              mode == "max" ? 1 : 0),
                  n, "a batch index is out of range");
  y.finish(cg);
}

// NonMaxSuppression: the selections go to scratch sized for every box of every class, then
// their count (a late dim, or the model's declared one, checked) sizes the output.
void emit_nms(Codegen& cg, const Node& n) {
  auto bs = cg.shape_of(n.inputs[0]), ss = cg.shape_of(n.inputs[1]), ys = cg.shape_of(n.outputs[0]);
  HODU_CHECK(bs.size() == 3 && ss.size() == 3 && ys.size() == 2, ErrorCode::InvalidModel,
             "{}: boxes must be [batch, spatial, 4] and scores [batch, classes, spatial]", n.describe());
  cg.kernel_sections.insert("detect");
  need_generic_kernels(cg);
  auto present = [&](size_t i) { return n.has_input(i) && !numel(cg.shape_of(n.inputs[i])).is(0); };
  auto scalar_f64 = [&](size_t i) { return fmt::format("{}[0]", f64_in(cg, n.inputs[i])); };
  std::string max_out = present(2) ? scalar_int(cg, n, 2) : "0";
  std::string iou = present(3) ? scalar_f64(3) : "0.0", th = present(4) ? scalar_f64(4) : "0.0";
  std::string boxes = f64_in(cg, n.inputs[0]), scores = f64_in(cg, n.inputs[1]);
  SymInt B = bs[0], S = bs[1], K = ss[1];
  std::string sel = fmt::format("((int64_t*){})", cg.scratch(B * K * S * 24));
  std::string cand = fmt::format("((int64_t*){})", cg.scratch(S * 8)), kept = fmt::format("((int64_t*){})", cg.scratch(S * 8));
  std::string bb = fmt::format("((double*){})", cg.scratch(S * 32));
  std::string count = fmt::format("nms{}", cg.table_count++);
  cg.emit(fmt::format("const int64_t {} = hk_nms({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {});", count, boxes,
                      scores, B, S, K, max_out, iou, present(4) ? 1 : 0, th,
                      n.get_int("center_point_box", 0) ? 1 : 0, sel, cand, kept, bb));
  assign_late(cg, n, ys[0], count);
  cg.define(n.outputs[0], DType::I64, ys);
  cg.emit(fmt::format("memcpy({}, {}, {} * 24);", cg.ptr(n.outputs[0]), sel, count));
}

}  // namespace

std::vector<std::string> window_op_names() {
  return {"LpPool", "Col2Im", "CenterCropPad", "DFT", "HannWindow", "HammingWindow", "BlackmanWindow",
          "NonMaxSuppression", "MaxUnpool", "STFT", "RoiAlign", "MelWeightMatrix",
          "GlobalLpPool", "MaxRoiPool"};
}

bool emit_window_op(Codegen& cg, const Node& n) {
  const std::string& op = n.op_type;
  if (!n.domain.empty()) return false;
  if (op == "LpPool") emit_pool_general(cg, n);
  else if (op == "Col2Im") emit_col2im(cg, n);
  else if (op == "CenterCropPad") emit_center_crop_pad(cg, n);
  else if (op == "DFT") emit_dft(cg, n);
  else if (op == "HannWindow" || op == "HammingWindow" || op == "BlackmanWindow") emit_signal_window(cg, n);
  else if (op == "NonMaxSuppression") emit_nms(cg, n);
  else if (op == "RoiAlign") emit_roi_align(cg, n);
  else if (op == "MelWeightMatrix") emit_mel_weight_matrix(cg, n);
  else if (op == "GlobalLpPool") emit_global_lp_pool(cg, n);
  else if (op == "MaxRoiPool") emit_max_roi_pool(cg, n);
  else if (op == "MaxUnpool") emit_max_unpool(cg, n);
  else if (op == "STFT") emit_stft(cg, n);
  else return false;
  return true;
}

}  // namespace hodu::compilers::c
