// dense_cuda_model.cc — the N-API class CudaDenseModel (CUDA addon only): the whole dense model on one
// GPU (dense/cuda/model_cuda.h), with the same config, tensors and async forward / forwardBackward /
// update as DenseModel (dense_model.cc). Parameters, gradients and optimizer state stay on the device;
// read(which, dst) / write(which, src) copy a whole flat buffer between the device and a JS
// Float32Array (synchronously), for checkpoints and the dense all-reduce. One call at a time per model.
#if defined(EMBSHARD_WITH_CUDA) && defined(EMBSHARD_WITH_CUBLAS)
#include <napi.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "addon/dense_args.h"
#include "addon/dense_inputs.h"
#include "addon/errors.h"
#include "addon/promise_worker.h"
#include "addon/registry.h"
#include "dense/cuda/model_cuda.h"

namespace embshard::addon {
namespace {

using dense::DenseModelSpec;
using dense::cuda::Buffer;
using dense::cuda::CudaDenseModel;
namespace da = dense_args;
using namespace dense_inputs;

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
                                    InstanceMethod<&CudaDenseModelWrap::Forward>("forward"),
                                    InstanceMethod<&CudaDenseModelWrap::ForwardBackward>("forwardBackward"),
                                    InstanceMethod<&CudaDenseModelWrap::Update>("update")});
    exports.Set("CudaDenseModel", f);
  }

  // new CudaDenseModel({ ...DenseModel config, device: N })
  explicit CudaDenseModelWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<CudaDenseModelWrap>(info) {
    Napi::Env env = info.Env();
    if (!info[0].IsObject()) throw_error(env, "INVALID_CONFIG", "CudaDenseModel expects a config object");
    Napi::Object c = info[0].As<Napi::Object>();
    DenseModelSpec spec = read_dense_spec(env, c);
    int device = static_cast<int>(da::integer(env, c.Get("device"), "device", 0, 1023));
    bool init = c.Get("initialize").IsUndefined() || c.Get("initialize").ToBoolean().Value();
    guard(env, [&] { model_ = std::make_unique<CudaDenseModel>(std::move(spec), device, init); });
  }

  CudaDenseModel& model() { return *model_; }
  int64_t step = 0;
  std::atomic<bool> busy{false};

  void claim(Napi::Env env) {
    bool expected = false;
    if (!busy.compare_exchange_strong(expected, true))
      throw_error(env, "INVALID_ARGUMENT", "CudaDenseModel: another forward/backward/update call is still in flight (await it first)");
  }

 private:
  const dense::DenseModel& layout() const { return model_->layout(); }
  Napi::Value SparseWidth(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), static_cast<double>(layout().sparse_width())); }
  Napi::Value InteractionWidth(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(layout().interaction_width()));
  }
  Napi::Value ParamCount(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), static_cast<double>(layout().param_count())); }
  Napi::Value StateCount(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), static_cast<double>(layout().state_count())); }
  Napi::Value Device(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), model_->device()); }
  Napi::Value GetStep(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), static_cast<double>(step)); }
  void SetStep(const Napi::CallbackInfo& info, const Napi::Value& v) { step = da::integer(info.Env(), v, "step", 0, (1ll << 53)); }
  Napi::Value Tensors(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    const auto& ts = layout().tensors();
    Napi::Array a = Napi::Array::New(env, ts.size());
    for (size_t i = 0; i < ts.size(); ++i) {
      Napi::Object o = Napi::Object::New(env);
      o.Set("name", ts[i].name);
      o.Set("offset", static_cast<double>(ts[i].offset));
      o.Set("size", static_cast<double>(ts[i].size()));
      Napi::Array shape = Napi::Array::New(env, ts[i].shape.size());
      for (size_t k = 0; k < ts[i].shape.size(); ++k) shape.Set(static_cast<uint32_t>(k), static_cast<double>(ts[i].shape[k]));
      o.Set("shape", shape);
      a.Set(static_cast<uint32_t>(i), o);
    }
    return a;
  }

  // read(which, dst): device → dst (exactly the buffer's length); synchronous.
  Napi::Value Read(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Buffer b = read_buffer(env, info[0]);
    auto dst = da::f32(env, info[1], "dst", model_->size(b));
    claim(env);
    Release release{busy};
    guard(env, [&] { model_->read(b, dst.Data()); });
    return env.Undefined();
  }

  // write(which, src): src → device; synchronous.
  Napi::Value Write(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Buffer b = read_buffer(env, info[0]);
    auto src = da::f32(env, info[1], "src", model_->size(b));
    claim(env);
    Release release{busy};
    guard(env, [&] { model_->write(b, src.Data()); });
    return env.Undefined();
  }

  Napi::Value Forward(const Napi::CallbackInfo& info);
  Napi::Value ForwardBackward(const Napi::CallbackInfo& info);
  Napi::Value Update(const Napi::CallbackInfo& info);

  std::unique_ptr<CudaDenseModel> model_;
};

