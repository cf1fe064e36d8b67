// backward.cc — the CPU backward pass with the fused optimizer:
//   1. copy the gradient rows the ids read onto huge pages, slot by slot, checking them for NaN / Inf on
//      the way; linearise every id to a global row key (table rowBase + row), resolving and
//      range-checking raw ids on the way, then reject non-finite gradients (or skip the step:
//      core/gradients.h) — all before anything changes;
//   2. group each row's contributions in id order: by owner partition (collections of at most 2^28
//      rows: count per partition, one stable scatter of (key, id, bag), then an in-cache counting sort
//      per partition that finds the rows with one contribution and lists the others) or, for larger
//      collections, by a stable radix sort of (key, position) pairs;
//   3. sum each row's contributions in that fixed order in fp32 (gradient rows prefetched ahead), then
//      apply ONE optimizer update per row with the shared host-device rules of core/optim.h, rows in
//      ascending order, the weights and state of the rows kRowAhead rows (partitioned) or
//      contributions (sorted) ahead prefetched; with partitions, the rows with one contribution after
//      the others, in id order (their gradient rows read in order, weights kSingleAhead ahead).
// Every grouping adds the same values in the same order (a row's one contribution is 0 + g · scale, as
// in a run of one), so results are bitwise the same whatever the grouping, the thread count or the ISA
// copy.
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

namespace cpu {
// Where the gradient rows of one batch slot (feature) are.
struct GradSource {
  const float* base;  // pooled: pooledGrad + the feature's column; sequence: the feature's gradient
  int64_t stride;     // pooled: pooledDim per sample; sequence: dim per id
  int64_t begin;      // the slot's first id
  Pooling pooling;
  uint32_t dim;       // the table's width
};
}  // namespace cpu

