// gradients.h — the checks every backward applies to its gradients, for both backends: their sizes
// against the prepared batch (before the engine is called), and what a non-finite gradient means under
// the optimizer's nonFinite policy (an error, or a skipped step). Each engine finds NaN / Inf itself: the
// CPU backward while it copies the gradients (cpu/backward.cc), the CUDA one on the device.
#pragma once
#include <cstddef>
#include <vector>

#include "core/batch.h"
#include "core/engine.h"
#include "core/types.h"

namespace embshard {

// The gradients of one backward call, as the caller received them: one pooled array and one slot per
// collection feature (null for pooled features).
struct GradientView {
  const float* pooled = nullptr;
  size_t pooledSize = 0;
  std::vector<const float*> seq;
  std::vector<size_t> seqSize;
};

// GRAD_SIZE_MISMATCH unless the pooled gradient holds batchSize × pooledDim values and each sequence
// feature's holds (its ids × dim) values, exactly, none expected included (a missing array: no values).
void check_gradient_sizes(const CollectionSpec& spec, const Layout& layout, const PreparedBatch& b, const GradientView& g);

// The outcome of a backward whose gradients hold NaN or Inf: a skipped step under nonFinite 'skip',
// otherwise NON_FINITE_GRADIENT. Called before anything changed.
BackwardResult non_finite_outcome(const OptimizerConfig& opt);

}  // namespace embshard
