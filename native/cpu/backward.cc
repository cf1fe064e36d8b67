// backward.cc — the CPU backward pass with the fused optimizer:
//   1. linearise every id to a global row key (table rowBase + row), resolving and range-checking raw
//      ids on the way, then reject non-finite gradients (or skip the step: core/gradients.h) — all
//      before anything changes;
//   2. group each row's contributions in id order: by owner partition (collections of at most 2^28
//      rows: count per partition, one stable scatter, then a direct-mapped accumulator per partition)
//      or, for larger collections, by a stable radix sort of (key, position) pairs;
//   3. sum each row's contributions in that fixed order in fp32 (gradient rows prefetched ahead), then
//      apply ONE optimizer update per row with the shared host-device rules of core/optim.h, weights and
//      state prefetched ahead, rows in ascending order.
// Both groupings add the same values in the same order, so results are bitwise the same whatever the
// grouping, the thread count or the ISA copy.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <mutex>
#include <type_traits>
#include <vector>

#include "core/errors.h"
#include "core/gradients.h"
#include "core/parallel.h"
#include "core/profile.h"
#include "cpu/cpu_engine.h"
#include "cpu/isa.h"
#include "cpu/radix_sort.h"
#include "cpu/row_ops.h"
#include "cpu/update_row.h"