namespace {

constexpr int64_t kRowAhead = 12;   // rows (sorted positions) ahead for weight/state prefetch
constexpr int64_t kGradAhead = 16;  // sorted positions ahead for gradient-row prefetch


// Where one table's rows and state live.
struct RowTarget {
  uint8_t* weights;
  float* state;
  uint64_t rowBase, rowBytes, statePerRow;
  uint32_t dim;
  DType dtype;
};

using cpu::GradSource;

// The contributions in sorted order, as the update stream reads them: grad(j) and scale(j) of sorted
// position j (and key(j), for the sorted path, whose runs are found by comparing keys). Two layouts:
// (key, id position) pairs from the radix sort, with the gradient row and scale looked up by position;
// or the partitioned path's contributions, copied in sorted order.
template <typename Key>
struct SortedPairs {
  const Key* keys;           // sorted keys
  const uint32_t* vals;      // id position of each sorted position
  const float* const* gptr;  // gradient row of each id position
  const float* gscale;       // and its pooling scale
  Key key(int64_t j) const { return keys[j]; }
  const float* grad(int64_t j) const { return gptr[vals[j]]; }
  float scale(int64_t j) const { return gscale[vals[j]]; }
  void prefetch_meta(int64_t j) const {
    const uint32_t i = vals[j];
    __builtin_prefetch(&gptr[i], 0, 3);
    __builtin_prefetch(&gscale[i], 0, 3);
  }
};

struct SortedContributions {
  const cpu::Contribution* c;
  const float* grad(int64_t j) const { return c[j].g; }
  float scale(int64_t j) const { return c[j].scale; }
  void prefetch_meta(int64_t) const {}
};

template <typename Src>
struct UpdateArgs {
  Src src;                   // sorted contributions
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

// acc = Σ contributions at sorted positions [j, end) (one row's run), in order. For a width D known at
// compile time the sum lives in registers; D = 0 takes the width from `dim` and sums in `acc`.
template <uint32_t D, typename Src>
inline void accumulate_run(const UpdateArgs<Src>& a, float* __restrict acc, int64_t j, int64_t end, uint32_t dim) {
  constexpr bool kFixed = D != 0;
  const uint32_t width = kFixed ? D : dim;
  float regs[kFixed ? D : 1] = {};
  float* __restrict sum = kFixed ? regs : acc;
  if (!kFixed) std::fill(acc, acc + width, 0.0f);
  for (; j < end; ++j) {
    if (j + 2 * kGradAhead < a.N) a.src.prefetch_meta(j + 2 * kGradAhead);
    if (j + kGradAhead < a.N) {
      const float* p = a.src.grad(j + kGradAhead);
      for (uint32_t o = 0; o < width; o += 16) __builtin_prefetch(p + o, 0, 0);
    }
    const float scale = a.src.scale(j);
    const float* __restrict g = a.src.grad(j);
    for (uint32_t c = 0; c < width; ++c) sum[c] += g[c] * scale;
  }
  if (kFixed) std::copy(regs, regs + width, acc);
}

template <typename Src>
inline void accumulate(const UpdateArgs<Src>& a, float* acc, int64_t j, int64_t end, uint32_t dim) {
  cpu::with_row_width(dim, [&](auto D) { accumulate_run<D>(a, acc, j, end, dim); });
}

// Prefetches the weights and state of global row `key` (in table `t`), as cpu::prefetch_lines<RW, Hint>.
// Measured best: <1, 0> (for writing, non-temporal hint) for rows updated in ascending order, <0, 1>
// (for reading, T2 hint: prefetcht2) for rows updated in id order.
template <int RW, int Hint>
inline void prefetch_target(const RowTarget& t, uint64_t key) {
  cpu::prefetch_lines<RW, Hint>(t.weights + (key - t.rowBase) * t.rowBytes, t.rowBytes);
  if (t.statePerRow) cpu::prefetch_lines<RW, Hint>(t.state + (key - t.rowBase) * t.statePerRow, t.statePerRow * 4);
}

// The runs of equal keys that start at sorted positions [lo, hi) (a run may end past hi): sum each
// run's contributions in sorted (= id) order, then update its row once. Returns the number of runs.
template <typename Src>
inline int64_t update_runs_impl(const UpdateArgs<Src>& a, float* __restrict acc, int64_t lo, int64_t hi) {
  while (lo < hi && lo > 0 && a.src.key(lo) == a.src.key(lo - 1)) ++lo;  // that run belongs to the task before
  if (lo >= hi) return 0;
  size_t tbl = 0;
  while (uint64_t(a.src.key(lo)) >= a.tableEnd[tbl]) ++tbl;
  int64_t runs = 0;
  int64_t j = lo;
  while (j < hi) {
    const auto key = a.src.key(j);
    while (uint64_t(key) >= a.tableEnd[tbl]) ++tbl;
    const RowTarget& t = a.target[tbl];
    const uint32_t dim = t.dim;
    // the weights and state of the row kRowAhead positions ahead
    if (j + kRowAhead < a.N) {
      const uint64_t k2 = a.src.key(j + kRowAhead);
      size_t t2 = tbl;
      while (k2 >= a.tableEnd[t2]) ++t2;
      prefetch_target<1, 0>(a.target[t2], k2);
    }
    int64_t end = j + 1;
    while (end < a.N && a.src.key(end) == key) ++end;
    accumulate(a, acc, j, end, dim);
    j = end;
    update_one(a.uctx, a.sr, t, uint64_t(key) - t.rowBase, acc, uint64_t(key));
    ++runs;
  }
  return runs;
}

// The compiled kernels (see cpu/isa.h).
EMBSHARD_CPU_KERNEL int64_t update_runs(const UpdateArgs<SortedPairs<uint32_t>>& a, float* acc, int64_t lo, int64_t hi) {
  return update_runs_impl(a, acc, lo, hi);
}
EMBSHARD_CPU_KERNEL int64_t update_runs(const UpdateArgs<SortedPairs<uint64_t>>& a, float* acc, int64_t lo, int64_t hi) {
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

// The compiled kernel (see cpu/isa.h) of copy_gradients: the gradient rows of bags [lo, hi) to their
// places in `dst`; returns the largest exponent field copied (all ones when a value is NaN or Inf).
EMBSHARD_CPU_KERNEL uint32_t copy_bags(const PreparedBatch& b, const GradSource* grad, const uint64_t* slotOff, float* dst,
                                       int64_t lo, int64_t hi) {
  const int64_t B = b.B;
  uint32_t exponent = 0;
  for (int64_t bag = lo; bag < hi; ++bag) {
    const int32_t s = static_cast<int32_t>(bag / B);
    const GradSource& g = grad[s];
    const float* from;
    float* to;
    int64_t n;
    if (g.pooling == Pooling::None) {  // the bag's ids' rows, already dense
      const int64_t i0 = b.offsets[bag] - g.begin, i1 = b.offsets[bag + 1] - g.begin;
      from = g.base + i0 * g.stride;
      to = dst + slotOff[s] + i0 * g.dim;
      n = (i1 - i0) * g.dim;
    } else {
      from = g.base + (bag % B) * g.stride;
      to = dst + slotOff[s] + (bag % B) * g.dim;
      n = g.dim;
    }
    const uint32_t* __restrict bits = reinterpret_cast<const uint32_t*>(from);
    uint32_t* __restrict out = reinterpret_cast<uint32_t*>(to);
    for (int64_t k = 0; k < n; ++k) {
      out[k] = bits[k];
      exponent = std::max(exponent, bits[k] & 0x7f800000u);
    }
  }
  return exponent;
}

// Copies the gradient rows the batch's ids read into `arena` (grown on huge pages when too small), slot
// after slot, each slot's rows dense (pooled: B rows; sequence: one row per id), and points `grad` at the
// copy. The update reads a row per id in row order, i.e. at random; in the caller's pooled array a
// table's rows lie pooledDim floats apart, one or two per 4 KiB page, so those reads miss the TLB, while
// the copy's slots span a few huge pages. Returns whether every copied value is finite.
bool copy_gradients(const PreparedBatch& b, std::vector<GradSource>& grad, HostArena& arena) {
  const int32_t F = b.F;
  const int64_t B = b.B;
  std::vector<uint64_t> slotOff(F + 1, 0);
  for (int32_t s = 0; s < F; ++s) {
    const uint64_t rows = grad[s].pooling == Pooling::None ? uint64_t(b.slotEnd(s) - b.slotBegin(s)) : uint64_t(B);
    slotOff[s + 1] = slotOff[s] + rows * grad[s].dim;
  }
  const uint64_t bytes = slotOff[F] * sizeof(float);
  if (bytes == 0) return true;
  if (arena.size() < bytes) {
    constexpr uint64_t kHuge = uint64_t(1) << 21;
    arena = HostArena((bytes + kHuge - 1) / kHuge * kHuge, "the backward's copy of the gradients");
  }
  float* dst = reinterpret_cast<float*>(arena.data());
  std::atomic<bool> finite{true};
  parallel_for(int64_t(F) * B, 256, [&](int64_t lo, int64_t hi) {
    if (copy_bags(b, grad.data(), slotOff.data(), dst, lo, hi) == 0x7f800000u) finite.store(false, std::memory_order_relaxed);
  });
  for (int32_t s = 0; s < F; ++s) {
    grad[s].base = dst + slotOff[s];
    grad[s].stride = grad[s].dim;
  }
  return finite.load();
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
  u = cpu::UpdateContext{&opt, spec.seed, static_cast<uint64_t>(t1), adam_bias_correction(opt.beta1, t1),
                         adam_bias_correction(opt.beta2, t1)};
}

// ---- owner-partitioned grouping ----
// Each partition owns a contiguous range of 2^shift global rows. One pass counts the ids per partition
// (per chunk of bags), a second scatters every contribution into its partition, chunk by chunk in id
// order — so inside a partition contributions stay in id order. Then work chunks of whole partitions,
// taken by threads in turn, are each counting-sorted by row into a cache-resident copy (stable: id
// order kept) and streamed once: each row's contributions summed in registers, then one update per
// row, rows ascending, with the weights, state and gradient rows prefetched ahead (the same stream as
// the radix-sorted path). Each row's sum is the same sequence of fp32 additions as the sort's (id
// order), so the results are bitwise the same; it costs one scatter plus in-cache counting sorts
// instead of a full radix sort.

// Rows of a partition: 2^kMinRangeBits at least, and at most 2^kMaxPartitionBits partitions.
constexpr int kMinRangeBits = 8;
constexpr int kMaxPartitionBits = 12;
constexpr int kMaxRangeBits = 16;

using cpu::Contribution;
using cpu::PartitionEntry;
using cpu::SingleContribution;

// Pass A over bags [lo, hi): keys[i] for every id, counts per partition.
int64_t count_range(const PreparedBatch& b, const SlotRows* slot, uint32_t* keys, uint32_t* count, int shift, int64_t lo, int64_t hi) {
  return for_each_id_of(b, slot, lo, hi, [&](int64_t, int64_t i, uint64_t key) {
    keys[i] = static_cast<uint32_t>(key);
    ++count[keys[i] >> shift];
  });
}

// Pass B over bags [lo, hi): each id to out[cursor[its partition]++].
void scatter_ids(const PreparedBatch& b, const uint32_t* keys, uint32_t* cursor, PartitionEntry* out, int shift, int64_t lo, int64_t hi) {
  const int64_t* off = b.offsets.data();
  for (int64_t bag = lo; bag < hi; ++bag)
    for (int64_t i = off[bag]; i < off[bag + 1]; ++i)
      out[cursor[keys[i] >> shift]++] = PartitionEntry{keys[i], static_cast<uint32_t>(i), static_cast<uint32_t>(bag)};
}

struct PartitionArgs {
  const PartitionEntry* e;
  const uint32_t* partStart;  // [partitions + 1]
  int shift;
  const PreparedBatch* b;
  const GradSource* grad;     // per batch slot
  uint8_t* single;            // per id, written here: whether its row has no other contribution
  const uint64_t* tableEnd;   // per table: its first key past the end
  const RowTarget* target;    // per table
  cpu::UpdateContext uctx;
  bool sr;                    // stochastic rounding
};

inline Contribution contribution_of(const PartitionArgs& a, const PartitionEntry& e) {
  Contribution c;
  c.key = e.key;
  gradient_of(*a.b, a.grad[e.bag / static_cast<uint32_t>(a.b->B)], e.bag, e.pos, &c.g, &c.scale);
  return c;
}

constexpr uint32_t kSingleRow = 0xffffffffu;  // pos[] mark of a row with one contribution

// Marks the ids of partitions [pLo, pHi) whose row has no other contribution (a.single) and copies the
// contributions of the other rows into s.sorted sorted by row, stably (each row's contributions stay in
// id order): a counting sort per partition over its 2^shift rows, whose counters and touched-row bitmap
// stay in cache. Row u of the result (ascending) is s.rows[u], its contributions
// s.sorted[s.runStart[u], s.runStart[u + 1]). Returns the number of those rows.
inline uint32_t sort_partitions(const PartitionArgs& a, cpu::PartitionScratch& s, int64_t pLo, int64_t pHi) {
  const uint32_t words = ((uint32_t(1) << a.shift) + 63) / 64;
  uint64_t* __restrict seen = s.seen.data();  // all clear between partitions
  uint32_t* __restrict pos = s.pos.data();
  Contribution* __restrict out = s.sorted.data();
  uint32_t* __restrict rows = s.rows.data();
  uint32_t* __restrict runStart = s.runStart.data();
  uint32_t o = 0, u = 0;
  for (int64_t p = pLo; p < pHi; ++p) {
    const uint32_t begin = a.partStart[p], end = a.partStart[p + 1];
    if (end - begin <= 1) {
      if (end > begin) a.single[a.e[begin].pos] = 1;
      continue;
    }
    const uint32_t base = static_cast<uint32_t>(uint64_t(p) << a.shift);
    for (uint32_t j = begin; j < end; ++j) {
      const uint32_t local = a.e[j].key - base;
      const uint64_t bit = uint64_t(1) << (local & 63);
      if (!(seen[local >> 6] & bit)) {
        seen[local >> 6] |= bit;
        pos[local] = 0;
      }
      ++pos[local];
    }
    // each touched row's first slot, rows ascending (the bitmap is cleared on the way)
    for (uint32_t w = 0; w < words; ++w) {
      for (uint64_t bits = seen[w]; bits; bits &= bits - 1) {
        const uint32_t local = w * 64 + static_cast<uint32_t>(__builtin_ctzll(bits));
        const uint32_t n = pos[local];
        if (n == 1) {
          pos[local] = kSingleRow;
          continue;
        }
        rows[u] = base + local;
        runStart[u++] = o;
        pos[local] = o;
        o += n;
      }
      seen[w] = 0;
    }
    for (uint32_t j = begin; j < end; ++j) {
      const PartitionEntry e = a.e[j];
      uint32_t& slot = pos[e.key - base];
      a.single[e.pos] = slot == kSingleRow;
      if (slot != kSingleRow) out[slot++] = contribution_of(a, e);
    }
  }
  runStart[u] = o;
  return u;
}

// The compiled kernel (see cpu/isa.h): partitions [pLo, pHi) sorted by row, then one stream over the
// sorted contributions that sums each row's contributions (in id order) and updates the row once, rows
// ascending, with the weights, state and gradient rows prefetched ahead across partition boundaries.
EMBSHARD_CPU_KERNEL int64_t update_partitions(const PartitionArgs& a, cpu::PartitionScratch& s, int64_t pLo, int64_t pHi) {
  const int64_t U = sort_partitions(a, s, pLo, pHi);
  if (U == 0) return 0;
  const uint32_t* rows = s.rows.data();
  const uint32_t* runStart = s.runStart.data();
  const UpdateArgs<SortedContributions> u{{s.sorted.data()}, runStart[U], a.tableEnd, a.target, a.uctx, a.sr};
  float* acc = s.acc.data();
  // tables of the row being updated and of the row being prefetched
  size_t tbl = 0, ahead = 0;
  while (rows[0] >= a.tableEnd[tbl]) ++tbl;
  ahead = tbl;
  for (int64_t r = 0; r < std::min<int64_t>(kRowAhead, U); ++r) {
    while (rows[r] >= a.tableEnd[ahead]) ++ahead;
    prefetch_target<1, 0>(a.target[ahead], rows[r]);
  }
  for (int64_t r = 0; r < U; ++r) {
    if (r + kRowAhead < U) {
      while (rows[r + kRowAhead] >= a.tableEnd[ahead]) ++ahead;
      prefetch_target<1, 0>(a.target[ahead], rows[r + kRowAhead]);
    }
    const uint64_t key = rows[r];
    while (key >= a.tableEnd[tbl]) ++tbl;
    const RowTarget& t = a.target[tbl];
    accumulate(u, acc, runStart[r], runStart[r + 1], t.dim);
    update_one(a.uctx, a.sr, t, key - t.rowBase, acc, key);
  }
  return U;
}

// ---- rows with one contribution ----
// Most rows a batch touches get one contribution when ids are spread (uniform ids: over nine in ten).
// Their updates need no grouping: they run in id order, bag by bag, so the gradient rows are read in
// order (a bag's ids share its row) and the weights at random, which costs the memory system no more
// than ascending rows; only the rows with several contributions take the partitioned stream above.

constexpr int64_t kSingleAhead = 16;  // contributions ahead for weight/state prefetch
constexpr int64_t kSingleBags = 512;  // bags per list (their contributions stay in cache)

struct SingleArgs {
  const PreparedBatch* b;
  const GradSource* grad;     // per batch slot
  const uint32_t* slotTable;  // per batch slot: its table
  const uint32_t* keys;       // per id
  const uint8_t* single;      // per id
  const RowTarget* target;    // per table
  cpu::UpdateContext uctx;
  bool sr;
};

// acc = 0 + g · scale: the sum of a run of one contribution, as accumulate_run adds it.
template <uint32_t D>
inline void single_sum(float* __restrict acc, const float* __restrict g, float scale, uint32_t dim) {
  const uint32_t width = D ? D : dim;
  for (uint32_t c = 0; c < width; ++c) acc[c] = 0.0f + g[c] * scale;
}

// The compiled kernel (see cpu/isa.h): the single contributions of bags [lo, hi), listed kSingleBags
// bags at a time in id order, then each row updated once, the weights and state of the rows
// kSingleAhead contributions ahead prefetched. Returns the number of rows.
EMBSHARD_CPU_KERNEL int64_t update_singles(const SingleArgs& a, cpu::PartitionScratch& s, int64_t lo, int64_t hi) {
  const PreparedBatch& b = *a.b;
  const int64_t* off = b.offsets.data();
  SingleContribution* __restrict list = s.single.data();
  float* acc = s.acc.data();
  int64_t rows = 0;
  for (int64_t b0 = lo; b0 < hi; b0 += kSingleBags) {
    const int64_t b1 = std::min(hi, b0 + kSingleBags);
    int64_t n = 0;
    for (int64_t bag = b0; bag < b1; ++bag) {
      const int64_t slot = bag / b.B;
      const GradSource& g = a.grad[slot];
      const uint32_t table = a.slotTable[slot];
      for (int64_t i = off[bag]; i < off[bag + 1]; ++i) {
        SingleContribution& c = list[n];
        c.key = a.keys[i];
        c.table = table;
        gradient_of(b, g, bag, i, &c.g, &c.scale);
        n += a.single[i];
      }
    }
    for (int64_t j = 0; j < std::min(kSingleAhead, n); ++j) prefetch_target<0, 1>(a.target[list[j].table], list[j].key);
    for (int64_t j = 0; j < n; ++j) {
      if (j + kSingleAhead < n) prefetch_target<0, 1>(a.target[list[j + kSingleAhead].table], list[j + kSingleAhead].key);
      const SingleContribution& c = list[j];
      const RowTarget& t = a.target[c.table];
      cpu::with_row_width(t.dim, [&](auto D) { single_sum<D>(acc, c.g, c.scale, t.dim); });
      update_one(a.uctx, a.sr, t, c.key - t.rowBase, acc, c.key);
    }
    rows += n;
  }
  return rows;
}

}  // namespace

BackwardResult CpuEngine::backward(const PreparedBatch& b, const float* pooledGrad, const float* const* seqGrad) {
  const int64_t B = b.B;
  const int32_t F = b.F;
  const int64_t N = b.numIds();

  PhaseTimer timer("cpu backward", &backwardPhases_);
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
    if (fs.pooling == Pooling::None) grad[s] = GradSource{seqGrad[f], ts.dim, b.slotBegin(s), fs.pooling, ts.dim};
    else grad[s] = GradSource{pooledGrad + layout_.pooledCol[f], layout_.pooledDim, b.slotBegin(s), fs.pooling, ts.dim};
  }
  // a prepared batch holds every feature, so the copy reads every gradient value (the pooled array's
  // columns are the pooled features' widths, back to back)
  const bool finite = copy_gradients(b, grad, gradCopy_);
  timer.mark("copy+finite");
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
    return finite;
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
    timer.mark("keys");
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
    entries_.resize(N);
    single_.resize(N);
    parallel_for(chunks, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c) {
        auto [bl, bh] = bagsOf(c);
        scatter_ids(b, keys32_.data(), &counts_[static_cast<size_t>(c * parts)], entries_.data(), shift, bl, bh);
      }
    });
    timer.mark("partition");
    std::vector<uint32_t> slotTable(F);
    for (int32_t s = 0; s < F; ++s) slotTable[s] = spec_.features[b.feature[s]].table;
    const int64_t U = partitioned_update(b, grad.data(), slotTable.data(), shift, parts, timer);
    ++step_;
    return BackwardResult{false, U};
  }

  // radix-sorted grouping (collections too large for the partitions' in-cache counting sorts)
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
  timer.mark("keys");
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

