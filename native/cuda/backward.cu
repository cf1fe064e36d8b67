// backward.cu — the backward pass with the fused optimizer, the same algorithm as the CPU engine
// (native/cpu/backward.cc) step for step:
//   1. linearise: key_i = rowBase(table of i) + row_i, position i, bag of i (a warp per bag);
//   2. cub::DeviceRadixSort::SortPairs(key, position) over the key bits in use — stable, so the
//      contributions of a row stay in id order;
//   3. cub::DeviceRunLengthEncode::Encode → unique rows and run lengths; an exclusive scan gives run starts;
//   4. per unique row, a warp: lane l owns columns l, l + 32, …; the row's gradient is summed in fp32 in
//      sorted order (pooled: grad[bag] · grad_scale(i); sequence: the id's gradient row), weight decay
//      folded in, then ONE update per element with the shared rules of core/optim.h and the shared
//      fp16/bf16 rounding of core/init.h (stochastic when configured).
// Hot rows (more than kHotChunk contributions) are summed as partial sums over chunks of kHotChunk
// contributions, one warp per chunk across the whole GPU, then the partials are added in chunk order:
// deterministic run to run, and identical to the CPU's sequential sum for every row with at most
// kHotChunk contributions.
#include <cuda_runtime.h>

#include <algorithm>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_run_length_encode.cuh>
#include <cub/device/device_scan.cuh>

#include "core/engine.h"
#include "core/init.h"
#include "core/optim.h"
#include "core/row_sum_squares.h"
#include "cuda/cuda_check.h"
#include "cuda/kernel_launch.h"
#include "cuda/kernels.h"

namespace embshard::cuda {

namespace {

constexpr int kBlock = 256;
constexpr int kWarpsPerBlock = kBlock / 32;
constexpr unsigned kFull = 0xffffffffu;

unsigned warp_blocks(int64_t items) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((items + kWarpsPerBlock - 1) / kWarpsPerBlock, 1 << 20)));
}
unsigned thread_blocks(int64_t items) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((items + kBlock - 1) / kBlock, 1 << 20)));
}

__device__ __forceinline__ int64_t warp_id() { return (static_cast<int64_t>(blockIdx.x) * kBlock + threadIdx.x) >> 5; }
__device__ __forceinline__ int64_t warp_count() { return (static_cast<int64_t>(gridDim.x) * kBlock) >> 5; }
__device__ __forceinline__ int lane_id() { return static_cast<int>(threadIdx.x & 31u); }

__device__ __forceinline__ uint32_t hot_chunks(uint32_t count) {
  return count > kHotChunk ? (count + kHotChunk - 1) / kHotChunk : 0u;
}

__global__ void __launch_bounds__(kBlock) nonfinite_kernel(const float* p, int64_t n, uint32_t* flag) {
  bool bad = false;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kBlock + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * kBlock)
    bad |= !isfinite(p[i]);
  if (bad) atomicOr(flag, 1u);
}

__global__ void __launch_bounds__(kBlock) linearize_kernel(const uint64_t* rows, const int64_t* offsets, const SlotDesc* slots,
                                                           int64_t B, int64_t numBags, uint64_t* keys, uint32_t* pos,
                                                           int32_t* bagOf) {
  for (int64_t bag = warp_id(); bag < numBags; bag += warp_count()) {
    const uint64_t base = slots[bag / B].rowBase;
    const int64_t end = offsets[bag + 1];
    for (int64_t i = offsets[bag] + lane_id(); i < end; i += 32) {
      keys[i] = base + rows[i];
      pos[i] = static_cast<uint32_t>(i);
      bagOf[i] = static_cast<int32_t>(bag);
    }
  }
}

// chunkCount[r] = number of hot chunks of run r (0 for an ordinary row); zero past numRuns.
__global__ void __launch_bounds__(kBlock) hot_count_kernel(const uint32_t* runCount, const uint32_t* counters, int64_t N,
                                                           uint32_t* chunkCount) {
  const uint32_t numRuns = counters[0];
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kBlock + threadIdx.x; r < N; r += static_cast<int64_t>(gridDim.x) * kBlock)
    chunkCount[r] = r < numRuns ? hot_chunks(runCount[r]) : 0u;
}

