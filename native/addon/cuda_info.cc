// cuda_info.cc — the CUDA addon's `cudaInfo()` export: the result of cuda_probe() as a plain object
// { available, reason?, driverVersion, runtimeVersion, devices: [{ index, name, computeCapability,
// smCount, totalMemory, memoryClockKHz, busWidthBits, hbmPeakGBps }] }. lib/backends.ts calls it in a
// child process before the main process ever loads this binary. CUDA addon only.
#if defined(EMBSHARD_WITH_CUDA)
#include <napi.h>

#include "addon/errors.h"
#include "addon/registry.h"
#include "cuda/cuda_engine.h"

namespace embshard::addon {
namespace {

Napi::Value CudaInfoJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    const CudaInfo ci = cuda_probe();
    Napi::Object o = Napi::Object::New(env);
    o.Set("available", ci.available);
    if (!ci.available) o.Set("reason", ci.reason);
    o.Set("driverVersion", ci.driverVersion);
    o.Set("runtimeVersion", ci.runtimeVersion);
    Napi::Array devs = Napi::Array::New(env, ci.devices.size());
    for (size_t i = 0; i < ci.devices.size(); ++i) {
      const CudaDeviceInfo& d = ci.devices[i];
      Napi::Object x = Napi::Object::New(env);
      x.Set("index", d.index);
      x.Set("name", d.name);
      x.Set("computeCapability", std::to_string(d.major) + "." + std::to_string(d.minor));
      x.Set("smCount", d.smCount);
      x.Set("totalMemory", static_cast<double>(d.totalMemory));
      x.Set("memoryClockKHz", d.memoryClockKHz);
      x.Set("busWidthBits", d.busWidthBits);
      x.Set("hbmPeakGBps", d.hbmPeakGBps);
      devs.Set(static_cast<uint32_t>(i), x);
    }
    o.Set("devices", devs);
    return o;
  });
}

void Init(Napi::Env env, Napi::Object exports) { exports.Set("cudaInfo", Napi::Function::New(env, CudaInfoJs)); }

Part part("cuda_info", &Init);

}  // namespace
}  // namespace embshard::addon
#endif  // EMBSHARD_WITH_CUDA
