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
#include "cpu/isa.h"
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

constexpr int64_t kRowAhead = 8;   // unique rows ahead for weight/state prefetch
constexpr int64_t kGradAhead = 16;  // contributions ahead for gradient-row prefetch

// Prefetch for writing (the non-temporal hint measured best for the update's read-modify-write).
inline void prefetch_bytes(const void* p, uint64_t bytes) {
  const uint8_t* c = static_cast<const uint8_t*>(p);
  for (uint64_t o = 0; o < bytes; o += 64) __builtin_prefetch(c + o, 1, 0);
}

// Where one table's rows and state live.
struct RowTarget {
  uint8_t* weights;
  float* state;
  uint64_t rowBase, rowBytes, statePerRow;
  uint32_t dim;
  DType dtype;
};

template <typename Key>
struct UpdateArgs {
  const Key* skeys;           // sorted keys
  const int64_t* runStart;    // [U + 1] first sorted position of each unique row
  const float* const* sptr;   // gradient row of each sorted position
  const float* sscale;        // and its scale
  int64_t N;
  const uint64_t* tableEnd;   // per table: its first key past the end
  const RowTarget* target;    // per table
  cpu::UpdateContext uctx;
  bool sr;                    // stochastic rounding
};

inline void update_one(const cpu::UpdateContext& u, bool sr, const RowTarget& t, uint64_t row, float* acc, uint64_t key) {
  uint8_t* w = t.weights + row * t.rowBytes;
  float* st = t.state + row * t.statePerRow;
  switch (t.dtype) {
    case DType::F32: cpu::update_row<DType::F32, false>(u, w, st, acc, t.dim, key); break;
    case DType::F16:
      if (sr) cpu::update_row<DType::F16, true>(u, w, st, acc, t.dim, key);
      else cpu::update_row<DType::F16, false>(u, w, st, acc, t.dim, key);
      break;
    case DType::BF16:
      if (sr) cpu::update_row<DType::BF16, true>(u, w, st, acc, t.dim, key);
      else cpu::update_row<DType::BF16, false>(u, w, st, acc, t.dim, key);
      break;
  }
}

// Unique rows [lo, hi): sum each row's contributions in sorted (= id) order, then update it once.
template <typename Key>
inline void update_runs_impl(const UpdateArgs<Key>& a, float* __restrict acc, int64_t lo, int64_t hi) {
  size_t tbl = 0;
  while (uint64_t(a.skeys[a.runStart[lo]]) >= a.tableEnd[tbl]) ++tbl;
  for (int64_t u = lo; u < hi; ++u) {
    const uint64_t key = a.skeys[a.runStart[u]];
    while (key >= a.tableEnd[tbl]) ++tbl;
    const RowTarget& t = a.target[tbl];
    const uint32_t dim = t.dim;
    // prefetch the weights and state of a row a few unique rows ahead
    if (u + kRowAhead < hi) {
      const uint64_t k2 = a.skeys[a.runStart[u + kRowAhead]];
      size_t t2 = tbl;
      while (k2 >= a.tableEnd[t2]) ++t2;
      const RowTarget& n = a.target[t2];
      prefetch_bytes(n.weights + (k2 - n.rowBase) * n.rowBytes, n.rowBytes);
      if (n.statePerRow) prefetch_bytes(n.state + (k2 - n.rowBase) * n.statePerRow, n.statePerRow * 4);
    }
    std::fill(acc, acc + dim, 0.0f);
    for (int64_t j = a.runStart[u]; j < a.runStart[u + 1]; ++j) {
      if (j + kGradAhead < a.N) {
        const float* p = a.sptr[j + kGradAhead];
        for (uint32_t o = 0; o < dim; o += 16) __builtin_prefetch(p + o, 0, 0);
      }
      const float* __restrict g = a.sptr[j];
      const float scale = a.sscale[j];
      for (uint32_t c = 0; c < dim; ++c) acc[c] += g[c] * scale;
    }
    update_one(a.uctx, a.sr, t, key - t.rowBase, acc, key);
  }
}

