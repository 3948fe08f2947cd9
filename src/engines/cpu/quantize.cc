// QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear on the cpu engine: vectorized loops
// (target_clones) computing exactly what the interpreter does (ONNX's numpy reference: x / s in
// f32, round half to even, saturate); hodu's LookupTable (a byte's 256 values mapped at once).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

#include "core/error.h"
#include "engines/cpu/dnnl_common.h"
#include "engines/cpu/int8_common.h"
#include "engines/cpu/row_kernels.h"
#include "engines/cpu/tensor_step.h"
#include "kernels/cpu/byte_table.h"
#include "passes/graph_utils.h"

namespace hodu::cpu {

ConstIn const_input(const PlanBuilder& b, const Node& n, size_t i) {
  if (!n.has_input(i)) return {};
  return {true, passes::constant_of(b.graph(), n.inputs[i])};
}

std::optional<std::vector<float>> scales_of(const Tensor* t, int64_t count) {
  if (!t || t->dtype() != DType::F32 || t->rank() > 1) return std::nullopt;
  if (t->numel() != 1 && (count <= 1 || t->numel() != count)) return std::nullopt;
  std::vector<float> v(static_cast<size_t>(t->numel()));
  for (int64_t i = 0; i < t->numel(); ++i) v[static_cast<size_t>(i)] = static_cast<float>(t->get_double(i));
  return v;
}

std::optional<std::vector<int32_t>> zero_points_of(const ConstIn& z, DType dt, int64_t count) {
  if (!z.present) return std::vector<int32_t>{0};
  if (!z.t || z.t->dtype() != dt || z.t->rank() > 1) return std::nullopt;
  if (z.t->numel() != 1 && (count <= 1 || z.t->numel() != count)) return std::nullopt;
  std::vector<int32_t> v;
  for (int64_t x : z.t->to_int64s()) v.push_back(static_cast<int32_t>(x));
  return v;
}

namespace {

using vector_math::kLanes;

// y = saturate(round_half_even(x / s) + z), NaN to the low end (ONNX's numpy reference).
template <typename T>
__attribute__((target_clones("avx512f", "avx2,fma", "default"))) void quantize_run(const float* x, T* y, int64_t n,
                                                                                  float s, float z) {
  constexpr float lo = std::is_same_v<T, uint8_t> ? 0.0f : -128.0f, hi = std::is_same_v<T, uint8_t> ? 255.0f : 127.0f;
  for (int64_t i = 0; i < n; ++i) {
    float v = std::nearbyint(x[i] / s) + z;
    v = v >= lo ? v : lo;  // NaN too
    v = v <= hi ? v : hi;
    y[i] = static_cast<T>(static_cast<int32_t>(v));
  }
}

// y = (float(x) - z) * s.
template <typename T>
__attribute__((target_clones("avx512f", "avx2,fma", "default"))) void dequantize_run(const T* x, float* y, int64_t n,
                                                                                    float s, float z) {
  for (int64_t i = 0; i < n; ++i) y[i] = (static_cast<float>(x[i]) - z) * s;
}

class QuantizeStep : public Step {
 public:
  void run(RunState& rs) override {
    const void* x = rs.slots[reads[0]].data();
    void* y = rs.slots[writes[0]].data();
    const int64_t n = n_, inner = inner_, D = static_cast<int64_t>(axis_len_);
    const int64_t chunk = 1 << 14;
    const int threads = n >= 4 * chunk ? rs.threads : 1;
    parallel_for((n + chunk - 1) / chunk, threads, [&](int64_t c) {
      int64_t i = c * chunk, end = std::min(n, i + chunk);
      while (i < end) {
        int64_t row = i / inner, stop = std::min(end, (row + 1) * inner);
        size_t d = static_cast<size_t>(row % D);
        float s = scale_[scale_.size() == 1 ? 0 : d], z = zp_[zp_.size() == 1 ? 0 : d];
        switch (kind_) {
          case Kind::QuantizeU8:
            quantize_run(static_cast<const float*>(x) + i, static_cast<uint8_t*>(y) + i, stop - i, s, z);
            break;
          case Kind::QuantizeS8:
            quantize_run(static_cast<const float*>(x) + i, static_cast<int8_t*>(y) + i, stop - i, s, z);
            break;
          case Kind::DequantizeU8:
            dequantize_run(static_cast<const uint8_t*>(x) + i, static_cast<float*>(y) + i, stop - i, s, z);
            break;
          case Kind::DequantizeS8:
            dequantize_run(static_cast<const int8_t*>(x) + i, static_cast<float*>(y) + i, stop - i, s, z);
            break;
        }
        i = stop;
      }
    });
  }
  enum class Kind { QuantizeU8, QuantizeS8, DequantizeU8, DequantizeS8 } kind_ = Kind::QuantizeU8;
  int64_t n_ = 0, inner_ = 1;
  size_t axis_len_ = 1;
  std::vector<float> scale_, zp_;
};

// y = Q((a - za)·sa + (b - zb)·sb): DequantizeLinear of both inputs, Add and QuantizeLinear in
// the same f32 operations as their own steps (dequantize_run, f32 add, quantize_run).
template <typename T>
__attribute__((target_clones("avx512f", "avx2,fma", "default"))) void quantized_add_run(
    const T* a, const T* b, T* y, int64_t n, float sa, float za, float sb, float zb, float sy, float zy) {
  constexpr float lo = std::is_same_v<T, uint8_t> ? 0.0f : -128.0f, hi = std::is_same_v<T, uint8_t> ? 255.0f : 127.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float t = (static_cast<float>(a[i]) - za) * sa + (static_cast<float>(b[i]) - zb) * sb;
    float v = std::nearbyint(t / sy) + zy;
    v = v >= lo ? v : lo;  // NaN too
    v = v <= hi ? v : hi;
    y[i] = static_cast<T>(static_cast<int32_t>(v));
  }
}

class QuantizedAddStep : public Step {
 public:
  void run(RunState& rs) override {
    const void* a = rs.slots[reads[0]].data();
    const void* c = rs.slots[reads[1]].data();
    void* y = rs.slots[writes[0]].data();
    const int64_t chunk = 1 << 14;
    parallel_for((n_ + chunk - 1) / chunk, n_ >= 4 * chunk ? rs.threads : 1, [&](int64_t k) {
      const int64_t i = k * chunk, m = std::min(chunk, n_ - i);
      if (signed_)
        quantized_add_run(static_cast<const int8_t*>(a) + i, static_cast<const int8_t*>(c) + i,
                          static_cast<int8_t*>(y) + i, m, p_[0], p_[1], p_[2], p_[3], p_[4], p_[5]);
      else
        quantized_add_run(static_cast<const uint8_t*>(a) + i, static_cast<const uint8_t*>(c) + i,
                          static_cast<uint8_t*>(y) + i, m, p_[0], p_[1], p_[2], p_[3], p_[4], p_[5]);
    });
  }
  int64_t n_ = 0;
  bool signed_ = false;
  float p_[6] = {};  // sa za sb zb sy zy
};

// A per-tensor scale and zero point of a (De)QuantizeLinear whose integer side is `dt`.
bool scalar_quantization(const PlanBuilder& b, const Node& q, DType dt, float& scale, float& zero) {
  const Tensor* s = passes::constant_of(b.graph(), q.inputs[1]);
  auto sv = scales_of(s, 0);
  auto zv = zero_points_of(const_input(b, q, 2), dt, 0);
  if (!sv || !zv || q.get_int("block_size", 0) != 0) return false;
  scale = (*sv)[0];
  zero = static_cast<float>((*zv)[0]);
  return true;
}

// DequantizeLinear(a) + DequantizeLinear(b) → QuantizeLinear, all per tensor and of one 8-bit
// type, each node the sole reader of the last (ONNX Runtime's QLinearAdd as hodu's loader lowers
// it: the residual adds of QOperator ResNets): one step over the 8-bit inputs in the layout they
// have — channels-last after an int8 conv, which the output keeps for the next one — instead of
// two reorders to plain, three f32 passes and a reorder back. Made at the first DequantizeLinear;
// it claims the other, the Add and the QuantizeLinear.
bool make_quantized_add(PlanBuilder& b, const Node& n) {
  const Graph& g = b.graph();
  auto sole = [&](const std::string& v) -> const Node* {
    if (v.empty() || g.output(v)) return nullptr;
    const auto& rd = b.readers(v);
    if (rd.size() != 1 || !g.nodes[rd[0]].domain.empty()) return nullptr;
    return &g.nodes[rd[0]];
  };
  const Node* add = sole(n.outputs[0]);
  if (!add || add->op_type != "Add" || add->inputs.size() != 2 || add->inputs[0] == add->inputs[1]) return false;
  const std::string& other = add->inputs[0] == n.outputs[0] ? add->inputs[1] : add->inputs[0];
  const int self = g.producer_of(n.outputs[0]), p = g.producer_of(other);
  if (p <= self || sole(other) != add) return false;  // the other DequantizeLinear comes later
  const Node& m = g.nodes[static_cast<size_t>(p)];
  const Node* q = sole(add->outputs[0]);
  if (!m.domain.empty() || m.op_type != "DequantizeLinear" || !q || q->op_type != "QuantizeLinear") return false;
  const Node* a = add->inputs[0] == n.outputs[0] ? &n : &m;  // the Add's operand order
  const Node* c = a == &n ? &m : &n;
  auto at = b.static_type(a->inputs[0]), ct = b.static_type(c->inputs[0]), yt = b.static_type(q->outputs[0]),
       st = b.static_type(add->outputs[0]);
  if (!at || !ct || !yt || !st || !is_8bit(at->first) || ct->first != at->first || yt->first != at->first ||
      ct->second != at->second || yt->second != at->second || st->second != at->second || st->first != DType::F32)
    return false;
  for (const Node* d : {a, c})
    if (d->get_int("output_dtype", 0) > 1) return false;
  if (const int64_t odt = q->get_int("output_dtype", 0); odt != 0 && odt != (at->first == DType::U8 ? 2 : 3))
    return false;
  auto step = std::make_unique<QuantizedAddStep>();
  if (!scalar_quantization(b, *a, at->first, step->p_[0], step->p_[1]) ||
      !scalar_quantization(b, *c, at->first, step->p_[2], step->p_[3]) ||
      !scalar_quantization(b, *q, at->first, step->p_[4], step->p_[5]))
    return false;
  const auto& xs = at->second;
  step->n_ = shape_numel(xs);
  step->signed_ = at->first == DType::I8;
  // Channels-last when either input is (an int8 conv's output), else plain.
  bool nhwc = false;
  std::optional<dnnl::memory::desc> md;
  if (xs.size() == 4) {
    md = dnnl::memory::desc(to_dims(xs), dnnl_dtype(at->first), dnnl::memory::format_tag::nhwc);
    for (const Node* d : {a, c})
      nhwc = nhwc || (b.has_slot(d->inputs[0]) && layout_md(b.at(b.slot(d->inputs[0]))) == *md);
  }
  if (nhwc) {
    step->reads = {b.as_layout(a->inputs[0], *md), b.as_layout(c->inputs[0], *md)};
    step->writes = {b.define(q->outputs[0], at->first, xs, md)};
  } else {
    step->reads = {b.plain(a->inputs[0]), b.plain(c->inputs[0])};
    step->writes = {b.define(q->outputs[0], at->first, xs)};
  }
  step->label = n.describe() + (nhwc ? ": cpu quantized add (nhwc)" : ": cpu quantized add");
  b.claim(m);
  b.claim(*add);
  b.claim(*q);
  b.add(std::move(step));
  return true;
}

}  // namespace

