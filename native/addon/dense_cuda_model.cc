// dense_cuda_model.cc — the N-API class CudaDenseModel (CUDA addon only): the whole dense model on one
// GPU (dense/cuda/model_cuda.h), with the same config, tensors and async forward / forwardBackward /
// update as DenseModel (dense_model.cc). Parameters, gradients and optimizer state stay on the device;
// read(which, dst) / write(which, src) copy a whole flat buffer between the device and a JS
// Float32Array (synchronously), for checkpoints; deviceGrads() hands the gradients' device memory to the
// NCCL group's allReduceDevice (device_buffer.h), with no host copy. One call at a time per model;
// dispose() gives the device memory back at once, or when the call in flight settles (the gradients'
// memory once no deviceGrads() handle holds it either), and any later call is DISPOSED.
#if defined(EMBSHARD_WITH_CUDA) && defined(EMBSHARD_WITH_CUBLAS)
#include <napi.h>

#include <atomic>
#include <memory>
#include <string>

#include "addon/dense_js_readers.h"
#include "addon/dense_model_args.h"
#include "addon/dense_workers.h"
#include "addon/device_buffer.h"
#include "addon/errors.h"
#include "addon/registry.h"
#include "dense/cuda/model_cuda.h"

namespace embshard::addon {
namespace {

using dense::DenseModelSpec;
using dense::cuda::Buffer;
using dense::cuda::CudaDenseModel;
namespace da = dense_js_readers;
using namespace dense_model_args;
namespace dw = dense_workers;

Buffer read_buffer(Napi::Env env, Napi::Value v) {
  std::string s = v.IsString() ? v.As<Napi::String>().Utf8Value() : "";
  if (s == "params") return Buffer::Params;
  if (s == "grads") return Buffer::Grads;
  if (s == "state") return Buffer::State;
  throw_error(env, "INVALID_ARGUMENT", "which must be 'params' | 'grads' | 'state' (got '" + s + "')");
}

// Clears the busy flag of a synchronous call on scope exit (either way).
struct Release {
  std::atomic<bool>& busy;
  ~Release() { busy.store(false); }
};

class CudaDenseModelWrap : public Napi::ObjectWrap<CudaDenseModelWrap> {
 public:
  static void Init(Napi::Env env, Napi::Object exports) {
    Napi::Function f = DefineClass(env, "CudaDenseModel",
                                   {InstanceAccessor<&CudaDenseModelWrap::Tensors>("tensors"),
                                    InstanceAccessor<&CudaDenseModelWrap::SparseWidth>("sparseWidth"),
                                    InstanceAccessor<&CudaDenseModelWrap::InteractionWidth>("interactionWidth"),
                                    InstanceAccessor<&CudaDenseModelWrap::ParamCount>("paramCount"),
                                    InstanceAccessor<&CudaDenseModelWrap::StateCount>("stateCount"),
                                    InstanceAccessor<&CudaDenseModelWrap::Device>("device"),
                                    InstanceAccessor<&CudaDenseModelWrap::GetStep, &CudaDenseModelWrap::SetStep>("step"),
                                    InstanceMethod<&CudaDenseModelWrap::Read>("read"),
                                    InstanceMethod<&CudaDenseModelWrap::Write>("write"),
                                    InstanceMethod<&CudaDenseModelWrap::DeviceGrads>("deviceGrads"),
                                    InstanceMethod<&CudaDenseModelWrap::ForwardBottom>("forwardBottom"),
                                    InstanceMethod<&CudaDenseModelWrap::Forward>("forward"),
                                    InstanceMethod<&CudaDenseModelWrap::ForwardBackward>("forwardBackward"),
                                    InstanceMethod<&CudaDenseModelWrap::Update>("update"),
                                    InstanceMethod<&CudaDenseModelWrap::Dispose>("dispose")});
    exports.Set("CudaDenseModel", f);
  }

  // new CudaDenseModel({ ...DenseModel config, device: N })
  explicit CudaDenseModelWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<CudaDenseModelWrap>(info) {
    Napi::Env env = info.Env();
    if (!info[0].IsObject()) throw_error(env, "INVALID_CONFIG", "CudaDenseModel expects a config object");
    Napi::Object c = info[0].As<Napi::Object>();
    DenseModelSpec spec = read_dense_spec(env, c);
    if (spec.precision != dense::Precision::FP32)
      throw_error(env, "BACKEND_UNAVAILABLE", "precision 'bf16' runs on the CPU only; the GPU dense model computes in fp32");
    int device = static_cast<int>(da::integer(env, c.Get("device"), "device", 0, 1023));
    bool init = c.Get("initialize").IsUndefined() || c.Get("initialize").ToBoolean().Value();
    guard(env, [&] { owned.reset(std::make_unique<CudaDenseModel>(std::move(spec), device, init)); });
  }

