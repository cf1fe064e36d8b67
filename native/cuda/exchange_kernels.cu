// exchange_kernels.cu — the kernels of exchange_kernels.h, on the legacy default stream, each call waited
// for. Block copies: one grid-stride kernel per block, launched in list order, one thread per value (a
// row's values are adjacent threads, so accesses coalesce); indexed rows likewise, one thread per value.
// Pooling: one thread per (bag, column), walking the bag's ids in order.
#include <cuda_runtime.h>

#include <algorithm>

#include "core/init.h"
#include "core/pooling.h"
#include "cuda/cuda_check.h"
#include "cuda/exchange_kernels.h"
#include "cuda/kernel_launch.h"
#include "cuda/kernels.h"

namespace embshard::cuda {

namespace {

constexpr int kBlock = 256;

__global__ void __launch_bounds__(kBlock) copy_block_kernel(const void* src, DType st, void* dst, DType dt, CopyBlock b) {
  const uint64_t n = static_cast<uint64_t>(b.rows) * static_cast<uint64_t>(b.cols);
  for (uint64_t e = static_cast<uint64_t>(blockIdx.x) * kBlock + threadIdx.x; e < n; e += static_cast<uint64_t>(gridDim.x) * kBlock) {
    const int64_t r = static_cast<int64_t>(e / static_cast<uint64_t>(b.cols)), c = static_cast<int64_t>(e % static_cast<uint64_t>(b.cols));
    const float v = load_value(st, src, static_cast<uint64_t>(b.srcOffset + r * b.srcStride + c));
    const uint64_t d = static_cast<uint64_t>(b.dstOffset + r * b.dstStride + c);
    if (b.add) static_cast<float*>(dst)[d] += v;
    else store_value(dt, dst, d, v);
  }
}

__global__ void __launch_bounds__(kBlock) pool_rows_kernel(const float* rows, int64_t dim, const int32_t* inverse, const int32_t* offsets,
                                                           int64_t B, const float* weights, float* dst, int64_t stride, int64_t col) {
  const uint64_t n = static_cast<uint64_t>(B) * static_cast<uint64_t>(dim);
  for (uint64_t e = static_cast<uint64_t>(blockIdx.x) * kBlock + threadIdx.x; e < n; e += static_cast<uint64_t>(gridDim.x) * kBlock) {
    const int64_t b = static_cast<int64_t>(e / static_cast<uint64_t>(dim)), c = static_cast<int64_t>(e % static_cast<uint64_t>(dim));
    float* out = dst + b * stride + col + c;
    float v = *out;
    for (int32_t i = offsets[b]; i < offsets[b + 1]; ++i) {
      const float w = weights ? weights[i] : 1.0f;
      v += w * rows[static_cast<int64_t>(inverse[i]) * dim + c];
    }
    *out = v;
  }
}

__global__ void __launch_bounds__(kBlock) divide_bags_kernel(float* m, int64_t stride, int64_t col, int64_t dim, const int32_t* lengths, int64_t B) {
  const uint64_t n = static_cast<uint64_t>(B) * static_cast<uint64_t>(dim);
  for (uint64_t e = static_cast<uint64_t>(blockIdx.x) * kBlock + threadIdx.x; e < n; e += static_cast<uint64_t>(gridDim.x) * kBlock) {
    const int64_t b = static_cast<int64_t>(e / static_cast<uint64_t>(dim)), c = static_cast<int64_t>(e % static_cast<uint64_t>(dim));
    if (lengths[b] <= 0) continue;
    float* v = m + b * stride + col + c;
    *v = bag_mean(*v, lengths[b]);
  }
}

__global__ void __launch_bounds__(kBlock) sum_rows_kernel(const float* src, int64_t stride, const int32_t* start, const int32_t* order,
                                                          const int32_t* row, const int32_t* col, const float* scale, int64_t U, int64_t dim,
                                                          float* dst) {
  const uint64_t n = static_cast<uint64_t>(U) * static_cast<uint64_t>(dim);
  for (uint64_t e = static_cast<uint64_t>(blockIdx.x) * kBlock + threadIdx.x; e < n; e += static_cast<uint64_t>(gridDim.x) * kBlock) {
    const int64_t u = static_cast<int64_t>(e / static_cast<uint64_t>(dim)), c = static_cast<int64_t>(e % static_cast<uint64_t>(dim));
    float v = 0.0f;
    for (int32_t j = start[u]; j < start[u + 1]; ++j) {
      const int32_t k = order[j];
      v += src[static_cast<int64_t>(row[k]) * stride + col[k] + c] * scale[k];
    }
    dst[u * dim + c] = v;
  }
}

__global__ void __launch_bounds__(kBlock) index_rows_kernel(const void* src, DType st, int64_t srcOffset, int64_t srcStride, const int32_t* idx,
                                                            int64_t rows, int64_t cols, void* dst, DType dt, int64_t dstOffset, int64_t dstStride,
                                                            IndexMode mode) {
  const uint64_t n = static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols);
  for (uint64_t e = static_cast<uint64_t>(blockIdx.x) * kBlock + threadIdx.x; e < n; e += static_cast<uint64_t>(gridDim.x) * kBlock) {
    const int64_t j = static_cast<int64_t>(e / static_cast<uint64_t>(cols)), c = static_cast<int64_t>(e % static_cast<uint64_t>(cols));
    if (mode != IndexMode::Gather) {
      const float v = load_value(st, src, static_cast<uint64_t>(srcOffset + j * srcStride + c));
      const uint64_t d = static_cast<uint64_t>(dstOffset + static_cast<int64_t>(idx[j]) * dstStride + c);
      if (mode == IndexMode::ScatterAdd) static_cast<float*>(dst)[d] += v;
      else store_value(dt, dst, d, v);
    } else {
      const float v = load_value(st, src, static_cast<uint64_t>(srcOffset + static_cast<int64_t>(idx[j]) * srcStride + c));
      store_value(dt, dst, static_cast<uint64_t>(dstOffset + j * dstStride + c), v);
    }
  }
}

unsigned grid_for(uint64_t items) {
  return static_cast<unsigned>(std::max<uint64_t>(1, std::min<uint64_t>((items + kBlock - 1) / kBlock, 1u << 16)));
}

}  // namespace

