// Linear algebra: MatMul, Gemm, Einsum, Det, MatMulInteger, QLinearMatMul.
// f32 products go through the blocked, multithreaded sgemm (linalg_gemm.h); other
// types use simple loops with the same summation order (k ascending).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <type_traits>

#include "engines/interp/ops/linalg_gemm.h"
#include "engines/interp/ops/op_utils.h"

namespace hodu::interp {
namespace {

// Shapes of a numpy-style matmul: batch dims broadcast, 1-D operands promoted.
struct MatMulPlan {
  int64_t M = 1, N = 1, K = 1;
  std::vector<int64_t> out_batch, out_shape;
  std::vector<int64_t> a_off, b_off;  // per output batch: matrix index into a / b
};

MatMulPlan plan_matmul(const KernelContext& ctx, const std::vector<int64_t>& as, const std::vector<int64_t>& bs) {
  if (as.empty() || bs.empty()) ctx.fail(ErrorCode::InvalidArgument, "MatMul operands must have rank >= 1");
  MatMulPlan p;
  std::vector<int64_t> a = as, b = bs;
  bool a1 = a.size() == 1, b1 = b.size() == 1;
  if (a1) a.insert(a.begin(), 1);
  if (b1) b.push_back(1);
  p.M = a[a.size() - 2];
  p.K = a.back();
  p.N = b.back();
  if (b[b.size() - 2] != p.K)
    ctx.fail(ErrorCode::InvalidArgument, "inner dimensions do not match: {} and {}", shape_to_string(as),
             shape_to_string(bs));
  std::vector<int64_t> ab(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  p.out_batch = broadcast_shapes(ctx, ab, bb);
  p.a_off = broadcast_offsets(ab, p.out_batch);
  p.b_off = broadcast_offsets(bb, p.out_batch);
  p.out_shape = p.out_batch;
  if (!a1) p.out_shape.push_back(p.M);
  if (!b1) p.out_shape.push_back(p.N);
  return p;
}

// Generic matmul in type T (accumulating in Acc, cast back to T).
template <typename T, typename Acc>
void matmul_generic(const MatMulPlan& p, const T* a, const T* b, T* c, int threads) {
  int64_t nb = static_cast<int64_t>(p.a_off.size());
  int64_t M = p.M, N = p.N, K = p.K;
  parallel_for(threads, nb * M, std::max<int64_t>(1, 8192 / std::max<int64_t>(N * K, 1)), [&](int64_t tb, int64_t te) {
    std::vector<Acc> acc(static_cast<size_t>(N));
    for (int64_t t = tb; t < te; ++t) {
      int64_t bi = t / M, i = t % M;
      const T* ar = a + p.a_off[bi] * M * K + i * K;
      const T* bm = b + p.b_off[bi] * K * N;
      std::fill(acc.begin(), acc.end(), Acc(0));
      for (int64_t k = 0; k < K; ++k) {
        Acc av = static_cast<Acc>(ar[k]);
        const T* br = bm + k * N;
        for (int64_t j = 0; j < N; ++j) acc[j] += av * static_cast<Acc>(br[j]);
      }
      T* cr = c + bi * M * N + i * N;
      for (int64_t j = 0; j < N; ++j) cr[j] = static_cast<T>(acc[j]);
    }
  });
}

void matmul_f32(const MatMulPlan& p, const float* a, const float* b, float* c, int threads) {
  std::vector<GemmBatchItem> items(p.a_off.size());
  for (size_t i = 0; i < items.size(); ++i)
    items[i] = {a + p.a_off[i] * p.M * p.K, b + p.b_off[i] * p.K * p.N, c + static_cast<int64_t>(i) * p.M * p.N};
  sgemm_batched(p.M, p.N, p.K, items, p.K, p.N, p.N, threads);
}

// Accumulator for integer products: unsigned 64-bit, wrapping like the type does.
template <typename T>
using IntAcc = std::conditional_t<std::is_floating_point_v<T>, T, uint64_t>;

template <typename T>
void matmul_typed(const MatMulPlan& p, const T* a, const T* b, T* c, int threads) {
  if constexpr (std::is_same_v<T, float>) {
    matmul_f32(p, a, b, c, threads);
  } else if constexpr (std::is_same_v<T, double>) {
    matmul_generic<T, double>(p, a, b, c, threads);
  } else if constexpr (std::is_same_v<T, bool>) {
    matmul_generic<T, bool>(p, a, b, c, threads);
  } else if constexpr (std::is_signed_v<T>) {
    // Wrapping arithmetic through uint64 (two's complement), avoiding signed overflow UB.
    int64_t nb = static_cast<int64_t>(p.a_off.size());
    int64_t M = p.M, N = p.N, K = p.K;
    parallel_for(threads, nb * M, std::max<int64_t>(1, 8192 / std::max<int64_t>(N * K, 1)), [&](int64_t tb, int64_t te) {
      std::vector<uint64_t> acc(static_cast<size_t>(N));
      for (int64_t t = tb; t < te; ++t) {
        int64_t bi = t / M, i = t % M;
        const T* ar = a + p.a_off[bi] * M * K + i * K;
        const T* bm = b + p.b_off[bi] * K * N;
        std::fill(acc.begin(), acc.end(), 0);
        for (int64_t k = 0; k < K; ++k) {
          uint64_t av = static_cast<uint64_t>(static_cast<int64_t>(ar[k]));
          const T* br = bm + k * N;
          for (int64_t j = 0; j < N; ++j) acc[j] += av * static_cast<uint64_t>(static_cast<int64_t>(br[j]));
        }
        T* cr = c + bi * M * N + i * N;
        for (int64_t j = 0; j < N; ++j) cr[j] = static_cast<T>(acc[j]);
      }
    });
  } else {
    matmul_generic<T, uint64_t>(p, a, b, c, threads);
  }
}

void matmul_kernel(KernelContext& ctx) {
  const Tensor& a0 = ctx.input(0);
  const Tensor& b0 = ctx.input(1);
  if (a0.dtype() != b0.dtype())
    ctx.fail(ErrorCode::InvalidArgument, "operands have different dtypes ({} and {})", dtype_name(a0.dtype()),
             dtype_name(b0.dtype()));
  DType dt = a0.dtype();
  Tensor a = widen(a0).contiguous(), b = widen(b0).contiguous();
  MatMulPlan p = plan_matmul(ctx, a.shape(), b.shape());
  Tensor out = Tensor::empty(a.dtype(), p.out_shape);
  dispatch_numeric(ctx, a.dtype(), [&]<typename T>() {
    if constexpr (std::is_same_v<T, bool>) ctx.fail(ErrorCode::Unsupported, "dtype bool is not supported by MatMul");
    else matmul_typed<T>(p, a.data<T>(), b.data<T>(), out.data<T>(), ctx.threads);
  });
  ctx.set_output(0, narrow_to(out, dt));
}

// ---- Gemm --------------------------------------------------------------------

Tensor transpose2d(const Tensor& t) { return t.permute({1, 0}).contiguous(); }

void gemm_kernel(KernelContext& ctx) {
  const Tensor& a0 = ctx.input(0);
  const Tensor& b0 = ctx.input(1);
  DType dt = a0.dtype();
  if (b0.dtype() != dt) ctx.fail(ErrorCode::InvalidArgument, "A and B have different dtypes");
  if (a0.rank() != 2 || b0.rank() != 2)
    ctx.fail(ErrorCode::InvalidArgument, "A and B must be 2-D, got {} and {}", a0.shape_string(), b0.shape_string());
  float alpha = ctx.node.get_float("alpha", 1.0f), beta = ctx.node.get_float("beta", 1.0f);
  bool ta = ctx.node.get_int("transA", 0) != 0, tb = ctx.node.get_int("transB", 0) != 0;
  Tensor a = widen(a0), b = widen(b0);
  a = ta ? transpose2d(a) : a.contiguous();
  b = tb ? transpose2d(b) : b.contiguous();
  MatMulPlan p = plan_matmul(ctx, a.shape(), b.shape());
  Tensor out = Tensor::empty(a.dtype(), {p.M, p.N});
  Tensor c;
  std::vector<int64_t> coff;
  if (ctx.has_input(2)) {
    c = widen(ctx.input(2)).contiguous();
    if (c.dtype() != a.dtype()) ctx.fail(ErrorCode::InvalidArgument, "C has dtype {}, expected {}", dtype_name(ctx.input(2).dtype()), dtype_name(dt));
    if (c.rank() > 2 || broadcast_shapes(ctx, c.shape(), {p.M, p.N}) != std::vector<int64_t>{p.M, p.N})
      ctx.fail(ErrorCode::InvalidArgument, "C of shape {} cannot be broadcast to [{}, {}]", c.shape_string(), p.M, p.N);
    coff = broadcast_offsets(c.shape(), {p.M, p.N});
  }
  dispatch_numeric(ctx, a.dtype(), [&]<typename T>() {
    if constexpr (std::is_same_v<T, bool>) {
      ctx.fail(ErrorCode::Unsupported, "dtype bool is not supported by Gemm");
    } else {
      T* y = out.data<T>();
      matmul_typed<T>(p, a.data<T>(), b.data<T>(), y, ctx.threads);
      const T* cd = c.defined() ? c.data<T>() : nullptr;
      int64_t n = p.M * p.N;
      if constexpr (std::is_floating_point_v<T>) {
        // numpy reference: (A·B) * alpha, then + C * beta, in the type.
        T al = static_cast<T>(alpha), be = static_cast<T>(beta);
        for (int64_t i = 0; i < n; ++i) {
          T v = alpha == 1.0f ? y[i] : y[i] * al;
          if (cd && beta != 0.0f) v = v + cd[coff[i]] * be;
          y[i] = v;
        }
      } else {
        // Integers: integral alpha/beta wrap like integer arithmetic; others go through double.
        bool integral = std::nearbyint(alpha) == alpha && std::nearbyint(beta) == beta;
        for (int64_t i = 0; i < n; ++i) {
          if (integral) {
            uint64_t v = static_cast<uint64_t>(static_cast<int64_t>(y[i])) * static_cast<uint64_t>(static_cast<int64_t>(alpha));
            if (cd) v += static_cast<uint64_t>(static_cast<int64_t>(cd[coff[i]])) * static_cast<uint64_t>(static_cast<int64_t>(beta));
            y[i] = static_cast<T>(v);
          } else {
            double v = static_cast<double>(y[i]) * alpha;
            if (cd) v += static_cast<double>(cd[coff[i]]) * beta;
            v = std::clamp(v, static_cast<double>(std::numeric_limits<T>::lowest()), static_cast<double>(std::numeric_limits<T>::max()));
            y[i] = static_cast<T>(v);
          }
        }
      }
    }
  });
  ctx.set_output(0, narrow_to(out, dt));
}

// ---- Einsum ------------------------------------------------------------------

void einsum_kernel(KernelContext& ctx) {
  std::string eq = ctx.node.get_string("equation", "");
  std::string clean;
  for (char ch : eq)
    if (ch != ' ') clean += ch;
  if (clean.empty()) ctx.fail(ErrorCode::InvalidArgument, "equation is empty");
  size_t n_in = ctx.num_inputs();
  if (n_in == 0) ctx.fail(ErrorCode::InvalidArgument, "Einsum needs at least one input");
  DType dt = ctx.input(0).dtype();
  std::vector<Tensor> ins;
  for (size_t i = 0; i < n_in; ++i) {
    if (ctx.input(i).dtype() != dt) ctx.fail(ErrorCode::InvalidArgument, "inputs have different dtypes");
    ins.push_back(widen(ctx.input(i)).contiguous());
  }
  std::string lhs = clean, rhs;
  bool explicit_out = false;
  if (auto pos = clean.find("->"); pos != std::string::npos) {
    lhs = clean.substr(0, pos);
    rhs = clean.substr(pos + 2);
    explicit_out = true;
  }
  std::vector<std::string> terms;
  {
    size_t s = 0;
    while (true) {
      size_t c = lhs.find(',', s);
      terms.push_back(lhs.substr(s, c == std::string::npos ? std::string::npos : c - s));
      if (c == std::string::npos) break;
      s = c + 1;
    }
  }
  if (terms.size() != n_in)
    ctx.fail(ErrorCode::InvalidArgument, "equation '{}' has {} operands, got {} inputs", eq, terms.size(), n_in);
  // Labels: letters map to their char code; ellipsis dims to 256 + i.
  auto parse_term = [&](const std::string& term, int64_t rank, int64_t& ell_rank_out, bool is_out,
                        int64_t ell_rank) -> std::vector<int> {
    std::vector<int> letters;
    int ell_pos = -1;
    for (size_t i = 0; i < term.size(); ++i) {
      char ch = term[i];
      if (ch == '.') {
        if (term.compare(i, 3, "...") != 0 || ell_pos >= 0)
          ctx.fail(ErrorCode::InvalidArgument, "bad ellipsis in equation '{}'", eq);
        ell_pos = static_cast<int>(letters.size());
        i += 2;
      } else if (std::isalpha(static_cast<unsigned char>(ch))) {
        letters.push_back(static_cast<unsigned char>(ch));
      } else {
        ctx.fail(ErrorCode::InvalidArgument, "bad character '{}' in equation '{}'", ch, eq);
      }
    }
    int64_t ne = 0;
    if (!is_out) {
      if (ell_pos < 0) {
        if (static_cast<int64_t>(letters.size()) != rank)
          ctx.fail(ErrorCode::InvalidArgument, "term '{}' has {} labels but the input has rank {}", term, letters.size(), rank);
      } else {
        ne = rank - static_cast<int64_t>(letters.size());
        if (ne < 0) ctx.fail(ErrorCode::InvalidArgument, "term '{}' has more labels than the input's rank {}", term, rank);
      }
      ell_rank_out = ne;
    } else {
      ne = ell_pos >= 0 ? ell_rank : 0;
    }
    std::vector<int> labels;
    for (size_t i = 0; i <= letters.size(); ++i) {
      if (static_cast<int>(i) == ell_pos)
        for (int64_t e = 0; e < ne; ++e) labels.push_back(256 + static_cast<int>(is_out ? ell_rank - ne + e : e));
      if (i < letters.size()) labels.push_back(letters[i]);
    }
    return labels;
  };
  std::vector<std::vector<int>> in_labels(n_in);
  std::vector<int64_t> ell_ranks(n_in, 0);
  // First pass for ellipsis ranks.
  int64_t ell_rank = 0;
  for (size_t i = 0; i < n_in; ++i) {
    int64_t er = 0;
    parse_term(terms[i], ins[i].rank(), er, false, 0);
    ell_ranks[i] = er;
    ell_rank = std::max(ell_rank, er);
  }
  for (size_t i = 0; i < n_in; ++i) {
    int64_t er = 0;
    // Re-parse with the global ellipsis rank so labels are right-aligned.
    auto lab = parse_term(terms[i], ins[i].rank(), er, false, 0);
    std::vector<int> fixed;
    for (int l : lab) fixed.push_back(l >= 256 ? l + static_cast<int>(ell_rank - er) : l);
    in_labels[i] = fixed;
  }
  std::map<int, int64_t> sizes;
  for (size_t i = 0; i < n_in; ++i)
    for (size_t d = 0; d < in_labels[i].size(); ++d) {
      int l = in_labels[i][d];
      int64_t s = ins[i].dim(static_cast<int64_t>(d));
      auto it = sizes.find(l);
      if (it == sizes.end() || it->second == 1) sizes[l] = s;
      else if (s != 1 && s != it->second)
        ctx.fail(ErrorCode::InvalidArgument, "label '{}' has sizes {} and {}", l < 256 ? std::string(1, char(l)) : "...",
                 it->second, s);
    }
  std::vector<int> out_labels;
  if (explicit_out) {
    int64_t dummy = 0;
    out_labels = parse_term(rhs, 0, dummy, true, ell_rank);
    for (size_t i = 0; i < out_labels.size(); ++i) {
      if (!sizes.count(out_labels[i]))
        ctx.fail(ErrorCode::InvalidArgument, "output label '{}' does not appear in the inputs", char(out_labels[i]));
      for (size_t j = 0; j < i; ++j)
        if (out_labels[j] == out_labels[i]) ctx.fail(ErrorCode::InvalidArgument, "output label repeated in '{}'", eq);
    }
  } else {
    for (int64_t e = 0; e < ell_rank; ++e) out_labels.push_back(256 + static_cast<int>(e));
    std::map<int, int> counts;
    for (auto& v : in_labels)
      for (int l : v) counts[l]++;
    for (auto& [l, c] : counts)
      if (l < 256 && c == 1) out_labels.push_back(l);
  }
  std::vector<int> sum_labels;
  for (auto& [l, s] : sizes)
    if (std::find(out_labels.begin(), out_labels.end(), l) == out_labels.end()) sum_labels.push_back(l);
  std::vector<int64_t> out_shape;
  for (int l : out_labels) out_shape.push_back(sizes[l]);
  // Per input, the stride of each label (diagonals add up; broadcast size-1 dims stride 0).
  auto label_strides = [&](const std::vector<int>& labels) {
    std::vector<std::vector<int64_t>> st(n_in, std::vector<int64_t>(labels.size(), 0));
    for (size_t i = 0; i < n_in; ++i) {
      auto cs = contiguous_strides(ins[i].shape());
      for (size_t d = 0; d < in_labels[i].size(); ++d) {
        if (ins[i].dim(static_cast<int64_t>(d)) == 1) continue;
        auto it = std::find(labels.begin(), labels.end(), in_labels[i][d]);
        if (it != labels.end()) st[i][it - labels.begin()] += cs[d];
      }
    }
    return st;
  };
  auto ost = label_strides(out_labels);
  auto sst = label_strides(sum_labels);
  std::vector<int64_t> ssize;
  int64_t sum_count = 1;
  for (int l : sum_labels) { ssize.push_back(sizes[l]); sum_count *= sizes[l]; }
  Tensor out = Tensor::empty(ins[0].dtype(), out_shape);
  int64_t on = out.numel();
  dispatch_numeric(ctx, ins[0].dtype(), [&]<typename T>() {
    using Acc = std::conditional_t<std::is_floating_point_v<T>, double,
                                   std::conditional_t<std::is_same_v<T, bool>, bool, uint64_t>>;
    std::vector<const T*> src(n_in);
    for (size_t i = 0; i < n_in; ++i) src[i] = ins[i].data<T>();
    T* dst = out.data<T>();
    size_t no = out_labels.size(), ns = sum_labels.size();
    parallel_for(ctx.threads, on, std::max<int64_t>(1, 4096 / std::max<int64_t>(sum_count, 1)), [&](int64_t b, int64_t e) {
      std::vector<int64_t> base(n_in), off(n_in), sidx(ns);
      for (int64_t o = b; o < e; ++o) {
        // Decode the output index into per-input base offsets.
        int64_t rem = o;
        std::fill(base.begin(), base.end(), 0);
        for (size_t d = no; d-- > 0;) {
          int64_t idx = rem % out_shape[d];
          rem /= out_shape[d];
          for (size_t i = 0; i < n_in; ++i) base[i] += idx * ost[i][d];
        }
        Acc acc = Acc(0);
        if (sum_count > 0) {
          std::fill(sidx.begin(), sidx.end(), 0);
          off = base;
          for (int64_t s = 0; s < sum_count; ++s) {
            Acc prod;
            if constexpr (std::is_same_v<T, bool>) {
              prod = true;
              for (size_t i = 0; i < n_in; ++i) prod = prod && src[i][off[i]];
              acc = acc || prod;
            } else if constexpr (std::is_floating_point_v<T>) {
              prod = 1;
              for (size_t i = 0; i < n_in; ++i) prod *= static_cast<Acc>(src[i][off[i]]);
              acc += prod;
            } else {
              prod = 1;
              for (size_t i = 0; i < n_in; ++i) prod *= static_cast<uint64_t>(static_cast<int64_t>(src[i][off[i]]));
              acc += prod;
            }
            for (size_t d = ns; d-- > 0;) {
              if (++sidx[d] < ssize[d]) {
                for (size_t i = 0; i < n_in; ++i) off[i] += sst[i][d];
                break;
              }
              for (size_t i = 0; i < n_in; ++i) off[i] -= sst[i][d] * (ssize[d] - 1);
              sidx[d] = 0;
            }
          }
        }
        dst[o] = static_cast<T>(acc);
      }
    });
  });
  ctx.set_output(0, narrow_to(out, dt));
}

// ---- Det ---------------------------------------------------------------------

void det_kernel(KernelContext& ctx) {
  const Tensor& x0 = ctx.input(0);
  DType dt = x0.dtype();
  if (!dtype_is_float(dt)) ctx.fail(ErrorCode::Unsupported, "dtype {} is not supported by Det", dtype_name(dt));
  Tensor x = widen(x0).contiguous();
  int64_t r = x.rank();
  if (r < 2 || x.dim(-1) != x.dim(-2))
    ctx.fail(ErrorCode::InvalidArgument, "input must be [*, M, M], got {}", x.shape_string());
  int64_t n = x.dim(-1);
  std::vector<int64_t> oshape(x.shape().begin(), x.shape().end() - 2);
  Tensor out = Tensor::empty(x.dtype(), oshape);
  int64_t nb = shape_numel(oshape);
  dispatch_float(ctx, x.dtype(), [&]<typename T>() {
    const T* src = x.data<T>();
    T* dst = out.data<T>();
    parallel_for(ctx.threads, nb, 16, [&](int64_t b, int64_t e) {
      std::vector<double> m(static_cast<size_t>(n * n));
      for (int64_t bi = b; bi < e; ++bi) {
        for (int64_t i = 0; i < n * n; ++i) m[i] = src[bi * n * n + i];
        double det = 1;
        for (int64_t c = 0; c < n; ++c) {
          int64_t piv = c;
          for (int64_t i = c + 1; i < n; ++i)
            if (std::fabs(m[i * n + c]) > std::fabs(m[piv * n + c])) piv = i;
          if (m[piv * n + c] == 0) { det = 0; break; }
          if (piv != c) {
            for (int64_t j = 0; j < n; ++j) std::swap(m[c * n + j], m[piv * n + j]);
            det = -det;
          }
          double d = m[c * n + c];
          det *= d;
          for (int64_t i = c + 1; i < n; ++i) {
            double f = m[i * n + c] / d;
            if (f == 0) continue;
            for (int64_t j = c; j < n; ++j) m[i * n + j] -= f * m[c * n + j];
          }
        }
        dst[bi] = static_cast<T>(det);
      }
    });
  });
  ctx.set_output(0, narrow_to(out, dt));
}

// ---- MatMulInteger / QLinearMatMul --------------------------------------------

// Values of `t` broadcast (numpy, unidirectionally) to `shape`, as int64.
std::vector<int64_t> broadcast_ints(const KernelContext& ctx, const Tensor& t, const std::vector<int64_t>& shape,
                                    const char* what) {
  if (t.rank() > static_cast<int64_t>(shape.size()) || broadcast_shapes(ctx, t.shape(), shape) != shape)
    ctx.fail(ErrorCode::InvalidArgument, "{} of shape {} cannot be broadcast to {}", what, t.shape_string(),
             shape_to_string(shape));
  auto v = t.to_int64s();
  auto off = broadcast_offsets(t.shape(), shape);
  std::vector<int64_t> r(off.size());
  for (size_t i = 0; i < off.size(); ++i) r[i] = v[off[i]];
  return r;
}

bool is_8bit_int(DType t) { return t == DType::I8 || t == DType::U8; }

// Integer operand minus its zero point, as int32 values. per_axis_dim: the dim
// that a 1-D zero point of matching length runs along (rows of A: rank-2;
// columns of B: rank-1), per the MatMulInteger spec.
std::vector<int32_t> sub_zero_point(const KernelContext& ctx, const Tensor& x, const Tensor* zp, int per_axis_dim,
                                    const char* what) {
  auto xv = x.to_int64s();
  std::vector<int32_t> r(xv.size());
  if (!zp) {
    for (size_t i = 0; i < xv.size(); ++i) r[i] = static_cast<int32_t>(xv[i]);
    return r;
  }
  if (zp->dtype() != x.dtype())
    ctx.fail(ErrorCode::InvalidArgument, "{} has dtype {}, expected {}", what, dtype_name(zp->dtype()), dtype_name(x.dtype()));
  std::vector<int64_t> zv;
  int64_t rank = x.rank();
  if (zp->rank() == 1 && rank >= 2 && zp->numel() > 1 && zp->numel() == x.dim(rank + per_axis_dim) && per_axis_dim == -2) {
    // Per-row zero point of A.
    auto z = zp->to_int64s();
    int64_t rows = x.dim(-2), cols = x.dim(-1);
    zv.resize(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) zv[i] = z[(static_cast<int64_t>(i) / cols) % rows];
  } else {
    zv = broadcast_ints(ctx, *zp, x.shape(), what);
  }
  for (size_t i = 0; i < xv.size(); ++i) r[i] = static_cast<int32_t>(xv[i] - zv[i]);
  return r;
}

Tensor int_matmul(const KernelContext& ctx, const Tensor& a, const std::vector<int32_t>& av, const Tensor& b,
                  const std::vector<int32_t>& bv) {
  MatMulPlan p = plan_matmul(ctx, a.shape(), b.shape());
  Tensor out = Tensor::empty(DType::I32, p.out_shape);
  matmul_typed<int32_t>(p, av.data(), bv.data(), out.data<int32_t>(), ctx.threads);
  return out;
}

void matmul_integer_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  if (!is_8bit_int(a.dtype()) || !is_8bit_int(b.dtype()))
    ctx.fail(ErrorCode::Unsupported, "MatMulInteger needs int8/uint8 inputs, got {} and {}", dtype_name(a.dtype()),
             dtype_name(b.dtype()));
  auto av = sub_zero_point(ctx, a, ctx.has_input(2) ? &ctx.input(2) : nullptr, -2, "a_zero_point");
  auto bv = sub_zero_point(ctx, b, ctx.has_input(3) ? &ctx.input(3) : nullptr, -1, "b_zero_point");
  ctx.set_output(0, int_matmul(ctx, a, av, b, bv));
}

// Rounds a double to the precision of float dtype `t` (f32 or narrower), as numpy
// arithmetic in that dtype does.
double round_as(DType t, double v) {
  if (t == DType::F64) return v;
  unsigned char buf[8];
  store_from_double(t, buf, 0, v);
  return load_as_double(t, buf, 0);
}

void qlinear_matmul_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& as = ctx.input(1);
  const Tensor& b = ctx.input(3);
  const Tensor& bs = ctx.input(4);
  const Tensor& ys = ctx.input(6);
  if (!is_8bit_int(a.dtype()) || !is_8bit_int(b.dtype()))
    ctx.fail(ErrorCode::Unsupported, "QLinearMatMul supports int8/uint8 inputs, got {} and {}", dtype_name(a.dtype()),
             dtype_name(b.dtype()));
  DType st = as.dtype();
  if (!dtype_is_float(st) || bs.dtype() != st || ys.dtype() != st)
    ctx.fail(ErrorCode::InvalidArgument, "scales must share one float dtype");
  auto av = sub_zero_point(ctx, a, ctx.has_input(2) ? &ctx.input(2) : nullptr, 0, "a_zero_point");
  auto bv = sub_zero_point(ctx, b, ctx.has_input(5) ? &ctx.input(5) : nullptr, 0, "b_zero_point");
  Tensor c = int_matmul(ctx, a, av, b, bv);
  DType odt = ctx.has_input(7) ? ctx.input(7).dtype() : a.dtype();
  if (!is_8bit_int(odt)) ctx.fail(ErrorCode::Unsupported, "y_zero_point dtype {} is not supported", dtype_name(odt));
  // factor = a_scale * b_scale / y_scale in the scale dtype (numpy broadcasting).
  auto fshape = broadcast_shapes(ctx, broadcast_shapes(ctx, as.shape(), bs.shape()), ys.shape());
  auto oa = broadcast_offsets(as.shape(), fshape), ob = broadcast_offsets(bs.shape(), fshape),
       oy = broadcast_offsets(ys.shape(), fshape);
  auto vas = as.to_doubles(), vbs = bs.to_doubles(), vys = ys.to_doubles();
  std::vector<double> f(oa.size());
  for (size_t i = 0; i < f.size(); ++i) f[i] = round_as(st, round_as(st, vas[oa[i]] * vbs[ob[i]]) / vys[oy[i]]);
  const std::vector<int64_t>& cshape = c.shape();
  auto dshape = broadcast_shapes(ctx, cshape, fshape);
  if (dshape != cshape) ctx.fail(ErrorCode::InvalidArgument, "scales of shape {} do not broadcast to the output {}",
                                 shape_to_string(fshape), shape_to_string(cshape));
  auto of = broadcast_offsets(fshape, cshape);
  std::vector<int64_t> yz;
  if (ctx.has_input(7)) yz = broadcast_ints(ctx, ctx.input(7), cshape, "y_zero_point");
  double qmin = odt == DType::I8 ? -128 : 0, qmax = odt == DType::I8 ? 127 : 255;
  Tensor out = Tensor::empty(odt, cshape);
  const int32_t* cd = c.data<int32_t>();
  for (int64_t i = 0; i < c.numel(); ++i) {
    double d = static_cast<double>(cd[i]) * f[of[i]];
    if (!yz.empty()) d += static_cast<double>(yz[i]);
    d = std::clamp(std::nearbyint(d), qmin, qmax);
    store_from_double(odt, out.raw_data(), i, d);
  }
  ctx.set_output(0, out);
}

}  // namespace

void register_linalg_ops(OpTable& t) {
  t.add("", "MatMul", matmul_kernel);
  t.add("", "Gemm", gemm_kernel);
  t.add("", "Einsum", einsum_kernel);
  t.add("", "Det", det_kernel);
  t.add("", "MatMulInteger", matmul_integer_kernel);
  t.add("", "QLinearMatMul", qlinear_matmul_kernel);
}

}  // namespace hodu::interp
