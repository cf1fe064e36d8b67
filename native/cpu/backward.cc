// backward.cc — the CPU backward pass with the fused optimizer, FBGEMM-style:
//   1. reject non-finite gradients (or skip the step) before anything changes;
//   2. linearise every id to a global row key (table rowBase + row; 32-bit when the collection has at
//      most 2^32 rows) and sort (key, position) pairs with a stable radix sort, so each row's
//      contributions stay in id order;
//   3. one parallel pass over the sorted pairs: each task takes the runs of equal keys that start in
//      its range, sums each run's gradient rows (found through the per-id pointer and scale recorded in
//      step 2, prefetched ahead) in that fixed order in fp32, then applies ONE optimizer update per
//      element with the shared host-device rules of core/optim.h.
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
#include "cpu/row_ops.h"
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

constexpr int64_t kRowAhead = 12;   // sorted positions ahead for weight/state prefetch
constexpr int64_t kGradAhead = 16;  // sorted positions ahead for gradient-row prefetch


// Where one table's rows and state live.
struct RowTarget {
  uint8_t* weights;
  float* state;
  uint64_t rowBase, rowBytes, statePerRow;
  uint32_t dim;
  DType dtype;
};

// Where the gradient rows of one batch slot (feature) are.
struct GradSource {
  const float* base;  // pooled: pooledGrad + the feature's column; sequence: the feature's gradient
  int64_t stride;     // pooled: pooledDim per sample; sequence: dim per id
  int64_t begin;      // the slot's first id
  Pooling pooling;
};

