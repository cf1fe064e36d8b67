// linear.h — the fully connected layer y = act(x·Wᵀ + b) (PyTorch layout: W is [out × in], row-major;
// act is ReLU or the identity, fused into the GEMM) and its backward pass. Batches are row-major
// [B × features]. Gradients are overwritten, not accumulated. `precision` is the GEMMs' (precision.h).
#pragma once
#include <cstdint>

#include "dense/precision.h"

namespace embshard::dense {

// y[B × out] = act(x[B × in]·Wᵀ + b); b may be null (no bias).
void linear_forward(const float* x, int64_t B, int64_t in, int64_t out, const float* W, const float* b, bool relu,
                    Precision precision, float* y);

// From dy[B × out] (the gradient after the activation's backward): dW[out × in] = dyᵀ·x; db[out] = Σ_b dy
// (fixed order; skipped when db is null); dx[B × in] = dy·W (skipped when dx is null).
void linear_backward(const float* x, const float* dy, int64_t B, int64_t in, int64_t out, const float* W, float* dW,
                     float* db, float* dx, Precision precision);

// out[n] = Σ_b m[b × n] over the rows of a [B × n] matrix, summed in row order (deterministic).
void column_sums(const float* m, int64_t B, int64_t n, float* out);

}  // namespace embshard::dense
