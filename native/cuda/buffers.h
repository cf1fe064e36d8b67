// buffers.h — owned device memory for the CUDA engine: a fixed device allocation (the table arenas)
// and grow-only device scratch reused across calls (pinned host memory is the Stager's, staging.h).
// Plain cudaMalloc (never managed memory); out-of-memory is ALLOC_FAILED naming what was being
// allocated and how many bytes.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/errors.h"
#include "cuda/cuda_check.h"

namespace embshard::cuda {

// cudaMalloc of `bytes` (0 allowed: returns null). `what` names the memory in the error message.
inline void* device_alloc(uint64_t bytes, const std::string& what, int device) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    size_t freeB = 0, totalB = 0;
    (void)cudaMemGetInfo(&freeB, &totalB);
    (void)cudaGetLastError();
    fail("ALLOC_FAILED", "cuda:%d: cannot allocate %llu bytes for %s (%llu bytes free of %llu)", device,
         static_cast<unsigned long long>(bytes), what.c_str(), static_cast<unsigned long long>(freeB),
         static_cast<unsigned long long>(totalB));
  }
  check(e, "cudaMalloc", __FILE__, __LINE__);
  return p;
}

struct CudaFree {
  void operator()(void* p) const {
    if (p) (void)cudaFree(p);
  }
};
// An owned device allocation (the table arenas).
using DevicePtr = std::unique_ptr<void, CudaFree>;

// A device allocation that only grows; contents are not preserved across growth.
class DeviceScratch {
 public:
  explicit DeviceScratch(const char* what) : what_(what) {}
  ~DeviceScratch() { release(); }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;

  // Returns a buffer of at least `bytes` (cudaFree synchronises the device, so an old buffer is
  // never freed under a running kernel).
  void* ensure(uint64_t bytes, int device) {
    if (bytes <= cap_ && p_) return p_;
    release();
    uint64_t want = bytes + bytes / 4 + 256;  // headroom: batches vary in size
    p_ = device_alloc(want, std::string("the batch scratch (") + what_ + ")", device);
    cap_ = want;
    return p_;
  }
  // Bytes held now (0 before the first ensure).
  uint64_t capacity() const { return cap_; }
  void release() {
    if (p_) (void)cudaFree(p_);
    p_ = nullptr;
    cap_ = 0;
  }

 private:
  const char* what_;
  void* p_ = nullptr;
  uint64_t cap_ = 0;
};

}  // namespace embshard::cuda
