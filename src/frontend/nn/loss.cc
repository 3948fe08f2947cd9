// Losses, written as PyTorch 1.13 computes them (aten/src/ATen/native/Loss*.cpp)
// so that values and gradients agree to rounding.
#include "core/error.h"
#include "core/shape.h"
#include "frontend/capture/tracer.h"
#include "hodu/autograd.h"
#include "hodu/nn.h"

namespace hodu::eager::nn {
namespace {

void check_reduction(const std::string& r, const char* loss) {
  HODU_CHECK(r == "mean" || r == "sum" || r == "none", ErrorCode::InvalidArgument,
             "{}: reduction '{}' (mean, sum or none)", loss, r);
}

Tensor reduce(const Tensor& loss, const std::string& r) {
  if (r == "mean") return loss.mean();
  if (r == "sum") return loss.sum();
  return loss;
}

void check_float(const Tensor& t, const char* what, const char* loss) {
  HODU_CHECK(t.defined() && t.is_floating_point(), ErrorCode::InvalidArgument, "{}: {} must be a floating-point tensor, not {}",
             loss, what, t.type_string());
}

}  // namespace

Tensor nll_loss(const Tensor& logp, const Tensor& target, const std::string& reduction, int64_t ignore_index,
                const Tensor& weight) {
  const char* op = "nll_loss";
  check_reduction(reduction, op);
  check_float(logp, "the input", op);
  HODU_CHECK(target.defined() && !target.is_floating_point() && target.dtype() != kBool, ErrorCode::InvalidArgument,
             "{}: the target must hold class indices (integers), not {}", op, target.type_string());
  HODU_CHECK(logp.dim() >= 2 ? target.dim() == logp.dim() - 1 : target.dim() == 0, ErrorCode::InvalidArgument,
             "{}: input {} and target {} (input [N, C, ...], target [N, ...])", op, logp.type_string(),
             target.type_string());
  const int64_t C = logp.dim() >= 2 ? logp.size(1) : logp.size(0);
  const int64_t cdim = logp.dim() >= 2 ? 1 : 0;
  if (weight.defined())
    HODU_CHECK(weight.dim() == 1 && weight.size(0) == C, ErrorCode::InvalidArgument, "{}: weight {} for {} classes", op,
               weight.type_string(), C);
  Tensor loss;
  {
    // Recorded by a capture as one ONNX NegativeLogLikelihoodLoss (below).
    trace::Pause pause;
    Tensor ignored = target.eq(static_cast<double>(ignore_index));
    Tensor t = where(ignored, zeros({}, target.dtype()), target).to(kInt64);
    if (t.numel() > 0) {
      const int64_t lo = t.min().item<int64_t>(), hi = t.max().item<int64_t>();
      HODU_CHECK(lo >= 0 && hi < C, ErrorCode::InvalidArgument,
                 "{}: target {} is out of range for {} classes (targets run from 0 to {}, or are ignore_index {})", op,
                 lo < 0 ? lo : hi, C, C - 1, ignore_index);
    }
    Tensor picked = logp.gather(cdim, t.unsqueeze(cdim)).squeeze(cdim);
    Tensor keep = ignored.logical_not().to(logp.dtype());
    Tensor w = weight.defined() ? weight.to(logp.dtype()).index_select(0, t.flatten()).reshape(t.shape()) * keep : keep;
    loss = -picked * w;
    if (reduction == "sum") loss = loss.sum();
    else if (reduction == "mean") loss = loss.sum() / w.sum();
  }
  if (trace::active())
    trace::record("NegativeLogLikelihoodLoss", {logp, target.to(kInt64), weight.defined() ? weight.to(logp.dtype()) : Tensor()},
                  {loss}, {Attribute::make_string("reduction", reduction), Attribute::make_int("ignore_index", ignore_index)});
  return loss;
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const std::string& reduction, double ls,
                     int64_t ignore_index, const Tensor& weight) {
  const char* op = "cross_entropy";
  check_reduction(reduction, op);
  check_float(logits, "the logits", op);
  HODU_CHECK(ls >= 0.0 && ls <= 1.0, ErrorCode::InvalidArgument, "{}: label_smoothing {} is not in [0, 1]", op, ls);
  HODU_CHECK(target.defined(), ErrorCode::InvalidArgument, "{}: the target is undefined", op);
  const int64_t cdim = logits.dim() >= 2 ? 1 : 0;
  const int64_t C = logits.size(cdim);
  Tensor logp = log_softmax(logits, cdim);
  if (target.is_floating_point()) {
    // Class probabilities.
    HODU_CHECK(target.shape() == logits.shape(), ErrorCode::InvalidArgument,
               "{}: probability targets {} must have the logits' shape {}", op, target.type_string(),
               logits.type_string());
    Tensor tp = ls > 0 ? target * (1.0 - ls) + ls / static_cast<double>(C) : target;
    Tensor per = logp * tp.to(logp.dtype());
    if (weight.defined()) {
      Dims ws(logits.dim(), 1);
      ws[cdim] = C;
      per = per * weight.to(logp.dtype()).reshape(ws);
    }
    Tensor loss = -per.sum({cdim});
    if (reduction == "mean") return loss.sum() / static_cast<double>(logits.dim() >= 2 ? logits.numel() / C : 1);
    return reduce(loss, reduction);
  }
  Tensor nll = nll_loss(logp, target, reduction, ignore_index, weight);
  if (ls == 0.0) return nll;
  // PyTorch 1.13's cross_entropy_loss_label_smoothing.
  Tensor ignored = target.eq(static_cast<double>(ignore_index));
  Tensor smooth;
  if (weight.defined()) {
    Dims ws(logits.dim(), 1);
    ws[cdim] = C;
    smooth = -(logp * weight.to(logp.dtype()).reshape(ws)).sum({cdim});
  } else {
    smooth = -logp.sum({cdim});
  }
  smooth = smooth.masked_fill(ignored, 0.0);
  Tensor ret;
  if (reduction == "mean") {
    if (weight.defined()) {
      Tensor t = where(ignored, zeros({}, target.dtype()), target).to(kInt64).flatten();
      Tensor keep = ignored.logical_not().flatten().to(logp.dtype());
      ret = smooth.sum() / (weight.to(logp.dtype()).index_select(0, t) * keep).sum();
    } else {
      ret = smooth.mean();
    }
  } else {
    ret = reduce(smooth, reduction);
  }
  return nll * (1.0 - ls) + ret * (ls / static_cast<double>(C));
}

Tensor mse_loss(const Tensor& input, const Tensor& target, const std::string& reduction) {
  check_reduction(reduction, "mse_loss");
  check_float(input, "the input", "mse_loss");
  Tensor d = input - target;
  return reduce(d * d, reduction);
}

Tensor l1_loss(const Tensor& input, const Tensor& target, const std::string& reduction) {
  check_reduction(reduction, "l1_loss");
  check_float(input, "the input", "l1_loss");
  return reduce((input - target).abs(), reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& x, const Tensor& target, const std::string& reduction,
                                        const Tensor& pos_weight) {
  const char* op = "binary_cross_entropy_with_logits";
  check_reduction(reduction, op);
  check_float(x, "the logits", op);
  HODU_CHECK(target.defined() && target.shape() == x.shape(), ErrorCode::InvalidArgument,
             "{}: target {} must have the logits' shape {}", op, target.type_string(), x.type_string());
  Tensor t = target.to(x.dtype());
  Tensor max_val = (-x).clamp_min(0.0);
  Tensor loss;
  if (pos_weight.defined()) {
    Tensor log_weight = (pos_weight.to(x.dtype()) - 1.0) * t + 1.0;
    loss = (1.0 - t) * x + log_weight * (((-max_val).exp() + (-x - max_val).exp()).log() + max_val);
  } else {
    loss = (1.0 - t) * x + max_val + ((-max_val).exp() + (-x - max_val).exp()).log();
  }
  return reduce(loss, reduction);
}

}  // namespace hodu::eager::nn
