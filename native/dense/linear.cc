// linear.cc — fully connected layer on sgemm (see linear.h).
#include "dense/linear.h"

#include <algorithm>

#include "core/parallel.h"
#include "dense/gemm.h"

namespace embshard::dense {

void linear_forward(const float* x, int64_t B, int64_t in, int64_t out, const float* W, const float* b, float* y) {
  if (b) {
    parallel_for(B, 64, [&](int64_t b0, int64_t b1) {
      for (int64_t r = b0; r < b1; ++r) std::copy(b, b + out, y + r * out);
    });
    sgemm(false, true, B, out, in, 1.0f, x, in, W, in, 1.0f, y, out);
  } else {
    sgemm(false, true, B, out, in, 1.0f, x, in, W, in, 0.0f, y, out);
  }
}

void column_sums(const float* m, int64_t B, int64_t n, float* out) {
  // Parallel over columns; each column is summed over rows in order, so the result is thread-count free.
  parallel_for(n, 64, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) out[c] = 0.0f;
    for (int64_t r = 0; r < B; ++r) {
      const float* row = m + r * n;
      for (int64_t c = c0; c < c1; ++c) out[c] += row[c];
    }
  });
}

void linear_backward(const float* x, const float* dy, int64_t B, int64_t in, int64_t out, const float* W, float* dW,
                     float* db, float* dx) {
  sgemm(true, false, out, in, B, 1.0f, dy, out, x, in, 0.0f, dW, in);
  if (db) column_sums(dy, B, out, db);
  if (dx) sgemm(false, false, B, in, out, 1.0f, dy, out, W, in, 0.0f, dx, in);
}

}  // namespace embshard::dense