// One exact update per touched row: first the rows with several contributions, partition by partition
// (work chunks are runs of whole partitions of about kChunkContributions contributions, whose sorted
// copy stays in cache, taken by threads in turn), then the rows with one, in id order (runs of bags
// taken by threads in turn). The two sets of rows are disjoint.
int64_t CpuEngine::partitioned_update(const PreparedBatch& b, const GradSource* grad, const uint32_t* slotTable, int shift,
                                      int64_t parts, PhaseTimer& timer) {
  std::vector<uint64_t> tableEnd;
  std::vector<RowTarget> target;
  cpu::UpdateContext u;
  uint32_t maxDim;
  update_targets(*this, tableEnd, target, u, maxDim);
  const PartitionArgs args{entries_.data(), partStart_.data(), shift, &b, grad, single_.data(), tableEnd.data(), target.data(), u,
                           spec_.optimizer.stochasticRounding};
  const int threads = pool_threads();
  // chunk k takes the partitions whose first contribution lies in [N·k / chunks, N·(k+1) / chunks); the
  // last also takes the empty partitions that start at N
  constexpr int64_t kChunkContributions = 1 << 14;
  const int64_t N = partStart_[parts];
  const int64_t chunks = std::max<int64_t>({int64_t(1), int64_t(threads) * 4, N / kChunkContributions});
  std::vector<int64_t> chunkPart(static_cast<size_t>(chunks + 1));
  uint32_t most = 0;
  for (int64_t k = 0; k <= chunks; ++k) {
    chunkPart[k] = k == chunks ? parts
                               : std::lower_bound(partStart_.begin(), partStart_.begin() + parts, static_cast<uint32_t>(N * k / chunks)) -
                                     partStart_.begin();
    if (k > 0) most = std::max(most, partStart_[chunkPart[k]] - partStart_[chunkPart[k - 1]]);
  }
  // every scratch buffer sized before the first row changes
  if (partScratch_.size() < static_cast<size_t>(threads)) partScratch_.resize(threads);
  for (cpu::PartitionScratch& s : partScratch_) {
    s.seen.assign(((size_t(1) << shift) + 63) / 64, 0);
    if (s.pos.size() < (size_t(1) << shift)) s.pos.resize(size_t(1) << shift);
    if (s.sorted.size() < most) s.sorted.resize(most);
    if (s.rows.size() < most) s.rows.resize(most);
    if (s.runStart.size() < size_t(most) + 1) s.runStart.resize(size_t(most) + 1);
    if (s.acc.size() < maxDim) s.acc.resize(maxDim);
  }
  // the single contributions' lists: at most the ids of kSingleBags bags
  const int64_t nBags = static_cast<int64_t>(b.F) * b.B;
  const int64_t singleChunks = (nBags + kSingleBags - 1) / kSingleBags;
  int64_t listMost = 0;
  for (int64_t k = 0; k < singleChunks; ++k)
    listMost = std::max(listMost, b.offsets[std::min(nBags, (k + 1) * kSingleBags)] - b.offsets[k * kSingleBags]);
  for (cpu::PartitionScratch& s : partScratch_)
    if (s.single.size() < static_cast<size_t>(listMost)) s.single.resize(static_cast<size_t>(listMost));
  std::atomic<int64_t> rows{0};
  parallel_tasks(chunks, [&](int t, int64_t k) {
    rows.fetch_add(update_partitions(args, partScratch_[t], chunkPart[k], chunkPart[k + 1]), std::memory_order_relaxed);
  });
  timer.mark("several");
  const SingleArgs single{&b, grad, slotTable, keys32_.data(), single_.data(), target.data(), u, spec_.optimizer.stochasticRounding};
  // runs of whole lists, several per thread, taken in turn
  constexpr int64_t kListsPerTask = 8;
  const int64_t tasks = (singleChunks + kListsPerTask - 1) / kListsPerTask;
  parallel_tasks(tasks, [&](int t, int64_t k) {
    rows.fetch_add(update_singles(single, partScratch_[t], k * kListsPerTask * kSingleBags, std::min(nBags, (k + 1) * kListsPerTask * kSingleBags)),
                   std::memory_order_relaxed);
  });
  timer.mark("single");
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
  const UpdateArgs<SortedPairs<Key>> args{{skeys, svals, gptr_.data(), gscale_.data()}, N, tableEnd.data(), target.data(), u, opt.stochasticRounding};

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
