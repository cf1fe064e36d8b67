// probe.cu — cuda_probe(): can this process use CUDA, and with which devices? Never throws; every
// failure becomes the `reason` that backends() reports (no driver, driver too old, no device, no
// kernel image for the device's architecture, …). HBM peak bandwidth comes from device attributes:
// 2 transfers per clock (DDR) × memory clock × bus width.
#include <cuda_runtime.h>

#include <string>

#include "core/errors.h"
#include "cuda/cuda_engine.h"

namespace embshard {

namespace {

__global__ void probe_kernel(int* out) {
  if (out) *out = 1;
}

std::string version_string(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

}  // namespace

CudaInfo cuda_probe() {
  CudaInfo info;
  (void)cudaRuntimeGetVersion(&info.runtimeVersion);
  if (cudaDriverGetVersion(&info.driverVersion) != cudaSuccess || info.driverVersion == 0) {
    (void)cudaGetLastError();
    info.driverVersion = 0;
    info.reason = "no NVIDIA driver: libcuda.so.1 could not be loaded (install the NVIDIA driver)";
    return info;
  }
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    if (e == cudaErrorInsufficientDriver || e == cudaErrorCompatNotSupportedOnDevice) {
      info.reason = "the NVIDIA driver is too old: it supports CUDA " + version_string(info.driverVersion) +
                    ", this binary needs CUDA " + version_string(info.runtimeVersion) + " (update the driver)";
    } else if (e == cudaErrorNoDevice) {
      info.reason = "no CUDA device: the driver found no NVIDIA GPU";
    } else {
      info.reason = std::string("CUDA cannot be initialised: ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
    }
    return info;
  }
  if (count == 0) {
    info.reason = "no CUDA device: the driver found no NVIDIA GPU";
    return info;
  }
  std::string unsupported;
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp p{};
    CudaDeviceInfo di;
    di.index = d;
    cudaError_t pe = cudaGetDeviceProperties(&p, d);
    if (pe != cudaSuccess) {
      (void)cudaGetLastError();
      unsupported += (unsupported.empty() ? "" : "; ") + std::string("device ") + std::to_string(d) + ": " + cudaGetErrorString(pe);
      continue;
    }
    di.name = p.name;
    di.major = p.major;
    di.minor = p.minor;
    di.smCount = p.multiProcessorCount;
    di.totalMemory = p.totalGlobalMem;
    (void)cudaDeviceGetAttribute(&di.memoryClockKHz, cudaDevAttrMemoryClockRate, d);
    (void)cudaDeviceGetAttribute(&di.busWidthBits, cudaDevAttrGlobalMemoryBusWidth, d);
    (void)cudaGetLastError();
    di.hbmPeakGBps = 2.0 * static_cast<double>(di.memoryClockKHz) * 1e3 * (static_cast<double>(di.busWidthBits) / 8.0) / 1e9;
    // A kernel image for this device must exist in the binary (built for sm_80, sm_90 and PTX 9.0).
    cudaFuncAttributes fa{};
    cudaError_t fe = cudaSetDevice(d);
    if (fe == cudaSuccess) fe = cudaFuncGetAttributes(&fa, probe_kernel);
    if (fe != cudaSuccess) {
      (void)cudaGetLastError();
      unsupported += (unsupported.empty() ? "" : "; ") + std::string("device ") + std::to_string(d) + " (" + di.name + ", sm_" +
                     std::to_string(di.major) + std::to_string(di.minor) + "): " + cudaGetErrorString(fe);
      continue;
    }
    info.devices.push_back(di);
  }
  if (info.devices.empty()) {
    info.reason = unsupported.empty() ? "no usable CUDA device" : "no usable CUDA device: " + unsupported;
    return info;
  }
  info.available = true;
  return info;
}

}  // namespace embshard
