// ShuffleNet's channel shuffle as one copy. torch and paddle2onnx export it as
//   [Concat(axis 1)] -> Reshape [N, g, C/g, H, W] -> Transpose [0, 2, 1, 3, 4] -> Reshape [N, C, H, W]
//   -> [Slice(axis 1) ... | Split(axis 1)]
// The 5-D Reshape and Transpose cannot stay in oneDNN's blocked layouts, so the chain ran as a
// reorder to plain, a concat, a transpose, slices and reorders back (1.2 of ShuffleNetV2's 4.7 ms
// at AVX-512). Here every output channel j of the shuffled tensor reads channel (j % g) * (C / g)
// + j / g of the concatenation: the step writes each slice (or the whole result) straight from
// the concat's parts, in the layout the parts share (nhwc, nChw8c, nChw16c; plain otherwise), so
// the convs on either side keep their layout and no reorder, concat or transpose runs.
#include <algorithm>
#include <cstring>

#include "engines/cpu/dnnl_common.h"
#include "engines/cpu/row_kernels.h"
#include "passes/graph_utils.h"

namespace hodu::cpu {
namespace {

// Where output lane values come from: part `part` at float `off` (image 0, pixel 0), advancing
// `pixel` floats a pixel and `image` floats an image; part < 0: a padding lane (written 0).
struct Source {
  int part = -1;
  int64_t off = 0, pixel = 0, image = 0;
};

class ChannelShuffleStep : public Step {
 public:
  void run(RunState& rs) override {
    const float* parts[8];
    for (size_t i = 0; i < part_count_; ++i) parts[i] = static_cast<const float*>(rs.slots[reads[i]].data());
    std::vector<float*> dst(writes.size());  // small: one entry per output
    for (size_t o = 0; o < writes.size(); ++o) dst[o] = static_cast<float*>(rs.slots[writes[o]].data());
    parallel_for(static_cast<int64_t>(tasks_.size()), rs.threads, [&](int64_t t) {
      const Task& k = tasks_[static_cast<size_t>(t)];
      const Output& out = outs_[k.out];
      const Source* src = out.sources.data() + k.block * out.lanes;
      float* d = dst[k.out] + (k.image * out.blocks + k.block) * pixels_ * out.lanes;
      if (out.paired[static_cast<size_t>(k.block)]) {  // lanes alternate between two runs of channels
        const Source &e = src[0], &o = src[1];
        const float* x = parts[e.part] + e.off + k.image * e.image;
        const float* y = parts[o.part] + o.off + k.image * o.image;
        // nChw8c/16c: a fixed count the compiler turns into vector unpacks.
        if (out.lanes == 8)
          interleave<4>(x, e.pixel, y, o.pixel, d, 8, k.first, k.last);
        else if (out.lanes == 16)
          interleave<8>(x, e.pixel, y, o.pixel, d, 16, k.first, k.last);
        else
          interleave<0>(x, e.pixel, y, o.pixel, d, out.lanes, k.first, k.last);
        return;
      }
      if (out.lanes == 8 || out.lanes == 16) {  // nChw8c/16c: the block's sources looked up once
        const float* ptr[16];
        int64_t step[16];
        static const float zero = 0.0f;
        for (int64_t l = 0; l < out.lanes; ++l) {
          const Source& s = src[l];
          ptr[l] = s.part < 0 ? &zero : parts[s.part] + s.off + k.image * s.image;
          step[l] = s.part < 0 ? 0 : s.pixel;
        }
        if (out.lanes == 8)
          gather<8>(ptr, step, d, k.first, k.last);
        else
          gather<16>(ptr, step, d, k.first, k.last);
        return;
      }
      for (int64_t p = k.first; p < k.last; ++p) {
        float* row = d + p * out.lanes;
        for (int64_t l = 0; l < out.lanes; ++l) {
          const Source& s = src[l];
          row[l] = s.part < 0 ? 0.0f : parts[s.part][s.off + k.image * s.image + p * s.pixel];
        }
      }
    });
  }

