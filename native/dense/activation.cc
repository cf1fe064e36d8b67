// activation.cc — ReLU forward/backward (see activation.h).
#include "dense/activation.h"

#include "core/parallel.h"

namespace embshard::dense {

void relu_forward(float* y, int64_t n) {
  parallel_for(n, 1 << 14, [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) y[i] = y[i] > 0.0f ? y[i] : 0.0f;
  });
}

void relu_backward(const float* y, const float* dy, float* dx, int64_t n) {
  parallel_for(n, 1 << 14, [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
  });
}

}  // namespace embshard::dense
