// device_buffer.h — a device buffer handed from one binding of the CUDA addon to another without a host
// copy (the GPU dense model's gradients to the NCCL group's allReduceDevice): a JS object
// { handle, device, count, owner } whose handle is a type-tagged External holding the device pointer,
// and whose `owner` (the object that owns the memory) keeps the memory alive as long as the object is.
#pragma once
#include <napi.h>

#include <cstdint>
#include <string>

#include "addon/errors.h"
#include "comm/group.h"

namespace embshard::addon {

struct DeviceBuffer {
  void* ptr = nullptr;
  int64_t count = 0;
  comm::ElemType type = comm::ElemType::F32;
  int device = 0;
};

inline const napi_type_tag kDeviceBufferTag = {0x656d6273686172ddULL, 0x6465766963656275ULL};

inline Napi::Object device_buffer_value(Napi::Env env, const DeviceBuffer& b, Napi::Object owner) {
  auto ext = Napi::External<DeviceBuffer>::New(env, new DeviceBuffer(b), [](Napi::Env, DeviceBuffer* p) { delete p; });
  ext.TypeTag(&kDeviceBufferTag);
  Napi::Object o = Napi::Object::New(env);
  o.Set("handle", ext);
  o.Set("device", Napi::Number::New(env, b.device));
  o.Set("count", Napi::Number::New(env, static_cast<double>(b.count)));
  o.Set("owner", owner);
  return o;
}

// INVALID_ARGUMENT naming `what` unless `v` came from device_buffer_value.
inline DeviceBuffer read_device_buffer(Napi::Env env, const Napi::Value& v, const char* what) {
  Napi::Value h = v.IsObject() ? v.As<Napi::Object>().Get("handle") : Napi::Value();
  if (h.IsEmpty() || !h.IsExternal() || !h.As<Napi::External<DeviceBuffer>>().CheckTypeTag(&kDeviceBufferTag))
    throw_error(env, "INVALID_ARGUMENT", std::string(what) + " must be a device buffer (e.g. a GPU DenseModel's deviceGrads())");
  return *h.As<Napi::External<DeviceBuffer>>().Data();
}

}  // namespace embshard::addon
