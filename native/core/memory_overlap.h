// memory_overlap.h — the one test behind every "an output must be an array of its own" check: whether two
// byte ranges of one address space (host arrays, or buffers on one device) share a byte. An empty or
// absent range shares none.
#pragma once
#include <cstddef>
#include <cstdint>

namespace embshard {

inline bool ranges_overlap(const void* a, size_t aBytes, const void* b, size_t bBytes) {
  if (!a || !b || aBytes == 0 || bBytes == 0) return false;
  const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + bBytes && pb < pa + aBytes;
}

}  // namespace embshard