bool make_quantize(PlanBuilder& b, const Node& n) {
  const bool quantize = n.op_type == "QuantizeLinear";
  if (!n.domain.empty() || (!quantize && n.op_type != "DequantizeLinear")) return false;
  if (!quantize && make_quantized_add(b, n)) return true;
  if (n.get_int("block_size", 0) != 0 || n.get_int("precision", 0) != 0) return false;
  auto x = b.static_type(n.inputs[0]), y = b.static_type(n.outputs[0]);
  if (!x || !y || x->second != y->second) return false;
  const auto& xs = x->second;
  const int64_t rank = static_cast<int64_t>(xs.size());
  const Tensor* scale = passes::constant_of(b.graph(), n.inputs[1]);
  if (!scale || scale->dtype() != DType::F32 || scale->rank() > 1) return false;
  ConstIn zp = const_input(b, n, 2);
  // Per axis when the scale (or the zero point) has more than one value.
  int64_t axis_len = 1, inner = std::max<int64_t>(shape_numel(xs), 1);
  bool per_axis = scale->numel() != 1 || (zp.t && zp.t->numel() != 1);
  if (per_axis) {
    int64_t axis = n.get_int("axis", 1);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank) return false;
    axis_len = xs[static_cast<size_t>(axis)];
    inner = 1;
    for (int64_t d = axis + 1; d < rank; ++d) inner *= xs[static_cast<size_t>(d)];
    if (inner == 0) return false;
  }
  auto scales = scales_of(scale, axis_len);
  if (!scales) return false;

  DType qt = quantize ? y->first : x->first;  // the integer side
  if (!is_8bit(qt)) return false;
  if (quantize) {
    if (x->first != DType::F32) return false;
    int64_t odt = n.get_int("output_dtype", 0);
    if (odt != 0 && odt != (qt == DType::U8 ? 2 : 3)) return false;  // ONNX: UINT8 2, INT8 3
  } else {
    if (y->first != DType::F32) return false;
    int64_t odt = n.get_int("output_dtype", 0);
    if (odt != 0 && odt != 1) return false;  // FLOAT
  }
  auto zps = zero_points_of(zp, qt, axis_len);
  if (!zps) return false;

  auto step = std::make_unique<QuantizeStep>();
  step->kind_ = quantize ? (qt == DType::U8 ? QuantizeStep::Kind::QuantizeU8 : QuantizeStep::Kind::QuantizeS8)
                         : (qt == DType::U8 ? QuantizeStep::Kind::DequantizeU8 : QuantizeStep::Kind::DequantizeS8);
  step->n_ = shape_numel(xs);
  step->inner_ = inner;
  step->axis_len_ = static_cast<size_t>(axis_len);
  step->scale_ = *scales;
  for (int32_t z : *zps) step->zp_.push_back(static_cast<float>(z));
  step->reads = {b.plain(n.inputs[0])};
  step->writes = {b.define(n.outputs[0], y->first, xs)};
  step->label = n.describe() + (per_axis ? ": cpu per-axis" : ": cpu");
  b.add(std::move(step));
  return true;
}


