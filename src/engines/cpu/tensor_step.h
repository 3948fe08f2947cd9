// The base of the cpu engine's kernels on plain tensors (broadcasting ops, data movement,
// indexing, reductions, resampling): a step that reads its inputs as tensors and writes
// outputs whose shapes may be known only at run time (after NonZero, a Range of computed
// bounds). With static shapes an output lives in the plan's arena; otherwise the step
// allocates it at run time, as the interpreter would. Loop parameters derived from the input
// shapes are recomputed only when those shapes change.
#pragma once
#include <array>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "engines/cpu/plan.h"
#include "engines/cpu/row_kernels.h"

namespace hodu::cpu {

class TensorStep : public Step {
 public:
  void run(RunState& rs) final;

 protected:
  // Called when the input shapes differ from the last run's (and on the first run).
  virtual void configure(const std::vector<const Tensor*>& in) { (void)in; }
  // `in[i]` is node input i, or null when it is absent.
  virtual void execute(RunState& rs, const std::vector<const Tensor*>& in) = 0;
  // Output i with this dtype and shape: the arena's tensor when the plan knew its shape, else a
  // tensor allocated now (reused across runs when nothing else holds it).
  Tensor& out(RunState& rs, size_t i, DType dt, const std::vector<int64_t>& shape);

 public:
  std::vector<int> input_reads_;  // node input → index into reads, -1 when absent
  std::vector<int> output_writes_;  // node output → index into writes, -1 when not wanted

