// gemm.cc — OpenBLAS dispatch and the blocked fallback GEMM (see gemm.h).
#include "dense/gemm.h"

#include <algorithm>
#include <atomic>
#include <vector>

#include "core/parallel.h"

#if defined(EMBSHARD_WITH_BLAS)
#include <cblas.h>
#endif

namespace embshard::dense {

namespace {
std::atomic<bool> g_force_fallback{false};

constexpr int64_t kBlockM = 32;   // output rows per task
constexpr int64_t kBlockK = 256;  // K panel kept hot in cache
constexpr int64_t kBlockN = 512;  // output columns per panel

// Packs op(B)[k0:k1, n0:n1] into a contiguous [kk × nn] panel so the inner loop runs unit-stride.
void pack_b(bool transB, const float* B, int64_t ldb, int64_t k0, int64_t k1, int64_t n0, int64_t n1, float* out) {
  int64_t nn = n1 - n0;
  for (int64_t k = k0; k < k1; ++k) {
    float* o = out + (k - k0) * nn;
    if (!transB) {
      const float* src = B + k * ldb + n0;
      std::copy(src, src + nn, o);
    } else {
      for (int64_t n = n0; n < n1; ++n) o[n - n0] = B[n * ldb + k];
    }
  }
}
}  // namespace

void sgemm_blocked(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                   int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  // C = beta·C first (beta == 0 overwrites, so NaNs in uninitialised C never leak through).
  parallel_for(M, 16, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      float* c = C + m * ldc;
      if (beta == 0.0f) std::fill(c, c + N, 0.0f);
      else if (beta != 1.0f)
        for (int64_t n = 0; n < N; ++n) c[n] *= beta;
    }
  });
  if (K <= 0 || alpha == 0.0f) return;
  std::vector<float> panel;
  for (int64_t n0 = 0; n0 < N; n0 += kBlockN) {
    int64_t n1 = std::min(N, n0 + kBlockN), nn = n1 - n0;
    for (int64_t k0 = 0; k0 < K; k0 += kBlockK) {
      int64_t k1 = std::min(K, k0 + kBlockK);
      panel.resize(static_cast<size_t>((k1 - k0) * nn));
      pack_b(transB, B, ldb, k0, k1, n0, n1, panel.data());
      const float* P = panel.data();
      int64_t blocks = (M + kBlockM - 1) / kBlockM;
      parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t blk = b0; blk < b1; ++blk) {
          int64_t m0 = blk * kBlockM, m1 = std::min(M, m0 + kBlockM);
          for (int64_t m = m0; m < m1; ++m) {
            float* c = C + m * ldc + n0;
            for (int64_t k = k0; k < k1; ++k) {
              float a = alpha * (transA ? A[k * lda + m] : A[m * lda + k]);
              if (a == 0.0f) continue;
              const float* p = P + (k - k0) * nn;
              for (int64_t n = 0; n < nn; ++n) c[n] += a * p[n];
            }
          }
        }
      });
    }
  }
}

void sgemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
#if defined(EMBSHARD_WITH_BLAS)
  if (!g_force_fallback.load(std::memory_order_relaxed)) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {  // BLAS leaves C untouched for K == 0 only when beta == 1; keep the fallback's meaning
      sgemm_blocked(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
      return;
    }
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
                static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, A, static_cast<int>(lda), B,
                static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
    return;
  }
#endif
  sgemm_blocked(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

bool gemm_has_blas() {
#if defined(EMBSHARD_WITH_BLAS)
  return true;
#else
  return false;
#endif
}

void gemm_force_fallback(bool on) { g_force_fallback.store(on); }
bool gemm_fallback_forced() { return g_force_fallback.load(); }

}  // namespace embshard::dense
