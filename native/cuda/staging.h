// staging.h — every host↔device copy of the CUDA engine goes through two pinned halves of one
// staging ring on the engine's stream: host→device copies pack into the current half (waiting only
// when a half is reused while its previous copies are still in flight), device→host copies are
// double-buffered chunk by chunk. Host pointers may be pageable (JS typed arrays).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace embshard::cuda {

class Stager {
 public:
  static constexpr uint64_t kHalfBytes = 8ull << 20;  // 8 MiB per half

  Stager();  // allocates the pinned halves and their events on the current device
  ~Stager();
  Stager(const Stager&) = delete;
  Stager& operator=(const Stager&) = delete;

  // Enqueues dst[0..bytes) = src[0..bytes) on `s`. When it returns, `src` may be reused; the copy
  // itself completes in stream order.
  void h2d(void* dst, const void* src, uint64_t bytes, cudaStream_t s);
  // dst[0..bytes) = src[0..bytes) after all earlier work on `s`; returns when dst holds the data.
  void d2h(void* dst, const void* src, uint64_t bytes, cudaStream_t s);

 private:
  void next_half();
  void release();  // waits for the halves' copies, then frees them
  uint8_t* half_[2] = {nullptr, nullptr};
  cudaEvent_t done_[2] = {nullptr, nullptr};
  bool pending_[2] = {false, false};
  uint64_t used_[2] = {0, 0};
  int cur_ = 0;
};

}  // namespace embshard::cuda
