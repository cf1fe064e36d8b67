// gemm.h — the one matrix product the dense layers use: row-major C = alpha·op(A)·op(B) + beta·C.
// Runs on OpenBLAS (cblas_sgemm) when the build found it (EMBSHARD_WITH_BLAS), otherwise — or when
// the fallback is forced, as the tests do — on a cache-blocked kernel threaded with parallel_for.
// Both paths are deterministic: each output element is reduced over K in a fixed order by one thread.
#pragma once
#include <cstdint>

namespace embshard::dense {

// op(A) is [M × K], op(B) is [K × N], C is [M × N]; lda/ldb/ldc are row strides of the stored matrices.
void sgemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// The blocked fallback, always available (used directly by tests to check it against BLAS).
void sgemm_blocked(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                   int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

bool gemm_has_blas();
// true: sgemm always takes the blocked fallback (process-wide switch for tests and benchmarks).
void gemm_force_fallback(bool on);
bool gemm_fallback_forced();

}  // namespace embshard::dense
