// probe.h — a measurement of this machine's memory limits, run beside the benchmarks: random row-gather
// bandwidth (the forward kernel's access pattern with a perfect, bag-free loop) and sequential read
// bandwidth, both on all pool threads over one large buffer.
#pragma once
#include <cstdint>

namespace embshard {

struct MemoryProbe {
  double gatherBytesPerSec = 0;
  double seqBytesPerSec = 0;
  int threads = 0;
};

MemoryProbe probe_memory(uint64_t bufferBytes, uint32_t rowBytes, int64_t gathers, uint64_t seed);

}  // namespace embshard
