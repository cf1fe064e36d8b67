// schedule.h — the schedule of the CUDA emulator: in order (blocks by index, threads by index, each thread
// running until it reaches a barrier or a warp intrinsic), or, with EMBSHARD_CUDA_EMU_SEED=<n> (n ≠ 0),
// a seeded random one: blocks in a random order, the next thread of a block picked at random among those
// ready, and a random preemption at each atomic. A result that changes with the seed depends on the
// schedule: a race or a missing barrier.
#pragma once
#include <atomic>
#include <cstdint>
#include <cstdlib>

namespace embshard::emu {

// SplitMix64: the schedule's random source (small, seedable, good enough to shuffle).
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t below(uint64_t n) { return n ? next() % n : 0; }
  bool coin() { return next() >> 63; }

 private:
  uint64_t s_;
};

// The schedule seed: 0 (in order) unless EMBSHARD_CUDA_EMU_SEED names another. Read once per process.
inline uint64_t schedule_seed() {
  static const uint64_t seed = [] {
    const char* s = std::getenv("EMBSHARD_CUDA_EMU_SEED");
    return s && *s ? std::strtoull(s, nullptr, 10) : 0ull;
  }();
  return seed;
}

// The random source of one launch: a function of the seed and the launch's number in this process.
inline Rng launch_rng() {
  static std::atomic<uint64_t> launches{0};
  Rng r(schedule_seed() * 0x2545f4914f6cdd1dull + launches.fetch_add(1, std::memory_order_relaxed));
  (void)r.next();
  return r;
}

}  // namespace embshard::emu
