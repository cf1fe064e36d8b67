// probe.cc — see probe.h. Each measurement is the best of a few loop variants (prefetch distance and
// cache hint), each timed as the median of kReps passes, so the probe reports what this machine can do
// rather than what one guess at a loop does. The gather and update loops are compiled for the best ISA
// the machine has (cpu/isa.h), like the kernels they are compared with.
#include "cpu/probe.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <vector>

#include "core/parallel.h"
#include "core/rng.h"
#include "cpu/arena.h"
#include "cpu/isa.h"
#include "cpu/row_ops.h"

namespace embshard {

namespace {

constexpr int64_t kBag = 20;  // rows summed per output, as in the benchmark's bags
constexpr int kReps = 5;

// Sums rows idx[lo..hi) in bags of kBag; every loaded float is consumed (folded into the returned
// checksum), so no load can be optimised away.
template <int Hint, int64_t Ahead, uint32_t FixedDim>
inline float gather_sum(const uint8_t* buf, const uint64_t* idx, uint32_t rowBytes, int64_t lo, int64_t hi) {
  const uint32_t dim = FixedDim ? FixedDim : rowBytes / 4;
  float acc[FixedDim ? FixedDim : 1024];
  float sink[FixedDim ? FixedDim : 1024];
  std::fill(sink, sink + dim, 0.0f);
  for (int64_t j = lo; j < std::min(lo + Ahead, hi); ++j) cpu::prefetch_lines<0, Hint>(buf + idx[j] * rowBytes, rowBytes);
  for (int64_t b = lo; b < hi; b += kBag) {
    std::fill(acc, acc + dim, 0.0f);
    for (int64_t i = b; i < std::min(b + kBag, hi); ++i) {
      if (i + Ahead < hi) cpu::prefetch_lines<0, Hint>(buf + idx[i + Ahead] * rowBytes, rowBytes);
      const float* r = reinterpret_cast<const float*>(buf + idx[i] * rowBytes);
      for (uint32_t c = 0; c < dim; ++c) acc[c] += r[c];
    }
    for (uint32_t c = 0; c < dim; ++c) sink[c] += acc[c];
  }
  float t = 0;
  for (uint32_t c = 0; c < dim; ++c) t += sink[c];
  return t;
}

// Read-modify-write of rows idx[lo..hi) (the optimizer update's pattern): row -= 0.001 · g.
template <int Hint, int64_t Ahead>
inline void update_rows(uint8_t* buf, const uint64_t* idx, uint32_t rowBytes, int64_t lo, int64_t hi) {
  const uint32_t dim = rowBytes / 4;
  for (int64_t j = lo; j < std::min(lo + Ahead, hi); ++j) cpu::prefetch_lines<0, Hint>(buf + idx[j] * rowBytes, rowBytes);
  for (int64_t i = lo; i < hi; ++i) {
    if (i + Ahead < hi) cpu::prefetch_lines<0, Hint>(buf + idx[i + Ahead] * rowBytes, rowBytes);
    float* r = reinterpret_cast<float*>(buf + idx[i] * rowBytes);
    for (uint32_t c = 0; c < dim; ++c) r[c] -= 0.001f * static_cast<float>(c & 7);
  }
}

using GatherFn = float (*)(const uint8_t*, const uint64_t*, uint32_t, int64_t, int64_t);
using UpdateFn = void (*)(uint8_t*, const uint64_t*, uint32_t, int64_t, int64_t);

#define EMBSHARD_GATHER(NAME, HINT, AHEAD)                                                                   \
  EMBSHARD_CPU_KERNEL float NAME(const uint8_t* buf, const uint64_t* idx, uint32_t rowBytes, int64_t lo, int64_t hi) { \
    return rowBytes == 256 ? gather_sum<HINT, AHEAD, 64>(buf, idx, rowBytes, lo, hi)                            \
                           : gather_sum<HINT, AHEAD, 0>(buf, idx, rowBytes, lo, hi);                            \
  }
EMBSHARD_GATHER(gather_nta_8, 0, 8)
EMBSHARD_GATHER(gather_nta_16, 0, 16)
EMBSHARD_GATHER(gather_nta_32, 0, 32)
EMBSHARD_GATHER(gather_t2_8, 1, 8)
EMBSHARD_GATHER(gather_t2_16, 1, 16)
EMBSHARD_GATHER(gather_t2_32, 1, 32)
#undef EMBSHARD_GATHER

#define EMBSHARD_UPDATE(NAME, HINT, AHEAD)                                                                   \
  EMBSHARD_CPU_KERNEL void NAME(uint8_t* buf, const uint64_t* idx, uint32_t rowBytes, int64_t lo, int64_t hi) { \
    update_rows<HINT, AHEAD>(buf, idx, rowBytes, lo, hi);                                                      \
  }
EMBSHARD_UPDATE(update_nta_8, 0, 8)
EMBSHARD_UPDATE(update_nta_16, 0, 16)
EMBSHARD_UPDATE(update_t2_8, 1, 8)
EMBSHARD_UPDATE(update_t2_16, 1, 16)
#undef EMBSHARD_UPDATE

double median_seconds(const std::function<void()>& pass) {
  using clk = std::chrono::steady_clock;
  pass();  // warm-up
  std::vector<double> t;
  for (int rep = 0; rep < kReps; ++rep) {
    auto t0 = clk::now();
    pass();
    t.push_back(std::chrono::duration<double>(clk::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

MemoryProbe probe_memory(uint64_t bufferBytes, uint32_t rowBytes, int64_t gathers, uint64_t seed) {
  rowBytes = std::min<uint32_t>(4096, std::max<uint32_t>(4, rowBytes & ~3u));
  const uint64_t nRows = bufferBytes / rowBytes;
  HostArena buf(nRows * rowBytes, "the memory probe buffer");
  // touch every page (and give the rows non-zero content)
  parallel_for(static_cast<int64_t>(nRows), 1 << 14, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      float* row = reinterpret_cast<float*>(buf.data() + static_cast<uint64_t>(r) * rowBytes);
      for (uint32_t c = 0; c < rowBytes / 4; ++c) row[c] = static_cast<float>((r + c) & 7);
    }
  });
  std::vector<uint64_t> idx(static_cast<size_t>(gathers));
  parallel_for(gathers, 1 << 16, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) idx[i] = mix64(seed + static_cast<uint64_t>(i)) % nRows;
  });
  std::atomic<uint64_t> sink{0};
  MemoryProbe out;
  out.threads = pool_threads();

  // 1. random row gather: the best variant
  double best = 1e30;
  for (GatherFn fn : {&gather_nta_8, &gather_nta_16, &gather_nta_32, &gather_t2_8, &gather_t2_16, &gather_t2_32}) {
    best = std::min(best, median_seconds([&] {
      parallel_for(gathers, 1 << 14, [&](int64_t lo, int64_t hi) {
        sink.fetch_add(static_cast<uint64_t>(fn(buf.data(), idx.data(), rowBytes, lo, hi)), std::memory_order_relaxed);
      });
    }));
  }
  out.gatherBytesPerSec = static_cast<double>(gathers) * rowBytes / best;

  // 2. sequential read
  const int64_t nFloats = static_cast<int64_t>(nRows * rowBytes / 4);
  const float* fl = reinterpret_cast<const float*>(buf.data());
  const double seq = median_seconds([&] {
    parallel_for(nFloats, 1 << 20, [&](int64_t lo, int64_t hi) {
      float s[16] = {0};
      int64_t i = lo;
      for (; i + 16 <= hi; i += 16)
        for (int k = 0; k < 16; ++k) s[k] += fl[i + k];
      float t = 0;
      for (int k = 0; k < 16; ++k) t += s[k];
      sink.fetch_add(static_cast<uint64_t>(t), std::memory_order_relaxed);
    });
  });
  out.seqBytesPerSec = static_cast<double>(nRows) * rowBytes / seq;

  // 3. read-modify-write of the distinct rows among the gathers, in ascending order (the pattern of
  //    the optimizer update after the sort); bytes = read + write
  std::vector<uint64_t> rows(idx);
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  const int64_t U = static_cast<int64_t>(rows.size());
  best = 1e30;
  for (UpdateFn fn : {&update_nta_8, &update_nta_16, &update_t2_8, &update_t2_16}) {
    best = std::min(best, median_seconds([&] {
      parallel_for(U, 1 << 14, [&](int64_t lo, int64_t hi) { fn(buf.data(), rows.data(), rowBytes, lo, hi); });
    }));
  }
  out.updateRows = U;
  out.updateBytesPerSec = static_cast<double>(U) * rowBytes * 2 / best;
  return out;
}

}  // namespace embshard