void pool_rows(int device, const float* rows, int64_t dim, const int32_t* inverse, const int32_t* offsets, int64_t B,
               const float* weights, float* dst, int64_t stride, int64_t col) {
  const uint64_t items = static_cast<uint64_t>(B) * static_cast<uint64_t>(dim);
  if (items == 0) return;
  EMB_CUDA_CHECK(cudaSetDevice(device));
  EMB_LAUNCH(pool_rows_kernel, grid_for(items), kBlock, 0, 0, rows, dim, inverse, offsets, B, weights, dst, stride, col);
  EMB_CUDA_CHECK_LAUNCH();
  EMB_CUDA_CHECK(cudaStreamSynchronize(0));
}

void divide_bags(int device, float* m, int64_t stride, int64_t col, int64_t dim, const int32_t* lengths, int64_t B) {
  const uint64_t items = static_cast<uint64_t>(B) * static_cast<uint64_t>(dim);
  if (items == 0) return;
  EMB_CUDA_CHECK(cudaSetDevice(device));
  EMB_LAUNCH(divide_bags_kernel, grid_for(items), kBlock, 0, 0, m, stride, col, dim, lengths, B);
  EMB_CUDA_CHECK_LAUNCH();
  EMB_CUDA_CHECK(cudaStreamSynchronize(0));
}

bool all_finite(int device, const float* p, int64_t n, uint32_t* flag) {
  if (n == 0) return true;
  EMB_CUDA_CHECK(cudaSetDevice(device));
  EMB_CUDA_CHECK(cudaMemset(flag, 0, sizeof(uint32_t)));
  launch_nonfinite(p, n, flag, 0);
  EMB_CUDA_CHECK_LAUNCH();
  uint32_t bad = 0;
  EMB_CUDA_CHECK(cudaMemcpy(&bad, flag, sizeof(uint32_t), cudaMemcpyDeviceToHost));
  return bad == 0;
}

void sum_rows(int device, const float* src, int64_t stride, const int32_t* start, const int32_t* order, const int32_t* row, const int32_t* col,
              const float* scale, int64_t U, int64_t dim, float* dst) {
  const uint64_t items = static_cast<uint64_t>(U) * static_cast<uint64_t>(dim);
  if (items == 0) return;
  EMB_CUDA_CHECK(cudaSetDevice(device));
  EMB_LAUNCH(sum_rows_kernel, grid_for(items), kBlock, 0, 0, src, stride, start, order, row, col, scale, U, dim, dst);
  EMB_CUDA_CHECK_LAUNCH();
  EMB_CUDA_CHECK(cudaStreamSynchronize(0));
}

void index_rows(int device, const void* src, DType srcType, int64_t srcOffset, int64_t srcStride, const int32_t* idx, int64_t rows,
                int64_t cols, void* dst, DType dstType, int64_t dstOffset, int64_t dstStride, IndexMode mode) {
  const uint64_t items = static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols);
  if (items == 0) return;
  EMB_CUDA_CHECK(cudaSetDevice(device));
  EMB_LAUNCH(index_rows_kernel, grid_for(items), kBlock, 0, 0, src, srcType, srcOffset, srcStride, idx, rows, cols, dst, dstType, dstOffset, dstStride,
             mode);
  EMB_CUDA_CHECK_LAUNCH();
  EMB_CUDA_CHECK(cudaStreamSynchronize(0));
}

void copy_blocks(int device, const void* src, DType srcType, void* dst, DType dstType, const CopyBlock* blocks, size_t n) {
  EMB_CUDA_CHECK(cudaSetDevice(device));
  for (size_t k = 0; k < n; ++k) {
    const CopyBlock& b = blocks[k];
    const uint64_t items = static_cast<uint64_t>(b.rows) * static_cast<uint64_t>(b.cols);
    if (items == 0) continue;
    EMB_LAUNCH(copy_block_kernel, grid_for(items), kBlock, 0, 0, src, srcType, dst, dstType, b);
    EMB_CUDA_CHECK_LAUNCH();
  }
  EMB_CUDA_CHECK(cudaStreamSynchronize(0));
}

}  // namespace embshard::cuda
