// value_scan.h — the one scan behind every check of a float array's values on the host: the first value
// outside a range (NaN is outside every range). A sharded rank's gradients are finite when none lies
// outside ±FLT_MAX (all_finite); a training batch's dense features and labels are checked the same way.
#pragma once
#include <algorithm>
#include <cfloat>
#include <cstdint>

namespace embshard {

// The index of the first of a[0, n) outside [lo, hi], or -1.
inline int64_t first_outside(const float* a, int64_t n, float lo, float hi) {
  // an OR over each chunk, then the chunk that has one is searched; the two comparisons are OR-ed as
  // bits, not with ||, so the loop vectorises (a short-circuit form runs ~4x slower)
  constexpr int64_t kChunk = 4096;
  for (int64_t c = 0; c < n; c += kChunk) {
    const int64_t end = std::min(n, c + kChunk);
    uint32_t bad = 0;
    for (int64_t i = c; i < end; ++i) {
      const float v = a[i];
      bad |= static_cast<uint32_t>(!(v >= lo)) | static_cast<uint32_t>(!(v <= hi));
    }
    if (!bad) continue;
    for (int64_t i = c; i < end; ++i)
      if (!(a[i] >= lo && a[i] <= hi)) return i;
  }
  return -1;
}

// Whether all n values are finite (no NaN, no ±Inf).
inline bool all_finite(const float* a, int64_t n) { return first_outside(a, n, -FLT_MAX, FLT_MAX) < 0; }

}  // namespace embshard