// ---- DynamicQuantizeLinear ----

namespace {

// Running min and max over x[0, n), seeded with the caller's (0: the range always holds zero).
// `v < m ? v : m` is std::min(m, v) (a NaN leaves m) and one vminps; written on vectors, as GCC
// keeps it scalar over arrays of lanes.
typedef float Floats8 __attribute__((vector_size(32)));
__attribute__((target_clones("avx512f", "avx2,fma", "default"))) void min_max(const float* x, int64_t n, float* lo,
                                                                             float* hi) {
  Floats8 mn[4], mx[4];
  for (auto& v : mn) v = Floats8{} + *lo;
  for (auto& v : mx) v = Floats8{} + *hi;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k) {
      Floats8 v;
      std::memcpy(&v, x + i + 8 * k, sizeof v);
      mn[k] = v < mn[k] ? v : mn[k];
      mx[k] = mx[k] < v ? v : mx[k];
    }
  float a = *lo, b = *hi;
  for (int k = 0; k < 4; ++k)
    for (int l = 0; l < 8; ++l) {
      a = mn[k][l] < a ? mn[k][l] : a;
      b = b < mx[k][l] ? mx[k][l] : b;
    }
  for (; i < n; ++i) {
    a = x[i] < a ? x[i] : a;
    b = b < x[i] ? x[i] : b;
  }
  *lo = a, *hi = b;
}

