// init.h — deterministic table initialisation and the random bits of stochastic rounding, shared by
// both backends: every value is a pure function of (seed, table, element), so tables are identical on
// any thread count and on CPU and GPU.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/half.h"
#include "core/host_device.h"
#include "core/rng.h"
#include "core/types.h"

namespace embshard {

// The per-table part of the init hash: hash3(seed, table, x) == mix64(init_stream(seed, table) ^ x).
EMB_HD uint64_t init_stream(uint64_t seed, uint64_t table) { return mix64(mix64(seed) ^ table); }

// Value of element `elem` of the table whose init_stream is `stream` (loops over many elements hoist it).
EMB_HD float init_value_at(InitKind kind, float a, float b, uint64_t stream, uint64_t elem) {
  if (kind == InitKind::Constant) return a;
  if (kind == InitKind::Uniform) return a + (b - a) * uniform01(mix64(stream ^ elem));
  // Normal: Box–Muller from two independent uniforms; u1 in (0, 1].
  float u1 = 1.0f - uniform01(mix64(stream ^ (2 * elem)));
  float u2 = uniform01(mix64(stream ^ (2 * elem + 1)));
  return a + b * sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795864f * u2);
}

// Value of element `elem` (= row * dim + col) of table `table` in fp32.
EMB_HD float init_value(InitKind kind, float a, float b, uint64_t seed, uint64_t table, uint64_t elem) {
  return init_value_at(kind, a, b, init_stream(seed, table), elem);
}

// Stores fp32 `v` in a table of dtype `t` at `dst` (round to nearest even).
EMB_HD void store_value(DType t, void* dst, uint64_t col, float v) {
  if (t == DType::F32) static_cast<float*>(dst)[col] = v;
  else if (t == DType::F16) static_cast<uint16_t*>(dst)[col] = f32_to_f16(v);
  else static_cast<uint16_t*>(dst)[col] = f32_to_bf16(v);
}

// Stores with stochastic rounding; `rnd` from rounding_bits.
EMB_HD void store_value_sr(DType t, void* dst, uint64_t col, float v, uint32_t rnd) {
  if (t == DType::F32) static_cast<float*>(dst)[col] = v;
  else if (t == DType::F16) static_cast<uint16_t*>(dst)[col] = f32_to_f16_sr(v, rnd);
  else static_cast<uint16_t*>(dst)[col] = f32_to_bf16_sr(v, rnd);
}

EMB_HD float load_value(DType t, const void* src, uint64_t col) {
  if (t == DType::F32) return static_cast<const float*>(src)[col];
  if (t == DType::F16) return f16_to_f32(static_cast<const uint16_t*>(src)[col]);
  return bf16_to_f32(static_cast<const uint16_t*>(src)[col]);
}

// Random bits for stochastic rounding of column `col` of global row `globalRow` (layout rowBase + row)
// at optimizer step `step` (1-based: the step being applied). dim <= 65536 < 2^17.
EMB_HD uint32_t rounding_bits(uint64_t seed, uint64_t step, uint64_t globalRow, uint64_t col) {
  return static_cast<uint32_t>(hash3(seed ^ 0x5352ull, step, (globalRow << 17) | col));
}

}  // namespace embshard
