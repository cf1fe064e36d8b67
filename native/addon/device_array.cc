// device_array.cc — `DeviceArray`, the ObjectWrap over one device allocation (cuda/device_memory.h):
// new DeviceArray(device, elemType 'f32'|'f64'|'i32'|'i64'|'u16', length) makes it zeroed; upload(src,
// offset) and download(dst, offset) copy between it and a typed array of its element type, off the
// event loop (AsyncWorker), reading / writing the typed array in place; zero(offset, count) clears a range
// (synchronously); free() gives the memory back
// once no call holds it. The device collectives of the NCCL group read it (device_buffer.h,
// lend_device_array). lib/device-array.ts is its TypeScript face. CUDA addon only: the CPU addon
// defines only lend_device_array, which recognises nothing there.
#include "addon/device_buffer.h"

#if defined(EMBSHARD_WITH_CUDA)
#include <memory>

#include "addon/errors.h"
#include "addon/js_args.h"
#include "addon/promise_worker.h"
#include "addon/registry.h"
#include "cuda/device_memory.h"
#endif

namespace embshard::addon {

#if defined(EMBSHARD_WITH_CUDA)
namespace {

const napi_type_tag kDeviceArrayTag = {0x656d627368617264ULL, 0x6576617272617921ULL};

napi_typedarray_type typed_array_of(comm::ElemType t) {
  switch (t) {
    case comm::ElemType::F32: return napi_float32_array;
    case comm::ElemType::F64: return napi_float64_array;
    case comm::ElemType::I32: return napi_int32_array;
    case comm::ElemType::I64: return napi_bigint64_array;
    case comm::ElemType::U16: return napi_uint16_array;
  }
  return napi_float32_array;
}

const char* elem_name(comm::ElemType t) {
  switch (t) {
    case comm::ElemType::F32: return "f32";
    case comm::ElemType::F64: return "f64";
    case comm::ElemType::I32: return "i32";
    case comm::ElemType::I64: return "i64";
    case comm::ElemType::U16: return "u16";
  }
  return "f32";
}

// One host ↔ device copy of `bytes` at byte `offset` of the memory, on a libuv thread.
class CopyWorker : public PromiseWorker {
 public:
  CopyWorker(Napi::Env env, std::shared_ptr<cuda::DeviceMemory> mem, uint8_t* host, uint64_t offset, uint64_t bytes, bool up)
      : PromiseWorker(env), mem_(std::move(mem)), host_(host), offset_(offset), bytes_(bytes), up_(up) {}

 protected:
  void Run() override {
    if (up_) mem_->upload(host_, offset_, bytes_);
    else mem_->download(host_, offset_, bytes_);
  }

 private:
  std::shared_ptr<cuda::DeviceMemory> mem_;
  uint8_t* host_;
  uint64_t offset_, bytes_;
  bool up_;
};

}  // namespace

class DeviceArrayWrap : public Napi::ObjectWrap<DeviceArrayWrap> {
 public:
  static void Init(Napi::Env env, Napi::Object exports) {
    Napi::Function f = DefineClass(env, "DeviceArray",
                                   {InstanceAccessor<&DeviceArrayWrap::Device>("device"),
                                    InstanceAccessor<&DeviceArrayWrap::Length>("length"),
                                    InstanceAccessor<&DeviceArrayWrap::Type>("type"),
                                    InstanceAccessor<&DeviceArrayWrap::Freed>("freed"),
                                    InstanceMethod<&DeviceArrayWrap::Upload>("upload"),
                                    InstanceMethod<&DeviceArrayWrap::Download>("download"),
                                    InstanceMethod<&DeviceArrayWrap::Zero>("zero"),
                                    InstanceMethod<&DeviceArrayWrap::Free>("free")});
    exports.Set("DeviceArray", f);
  }

  // new DeviceArray(device, elemType, length)
  explicit DeviceArrayWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<DeviceArrayWrap>(info) {
    Napi::Env env = info.Env();
    const int device = static_cast<int>(int_arg(env, info[0], "DeviceArray: device", 0, 1023));
    guard(env, [&] { type_ = comm::parse_elem_type(string_arg(env, info[1], "DeviceArray: type")); });
    length_ = int_arg(env, info[2], "DeviceArray: length", 0, (int64_t(1) << 53) / 8);
    guard(env, [&] { mem_ = std::make_shared<cuda::DeviceMemory>(device, static_cast<uint64_t>(length_) * comm::elem_size(type_)); });
    info.This().As<Napi::Object>().TypeTag(&kDeviceArrayTag);
  }

