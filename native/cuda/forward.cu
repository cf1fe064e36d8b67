// forward.cu — the fused forward kernel: one launch over every bag of every feature (all tables).
// A group of G lanes (G = 1..32, a sub-warp or a warp, chosen from the widest row) owns one bag; lane l
// owns the columns [V·(l + G·k), V·(l + G·k) + V) for k = 0, 1, …, where V = 16 bytes / element size
// (4 fp32 or 8 fp16/bf16 values), so each row is read with coalesced 16-byte loads when rows are
// 16-byte aligned (row bytes a multiple of 16) and element by element otherwise (any dim).
// Per column, in id order, exactly as the CPU engine (native/cpu/forward.cc):
//   acc = 0; acc += row_i[c] (unweighted) or acc += w_i * row_i[c]; mean: acc /= len; empty bag: 0.
// Sequence features copy each row, converted to fp32.
#include <cuda_runtime.h>

#include <algorithm>

#include "core/half.h"
#include "core/init.h"
#include "cuda/cuda_check.h"
#include "cuda/kernel_launch.h"
#include "cuda/kernels.h"

namespace embshard::cuda {

namespace {

constexpr int kBlock = 256;
constexpr int kUnroll = 4;  // rows in flight per lane in pooled bags

template <DType DT>
struct Elem {
  static constexpr int V = DT == DType::F32 ? 4 : 8;  // values per 16-byte vector
  static constexpr uint64_t kBytes = DT == DType::F32 ? 4 : 2;
};

// Loads V values of columns [c0, c0 + V) of `row` as fp32 (zero past dim).
template <DType DT>
__device__ __forceinline__ void load_vec(const uint8_t* row, uint32_t c0, uint32_t dim, bool aligned,
                                         float (&v)[Elem<DT>::V]) {
  constexpr int V = Elem<DT>::V;
  if (aligned) {  // dim is a multiple of V and the row starts on 16 bytes
    const uint4 raw = *reinterpret_cast<const uint4*>(row + c0 * Elem<DT>::kBytes);
    if constexpr (DT == DType::F32) {
      v[0] = __uint_as_float(raw.x);
      v[1] = __uint_as_float(raw.y);
      v[2] = __uint_as_float(raw.z);
      v[3] = __uint_as_float(raw.w);
    } else {
      const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const uint16_t lo = static_cast<uint16_t>(w[k] & 0xffffu), hi = static_cast<uint16_t>(w[k] >> 16);
        v[2 * k] = DT == DType::F16 ? f16_to_f32(lo) : bf16_to_f32(lo);
        v[2 * k + 1] = DT == DType::F16 ? f16_to_f32(hi) : bf16_to_f32(hi);
      }
    }
  } else {
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = c0 + k < dim ? load_value(DT, row, c0 + k) : 0.0f;
  }
}

// acc += v (unweighted: no multiply, as on the CPU) or acc += w_i · v.
template <int V>
__device__ __forceinline__ void accumulate(float (&acc)[V], const float (&v)[V], const float* weights, int64_t i) {
  if (weights) {
    const float w = weights[i];
#pragma unroll
    for (int k = 0; k < V; ++k) acc[k] += w * v[k];
  } else {
#pragma unroll
    for (int k = 0; k < V; ++k) acc[k] += v[k];
  }
}

template <DType DT>
__device__ void pool_bag(const ForwardArgs& a, const SlotDesc& sd, int64_t bag, int lane, int G) {
  constexpr int V = Elem<DT>::V;
  const int64_t begin = a.offsets[bag], end = a.offsets[bag + 1];
  const uint8_t* base = a.arena + sd.weightOffset;
  const bool aligned = sd.rowBytes % 16 == 0 && sd.weightOffset % 16 == 0;  // arena base: cudaMalloc, 256-aligned
  float* out = a.pooled + (bag % a.B) * a.pooledDim + sd.outCol;
  for (uint32_t c0 = static_cast<uint32_t>(lane) * V; c0 < sd.dim; c0 += static_cast<uint32_t>(G) * V) {
    float acc[V];
#pragma unroll
    for (int k = 0; k < V; ++k) acc[k] = 0.0f;
    // kUnroll rows are loaded before any is added (more bytes in flight per lane); the additions
    // stay in id order.
    int64_t i = begin;
    for (; i + kUnroll <= end; i += kUnroll) {
      float v[kUnroll][V];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) load_vec<DT>(base + a.rows[i + u] * sd.rowBytes, c0, sd.dim, aligned, v[u]);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) accumulate<V>(acc, v[u], a.weights, i + u);
    }
    for (; i < end; ++i) {
      float v[V];
      load_vec<DT>(base + a.rows[i] * sd.rowBytes, c0, sd.dim, aligned, v);
      accumulate<V>(acc, v, a.weights, i);
    }
    if (sd.pooling == Pooling::Mean && end > begin) {
      const float len = static_cast<float>(end - begin);
#pragma unroll
      for (int k = 0; k < V; ++k) acc[k] /= len;
    }
#pragma unroll
    for (int k = 0; k < V; ++k)
      if (c0 + k < sd.dim) out[c0 + k] = acc[k];
  }
}

