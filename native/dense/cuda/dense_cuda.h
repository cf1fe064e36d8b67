// dense_cuda.h — the dense layers on the GPU (cuBLAS / cuBLASLt GEMMs and elementwise kernels), twins of
// native/dense/*.cc with the same math and layouts. Device-pointer launchers on the current device and
// a given stream, plus host-array conveniences (copy in, run, copy out) used by the `denseCudaOps`
// binding to check every kernel against the same references as the CPU layers. Only compiled into
// embshard_cuda.node. Deterministic: no atomics; every output element is reduced by one thread in order.
#pragma once
#include <cstdint>

namespace embshard::dense::cuda {

// ---- host-array conveniences (synchronous; throw embshard::Error CUDA_ERROR / ALLOC_FAILED) ----
bool device_available();
// Row-major C = alpha·op(A)·op(B) + beta·C through cublasSgemm (lda/ldb/ldc as the CPU sgemm).
void gemm_host(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
               const float* B, float beta, float* C);
// y = x·Wᵀ + b (then ReLU when relu) through one cublasLtMatmul with a BIAS / RELU_BIAS epilogue.
void linear_forward_host(const float* x, int64_t B, int64_t in, int64_t out, const float* W, const float* b, bool relu,
                         float* y);
void linear_backward_host(const float* x, const float* dy, int64_t B, int64_t in, int64_t out, const float* W, float* dW,
                          float* db, float* dx);
void relu_backward_host(const float* y, const float* dy, float* dx, int64_t n);
void dot_interaction_forward_host(const float* x, const float* e, int64_t B, int64_t d, int64_t F, float* out);
void dot_interaction_backward_host(const float* x, const float* e, const float* dout, int64_t B, int64_t d, int64_t F,
                                   float* dx, float* de);
// Mean BCE from logits; dz = (σ(z) − y)/B.
double bce_host(const float* z, const float* y, int64_t B, float* dz);
// type: 0 sgd, 1 adagrad, 2 adam (state as the CPU optimizer).
void optimizer_step_host(int type, float lr, float eps, float beta1, float beta2, float wd, int64_t t, float* params,
                         const float* grads, float* state, int64_t n);

}  // namespace embshard::dense::cuda