__global__ void total_kernel(const uint32_t* chunkEnd, int64_t N, uint32_t* counters) { counters[2] = chunkEnd[N - 1]; }

__global__ void __launch_bounds__(kBlock) chunk_run_kernel(const uint32_t* runCount, const uint32_t* chunkEnd, uint32_t numRuns,
                                                           uint32_t* chunkRun) {
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kBlock + threadIdx.x; r < numRuns; r += static_cast<int64_t>(gridDim.x) * kBlock) {
    const uint32_t n = hot_chunks(runCount[r]);
    for (uint32_t k = 0; k < n; ++k) chunkRun[chunkEnd[r] - n + k] = static_cast<uint32_t>(r);
  }
}

// A warp sums and updates a row 128 columns at a time: lane l owns columns c0 + l + 32k, k < 4.
constexpr int kColsPerLane = 4;
constexpr uint32_t kWarpCols = 32 * kColsPerLane;

// One contribution to a row's gradient: its gradient row and the factor it is multiplied by
// (grad_scale for pooled features; 1 for sequence features, where g · 1 == g bit for bit).
struct Contribution {
  const float* g;
  float scale;
};

__device__ __forceinline__ Contribution contribution(const BackwardArgs& a, uint32_t p, uint32_t dim) {
  const uint32_t i = a.sortedPos[p];
  const int32_t bag = a.bagOf[i];
  const SlotDesc& sd = a.slots[bag / a.B];
  if (sd.outCol < 0) return Contribution{a.seqGrad + sd.seqOffset + (static_cast<int64_t>(i) - sd.begin) * dim, 1.0f};
  return Contribution{a.pooledGrad + (bag % a.B) * a.pooledDim + sd.outCol,
                      grad_scale(sd.pooling, a.weights, i, a.offsets[bag + 1] - a.offsets[bag])};
}

// acc[k] = Σ_{p in [p0, p1), in order} g_p[c] · scale_p for c = c0 + lane + 32k (0 past dim). The
// contributions are resolved four at a time (independent loads in flight), then added in order.
__device__ void sum_block(const BackwardArgs& a, uint32_t p0, uint32_t p1, uint32_t dim, uint32_t c0, int lane,
                          float (&acc)[kColsPerLane]) {
#pragma unroll
  for (int k = 0; k < kColsPerLane; ++k) acc[k] = 0.0f;
  uint32_t p = p0;
  for (; p + 4 <= p1; p += 4) {
    Contribution q[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) q[u] = contribution(a, p + u, dim);
#pragma unroll
    for (int u = 0; u < 4; ++u)
#pragma unroll
      for (int k = 0; k < kColsPerLane; ++k) {
        const uint32_t c = c0 + static_cast<uint32_t>(lane + 32 * k);
        if (c < dim) acc[k] += q[u].g[c] * q[u].scale;
      }
  }
  for (; p < p1; ++p) {
    const Contribution q = contribution(a, p, dim);
#pragma unroll
    for (int k = 0; k < kColsPerLane; ++k) {
      const uint32_t c = c0 + static_cast<uint32_t>(lane + 32 * k);
      if (c < dim) acc[k] += q.g[c] * q.scale;
    }
  }
}

// The table of run r: the table of its first contribution (every contribution of a run shares it).
__device__ __forceinline__ const TableDesc& run_table(const BackwardArgs& a, uint32_t r) {
  return a.tables[a.slots[a.bagOf[a.sortedPos[a.runStart[r]]] / a.B].table];
}

