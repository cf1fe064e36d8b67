// cuda_check.h — every CUDA runtime call goes through EMB_CUDA_CHECK: a failure becomes
// embshard::Error("CUDA_ERROR") with the call, the CUDA error name and message, and the source line.
#pragma once
#include <cuda_runtime.h>

#include "core/errors.h"

namespace embshard::cuda {

inline void check(cudaError_t e, const char* what, const char* file, int line) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();  // clear a non-sticky error so that the engine stays usable
  fail("CUDA_ERROR", "%s failed: %s (%s) at %s:%d", what, cudaGetErrorName(e), cudaGetErrorString(e), file, line);
}

}  // namespace embshard::cuda

#define EMB_CUDA_CHECK(expr) ::embshard::cuda::check((expr), #expr, __FILE__, __LINE__)
// After a kernel launch: launch-configuration errors are reported by cudaGetLastError.
#define EMB_CUDA_CHECK_LAUNCH() ::embshard::cuda::check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
