// How many threads a node's steps get. Forking a parallel region costs a few microseconds (far
// more on cores other processes keep busy: a worker that is not running holds up the join for a
// scheduler tick), so a node whose work is a few microseconds runs on one thread: a model of
// tiny nodes (Silero VAD: ~30 steps of 1-10 µs) is then bound by its arithmetic.
#include <algorithm>
#include <cstdlib>

#include "engines/cpu/plan.h"
#include "passes/graph_utils.h"

namespace hodu::cpu {
namespace {

// Work below this runs on one thread: 2^20 multiply-adds of a product (20-40 µs on one core),
// 2^16 elements of anything else (kElementWork each: the bound the elementwise loops had).
constexpr int64_t kSerialWork = int64_t{1} << 20;
constexpr int64_t kElementWork = 16;

int64_t numel_of(const Graph& g, const std::string& v) {
  if (v.empty()) return 0;
  auto s = passes::static_shape(g, v);
  return s ? shape_numel(*s) : -1;
}

}  // namespace

int64_t node_work(const Graph& g, const Node& n) {
  if (passes::has_subgraph(n) && n.op_type != "FusedElementwise") return -1;  // its own steps decide
  int64_t out = 0, in = 0;
  for (const auto& o : n.outputs) {
    int64_t e = numel_of(g, o);
    if (e < 0) return -1;
    out += e;
  }
  for (const auto& i : n.inputs) {
    int64_t e = numel_of(g, i);
    if (e < 0) return -1;
    in = std::max(in, e);
  }
  const std::string& op = n.op_type;
  auto weight_row = [&](size_t w) -> int64_t {  // elements of a weight per output element
    auto s = n.has_input(w) ? passes::static_shape(g, n.inputs[w]) : std::nullopt;
    if (!s || s->empty() || (*s)[0] == 0) return -1;
    return shape_numel(*s) / (*s)[0];
  };
  auto last_dim = [&](size_t i) -> int64_t {
    auto s = n.has_input(i) ? passes::static_shape(g, n.inputs[i]) : std::nullopt;
    return s && !s->empty() ? s->back() : -1;
  };
  int64_t per = kElementWork;
  if (op == "Conv" || op == "FusedConv" || op == "ConvInteger") {
    per = weight_row(1);
    // One output pixel per image (a squeeze-excite 1x1 conv over [N, C, 1, 1], the GEMV form):
    // each weight is read once, from memory, per multiply-add, so it counts as an element of
    // anything else (MobileNetV3's 240 -> 960 took 60-70 µs on one thread).
    auto ys = passes::static_shape(g, n.outputs[0]);
    if (per > 0 && ys && ys->size() > 2 && (*ys)[0] > 0 && (*ys)[1] > 0 && out == (*ys)[0] * (*ys)[1])
      per = std::max(per, per * kElementWork / std::max<int64_t>(1, (*ys)[0]));
  }
  else if (op == "QLinearConv") per = weight_row(3);
  else if (op == "MatMul" || op == "FusedMatMul" || op == "Gemm" || op == "FusedGemm" || op == "MatMulInteger" ||
           op == "QLinearMatMul")
    per = last_dim(0);
  else if (op == "LSTM" || op == "GRU" || op == "RNN") {
    // Every step's projections: X and the states through W and R.
    auto w = passes::static_shape(g, n.inputs[1]), r = passes::static_shape(g, n.inputs[2]);
    auto x = passes::static_shape(g, n.inputs[0]);
    if (!w || !r || !x || x->size() != 3 || x->back() == 0) return -1;
    return shape_numel(*x) / x->back() * (shape_numel(*w) + shape_numel(*r));
  } else if (op == "Attention" || op == "ConvTranspose") {
    return -1;
  }
  if (per < 0) return -1;
  return std::max(in * kElementWork, out * per);
}

int node_threads(const Graph& g, const Node& n, int threads) {
  if (threads <= 1) return threads;
  static const int64_t serial = [] {
    const char* v = std::getenv("HODU_CPU_SERIAL_WORK");
    return v && *v ? std::atoll(v) : kSerialWork;
  }();
  int64_t work = node_work(g, n);
  return work >= 0 && work < serial ? 1 : threads;
}

}  // namespace hodu::cpu