__global__ void __launch_bounds__(kBlock) partials_kernel(BackwardArgs a) {
  const int lane = lane_id();
  for (int64_t j = warp_id(); j < a.numChunks; j += warp_count()) {
    const uint32_t r = a.chunkRun[j];
    const uint32_t count = a.runCount[r], start = a.runStart[r];
    const uint32_t k = static_cast<uint32_t>(j) - (a.chunkEnd[r] - hot_chunks(count));
    const uint32_t p0 = start + k * kHotChunk;
    const uint32_t p1 = std::min(p0 + kHotChunk, start + count);
    const uint32_t dim = run_table(a, r).dim;
    float* out = a.partials + j * static_cast<int64_t>(a.maxDim);
    for (uint32_t c0 = 0; c0 < dim; c0 += kWarpCols) {
      float acc[kColsPerLane];
      sum_block(a, p0, p1, dim, c0, lane, acc);
#pragma unroll
      for (int kk = 0; kk < kColsPerLane; ++kk) {
        const uint32_t c = c0 + static_cast<uint32_t>(lane + 32 * kk);
        if (c < dim) out[c] = acc[kk];
      }
    }
  }
}

__global__ void __launch_bounds__(kBlock) update_kernel(BackwardArgs a) {
  const int lane = lane_id();
  for (int64_t r = warp_id(); r < a.numRuns; r += warp_count()) {
    const uint32_t start = a.runStart[r], count = a.runCount[r];
    const TableDesc& td = run_table(a, static_cast<uint32_t>(r));
    const uint32_t dim = td.dim;
    const DType dt = td.dtype;
    const uint64_t key = a.uniqueKeys[r];
    uint8_t* w = a.arena + td.weightOffset + (key - td.rowBase) * td.rowBytes;
    float* st = a.state + td.stateOffset + (key - td.rowBase) * td.statePerRow;
    const uint32_t nHot = hot_chunks(count);
    const uint32_t hotEnd = nHot ? a.chunkEnd[r] : 0u;
    // g[k] = the row's summed gradient at column c0 + lane + 32k, weight decay folded in (as on the CPU:
    // the sum of every contribution in sorted order, or of the hot row's partials in chunk order)
    auto row_block = [&](uint32_t c0, float (&g)[kColsPerLane]) {
      if (nHot == 0) {
        sum_block(a, start, start + count, dim, c0, lane, g);
      } else {
#pragma unroll
        for (int k = 0; k < kColsPerLane; ++k) g[k] = 0.0f;
        for (uint32_t q = hotEnd - nHot; q < hotEnd; ++q)
#pragma unroll
          for (int k = 0; k < kColsPerLane; ++k) {
            const uint32_t c = c0 + static_cast<uint32_t>(lane + 32 * k);
            if (c < dim) g[k] += a.partials[static_cast<int64_t>(q) * a.maxDim + c];
          }
      }
#pragma unroll
      for (int k = 0; k < kColsPerLane; ++k) {
        const uint32_t c = c0 + static_cast<uint32_t>(lane + 32 * k);
        if (c < dim) g[k] = apply_weight_decay(g[k], load_value(dt, w, c), a.weightDecay);
      }
    };
    const bool sr = a.stochasticRounding && dt != DType::F32;
    auto store = [&](uint32_t c, float v) {
      if (sr) store_value_sr(dt, w, c, v, rounding_bits(a.seed, a.step, key, c));
      else store_value(dt, w, c, v);
    };
    float g[kColsPerLane];
    if (a.opt == OptType::RowwiseAdagrad) {
      // s_row += mean(g²) in core/row_sum_squares.h's order: column c = c0 + lane + 32k falls in sum lane
      // c mod 16 = lane mod 16, so thread j < 16 adds its own square and then thread j + 16's (the next
      // column of that sum lane), block after block in increasing c; the 16 partials then meet in the
      // shared tree. Then every element steps with the new s_row.
      static_assert(kSqLanes == 16 && kWarpCols % 32 == 0, "warp columns map onto the sum lanes");
      const float sOld = st[0];
      float part = 0.0f;
      for (uint32_t c0 = 0; c0 < dim; c0 += kWarpCols) {
        row_block(c0, g);
#pragma unroll
        for (int k = 0; k < kColsPerLane; ++k) {
          const uint32_t c = c0 + static_cast<uint32_t>(lane + 32 * k);
          const float gsq = c < dim ? g[k] * g[k] : 0.0f;  // + 0 leaves a partial (≥ +0 or NaN) unchanged
          const float upper = __shfl_down_sync(kFull, gsq, 16);
          part = (part + gsq) + upper;
        }
      }
      float lanes[kSqLanes];
#pragma unroll
      for (int j = 0; j < kSqLanes; ++j) lanes[j] = __shfl_sync(kFull, part, j);
      const float sq = sum_sq_lanes(lanes);
      const float sNew = sOld + sq / static_cast<float>(dim);
      __syncwarp();
      if (lane == 0) st[0] = sNew;
      for (uint32_t c0 = 0; c0 < dim; c0 += kWarpCols) {
        if (dim > kWarpCols) row_block(c0, g);  // one block: g still holds it
#pragma unroll
        for (int k = 0; k < kColsPerLane; ++k) {
          const uint32_t c = c0 + static_cast<uint32_t>(lane + 32 * k);
          if (c < dim) store(c, rowwise_adagrad_step(load_value(dt, w, c), g[k], sNew, a.lr, a.eps));
        }
      }
      continue;
    }
    for (uint32_t c0 = 0; c0 < dim; c0 += kWarpCols) {
      row_block(c0, g);
#pragma unroll
      for (int k = 0; k < kColsPerLane; ++k) {
        const uint32_t c = c0 + static_cast<uint32_t>(lane + 32 * k);
        if (c >= dim) continue;
        const float wc = load_value(dt, w, c);
        switch (a.opt) {
          case OptType::SGD: store(c, sgd_step(wc, g[k], a.lr)); break;
          case OptType::Adagrad: store(c, adagrad_step(wc, g[k], st[c], a.lr, a.eps)); break;
          case OptType::Adam:
            store(c, adam_step(wc, g[k], st[c], st[dim + c], a.lr, a.beta1, a.beta2, a.eps, a.bc1, a.bc2));
            break;
          case OptType::RowwiseAdagrad: break;  // handled above
        }
      }
    }
  }
}

