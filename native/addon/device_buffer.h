// device_buffer.h — a device buffer handed from one binding of the CUDA addon to another without a host
// copy: the GPU dense model's gradients (a JS object { handle, device, count, owner } whose handle is a
// type-tagged External holding the device pointer, and whose `owner` keeps the memory alive as long as
// the object is), or a DeviceArray (device_array.cc), whose memory a call holds until it settles, even
// if the array is freed meanwhile. The device collectives of the NCCL group take either.
#pragma once
#include <napi.h>

#include <cstdint>
#include <memory>
#include <string>

#include "addon/errors.h"
#include "comm/group.h"

namespace embshard::addon {

struct DeviceBuffer {
  void* ptr = nullptr;
  int64_t count = 0;  // elements of `type`
  comm::ElemType type = comm::ElemType::F32;
  int device = 0;
  std::shared_ptr<void> hold;  // a DeviceArray's memory, held for the call (null for the other buffers)
  int64_t bytes() const { return count * static_cast<int64_t>(comm::elem_size(type)); }
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

// The buffer of a DeviceArray's native object (device_array.cc); false when `o` is not one (always in
// an addon built without CUDA). INVALID_ARGUMENT naming `what` when the array was freed.
bool lend_device_array(Napi::Env env, const Napi::Object& o, const char* what, DeviceBuffer* out);

// INVALID_ARGUMENT naming `what` unless `v` is a DeviceArray or came from device_buffer_value.
inline DeviceBuffer read_device_buffer(Napi::Env env, const Napi::Value& v, const char* what) {
  if (v.IsObject()) {
    DeviceBuffer b;
    if (lend_device_array(env, v.As<Napi::Object>(), what, &b)) return b;
  }
  Napi::Value h = v.IsObject() ? v.As<Napi::Object>().Get("handle") : Napi::Value();
  if (h.IsEmpty() || !h.IsExternal() || !h.As<Napi::External<DeviceBuffer>>().CheckTypeTag(&kDeviceBufferTag))
    throw_error(env, "INVALID_ARGUMENT", std::string(what) + " must be a device buffer (a DeviceArray, or a GPU DenseModel's deviceGrads())");
  return *h.As<Napi::External<DeviceBuffer>>().Data();
}

}  // namespace embshard::addon
