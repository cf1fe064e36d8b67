// dense_cuda.cu — GPU twins of the dense layers (see dense_cuda.h).
#include "dense/cuda/dense_cuda.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>
#include <vector>

#include "core/errors.h"
#include "cuda/buffers.h"
#include "cuda/cuda_check.h"
#include "dense/cuda/launch.h"

namespace embshard::dense::cuda {

namespace {

// One cuBLAS and one cuBLASLt handle per host thread (handles are not thread-safe to share).
cublasHandle_t blas() {
  thread_local cublasHandle_t h = nullptr;
  if (!h) EMB_BLAS_CHECK(cublasCreate(&h));
  return h;
}
cublasLtHandle_t lt() {
  thread_local cublasLtHandle_t h = nullptr;
  if (!h) EMB_BLAS_CHECK(cublasLtCreate(&h));
  return h;
}

// A device buffer of n floats, optionally filled from host memory; freed on scope exit. Out of device
// memory: ALLOC_FAILED naming the device and the bytes.
class Dev {
 public:
  explicit Dev(int64_t n, const float* src = nullptr) : n_(n) {
    if (n_ <= 0) return;
    int device = 0;
    EMB_CUDA_CHECK(cudaGetDevice(&device));
    p_ = static_cast<float*>(::embshard::cuda::device_alloc(static_cast<uint64_t>(n_) * sizeof(float), "a dense layer's operand", device));
    if (!src) return;
    cudaError_t e = cudaMemcpy(p_, src, static_cast<size_t>(n_) * sizeof(float), cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
      (void)cudaFree(p_);  // the destructor of a throwing constructor does not run
      ::embshard::cuda::check(e, "cudaMemcpy", __FILE__, __LINE__);
    }
  }
  ~Dev() {
    if (p_) (void)cudaFree(p_);
  }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  float* get() const { return p_; }
  void to_host(float* dst) const {
    if (n_ > 0) EMB_CUDA_CHECK(cudaMemcpy(dst, p_, static_cast<size_t>(n_) * sizeof(float), cudaMemcpyDeviceToHost));
  }

 private:
  float* p_ = nullptr;
  int64_t n_;
};

void sync() { EMB_CUDA_CHECK(cudaDeviceSynchronize()); }

}  // namespace

bool device_available() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return n > 0;
}

void gemm_host(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float* A, const float* B,
               float beta, float* C) {
  Dev a(M * K, A), b(K * N, B), c(M * N, C);
  gemm(blas(), transA, transB, M, N, K, alpha, a.get(), transA ? M : K, b.get(), transB ? K : N, beta, c.get(), N);
  sync();
  c.to_host(C);
}

void linear_forward_host(const float* x, int64_t B, int64_t in, int64_t out, const float* W, const float* bias, bool relu,
                         float* y) {
  Dev dx(B * in, x), dW(out * in, W), db(bias ? out : 0, bias), dy(B * out);
  // Column-major: yᵀ [out × B] = W [out × in] · xᵀ [in × B]; stored W is Wᵀ [in × out] column-major → TRANSA = T.
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  EMB_BLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
  EMB_BLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof(opT)));
  EMB_BLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof(opN)));
  cublasLtEpilogue_t epi = bias ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                                : (relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
  EMB_BLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  if (bias) {
    const float* bp = db.get();
    EMB_BLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof(bp)));
  }
  EMB_BLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, static_cast<uint64_t>(in), static_cast<uint64_t>(out), in));
  EMB_BLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, static_cast<uint64_t>(in), static_cast<uint64_t>(B), in));
  EMB_BLAS_CHECK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, static_cast<uint64_t>(out), static_cast<uint64_t>(B), out));
  const float one = 1.0f, zero = 0.0f;
  cublasStatus_t st = cublasLtMatmul(lt(), desc, &one, dW.get(), la, dx.get(), lb, &zero, dy.get(), lc, dy.get(), lc, nullptr,
                                     nullptr, 0, nullptr);
  (void)cublasLtMatrixLayoutDestroy(la);
  (void)cublasLtMatrixLayoutDestroy(lb);
  (void)cublasLtMatrixLayoutDestroy(lc);
  (void)cublasLtMatmulDescDestroy(desc);
  EMB_BLAS_CHECK(st);
  sync();
  dy.to_host(y);
}

void linear_backward_host(const float* x, const float* dy, int64_t B, int64_t in, int64_t out, const float* W, float* dW,
                          float* db, float* dx) {
  Dev ddx(B * in), ddy(B * out, dy), dxin(B * in, x), dWt(out * in, W), ddW(out * in), ddb(out);
  linear_backward(blas(), 0, dxin.get(), ddy.get(), B, in, out, dWt.get(), ddW.get(), ddb.get(), ddx.get());
  sync();
  ddW.to_host(dW);
  ddb.to_host(db);
  ddx.to_host(dx);
}

void relu_backward_host(const float* y, const float* dy, float* dx, int64_t n) {
  Dev a(n, y), b(n, dy), c(n);
  relu_backward(a.get(), b.get(), c.get(), n, 0);
  sync();
  c.to_host(dx);
}

void dot_interaction_forward_host(const float* x, const float* e, int64_t B, int64_t d, int64_t F, float* out) {
  const int64_t w = d + (F + 1) * F / 2;
  Dev dx(B * d, x), de(B * F * d, e), dout(B * w);
  dot_forward(dx.get(), de.get(), B, d, F, dout.get(), 0);
  sync();
  dout.to_host(out);
}

void dot_interaction_backward_host(const float* x, const float* e, const float* dout, int64_t B, int64_t d, int64_t F,
                                   float* gx, float* ge) {
  const int64_t w = d + (F + 1) * F / 2;
  Dev dx(B * d, x), de(B * F * d, e), dg(B * w, dout), ox(B * d), oe(B * F * d);
  dot_backward(dx.get(), de.get(), dg.get(), B, d, F, ox.get(), oe.get(), 0);
  sync();
  ox.to_host(gx);
  oe.to_host(ge);
}

double bce_host(const float* z, const float* y, int64_t B, float* dz) {
  Dev dzv(B, z), dy(B, y), dd(B);
  int device = 0;
  EMB_CUDA_CHECK(cudaGetDevice(&device));
  auto* dl = static_cast<double*>(::embshard::cuda::device_alloc(static_cast<uint64_t>(B > 0 ? B : 0) * sizeof(double), "the loss", device));
  std::vector<double> l(static_cast<size_t>(B));
  try {
    bce(dzv.get(), dy.get(), B, 1.0f, dl, dd.get(), 0);
    sync();
    if (B > 0) EMB_CUDA_CHECK(cudaMemcpy(l.data(), dl, static_cast<size_t>(B) * sizeof(double), cudaMemcpyDeviceToHost));
  } catch (...) {
    (void)cudaFree(dl);
    throw;
  }
  (void)cudaFree(dl);
  dd.to_host(dz);
  double s = 0.0;
  for (double v : l) s += v;  // summed on the host in sample order
  return B > 0 ? s / static_cast<double>(B) : 0.0;
}

void optimizer_step_host(int type, float lr, float eps, float beta1, float beta2, float wd, int64_t t, float* params,
                         const float* grads, float* state, int64_t n) {
  const int64_t sn = type == 0 ? 0 : type == 1 ? n : 2 * n;
  Dev p(n, params), g(n, grads), s(sn, state);
  optimizer_step(type, lr, eps, beta1, beta2, wd, t, p.get(), g.get(), s.get(), n, 0);
  sync();
  p.to_host(params);
  s.to_host(state);
}

}  // namespace embshard::dense::cuda
