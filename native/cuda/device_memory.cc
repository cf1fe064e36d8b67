// device_memory.cc — see device_memory.h.
#include "cuda/device_memory.h"

#include <cuda_runtime.h>

#include "cuda/cuda_check.h"

namespace embshard::cuda {

DeviceMemory::DeviceMemory(int device, uint64_t bytes) : device_(device), bytes_(bytes) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || device < 0 || device >= count) {
    (void)cudaGetLastError();
    fail("BACKEND_UNAVAILABLE", "device array: cuda:%d does not exist (%d CUDA devices here)", device, e == cudaSuccess ? count : 0);
  }
  EMB_CUDA_CHECK(cudaSetDevice(device));
  p_.reset(device_alloc(bytes, "a device array", device));
  if (bytes > 0) EMB_CUDA_CHECK(cudaMemset(p_.get(), 0, bytes));
}

void DeviceMemory::upload(const void* src, uint64_t offset, uint64_t n) {
  if (n == 0) return;
  EMB_CUDA_CHECK(cudaSetDevice(device_));
  EMB_CUDA_CHECK(cudaMemcpy(static_cast<uint8_t*>(p_.get()) + offset, src, n, cudaMemcpyHostToDevice));
}

void DeviceMemory::download(void* dst, uint64_t offset, uint64_t n) const {
  if (n == 0) return;
  EMB_CUDA_CHECK(cudaSetDevice(device_));
  EMB_CUDA_CHECK(cudaMemcpy(dst, static_cast<const uint8_t*>(p_.get()) + offset, n, cudaMemcpyDeviceToHost));
}

void DeviceMemory::zero(uint64_t offset, uint64_t n) {
  if (n == 0) return;
  EMB_CUDA_CHECK(cudaSetDevice(device_));
  EMB_CUDA_CHECK(cudaMemset(static_cast<uint8_t*>(p_.get()) + offset, 0, n));
  EMB_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace embshard::cuda