// Temp bytes of the four CUB calls (the largest is allocated once and shared).
size_t cub_temp_bytes(int64_t N, int endBit) {
  size_t sortB = 0, rleB = 0, scanB = 0, incB = 0;
  const int n = static_cast<int>(N);
  EMB_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sortB, static_cast<const uint64_t*>(nullptr), static_cast<uint64_t*>(nullptr),
                                                 static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr), n, 0, endBit));
  EMB_CUDA_CHECK(cub::DeviceRunLengthEncode::Encode(nullptr, rleB, static_cast<const uint64_t*>(nullptr), static_cast<uint64_t*>(nullptr),
                                                    static_cast<uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr), n));
  EMB_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, scanB, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr), n + 1));
  EMB_CUDA_CHECK(cub::DeviceScan::InclusiveSum(nullptr, incB, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr), n));
  return std::max(std::max(sortB, rleB), std::max(scanB, incB));
}

uint64_t align256(uint64_t x) { return (x + 255) & ~255ull; }

}  // namespace

uint64_t backward_scratch_bytes(int64_t N, int endBit) {
  const uint64_t n = static_cast<uint64_t>(N);
  return 3 * align256(n * 8) + align256(n * 4) * 3 + align256((n + 1) * 4) * 4 + align256(16) + align256(cub_temp_bytes(N, endBit));
}

BackwardBuffers carve_backward_buffers(void* scratch, int64_t N, int endBit) {
  const uint64_t n = static_cast<uint64_t>(N);
  uint8_t* p = static_cast<uint8_t*>(scratch);
  auto take = [&](uint64_t bytes) {
    uint8_t* q = p;
    p += align256(bytes);
    return q;
  };
  BackwardBuffers b{};
  b.keys = reinterpret_cast<uint64_t*>(take(n * 8));
  b.sortedKeys = reinterpret_cast<uint64_t*>(take(n * 8));
  b.uniqueKeys = reinterpret_cast<uint64_t*>(take(n * 8));
  b.pos = reinterpret_cast<uint32_t*>(take(n * 4));
  b.sortedPos = reinterpret_cast<uint32_t*>(take(n * 4));
  b.bagOf = reinterpret_cast<int32_t*>(take(n * 4));
  b.runCount = reinterpret_cast<uint32_t*>(take((n + 1) * 4));
  b.runStart = reinterpret_cast<uint32_t*>(take((n + 1) * 4));
  b.chunkCount = reinterpret_cast<uint32_t*>(take((n + 1) * 4));
  b.chunkEnd = reinterpret_cast<uint32_t*>(take((n + 1) * 4));
  b.counters = reinterpret_cast<uint32_t*>(take(16));
  b.cubTempBytes = cub_temp_bytes(N, endBit);
  b.cubTemp = take(b.cubTempBytes);
  return b;
}

