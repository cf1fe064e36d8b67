// dense_model.cc — the N-API class DenseModel: the whole dense model (dense/model.h) with its
// parameters, gradients and optimizer state in JS-owned Float32Arrays (zero copies: the trainer
// all-reduces `grads` and saves `params`/`state` in place). forward / forwardBackward / update run
// off the event loop as promise workers; one call at a time per model; dispose() frees the model's
// working memory (dense_workers.h OwnedModel).
#include <napi.h>

#include <atomic>
#include <memory>
#include <string>

#include "addon/dense_js_readers.h"
#include "addon/dense_model_args.h"
#include "addon/dense_workers.h"
#include "addon/errors.h"
#include "addon/registry.h"
#include "dense/model.h"

namespace embshard::addon {
namespace {

using dense::DenseModel;
using dense::DenseModelSpec;
namespace da = dense_js_readers;
using namespace dense_model_args;
namespace dw = dense_workers;

// A zeroed Float32Array of n values made as `new Float32Array(n)` does, so memory the system refuses is
// ALLOC_FAILED (napi_create_arraybuffer ends the process instead).
Napi::Float32Array zeros(Napi::Env env, int64_t n, const char* what) {
  Napi::Function ctor = env.Global().Get("Float32Array").As<Napi::Function>();
  Napi::Value a;
  try {
    a = ctor.New({Napi::Number::New(env, static_cast<double>(n))});
  } catch (const Napi::Error& e) {
    throw_error(env, "ALLOC_FAILED", "DenseModel: no memory for its " + std::string(what) + " (" + std::to_string(n) + " floats): " + e.Message());
  }
  if (!a.IsTypedArray() || a.As<Napi::TypedArray>().TypedArrayType() != napi_float32_array || a.As<Napi::TypedArray>().ElementLength() != static_cast<size_t>(n))
    throw_error(env, "INTERNAL", "DenseModel: the global Float32Array constructor did not make a Float32Array");
  return a.As<Napi::Float32Array>();
}

class DenseModelWrap : public Napi::ObjectWrap<DenseModelWrap> {
 public:
  static void Init(Napi::Env env, Napi::Object exports) {
    Napi::Function f = DefineClass(env, "DenseModel",
                                   {InstanceAccessor<&DenseModelWrap::Params>("params"),
                                    InstanceAccessor<&DenseModelWrap::Grads>("grads"),
                                    InstanceAccessor<&DenseModelWrap::State>("state"),
                                    InstanceAccessor<&DenseModelWrap::Tensors>("tensors"),
                                    InstanceAccessor<&DenseModelWrap::SparseWidth>("sparseWidth"),
                                    InstanceAccessor<&DenseModelWrap::InteractionWidth>("interactionWidth"),
                                    InstanceAccessor<&DenseModelWrap::GetStep, &DenseModelWrap::SetStep>("step"),
                                    InstanceMethod<&DenseModelWrap::ForwardBottom>("forwardBottom"),
                                    InstanceMethod<&DenseModelWrap::Forward>("forward"),
                                    InstanceMethod<&DenseModelWrap::ForwardBackward>("forwardBackward"),
                                    InstanceMethod<&DenseModelWrap::Update>("update"),
                                    InstanceMethod<&DenseModelWrap::Dispose>("dispose")});
    exports.Set("DenseModel", f);
  }

  explicit DenseModelWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<DenseModelWrap>(info) {
    Napi::Env env = info.Env();
    if (!info[0].IsObject()) throw_error(env, "INVALID_CONFIG", "DenseModel expects a config object");
    Napi::Object c = info[0].As<Napi::Object>();
    DenseModelSpec spec = read_dense_spec(env, c);
    bool init = c.Get("initialize").IsUndefined() || c.Get("initialize").ToBoolean().Value();
    guard(env, [&] { owned.reset(std::make_unique<DenseModel>(std::move(spec))); });
    DenseModel& m = owned.live(env);
    auto params = zeros(env, m.param_count(), "parameters");
    auto grads = zeros(env, m.param_count(), "gradients");
    auto state = zeros(env, m.state_count(), "optimizer state");
    params_ = Napi::Persistent(params);
    grads_ = Napi::Persistent(grads);
    state_ = Napi::Persistent(state);
    m.bind(params.Data(), grads.Data(), state.Data());
    if (init) m.initialize();
  }

  const DenseModel& layout(Napi::Env env) const { return owned.live(env); }
  // host arrays only (dense_workers.h)
  static constexpr bool kDeviceInputs = false;
  int input_device(Napi::Env) const { return -1; }
  int64_t step = 0;
  dw::OwnedModel<DenseModel> owned{"DenseModel"};

  // Claims the model for one asynchronous call; INVALID_ARGUMENT while another is in flight.
  void claim(Napi::Env env) { owned.claim(env); }

 private:
  Napi::Value Params(const Napi::CallbackInfo&) { return params_.Value(); }
  Napi::Value Grads(const Napi::CallbackInfo&) { return grads_.Value(); }
  Napi::Value State(const Napi::CallbackInfo&) { return state_.Value(); }
  Napi::Value SparseWidth(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), static_cast<double>(layout(info.Env()).sparse_width())); }
  Napi::Value InteractionWidth(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(layout(info.Env()).interaction_width()));
  }
  Napi::Value GetStep(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), static_cast<double>(step)); }
  void SetStep(const Napi::CallbackInfo& info, const Napi::Value& v) {
    step = da::integer(info.Env(), v, "step", 0, (1ll << 53));
  }
  Napi::Value Tensors(const Napi::CallbackInfo& info) { return dw::tensors_value(info.Env(), layout(info.Env())); }

  Napi::Value ForwardBottom(const Napi::CallbackInfo& info) { return dw::start_forward_bottom(this, info); }
  Napi::Value Forward(const Napi::CallbackInfo& info) { return dw::start_forward(this, info); }
  Napi::Value ForwardBackward(const Napi::CallbackInfo& info) { return dw::start_forward_backward(this, info); }
  // update(lr?) — applies the optimizer to the current gradients and advances `step`.
  Napi::Value Update(const Napi::CallbackInfo& info) { return dw::start_update(this, info); }
  // dispose() — frees the model's working memory (now, or when the call in flight settles); the
  // params / grads / state arrays stay the caller's; any other later call is DISPOSED.
  Napi::Value Dispose(const Napi::CallbackInfo& info) {
    owned.dispose();
    return info.Env().Undefined();
  }

  Napi::Reference<Napi::Float32Array> params_, grads_, state_;
};

void Init(Napi::Env env, Napi::Object exports) { DenseModelWrap::Init(env, exports); }
Part part("dense_model", &Init);

}  // namespace
}  // namespace embshard::addon
