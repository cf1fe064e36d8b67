// backward.cc — the CPU backward pass with the fused optimizer, FBGEMM-style:
//   1. reject non-finite gradients (or skip the step) before anything changes;
//   2. linearise every id to a global row key (table rowBase + row) and sort (key, position) pairs
//      with a stable radix sort, so each row's contributions stay in id order;
//   3. per unique row (in parallel): sum its contributions in that fixed order in fp32, then apply ONE
//      optimizer update per element with the shared host-device rules of core/optim.h.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "core/errors.h"
#include "core/parallel.h"
#include "core/profile.h"
#include "cpu/cpu_engine.h"
#include "cpu/radix_sort.h"
#include "cpu/update_row.h"

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

constexpr int64_t kRowAhead = 6;    // unique rows ahead for weight/state prefetch
constexpr int64_t kGradAhead = 16;  // contributions ahead for gradient-row prefetch

}  // namespace

BackwardResult CpuEngine::backward(const PreparedBatch& b, const float* pooledGrad, const float* const* seqGrad) {
  const int64_t B = b.B;
  const int32_t F = b.F;
  const int64_t N = b.numIds();
  const OptimizerConfig& opt = spec_.optimizer;

  PhaseTimer timer("cpu backward");
  // 1. finiteness
  bool finite = pooledGrad == nullptr || all_finite(pooledGrad, B * layout_.pooledDim);
  for (size_t f = 0; finite && f < spec_.features.size(); ++f)
    if (spec_.features[f].pooling == Pooling::None)
      finite = all_finite(seqGrad[f], sequence_values(spec_, b, static_cast<uint32_t>(f)));
  if (!finite) {
    if (opt.nonFinite == NonFinite::Skip) return BackwardResult{true, 0};
    fail("NON_FINITE_GRADIENT", "the gradients contain NaN or Inf; no table was changed");
  }
  if (N == 0) {
    ++step_;
    return BackwardResult{false, 0};
  }
  if (N > int64_t(0xffffffff)) fail("INVALID_SIZE", "a batch may hold at most 2^32 - 1 ids");

  // 2. keys + stable sort. Every id also records where its gradient row is and its scale, so the
  //    update pass below streams through sorted arrays instead of chasing bag indices.
  keys_.resize(N);
  vals_.resize(N);
  tmpKeys_.resize(N);
  tmpVals_.resize(N);
  gptr_.resize(N);
  gscale_.resize(N);
  sptr_.resize(N);
  sscale_.resize(N);
  const uint64_t* rows = b.rows.data();
  const int64_t* off = b.offsets.data();
  const int64_t pooledDim = layout_.pooledDim;
  parallel_for(static_cast<int64_t>(F) * B, 256, [&](int64_t lo, int64_t hi) {
    for (int64_t bag = lo; bag < hi; ++bag) {
      const int32_t slot = static_cast<int32_t>(bag / B);
      const uint32_t f = b.feature[slot];
      const FeatureSpec& fs = spec_.features[f];
      const TableSpec& ts = spec_.tables[fs.table];
      const uint64_t base = layout_.tables[fs.table].rowBase;
      const int64_t len = off[bag + 1] - off[bag];
      const int64_t slotBegin = b.slotBegin(slot);
      for (int64_t i = off[bag]; i < off[bag + 1]; ++i) {
        keys_[i] = base + rows[i];
        vals_[i] = static_cast<uint32_t>(i);
        if (fs.pooling == Pooling::None) {
          gptr_[i] = seqGrad[f] + (i - slotBegin) * ts.dim;
          gscale_[i] = 1.0f;
        } else {
          gptr_[i] = pooledGrad + (bag % B) * pooledDim + layout_.pooledCol[f];
          gscale_[i] = grad_scale(fs.pooling, b.weights, i, len);
        }
      }
    }
  });
  timer.mark("finite+keys");
  const bool inTmp = radix_sort_pairs(keys_.data(), vals_.data(), tmpKeys_.data(), tmpVals_.data(), N,
                                      key_bits(layout_.totalRows));
  const uint64_t* skeys = inTmp ? tmpKeys_.data() : keys_.data();
  const uint32_t* svals = inTmp ? tmpVals_.data() : vals_.data();
  timer.mark("sort");
  // contributions in sorted order (independent random reads: the memory system overlaps them)
  parallel_for(N, 1 << 14, [&](int64_t lo, int64_t hi) {
    for (int64_t j = lo; j < hi; ++j) {
      sptr_[j] = gptr_[svals[j]];
      sscale_[j] = gscale_[svals[j]];
    }
  });

  timer.mark("gather");
  // run starts (unique rows), in order
  runStart_.clear();
  runStart_.push_back(0);
  for (int64_t j = 1; j < N; ++j)
    if (skeys[j] != skeys[j - 1]) runStart_.push_back(j);
  const int64_t U = static_cast<int64_t>(runStart_.size());
  runStart_.push_back(N);

  // global row -> table: tables are contiguous in the key space
  std::vector<uint64_t> tableEnd(spec_.tables.size());
  for (size_t t = 0; t < spec_.tables.size(); ++t) tableEnd[t] = layout_.tables[t].rowBase + spec_.tables[t].rows;

  const int64_t t1 = step_ + 1;  // the step being applied (1-based)
  const float bc1 = 1.0f - std::pow(opt.beta1, static_cast<float>(t1));
  const float bc2 = 1.0f - std::pow(opt.beta2, static_cast<float>(t1));
  const cpu::UpdateContext uctx{&opt, spec_.seed, static_cast<uint64_t>(t1), bc1, bc2};
  std::vector<cpu::UpdateFn> update(spec_.tables.size());
  for (size_t t = 0; t < spec_.tables.size(); ++t)
    update[t] = cpu::pick_update(spec_.tables[t].dtype, opt.stochasticRounding);

  timer.mark("runs");
  uint32_t maxDim = 0;
  for (const TableSpec& t : spec_.tables) maxDim = std::max(maxDim, t.dim);

  // 3. one exact update per unique row
  parallel_for(U, 64, [&](int64_t lo, int64_t hi) {
    std::vector<float> accBuf(maxDim);  // per chunk (a thread_local would cost a TLS lookup per row in a .so)
    float* __restrict acc = accBuf.data();
    size_t tbl = static_cast<size_t>(std::upper_bound(tableEnd.begin(), tableEnd.end(), skeys[runStart_[lo]]) - tableEnd.begin());
    for (int64_t u = lo; u < hi; ++u) {
      const uint64_t key = skeys[runStart_[u]];
      while (key >= tableEnd[tbl]) ++tbl;
      const TableSpec& ts = spec_.tables[tbl];
      const TableLayout& tl = layout_.tables[tbl];
      const uint32_t dim = ts.dim;
      std::fill(acc, acc + dim, 0.0f);
      // prefetch the weights and state of a row a few unique rows ahead
      if (u + kRowAhead < U) {
        const uint64_t k2 = skeys[runStart_[u + kRowAhead]];
        size_t t2 = tbl;
        while (k2 >= tableEnd[t2]) ++t2;
        const TableLayout& l2 = layout_.tables[t2];
        const uint8_t* w2 = weights_.data() + l2.weightOffset + (k2 - l2.rowBase) * l2.rowBytes;
        for (uint64_t o = 0; o < l2.rowBytes; o += 64) __builtin_prefetch(w2 + o, 1, 0);
        const float* s2 = reinterpret_cast<const float*>(state_.data()) + l2.stateOffset + (k2 - l2.rowBase) * l2.statePerRow;
        for (uint64_t o = 0; o < l2.statePerRow * 4; o += 64) __builtin_prefetch(reinterpret_cast<const uint8_t*>(s2) + o, 1, 0);
      }
      for (int64_t j = runStart_[u]; j < runStart_[u + 1]; ++j) {
        if (j + kGradAhead < N) {
          const float* p = sptr_[j + kGradAhead];
          for (uint32_t o = 0; o < dim; o += 16) __builtin_prefetch(p + o, 0, 0);
        }
        const float* __restrict g = sptr_[j];
        const float scale = sscale_[j];
        for (uint32_t c = 0; c < dim; ++c) acc[c] += g[c] * scale;
      }
      const uint64_t row = key - tl.rowBase;
      uint8_t* w = weights_.data() + tl.weightOffset + row * tl.rowBytes;
      float* st = reinterpret_cast<float*>(state_.data()) + tl.stateOffset + row * tl.statePerRow;
      update[tbl](uctx, w, st, acc, dim, key);
    }
  });
  timer.mark("update");
  ++step_;
  return BackwardResult{false, U};
}

}  // namespace embshard