  // Pixels [first, last) of a block: lane 2i from x[i], lane 2i + 1 from y[i]; Half 0: lanes / 2 at run time.
  template <int Half>
  static void interleave(const float* x, int64_t xs, const float* y, int64_t ys, float* d, int64_t lanes,
                         int64_t first, int64_t last) {
    const int64_t half = Half ? Half : lanes / 2;
    for (int64_t p = first; p < last; ++p) {
      float* row = d + p * lanes;
      const float* xp = x + p * xs;
      const float* yp = y + p * ys;
      for (int64_t i = 0; i < half; ++i) {
        row[2 * i] = xp[i];
        row[2 * i + 1] = yp[i];
      }
    }
  }

  // Pixels [first, last) of a block of Lanes lanes, lane l from ptr[l] + pixel * step[l].
  template <int Lanes>
  static void gather(const float* const* ptr, const int64_t* step, float* d, int64_t first, int64_t last) {
    for (int64_t p = first; p < last; ++p)
      for (int l = 0; l < Lanes; ++l) d[p * Lanes + l] = ptr[l][p * step[l]];
  }

  struct Output {
    int64_t lanes = 1, blocks = 1;  // a block: `lanes` channels innermost over every pixel
    std::vector<Source> sources;    // blocks * lanes
    // Per block: its even lanes are consecutive floats of one part, and so are its odd lanes (a
    // shuffle of two groups): copied as two interleaved runs.
    std::vector<char> paired;
  };
  struct Task {
    size_t out;
    int64_t image, block, first, last;  // pixels [first, last)
  };
  size_t part_count_ = 0;
  int64_t pixels_ = 1;
  std::vector<Output> outs_;
  std::vector<Task> tasks_;
};

const Node* sole_reader_of(const PlanBuilder& b, const std::string& v) {
  const auto& readers = b.readers(v);
  if (readers.size() != 1 || b.graph().output(v)) return nullptr;
  return &b.graph().nodes[readers[0]];
}

bool is_op(const Node* n, const char* op) { return n && n->domain.empty() && n->op_type == op; }

// One constant integer (a Slice's start, end, axis or step), or nullopt.
std::optional<int64_t> scalar_int(const Graph& g, const Node& n, size_t i) {
  if (i >= n.inputs.size() || n.inputs[i].empty()) return std::nullopt;
  const Tensor* t = passes::constant_of(g, n.inputs[i]);
  if (!t || t->numel() != 1 || (t->dtype() != DType::I64 && t->dtype() != DType::I32)) return std::nullopt;
  return t->dtype() == DType::I64 ? t->data<int64_t>()[0] : int64_t{t->data<int32_t>()[0]};
}

// The channel ranges [begin, end) the readers of the shuffled tensor `v` ([N, C, H, W]) take, with
// the values they define, when every reader is a Slice on axis 1 with step 1 or a Split on axis 1;
// false otherwise (the whole tensor is then the output).
bool channel_ranges(const PlanBuilder& b, const std::string& v, int64_t channels,
                    std::vector<std::pair<int64_t, int64_t>>& ranges, std::vector<std::string>& values,
                    std::vector<const Node*>& nodes) {
  if (b.graph().output(v) || b.readers(v).empty()) return false;
  const Graph& g = b.graph();
  for (size_t r : b.readers(v)) {
    const Node& n = g.nodes[r];
    if (n.inputs.empty() || n.inputs[0] != v || n.outputs.empty()) return false;
    for (size_t i = 1; i < n.inputs.size(); ++i)
      if (n.inputs[i] == v) return false;
    if (is_op(&n, "Slice")) {
      auto start = scalar_int(g, n, 1), end = scalar_int(g, n, 2);
      auto axis = n.inputs.size() > 3 && !n.inputs[3].empty() ? scalar_int(g, n, 3) : std::optional<int64_t>(0);
      auto step = n.inputs.size() > 4 && !n.inputs[4].empty() ? scalar_int(g, n, 4) : std::optional<int64_t>(1);
      if (!start || !end || !axis || !step || (*axis != 1 && *axis != -3) || *step != 1) return false;
      auto clamp = [&](int64_t x) { return std::clamp(x < 0 ? x + channels : x, int64_t{0}, channels); };
      const int64_t s = clamp(*start), e = clamp(*end);
      if (s >= e) return false;
      ranges.push_back({s, e});
      values.push_back(n.outputs[0]);
    } else if (is_op(&n, "Split")) {
      const int64_t axis = n.get_int("axis", 0);
      if (axis != 1 && axis != -3) return false;
      std::vector<int64_t> sizes;
      if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
        const Tensor* t = passes::constant_of(g, n.inputs[1]);
        if (!t || t->dtype() != DType::I64) return false;
        sizes.assign(t->data<int64_t>(), t->data<int64_t>() + t->numel());
      } else if (n.has_attr("split")) {
        sizes = n.get_ints("split");
      } else {
        const auto k = static_cast<int64_t>(n.outputs.size());
        if (channels % k != 0) return false;  // ceil-sized parts (opset 18) are left to Split
        sizes.assign(static_cast<size_t>(k), channels / k);
      }
      if (sizes.size() != n.outputs.size()) return false;
      int64_t at = 0;
      for (size_t i = 0; i < sizes.size(); ++i) {
        if (sizes[i] <= 0 || n.outputs[i].empty()) return false;
        ranges.push_back({at, at + sizes[i]});
        values.push_back(n.outputs[i]);
        at += sizes[i];
      }
      if (at != channels) return false;
    } else {
      return false;
    }
    nodes.push_back(&n);
  }
  return true;
}

// The layout every part shares, among those the step reads and writes: nhwc, nChw8c, nChw16c.
std::optional<tag> shared_layout(const PlanBuilder& b, const std::vector<int>& slots) {
  for (tag t : {tag::acdb, tag::aBcd8b, tag::aBcd16b}) {
    bool all = true;
    for (int s : slots) {
      const Slot& sl = const_cast<PlanBuilder&>(b).at(s);
      all = all && sl.blocked && sl.md == dnnl::memory::desc(to_dims(sl.shape), dt::f32, t);
    }
    if (all) return t;
  }
  return std::nullopt;
}

}  // namespace