template <DType DT>
__device__ void copy_bag(const ForwardArgs& a, const SlotDesc& sd, int64_t bag, int lane, int G) {
  constexpr int V = Elem<DT>::V;
  const int64_t begin = a.offsets[bag], end = a.offsets[bag + 1];
  const uint8_t* base = a.arena + sd.weightOffset;
  const bool aligned = sd.rowBytes % 16 == 0 && sd.weightOffset % 16 == 0;  // arena base: cudaMalloc, 256-aligned
  for (int64_t i = begin; i < end; ++i) {
    const uint8_t* row = base + a.rows[i] * sd.rowBytes;
    float* out = a.seq + sd.seqOffset + (i - sd.begin) * static_cast<int64_t>(sd.dim);
    for (uint32_t c0 = static_cast<uint32_t>(lane) * V; c0 < sd.dim; c0 += static_cast<uint32_t>(G) * V) {
      float v[V];
      load_vec<DT>(row, c0, sd.dim, aligned, v);
#pragma unroll
      for (int k = 0; k < V; ++k)
        if (c0 + k < sd.dim) out[c0 + k] = v[k];
    }
  }
}

template <int G>
__global__ void __launch_bounds__(kBlock) forward_kernel(ForwardArgs a) {
  const int lane = static_cast<int>(threadIdx.x) % G;
  const int64_t groups = static_cast<int64_t>(gridDim.x) * (kBlock / G);
  for (int64_t bag = (static_cast<int64_t>(blockIdx.x) * kBlock + threadIdx.x) / G; bag < a.numBags; bag += groups) {
    const SlotDesc sd = a.slots[bag / a.B];
    if (sd.pooling == Pooling::None) {
      switch (sd.dtype) {
        case DType::F32: copy_bag<DType::F32>(a, sd, bag, lane, G); break;
        case DType::F16: copy_bag<DType::F16>(a, sd, bag, lane, G); break;
        case DType::BF16: copy_bag<DType::BF16>(a, sd, bag, lane, G); break;
      }
    } else {
      switch (sd.dtype) {
        case DType::F32: pool_bag<DType::F32>(a, sd, bag, lane, G); break;
        case DType::F16: pool_bag<DType::F16>(a, sd, bag, lane, G); break;
        case DType::BF16: pool_bag<DType::BF16>(a, sd, bag, lane, G); break;
      }
    }
  }
}

template <int G>
void launch(const ForwardArgs& a, cudaStream_t s) {
  constexpr int64_t perBlock = kBlock / G;
  const int64_t blocks = std::min<int64_t>((a.numBags + perBlock - 1) / perBlock, int64_t(1) << 20);
  EMB_LAUNCH(forward_kernel<G>, static_cast<unsigned>(blocks), kBlock, 0, s, a);
  EMB_CUDA_CHECK_LAUNCH();
}

}  // namespace

int forward_group_size(const SlotDesc* slots, int32_t F) {
  uint32_t vecs = 1;
  for (int32_t s = 0; s < F; ++s) {
    const uint32_t V = slots[s].dtype == DType::F32 ? 4 : 8;
    vecs = std::max(vecs, (slots[s].dim + V - 1) / V);
  }
  int G = 1;
  while (G < 32 && static_cast<uint32_t>(G) < vecs) G *= 2;
  return G;
}

void launch_forward(const ForwardArgs& a, int groupSize, cudaStream_t s) {
  if (a.numBags == 0) return;
  switch (groupSize) {
    case 1: launch<1>(a, s); break;
    case 2: launch<2>(a, s); break;
    case 4: launch<4>(a, s); break;
    case 8: launch<8>(a, s); break;
    case 16: launch<16>(a, s); break;
    default: launch<32>(a, s); break;
  }
}

}  // namespace embshard::cuda
