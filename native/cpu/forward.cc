// forward.cc — the CPU forward kernel: one parallel pass over every bag of every feature (all tables
// fused), software-prefetching the row kPrefetch ids ahead of each id it reads (across bag and table
// boundaries; each task starts with a burst for its first ids).
//   pooled[b, col_f : col_f + dim] = (Σ_{i in bag} w_i · row_i) / (mean ? len : 1),  zeros for empty bags
//   seq_f[i - begin_f] = row_i (fp32)
// When the batch arrives unresolved (PreparedBatch::rows empty), ids are resolved and range-checked
// here while they are read — one pass over the ids instead of two; forward changes no state, so a bad
// id is reported after the pass exactly as prepare_batch would have reported it.
#include <algorithm>
#include <limits>
#include <mutex>
#include <type_traits>
#include <vector>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "core/errors.h"
#include "core/parallel.h"
#include "cpu/cpu_engine.h"
#include "cpu/isa.h"
#include "cpu/row_ops.h"

namespace embshard {

namespace {

constexpr int64_t kPrefetch = 32;  // ids ahead

struct Slot {
  const uint8_t* base;
  uint64_t rowBytes;
  uint64_t tableRows;
  bool modulo;
  uint32_t dim;
  DType dtype;
  Pooling pooling;
  int64_t col;    // pooled column offset
  float* seq;     // sequence output (pooling none)
  int64_t begin;  // first id of the slot
  int64_t end;
};

// Row of id i, or false for an id out of range (its contribution is skipped; the call then fails).
// Id = void: ids already resolved in b.rows; otherwise the raw id array's element type.
template <typename Id>
struct RowOf {
  const PreparedBatch& b;
  bool operator()(const Slot& s, int64_t i, uint64_t* row) const {
    if constexpr (std::is_void_v<Id>) {
      *row = b.rows[i];
      return true;
    } else {
      return resolve_id(static_cast<int64_t>(static_cast<const Id*>(b.rawIds)[i]), s.tableRows, s.modulo, row);
    }
  }
};

// Resolves each id once, kPrefetch positions before it is read: range-checks it, prefetches its row and
// keeps the row's address in a small ring, where the pooling loop picks it up (null: out of range).
template <typename RowOfT>
struct Ahead {
  static constexpr int64_t kRing = 64;  // > kPrefetch
  static_assert(kPrefetch < kRing, "the ring must hold every id between resolution and use");
  const std::vector<Slot>& slots;
  const RowOfT& rowOf;
  int64_t end;    // the task's last id + 1
  int32_t slot;   // slot of the id last resolved
  const uint8_t* ring[kRing] = {};
  // Resolves id i + kPrefetch (if it belongs to the task).
  void operator()(int64_t i) {
    const int64_t j = i + kPrefetch;
    if (j >= end) return;
    while (j >= slots[slot].end) ++slot;
    const Slot& s = slots[slot];
    uint64_t r;
    const uint8_t* p = nullptr;
    if (rowOf(s, j, &r)) {
      p = s.base + r * s.rowBytes;
      cpu::prefetch_row(p, s.rowBytes);
    }
    ring[j & (kRing - 1)] = p;
  }
  // The row of id i (resolved earlier), or null when the id is out of range.
  const uint8_t* row(int64_t i) const { return ring[i & (kRing - 1)]; }
};

// fn(i, row) for every id i of [begin, end) in order (rows resolved ahead); false when one was out of range.
template <typename RowOfT, typename F>
inline bool for_each_row(Ahead<RowOfT>& ahead, int64_t begin, int64_t end, F&& fn) {
  bool ok = true;
  for (int64_t i = begin; i < end; ++i) {
    ahead(i);
    const uint8_t* row = ahead.row(i);
    if (row) fn(i, row);
    else ok = false;
  }
  return ok;
}

template <DType DT, typename RowOfT>
bool pool_bag(const Slot& s, Ahead<RowOfT>& ahead, const float* weights, int64_t begin, int64_t end, float* dst,
              float* out) {
  // `out` is a cache-resident scratch row: accumulating straight into the (cold) output would stall on a
  // read-for-ownership miss at the start of every bag; the finished row is copied out once.
  std::fill(out, out + s.dim, 0.0f);
  const bool ok = for_each_row(ahead, begin, end, [&](int64_t i, const uint8_t* row) {
    if (weights) cpu::acc_row_w<DT>(out, row, s.dim, weights[i]);
    else cpu::acc_row<DT>(out, row, s.dim);
  });
  if (s.pooling == Pooling::Mean && end > begin) {
    const float len = static_cast<float>(end - begin);
    for (uint32_t c = 0; c < s.dim; ++c) out[c] /= len;
  }
  std::copy(out, out + s.dim, dst);
  return ok;
}

// The common case on its own: fp32 rows of width D, no weights.
template <uint32_t D, typename RowOfT>
bool pool_bag_f32(const Slot& s, Ahead<RowOfT>& ahead, int64_t begin, int64_t end, float* dst) {
  alignas(64) float acc[D] = {};
  const bool ok = for_each_row(ahead, begin, end,
                               [&](int64_t, const uint8_t* row) { cpu::acc_row<DType::F32>(acc, row, D); });
  if (s.pooling == Pooling::Mean && end > begin) {
    const float len = static_cast<float>(end - begin);
    for (uint32_t c = 0; c < D; ++c) acc[c] /= len;
  }
#if defined(__SSE2__)
  // Streaming stores: the pooled row is written once and read later by another layer, so filling the
  // cache line first (a read for ownership per line) would only cost bandwidth.
  if ((reinterpret_cast<uintptr_t>(dst) & 15) == 0) {
    for (uint32_t c = 0; c < D; c += 4) _mm_stream_ps(dst + c, _mm_load_ps(acc + c));
    return ok;
  }
#endif
  std::copy(acc, acc + D, dst);
  return ok;
}

template <DType DT, typename RowOfT>
bool seq_bag(const Slot& s, Ahead<RowOfT>& ahead, int64_t begin, int64_t end) {
  return for_each_row(ahead, begin, end,
                      [&](int64_t i, const uint8_t* row) { cpu::copy_row<DT>(s.seq + (i - s.begin) * s.dim, row, s.dim); });
}

// Bags [lo, hi); returns the first bag holding an out-of-range id, or -1.
template <typename R>
inline int64_t forward_range(const PreparedBatch& b, const std::vector<Slot>& slots, int64_t pooledDim, float* pooled,
                             const R& rowOf, float* scratch, int64_t lo, int64_t hi) {
  const int64_t B = b.B;
  const int64_t* off = b.offsets.data();
  int64_t firstBad = -1;
  const int64_t idLo = off[lo], idHi = off[hi];
  Ahead<R> ahead{slots, rowOf, idHi, static_cast<int32_t>(lo / B)};
  // the burst that starts the pipeline: rows of the task's first ids
  for (int64_t j = idLo - kPrefetch; j < std::min(idLo, idHi - kPrefetch); ++j) ahead(j);
  for (int64_t bag = lo; bag < hi; ++bag) {
    const int32_t si = static_cast<int32_t>(bag / B);
    const Slot& s = slots[si];
    const int64_t begin = off[bag], end = off[bag + 1];
    bool ok = true;
    if (s.pooling == Pooling::None) {
      switch (s.dtype) {
        case DType::F32: ok = seq_bag<DType::F32, R>(s, ahead, begin, end); break;
        case DType::F16: ok = seq_bag<DType::F16, R>(s, ahead, begin, end); break;
        case DType::BF16: ok = seq_bag<DType::BF16, R>(s, ahead, begin, end); break;
      }
    } else {
      float* out = pooled + (bag % B) * pooledDim + s.col;
      if (s.dtype == DType::F32 && !b.weights && (s.dim == 16 || s.dim == 32 || s.dim == 64 || s.dim == 128)) {
        switch (s.dim) {
          case 16: ok = pool_bag_f32<16, R>(s, ahead, begin, end, out); break;
          case 32: ok = pool_bag_f32<32, R>(s, ahead, begin, end, out); break;
          case 64: ok = pool_bag_f32<64, R>(s, ahead, begin, end, out); break;
          default: ok = pool_bag_f32<128, R>(s, ahead, begin, end, out); break;
        }
      } else {
        switch (s.dtype) {
          case DType::F32: ok = pool_bag<DType::F32, R>(s, ahead, b.weights, begin, end, out, scratch); break;
          case DType::F16: ok = pool_bag<DType::F16, R>(s, ahead, b.weights, begin, end, out, scratch); break;
          case DType::BF16: ok = pool_bag<DType::BF16, R>(s, ahead, b.weights, begin, end, out, scratch); break;
        }
      }
    }
    if (!ok && firstBad < 0) firstBad = bag;
  }
#if defined(__SSE2__)
  _mm_sfence();  // order the streaming stores before the task reports done
#endif
  return firstBad;
}

// One compiled kernel per id source (see cpu/isa.h).
#define EMBSHARD_FORWARD_RANGE(NAME, R)                                                                          \
  EMBSHARD_CPU_KERNEL int64_t NAME(const PreparedBatch& b, const std::vector<Slot>& slots, int64_t pooledDim,    \
                                   float* pooled, const R& rowOf, float* scratch, int64_t lo, int64_t hi) {      \
    return forward_range<R>(b, slots, pooledDim, pooled, rowOf, scratch, lo, hi);                                 \
  }
EMBSHARD_FORWARD_RANGE(forward_range_rows, RowOf<void>)
EMBSHARD_FORWARD_RANGE(forward_range_i64, RowOf<int64_t>)
EMBSHARD_FORWARD_RANGE(forward_range_i32, RowOf<int32_t>)
EMBSHARD_FORWARD_RANGE(forward_range_u32, RowOf<uint32_t>)
#undef EMBSHARD_FORWARD_RANGE

template <typename R>
using RangeFn = int64_t (*)(const PreparedBatch&, const std::vector<Slot>&, int64_t, float*, const R&, float*, int64_t, int64_t);

// The kernel over every bag; returns the first bag holding an out-of-range id (or max).
template <typename R>
int64_t forward_bags(const PreparedBatch& b, const std::vector<Slot>& slots, int64_t pooledDim, float* pooled, const R& rowOf,
                     RangeFn<R> range) {
  uint32_t maxDim = 0;
  for (const Slot& s : slots) maxDim = std::max(maxDim, s.dim);
  std::mutex badMu;
  int64_t badBag = std::numeric_limits<int64_t>::max();
  parallel_for(static_cast<int64_t>(b.F) * b.B, 32, [&](int64_t lo, int64_t hi) {
    std::vector<float> scratch(maxDim);
    const int64_t firstBad = range(b, slots, pooledDim, pooled, rowOf, scratch.data(), lo, hi);
    if (firstBad >= 0) {
      std::lock_guard<std::mutex> lk(badMu);
      badBag = std::min(badBag, firstBad);
    }
  });
  return badBag;
}

}  // namespace

void CpuEngine::forward(const PreparedBatch& b, float* pooled, float* const* seq) {
  const int64_t B = b.B;
  const int32_t F = b.F;
  std::vector<Slot> slots(F);
  for (int32_t s = 0; s < F; ++s) {
    uint32_t f = b.feature[s];
    const FeatureSpec& fs = spec_.features[f];
    const TableSpec& ts = spec_.tables[fs.table];
    slots[s] = Slot{table_weights(fs.table), layout_.tables[fs.table].rowBytes, ts.rows, ts.idPolicy == IdPolicy::Modulo,
                    ts.dim, ts.dtype, fs.pooling, layout_.pooledCol[f],
                    fs.pooling == Pooling::None ? seq[f] : nullptr, b.slotBegin(s), b.slotEnd(s)};
  }
  const int64_t pooledDim = layout_.pooledDim;
  const int64_t* off = b.offsets.data();
  int64_t badBag;
  if (!b.rows.empty()) badBag = forward_bags(b, slots, pooledDim, pooled, RowOf<void>{b}, &forward_range_rows);
  else if (b.idType == IdType::I64) badBag = forward_bags(b, slots, pooledDim, pooled, RowOf<int64_t>{b}, &forward_range_i64);
  else if (b.idType == IdType::I32) badBag = forward_bags(b, slots, pooledDim, pooled, RowOf<int32_t>{b}, &forward_range_i32);
  else badBag = forward_bags(b, slots, pooledDim, pooled, RowOf<uint32_t>{b}, &forward_range_u32);
  if (badBag != std::numeric_limits<int64_t>::max()) {
    // the first bad id overall lies in the first bad bag (bags are in id order)
    const int32_t s = static_cast<int32_t>(badBag / B);
    uint64_t r;
    for (int64_t i = off[badBag]; i < off[badBag + 1]; ++i)
      if (!resolve_id(raw_id(b, i), slots[s].tableRows, slots[s].modulo, &r)) fail_id_out_of_range(spec_, b, s, i);
  }
}

}  // namespace embshard
