// loss.h — sigmoid + binary cross-entropy from logits, numerically stable:
//   loss_b = max(z,0) − z·y + log1p(exp(−|z|)),  loss = mean_b loss_b,  dloss/dz_b = (σ(z_b) − y_b) / B.
#pragma once
#include <cstdint>

namespace embshard::dense {

// Mean loss over the batch (summed in double, in sample order). dz may be null.
double bce_with_logits(const float* z, const float* y, int64_t B, float* dz);

float sigmoid(float z);

}  // namespace embshard::dense