  // The model; DISPOSED once dispose() was called, also while the call in flight still holds its memory
  // (which goes back when that call settles).
  CudaDenseModel& live(Napi::Env env) const {
    if (disposed) throw_error(env, "DISPOSED", "CudaDenseModel: used after dispose()");
    return owned.live(env);
  }
  const dense::DenseModel& layout(Napi::Env env) const { return live(env).layout(); }
  // the pooled embeddings and their gradients may be device buffers on the model's GPU (dense_workers.h)
  static constexpr bool kDeviceInputs = true;
  int input_device(Napi::Env env) const { return live(env).device(); }
  int64_t step = 0;
  dw::OwnedModel<CudaDenseModel> owned{"CudaDenseModel"};
  bool disposed = false;

  void claim(Napi::Env env) {
    live(env);
    owned.claim(env);
  }

 private:
  Napi::Value SparseWidth(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), static_cast<double>(layout(info.Env()).sparse_width())); }
  Napi::Value InteractionWidth(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(layout(info.Env()).interaction_width()));
  }
  Napi::Value ParamCount(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), static_cast<double>(layout(info.Env()).param_count())); }
  Napi::Value StateCount(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), static_cast<double>(layout(info.Env()).state_count())); }
  Napi::Value Device(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), input_device(info.Env())); }
  Napi::Value GetStep(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), static_cast<double>(step)); }
  void SetStep(const Napi::CallbackInfo& info, const Napi::Value& v) { step = da::integer(info.Env(), v, "step", 0, (1ll << 53)); }
  Napi::Value Tensors(const Napi::CallbackInfo& info) { return dw::tensors_value(info.Env(), layout(info.Env())); }

  // read(which, dst): device → dst (exactly the buffer's length); synchronous.
  Napi::Value Read(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Buffer b = read_buffer(env, info[0]);
    CudaDenseModel& m = live(env);
    auto dst = da::f32(env, info[1], "dst", m.size(b));
    claim(env);
    Release release{owned.busy};
    guard(env, [&] { m.read(b, dst.Data()); });
    return env.Undefined();
  }

  // write(which, src): src → device; synchronous.
  Napi::Value Write(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Buffer b = read_buffer(env, info[0]);
    CudaDenseModel& m = live(env);
    auto src = da::f32(env, info[1], "src", m.size(b));
    claim(env);
    Release release{owned.busy};
    guard(env, [&] { m.write(b, src.Data()); });
    return env.Undefined();
  }

  // deviceGrads() -> { handle, device, count, owner }: the gradients in device memory (written by
  // forwardBackward, read by update), for an in-place device all-reduce. The handle holds that memory:
  // after dispose() it stays valid (and allocated) until the handle is collected.
  Napi::Value DeviceGrads(const Napi::CallbackInfo& info) {
    CudaDenseModel& m = live(info.Env());
    DeviceBuffer b{m.device_data(Buffer::Grads), m.size(Buffer::Grads), comm::ElemType::F32, m.device(), m.grads_owner()};
    return device_buffer_value(info.Env(), b, Value());
  }

  Napi::Value ForwardBottom(const Napi::CallbackInfo& info) { return dw::start_forward_bottom(this, info); }
  Napi::Value Forward(const Napi::CallbackInfo& info) { return dw::start_forward(this, info); }
  Napi::Value ForwardBackward(const Napi::CallbackInfo& info) { return dw::start_forward_backward(this, info); }
  // update(lr?) — applies the optimizer to the gradients on the device and advances `step`.
  Napi::Value Update(const Napi::CallbackInfo& info) { return dw::start_update(this, info); }
  // dispose() — frees the model's device memory (now, or when the call in flight settles); any later
  // call is DISPOSED.
  Napi::Value Dispose(const Napi::CallbackInfo& info) {
    disposed = true;
    owned.dispose();
    return info.Env().Undefined();
  }
};

void Init(Napi::Env env, Napi::Object exports) { CudaDenseModelWrap::Init(env, exports); }
Part part("dense_cuda_model", &Init);

}  // namespace
}  // namespace embshard::addon
#endif  // EMBSHARD_WITH_CUDA && EMBSHARD_WITH_CUBLAS
