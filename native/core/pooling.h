// pooling.h — the pooling math shared by the CPU and CUDA engines and the sharded runtime's gradient
// reduction (the definition the tests' oracle follows):
//   forward  pooled[b] = (sum over the bag's ids i, in order, of w_i * row_i) / (mean ? len : 1)
//   backward row_i receives grad[b] * grad_scale(i)
// with w_i = 1 when the batch has no weights. An empty bag pools to zeros.
#pragma once
#include <cstdint>

#include "core/host_device.h"
#include "core/types.h"

namespace embshard {

// A mean bag's value from its sum (the bag holds len > 0 ids).
EMB_HD float bag_mean(float sum, int64_t len) { return sum / static_cast<float>(len); }

EMB_HD float grad_scale(Pooling p, const float* weights, int64_t i, int64_t len) {
  float w = weights ? weights[i] : 1.0f;
  return p == Pooling::Mean ? w / static_cast<float>(len) : w;
}

}  // namespace embshard