namespace embshard {

namespace {

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

// Per batch slot: the table row space its ids resolve against.
struct SlotRows {
  uint64_t base;  // the table's first global row
  uint64_t rows;
  bool modulo;
};

// fn(bag, i, key) for every id i of the bags [lo, hi) in order, key = its table's rowBase + its row.
// Id = void reads the rows prepare_batch resolved; otherwise raw ids are resolved and range-checked here
// (an id out of range gets row 0). Returns the first position whose id is out of range, or -1.
template <typename Id, typename Fn>
int64_t for_each_id(const PreparedBatch& b, const SlotRows* slot, int64_t lo, int64_t hi, Fn&& fn) {
  const int64_t B = b.B;
  const int64_t* off = b.offsets.data();
  int64_t firstBad = -1;
  for (int64_t bag = lo; bag < hi; ++bag) {
    const SlotRows& sr = slot[bag / B];
    for (int64_t i = off[bag]; i < off[bag + 1]; ++i) {
      uint64_t row;
      if constexpr (std::is_void_v<Id>) {
        row = b.rows[i];
      } else if (!resolve_id(static_cast<int64_t>(static_cast<const Id*>(b.rawIds)[i]), sr.rows, sr.modulo, &row)) {
        if (firstBad < 0) firstBad = i;
        row = 0;
      }
      fn(bag, i, sr.base + row);
    }
  }
  return firstBad;
}

template <typename Fn>
int64_t for_each_id_of(const PreparedBatch& b, const SlotRows* slot, int64_t lo, int64_t hi, Fn&& fn) {
  if (!b.rows.empty()) return for_each_id<void>(b, slot, lo, hi, fn);
  switch (b.idType) {
    case IdType::I64: return for_each_id<int64_t>(b, slot, lo, hi, fn);
    case IdType::I32: return for_each_id<int32_t>(b, slot, lo, hi, fn);
    case IdType::U32: return for_each_id<uint32_t>(b, slot, lo, hi, fn);
  }
  return -1;
}

// The gradient row of id i (in bag `bag`) and its pooling scale.
inline void gradient_of(const PreparedBatch& b, const GradSource& g, int64_t bag, int64_t i, const float** ptr, float* scale) {
  if (g.pooling == Pooling::None) {
    *ptr = g.base + (i - g.begin) * g.stride;
    *scale = 1.0f;
  } else {
    *ptr = g.base + (bag % b.B) * g.stride;
    *scale = grad_scale(g.pooling, b.weights, i, b.offsets[bag + 1] - b.offsets[bag]);
  }
}

// The radix-sort path's pass over bags [lo, hi): key, position, gradient row and scale of every id.
template <typename Key>
int64_t linearise_range(const PreparedBatch& b, const SlotRows* slot, const GradSource* grad, Key* keys, uint32_t* vals,
                        const float** gptr, float* gscale, int64_t lo, int64_t hi) {
  return for_each_id_of(b, slot, lo, hi, [&](int64_t bag, int64_t i, uint64_t key) {
    keys[i] = static_cast<Key>(key);
    vals[i] = static_cast<uint32_t>(i);
    gradient_of(b, grad[bag / b.B], bag, i, &gptr[i], &gscale[i]);
  });
}

// Where each table's rows and state are (tables are contiguous in the key space), the update context
// of the step being applied, and the widest row.
void update_targets(const CpuEngine& e, std::vector<uint64_t>& tableEnd, std::vector<RowTarget>& target, cpu::UpdateContext& u,
                    uint32_t& maxDim) {
  const CollectionSpec& spec = e.spec();
  const OptimizerConfig& opt = spec.optimizer;
  tableEnd.resize(spec.tables.size());
  target.resize(spec.tables.size());
  maxDim = 0;
  for (uint32_t t = 0; t < spec.tables.size(); ++t) {
    const TableStorage& tl = e.layout().tables[t];
    tableEnd[t] = tl.rowBase + spec.tables[t].rows;
    target[t] = RowTarget{e.table_weights(t), e.table_state(t), tl.rowBase, tl.rowBytes, tl.statePerRow, spec.tables[t].dim,
                          spec.tables[t].dtype};
    maxDim = std::max(maxDim, spec.tables[t].dim);
  }
  const int64_t t1 = e.step() + 1;  // the step being applied (1-based)
  u = cpu::UpdateContext{&opt, spec.seed, static_cast<uint64_t>(t1), 1.0f - std::pow(opt.beta1, static_cast<float>(t1)),
                         1.0f - std::pow(opt.beta2, static_cast<float>(t1))};
}

// ---- owner-partitioned grouping ----
// Each partition owns a contiguous range of 2^shift global rows. One pass counts the ids per partition
// (per chunk of bags), a second scatters every contribution into its partition, chunk by chunk in id
// order — so inside a partition contributions stay in id order — and then each partition, taken by
// one thread, sums its rows' contributions into a small direct-mapped accumulator (a slot per row
// touched) and updates the touched rows once each, in ascending row order. Each row's sum is the same
// sequence of fp32 additions as the sort's (id order), so the results are bitwise the same; it costs
// one scatter instead of a full radix sort and reads every contribution's gradient pointer and scale
// sequentially instead of through the sorted positions.

// Rows of a partition: 2^kMinRangeBits at least, and at most 2^kMaxPartitionBits partitions.
constexpr int kMinRangeBits = 8;
constexpr int kMaxPartitionBits = 12;
constexpr int kMaxRangeBits = 16;

using cpu::Contribution;

// Pass A over bags [lo, hi): keys[i] for every id, counts per partition.
int64_t count_range(const PreparedBatch& b, const SlotRows* slot, uint32_t* keys, uint32_t* count, int shift, int64_t lo, int64_t hi) {
  return for_each_id_of(b, slot, lo, hi, [&](int64_t, int64_t i, uint64_t key) {
    keys[i] = static_cast<uint32_t>(key);
    ++count[keys[i] >> shift];
  });
}

// Pass B over bags [lo, hi): each contribution to out[cursor[its partition]++].
void scatter_bags(const PreparedBatch& b, const GradSource* grad, const uint32_t* keys, uint32_t* cursor, Contribution* out,
                  int shift, int64_t lo, int64_t hi) {
  const int64_t* off = b.offsets.data();
  for (int64_t bag = lo; bag < hi; ++bag) {
    const GradSource& g = grad[bag / b.B];
    for (int64_t i = off[bag]; i < off[bag + 1]; ++i) {
      Contribution& c = out[cursor[keys[i] >> shift]++];
      c.key = keys[i];
      gradient_of(b, g, bag, i, &c.g, &c.scale);
    }
  }
}

struct PartitionArgs {
  const Contribution* c;
  const uint32_t* partStart;  // [partitions + 1]
  int shift;
  const uint64_t* tableEnd;   // per table: its first key past the end
  const RowTarget* target;    // per table
  uint32_t maxDim;
  cpu::UpdateContext uctx;
  bool sr;                    // stochastic rounding
};

template <uint32_t D>
inline void add_scaled(float* __restrict acc, const float* __restrict g, float scale, uint32_t dim) {
  const uint32_t width = D != 0 ? D : dim;
  for (uint32_t c = 0; c < width; ++c) acc[c] += g[c] * scale;
}

// Partition p: sums each touched row's contributions (in id order) into its slot, then updates the
// touched rows once each in ascending order. Returns the number of rows updated.
inline int64_t update_partition_impl(const PartitionArgs& a, cpu::PartitionScratch& s, int64_t p) {
  const uint32_t begin = a.partStart[p], end = a.partStart[p + 1];
  if (begin == end) return 0;
  const uint64_t base = uint64_t(p) << a.shift;
  const uint32_t range = uint32_t(1) << a.shift;
  const uint32_t words = (range + 63) / 64;
  const uint32_t maxSlots = std::min<uint32_t>(range, end - begin);
  if (s.seen.size() < words) s.seen.resize(words);
  if (s.slot.size() < range) s.slot.resize(range);
  if (s.acc.size() < size_t(maxSlots) * a.maxDim) s.acc.resize(size_t(maxSlots) * a.maxDim);
  if (s.touched.size() < maxSlots) s.touched.resize(maxSlots);
  uint64_t* __restrict seen = s.seen.data();
  uint32_t* __restrict slot = s.slot.data();
  float* __restrict acc = s.acc.data();
  std::fill(seen, seen + words, 0);
  size_t tbl = 0;
  while (base >= a.tableEnd[tbl]) ++tbl;
  const bool oneTable = base + range <= a.tableEnd[tbl];  // else contributions look their table up
  const uint32_t stride = a.maxDim;
  uint32_t n = 0;
  for (uint32_t j = begin; j < end; ++j) {
    if (j + kGradAhead < end) {
      const float* q = a.c[j + kGradAhead].g;
      for (uint32_t o = 0; o < a.maxDim; o += 16) __builtin_prefetch(q + o, 0, 0);
    }
    const Contribution& x = a.c[j];
    const uint32_t local = static_cast<uint32_t>(x.key - base);
    size_t t = tbl;
    if (!oneTable)
      while (x.key >= a.tableEnd[t]) ++t;
    const uint32_t dim = a.target[t].dim;
    const uint64_t bit = uint64_t(1) << (local & 63);
    if (!(seen[local >> 6] & bit)) {
      seen[local >> 6] |= bit;
      slot[local] = n;
      std::fill(acc + size_t(n) * stride, acc + size_t(n) * stride + dim, 0.0f);
      ++n;
    }
    float* row = acc + size_t(slot[local]) * stride;
    switch (dim) {
      case 16: add_scaled<16>(row, x.g, x.scale, dim); break;
      case 32: add_scaled<32>(row, x.g, x.scale, dim); break;
      case 64: add_scaled<64>(row, x.g, x.scale, dim); break;
      case 128: add_scaled<128>(row, x.g, x.scale, dim); break;
      default: add_scaled<0>(row, x.g, x.scale, dim); break;
    }
  }
  // the touched rows in ascending order
  uint32_t* touched = s.touched.data();
  uint32_t m = 0;
  for (uint32_t w = 0; w < words; ++w)
    for (uint64_t bits = seen[w]; bits; bits &= bits - 1) touched[m++] = w * 64 + static_cast<uint32_t>(__builtin_ctzll(bits));
  for (uint32_t k = 0; k < m; ++k) {
    // prefetch the weights and state of the row kRowAhead rows ahead, for writing, non-temporal hint
    if (k + kRowAhead < m) {
      const uint64_t k2 = base + touched[k + kRowAhead];
      size_t t2 = tbl;
      while (k2 >= a.tableEnd[t2]) ++t2;
      const RowTarget& nt = a.target[t2];
      cpu::prefetch_lines<1, 0>(nt.weights + (k2 - nt.rowBase) * nt.rowBytes, nt.rowBytes);
      if (nt.statePerRow) cpu::prefetch_lines<1, 0>(nt.state + (k2 - nt.rowBase) * nt.statePerRow, nt.statePerRow * 4);
    }
    const uint64_t key = base + touched[k];
    size_t t = tbl;
    while (key >= a.tableEnd[t]) ++t;
    const RowTarget& rt = a.target[t];
    update_one(a.uctx, a.sr, rt, key - rt.rowBase, acc + size_t(slot[touched[k]]) * stride, key);
  }
  return n;
}

// The compiled kernel (see cpu/isa.h): the partitions [pLo, pHi).
EMBSHARD_CPU_KERNEL int64_t update_partitions(const PartitionArgs& a, cpu::PartitionScratch& s, int64_t pLo, int64_t pHi) {
  int64_t rows = 0;
  for (int64_t p = pLo; p < pHi; ++p) rows += update_partition_impl(a, s, p);
  return rows;
}

}  // namespace

BackwardResult CpuEngine::backward(const PreparedBatch& b, const float* pooledGrad, const float* const* seqGrad) {
  const int64_t B = b.B;
  const int32_t F = b.F;
  const int64_t N = b.numIds();

  PhaseTimer timer("cpu backward");
  if (N > int64_t(0xffffffff) || static_cast<int64_t>(F) * B > int64_t(0xffffffff))
    fail("INVALID_SIZE", "a batch may hold at most 2^32 - 1 ids and 2^32 - 1 bags");

  // 1. keys (ids resolved and range-checked on the way; every allocation happens here, before any row
  //    changes), then finiteness
  const int bits = key_bits(layout_.totalRows);
  const bool narrow = bits <= 32;
  std::vector<SlotRows> slot(F);
  std::vector<GradSource> grad(F);
  for (int32_t s = 0; s < F; ++s) {
    const uint32_t f = b.feature[s];
    const FeatureSpec& fs = spec_.features[f];
    const TableSpec& ts = spec_.tables[fs.table];
    slot[s] = SlotRows{layout_.tables[fs.table].rowBase, ts.rows, ts.idPolicy == IdPolicy::Modulo};
    if (fs.pooling == Pooling::None) grad[s] = GradSource{seqGrad[f], ts.dim, b.slotBegin(s), fs.pooling};
    else grad[s] = GradSource{pooledGrad + layout_.pooledCol[f], layout_.pooledDim, b.slotBegin(s), fs.pooling};
  }
  const int64_t nBags = static_cast<int64_t>(F) * B;
  std::mutex badMu;
  int64_t badPos = std::numeric_limits<int64_t>::max();
  auto note_bad = [&](int64_t bad) {
    if (bad < 0) return;
    std::lock_guard<std::mutex> lk(badMu);
    badPos = std::min(badPos, bad);
  };
  // every check that precedes the first write: ids in range, then finite gradients
  auto checks = [&]() -> bool {
    if (badPos != std::numeric_limits<int64_t>::max()) {
      int32_t s = 0;
      while (badPos >= b.slotEnd(s)) ++s;
      fail_id_out_of_range(spec_, b, s, badPos);
    }
    return gradients_finite(spec_, layout_, b, pooledGrad, seqGrad);
  };

  if (bits <= kMaxPartitionBits + kMaxRangeBits) {
    // owner-partitioned grouping
    const int shift = std::max(bits - kMaxPartitionBits, std::min(bits, kMinRangeBits));
    const int64_t parts = int64_t(1) << (bits - shift);
    const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(nBags, int64_t(pool_threads()) * 4));
    auto bagsOf = [&](int64_t c) { return std::make_pair(nBags * c / chunks, nBags * (c + 1) / chunks); };
    keys32_.resize(N);
    counts_.assign(static_cast<size_t>(chunks * parts), 0);
    parallel_for(chunks, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c) {
        auto [bl, bh] = bagsOf(c);
        note_bad(count_range(b, slot.data(), keys32_.data(), &counts_[static_cast<size_t>(c * parts)], shift, bl, bh));
      }
    });
    if (!checks()) return non_finite_outcome(spec_.optimizer);
    timer.mark("keys+finite");
    if (N == 0) {
      ++step_;
      return BackwardResult{false, 0};
    }
    // exclusive prefix over (partition, chunk): each chunk's write cursor per partition; chunks in order
    partStart_.resize(static_cast<size_t>(parts + 1));
    uint32_t sum = 0;
    for (int64_t p = 0; p < parts; ++p) {
      partStart_[p] = sum;
      for (int64_t c = 0; c < chunks; ++c) {
        uint32_t& n = counts_[static_cast<size_t>(c * parts + p)];
        const uint32_t k = n;
        n = sum;
        sum += k;
      }
    }
    partStart_[parts] = sum;
    contrib_.resize(N);
    parallel_for(chunks, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c) {
        auto [bl, bh] = bagsOf(c);
        scatter_bags(b, grad.data(), keys32_.data(), &counts_[static_cast<size_t>(c * parts)], contrib_.data(), shift, bl, bh);
      }
    });
    timer.mark("partition");
    const int64_t U = partitioned_update(shift, parts);
    timer.mark("update");
    ++step_;
    return BackwardResult{false, U};
  }

  // radix-sorted grouping (collections too large for the partitions' direct-mapped accumulators)
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
  parallel_for(nBags, 256, [&](int64_t lo, int64_t hi) {
    note_bad(narrow ? linearise_range(b, slot.data(), grad.data(), keys32_.data(), vals_.data(), gptr_.data(), gscale_.data(), lo, hi)
                    : linearise_range(b, slot.data(), grad.data(), keys_.data(), vals_.data(), gptr_.data(), gscale_.data(), lo, hi));
  });
  if (!checks()) return non_finite_outcome(spec_.optimizer);
  timer.mark("keys+finite");
  if (N == 0) {
    ++step_;
    return BackwardResult{false, 0};
  }

  // 2.–3. stable sort, one exact update per unique row
  const int64_t U = narrow ? sorted_update(keys32_.data(), tmpKeys32_.data(), N, bits, timer)
                           : sorted_update(keys_.data(), tmpKeys_.data(), N, bits, timer);
  ++step_;
  return BackwardResult{false, U};
}

