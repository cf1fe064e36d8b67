// activation.cc — ReLU forward/backward (see activation.h).
#include "dense/activation.h"

#include "core/parallel.h"
#include "cpu/isa.h"

namespace embshard::dense {

namespace {
// The loops, compiled per ISA (cpu/isa.h): selects only, the same bits on every copy.
EMBSHARD_CPU_KERNEL void relu_range(float* y, int64_t a, int64_t b) {
  for (int64_t i = a; i < b; ++i) y[i] = y[i] > 0.0f ? y[i] : 0.0f;
}
EMBSHARD_CPU_KERNEL void relu_backward_range(const float* y, const float* dy, float* dx, int64_t a, int64_t b) {
  for (int64_t i = a; i < b; ++i) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}
}  // namespace

void relu_forward(float* y, int64_t n) {
  parallel_for(n, 1 << 14, [&](int64_t a, int64_t b) { relu_range(y, a, b); });
}

void relu_backward(const float* y, const float* dy, float* dx, int64_t n) {
  parallel_for(n, 1 << 14, [&](int64_t a, int64_t b) { relu_backward_range(y, dy, dx, a, b); });
}

}  // namespace embshard::dense
