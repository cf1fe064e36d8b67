// cublas.h — the cuBLAS and cuBLASLt calls the dense model makes, for the emulator, with cuBLAS's
// signatures and semantics: column-major storage, op(X) = X or Xᵀ, leading dimensions, alpha / beta on
// the host (beta == 0 never reads C), handles bound to a stream; cublasLtMatmul with the DEFAULT, RELU,
// BIAS and RELU_BIAS epilogues (bias per row of D, then ReLU). Every product is a plain fp32 dot product
// over k in index order (cuBLAS's order is its own: the GPU suites compare with tolerances).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cuda/emu/runtime.h"

enum cublasStatus_t {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
};
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum cublasMath_t { CUBLAS_DEFAULT_MATH = 0, CUBLAS_TF32_TENSOR_OP_MATH = 3 };
enum cublasComputeType_t { CUBLAS_COMPUTE_32F = 68 };
enum cudaDataType_t { CUDA_R_32F = 0 };
enum cublasLtEpilogue_t {
  CUBLASLT_EPILOGUE_DEFAULT = 1,
  CUBLASLT_EPILOGUE_RELU = 2,
  CUBLASLT_EPILOGUE_BIAS = 4,
  CUBLASLT_EPILOGUE_RELU_BIAS = 6,
};
enum cublasLtMatmulDescAttributes_t {
  CUBLASLT_MATMUL_DESC_TRANSA = 3,
  CUBLASLT_MATMUL_DESC_TRANSB = 4,
  CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
  CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
};

namespace embshard::emu {

struct BlasHandle {
  cudaStream_t stream = nullptr;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
};
struct LtHandle {};
struct LtMatmulDesc {
  cublasOperation_t transA = CUBLAS_OP_N, transB = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const float* bias = nullptr;
};
struct LtLayout {
  uint64_t rows, cols;
  int64_t ld;
};

// Column-major C [m × n] = alpha·op(A)·op(B) + beta·C; op(A) is m × k, op(B) is k × n.
inline void sgemm_colmajor(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* A, int64_t lda, const float* B,
                           int64_t ldb, float beta, float* C, int64_t ldc) {
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < m; ++i) {
      float s = 0.0f;
      for (int64_t p = 0; p < k; ++p) s += (ta ? A[p + i * lda] : A[i + p * lda]) * (tb ? B[j + p * ldb] : B[p + j * ldb]);
      float& c = C[i + j * ldc];
      c = beta == 0.0f ? alpha * s : alpha * s + beta * c;
    }
}

}  // namespace embshard::emu

using cublasHandle_t = embshard::emu::BlasHandle*;
using cublasLtHandle_t = embshard::emu::LtHandle*;
using cublasLtMatmulDesc_t = embshard::emu::LtMatmulDesc*;
using cublasLtMatrixLayout_t = embshard::emu::LtLayout*;
struct cublasLtMatmulAlgo_t;

inline cublasStatus_t cublasCreate(cublasHandle_t* h) {
  *h = new embshard::emu::BlasHandle();
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasDestroy(cublasHandle_t h) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->math = m;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* alpha,
                                  const float* A, int lda, const float* B, int ldb, const float* beta, float* C, int ldc) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  const int rowsA = ta == CUBLAS_OP_N ? m : k, rowsB = tb == CUBLAS_OP_N ? k : n;
  if (m < 0 || n < 0 || k < 0 || lda < (rowsA > 1 ? rowsA : 1) || ldb < (rowsB > 1 ? rowsB : 1) || ldc < (m > 1 ? m : 1))
    return CUBLAS_STATUS_INVALID_VALUE;
  embshard::emu::sgemm_colmajor(ta == CUBLAS_OP_T, tb == CUBLAS_OP_T, m, n, k, *alpha, A, lda, B, ldb, *beta, C, ldc);
  return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
  *h = new embshard::emu::LtHandle();
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute, cudaDataType_t scale) {
  if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  *d = new embshard::emu::LtMatmulDesc();
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void* v, size_t bytes) {
  if (!d) return CUBLAS_STATUS_NOT_INITIALIZED;
  switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
      if (bytes != sizeof(cublasOperation_t)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&d->transA, v, bytes);
      break;
    case CUBLASLT_MATMUL_DESC_TRANSB:
      if (bytes != sizeof(cublasOperation_t)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&d->transB, v, bytes);
      break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      if (bytes != sizeof(cublasLtEpilogue_t)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&d->epilogue, v, bytes);
      break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      if (bytes != sizeof(const float*)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&d->bias, v, bytes);
      break;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType_t t, uint64_t rows, uint64_t cols, int64_t ld) {
  if (t != CUDA_R_32F || ld < static_cast<int64_t>(rows)) return CUBLAS_STATUS_INVALID_VALUE;
  *l = new embshard::emu::LtLayout{rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}
// D = epilogue(alpha·op(A)·op(B) + beta·C): bias added to every column (one value per row), then ReLU.
inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void* alpha, const void* A, cublasLtMatrixLayout_t la,
                                     const void* B, cublasLtMatrixLayout_t lb, const void* beta, const void* C, cublasLtMatrixLayout_t lc,
                                     void* D, cublasLtMatrixLayout_t ld, const cublasLtMatmulAlgo_t*, void*, size_t, cudaStream_t) {
  if (!h || !d || !la || !lb || !lc || !ld) return CUBLAS_STATUS_NOT_INITIALIZED;
  const bool ta = d->transA == CUBLAS_OP_T, tb = d->transB == CUBLAS_OP_T;
  const uint64_t m = ta ? la->cols : la->rows, k = ta ? la->rows : la->cols;
  const uint64_t kb = tb ? lb->cols : lb->rows, n = tb ? lb->rows : lb->cols;
  if (k != kb || ld->rows != m || ld->cols != n || lc->rows != m || lc->cols != n) return CUBLAS_STATUS_INVALID_VALUE;
  const bool bias = d->epilogue == CUBLASLT_EPILOGUE_BIAS || d->epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
  const bool relu = d->epilogue == CUBLASLT_EPILOGUE_RELU || d->epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
  if (bias && !d->bias) return CUBLAS_STATUS_INVALID_VALUE;
  float* out = static_cast<float*>(D);
  const float b = *static_cast<const float*>(beta);
  if (D != C)
    for (uint64_t j = 0; j < n; ++j)
      for (uint64_t i = 0; i < m; ++i) out[i + j * ld->ld] = b == 0.0f ? 0.0f : static_cast<const float*>(C)[i + j * lc->ld];
  embshard::emu::sgemm_colmajor(ta, tb, static_cast<int64_t>(m), static_cast<int64_t>(n), static_cast<int64_t>(k), *static_cast<const float*>(alpha),
                                static_cast<const float*>(A), la->ld, static_cast<const float*>(B), lb->ld, b, out, ld->ld);
  for (uint64_t j = 0; j < n; ++j)
    for (uint64_t i = 0; i < m; ++i) {
      float& v = out[i + j * ld->ld];
      if (bias) v += d->bias[i];
      if (relu) v = v > 0.0f ? v : 0.0f;
    }
  return CUBLAS_STATUS_SUCCESS;
}