// out[p * C + c] = tile[c * stride + p] for p < len.
__attribute__((target_clones("avx512f", "avx2", "default"))) void transpose_bytes(const uint8_t* __restrict tile,
                                                                                 int64_t stride,
                                                                                 uint8_t* __restrict out, int64_t C,
                                                                                 int64_t len) {
  for (int64_t p = 0; p < len; ++p)
    for (int64_t c = 0; c < C; ++c) out[p * C + c] = tile[c * stride + p];
}

class DynamicQuantizeStep : public Step {
 public:
  void run(RunState& rs) override {
    const float* x = static_cast<const float*>(rs.slots[reads[0]].data());
    const int64_t n = n_, chunk = 1 << 15;
    const int64_t chunks = (n + chunk - 1) / chunk;
    std::vector<float>& lo = lo_;
    std::vector<float>& hi = hi_;
    lo.assign(static_cast<size_t>(chunks), 0.0f);
    hi.assign(static_cast<size_t>(chunks), 0.0f);
    parallel_for(chunks, rs.threads, [&](int64_t c) {
      min_max(x + c * chunk, std::min(chunk, n - c * chunk), &lo[c], &hi[c]);
    });
    float mn = 0.0f, mx = 0.0f;
    for (int64_t c = 0; c < chunks; ++c) {
      mn = std::min(mn, lo[c]);
      mx = std::max(mx, hi[c]);
    }
    // As the interpreter (ONNX's reference): u8 over [min(x, 0), max(x, 0)].
    const float qmin = 0.f, qmax = 255.f;
    float scale = (mx == mn ? 1.0f : (mx - mn)) / (qmax - qmin);
    float zp = std::clamp(std::nearbyint(qmin - mn / scale), qmin, qmax);
    *static_cast<float*>(rs.slots[writes[1]].data()) = scale;
    *static_cast<uint8_t*>(rs.slots[writes[2]].data()) = static_cast<uint8_t>(zp);
    uint8_t* y = static_cast<uint8_t*>(rs.slots[writes[0]].data());
    if (channels_ == 0) {
      parallel_for(chunks, rs.threads, [&](int64_t c) {
        quantize_run(x + c * chunk, y + c * chunk, std::min(chunk, n - c * chunk), scale, zp);
      });
      return;
    }
    // NCHW in, NHWC out: blocks of positions, each channel's run quantized into a tile
    // [C, positions], then written out position by position (stores in order).
    const int64_t C = channels_, P = planes_, block = std::max<int64_t>(16, std::min<int64_t>(256, 32768 / C));
    const int64_t blocks = (P + block - 1) / block;
    parallel_for(images_ * blocks, rs.threads, [&](int64_t t) {
      const int64_t img = t / blocks, p0 = (t % blocks) * block, len = std::min(block, P - p0);
      thread_local std::vector<uint8_t> tile;
      tile.resize(static_cast<size_t>(C * block));
      for (int64_t c = 0; c < C; ++c) quantize_run(x + (img * C + c) * P + p0, tile.data() + c * block, len, scale, zp);
      transpose_bytes(tile.data(), block, y + (img * P + p0) * C, C, len);
    });
  }
  int64_t n_ = 0, images_ = 0, channels_ = 0, planes_ = 0;  // channels_ > 0: NCHW → NHWC
  std::vector<float> lo_, hi_;
};

}  // namespace

