// optim.h — the per-element optimizer rules, written once for the CPU and CUDA backends.
// `g` is the row's summed gradient for the element (weight decay already folded in by the caller
// through apply_weight_decay). All math in fp32.
#pragma once
#include <cmath>
#include <cstdint>

#include "host_device.h"

namespace embshard {

EMB_HD float apply_weight_decay(float g, float w, float wd) { return wd != 0.0f ? g + wd * w : g; }

EMB_HD float sgd_step(float w, float g, float lr) { return w - lr * g; }

// adagrad: s += g^2; w -= lr * g / (sqrt(s) + eps)
EMB_HD float adagrad_step(float w, float g, float& s, float lr, float eps) {
  s += g * g;
  return w - lr * g / (sqrtf(s) + eps);
}

// rowwise adagrad: the caller updates s_row += mean(g^2) once per row, then every element uses it.
EMB_HD float rowwise_adagrad_step(float w, float g, float s_row, float lr, float eps) {
  return w - lr * g / (sqrtf(s_row) + eps);
}

// Adam's bias correction 1 - beta^t of step t (1-based), for the fp32 beta the optimizer holds, computed once
// per step on the host: in double, rounded once to fp32 (1 - beta^t taken in fp32 keeps few of its digits
// when beta is near 1: a relative error near 1e-4 for beta = 0.9999).
inline float adam_bias_correction(float beta, int64_t t) {
  return static_cast<float>(1.0 - std::pow(static_cast<double>(beta), static_cast<double>(t)));
}

// adam with bias correction; bc1 = 1 - beta1^t, bc2 = 1 - beta2^t (adam_bias_correction).
EMB_HD float adam_step(float w, float g, float& m, float& v, float lr, float beta1, float beta2, float eps,
                       float bc1, float bc2) {
  m = beta1 * m + (1.0f - beta1) * g;
  v = beta2 * v + (1.0f - beta2) * g * g;
  float mhat = m / bc1;
  float vhat = v / bc2;
  return w - lr * mhat / (sqrtf(vhat) + eps);
}

}  // namespace embshard