 private:
  std::vector<const Tensor*> in_;
  std::vector<std::vector<int64_t>> shapes_;
  bool configured_ = false;
};

// Fills a TensorStep's reads (every present input, plain) and writes (every wanted output: in
// the arena when `out_types` gives its static shape, else allocated at run time), names it
// "<node>: cpu <what>" and adds it to the plan. `dtypes` are the outputs' dtypes.
// Inputs listed in `unread` are not read (CastLike's second input gives only its dtype).
void add_tensor_step(PlanBuilder& b, const Node& n, std::unique_ptr<TensorStep> step, const std::vector<DType>& dtypes,
                     const std::string& what, const std::vector<size_t>& unread = {});

// A value's dtype (known at plan time even when its shape is not), or Undefined.
DType dtype_of(PlanBuilder& b, const std::string& value);

// The constant integers of input i (an initializer or folded constant), or nullopt.
std::optional<std::vector<int64_t>> constant_ints(PlanBuilder& b, const Node& n, size_t i);

// y[o_0, ..., o_r] = x[src_0[o_0], ..., src_r[o_r]] over y's shape, or `fill` (one element of x's
// dtype; zeros when null) where any source index is -1: Pad, Tile, nearest Resize. An output row
// whose source row is the previous row's is a copy of that row (nearest upsampling's repeats).
void gather_by_tables(int threads, const Tensor& x, Tensor& y, const std::vector<std::vector<int64_t>>& src,
                      const void* fill);

// A loop over the output of a broadcast of up to three inputs: dims of size 1 dropped and
// adjacent dims merged where every input reads them as one; the last merged dim is the "row".
struct Broadcast {
  static constexpr int kMax = 3;
  std::vector<int64_t> dims;                         // merged output dims
  std::vector<std::array<int64_t, kMax>> strides;    // per dim, per input (0: broadcast)
  int64_t total = 0;
  int inputs = 0;
  // nullopt when the shapes do not broadcast.
  static std::optional<Broadcast> make(const std::vector<int64_t>& out, const std::vector<std::vector<int64_t>>& in);
  // Output shape of broadcasting `in` (numpy rules), nullopt when they do not broadcast.
  static std::optional<std::vector<int64_t>> shape_of(const std::vector<std::vector<int64_t>>& in);
  int64_t row() const { return dims.back(); }
  int64_t rows() const { return row() ? total / row() : 0; }
  // f(out_offset, in_offsets, row_len, in_row_strides) for every row, rows split over threads in
  // chunks whose offsets advance by counters (no division per row).
  template <typename F>
  void for_rows(int threads, F&& f) const {
    const int64_t nrows = rows(), len = row();
    if (nrows == 0 || len == 0) return;
    const size_t r = dims.size();
    std::array<int64_t, kMax> inner{};
    for (int k = 0; k < inputs; ++k) inner[k] = strides[r - 1][k];
    const int64_t chunk = std::max<int64_t>(1, (1 << 14) / len);
    const int64_t chunks = (nrows + chunk - 1) / chunk;
    const int t = total >= (1 << 15) ? threads : 1;
    parallel_for(chunks, t, [&](int64_t c) {
      const int64_t r0 = c * chunk, r1 = std::min(nrows, r0 + chunk);
      std::array<int64_t, 8> idx{};
      std::array<int64_t, kMax> off{};
      int64_t rest = r0;
      for (size_t d = r - 1; d-- > 0;) {
        idx[d] = rest % dims[d];
        rest /= dims[d];
        for (int k = 0; k < inputs; ++k) off[k] += idx[d] * strides[d][k];
      }
      for (int64_t q = r0; q < r1; ++q) {
        f(q * len, off, len, inner);
        for (size_t d = r - 1; d-- > 0;) {  // advance the row counter
          for (int k = 0; k < inputs; ++k) off[k] += strides[d][k];
          if (++idx[d] < dims[d]) break;
          for (int k = 0; k < inputs; ++k) off[k] -= dims[d] * strides[d][k];
          idx[d] = 0;
        }
      }
    });
  }
};

// Calls f.template operator()<T>() with T the C++ type of `dt` among the ones the cpu kernels
// compute in (f32, f64, i64, i32, i8, u8; bool as u8); false for other dtypes.
template <typename F>
bool dispatch_compute(DType dt, F&& f) {
  switch (dt) {
    case DType::F32: f.template operator()<float>(); return true;
    case DType::F64: f.template operator()<double>(); return true;
    case DType::I64: f.template operator()<int64_t>(); return true;
    case DType::I32: f.template operator()<int32_t>(); return true;
    case DType::I8: f.template operator()<int8_t>(); return true;
    case DType::U8: f.template operator()<uint8_t>(); return true;
    default: return false;
  }
}
inline bool is_compute_dtype(DType dt) {
  return dt == DType::F32 || dt == DType::F64 || dt == DType::I64 || dt == DType::I32 || dt == DType::I8 ||
         dt == DType::U8;
}

// Calls f.template operator()<T>() with an unsigned type of the element's size (1, 2, 4, 8 bytes):
// for kernels that only move elements. False for strings and sub-byte dtypes.
template <typename F>
bool dispatch_bytes(DType dt, F&& f) {
  if (dt == DType::String || dt == DType::Undefined) return false;
  switch (dtype_bits(dt)) {
    case 8: f.template operator()<uint8_t>(); return true;
    case 16: f.template operator()<uint16_t>(); return true;
    case 32: f.template operator()<uint32_t>(); return true;
    case 64: f.template operator()<uint64_t>(); return true;
    default: return false;
  }
}
inline bool movable_dtype(DType dt) {
  if (dt == DType::String || dt == DType::Undefined) return false;
  int bits = dtype_bits(dt);
  return bits == 8 || bits == 16 || bits == 32 || bits == 64;
}

// Normalizes an axis into [0, rank); nullopt when out of range.
inline std::optional<int64_t> norm_axis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank) return std::nullopt;
  return axis < 0 ? axis + rank : axis;
}

// dst[i] = src[Σ idx_d · strides[d]] over `dims` row-major (a strided gather).
template <typename T>
void gather_strided(const T* src, T* dst, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides,
                    int threads) {
  const int64_t total = shape_numel(dims);
  if (total == 0) return;
  if (dims.empty()) {
    dst[0] = src[0];
    return;
  }
  const int64_t inner = dims.back(), rows = total / inner, is = strides.back();
  parallel_for(rows, total >= (1 << 15) ? threads : 1, [&](int64_t row) {
    int64_t rest = row, off = 0;
    for (size_t d = dims.size() - 1; d-- > 0;) {
      off += rest % dims[d] * strides[d];
      rest /= dims[d];
    }
    T* o = dst + row * inner;
    for (int64_t j = 0; j < inner; ++j) o[j] = src[off + j * is];
  });
}

}  // namespace hodu::cpu
