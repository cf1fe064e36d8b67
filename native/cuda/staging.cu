// staging.cu — the pinned staging ring of staging.h.
#include "cuda/staging.h"

#include <algorithm>
#include <cstring>

#include "cuda/cuda_check.h"

namespace embshard::cuda {

Stager::Stager() {
  // A constructor that throws runs no destructor: free what was made before rethrowing.
  try {
    for (int h = 0; h < 2; ++h) {
      void* p = nullptr;
      cudaError_t e = cudaMallocHost(&p, kHalfBytes);
      if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        fail("ALLOC_FAILED", "cannot allocate %llu bytes of pinned host memory for staging",
             static_cast<unsigned long long>(kHalfBytes));
      }
      EMB_CUDA_CHECK(e);
      half_[h] = static_cast<uint8_t*>(p);
      EMB_CUDA_CHECK(cudaEventCreateWithFlags(&done_[h], cudaEventDisableTiming));
    }
  } catch (...) {
    release();
    throw;
  }
}

void Stager::release() {
  for (int h = 0; h < 2; ++h) {
    if (done_[h]) {
      (void)cudaEventSynchronize(done_[h]);
      (void)cudaEventDestroy(done_[h]);
    }
    if (half_[h]) (void)cudaFreeHost(half_[h]);
    done_[h] = nullptr;
    half_[h] = nullptr;
  }
}

Stager::~Stager() { release(); }

// Moves to the other half, waiting until the copies that last used it have finished.
void Stager::next_half() {
  cur_ ^= 1;
  if (pending_[cur_]) EMB_CUDA_CHECK(cudaEventSynchronize(done_[cur_]));
  pending_[cur_] = false;
  used_[cur_] = 0;
}

void Stager::h2d(void* dst, const void* src, uint64_t bytes, cudaStream_t s) {
  uint8_t* d = static_cast<uint8_t*>(dst);
  const uint8_t* h = static_cast<const uint8_t*>(src);
  while (bytes > 0) {
    // 256-byte aligned slots keep pinned reads aligned for the copy engine
    uint64_t at = (used_[cur_] + 255) & ~255ull;
    if (at >= kHalfBytes) {
      next_half();
      continue;
    }
    uint64_t n = std::min(bytes, kHalfBytes - at);
    std::memcpy(half_[cur_] + at, h, n);
    EMB_CUDA_CHECK(cudaMemcpyAsync(d, half_[cur_] + at, n, cudaMemcpyHostToDevice, s));
    EMB_CUDA_CHECK(cudaEventRecord(done_[cur_], s));
    pending_[cur_] = true;
    used_[cur_] = at + n;
    d += n;
    h += n;
    bytes -= n;
  }
}

void Stager::d2h(void* dst, const void* src, uint64_t bytes, cudaStream_t s) {
  // Chunk k lands in half k % 2; chunk k - 1 is drained to `dst` while chunk k is in flight. Device
  // writes into a half are stream-ordered after any earlier copy that reads it, so only the host side
  // has to wait (on the half's event) before it reads the half.
  if (bytes == 0) return;
  uint8_t* h = static_cast<uint8_t*>(dst);
  const uint8_t* d = static_cast<const uint8_t*>(src);
  uint64_t prevBytes = 0;
  int prevHalf = 0;
  uint8_t* prevDst = nullptr;
  while (bytes > 0 || prevBytes > 0) {
    uint64_t n = 0;
    int half = prevHalf ^ 1;
    if (bytes > 0) {
      n = std::min(bytes, kHalfBytes);
      EMB_CUDA_CHECK(cudaMemcpyAsync(half_[half], d, n, cudaMemcpyDeviceToHost, s));
      EMB_CUDA_CHECK(cudaEventRecord(done_[half], s));
      pending_[half] = true;
    }
    if (prevBytes > 0) {
      EMB_CUDA_CHECK(cudaEventSynchronize(done_[prevHalf]));
      pending_[prevHalf] = false;
      std::memcpy(prevDst, half_[prevHalf], prevBytes);
    }
    prevBytes = n;
    prevHalf = half;
    prevDst = h;
    d += n;
    h += n;
    bytes -= n;
  }
  // The last chunk completed after every earlier copy on the stream: both halves are free again.
  used_[0] = used_[1] = 0;
  pending_[0] = pending_[1] = false;
}

}  // namespace embshard::cuda
