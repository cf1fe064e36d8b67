// activation.h — ReLU, applied in place on a layer's output, and its backward pass through the mask
// of that output (y > 0), so no separate pre-activation copy is kept.
#pragma once
#include <cstdint>

namespace embshard::dense {

void relu_forward(float* y, int64_t n);
// dx = dy where y > 0, else 0 (in place on dy allowed: dx may equal dy).
void relu_backward(const float* y, const float* dy, float* dx, int64_t n);

}  // namespace embshard::dense
