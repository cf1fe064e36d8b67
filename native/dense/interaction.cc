// interaction.cc — DLRM dot interaction on batched GEMMs and plain concatenation (see interaction.h).
// Every output element is written by exactly one thread in a fixed order.
#include "dense/interaction.h"

#include <algorithm>
#include <vector>

#include "core/parallel.h"
#include "dense/gemm.h"

namespace embshard::dense {

namespace {
// T [B × n × d], T_b = [x_b; e_b] (n = F + 1 rows of width d), for the batched GEMMs.
void stack(const float* x, const float* e, int64_t B, int64_t d, int64_t F, float* T) {
  const int64_t n = F + 1;
  parallel_for(B, 64, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      std::copy(x + b * d, x + (b + 1) * d, T + b * n * d);
      std::copy(e + b * F * d, e + (b + 1) * F * d, T + b * n * d + d);
    }
  });
}


// One product per sample: operands and result of sample b start b·(rows × row stride) after sample 0's.
GemmCall batched(int64_t B, Precision precision, GemmCall g) {
  g.batch = B;
  g.strideA = (g.transA ? g.K : g.M) * g.lda;
  g.strideB = (g.transB ? g.N : g.K) * g.ldb;
  g.strideC = g.M * g.ldc;
  g.precision = precision;
  return g;
}
}  // namespace

void dot_interaction_forward(const float* x, const float* e, int64_t B, int64_t d, int64_t F, Precision precision,
                             float* out) {
  const int64_t n = F + 1, w = dot_interaction_width(d, F);
  // Scratch per calling thread; the lambdas below run on pool threads, so they see it through pointers.
  thread_local std::vector<float> Tbuf, Zbuf;
  Tbuf.resize(static_cast<size_t>(B * n * d));
  Zbuf.resize(static_cast<size_t>(B * n * n));
  float* T = Tbuf.data();
  float* Z = Zbuf.data();
  stack(x, e, B, d, F, T);
  gemm(batched(B, precision, gemm_call(false, true, n, n, d, T, d, T, d, Z, n)));  // Z_b [n × n] = T_b·T_bᵀ
  parallel_for(B, 64, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      float* o = out + b * w;
      const float* z = Z + b * n * n;
      std::copy(x + b * d, x + b * d + d, o);
      int64_t p = d;
      for (int64_t i = 1; i < n; ++i)
        for (int64_t j = 0; j < i; ++j) o[p++] = z[i * n + j];
    }
  });
}

void dot_interaction_backward(const float* x, const float* e, const float* dout, int64_t B, int64_t d, int64_t F,
                              Precision precision, float* dx, float* de) {
  const int64_t n = F + 1, w = dot_interaction_width(d, F);
  thread_local std::vector<float> Tbuf, Sbuf, dTbuf;  // as in the forward: reached through pointers
  Tbuf.resize(static_cast<size_t>(B * n * d));
  Sbuf.resize(static_cast<size_t>(B * n * n));
  dTbuf.resize(static_cast<size_t>(B * n * d));
  float* T = Tbuf.data();
  float* S = Sbuf.data();
  float* dT = dTbuf.data();
  stack(x, e, B, d, F, T);
  // S_b = G_b + G_bᵀ: symmetric, zero diagonal, since z_ij = T_i·T_j feeds both T_i and T_j.
  parallel_for(B, 64, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const float* g = dout + b * w;
      float* s = S + b * n * n;
      int64_t p = d;
      for (int64_t i = 0; i < n; ++i) s[i * n + i] = 0.0f;
      for (int64_t i = 1; i < n; ++i)
        for (int64_t j = 0; j < i; ++j) s[i * n + j] = s[j * n + i] = g[p++];
    }
  });
  gemm(batched(B, precision, gemm_call(false, false, n, d, n, S, n, T, d, dT, d)));  // dT_b [n × d] = S_b·T_b
  parallel_for(B, 64, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const float* t = dT + b * n * d;
      const float* g = dout + b * w;  // plus the pass-through copy of x
      for (int64_t k = 0; k < d; ++k) dx[b * d + k] = t[k] + g[k];
      std::copy(t + d, t + n * d, de + b * F * d);
    }
  });
}

void concat_forward(const float* x, const float* e, int64_t B, int64_t dx, int64_t de, float* out) {
  parallel_for(B, 64, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      float* o = out + b * (dx + de);
      std::copy(x + b * dx, x + (b + 1) * dx, o);
      std::copy(e + b * de, e + (b + 1) * de, o + dx);
    }
  });
}

void concat_backward(const float* dout, int64_t B, int64_t dx, int64_t de, float* gx, float* ge) {
  parallel_for(B, 64, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const float* g = dout + b * (dx + de);
      std::copy(g, g + dx, gx + b * dx);
      std::copy(g + dx, g + dx + de, ge + b * de);
    }
  });
}

}  // namespace embshard::dense
