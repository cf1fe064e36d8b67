// launch.h — the dense layers' GPU building blocks on device pointers: one row-major cuBLAS GEMM wrapper
// and the elementwise / interaction / loss / optimizer kernels, each launched on a given stream. Used
// by the whole-model class (model_cuda.cu) and by the single-layer host conveniences (dense_cuda.cu),
// so the layer tests check the very launchers the model runs. Same math and layouts as native/dense/*.cc.
// Deterministic: no atomics; every output element is written by one thread, reductions in a fixed order.
// Only included by .cu files of the CUDA addon.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace embshard::dense::cuda {

// cuBLAS status → embshard::Error("CUDA_ERROR") naming the call and the line.
void blas_check(cublasStatus_t s, const char* what, const char* file, int line);
#define EMB_BLAS_CHECK(expr) ::embshard::dense::cuda::blas_check((expr), #expr, __FILE__, __LINE__)

// Row-major C [M × N] = alpha·op(A)·op(B) + beta·C, lda/ldb/ldc as the CPU sgemm (dense/gemm.h), computed
// as the column-major product Cᵀ = op(B)ᵀ·op(A)ᵀ on the handle's stream.
void gemm(cublasHandle_t h, bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// Linear layer, as dense/linear.cc: y = x·Wᵀ + b (b may be null); W [out × in].
void linear_forward(cublasHandle_t h, cudaStream_t s, const float* x, int64_t B, int64_t in, int64_t out, const float* W,
                    const float* b, float* y);
// dW = dyᵀ·x, db = column sums of dy (may be null), dx = dy·W (may be null).
void linear_backward(cublasHandle_t h, cudaStream_t s, const float* x, const float* dy, int64_t B, int64_t in, int64_t out,
                     const float* W, float* dW, float* db, float* dx);

void relu_forward(float* y, int64_t n, cudaStream_t s);                                   // y = max(y, 0), in place
void relu_backward(const float* y, const float* dy, float* dx, int64_t n, cudaStream_t s);  // dx = y > 0 ? dy : 0
void column_sums(const float* m, int64_t B, int64_t n, float* out, cudaStream_t s);       // out[c] = Σ_r m[r, c], r in order

// DLRM dot interaction, as dense/interaction.cc: out [B × (d + (F+1)F/2)].
void dot_forward(const float* x, const float* e, int64_t B, int64_t d, int64_t F, float* out, cudaStream_t s);
void dot_backward(const float* x, const float* e, const float* dout, int64_t B, int64_t d, int64_t F, float* dx, float* de,
                  cudaStream_t s);
// Concatenation [x, e] per sample and its split backward.
void concat_forward(const float* x, const float* e, int64_t B, int64_t dx, int64_t de, float* out, cudaStream_t s);
void concat_backward(const float* dout, int64_t B, int64_t dx, int64_t de, float* gx, float* ge, cudaStream_t s);

// DCNv2 cross elementwise steps (dense/cross.cc): next = x0 ⊙ w + xl;  dw = g ⊙ x0, acc += g ⊙ w;  out = a + b.
void cross_combine(const float* x0, const float* w, const float* xl, float* next, int64_t n, cudaStream_t s);
void cross_grad(const float* g, const float* x0, const float* w, float* dw, float* acc, int64_t n, cudaStream_t s);
void add(const float* a, const float* b, float* out, int64_t n, cudaStream_t s);

// Per-sample BCE from logits in double (loss[b]) and dz[b] = ((σ(z) − y)/B)·scale, as dense/loss.cc.
void bce(const float* z, const float* y, int64_t B, float scale, double* loss, float* dz, cudaStream_t s);

// One dense optimizer update (type 0 sgd, 1 adagrad [n], 2 adam [2n] m then v), as dense/optimizer.cc.
void optimizer_step(int type, float lr, float eps, float beta1, float beta2, float wd, int64_t t, float* params,
                    const float* grads, float* state, int64_t n, cudaStream_t s);

}  // namespace embshard::dense::cuda