void launch_nonfinite(const float* p, int64_t n, uint32_t* flag, cudaStream_t s) {
  if (n <= 0) return;
  EMB_LAUNCH(nonfinite_kernel, std::min<unsigned>(thread_blocks(n), 4096), kBlock, 0, s, p, n, flag);
  EMB_CUDA_CHECK_LAUNCH();
}

void launch_sort_and_runs(const uint64_t* rows, const int64_t* offsets, const SlotDesc* slots, int64_t B, int64_t numBags,
                          int64_t N, int endBit, const BackwardBuffers& b, cudaStream_t s) {
  const int n = static_cast<int>(N);
  const size_t nb = (static_cast<size_t>(N) + 1) * 4;
  // counters[] is cleared by the caller before the non-finite check
  EMB_CUDA_CHECK(cudaMemsetAsync(b.runCount, 0, nb, s));
  EMB_CUDA_CHECK(cudaMemsetAsync(b.chunkCount, 0, nb, s));
  EMB_LAUNCH(linearize_kernel, warp_blocks(numBags), kBlock, 0, s, rows, offsets, slots, B, numBags, b.keys, b.pos, b.bagOf);
  EMB_CUDA_CHECK_LAUNCH();
  size_t temp = b.cubTempBytes;
  EMB_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(b.cubTemp, temp, static_cast<const uint64_t*>(b.keys), b.sortedKeys,
                                                 static_cast<const uint32_t*>(b.pos), b.sortedPos, n, 0, endBit, s));
  temp = b.cubTempBytes;
  EMB_CUDA_CHECK(cub::DeviceRunLengthEncode::Encode(b.cubTemp, temp, static_cast<const uint64_t*>(b.sortedKeys), b.uniqueKeys,
                                                    b.runCount, b.counters, n, s));
  temp = b.cubTempBytes;
  EMB_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(b.cubTemp, temp, static_cast<const uint32_t*>(b.runCount), b.runStart, n + 1, s));
  EMB_LAUNCH(hot_count_kernel, thread_blocks(N), kBlock, 0, s, b.runCount, b.counters, N, b.chunkCount);
  EMB_CUDA_CHECK_LAUNCH();
  temp = b.cubTempBytes;
  EMB_CUDA_CHECK(cub::DeviceScan::InclusiveSum(b.cubTemp, temp, static_cast<const uint32_t*>(b.chunkCount), b.chunkEnd, n, s));
  EMB_LAUNCH(total_kernel, 1, 1, 0, s, b.chunkEnd, N, b.counters);
  EMB_CUDA_CHECK_LAUNCH();
}

void launch_update(const BackwardArgs& a, uint32_t* chunkRun, cudaStream_t s) {
  if (a.numChunks > 0) {
    EMB_LAUNCH(chunk_run_kernel, thread_blocks(a.numRuns), kBlock, 0, s, a.runCount, a.chunkEnd, a.numRuns, chunkRun);
    EMB_CUDA_CHECK_LAUNCH();
    EMB_LAUNCH(partials_kernel, warp_blocks(a.numChunks), kBlock, 0, s, a);
    EMB_CUDA_CHECK_LAUNCH();
  }
  if (a.numRuns > 0) {
    EMB_LAUNCH(update_kernel, warp_blocks(a.numRuns), kBlock, 0, s, a);
    EMB_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace embshard::cuda
