// forward.cc — the CPU forward kernel: one parallel pass over every bag of every feature (all tables
// fused), software-prefetching the rows a fixed distance ahead in id order.
//   pooled[b, col_f : col_f + dim] = (Σ_{i in bag} w_i · row_i) / (mean ? len : 1),  zeros for empty bags
//   seq_f[i - begin_f] = row_i (fp32)
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/parallel.h"
#include "cpu/cpu_engine.h"
#include "cpu/row_ops.h"

namespace embshard {

namespace {

constexpr int64_t kPrefetch = 12;  // ids ahead

struct Slot {
  const uint8_t* base;
  uint64_t rowBytes;
  uint32_t dim;
  DType dtype;
  Pooling pooling;
  int64_t col;   // pooled column offset
  float* seq;    // sequence output (pooling none)
  int64_t begin; // first id of the slot
  int64_t end;
};

template <DType DT>
void pool_bag(const Slot& s, const uint64_t* rows, const float* weights, int64_t begin, int64_t end, float* out) {
  std::fill(out, out + s.dim, 0.0f);
  if (weights) {
    for (int64_t i = begin; i < end; ++i) cpu::acc_row_w<DT>(out, s.base + rows[i] * s.rowBytes, s.dim, weights[i]);
  } else {
    for (int64_t i = begin; i < end; ++i) cpu::acc_row<DT>(out, s.base + rows[i] * s.rowBytes, s.dim);
  }
  if (s.pooling == Pooling::Mean && end > begin) {
    const float len = static_cast<float>(end - begin);
    for (uint32_t c = 0; c < s.dim; ++c) out[c] /= len;
  }
}

template <DType DT>
void seq_bag(const Slot& s, const uint64_t* rows, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i)
    cpu::copy_row<DT>(s.seq + (i - s.begin) * s.dim, s.base + rows[i] * s.rowBytes, s.dim);
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
    slots[s] = Slot{table_weights(fs.table), layout_.tables[fs.table].rowBytes, ts.dim, ts.dtype, fs.pooling,
                    layout_.pooledCol[f], fs.pooling == Pooling::None ? seq[f] : nullptr, b.slotBegin(s), b.slotEnd(s)};
  }
  const int64_t pooledDim = layout_.pooledDim;
  const uint64_t* rows = b.rows.data();
  const int64_t* off = b.offsets.data();
  const int64_t N = b.numIds();

  parallel_for(static_cast<int64_t>(F) * B, 32, [&](int64_t lo, int64_t hi) {
    int32_t pfSlot = static_cast<int32_t>(lo / B);
    for (int64_t bag = lo; bag < hi; ++bag) {
      const int32_t si = static_cast<int32_t>(bag / B);
      const Slot& s = slots[si];
      const int64_t begin = off[bag], end = off[bag + 1];
      // prefetch the rows kPrefetch ids ahead of this bag's end (they belong to the next bags)
      for (int64_t j = std::max(begin, off[lo]) + kPrefetch; j < std::min(end + kPrefetch, N); ++j) {
        while (j >= slots[pfSlot].end) ++pfSlot;
        cpu::prefetch_row(slots[pfSlot].base + rows[j] * slots[pfSlot].rowBytes, slots[pfSlot].rowBytes);
      }
      if (s.pooling == Pooling::None) {
        switch (s.dtype) {
          case DType::F32: seq_bag<DType::F32>(s, rows, begin, end); break;
          case DType::F16: seq_bag<DType::F16>(s, rows, begin, end); break;
          case DType::BF16: seq_bag<DType::BF16>(s, rows, begin, end); break;
        }
      } else {
        float* out = pooled + (bag % B) * pooledDim + s.col;
        switch (s.dtype) {
          case DType::F32: pool_bag<DType::F32>(s, rows, b.weights, begin, end, out); break;
          case DType::F16: pool_bag<DType::F16>(s, rows, b.weights, begin, end, out); break;
          case DType::BF16: pool_bag<DType::BF16>(s, rows, b.weights, begin, end, out); break;
        }
      }
    }
  });
}

}  // namespace embshard