// The compiled kernels (see cpu/isa.h).
EMBSHARD_CPU_KERNEL void update_runs(const UpdateArgs<uint32_t>& a, float* acc, int64_t lo, int64_t hi) {
  update_runs_impl(a, acc, lo, hi);
}
EMBSHARD_CPU_KERNEL void update_runs(const UpdateArgs<uint64_t>& a, float* acc, int64_t lo, int64_t hi) {
  update_runs_impl(a, acc, lo, hi);
}

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
  //    update pass below reads them by sorted position instead of chasing bag indices. Keys are 32-bit
  //    whenever the collection has at most 2^32 rows (half the bytes per sort pass).
  const int bits = key_bits(layout_.totalRows);
  const bool narrow = bits <= 32;
  if (narrow) {
    keys32_.resize(N);
    tmpKeys32_.resize(N);
  } else {
    keys_.resize(N);
    tmpKeys_.resize(N);
  }
  vals_.resize(N);
  tmpVals_.resize(N);
  gptr_.resize(N);
  gscale_.resize(N);
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
        if (narrow) keys32_[i] = static_cast<uint32_t>(base + rows[i]);
        else keys_[i] = base + rows[i];
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
  const int64_t U = narrow ? sorted_update(keys32_.data(), tmpKeys32_.data(), N, bits, timer)
                           : sorted_update(keys_.data(), tmpKeys_.data(), N, bits, timer);
  ++step_;
  return BackwardResult{false, U};
}

// Sorts the (key, position) pairs, finds the runs of equal keys and applies one exact update per run;
// returns the number of runs (unique rows).
template <typename Key>
int64_t CpuEngine::sorted_update(Key* keys, Key* tmpKeys, int64_t N, int bits, PhaseTimer& timer) {
  const OptimizerConfig& opt = spec_.optimizer;
  const bool inTmp = radix_sort_pairs(keys, vals_.data(), tmpKeys, tmpVals_.data(), N, bits);
  const Key* skeys = inTmp ? tmpKeys : keys;
  const uint32_t* svals = inTmp ? tmpVals_.data() : vals_.data();
  timer.mark("sort");

  // contributions in sorted order (independent random reads: the memory system overlaps them)
  sptr_.resize(N);
  sscale_.resize(N);
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
  std::vector<RowTarget> target(spec_.tables.size());
  for (size_t t = 0; t < spec_.tables.size(); ++t) {
    const TableLayout& tl = layout_.tables[t];
    tableEnd[t] = tl.rowBase + spec_.tables[t].rows;
    target[t] = RowTarget{weights_.data() + tl.weightOffset, table_state(static_cast<uint32_t>(t)), tl.rowBase, tl.rowBytes,
                          tl.statePerRow, spec_.tables[t].dim, spec_.tables[t].dtype};
  }
  const int64_t t1 = step_ + 1;  // the step being applied (1-based)
  const float bc1 = 1.0f - std::pow(opt.beta1, static_cast<float>(t1));
  const float bc2 = 1.0f - std::pow(opt.beta2, static_cast<float>(t1));
  uint32_t maxDim = 0;
  for (const TableSpec& t : spec_.tables) maxDim = std::max(maxDim, t.dim);
  UpdateArgs<Key> args{skeys, runStart_.data(), sptr_.data(), sscale_.data(), N, tableEnd.data(), target.data(),
                       cpu::UpdateContext{&opt, spec_.seed, static_cast<uint64_t>(t1), bc1, bc2}, opt.stochasticRounding};
  timer.mark("runs");

  // 3. one exact update per unique row
  parallel_for(U, 64, [&](int64_t lo, int64_t hi) {
    std::vector<float> acc(maxDim);  // per chunk (a thread_local would cost a TLS lookup per row in a .so)
    update_runs(args, acc.data(), lo, hi);
  });
  timer.mark("update");
  return U;
}

template int64_t CpuEngine::sorted_update<uint32_t>(uint32_t*, uint32_t*, int64_t, int, PhaseTimer&);
template int64_t CpuEngine::sorted_update<uint64_t>(uint64_t*, uint64_t*, int64_t, int, PhaseTimer&);

}  // namespace embshard
