// device_api.h — what CUDA device code sees, for the emulator: the qualifiers (__global__, __device__, …
// become plain C++), the built-in variables (threadIdx, blockIdx, blockDim, gridDim of the running
// emulated thread), __syncthreads, the warp intrinsics (__shfl*_sync, __ballot_sync, __any_sync,
// __all_sync, __activemask, __syncwarp: the lanes of the mask meet in lockstep, grid.h), the atomics
// (GCC __atomic builtins on the same memory, relaxed like CUDA's), vector types and bit casts.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cuda/emu/grid.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
// Static shared memory: one instance per host thread; the blocks of a grid run one at a time on it.
#define __shared__ static thread_local
#define __constant__ static

#define threadIdx (::embshard::emu::BlockRun::current()->idx)
#define blockIdx (::embshard::emu::BlockRun::of_current().block_idx())
#define blockDim (::embshard::emu::BlockRun::of_current().block_dim())
#define gridDim (::embshard::emu::BlockRun::of_current().grid_dim())
inline constexpr int warpSize = 32;

using embshard::emu::dim3;
using embshard::emu::uint3;

struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned x, y;
};
struct alignas(8) float2 {
  float x, y;
};

using std::isfinite;
using std::isnan;

namespace embshard::emu {

// The value argument of an atomic takes its type from the pointer (as CUDA's fixed overloads).
template <typename T>
struct same {
  using type = T;
};

inline EmuThread& self() { return *BlockRun::current(); }

template <typename T>
uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "warp intrinsics move values of at most 8 bytes");
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <typename T>
T from_bits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}

// A shuffle: every lane of `mask` deposits v, then reads the value of lane src(lane) (its own when
// src < 0, i.e. outside its width segment, as on the GPU).
template <typename T, typename Src>
T shuffle(unsigned mask, T v, Src src, const char* what) {
  EmuThread& t = self();
  BlockRun& b = *t.block;
  const BlockRun::Meeting m = b.warp_meet(t, mask, to_bits(v), what);
  const int s = src(static_cast<int>(t.lane));
  if (s < 0) return v;
  if (!(m.mask & (1u << s))) b.fail(t, std::string(what) + ": source lane " + std::to_string(s) + " is not in the mask");
  return from_bits<T>(b.warp_of(t).slot[m.bank][s]);
}

// The lanes of `mask` vote; returns the bits of the lanes whose predicate was true.
inline unsigned vote(unsigned mask, int pred, const char* what) {
  EmuThread& t = self();
  BlockRun& b = *t.block;
  const BlockRun::Meeting m = b.warp_meet(t, mask, pred != 0, what);
  unsigned bits = 0;
  for (int l = 0; l < kWarpSize; ++l)
    if ((m.mask >> l & 1u) && b.warp_of(t).slot[m.bank][l]) bits |= 1u << l;
  return bits;
}

inline void preempt() { self().block->maybe_yield(self()); }

}  // namespace embshard::emu

