// probe.h — a measurement of this machine's memory limits, run beside the benchmarks, on all pool
// threads over one large buffer: random row-gather bandwidth (rows summed in bags, every byte used, no
// output written: the forward kernel's reads alone), sequential read bandwidth, and the read-modify-
// write bandwidth of the distinct gathered rows in ascending order (the optimizer update's pattern).
#pragma once
#include <cstdint>

namespace embshard {

struct MemoryProbe {
  double gatherBytesPerSec = 0;
  double seqBytesPerSec = 0;
  double updateBytesPerSec = 0;  // (read + write) bytes per second
  int64_t updateRows = 0;        // distinct rows the update pass touched
  int threads = 0;
};

MemoryProbe probe_memory(uint64_t bufferBytes, uint32_t rowBytes, int64_t gathers, uint64_t seed);

}  // namespace embshard
