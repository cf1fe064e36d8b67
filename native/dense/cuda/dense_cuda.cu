// dense_cuda.cu — GPU twins of the dense layers (see dense_cuda.h).
#include "dense/cuda/dense_cuda.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>
#include <vector>

#include "core/errors.h"
#include "core/optim.h"
#include "cuda/cuda_check.h"

namespace embshard::dense::cuda {

namespace {

void blas_check(cublasStatus_t s, const char* what, int line) {
  if (s != CUBLAS_STATUS_SUCCESS) fail("CUDA_ERROR", "%s failed with cuBLAS status %d at dense_cuda.cu:%d", what, static_cast<int>(s), line);
}
#define EMB_BLAS_CHECK(expr) blas_check((expr), #expr, __LINE__)

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

// A device buffer of n floats, optionally filled from host memory; freed on scope exit.
class Dev {
 public:
  explicit Dev(int64_t n, const float* src = nullptr) : n_(n) {
    if (n_ > 0) EMB_CUDA_CHECK(cudaMalloc(&p_, static_cast<size_t>(n_) * sizeof(float)));
    if (src && n_ > 0) EMB_CUDA_CHECK(cudaMemcpy(p_, src, static_cast<size_t>(n_) * sizeof(float), cudaMemcpyHostToDevice));
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

constexpr int kThreads = 256;
inline unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

// Row-major GEMM as the column-major product Cᵀ = op(B)ᵀ·op(A)ᵀ.
void gemm_dev(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
              int64_t ldb, float beta, float* C, int64_t ldc) {
  EMB_BLAS_CHECK(cublasSgemm(blas(), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(N),
                             static_cast<int>(M), static_cast<int>(K), &alpha, B, static_cast<int>(ldb), A,
                             static_cast<int>(lda), &beta, C, static_cast<int>(ldc)));
}

__global__ void relu_backward_kernel(const float* y, const float* dy, float* dx, int64_t n) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

// out[c] = Σ_r m[r × n + c], rows in order (one thread per column).
__global__ void column_sums_kernel(const float* m, int64_t B, int64_t n, float* out) {
  int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= n) return;
  float s = 0.0f;
  for (int64_t r = 0; r < B; ++r) s += m[r * n + c];
  out[c] = s;
}

__device__ inline const float* tvec(const float* x, const float* e, int64_t b, int64_t d, int64_t F, int64_t i) {
  return i == 0 ? x + b * d : e + b * F * d + (i - 1) * d;
}

// One block per sample; threads stride over the output columns [x, pairs].
__global__ void dot_forward_kernel(const float* x, const float* e, int64_t d, int64_t F, float* out) {
  const int64_t b = blockIdx.x, n = F + 1, w = d + n * (n - 1) / 2;
  float* o = out + b * w;
  for (int64_t c = threadIdx.x; c < w; c += blockDim.x) {
    if (c < d) {
      o[c] = x[b * d + c];
      continue;
    }
    // pair p = c − d in row-major strict lower triangle order: i(i−1)/2 + j
    int64_t p = c - d, i = 1;
    while ((i + 1) * i / 2 <= p) ++i;
    int64_t j = p - i * (i - 1) / 2;
    const float* ti = tvec(x, e, b, d, F, i);
    const float* tj = tvec(x, e, b, d, F, j);
    float s = 0.0f;
    for (int64_t k = 0; k < d; ++k) s += ti[k] * tj[k];
    o[c] = s;
  }
}

// One block per sample; thread per (vector i, element k): dT_i[k] = [i == 0]·g[k] + Σ_{j≠i} g(i,j)·T_j[k].
__global__ void dot_backward_kernel(const float* x, const float* e, const float* dout, int64_t d, int64_t F, float* dx,
                                    float* de) {
  const int64_t b = blockIdx.x, n = F + 1, w = d + n * (n - 1) / 2;
  const float* g = dout + b * w;
  for (int64_t q = threadIdx.x; q < n * d; q += blockDim.x) {
    int64_t i = q / d, k = q % d;
    float s = i == 0 ? g[k] : 0.0f;
    for (int64_t j = 0; j < n; ++j) {
      if (j == i) continue;
      int64_t hi = i > j ? i : j, lo = i > j ? j : i;
      s += g[d + hi * (hi - 1) / 2 + lo] * tvec(x, e, b, d, F, j)[k];
    }
    if (i == 0) dx[b * d + k] = s;
    else de[b * F * d + (i - 1) * d + k] = s;
  }
}

__global__ void bce_kernel(const float* z, const float* y, int64_t B, float* loss, float* dz) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= B) return;
  float zz = z[i], yy = y[i];
  loss[i] = fmaxf(zz, 0.0f) - zz * yy + log1pf(expf(-fabsf(zz)));
  float s = zz >= 0.0f ? 1.0f / (1.0f + expf(-zz)) : expf(zz) / (1.0f + expf(zz));
  dz[i] = (s - yy) / static_cast<float>(B);
}

__global__ void optimizer_kernel(int type, float lr, float eps, float b1, float b2, float wd, float bc1, float bc2, float* p,
                                 const float* g, float* s, int64_t n) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float gi = apply_weight_decay(g[i], p[i], wd);
  if (type == 0) p[i] = sgd_step(p[i], gi, lr);
  else if (type == 1) p[i] = adagrad_step(p[i], gi, s[i], lr, eps);
  else p[i] = adam_step(p[i], gi, s[i], s[n + i], lr, b1, b2, eps, bc1, bc2);
}

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
  gemm_dev(transA, transB, M, N, K, alpha, a.get(), transA ? M : K, b.get(), transB ? K : N, beta, c.get(), N);
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
  gemm_dev(true, false, out, in, B, 1.0f, ddy.get(), out, dxin.get(), in, 0.0f, ddW.get(), in);
  column_sums_kernel<<<blocks_for(out), kThreads>>>(ddy.get(), B, out, ddb.get());
  EMB_CUDA_CHECK_LAUNCH();
  gemm_dev(false, false, B, in, out, 1.0f, ddy.get(), out, dWt.get(), in, 0.0f, ddx.get(), in);
  sync();
  ddW.to_host(dW);
  ddb.to_host(db);
  ddx.to_host(dx);
}

