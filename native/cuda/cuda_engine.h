// cuda_engine.h — the CUDA backend's entry points, free of CUDA headers so that plain C++ files (the
// addon's engine_wrap.cc, cuda_info.cc) can include it: the runtime probe (is CUDA usable here, which
// devices, how fast is their memory) and the factory of the CUDA twin of the CPU embedding engine.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/engine.h"

namespace embshard {

struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  int major = 0, minor = 0;  // compute capability
  int smCount = 0;
  uint64_t totalMemory = 0;  // bytes
  int memoryClockKHz = 0;    // peak memory clock
  int busWidthBits = 0;      // global memory bus width
  double hbmPeakGBps = 0;    // 2 (DDR) × clock × bus width / 8, in GB/s (1e9 bytes)
};

struct CudaInfo {
  bool available = false;
  std::string reason;      // why not, when !available
  int driverVersion = 0;   // e.g. 13000 (0: no driver)
  int runtimeVersion = 0;  // the statically linked runtime this binary was built with
  std::vector<CudaDeviceInfo> devices;
};

// Never throws: every failure becomes `reason` (no driver, driver too old, no device, …).
CudaInfo cuda_probe();

// The CUDA engine on device `device` (BACKEND_UNAVAILABLE when that device does not exist).
// Tables are zero unless `initialize`, then filled exactly as the CPU engine fills them.
std::unique_ptr<Engine> make_cuda_engine(const CollectionSpec& spec, const Layout& layout, int device, bool initialize);

}  // namespace embshard
