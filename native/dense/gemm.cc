// gemm.cc — backend choice for gemm() and its OpenBLAS and naive paths (see gemm.h; oneDNN is in
// gemm_onednn.cc). The OpenBLAS and naive paths run the product per batch entry, then the epilogue
// (bias, ReLU) as a separate pass; bf16 rounds the inputs into scratch first.
#include "dense/gemm.h"

#include <algorithm>
#include <atomic>
#include <vector>

#include "core/errors.h"
#include "core/parallel.h"
#include "dense/gemm_onednn.h"

#if defined(EMBSHARD_WITH_BLAS)
#include <cblas.h>
#endif

namespace embshard::dense {

namespace {
std::atomic<int> g_forced{-1};

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

// C = beta·C (beta == 0 overwrites).
void scale_c(int64_t M, int64_t N, float beta, float* C, int64_t ldc) {
  parallel_for(M, 16, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      float* c = C + m * ldc;
      if (beta == 0.0f) std::fill(c, c + N, 0.0f);
      else if (beta != 1.0f)
        for (int64_t n = 0; n < N; ++n) c[n] *= beta;
    }
  });
}

// Cache-blocked C += alpha·op(A)·op(B); each output element is reduced over K in order by one thread.
void blocked_accumulate(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                        int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc) {
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
              // no shortcut for a == 0: 0·NaN and 0·Inf are NaN, as on the other backends, so a non-finite
              // input reaches the result (a masked sample's NaN features reach its weight gradients)
              float a = alpha * (transA ? A[k * lda + m] : A[m * lda + k]);
              const float* p = P + (k - k0) * nn;
              for (int64_t n = 0; n < nn; ++n) c[n] += a * p[n];
            }
          }
        }
      });
    }
  }
}

// One fp32 product C = alpha·op(A)·op(B) + beta·C on OpenBLAS or the blocked kernel.
void plain_product(bool blas, bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                   int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
#if defined(EMBSHARD_WITH_BLAS)
  if (blas && K > 0) {
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
                static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, A, static_cast<int>(lda), B,
                static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
    return;
  }
#endif
  scale_c(M, N, beta, C, ldc);
  if (K > 0 && alpha != 0.0f) blocked_accumulate(transA, transB, M, N, K, alpha, A, lda, B, ldb, C, ldc);
}

// Elements spanned by a (batch of) stored [rows × cols] operand(s) with row stride ld.
int64_t extent(int64_t batch, int64_t stride, int64_t rows, int64_t cols, int64_t ld) {
  return (batch - 1) * stride + (rows - 1) * ld + cols;
}

// The OpenBLAS / naive path of gemm(): rounds bf16 inputs, runs each product, then the epilogue.
void host_gemm(bool blas, const GemmCall& g) {
  const float* A = g.A;
  const float* B = g.B;
  std::vector<float> a16, b16;
  if (g.precision == Precision::BF16 && g.K > 0) {
    a16.resize(static_cast<size_t>(extent(g.batch, g.strideA, g.transA ? g.K : g.M, g.transA ? g.M : g.K, g.lda)));
    b16.resize(static_cast<size_t>(extent(g.batch, g.strideB, g.transB ? g.N : g.K, g.transB ? g.K : g.N, g.ldb)));
    round_to_bf16(g.A, static_cast<int64_t>(a16.size()), a16.data());
    round_to_bf16(g.B, static_cast<int64_t>(b16.size()), b16.data());
    A = a16.data();
    B = b16.data();
  }
  auto product = [&](int64_t i) {
    plain_product(blas, g.transA, g.transB, g.M, g.N, g.K, g.alpha, A + i * g.strideA, g.lda, B + i * g.strideB, g.ldb,
                  g.beta, g.C + i * g.strideC, g.ldc);
  };
  if (g.batch == 1) product(0);
  else  // many small products: one per task (the inner parallel regions then run inline)
    parallel_for(g.batch, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) product(i);
    });
  if (!g.bias && !g.relu) return;
  parallel_for(g.batch * g.M, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* c = g.C + (r / g.M) * g.strideC + (r % g.M) * g.ldc;
      if (g.bias)
        for (int64_t n = 0; n < g.N; ++n) c[n] += g.bias[n];
      if (g.relu)
        for (int64_t n = 0; n < g.N; ++n) c[n] = c[n] > 0.0f ? c[n] : 0.0f;
    }
  });
}

void check_call(const GemmCall& g) {
  if (g.bias && g.alpha != 1.0f) fail("INVALID_ARGUMENT", "gemm: a fused bias needs alpha == 1");
  if (g.batch < 1) fail("INVALID_ARGUMENT", "gemm: batch must be >= 1");
}
}  // namespace

void gemm_on(GemmBackend b, const GemmCall& g) {
  check_call(g);
  if (!gemm_backend_built(b)) fail("INVALID_ARGUMENT", "gemm: the %s backend is not built in", gemm_backend_name(b));
  if (g.M <= 0 || g.N <= 0) return;
  // oneDNN takes K > 0 only; K == 0 (C = beta·C + bias) and kernels oneDNN lacks on this CPU run on OpenBLAS
  // when built, else on the naive kernel.
  if (b == GemmBackend::OneDNN && g.K > 0 && onednn_gemm(g)) return;
  const bool blas = b == GemmBackend::OpenBLAS || (b == GemmBackend::OneDNN && gemm_backend_built(GemmBackend::OpenBLAS));
  host_gemm(blas, g);
}

void gemm(const GemmCall& g) { gemm_on(gemm_backend(), g); }

void sgemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  GemmCall g = gemm_call(transA, transB, M, N, K, A, lda, B, ldb, C, ldc);
  g.alpha = alpha;
  g.beta = beta;
  gemm(g);
}

const char* gemm_backend_name(GemmBackend b) {
  switch (b) {
    case GemmBackend::OneDNN: return "onednn";
    case GemmBackend::OpenBLAS: return "openblas";
    default: return "naive";
  }
}

bool gemm_backend_built(GemmBackend b) {
  switch (b) {
    case GemmBackend::OneDNN: return onednn_built();
#if defined(EMBSHARD_WITH_BLAS)
    case GemmBackend::OpenBLAS: return true;
#else
    case GemmBackend::OpenBLAS: return false;
#endif
    default: return true;
  }
}

GemmBackend gemm_backend() {
  int f = g_forced.load(std::memory_order_relaxed);
  if (f >= 0) return static_cast<GemmBackend>(f);
  if (gemm_backend_built(GemmBackend::OneDNN)) return GemmBackend::OneDNN;
  if (gemm_backend_built(GemmBackend::OpenBLAS)) return GemmBackend::OpenBLAS;
  return GemmBackend::Naive;
}

std::string gemm_backend_reason() {
  GemmBackend b = gemm_backend();
  if (g_forced.load() >= 0) return std::string("forced onto ") + gemm_backend_name(b);
  if (b == GemmBackend::OneDNN) return onednn_description();
  std::string why = "built without oneDNN (install libdnnl-dev and rebuild)";
  if (b == GemmBackend::OpenBLAS) return why + "; OpenBLAS GEMMs with a separate bias/ReLU pass, no bf16 kernels";
  return why + " and without OpenBLAS (libopenblas-dev): a naive blocked GEMM, several times slower";
}

void gemm_force_backend(GemmBackend b) {
  if (!gemm_backend_built(b)) fail("INVALID_ARGUMENT", "the %s GEMM backend is not built in", gemm_backend_name(b));
  g_forced.store(static_cast<int>(b));
}
void gemm_force_none() { g_forced.store(-1); }

}  // namespace embshard::dense