void relu_backward_host(const float* y, const float* dy, float* dx, int64_t n) {
  Dev a(n, y), b(n, dy), c(n);
  if (n > 0) relu_backward_kernel<<<blocks_for(n), kThreads>>>(a.get(), b.get(), c.get(), n);
  EMB_CUDA_CHECK_LAUNCH();
  sync();
  c.to_host(dx);
}

void dot_interaction_forward_host(const float* x, const float* e, int64_t B, int64_t d, int64_t F, float* out) {
  const int64_t w = d + (F + 1) * F / 2;
  Dev dx(B * d, x), de(B * F * d, e), dout(B * w);
  dot_forward_kernel<<<static_cast<unsigned>(B), 128>>>(dx.get(), de.get(), d, F, dout.get());
  EMB_CUDA_CHECK_LAUNCH();
  sync();
  dout.to_host(out);
}

void dot_interaction_backward_host(const float* x, const float* e, const float* dout, int64_t B, int64_t d, int64_t F,
                                   float* gx, float* ge) {
  const int64_t w = d + (F + 1) * F / 2;
  Dev dx(B * d, x), de(B * F * d, e), dg(B * w, dout), ox(B * d), oe(B * F * d);
  dot_backward_kernel<<<static_cast<unsigned>(B), 128>>>(dx.get(), de.get(), dg.get(), d, F, ox.get(), oe.get());
  EMB_CUDA_CHECK_LAUNCH();
  sync();
  ox.to_host(gx);
  oe.to_host(ge);
}

double bce_host(const float* z, const float* y, int64_t B, float* dz) {
  Dev dzv(B, z), dy(B, y), dl(B), dd(B);
  bce_kernel<<<blocks_for(B), kThreads>>>(dzv.get(), dy.get(), B, dl.get(), dd.get());
  EMB_CUDA_CHECK_LAUNCH();
  sync();
  std::vector<float> l(static_cast<size_t>(B));
  dl.to_host(l.data());
  dd.to_host(dz);
  double s = 0.0;
  for (float v : l) s += v;  // summed on the host in sample order
  return B > 0 ? s / static_cast<double>(B) : 0.0;
}

void optimizer_step_host(int type, float lr, float eps, float beta1, float beta2, float wd, int64_t t, float* params,
                         const float* grads, float* state, int64_t n) {
  const int64_t sn = type == 0 ? 0 : type == 1 ? n : 2 * n;
  Dev p(n, params), g(n, grads), s(sn, state);
  const float bc1 = 1.0f - std::pow(beta1, static_cast<float>(t)), bc2 = 1.0f - std::pow(beta2, static_cast<float>(t));
  if (n > 0) optimizer_kernel<<<blocks_for(n), kThreads>>>(type, lr, eps, beta1, beta2, wd, bc1, bc2, p.get(), g.get(), s.get(), n);
  EMB_CUDA_CHECK_LAUNCH();
  sync();
  p.to_host(params);
  s.to_host(state);
}

}  // namespace embshard::dense::cuda