inline void __syncthreads() { embshard::emu::self().block->syncthreads(embshard::emu::self()); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { (void)embshard::emu::vote(mask, 0, "__syncwarp"); }
inline unsigned __activemask() { return embshard::emu::self().block->warp_of(embshard::emu::self()).live; }
inline unsigned __ballot_sync(unsigned mask, int pred) { return embshard::emu::vote(mask, pred, "__ballot_sync"); }
inline int __any_sync(unsigned mask, int pred) { return embshard::emu::vote(mask, pred, "__any_sync") != 0; }
inline int __all_sync(unsigned mask, int pred) {
  const unsigned m = mask & embshard::emu::self().block->warp_of(embshard::emu::self()).exists;
  return embshard::emu::vote(mask, pred, "__all_sync") == m;
}

template <typename T>
T __shfl_sync(unsigned mask, T v, int srcLane, int width = warpSize) {
  return embshard::emu::shuffle(mask, v, [&](int lane) { return (lane & ~(width - 1)) + (srcLane & (width - 1)); }, "__shfl_sync");
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
  return embshard::emu::shuffle(
      mask, v, [&](int lane) { return (lane & (width - 1)) < static_cast<int>(delta) ? -1 : lane - static_cast<int>(delta); },
      "__shfl_up_sync");
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
  return embshard::emu::shuffle(
      mask, v, [&](int lane) { return (lane & (width - 1)) + static_cast<int>(delta) >= width ? -1 : lane + static_cast<int>(delta); },
      "__shfl_down_sync");
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int laneMask, int width = warpSize) {
  return embshard::emu::shuffle(
      mask, v, [&](int lane) { const int s = lane ^ laneMask; return (s & ~(width - 1)) != (lane & ~(width - 1)) ? -1 : s; },
      "__shfl_xor_sync");
}

inline float __uint_as_float(unsigned u) { return embshard::emu::from_bits<float>(u); }
inline unsigned __float_as_uint(float f) { return static_cast<unsigned>(embshard::emu::to_bits(f)); }
inline int __float_as_int(float f) { return static_cast<int>(embshard::emu::to_bits(f)); }
inline float __int_as_float(int i) { return embshard::emu::from_bits<float>(static_cast<unsigned>(i)); }

// Atomics: read-modify-write on the same memory with GCC builtins (relaxed, as CUDA's atomicX), each a
// preemption point of the fuzzing schedule. They return the old value.
#define EMB_EMU_ATOMIC(name, builtin)                        \
  template <typename T>                                      \
  T name(T* p, typename embshard::emu::same<T>::type v) {                                        \
    static_assert(std::is_integral_v<T>, #name ": integers"); \
    embshard::emu::preempt();                                \
    return builtin(p, v, __ATOMIC_RELAXED);                  \
  }
EMB_EMU_ATOMIC(atomicSub, __atomic_fetch_sub)
EMB_EMU_ATOMIC(atomicAnd, __atomic_fetch_and)
EMB_EMU_ATOMIC(atomicOr, __atomic_fetch_or)
EMB_EMU_ATOMIC(atomicXor, __atomic_fetch_xor)
EMB_EMU_ATOMIC(atomicExch, __atomic_exchange_n)
#undef EMB_EMU_ATOMIC

template <typename T>
T atomicCAS(T* p, typename embshard::emu::same<T>::type compare, typename embshard::emu::same<T>::type v) {
  embshard::emu::preempt();
  __atomic_compare_exchange_n(p, &compare, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return compare;  // the old value (compare_exchange wrote it into `compare` on failure)
}

// atomicAdd on integers and on floating point (a compare-and-swap loop on the bits, as the GPU's result).
template <typename T>
T atomicAdd(T* p, typename embshard::emu::same<T>::type v) {
  embshard::emu::preempt();
  if constexpr (std::is_integral_v<T>) {
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
  } else {
    T old, next;
    __atomic_load(p, &old, __ATOMIC_RELAXED);
    do next = static_cast<T>(old + v);
    while (!__atomic_compare_exchange(p, &old, &next, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return old;
  }
}

template <typename T, typename F>
T emb_emu_atomic_update(T* p, F f) {
  embshard::emu::preempt();
  T old, next;
  __atomic_load(p, &old, __ATOMIC_RELAXED);
  do next = f(old);
  while (!__atomic_compare_exchange(p, &old, &next, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  return old;
}
template <typename T>
T atomicMax(T* p, typename embshard::emu::same<T>::type v) {
  return emb_emu_atomic_update(p, [&](T o) { return o < v ? v : o; });
}
template <typename T>
T atomicMin(T* p, typename embshard::emu::same<T>::type v) {
  return emb_emu_atomic_update(p, [&](T o) { return v < o ? v : o; });
}
// ((old >= v) ? 0 : old + 1) and ((old == 0 || old > v) ? v : old - 1), as CUDA defines them.
inline unsigned atomicInc(unsigned* p, unsigned v) {
  return emb_emu_atomic_update(p, [&](unsigned o) { return o >= v ? 0u : o + 1; });
}
inline unsigned atomicDec(unsigned* p, unsigned v) {
  return emb_emu_atomic_update(p, [&](unsigned o) { return o == 0 || o > v ? v : o - 1; });
}
