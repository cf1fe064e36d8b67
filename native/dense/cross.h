// cross.h — DCNv2 low-rank cross layers (the MLPerf DLRM-DCNv2 interaction):
//   x_{l+1} = x0 ⊙ (U_l·(V_lᵀ·x_l) + b_l) + x_l,   l = 0 .. L-1,
// stored as two linears per layer: v = x_l·V_lᵀ with V_l [r × D] (no bias), w = v·U_lᵀ + b_l with
// U_l [D × r], b_l [D] (the bias fused into the second GEMM). The forward pass keeps x_l, v_l, w_l for the backward pass.
#pragma once
#include <cstdint>
#include <vector>

#include "dense/precision.h"

namespace embshard::dense {

struct CrossLayerParams {
  const float* V;  // [r × D]
  const float* U;  // [D × r]
  const float* b;  // [D]
};
struct CrossLayerGrads {
  float* V;
  float* U;
  float* b;
};

// Activations of one forward pass: xs[l] = x_l (l = 0..L, xs[0] a copy of the input), vs[l], ws[l].
struct CrossCache {
  std::vector<std::vector<float>> xs, vs, ws;
  void resize(int64_t B, int64_t D, int64_t r, int64_t L);
};

// out = x_L [B × D] (also cache.xs[L]).
void cross_forward(const float* x0, int64_t B, int64_t D, int64_t r, const std::vector<CrossLayerParams>& layers,
                   Precision precision, CrossCache& cache, float* out);
// dout [B × D] -> every layer's gradients (overwritten) and dx0 [B × D].
void cross_backward(const float* dout, int64_t B, int64_t D, int64_t r, const std::vector<CrossLayerParams>& layers,
                    Precision precision, const CrossCache& cache, const std::vector<CrossLayerGrads>& grads, float* dx0);

}  // namespace embshard::dense