// DynamicQuantizeLinear(x) → y (u8), y_scale, y_zero_point. y keeps x's layout when that has no
// padding (the int8 conv reading it then needs no reorder).
bool make_dynamic_quantize(PlanBuilder& b, const Node& n) {
  if (!n.domain.empty() || n.op_type != "DynamicQuantizeLinear") return false;
  auto x = b.static_type(n.inputs[0]);
  if (!x || x->first != DType::F32) return false;
  const auto& xs = x->second;
  int in = b.slot(n.inputs[0]);
  const Slot& xsl = b.at(in);
  std::optional<dnnl::memory::desc> md;
  auto step = std::make_unique<DynamicQuantizeStep>();
  step->n_ = shape_numel(xs);
  // Read only by 2-D int8 convs (which want channels last): quantized straight into NHWC.
  bool to_nhwc = xs.size() == 4 && !b.graph().output(n.outputs[0]) && !b.readers(n.outputs[0]).empty();
  for (size_t r : b.readers(n.outputs[0]))
    to_nhwc &= b.graph().nodes[r].op_type == "ConvInteger" && b.graph().nodes[r].inputs[0] == n.outputs[0];
  if (xsl.blocked && xsl.md.get_size() == static_cast<size_t>(shape_numel(xs)) * sizeof(float)) {
    dnnl_memory_desc_t c = xsl.md.data;
    c.data_type = dnnl_u8;
    md = dnnl::memory::desc(c);
  } else {
    in = b.plain(n.inputs[0]);
    if (to_nhwc && xs[1] > 1) {
      md = dnnl::memory::desc(to_dims(xs), dt::u8, tag::nhwc);
      step->images_ = xs[0];
      step->channels_ = xs[1];
      step->planes_ = xs[2] * xs[3];
    }
  }
  step->reads = {in};
  step->writes.push_back(b.define(n.outputs[0], DType::U8, xs, md));
  step->writes.push_back(b.define(n.outputs.size() > 1 ? n.outputs[1] : "", DType::F32, {}));
  step->writes.push_back(b.define(n.outputs.size() > 2 ? n.outputs[2] : "", DType::U8, {}));
  step->label = n.describe() + (step->channels_ ? ": cpu (into nhwc)" : md ? ": cpu (in its input's layout)" : ": cpu");
  b.add(std::move(step));
  return true;
}

