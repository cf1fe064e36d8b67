// loss.h — sigmoid + binary cross-entropy from logits, numerically stable:
//   loss_b = max(z,0) − z·y + log1p(exp(−|z|)),  loss = mean_b loss_b,  dloss/dz_b = (σ(z_b) − y_b) / B;
// and the check of a step's inputs before any of it runs (labels in [0, 1], features finite).
#pragma once
#include <cstdint>

namespace embshard::dense {

// Mean loss over the batch (summed in double, in sample order). dz may be null.
double bce_with_logits(const float* z, const float* y, int64_t B, float* dz);

float sigmoid(float z);

// The index of the first of a[0, n) outside [lo, hi] (NaN is outside every range), or -1.
int64_t first_outside(const float* a, int64_t n, float lo, float hi);

}  // namespace embshard::dense
