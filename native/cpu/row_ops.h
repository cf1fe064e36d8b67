// row_ops.h — the inner loops of the CPU kernels, specialised per storage dtype: accumulate a row into
// an fp32 accumulator, convert a row to fp32, prefetch a row. Plain loops the compiler vectorises.
#pragma once
#include <cstdint>
#include <type_traits>

#include "core/half.h"
#include "core/types.h"

namespace embshard::cpu {

template <DType DT>
inline float ld(const uint8_t* row, uint32_t c) {
  if constexpr (DT == DType::F32) return reinterpret_cast<const float*>(row)[c];
  else if constexpr (DT == DType::F16) return f16_to_f32(reinterpret_cast<const uint16_t*>(row)[c]);
  else return bf16_to_f32(reinterpret_cast<const uint16_t*>(row)[c]);
}

// acc[c] += row[c]   (no weights: exact same sum as the CUDA kernel, no multiply)
template <DType DT>
inline void acc_row(float* __restrict acc, const uint8_t* __restrict row, uint32_t dim) {
  if constexpr (DT == DType::F32) {
    const float* r = reinterpret_cast<const float*>(row);
    for (uint32_t c = 0; c < dim; ++c) acc[c] += r[c];
  } else {
    for (uint32_t c = 0; c < dim; ++c) acc[c] += ld<DT>(row, c);
  }
}

// acc[c] += w * row[c]
template <DType DT>
inline void acc_row_w(float* __restrict acc, const uint8_t* __restrict row, uint32_t dim, float w) {
  for (uint32_t c = 0; c < dim; ++c) acc[c] += w * ld<DT>(row, c);
}

template <DType DT>
inline void copy_row(float* __restrict out, const uint8_t* __restrict row, uint32_t dim) {
  for (uint32_t c = 0; c < dim; ++c) out[c] = ld<DT>(row, c);
}

// fn(std::integral_constant<uint32_t, D>{}) with D = dim for the widths the loops have fixed-width
// copies of (16, 32, 64, 128), D = 0 (width taken at run time) for any other.
template <typename Fn>
inline void with_row_width(uint32_t dim, Fn&& fn) {
  switch (dim) {
    case 16: fn(std::integral_constant<uint32_t, 16>{}); break;
    case 32: fn(std::integral_constant<uint32_t, 32>{}); break;
    case 64: fn(std::integral_constant<uint32_t, 64>{}); break;
    case 128: fn(std::integral_constant<uint32_t, 128>{}); break;
    default: fn(std::integral_constant<uint32_t, 0>{}); break;
  }
}

// Prefetches every cache line of [p, p + bytes): RW 0 = for reading, 1 = for writing; Hint is the
// locality hint of __builtin_prefetch (0 = non-temporal).
template <int RW, int Hint>
inline void prefetch_lines(const void* p, uint64_t bytes) {
  const uint8_t* c = static_cast<const uint8_t*>(p);
  for (uint64_t o = 0; o < bytes; o += 64) __builtin_prefetch(c + o, RW, Hint);
}

// Prefetch the first 512 bytes of a row for reading, with the T2 hint (prefetcht2: measured about a
// fifth faster in the forward than the non-temporal hint on AVX-512 EPYC, with uniform and Zipf ids).
// The common 256-byte row is a constant length, so the loop unrolls.
inline void prefetch_row(const uint8_t* row, uint64_t bytes) {
  if (bytes == 256) prefetch_lines<0, 1>(row, 256);
  else prefetch_lines<0, 1>(row, bytes < 512 ? bytes : 512);
}

}  // namespace embshard::cpu
