// rows.cu — row-level kernels of the CUDA engine: read / write rows of a table in fp32 (converting
// with the shared load_value / store_value of core/init.h), read / write optimizer-state rows, and
// deterministic table initialisation with the shared init_value (the CPU engine's exact function).
// One thread per element; a row's elements are adjacent threads, so accesses coalesce.
#include <cuda_runtime.h>

#include <algorithm>

#include "core/init.h"
#include "cuda/cuda_check.h"
#include "cuda/kernel_launch.h"
#include "cuda/kernels.h"

namespace embshard::cuda {

namespace {

constexpr int kBlock = 256;

unsigned blocks_for(uint64_t items) {
  return static_cast<unsigned>(std::max<uint64_t>(1, std::min<uint64_t>((items + kBlock - 1) / kBlock, 1u << 20)));
}

#define EMB_GRID_STRIDE(e, n) \
  for (uint64_t e = static_cast<uint64_t>(blockIdx.x) * kBlock + threadIdx.x; e < (n); e += static_cast<uint64_t>(gridDim.x) * kBlock)

__global__ void __launch_bounds__(kBlock) gather_rows_kernel(const uint8_t* arena, TableDesc t, const uint64_t* rows, uint64_t n,
                                                             float* out) {
  EMB_GRID_STRIDE(e, n * t.dim) {
    const uint64_t k = e / t.dim, c = e % t.dim;
    out[e] = load_value(t.dtype, arena + t.weightOffset + rows[k] * t.rowBytes, c);
  }
}

__global__ void __launch_bounds__(kBlock) scatter_rows_kernel(uint8_t* arena, TableDesc t, const uint64_t* rows, uint64_t n,
                                                              const float* values) {
  EMB_GRID_STRIDE(e, n * t.dim) {
    const uint64_t k = e / t.dim, c = e % t.dim;
    store_value(t.dtype, arena + t.weightOffset + rows[k] * t.rowBytes, c, values[e]);
  }
}

__global__ void __launch_bounds__(kBlock) gather_state_kernel(const float* state, TableDesc t, const uint64_t* rows, uint64_t n,
                                                              float* out) {
  EMB_GRID_STRIDE(e, n * t.statePerRow) {
    const uint64_t k = e / t.statePerRow, c = e % t.statePerRow;
    out[e] = state[t.stateOffset + rows[k] * t.statePerRow + c];
  }
}

__global__ void __launch_bounds__(kBlock) scatter_state_kernel(float* state, TableDesc t, const uint64_t* rows, uint64_t n,
                                                               const float* values) {
  EMB_GRID_STRIDE(e, n * t.statePerRow) {
    const uint64_t k = e / t.statePerRow, c = e % t.statePerRow;
    state[t.stateOffset + rows[k] * t.statePerRow + c] = values[e];
  }
}

// Element e = r * dim + c of table `index`, exactly as CpuEngine::initialize_tables computes it.
__global__ void __launch_bounds__(kBlock) init_kernel(uint8_t* arena, TableDesc t, uint32_t index, InitSpec init, uint64_t seed) {
  EMB_GRID_STRIDE(e, t.rows * t.dim) {
    const uint64_t r = e / t.dim, c = e % t.dim;
    store_value(t.dtype, arena + t.weightOffset + r * t.rowBytes, c, init_value(init.kind, init.a, init.b, seed, index, e));
  }
}

#undef EMB_GRID_STRIDE

}  // namespace

void launch_gather_rows(const uint8_t* arena, TableDesc t, const uint64_t* rows, int64_t n, float* out, cudaStream_t s) {
  if (n <= 0) return;
  EMB_LAUNCH(gather_rows_kernel, blocks_for(static_cast<uint64_t>(n) * t.dim), kBlock, 0, s, arena, t, rows, static_cast<uint64_t>(n), out);
  EMB_CUDA_CHECK_LAUNCH();
}

void launch_scatter_rows(uint8_t* arena, TableDesc t, const uint64_t* rows, int64_t n, const float* values, cudaStream_t s) {
  if (n <= 0) return;
  EMB_LAUNCH(scatter_rows_kernel, blocks_for(static_cast<uint64_t>(n) * t.dim), kBlock, 0, s, arena, t, rows, static_cast<uint64_t>(n), values);
  EMB_CUDA_CHECK_LAUNCH();
}

void launch_gather_state(const float* state, TableDesc t, const uint64_t* rows, int64_t n, float* out, cudaStream_t s) {
  if (n <= 0 || t.statePerRow == 0) return;
  EMB_LAUNCH(gather_state_kernel, blocks_for(static_cast<uint64_t>(n) * t.statePerRow), kBlock, 0, s, state, t, rows, static_cast<uint64_t>(n), out);
  EMB_CUDA_CHECK_LAUNCH();
}

void launch_scatter_state(float* state, TableDesc t, const uint64_t* rows, int64_t n, const float* values, cudaStream_t s) {
  if (n <= 0 || t.statePerRow == 0) return;
  EMB_LAUNCH(scatter_state_kernel, blocks_for(static_cast<uint64_t>(n) * t.statePerRow), kBlock, 0, s, state, t, rows,
             static_cast<uint64_t>(n), values);
  EMB_CUDA_CHECK_LAUNCH();
}

void launch_init_table(uint8_t* arena, TableDesc t, uint32_t index, InitSpec init, uint64_t seed, cudaStream_t s) {
  EMB_LAUNCH(init_kernel, blocks_for(t.rows * t.dim), kBlock, 0, s, arena, t, index, init, seed);
  EMB_CUDA_CHECK_LAUNCH();
}

}  // namespace embshard::cuda