// One exact update per touched row of each partition; partitions go to threads by contribution counts.
int64_t CpuEngine::partitioned_update(int shift, int64_t parts) {
  std::vector<uint64_t> tableEnd;
  std::vector<RowTarget> target;
  cpu::UpdateContext u;
  uint32_t maxDim;
  update_targets(*this, tableEnd, target, u, maxDim);
  const PartitionArgs args{contrib_.data(), partStart_.data(), shift, tableEnd.data(), target.data(), maxDim, u,
                           spec_.optimizer.stochasticRounding};
  const int threads = pool_threads();
  if (partScratch_.size() < static_cast<size_t>(threads)) partScratch_.resize(threads);
  // work chunks by contributions: chunk k takes the partitions whose first contribution lies in it
  const int64_t N = partStart_[parts];
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(N / 4096, int64_t(threads) * 8));
  std::atomic<int64_t> next{0}, rows{0};
  parallel_threads([&](int t) {
    cpu::PartitionScratch& s = partScratch_[t];
    for (;;) {
      const int64_t k = next.fetch_add(1, std::memory_order_relaxed);
      if (k >= chunks) return;
      const uint32_t lo = static_cast<uint32_t>(N * k / chunks), hi = static_cast<uint32_t>(N * (k + 1) / chunks);
      const int64_t pLo = std::lower_bound(partStart_.begin(), partStart_.begin() + parts, lo) - partStart_.begin();
      const int64_t pHi = std::lower_bound(partStart_.begin(), partStart_.begin() + parts, hi) - partStart_.begin();
      // the last chunk also takes the partitions that start at N (empty ones)
      rows.fetch_add(update_partitions(args, s, pLo, k + 1 == chunks ? parts : pHi), std::memory_order_relaxed);
    }
  });
  return rows.load();
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
  std::vector<uint64_t> tableEnd;
  std::vector<RowTarget> target;
  cpu::UpdateContext u;
  uint32_t maxDim;
  update_targets(*this, tableEnd, target, u, maxDim);
  const UpdateArgs<Key> args{skeys, svals, gptr_.data(), gscale_.data(), N, tableEnd.data(), target.data(), u, opt.stochasticRounding};

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