// Base of the model's workers: releases the model when the call settles (either way).
class ModelWorker : public PromiseWorker {
 public:
  ModelWorker(Napi::Env env, CudaDenseModelWrap* w) : PromiseWorker(env), w_(w) { w->Ref(); }
  ~ModelWorker() override {
    w_->busy.store(false);
    w_->Unref();
  }

 protected:
  CudaDenseModelWrap* w_;
};

class ForwardWorker : public ModelWorker {
 public:
  ForwardWorker(Napi::Env env, CudaDenseModelWrap* w, const float* dense, const float* sparse, int64_t B)
      : ModelWorker(env, w), dense_(dense), sparse_(sparse), B_(B), logits_(static_cast<size_t>(B)) {}
  void Run() override { w_->model().forward(dense_, sparse_, B_, logits_.data(), &times_); }
  Napi::Value Result(Napi::Env env) override {
    auto out = Napi::Float32Array::New(env, logits_.size());
    std::copy(logits_.begin(), logits_.end(), out.Data());
    return out;
  }

 private:
  const float* dense_;
  const float* sparse_;
  int64_t B_;
  std::vector<float> logits_;
  dense::StepTimes times_;
};

class ForwardBackwardWorker : public ModelWorker {
 public:
  ForwardBackwardWorker(Napi::Env env, CudaDenseModelWrap* w, const float* dense, const float* sparse, const float* labels,
                        int64_t B, float scale, float* sparseGrad, float* logits)
      : ModelWorker(env, w), dense_(dense), sparse_(sparse), labels_(labels), B_(B), scale_(scale), sg_(sparseGrad), logits_(logits) {}
  void Run() override { loss_ = w_->model().forward_backward(dense_, sparse_, labels_, B_, scale_, sg_, logits_, &times_); }
  Napi::Value Result(Napi::Env env) override {
    Napi::Object o = Napi::Object::New(env);
    o.Set("loss", loss_);
    o.Set("forwardMs", times_.forwardMs);
    o.Set("backwardMs", times_.backwardMs);
    return o;
  }

 private:
  const float* dense_;
  const float* sparse_;
  const float* labels_;
  int64_t B_;
  float scale_;
  float* sg_;
  float* logits_;
  double loss_ = 0;
  dense::StepTimes times_;
};

class UpdateWorker : public ModelWorker {
 public:
  UpdateWorker(Napi::Env env, CudaDenseModelWrap* w, float lr, int64_t t) : ModelWorker(env, w), lr_(lr), t_(t) {}
  void Run() override { w_->model().apply(lr_, t_); }

 private:
  float lr_;
  int64_t t_;
};

Napi::Value CudaDenseModelWrap::Forward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Inputs in = read_inputs(env, layout(), info[0], info[1], info[2]);
  claim(env);
  auto* w = new ForwardWorker(env, this, in.dense.Data(), in.sparse.IsEmpty() ? nullptr : in.sparse.Data(), in.B);
  w->Keep(in.dense);
  if (!in.sparse.IsEmpty()) w->Keep(in.sparse);
  return w->Start();
}

Napi::Value CudaDenseModelWrap::ForwardBackward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  FbArgs a = read_fb_args(env, layout(), info);
  claim(env);
  auto* w = new ForwardBackwardWorker(env, this, a.in.dense.Data(), a.in.sparse.IsEmpty() ? nullptr : a.in.sparse.Data(),
                                      a.labels.Data(), a.in.B, a.gradScale, a.sparseGrad.IsEmpty() ? nullptr : a.sparseGrad.Data(),
                                      a.logits.IsEmpty() ? nullptr : a.logits.Data());
  w->Keep(a.in.dense);
  w->Keep(a.labels);
  if (!a.in.sparse.IsEmpty()) w->Keep(a.in.sparse);
  if (!a.sparseGrad.IsEmpty()) w->Keep(a.sparseGrad);
  if (!a.logits.IsEmpty()) w->Keep(a.logits);
  return w->Start();
}

// update(lr?) — applies the optimizer to the gradients on the device and advances `step`.
Napi::Value CudaDenseModelWrap::Update(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  float lr = read_lr(env, layout(), info[0]);
  claim(env);
  step += 1;
  auto* w = new UpdateWorker(env, this, lr, step);
  return w->Start();
}

void Init(Napi::Env env, Napi::Object exports) { CudaDenseModelWrap::Init(env, exports); }
Part part("dense_cuda_model", &Init);

}  // namespace
}  // namespace embshard::addon
#endif  // EMBSHARD_WITH_CUDA && EMBSHARD_WITH_CUBLAS