bool make_channel_shuffle(PlanBuilder& b, const Node& n) {
  std::vector<std::string> parts;
  std::string x;  // the tensor [N, C, H, W] being shuffled
  const Node* reshape = nullptr;
  if (is_op(&n, "Concat") && n.inputs.size() >= 2 && n.inputs.size() <= 8) {
    auto ys = b.static_type(n.outputs[0]);
    if (!ys || ys->second.size() != 4) return false;
    const int64_t axis = n.get_int("axis", 0);
    if (axis != 1 && axis != -3) return false;
    parts = n.inputs;
    x = n.outputs[0];
    reshape = sole_reader_of(b, x);
  } else if (is_op(&n, "Reshape")) {
    x = n.inputs[0];
    parts = {x};
    reshape = &n;
  } else {
    return false;
  }
  if (!is_op(reshape, "Reshape") || reshape->inputs[0] != x) return false;
  const Node* transpose = sole_reader_of(b, reshape->outputs[0]);
  if (!is_op(transpose, "Transpose") || transpose->get_ints("perm") != std::vector<int64_t>{0, 2, 1, 3, 4})
    return false;
  const Node* back = sole_reader_of(b, transpose->outputs[0]);
  if (!is_op(back, "Reshape")) return false;
  auto xs = b.static_type(x), r5 = b.static_type(reshape->outputs[0]), ys = b.static_type(back->outputs[0]);
  if (!xs || !r5 || !ys || xs->first != DType::F32) return false;
  const std::vector<int64_t>& s = xs->second;
  if (s.size() != 4 || ys->second != s || r5->second.size() != 5) return false;
  const int64_t groups = r5->second[1], per = r5->second[2];
  if (r5->second[0] != s[0] || groups * per != s[1] || r5->second[3] != s[2] || r5->second[4] != s[3] ||
      groups < 1 || shape_numel(s) == 0)
    return false;
  const int64_t images = s[0], channels = s[1], pixels = s[2] * s[3];

  std::vector<int> slots;
  for (const auto& p : parts) {
    auto pt = b.static_type(p);
    if (!pt || pt->first != DType::F32 || pt->second.size() != 4 || pt->second[0] != images ||
        pt->second[2] != s[2] || pt->second[3] != s[3] || !b.has_slot(p))
      return false;
    const Slot& sl = b.at(b.slot(p));
    if (sl.dtype != DType::F32 || !sl.is_static) return false;
    slots.push_back(b.slot(p));
  }
  std::vector<std::pair<int64_t, int64_t>> ranges;
  std::vector<std::string> values;
  std::vector<const Node*> takers;
  if (!channel_ranges(b, back->outputs[0], channels, ranges, values, takers)) {
    ranges = {{0, channels}};
    values = {back->outputs[0]};
    takers.clear();
  }

  const std::optional<tag> shared = b.blocked_layouts() ? shared_layout(b, slots) : std::nullopt;
  const bool blocked = shared.has_value();
  const tag lt = shared.value_or(tag::abcd);
  // Channels innermost in a block of `lanes` (nhwc: all a part's or output's channels).
  auto lanes_of = [&](int64_t c) { return !blocked ? 1 : lt == tag::acdb ? c : lt == tag::aBcd8b ? 8 : 16; };
  if (!blocked)
    for (size_t i = 0; i < parts.size(); ++i) slots[i] = b.plain(parts[i]);
  // Each concatenated channel: its part, and its float offset and strides there.
  std::vector<Source> by_channel;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Slot& sl = b.at(slots[i]);
    const int64_t c = sl.shape[1];
    const int64_t lanes = lanes_of(c);
    const int64_t padded = (c + lanes - 1) / lanes * lanes;
    for (int64_t q = 0; q < c; ++q) {
      Source src;
      src.part = static_cast<int>(i);
      src.image = padded * pixels;
      if (!blocked) {
        src.off = q * pixels;
        src.pixel = 1;
      } else if (lt == tag::acdb) {
        src.off = q;
        src.pixel = c;
      } else {
        src.off = q / lanes * pixels * lanes + q % lanes;
        src.pixel = lanes;
      }
      by_channel.push_back(src);
    }
  }
  if (static_cast<int64_t>(by_channel.size()) != channels) return false;

  auto step = std::make_unique<ChannelShuffleStep>();
  step->part_count_ = parts.size();
  step->pixels_ = pixels;
  step->reads = slots;
  constexpr int64_t kTaskFloats = 16 << 10;
  for (size_t o = 0; o < ranges.size(); ++o) {
    const auto [begin, end] = ranges[o];
    const int64_t count = end - begin;
    ChannelShuffleStep::Output out;
    out.lanes = lanes_of(count);
    out.blocks = (count + out.lanes - 1) / out.lanes;
    for (int64_t j = 0; j < out.blocks * out.lanes; ++j) {
      const int64_t c = begin + j;  // channel of the shuffled tensor
      out.sources.push_back(j < count ? by_channel[static_cast<size_t>(c % groups * per + c / groups)] : Source{});
    }
    for (int64_t bl = 0; bl < out.blocks; ++bl) {
      const Source* src = out.sources.data() + bl * out.lanes;
      bool paired = out.lanes % 2 == 0;
      for (int64_t l = 0; paired && l < out.lanes; ++l) {
        const Source &first = src[l % 2], &x = src[l];
        paired = x.part >= 0 && x.part == first.part && x.off == first.off + l / 2 && x.pixel == first.pixel &&
                 x.image == first.image;
      }
      out.paired.push_back(paired);
    }
    const int64_t chunk = std::max<int64_t>(1, kTaskFloats / out.lanes);
    for (int64_t im = 0; im < images; ++im)
      for (int64_t bl = 0; bl < out.blocks; ++bl)
        for (int64_t p = 0; p < pixels; p += chunk)
          step->tasks_.push_back({o, im, bl, p, std::min(pixels, p + chunk)});
    step->outs_.push_back(std::move(out));
    std::vector<int64_t> shape{images, count, s[2], s[3]};
    std::optional<dnnl::memory::desc> md;
    if (blocked) md = dnnl::memory::desc(to_dims(shape), dt::f32, lt);
    step->writes.push_back(b.define(values[o], DType::F32, shape, md));
  }
  b.claim(*reshape);
  b.claim(*transpose);
  b.claim(*back);
  for (const Node* t : takers) b.claim(*t);
  const char* name = !blocked ? "plain" : lt == tag::acdb ? "nhwc" : lt == tag::aBcd8b ? "nChw8c" : "nChw16c";
  step->label = n.describe() + ": cpu channel shuffle (" + std::to_string(groups) + " groups, " + name +
                (takers.empty() ? ")" : ", into its " + std::to_string(ranges.size()) + " slices)");
  b.add(std::move(step));
  return true;
}

}  // namespace hodu::cpu
