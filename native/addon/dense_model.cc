// dense_model.cc — the N-API class DenseModel: the whole dense model (dense/model.h) with its
// parameters, gradients and optimizer state in JS-owned Float32Arrays (zero copies: the trainer
// all-reduces `grads` and saves `params`/`state` in place). forward / forwardBackward / update run
// off the event loop as promise workers; one call at a time per model.
#include <napi.h>

#include <atomic>
#include <memory>

#include "addon/dense_args.h"
#include "addon/dense_inputs.h"
#include "addon/errors.h"
#include "addon/promise_worker.h"
#include "addon/registry.h"
#include "dense/model.h"

namespace embshard::addon {
namespace {

using dense::DenseModel;
using dense::DenseModelSpec;
namespace da = dense_args;
using namespace dense_inputs;

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
                                    InstanceMethod<&DenseModelWrap::Forward>("forward"),
                                    InstanceMethod<&DenseModelWrap::ForwardBackward>("forwardBackward"),
                                    InstanceMethod<&DenseModelWrap::Update>("update")});
    exports.Set("DenseModel", f);
  }

  explicit DenseModelWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<DenseModelWrap>(info) {
    Napi::Env env = info.Env();
    if (!info[0].IsObject()) throw_error(env, "INVALID_CONFIG", "DenseModel expects a config object");
    Napi::Object c = info[0].As<Napi::Object>();
    DenseModelSpec spec = read_dense_spec(env, c);
    bool init = c.Get("initialize").IsUndefined() || c.Get("initialize").ToBoolean().Value();
    guard(env, [&] { model_ = std::make_unique<DenseModel>(std::move(spec)); });
    auto params = Napi::Float32Array::New(env, static_cast<size_t>(model_->param_count()));
    auto grads = Napi::Float32Array::New(env, static_cast<size_t>(model_->param_count()));
    auto state = Napi::Float32Array::New(env, static_cast<size_t>(model_->state_count()));
    params_ = Napi::Persistent(params);
    grads_ = Napi::Persistent(grads);
    state_ = Napi::Persistent(state);
    model_->bind(params.Data(), grads.Data(), state.Data());
    if (init) model_->initialize();
  }

  DenseModel& model() { return *model_; }
  int64_t step = 0;
  std::atomic<bool> busy{false};

  // Claims the model for one asynchronous call; INVALID_ARGUMENT while another is in flight.
  void claim(Napi::Env env) {
    bool expected = false;
    if (!busy.compare_exchange_strong(expected, true))
      throw_error(env, "INVALID_ARGUMENT", "DenseModel: another forward/backward/update call is still in flight (await it first)");
  }

 private:
  Napi::Value Params(const Napi::CallbackInfo&) { return params_.Value(); }
  Napi::Value Grads(const Napi::CallbackInfo&) { return grads_.Value(); }
  Napi::Value State(const Napi::CallbackInfo&) { return state_.Value(); }
  Napi::Value SparseWidth(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), static_cast<double>(model_->sparse_width())); }
  Napi::Value InteractionWidth(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(model_->interaction_width()));
  }
  Napi::Value GetStep(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), static_cast<double>(step)); }
  void SetStep(const Napi::CallbackInfo& info, const Napi::Value& v) {
    step = da::integer(info.Env(), v, "step", 0, (1ll << 53));
  }
  Napi::Value Tensors(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    const auto& ts = model_->tensors();
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

  Napi::Value Forward(const Napi::CallbackInfo& info);
  Napi::Value ForwardBackward(const Napi::CallbackInfo& info);
  Napi::Value Update(const Napi::CallbackInfo& info);

  std::unique_ptr<DenseModel> model_;
  Napi::Reference<Napi::Float32Array> params_, grads_, state_;
};

// Base of the model's workers: releases the model when the call settles (either way).
class ModelWorker : public PromiseWorker {
 public:
  ModelWorker(Napi::Env env, DenseModelWrap* w) : PromiseWorker(env), w_(w) { w->Ref(); }
  ~ModelWorker() override {
    w_->busy.store(false);
    w_->Unref();
  }

 protected:
  DenseModelWrap* w_;
};

class ForwardWorker : public ModelWorker {
 public:
  ForwardWorker(Napi::Env env, DenseModelWrap* w, const float* dense, const float* sparse, int64_t B)
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
  ForwardBackwardWorker(Napi::Env env, DenseModelWrap* w, const float* dense, const float* sparse, const float* labels,
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
  UpdateWorker(Napi::Env env, DenseModelWrap* w, float lr, int64_t t) : ModelWorker(env, w), lr_(lr), t_(t) {}
  void Run() override { w_->model().apply(lr_, t_); }

 private:
  float lr_;
  int64_t t_;
};

Napi::Value DenseModelWrap::Forward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Inputs in = read_inputs(env, *model_, info[0], info[1], info[2]);
  claim(env);
  auto* w = new ForwardWorker(env, this, in.dense.Data(), in.sparse.IsEmpty() ? nullptr : in.sparse.Data(), in.B);
  w->Keep(in.dense);
  if (!in.sparse.IsEmpty()) w->Keep(in.sparse);
  return w->Start();
}

// forwardBackward(dense, sparse, labels, batchSize, { sparseGrad?, logits?, gradScale? })
Napi::Value DenseModelWrap::ForwardBackward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  FbArgs a = read_fb_args(env, *model_, info);
  Inputs& in = a.in;
  Napi::Float32Array labels = a.labels, sg = a.sparseGrad, logits = a.logits;
  float scale = a.gradScale;
  claim(env);
  auto* w = new ForwardBackwardWorker(env, this, in.dense.Data(), in.sparse.IsEmpty() ? nullptr : in.sparse.Data(),
                                      labels.Data(), in.B, scale, sg.IsEmpty() ? nullptr : sg.Data(),
                                      logits.IsEmpty() ? nullptr : logits.Data());
  w->Keep(in.dense);
  w->Keep(labels);
  if (!in.sparse.IsEmpty()) w->Keep(in.sparse);
  if (!sg.IsEmpty()) w->Keep(sg);
  if (!logits.IsEmpty()) w->Keep(logits);
  return w->Start();
}

// update(lr?) — applies the optimizer to the current gradients and advances `step`.
Napi::Value DenseModelWrap::Update(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  float lr = read_lr(env, *model_, info[0]);
  claim(env);
  step += 1;
  auto* w = new UpdateWorker(env, this, lr, step);
  return w->Start();
}

void Init(Napi::Env env, Napi::Object exports) { DenseModelWrap::Init(env, exports); }
Part part("dense_model", &Init);

}  // namespace
}  // namespace embshard::addon
