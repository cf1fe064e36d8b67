// loss.cc — stable sigmoid + binary cross-entropy (see loss.h).
#include "dense/loss.h"

#include <algorithm>
#include <cmath>

namespace embshard::dense {

float sigmoid(float z) {
  if (z >= 0.0f) return 1.0f / (1.0f + std::exp(-z));
  float e = std::exp(z);
  return e / (1.0f + e);
}

double bce_with_logits(const float* z, const float* y, int64_t B, float* dz) {
  double sum = 0.0;
  for (int64_t b = 0; b < B; ++b) {
    double zz = z[b], yy = y[b];
    sum += std::max(zz, 0.0) - zz * yy + std::log1p(std::exp(-std::fabs(zz)));
    if (dz) dz[b] = (sigmoid(z[b]) - y[b]) / static_cast<float>(B);
  }
  return B > 0 ? sum / static_cast<double>(B) : 0.0;
}

}  // namespace embshard::dense
