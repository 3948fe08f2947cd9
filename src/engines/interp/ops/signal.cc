// Signal processing: DFT (opset 20), STFT, Hann/Hamming/Blackman windows,
// MelWeightMatrix. Transforms are computed in double with an exact twiddle
// table (index j·k mod n), then cast to the input dtype.
#include <cmath>
#include <complex>
#include <vector>

#include "engines/interp/ops/op_utils.h"

namespace hodu::interp {
namespace {

using cd = std::complex<double>;
constexpr double kPi = 3.14159265358979323846;

// Twiddles w[k] = exp(sign·2πi·k/n).
std::vector<cd> twiddles(int64_t n, bool inverse) {
  std::vector<cd> w(static_cast<size_t>(n));
  double sign = inverse ? 1.0 : -1.0;
  for (int64_t k = 0; k < n; ++k) {
    double a = sign * 2.0 * kPi * static_cast<double>(k) / static_cast<double>(n);
    w[k] = cd(std::cos(a), std::sin(a));
  }
  return w;
}

// out[k] = Σ_j in[j] · w[(j·k) mod n], k < nout. in has n entries.
void dft1d(const cd* in, int64_t n, const std::vector<cd>& w, cd* out, int64_t nout) {
  for (int64_t k = 0; k < nout; ++k) {
    cd acc = 0;
    int64_t idx = 0;
    for (int64_t j = 0; j < n; ++j) {
      acc += in[j] * w[idx];
      idx += k;
      if (idx >= n) idx %= n;
    }
    out[k] = acc;
  }
}

int64_t scalar_int(const KernelContext& ctx, size_t i, const char* what) {
  const Tensor& t = ctx.input(i);
  if (t.numel() != 1) ctx.fail(ErrorCode::InvalidArgument, "{} must be a scalar, got {}", what, t.shape_string());
  return t.get_int64(0);
}

void dft_kernel(KernelContext& ctx) {
  const Tensor& X0 = ctx.input(0);
  const int64_t r = X0.rank();
  if (r < 2 || (X0.dim(-1) != 1 && X0.dim(-1) != 2))
    ctx.fail(ErrorCode::InvalidArgument, "input must be [..., signal, 1 or 2], got {}", X0.shape_string());
  bool inverse = ctx.node.get_int("inverse", 0) != 0;
  bool onesided = ctx.node.get_int("onesided", 0) != 0;
  int64_t axis = ctx.has_input(2) ? scalar_int(ctx, 2, "axis") : ctx.node.get_int("axis", -2);
  if (axis < -r || axis >= r) ctx.fail(ErrorCode::InvalidArgument, "axis {} out of range for rank {}", axis, r);
  if (axis < 0) axis += r;
  if (axis == r - 1) ctx.fail(ErrorCode::InvalidArgument, "axis cannot be the last (complex) dimension");
  int64_t len = X0.dim(axis);
  // inverse + onesided is a complex-to-real inverse (numpy's irfft): the input holds
  // the first n/2+1 bins of a Hermitian spectrum and the output is real ([..., n, 1]).
  const bool c2r = inverse && onesided;
  int64_t n = ctx.has_input(1) ? scalar_int(ctx, 1, "dft_length") : (c2r ? 2 * (len - 1) : len);
  if (n <= 0) ctx.fail(ErrorCode::InvalidArgument, "dft_length must be positive, got {}", n);
  int64_t nout = c2r ? n : onesided ? n / 2 + 1 : n;
  const int64_t oc = c2r ? 1 : 2;
  const bool cplx = X0.dim(-1) == 2;
  auto xs = X0.to_doubles();
  std::vector<int64_t> yshape(X0.shape());
  yshape[axis] = nout;
  yshape[r - 1] = oc;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= X0.dim(d);
  for (int64_t d = axis + 1; d < r - 1; ++d) inner *= X0.dim(d);
  const int64_t ci = X0.dim(-1);
  std::vector<double> ys(static_cast<size_t>(outer * nout * inner * oc));
  auto w = twiddles(n, inverse);
  parallel_for(ctx.threads, outer * inner, 1, [&](int64_t q0, int64_t q1) {
    std::vector<cd> in(static_cast<size_t>(n)), out(static_cast<size_t>(nout));
    for (int64_t q = q0; q < q1; ++q) {
      int64_t o = q / inner, i = q % inner;
      auto at = [&](int64_t j) -> cd {
        if (j >= len) return 0;
        int64_t base = ((o * len + j) * inner + i) * ci;
        return cd(xs[base], cplx ? xs[base + 1] : 0.0);
      };
      if (c2r) {
        int64_t half = n / 2;
        for (int64_t k = 0; k <= half; ++k) in[k] = at(k);
        in[0] = cd(in[0].real(), 0.0);
        if (n % 2 == 0) in[half] = cd(in[half].real(), 0.0);
        for (int64_t k = half + 1; k < n; ++k) in[k] = std::conj(in[n - k]);
      } else {
        for (int64_t j = 0; j < n; ++j) in[j] = at(j);
      }
      dft1d(in.data(), n, w, out.data(), nout);
      for (int64_t k = 0; k < nout; ++k) {
        cd v = inverse ? out[k] / static_cast<double>(n) : out[k];
        int64_t base = ((o * nout + k) * inner + i) * oc;
        ys[base] = v.real();
        if (oc == 2) ys[base + 1] = v.imag();
      }
    }
  });
  Tensor Y = Tensor::empty(X0.dtype(), yshape);
  for (size_t k = 0; k < ys.size(); ++k) Y.set_double(static_cast<int64_t>(k), ys[k]);
  ctx.set_output(0, Y);
}

void stft_kernel(KernelContext& ctx) {
  const Tensor& X0 = ctx.input(0);
  if (X0.rank() != 3 || (X0.dim(2) != 1 && X0.dim(2) != 2))
    ctx.fail(ErrorCode::InvalidArgument, "signal must be [batch, length, 1 or 2], got {}", X0.shape_string());
  bool onesided = ctx.node.get_int("onesided", 1) != 0;
  int64_t step = scalar_int(ctx, 1, "frame_step");
  std::vector<double> window;
  if (ctx.has_input(2)) {
    const Tensor& wt = ctx.input(2);
    if (wt.rank() != 1) ctx.fail(ErrorCode::InvalidArgument, "window must be 1-D, got {}", wt.shape_string());
    window = wt.to_doubles();
  }
  int64_t flen = ctx.has_input(3) ? scalar_int(ctx, 3, "frame_length") : static_cast<int64_t>(window.size());
  if (flen <= 0) ctx.fail(ErrorCode::InvalidArgument, "frame_length (or a window) is required and must be positive");
  if (!window.empty() && static_cast<int64_t>(window.size()) != flen)
    ctx.fail(ErrorCode::InvalidArgument, "window length {} differs from frame_length {}", window.size(), flen);
  if (step <= 0) ctx.fail(ErrorCode::InvalidArgument, "frame_step must be positive");
  int64_t B = X0.dim(0), L = X0.dim(1), ci = X0.dim(2);
  if (L < flen) ctx.fail(ErrorCode::InvalidArgument, "signal length {} is shorter than frame_length {}", L, flen);
  bool cplx = ci == 2;
  if (cplx && onesided) ctx.fail(ErrorCode::InvalidArgument, "onesided output needs a real signal");
  int64_t frames = (L - flen) / step + 1, nout = onesided ? flen / 2 + 1 : flen;
  auto xs = X0.to_doubles();
  std::vector<double> ys(static_cast<size_t>(B * frames * nout * 2));
  auto w = twiddles(flen, false);
  parallel_for(ctx.threads, B * frames, 1, [&](int64_t q0, int64_t q1) {
    std::vector<cd> in(static_cast<size_t>(flen)), out(static_cast<size_t>(nout));
    for (int64_t q = q0; q < q1; ++q) {
      int64_t b = q / frames, f = q % frames;
      for (int64_t j = 0; j < flen; ++j) {
        int64_t base = (b * L + f * step + j) * ci;
        double win = window.empty() ? 1.0 : window[j];
        in[j] = cd(xs[base], cplx ? xs[base + 1] : 0.0) * win;
      }
      dft1d(in.data(), flen, w, out.data(), nout);
      for (int64_t k = 0; k < nout; ++k) {
        ys[(q * nout + k) * 2] = out[k].real();
        ys[(q * nout + k) * 2 + 1] = out[k].imag();
      }
    }
  });
  Tensor Y = Tensor::empty(X0.dtype(), {B, frames, nout, 2});
  for (size_t k = 0; k < ys.size(); ++k) Y.set_double(static_cast<int64_t>(k), ys[k]);
  ctx.set_output(0, Y);
}

DType output_dtype(const KernelContext& ctx, int64_t def) {
  int64_t code = ctx.node.get_int("output_datatype", def);
  auto dt = dtype_from_onnx(static_cast<int>(code));
  if (!dt || *dt == DType::String || *dt == DType::Bool || dtype_is_complex(*dt))
    ctx.fail(ErrorCode::InvalidArgument, "output_datatype {} is not a numeric tensor type", code);
  return *dt;
}

enum class Win { Hann, Hamming, Blackman };

void window_kernel(KernelContext& ctx, Win kind) {
  int64_t size = scalar_int(ctx, 0, "size");
  if (size < 0) ctx.fail(ErrorCode::InvalidArgument, "size must be non-negative, got {}", size);
  bool periodic = ctx.node.get_int("periodic", 1) != 0;
  DType dt = output_dtype(ctx, 1);
  double N = static_cast<double>(periodic ? size : size - 1);
  Tensor Y = Tensor::empty(dt, {size});
  for (int64_t i = 0; i < size; ++i) {
    double n = static_cast<double>(i), v;
    if (kind == Win::Hann) {
      double s = std::sin(n * kPi / N);
      v = s * s;
    } else if (kind == Win::Hamming) {
      double a = 25.0 / 46.0;
      v = a - std::cos(n * kPi * 2 / N) * (1 - a);
    } else {
      v = 0.42 - std::cos(n * kPi * 2 / N) * 0.5 + std::cos(n * kPi * 4 / N) * 0.08;
    }
    if (dtype_is_integer(dt)) v = std::trunc(v);
    Y.set_double(i, v);
  }
  ctx.set_output(0, Y);
}

void hann_kernel(KernelContext& ctx) { window_kernel(ctx, Win::Hann); }
void hamming_kernel(KernelContext& ctx) { window_kernel(ctx, Win::Hamming); }
void blackman_kernel(KernelContext& ctx) { window_kernel(ctx, Win::Blackman); }

void mel_weight_matrix_kernel(KernelContext& ctx) {
  int64_t bins = scalar_int(ctx, 0, "num_mel_bins");
  int64_t dft_len = scalar_int(ctx, 1, "dft_length");
  int64_t rate = scalar_int(ctx, 2, "sample_rate");
  if (ctx.input(3).numel() != 1 || ctx.input(4).numel() != 1)
    ctx.fail(ErrorCode::InvalidArgument, "lower/upper_edge_hertz must be scalars");
  if (bins <= 0 || dft_len <= 0 || rate <= 0)
    ctx.fail(ErrorCode::InvalidArgument, "num_mel_bins, dft_length and sample_rate must be positive");
  // Like the reference: mel edges in f32, the rest in f64.
  float lo = static_cast<float>(ctx.input(3).get_double(0)), hi = static_cast<float>(ctx.input(4).get_double(0));
  float lo_mel = 2595.0f * std::log10(1.0f + lo / 700.0f);
  float hi_mel = 2595.0f * std::log10(1.0f + hi / 700.0f);
  float step = (hi_mel - lo_mel) / static_cast<float>(bins + 2);
  int64_t spec = dft_len / 2 + 1;
  std::vector<int64_t> fb(static_cast<size_t>(bins + 2));
  for (int64_t i = 0; i < bins + 2; ++i) {
    double f = static_cast<double>(i) * static_cast<double>(step) + static_cast<double>(lo_mel);
    f = 700.0 * (std::pow(10.0, f / 2595.0) - 1.0);
    f = std::floor(static_cast<double>(dft_len + 1) * f / static_cast<double>(rate));
    fb[i] = static_cast<int64_t>(f);
  }
  std::vector<double> out(static_cast<size_t>(spec * bins), 0.0);
  auto set = [&](int64_t j, int64_t i, double v) {
    if (j < 0 || j >= spec)
      ctx.fail(ErrorCode::InvalidArgument, "mel bin {} maps to frequency bin {} outside [0, {})", i, j, spec);
    out[j * bins + i] = v;
  };
  for (int64_t i = 0; i < bins; ++i) {
    int64_t l = fb[i], c = fb[i + 1], h = fb[i + 2];
    if (c - l == 0) set(c, i, 1.0);
    else
      for (int64_t j = l; j <= c; ++j) set(j, i, static_cast<double>(j - l) / static_cast<double>(c - l));
    if (h - c > 0)
      for (int64_t j = c; j < h; ++j) set(j, i, static_cast<double>(h - j) / static_cast<double>(h - c));
  }
  DType dt = output_dtype(ctx, 1);
  Tensor Y = Tensor::empty(dt, {spec, bins});
  for (size_t k = 0; k < out.size(); ++k)
    Y.set_double(static_cast<int64_t>(k), dtype_is_integer(dt) ? std::trunc(out[k]) : out[k]);
  ctx.set_output(0, Y);
}

}  // namespace

void register_signal_ops(OpTable& t) {
  t.add("", "DFT", dft_kernel);
  t.add("", "STFT", stft_kernel);
  t.add("", "HannWindow", hann_kernel);
  t.add("", "HammingWindow", hamming_kernel);
  t.add("", "BlackmanWindow", blackman_kernel);
  t.add("", "MelWeightMatrix", mel_weight_matrix_kernel);
}

}  // namespace hodu::interp
