// Fused optimizer updates over one parameter's elements, step for step the
// arithmetic of PyTorch 1.13's single-tensor SGD and Adam (each tensor op of
// theirs rounds once here too, in the parameter's type). Internal.
#pragma once
#include <cmath>
#include <cstdint>

namespace hodu::eager::optim {

template <typename T>
struct SgdStep {
  T lr, momentum, dampening, weight_decay;
  bool nesterov, maximize, first;  // first: the buffer starts as the gradient
  void operator()(T* p, const T* g, T* buf, int64_t n) const {
    for (int64_t i = 0; i < n; ++i) {
      T d = maximize ? -g[i] : g[i];
      if (weight_decay != 0) d = d + weight_decay * p[i];
      if (momentum != 0) {
        T b = first ? d : buf[i] * momentum;
        if (!first) b = b + (T(1) - dampening) * d;
        buf[i] = b;
        d = nesterov ? d + momentum * b : b;
      }
      p[i] = p[i] + (-lr) * d;
    }
  }
};

template <typename T>
struct AdamStep {
  T beta1, one_minus_beta1, beta2, one_minus_beta2, bias_correction2_sqrt, eps, neg_step_size, weight_decay;
  T decay_factor;  // AdamW: 1 - lr * weight_decay (1: none)
  bool decoupled, amsgrad, maximize;
  void operator()(T* p, const T* g, T* m, T* v, T* vmax, int64_t n) const {
    for (int64_t i = 0; i < n; ++i) {
      T x = p[i];
      if (decoupled) x = x * decay_factor;
      T d = maximize ? -g[i] : g[i];
      if (!decoupled && weight_decay != 0) d = d + weight_decay * x;
      T mi = m[i] * beta1;
      mi = mi + one_minus_beta1 * d;
      T vi = v[i] * beta2;
      vi = vi + one_minus_beta2 * d * d;
      m[i] = mi;
      v[i] = vi;
      T s = vi;
      if (amsgrad) {
        s = vmax[i] > vi ? vmax[i] : vi;
        vmax[i] = s;
      }
      const T denom = std::sqrt(s) / bias_correction2_sqrt + eps;
      p[i] = x + neg_step_size * (mi / denom);
    }
  }
};

}  // namespace hodu::eager::optim
