// gradients.cc — see gradients.h.
#include "core/gradients.h"

#include "core/errors.h"

namespace embshard {

namespace {

// A missing gradient (null) stands for zero values; one given must hold exactly the values expected.
bool size_ok(const float* g, size_t n, int64_t want) { return g ? static_cast<int64_t>(n) == want : want == 0; }

}  // namespace

void check_gradient_sizes(const CollectionSpec& spec, const Layout& layout, const PreparedBatch& b, const GradientView& g) {
  const int64_t wantPooled = b.B * layout.pooledDim;
  if (!size_ok(g.pooled, g.pooledSize, wantPooled))
    fail("GRAD_SIZE_MISMATCH", "the pooled gradient has %lld values; expected batchSize × pooledDim = %lld × %lld = %lld",
         static_cast<long long>(g.pooled ? g.pooledSize : 0), static_cast<long long>(b.B), static_cast<long long>(layout.pooledDim),
         static_cast<long long>(wantPooled));
  const auto& feats = spec.features;
  if (g.seq.size() != feats.size() || g.seqSize.size() != feats.size())
    fail("GRAD_SIZE_MISMATCH", "expected %zu sequence-gradient slots (one per feature), got %zu", feats.size(), g.seq.size());
  for (uint32_t f = 0; f < feats.size(); ++f) {
    if (feats[f].pooling != Pooling::None) continue;
    const int64_t want = sequence_values(spec, b, f);
    if (!size_ok(g.seq[f], g.seqSize[f], want))
      fail("GRAD_SIZE_MISMATCH", "the gradient of sequence feature '%s' has %lld values; expected %lld (ids × dim)",
           feats[f].name.c_str(), static_cast<long long>(g.seq[f] ? g.seqSize[f] : 0), static_cast<long long>(want));
  }
}

BackwardResult non_finite_outcome(const OptimizerConfig& opt) {
  if (opt.nonFinite == NonFinite::Skip) return BackwardResult{true, 0};
  fail("NON_FINITE_GRADIENT", "the gradients contain NaN or Inf; no table was changed");
}

}  // namespace embshard
