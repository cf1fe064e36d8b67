// half.h — fp16 and bf16 storage formats: conversion to fp32 and rounding from fp32
// (round-to-nearest-even, or stochastic rounding driven by a caller-supplied 32-bit random value).
// Written once for host and device: the CPU backend runs exactly the code the CUDA kernels run.
#pragma once
#include <cstdint>
#include <cstring>

#include "host_device.h"

namespace embshard {

EMB_HD uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
EMB_HD float bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// ---- bf16: the top 16 bits of an fp32 ----
EMB_HD float bf16_to_f32(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }

EMB_HD uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(u >> 16);
}

// Stochastic rounding: add a uniform random value below the dropped 16 bits, then truncate.
// E[result] = f for finite f (unbiased), which keeps tiny updates from vanishing in low precision.
EMB_HD uint16_t f32_to_bf16_sr(float f, uint32_t rnd) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7f800000u) == 0x7f800000u) return f32_to_bf16(f);
  u += (rnd & 0xffffu);
  return static_cast<uint16_t>(u >> 16);
}

// ---- fp16 (IEEE binary16) ----
EMB_HD float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    if (man == 0) return bits_f32(sign);
    // subnormal: value = man * 2^-24
    float v = static_cast<float>(man) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exp == 31) return bits_f32(sign | 0x7f800000u | (man << 13));
  return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

// Round-to-nearest-even fp32 -> fp16 with overflow to inf and gradual underflow.
EMB_HD uint16_t f32_to_f16(float f) {
  uint32_t u = f32_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u));
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520 -> inf
  if (a < 0x38800000u) {                                               // below 2^-14: subnormal or zero
    if (a < 0x33000000u) return static_cast<uint16_t>(sign);           // < 2^-25 rounds to zero
    uint32_t e = a >> 23;
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e;  // 14..24 so that result = m >> shift (in units of 2^-24)
    uint32_t r = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t r = a - 0x38000000u;  // rebias exponent 127 -> 15
  r += 0xfffu + ((r >> 13) & 1u);
  return static_cast<uint16_t>(sign | (r >> 13));
}

// Stochastic rounding to fp16: pick one of the two neighbouring fp16 values with probability
// proportional to proximity (computed exactly in the fp32 domain).
EMB_HD uint16_t f32_to_f16_sr(float f, uint32_t rnd) {
  uint16_t n = f32_to_f16(f);
  float back = f16_to_f32(n);
  if (!(back == back) || (n & 0x7c00u) == 0x7c00u || back == f) return n;
  // the neighbour on the other side of f
  uint16_t other;
  bool up = (f > back);  // need a value greater than back in real terms
  bool neg = (n & 0x8000u) != 0;
  if ((n & 0x7fffu) == 0) other = static_cast<uint16_t>((f > 0 ? 0x0000u : 0x8000u) | 1u);
  else other = static_cast<uint16_t>((up != neg) ? n + 1 : n - 1);
  float o = f16_to_f32(other);
  float p_other = (f - back) / (o - back);  // in (0, 0.5]
  float u01 = static_cast<float>(rnd >> 8) * (1.0f / 16777216.0f);
  return u01 < p_other ? other : n;
}

}  // namespace embshard
