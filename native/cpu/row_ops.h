// row_ops.h — the inner loops of the CPU kernels, specialised per storage dtype: accumulate a row into
// an fp32 accumulator, convert a row to fp32, prefetch a row. Plain loops the compiler vectorises.
#pragma once
#include <cstdint>

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

// acc[c] += row[c] over a compile-time width (fp32 rows): fully unrolled, vectorised
template <uint32_t D>
inline void acc_row_fixed(float* __restrict acc, const float* __restrict r) {
  for (uint32_t c = 0; c < D; ++c) acc[c] += r[c];
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

// Prefetch the first 512 bytes of a row for reading (non-temporal hint: the row is read once).
inline void prefetch_row(const uint8_t* row, uint64_t bytes) {
  if (bytes == 256) {
    __builtin_prefetch(row, 0, 0);
    __builtin_prefetch(row + 64, 0, 0);
    __builtin_prefetch(row + 128, 0, 0);
    __builtin_prefetch(row + 192, 0, 0);
    return;
  }
  uint64_t n = bytes < 512 ? bytes : 512;
  for (uint64_t o = 0; o < n; o += 64) __builtin_prefetch(row + o, 0, 0);
}

}  // namespace embshard::cpu
