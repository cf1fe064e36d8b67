// launch.cu — the dense layers' GPU kernels and launchers (see launch.h).
#include "dense/cuda/launch.h"

#include <cmath>

#include "core/errors.h"
#include "core/optim.h"
#include "cuda/cuda_check.h"
#include "cuda/kernel_launch.h"

namespace embshard::dense::cuda {

void blas_check(cublasStatus_t s, const char* what, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS) fail("CUDA_ERROR", "%s failed with cuBLAS status %d at %s:%d", what, static_cast<int>(s), file, line);
}

namespace {

constexpr int kThreads = 256;
inline unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }
__device__ inline int64_t gid() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }

// y[r × n + c] = b[c]
__global__ void fill_rows_kernel(const float* b, int64_t total, int64_t n, float* y) {
  int64_t i = gid();
  if (i < total) y[i] = b[i % n];
}

__global__ void relu_forward_kernel(float* y, int64_t n) {
  int64_t i = gid();
  if (i < n) y[i] = y[i] > 0.0f ? y[i] : 0.0f;
}

__global__ void relu_backward_kernel(const float* y, const float* dy, float* dx, int64_t n) {
  int64_t i = gid();
  if (i < n) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

// One thread per column; rows summed in order (as the CPU column_sums).
__global__ void column_sums_kernel(const float* m, int64_t B, int64_t n, float* out) {
  int64_t c = gid();
  if (c >= n) return;
  float s = 0.0f;
  for (int64_t r = 0; r < B; ++r) s += m[r * n + c];
  out[c] = s;
}

// T_0 = x_b, T_i = e_{b, i−1}.
__device__ inline const float* tvec(const float* x, const float* e, int64_t b, int64_t d, int64_t F, int64_t i) {
  return i == 0 ? x + b * d : e + b * F * d + (i - 1) * d;
}

// One block per sample; threads stride over the output columns [x, pairs (i, j < i) row by row].
__global__ void dot_forward_kernel(const float* x, const float* e, int64_t d, int64_t F, float* out) {
  const int64_t b = blockIdx.x, n = F + 1, w = d + n * (n - 1) / 2;
  float* o = out + b * w;
  for (int64_t c = threadIdx.x; c < w; c += blockDim.x) {
    if (c < d) {
      o[c] = x[b * d + c];
      continue;
    }
    // pair p = c − d in strict-lower-triangle row order: p = i(i−1)/2 + j, 0 ≤ j < i
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

// One block per sample; a thread per (vector i, element k): dT_i[k] = [i == 0]·g[k] + Σ_{j≠i, j in order} g(i,j)·T_j[k].
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

// out[b, :dx] = x[b], out[b, dx:] = e[b]; one thread per output element.
__global__ void concat_forward_kernel(const float* x, const float* e, int64_t total, int64_t dx, int64_t de, float* out) {
  int64_t i = gid();
  if (i >= total) return;
  int64_t w = dx + de, b = i / w, c = i % w;
  out[i] = c < dx ? x[b * dx + c] : e[b * de + (c - dx)];
}

__global__ void concat_backward_kernel(const float* dout, int64_t total, int64_t dx, int64_t de, float* gx, float* ge) {
  int64_t i = gid();
  if (i >= total) return;
  int64_t w = dx + de, b = i / w, c = i % w;
  if (c < dx) gx[b * dx + c] = dout[i];
  else if (ge) ge[b * de + (c - dx)] = dout[i];
}

__global__ void cross_combine_kernel(const float* x0, const float* w, const float* xl, float* next, int64_t n) {
  int64_t i = gid();
  if (i < n) next[i] = x0[i] * w[i] + xl[i];
}

__global__ void cross_grad_kernel(const float* g, const float* x0, const float* w, float* dw, float* acc, int64_t n) {
  int64_t i = gid();
  if (i >= n) return;
  dw[i] = g[i] * x0[i];
  acc[i] += g[i] * w[i];
}

__global__ void add_kernel(const float* a, const float* b, float* out, int64_t n) {
  int64_t i = gid();
  if (i < n) out[i] = a[i] + b[i];
}

__global__ void bce_kernel(const float* z, const float* y, int64_t B, float scale, double* loss, float* dz) {
  int64_t i = gid();
  if (i >= B) return;
  const double zz = z[i], yy = y[i];
  loss[i] = fmax(zz, 0.0) - zz * yy + log1p(exp(-fabs(zz)));
  const float zf = z[i];
  const float sig = zf >= 0.0f ? 1.0f / (1.0f + expf(-zf)) : expf(zf) / (1.0f + expf(zf));
  dz[i] = ((sig - y[i]) / static_cast<float>(B)) * scale;
}

__global__ void optimizer_kernel(int type, float lr, float eps, float b1, float b2, float wd, float bc1, float bc2, float* p,
                                 const float* g, float* s, int64_t n) {
  int64_t i = gid();
  if (i >= n) return;
  float gi = apply_weight_decay(g[i], p[i], wd);
  if (type == 0) p[i] = sgd_step(p[i], gi, lr);
  else if (type == 1) p[i] = adagrad_step(p[i], gi, s[i], lr, eps);
  else p[i] = adam_step(p[i], gi, s[i], s[n + i], lr, b1, b2, eps, bc1, bc2);
}

}  // namespace

void gemm(cublasHandle_t h, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  EMB_BLAS_CHECK(cublasSgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(N),
                             static_cast<int>(M), static_cast<int>(K), &alpha, B, static_cast<int>(ldb), A,
                             static_cast<int>(lda), &beta, C, static_cast<int>(ldc)));
}

void linear_forward(cublasHandle_t h, cudaStream_t s, const float* x, int64_t B, int64_t in, int64_t out, const float* W,
                    const float* b, float* y) {
  if (b) {
    EMB_LAUNCH(fill_rows_kernel, blocks_for(B * out), kThreads, 0, s, b, B * out, out, y);
    EMB_CUDA_CHECK_LAUNCH();
  }
  gemm(h, false, true, B, out, in, 1.0f, x, in, W, in, b ? 1.0f : 0.0f, y, out);
}

void linear_backward(cublasHandle_t h, cudaStream_t s, const float* x, const float* dy, int64_t B, int64_t in, int64_t out,
                     const float* W, float* dW, float* db, float* dx) {
  gemm(h, true, false, out, in, B, 1.0f, dy, out, x, in, 0.0f, dW, in);
  if (db) column_sums(dy, B, out, db, s);
  if (dx) gemm(h, false, false, B, in, out, 1.0f, dy, out, W, in, 0.0f, dx, in);
}

void relu_forward(float* y, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  EMB_LAUNCH(relu_forward_kernel, blocks_for(n), kThreads, 0, s, y, n);
  EMB_CUDA_CHECK_LAUNCH();
}

void relu_backward(const float* y, const float* dy, float* dx, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  EMB_LAUNCH(relu_backward_kernel, blocks_for(n), kThreads, 0, s, y, dy, dx, n);
  EMB_CUDA_CHECK_LAUNCH();
}

void column_sums(const float* m, int64_t B, int64_t n, float* out, cudaStream_t s) {
  if (n <= 0) return;
  EMB_LAUNCH(column_sums_kernel, blocks_for(n), kThreads, 0, s, m, B, n, out);
  EMB_CUDA_CHECK_LAUNCH();
}

void dot_forward(const float* x, const float* e, int64_t B, int64_t d, int64_t F, float* out, cudaStream_t s) {
  if (B <= 0) return;
  EMB_LAUNCH(dot_forward_kernel, static_cast<unsigned>(B), 128, 0, s, x, e, d, F, out);
  EMB_CUDA_CHECK_LAUNCH();
}

void dot_backward(const float* x, const float* e, const float* dout, int64_t B, int64_t d, int64_t F, float* dx, float* de,
                  cudaStream_t s) {
  if (B <= 0) return;
  EMB_LAUNCH(dot_backward_kernel, static_cast<unsigned>(B), 128, 0, s, x, e, dout, d, F, dx, de);
  EMB_CUDA_CHECK_LAUNCH();
}

void concat_forward(const float* x, const float* e, int64_t B, int64_t dx, int64_t de, float* out, cudaStream_t s) {
  const int64_t total = B * (dx + de);
  if (total <= 0) return;
  EMB_LAUNCH(concat_forward_kernel, blocks_for(total), kThreads, 0, s, x, e, total, dx, de, out);
  EMB_CUDA_CHECK_LAUNCH();
}

void concat_backward(const float* dout, int64_t B, int64_t dx, int64_t de, float* gx, float* ge, cudaStream_t s) {
  const int64_t total = B * (dx + de);
  if (total <= 0) return;
  EMB_LAUNCH(concat_backward_kernel, blocks_for(total), kThreads, 0, s, dout, total, dx, de, gx, ge);
  EMB_CUDA_CHECK_LAUNCH();
}

void cross_combine(const float* x0, const float* w, const float* xl, float* next, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  EMB_LAUNCH(cross_combine_kernel, blocks_for(n), kThreads, 0, s, x0, w, xl, next, n);
  EMB_CUDA_CHECK_LAUNCH();
}

void cross_grad(const float* g, const float* x0, const float* w, float* dw, float* acc, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  EMB_LAUNCH(cross_grad_kernel, blocks_for(n), kThreads, 0, s, g, x0, w, dw, acc, n);
  EMB_CUDA_CHECK_LAUNCH();
}

void add(const float* a, const float* b, float* out, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  EMB_LAUNCH(add_kernel, blocks_for(n), kThreads, 0, s, a, b, out, n);
  EMB_CUDA_CHECK_LAUNCH();
}

void bce(const float* z, const float* y, int64_t B, float scale, double* loss, float* dz, cudaStream_t s) {
  if (B <= 0) return;
  EMB_LAUNCH(bce_kernel, blocks_for(B), kThreads, 0, s, z, y, B, scale, loss, dz);
  EMB_CUDA_CHECK_LAUNCH();
}

void optimizer_step(int type, float lr, float eps, float beta1, float beta2, float wd, int64_t t, float* params,
                    const float* grads, float* state, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  // bias corrections computed on the host, as dense/optimizer.cc
  const float bc1 = adam_bias_correction(beta1, t), bc2 = adam_bias_correction(beta2, t);
  EMB_LAUNCH(optimizer_kernel, blocks_for(n), kThreads, 0, s, type, lr, eps, beta1, beta2, wd, bc1, bc2, params, grads, state, n);
  EMB_CUDA_CHECK_LAUNCH();
}

}  // namespace embshard::dense::cuda
