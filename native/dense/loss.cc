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

int64_t first_outside(const float* a, int64_t n, float lo, float hi) {
  // an OR over each chunk (the loop vectorises), then the chunk that has one is searched
  constexpr int64_t kChunk = 4096;
  for (int64_t c = 0; c < n; c += kChunk) {
    const int64_t end = std::min(n, c + kChunk);
    int bad = 0;
    for (int64_t i = c; i < end; ++i) bad |= !(a[i] >= lo && a[i] <= hi);
    if (!bad) continue;
    for (int64_t i = c; i < end; ++i)
      if (!(a[i] >= lo && a[i] <= hi)) return i;
  }
  return -1;
}

}  // namespace embshard::dense
