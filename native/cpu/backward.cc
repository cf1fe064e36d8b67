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
#include "core/init.h"
#include "core/optim.h"
#include "core/parallel.h"
#include "cpu/cpu_engine.h"
#include "cpu/radix_sort.h"

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

int bits_for(uint64_t n) {
  int b = 0;
  while (b < 64 && (uint64_t(1) << b) < n) ++b;
  return b;
}

}  // namespace

BackwardResult CpuEngine::backward(const PreparedBatch& b, const float* pooledGrad, const float* const* seqGrad) {
  const int64_t B = b.B;
  const int32_t F = b.F;
  const int64_t N = b.numIds();
  const OptimizerConfig& opt = spec_.optimizer;

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

  // 2. keys + stable sort
  keys_.resize(N);
  vals_.resize(N);
  tmpKeys_.resize(N);
  tmpVals_.resize(N);
  bagOf_.resize(N);
  const uint64_t* rows = b.rows.data();
  const int64_t* off = b.offsets.data();
  parallel_for(static_cast<int64_t>(F) * B, 256, [&](int64_t lo, int64_t hi) {
    for (int64_t bag = lo; bag < hi; ++bag) {
      const uint64_t base = layout_.tables[spec_.features[b.feature[bag / B]].table].rowBase;
      for (int64_t i = off[bag]; i < off[bag + 1]; ++i) {
        keys_[i] = base + rows[i];
        vals_[i] = static_cast<uint32_t>(i);
        bagOf_[i] = static_cast<int32_t>(bag);
      }
    }
  });
  const bool inTmp = radix_sort_pairs(keys_.data(), vals_.data(), tmpKeys_.data(), tmpVals_.data(), N,
                                      bits_for(layout_.totalRows));
  const uint64_t* skeys = inTmp ? tmpKeys_.data() : keys_.data();
  const uint32_t* svals = inTmp ? tmpVals_.data() : vals_.data();

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
  const int64_t pooledDim = layout_.pooledDim;

  // 3. one exact update per unique row
  parallel_for(U, 64, [&](int64_t lo, int64_t hi) {
    thread_local std::vector<float> acc;
    size_t tbl = static_cast<size_t>(std::upper_bound(tableEnd.begin(), tableEnd.end(), skeys[runStart_[lo]]) - tableEnd.begin());
    for (int64_t u = lo; u < hi; ++u) {
      const uint64_t key = skeys[runStart_[u]];
      while (key >= tableEnd[tbl]) ++tbl;
      const TableSpec& ts = spec_.tables[tbl];
      const TableLayout& tl = layout_.tables[tbl];
      const uint32_t dim = ts.dim;
      acc.assign(dim, 0.0f);
      for (int64_t j = runStart_[u]; j < runStart_[u + 1]; ++j) {
        const uint32_t i = svals[j];
        const int32_t bag = bagOf_[i];
        const uint32_t f = b.feature[bag / B];
        const FeatureSpec& fs = spec_.features[f];
        if (fs.pooling == Pooling::None) {
          const float* g = seqGrad[f] + (static_cast<int64_t>(i) - b.slotBegin(bag / B)) * dim;
          for (uint32_t c = 0; c < dim; ++c) acc[c] += g[c];
        } else {
          const float scale = grad_scale(fs.pooling, b.weights, i, off[bag + 1] - off[bag]);
          const float* g = pooledGrad + (bag % B) * pooledDim + layout_.pooledCol[f];
          for (uint32_t c = 0; c < dim; ++c) acc[c] += g[c] * scale;
        }
      }
      const uint64_t row = key - tl.rowBase;
      uint8_t* w = weights_.data() + tl.weightOffset + row * tl.rowBytes;
      float* st = reinterpret_cast<float*>(state_.data()) + tl.stateOffset + row * tl.statePerRow;
      const bool sr = opt.stochasticRounding && ts.dtype != DType::F32;
      auto store = [&](uint32_t c, float v) {
        if (sr) store_value_sr(ts.dtype, w, c, v, rounding_bits(spec_.seed, static_cast<uint64_t>(t1), key, c));
        else store_value(ts.dtype, w, c, v);
      };
      switch (opt.type) {
        case OptType::SGD:
          for (uint32_t c = 0; c < dim; ++c) {
            float wc = load_value(ts.dtype, w, c);
            store(c, sgd_step(wc, apply_weight_decay(acc[c], wc, opt.weightDecay), opt.lr));
          }
          break;
        case OptType::Adagrad:
          for (uint32_t c = 0; c < dim; ++c) {
            float wc = load_value(ts.dtype, w, c);
            store(c, adagrad_step(wc, apply_weight_decay(acc[c], wc, opt.weightDecay), st[c], opt.lr, opt.eps));
          }
          break;
        case OptType::RowwiseAdagrad: {
          float sq = 0.0f;
          for (uint32_t c = 0; c < dim; ++c) {
            float g = apply_weight_decay(acc[c], load_value(ts.dtype, w, c), opt.weightDecay);
            acc[c] = g;
            sq += g * g;
          }
          st[0] += sq / static_cast<float>(dim);
          for (uint32_t c = 0; c < dim; ++c)
            store(c, rowwise_adagrad_step(load_value(ts.dtype, w, c), acc[c], st[0], opt.lr, opt.eps));
          break;
        }
        case OptType::Adam:
          for (uint32_t c = 0; c < dim; ++c) {
            float wc = load_value(ts.dtype, w, c);
            store(c, adam_step(wc, apply_weight_decay(acc[c], wc, opt.weightDecay), st[c], st[dim + c], opt.lr, opt.beta1,
                               opt.beta2, opt.eps, bc1, bc2));
          }
          break;
      }
    }
  });
  ++step_;
  return BackwardResult{false, U};
}

}  // namespace embshard