  // The buffer a call borrows (INVALID_ARGUMENT naming `what` once freed).
  DeviceBuffer lend(Napi::Env env, const char* what) const {
    if (!mem_) throw_error(env, "INVALID_ARGUMENT", std::string(what) + ": the device array was freed");
    DeviceBuffer b;
    b.ptr = mem_->data();
    b.count = length_;
    b.type = type_;
    b.device = mem_->device();
    b.hold = mem_;
    return b;
  }

 private:
  Napi::Value Device(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), mem_ ? mem_->device() : -1); }
  Napi::Value Length(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), static_cast<double>(length_)); }
  Napi::Value Type(const Napi::CallbackInfo& info) { return Napi::String::New(info.Env(), elem_name(type_)); }
  Napi::Value Freed(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), !mem_); }

  // upload(src: typed array of the element type, offset: elements) / download(dst, offset) -> Promise<void>
  Napi::Value Copy(const Napi::CallbackInfo& info, bool up) {
    Napi::Env env = info.Env();
    return guard(env, [&]() -> Napi::Value {
      const char* what = up ? "DeviceArray.upload" : "DeviceArray.download";
      if (!mem_) throw_error(env, "INVALID_ARGUMENT", std::string(what) + ": the device array was freed");
      if (!info[0].IsTypedArray() || info[0].As<Napi::TypedArray>().TypedArrayType() != typed_array_of(type_))
        throw_error(env, "INVALID_ARGUMENT", format("%s: the host array must be a typed array of the device array's type '%s'", what, elem_name(type_)));
      // the data pointer from napi_get_typedarray_info (already at the byte offset): it also serves typed
      // arrays over a SharedArrayBuffer, which Napi::TypedArray::ArrayBuffer() refuses
      napi_typedarray_type t;
      size_t length = 0, byteOffset = 0;
      void* data = nullptr;
      napi_value buffer;
      if (napi_get_typedarray_info(env, info[0], &t, &length, &data, &buffer, &byteOffset) != napi_ok)
        throw_error(env, "INVALID_ARGUMENT", format("%s: cannot read the host array", what));
      const int64_t n = static_cast<int64_t>(length);
      const int64_t offset = int_arg(env, info[1], (std::string(what) + ": offset").c_str(), 0, length_);
      if (offset + n > length_)
        throw_error(env, "LENGTH_MISMATCH", format("%s: %lld elements at offset %lld overrun the device array's %lld", what,
                                                   static_cast<long long>(n), static_cast<long long>(offset), static_cast<long long>(length_)));
      const uint64_t es = comm::elem_size(type_);
      uint8_t* host = static_cast<uint8_t*>(data);
      auto* w = new CopyWorker(env, mem_, host, static_cast<uint64_t>(offset) * es, static_cast<uint64_t>(n) * es, up);
      w->Keep(info[0]);
      return w->Start();
    });
  }
  Napi::Value Upload(const Napi::CallbackInfo& info) { return Copy(info, true); }
  Napi::Value Download(const Napi::CallbackInfo& info) { return Copy(info, false); }

  // zero(offset, count): elements [offset, offset + count) set to zero, synchronously (a device memset).
  Napi::Value Zero(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guard(env, [&]() -> Napi::Value {
      if (!mem_) throw_error(env, "INVALID_ARGUMENT", "DeviceArray.zero: the device array was freed");
      const int64_t offset = int_arg(env, info[0], "DeviceArray.zero: offset", 0, length_);
      const int64_t count = int_arg(env, info[1], "DeviceArray.zero: count", 0, length_ - offset);
      const uint64_t es = comm::elem_size(type_);
      mem_->zero(static_cast<uint64_t>(offset) * es, static_cast<uint64_t>(count) * es);
      return env.Undefined();
    });
  }

  // The memory goes back once no call holds it; the array is unusable from now on.
  Napi::Value Free(const Napi::CallbackInfo& info) {
    mem_.reset();
    return info.Env().Undefined();
  }

  std::shared_ptr<cuda::DeviceMemory> mem_;
  comm::ElemType type_ = comm::ElemType::F32;
  int64_t length_ = 0;
};

bool lend_device_array(Napi::Env env, const Napi::Object& o, const char* what, DeviceBuffer* out) {
  if (!o.CheckTypeTag(&kDeviceArrayTag)) return false;
  *out = DeviceArrayWrap::Unwrap(o)->lend(env, what);
  return true;
}

namespace {
void Init(Napi::Env env, Napi::Object exports) { DeviceArrayWrap::Init(env, exports); }
Part part("device_array", &Init);
}  // namespace

#else

bool lend_device_array(Napi::Env, const Napi::Object&, const char*, DeviceBuffer*) { return false; }

#endif  // EMBSHARD_WITH_CUDA

}  // namespace embshard::addon
