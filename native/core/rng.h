// rng.h — counter-based random numbers (a SplitMix64 finaliser over (seed, stream, counter)).
// Every value depends only on its coordinates, so initialisation and stochastic rounding give the
// same numbers on any thread count and on both backends.
#pragma once
#include <cstdint>

#include "host_device.h"

namespace embshard {

EMB_HD uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

EMB_HD uint64_t hash3(uint64_t seed, uint64_t a, uint64_t b) {
  return mix64(mix64(mix64(seed) ^ a) ^ b);
}

// Uniform in [0, 1) with 24 random bits.
EMB_HD float uniform01(uint64_t h) { return static_cast<float>(h >> 40) * (1.0f / 16777216.0f); }

}  // namespace embshard
