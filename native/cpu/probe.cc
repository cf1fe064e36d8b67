// probe.cc — see probe.h.
#include "cpu/probe.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <vector>

#include "core/parallel.h"
#include "core/rng.h"
#include "cpu/arena.h"
#include "cpu/row_ops.h"

namespace embshard {

MemoryProbe probe_memory(uint64_t bufferBytes, uint32_t rowBytes, int64_t gathers, uint64_t seed) {
  rowBytes = std::max<uint32_t>(4, rowBytes & ~3u);
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
  const uint32_t dim = rowBytes / 4;
  constexpr int64_t kPrefetch = 12;
  constexpr int64_t kBag = 20;
  std::atomic<uint64_t> sink{0};
  auto gather_pass = [&] {
    parallel_for(gathers, 1 << 14, [&](int64_t lo, int64_t hi) {
      std::vector<float> acc(dim, 0.0f);
      for (int64_t i = lo; i < hi; ++i) {
        if (i + kPrefetch < hi) cpu::prefetch_row(buf.data() + idx[i + kPrefetch] * rowBytes, rowBytes);
        cpu::acc_row<DType::F32>(acc.data(), buf.data() + idx[i] * rowBytes, dim);
        if ((i - lo) % kBag == kBag - 1) std::fill(acc.begin(), acc.end(), 0.0f);
      }
      sink.fetch_add(static_cast<uint64_t>(acc[0]));
    });
  };
  using clk = std::chrono::steady_clock;
  MemoryProbe out;
  out.threads = pool_threads();
  // Median of kReps timed passes after a warm-up: the same statistic the benchmarks report for kernels.
  constexpr int kReps = 5;
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  gather_pass();  // warm-up
  std::vector<double> times;
  for (int rep = 0; rep < kReps; ++rep) {
    auto t0 = clk::now();
    gather_pass();
    times.push_back(std::chrono::duration<double>(clk::now() - t0).count());
  }
  out.gatherBytesPerSec = static_cast<double>(gathers) * rowBytes / median(times);

  const int64_t nFloats = static_cast<int64_t>(nRows * rowBytes / 4);
  const float* fl = reinterpret_cast<const float*>(buf.data());
  times.clear();
  for (int rep = 0; rep < kReps; ++rep) {
    auto t0 = clk::now();
    parallel_for(nFloats, 1 << 20, [&](int64_t lo, int64_t hi) {
      float s[16] = {0};
      int64_t i = lo;
      for (; i + 16 <= hi; i += 16)
        for (int k = 0; k < 16; ++k) s[k] += fl[i + k];
      float t = 0;
      for (int k = 0; k < 16; ++k) t += s[k];
      sink.fetch_add(static_cast<uint64_t>(t));
    });
    times.push_back(std::chrono::duration<double>(clk::now() - t0).count());
  }
  out.seqBytesPerSec = static_cast<double>(nRows) * rowBytes / median(times);
  return out;
}

}  // namespace embshard
