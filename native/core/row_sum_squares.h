// row_sum_squares.h — the sum of squares of one row's gradient (rowwise Adagrad's s_row += mean(g²)),
// added in one fixed order that both backends follow, so the CPU and CUDA results are the same bits:
//   1. kSqLanes partial sums: lane j adds g[c]² for c = j, j + 16, j + 32, … in increasing c, from +0;
//   2. a fixed pairwise tree over the lanes: for h = 8, 4, 2, 1, lane j += lane j + h (j < h); lane 0 is
//      the sum.
// The order is chosen so that the CPU loop vectorises (sixteen independent accumulators, one AVX-512 or
// two AVX2 registers) and a CUDA warp computes the same lane partials with each thread's columns.
#pragma once
#include <cstdint>

#include "host_device.h"

namespace embshard {

constexpr int kSqLanes = 16;

// Step 2: the pairwise tree over the lane partials (the array is overwritten).
EMB_HD float sum_sq_lanes(float (&p)[kSqLanes]) {
  for (int h = kSqLanes / 2; h >= 1; h /= 2)
    for (int j = 0; j < h; ++j) p[j] += p[j + h];
  return p[0];
}

// Both steps over a contiguous row of `dim` floats.
EMB_HD float row_sum_squares(const float* g, uint32_t dim) {
  float p[kSqLanes];
  for (int j = 0; j < kSqLanes; ++j) p[j] = 0.0f;
  uint32_t c = 0;
  for (; c + kSqLanes <= dim; c += kSqLanes)
    for (int j = 0; j < kSqLanes; ++j) p[j] += g[c + j] * g[c + j];
  for (int j = 0; c + static_cast<uint32_t>(j) < dim; ++j) p[j] += g[c + j] * g[c + j];
  return sum_sq_lanes(p);
}

}  // namespace embshard