// ---- LookupTable ----

namespace {

// y[i] = table[x[i]] over n bytes, in chunks over the threads.
void look_up(int threads, const uint8_t* x, uint8_t* y, int64_t n, const uint8_t* table) {
  const int64_t chunk = 1 << 15;
  parallel_for((n + chunk - 1) / chunk, n >= 2 * chunk ? threads : 1, [&](int64_t c) {
    const int64_t begin = c * chunk;
    byte_table::look_up(x + begin, y + begin, std::min(chunk, n - begin), table);
  });
}

// The values in whatever layout their producer left them (an int8 conv's nhwc): the map is per
// byte, so any layout without padding bytes does.
class LookupStep : public Step {
 public:
  void run(RunState& rs) override {
    look_up(rs.threads, static_cast<const uint8_t*>(rs.slots[reads[0]].data()),
            static_cast<uint8_t*>(rs.slots[writes[0]].data()), n_, table_);
  }
  int64_t n_ = 0;
  uint8_t table_[256] = {};
};

// Shapes known only at run time: plain tensors.
class DynamicLookupStep : public TensorStep {
 public:
  explicit DynamicLookupStep(const Tensor& table, DType dt) : dt_(dt) { std::memcpy(table_, table.raw_data(), 256); }
  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    Tensor& y = out(rs, 0, dt_, in[0]->shape());
    Tensor x = in[0]->contiguous();
    look_up(rs.threads, static_cast<const uint8_t*>(x.raw_data()), static_cast<uint8_t*>(y.raw_data()), x.numel(),
            table_);
  }
  DType dt_;
  uint8_t table_[256] = {};
};

}  // namespace

bool make_lookup_table(PlanBuilder& b, const Node& n) {
  if (n.domain != "hodu" || n.op_type != "LookupTable" || n.inputs.size() != 2) return false;
  const Tensor* table = passes::constant_of(b.graph(), n.inputs[1]);
  const DType xdt = dtype_of(b, n.inputs[0]);
  if (!table || table->numel() != 256 || !is_8bit(table->dtype()) || !is_8bit(xdt)) return false;
  const Tensor t = table->contiguous();
  auto x = b.static_type(n.inputs[0]);
  if (!x) {
    add_tensor_step(b, n, std::make_unique<DynamicLookupStep>(t, t.dtype()), {t.dtype()}, "byte table (shape at run time)");
    return true;
  }
  auto step = std::make_unique<LookupStep>();
  std::memcpy(step->table_, t.raw_data(), 256);
  step->n_ = shape_numel(x->second);
  bool kept = false;
  if (b.has_slot(n.inputs[0]) && xdt == t.dtype()) {
    const Slot& s = b.at(b.slot(n.inputs[0]));
    if (s.blocked && static_cast<int64_t>(s.md.get_size()) == step->n_) {
      const dnnl::memory::desc md = s.md;
      step->reads = {b.as_layout(n.inputs[0], md)};
      step->writes = {b.define(n.outputs[0], t.dtype(), x->second, md)};
      kept = true;
    }
  }
  if (!kept) {
    step->reads = {b.plain(n.inputs[0])};
    step->writes = {b.define(n.outputs[0], t.dtype(), x->second)};
  }
  step->label = n.describe() + (kept ? ": cpu byte table (in its layout)" : ": cpu byte table");
  b.add(std::move(step));
  return true;
}

}  // namespace hodu::cpu