template <typename Key>
struct UpdateArgs {
  const Key* skeys;          // sorted keys
  const uint32_t* svals;     // id position of each sorted position
  const float* const* gptr;  // gradient row of each id position
  const float* gscale;       // and its pooling scale
  int64_t N;
  const uint64_t* tableEnd;  // per table: its first key past the end
  const RowTarget* target;   // per table
  cpu::UpdateContext uctx;
  bool sr;                   // stochastic rounding
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

// acc = Σ contributions of the run starting at sorted position j (key `key`), in order; returns the
// position after the run. For a width D known at compile time the sum lives in registers; D = 0 takes the
// width from `dim` and sums in `acc`.
template <uint32_t D, typename Key>
inline int64_t accumulate_run(const UpdateArgs<Key>& a, float* __restrict acc, int64_t j, Key key, uint32_t dim) {
  constexpr bool kFixed = D != 0;
  const uint32_t width = kFixed ? D : dim;
  float regs[kFixed ? D : 1] = {};
  float* __restrict sum = kFixed ? regs : acc;
  if (!kFixed) std::fill(acc, acc + width, 0.0f);
  do {
    if (j + 2 * kGradAhead < a.N) {
      const uint32_t i2 = a.svals[j + 2 * kGradAhead];
      __builtin_prefetch(&a.gptr[i2], 0, 3);
      __builtin_prefetch(&a.gscale[i2], 0, 3);
    }
    if (j + kGradAhead < a.N) {
      const float* p = a.gptr[a.svals[j + kGradAhead]];
      for (uint32_t o = 0; o < width; o += 16) __builtin_prefetch(p + o, 0, 0);
    }
    const uint32_t i = a.svals[j];
    const float scale = a.gscale[i];
    const float* __restrict g = a.gptr[i];
    for (uint32_t c = 0; c < width; ++c) sum[c] += g[c] * scale;
    ++j;
  } while (j < a.N && a.skeys[j] == key);
  if (kFixed) std::copy(regs, regs + width, acc);
  return j;
}

// The runs of equal keys that start at sorted positions [lo, hi) (a run may end past hi): sum each
// run's contributions in sorted (= id) order, then update its row once. Returns the number of runs.
template <typename Key>
inline int64_t update_runs_impl(const UpdateArgs<Key>& a, float* __restrict acc, int64_t lo, int64_t hi) {
  while (lo < hi && lo > 0 && a.skeys[lo] == a.skeys[lo - 1]) ++lo;  // that run belongs to the task before
  if (lo >= hi) return 0;
  size_t tbl = 0;
  while (uint64_t(a.skeys[lo]) >= a.tableEnd[tbl]) ++tbl;
  int64_t runs = 0;
  int64_t j = lo;
  while (j < hi) {
    const Key key = a.skeys[j];
    while (uint64_t(key) >= a.tableEnd[tbl]) ++tbl;
    const RowTarget& t = a.target[tbl];
    const uint32_t dim = t.dim;
    // prefetch the weights and state of the row kRowAhead positions ahead, for writing, non-temporal
    // hint (measured best for the update's read-modify-write)
    if (j + kRowAhead < a.N) {
      const uint64_t k2 = a.skeys[j + kRowAhead];
      size_t t2 = tbl;
      while (k2 >= a.tableEnd[t2]) ++t2;
      const RowTarget& n = a.target[t2];
      cpu::prefetch_lines<1, 0>(n.weights + (k2 - n.rowBase) * n.rowBytes, n.rowBytes);
      if (n.statePerRow) cpu::prefetch_lines<1, 0>(n.state + (k2 - n.rowBase) * n.statePerRow, n.statePerRow * 4);
    }
    switch (dim) {
      case 16: j = accumulate_run<16>(a, acc, j, key, dim); break;
      case 32: j = accumulate_run<32>(a, acc, j, key, dim); break;
      case 64: j = accumulate_run<64>(a, acc, j, key, dim); break;
      case 128: j = accumulate_run<128>(a, acc, j, key, dim); break;
      default: j = accumulate_run<0>(a, acc, j, key, dim); break;
    }
    update_one(a.uctx, a.sr, t, uint64_t(key) - t.rowBase, acc, uint64_t(key));
    ++runs;
  }
  return runs;
}

// The compiled kernels (see cpu/isa.h).
EMBSHARD_CPU_KERNEL int64_t update_runs(const UpdateArgs<uint32_t>& a, float* acc, int64_t lo, int64_t hi) {
  return update_runs_impl(a, acc, lo, hi);
}
EMBSHARD_CPU_KERNEL int64_t update_runs(const UpdateArgs<uint64_t>& a, float* acc, int64_t lo, int64_t hi) {
  return update_runs_impl(a, acc, lo, hi);
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
  if (N > int64_t(0xffffffff) || static_cast<int64_t>(F) * B > int64_t(0xffffffff))
    fail("INVALID_SIZE", "a batch may hold at most 2^32 - 1 ids and 2^32 - 1 bags");

  // 2. keys + stable sort (every allocation happens here, before any row changes)
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
  std::vector<uint64_t> slotBase(F);
  std::vector<GradSource> grad(F);
  for (int32_t s = 0; s < F; ++s) {
    const uint32_t f = b.feature[s];
    const FeatureSpec& fs = spec_.features[f];
    slotBase[s] = layout_.tables[fs.table].rowBase;
    if (fs.pooling == Pooling::None) grad[s] = GradSource{seqGrad[f], spec_.tables[fs.table].dim, b.slotBegin(s), fs.pooling};
    else grad[s] = GradSource{pooledGrad + layout_.pooledCol[f], layout_.pooledDim, b.slotBegin(s), fs.pooling};
  }
  parallel_for(static_cast<int64_t>(F) * B, 256, [&](int64_t lo, int64_t hi) {
    for (int64_t bag = lo; bag < hi; ++bag) {
      const uint64_t base = slotBase[bag / B];
      const GradSource& g = grad[bag / B];
      const int64_t len = off[bag + 1] - off[bag];
      for (int64_t i = off[bag]; i < off[bag + 1]; ++i) {
        if (narrow) keys32_[i] = static_cast<uint32_t>(base + rows[i]);
        else keys_[i] = base + rows[i];
        vals_[i] = static_cast<uint32_t>(i);
        if (g.pooling == Pooling::None) {
          gptr_[i] = g.base + (i - g.begin) * g.stride;
          gscale_[i] = 1.0f;
        } else {
          gptr_[i] = g.base + (bag % B) * g.stride;
          gscale_[i] = grad_scale(g.pooling, b.weights, i, len);
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

// Sorts the (key, position) pairs, then applies one exact update per run of equal keys; returns the
// number of runs (unique rows).
template <typename Key>
int64_t CpuEngine::sorted_update(Key* keys, Key* tmpKeys, int64_t N, int bits, PhaseTimer& timer) {
  const OptimizerConfig& opt = spec_.optimizer;
  const bool inTmp = radix_sort_pairs(keys, vals_.data(), tmpKeys, tmpVals_.data(), N, bits);
  const Key* skeys = inTmp ? tmpKeys : keys;
  const uint32_t* svals = inTmp ? tmpVals_.data() : vals_.data();
  timer.mark("sort");

  // global row -> table: tables are contiguous in the key space
  std::vector<uint64_t> tableEnd(spec_.tables.size());
  std::vector<RowTarget> target(spec_.tables.size());
  for (size_t t = 0; t < spec_.tables.size(); ++t) {
    const TableStorage& tl = layout_.tables[t];
    tableEnd[t] = tl.rowBase + spec_.tables[t].rows;
    target[t] = RowTarget{weights_.data() + tl.weightOffset, table_state(static_cast<uint32_t>(t)), tl.rowBase, tl.rowBytes,
                          tl.statePerRow, spec_.tables[t].dim, spec_.tables[t].dtype};
  }
  const int64_t t1 = step_ + 1;  // the step being applied (1-based)
  const float bc1 = 1.0f - std::pow(opt.beta1, static_cast<float>(t1));
  const float bc2 = 1.0f - std::pow(opt.beta2, static_cast<float>(t1));
  uint32_t maxDim = 0;
  for (const TableSpec& t : spec_.tables) maxDim = std::max(maxDim, t.dim);
  const UpdateArgs<Key> args{skeys, svals, gptr_.data(), gscale_.data(), N, tableEnd.data(), target.data(),
                             cpu::UpdateContext{&opt, spec_.seed, static_cast<uint64_t>(t1), bc1, bc2},
                             opt.stochasticRounding};

  // 3. one exact update per unique row
  std::atomic<int64_t> runs{0};
  parallel_for(N, 1 << 12, [&](int64_t lo, int64_t hi) {
    std::vector<float> acc(maxDim);  // per chunk (a thread_local would cost a TLS lookup per row in a .so)
    runs.fetch_add(update_runs(args, acc.data(), lo, hi), std::memory_order_relaxed);
  });
  timer.mark("update");
  return runs.load();
}

template int64_t CpuEngine::sorted_update<uint32_t>(uint32_t*, uint32_t*, int64_t, int, PhaseTimer&);
template int64_t CpuEngine::sorted_update<uint64_t>(uint64_t*, uint64_t*, int64_t, int, PhaseTimer&);

}  // namespace embshard
