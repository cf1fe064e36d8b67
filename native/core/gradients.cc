// gradients.cc — see gradients.h.
#include "core/gradients.h"

#include <atomic>
#include <cmath>

#include "core/errors.h"
#include "core/parallel.h"

namespace embshard {

namespace {

bool all_finite(const float* p, int64_t n) {
  std::atomic<bool> ok{true};
  parallel_for(n, 1 << 16, [&](int64_t lo, int64_t hi) {
    bool good = true;
    for (int64_t i = lo; i < hi; ++i) good &= std::isfinite(p[i]);
    if (!good) ok.store(false, std::memory_order_relaxed);
  });
  return ok.load();
}

}  // namespace

void check_gradient_sizes(const CollectionSpec& spec, const Layout& layout, const PreparedBatch& b, const GradientView& g) {
  const int64_t wantPooled = b.B * layout.pooledDim;
  if (wantPooled > 0 && (g.pooled == nullptr || static_cast<int64_t>(g.pooledSize) != wantPooled))
    fail("GRAD_SIZE_MISMATCH", "the pooled gradient has %lld values; expected batchSize × pooledDim = %lld × %lld = %lld",
         static_cast<long long>(g.pooled ? g.pooledSize : 0), static_cast<long long>(b.B), static_cast<long long>(layout.pooledDim),
         static_cast<long long>(wantPooled));
  const auto& feats = spec.features;
  if (g.seq.size() != feats.size() || g.seqSize.size() != feats.size())
    fail("GRAD_SIZE_MISMATCH", "expected %zu sequence-gradient slots (one per feature), got %zu", feats.size(), g.seq.size());
  for (uint32_t f = 0; f < feats.size(); ++f) {
    if (feats[f].pooling != Pooling::None) continue;
    const int64_t want = sequence_values(spec, b, f);
    if (want > 0 && (g.seq[f] == nullptr || static_cast<int64_t>(g.seqSize[f]) != want))
      fail("GRAD_SIZE_MISMATCH", "the gradient of sequence feature '%s' has %lld values; expected %lld (ids × dim)",
           feats[f].name.c_str(), static_cast<long long>(g.seq[f] ? g.seqSize[f] : 0), static_cast<long long>(want));
  }
}

bool gradients_finite(const CollectionSpec& spec, const Layout& layout, const PreparedBatch& b, const float* pooledGrad,
                      const float* const* seqGrad) {
  if (pooledGrad && !all_finite(pooledGrad, b.B * layout.pooledDim)) return false;
  for (size_t f = 0; f < spec.features.size(); ++f)
    if (spec.features[f].pooling == Pooling::None && seqGrad[f] &&
        !all_finite(seqGrad[f], sequence_values(spec, b, static_cast<uint32_t>(f))))
      return false;
  return true;
}

BackwardResult non_finite_outcome(const OptimizerConfig& opt) {
  if (opt.nonFinite == NonFinite::Skip) return BackwardResult{true, 0};
  fail("NON_FINITE_GRADIENT", "the gradients contain NaN or Inf; no table was changed");
}

}  // namespace embshard
