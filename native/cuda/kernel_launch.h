// kernel_launch.h — the one way kernels are launched, so that the CUDA build and the CPU emulation of
// the CUDA execution model (native/cuda/emu, a test-only build) compile the same kernel code:
//   EMB_LAUNCH(kernel, grid, block, sharedBytes, stream, args...)  ==  kernel<<<grid, block, sharedBytes, stream>>>(args...)
//   EMB_EXTERN_SHARED(T, name)                                     ==  extern __shared__ T name[]
// Follow every EMB_LAUNCH with EMB_CUDA_CHECK_LAUNCH() (cuda_check.h).
#pragma once
#if defined(EMBSHARD_CUDA_EMU)
#include "cuda/emu/launch.h"
#define EMB_LAUNCH(kernel, grid, block, smem, stream, ...) ::embshard::emu::launch(kernel, grid, block, smem, stream, __VA_ARGS__)
#define EMB_EXTERN_SHARED(T, name) T* name = ::embshard::emu::dynamic_shared<T>()
#else
#define EMB_LAUNCH(kernel, grid, block, smem, stream, ...) kernel<<<grid, block, smem, stream>>>(__VA_ARGS__)
#define EMB_EXTERN_SHARED(T, name) extern __shared__ T name[]
#endif
