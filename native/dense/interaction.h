// interaction.h — how the bottom-MLP output x [B × d] meets the pooled embeddings e [B × F·d]
// (feature f in columns f·d .. f·d+d-1, the collection's pooled layout):
//   dot:    T = [x; e_1; …; e_F] (n = F+1 vectors), out = [x, T_i·T_j for i = 1..n-1, j = 0..i-1]
//           (the strict lower triangle of T·Tᵀ, row by row, as in DLRM), width d + n(n-1)/2;
//   concat: out = [x, e], width d + F·d (the input of DCNv2 cross layers).
// The dot interaction runs as batched GEMMs (dense/gemm.h): Z_b = T_b·T_bᵀ forward, dT_b = (G_b + G_bᵀ)·T_b
// backward, with G_b the output gradient scattered into the strict lower triangle; `precision` is theirs.
#pragma once
#include <cstdint>

#include "dense/precision.h"

namespace embshard::dense {

inline int64_t dot_interaction_width(int64_t d, int64_t F) { return d + (F + 1) * F / 2; }

void dot_interaction_forward(const float* x, const float* e, int64_t B, int64_t d, int64_t F, Precision precision,
                             float* out);
// dx [B × d] and de [B × F·d] are overwritten.
void dot_interaction_backward(const float* x, const float* e, const float* dout, int64_t B, int64_t d, int64_t F,
                              Precision precision, float* dx, float* de);

// concat: x [B × dx], e [B × de] -> out [B × (dx + de)] and back.
void concat_forward(const float* x, const float* e, int64_t B, int64_t dx, int64_t de, float* out);
void concat_backward(const float* dout, int64_t B, int64_t dx, int64_t de, float* gx, float* ge);

}  // namespace embshard::dense
