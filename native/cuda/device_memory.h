// device_memory.h — one zero-initialised device allocation a JS DeviceArray owns (native/addon/device_array.cc):
// made on a device, filled from and read back to host memory with synchronous copies on the calling
// thread (the addon runs them off the event loop), freed with the last holder (the array, or a call still using it). Plain cudaMalloc
// (buffers.h): out-of-memory is ALLOC_FAILED naming the device and the size.
#pragma once
#include <cstdint>

#include "cuda/buffers.h"

namespace embshard::cuda {

class DeviceMemory {
 public:
  // `bytes` zeroed bytes on `device` (BACKEND_UNAVAILABLE when the device does not exist).
  DeviceMemory(int device, uint64_t bytes);
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  int device() const { return device_; }
  uint64_t bytes() const { return bytes_; }
  // Null for 0 bytes.
  void* data() const { return p_.get(); }
  // Host → device: `n` bytes from `src` to byte `offset`; device → host: the reverse. Both complete
  // before returning. The caller checks the range.
  void upload(const void* src, uint64_t offset, uint64_t n);
  void download(void* dst, uint64_t offset, uint64_t n) const;
  // `n` zero bytes from byte `offset`, complete before returning.
  void zero(uint64_t offset, uint64_t n);

 private:
  int device_;
  uint64_t bytes_;
  DevicePtr p_;
};

}  // namespace embshard::cuda
