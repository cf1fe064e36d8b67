// linear.cc — fully connected layer on gemm() (see linear.h).
#include "dense/linear.h"

#include "core/parallel.h"
#include "cpu/isa.h"
#include "dense/gemm.h"

namespace embshard::dense {

void linear_forward(const float* x, int64_t B, int64_t in, int64_t out, const float* W, const float* b, bool relu,
                    Precision precision, float* y) {
  GemmCall g = gemm_call(false, true, B, out, in, x, in, W, in, y, out);  // y = x·Wᵀ
  g.bias = b;
  g.relu = relu;
  g.precision = precision;
  gemm(g);
}

namespace {
// Columns [c0, c1) of m summed over its B rows in row order, compiled per ISA (cpu/isa.h): vectors run
// across columns, so each column's additions keep their order and every copy gives the same bits.
EMBSHARD_CPU_KERNEL void column_sums_range(const float* m, int64_t B, int64_t n, float* out, int64_t c0, int64_t c1) {
  for (int64_t c = c0; c < c1; ++c) out[c] = 0.0f;
  for (int64_t r = 0; r < B; ++r) {
    const float* row = m + r * n;
    for (int64_t c = c0; c < c1; ++c) out[c] += row[c];
  }
}
}  // namespace

void column_sums(const float* m, int64_t B, int64_t n, float* out) {
  // Parallel over columns; each column is summed over rows in order, so the result is thread-count free.
  parallel_for(n, 64, [&](int64_t c0, int64_t c1) { column_sums_range(m, B, n, out, c0, c1); });
}

void linear_backward(const float* x, const float* dy, int64_t B, int64_t in, int64_t out, const float* W, float* dW,
                     float* db, float* dx, Precision precision) {
  GemmCall w = gemm_call(true, false, out, in, B, dy, out, x, in, dW, in);  // dW = dyᵀ·x
  w.precision = precision;
  gemm(w);
  if (db) column_sums(dy, B, out, db);
  if (!dx) return;
  GemmCall d = gemm_call(false, false, B, in, out, dy, out, W, in, dx, in);  // dx = dy·W
  d.precision = precision;
  gemm(d);
}

}  // namespace embshard::dense
