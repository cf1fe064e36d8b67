// isa.h — EMBSHARD_CPU_KERNEL marks the few functions that hold a CPU kernel's whole hot loop. On x86-64
// with GCC they are compiled three times (AVX-512 = x86-64-v4, AVX2 = x86-64-v3, and the baseline) and
// the dynamic loader picks the best the machine runs, so one prebuilt binary is fast on new CPUs and
// still loads on old ones. `flatten` inlines everything the function calls into each copy: no helper is
// left compiled for one ISA and shared with another. The floating-point results are the same on every
// copy: each is element-wise IEEE arithmetic in the same order, with no contraction into FMA
// (-ffp-contract=off) and no reassociation.
#pragma once
#include <cstddef>  // defines __GLIBC__ on glibc: the clones are chosen through an IFUNC resolver

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__GLIBC__) && !defined(EMBSHARD_NO_ISA_CLONES)
#define EMBSHARD_CPU_KERNEL __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"), flatten))
#else
#define EMBSHARD_CPU_KERNEL __attribute__((flatten))
#endif
