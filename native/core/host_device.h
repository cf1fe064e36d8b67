// host_device.h — the host/device qualifier used by math shared between the CPU and CUDA backends.
#pragma once
#if defined(__CUDACC__)
#define EMB_HD __host__ __device__ __forceinline__
#else
#define EMB_HD inline
#endif
