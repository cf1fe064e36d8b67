// gemm.h — the one matrix product every dense layer runs, with its epilogue:
//   C_i = act(alpha·op(A_i)·op(B_i) + bias + beta·C_i)   for i < batch,   row-major,
// where op(X) is X or Xᵀ, bias [N] is added to every row and act is ReLU or the identity. Runs on the
// selected backend: oneDNN (matmul primitive, bias and ReLU fused as post-ops; bf16 on AVX-512 BF16 / AMX
// when the CPU has them), OpenBLAS (cblas_sgemm + a separate epilogue) or the naive cache-blocked kernel
// threaded with parallel_for. Every backend computes the same math, in fp32 or — Precision::BF16 — with
// the inputs rounded to bf16 and fp32 accumulation. Each backend is deterministic for a fixed thread count.
#pragma once
#include <cstdint>
#include <string>

#include "dense/precision.h"

namespace embshard::dense {

enum class GemmBackend : uint8_t { OneDNN = 0, OpenBLAS = 1, Naive = 2 };

struct GemmCall {
  bool transA = false, transB = false;
  int64_t M = 0, N = 0, K = 0;   // op(A) is [M × K], op(B) is [K × N], C is [M × N]
  const float* A = nullptr;      // row stride lda (of A as stored)
  int64_t lda = 0;
  const float* B = nullptr;
  int64_t ldb = 0;
  float* C = nullptr;
  int64_t ldc = 0;
  float alpha = 1.0f, beta = 0.0f;  // beta == 0 overwrites C (NaNs in C never leak through)
  const float* bias = nullptr;      // [N] or null
  bool relu = false;
  Precision precision = Precision::FP32;
  int64_t batch = 1;                          // independent products
  int64_t strideA = 0, strideB = 0, strideC = 0;  // elements between consecutive A_i / B_i / C_i
};

// The core of a call — C [M × N] = op(A)·op(B), strides as stored; callers set the epilogue, precision, batch.
inline GemmCall gemm_call(bool transA, bool transB, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                          const float* B, int64_t ldb, float* C, int64_t ldc) {
  GemmCall g;
  g.transA = transA;
  g.transB = transB;
  g.M = M;
  g.N = N;
  g.K = K;
  g.A = A;
  g.lda = lda;
  g.B = B;
  g.ldb = ldb;
  g.C = C;
  g.ldc = ldc;
  return g;
}

void gemm(const GemmCall& g);
// Runs g on one named backend (tests compare them); INVALID_ARGUMENT when it is not built in.
void gemm_on(GemmBackend b, const GemmCall& g);

// The plain product C = alpha·op(A)·op(B) + beta·C in fp32.
void sgemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

const char* gemm_backend_name(GemmBackend b);
bool gemm_backend_built(GemmBackend b);
// The backend gemm() runs: the forced one, else oneDNN when built, else OpenBLAS when built, else naive.
GemmBackend gemm_backend();
// Why the dense layers run on what they run on (one sentence for backends() and the slow-path warning).
std::string gemm_backend_reason();
// Forces gemm() onto one backend process-wide (tests and benchmarks); `none` = back to the default.
void gemm_force_backend(GemmBackend b);
void gemm_force_none();

}  // namespace embshard::dense
