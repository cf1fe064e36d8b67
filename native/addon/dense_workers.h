// dense_workers.h — the calls shared by the CPU and GPU dense-model bindings (dense_model.cc,
// dense_cuda_model.cc): the promise workers of forwardBottom / forward / forwardBackward / update, templated on the wrap
// class, the functions that validate a call, claim the model and start its worker, the one-call-at-a-time
// claim and the `tensors` accessor. A Wrap exposes model() (forward / forward_backward / apply on host
// pointers), layout() (the dense::DenseModel the inputs are checked against), claim(env), `busy`, `step`,
// Ref/Unref (Napi::ObjectWrap) and input_device(): -1 for a model that takes host arrays only, else the
// GPU whose device buffers it also takes for the pooled embeddings and their gradients (its model()
// then takes a trailing dense::cuda::SparseMemory saying which are on the device).
#pragma once
#include <napi.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "addon/dense_model_args.h"
#include "addon/errors.h"
#include "addon/promise_worker.h"
#include "dense/model.h"

namespace embshard::addon::dense_workers {

// The native model a wrap owns, and its lifetime: one call at a time (claim), and dispose() freeing the
// model (on a GPU, its device memory) at once or, with a call in flight, when that call settles; any use
// after dispose() is DISPOSED. Everything here runs on the JS thread.
template <class Model>
class OwnedModel {
 public:
  explicit OwnedModel(const char* cls) : cls_(cls) {}
  void reset(std::unique_ptr<Model> m) { model_ = std::move(m); }
  Model& live(Napi::Env env) const {
    // disposed_: dispose() was called while a call was in flight, which still holds the model
    if (!model_ || disposed_) throw_error(env, "DISPOSED", std::string(cls_) + ": used after dispose()");
    return *model_;
  }
  // the model of a call claimed by claim() (workers, off the JS thread)
  Model& claimed() { return *model_; }
  // claims the model for one call: DISPOSED after dispose(), INVALID_ARGUMENT while another is in flight
  void claim(Napi::Env env) {
    live(env);
    bool expected = false;
    if (!busy.compare_exchange_strong(expected, true))
      throw_error(env, "INVALID_ARGUMENT", std::string(cls_) + ": another forward/backward/update call is still in flight (await it first)");
  }
  void dispose() {
    disposed_ = true;
    if (!busy.load()) model_.reset();
  }
  // a claimed call has settled
  void settled() {
    busy.store(false);
    if (disposed_) model_.reset();
  }
  std::atomic<bool> busy{false};

 private:
  const char* cls_;
  std::unique_ptr<Model> model_;
  bool disposed_ = false;
};

// The `tensors` accessor: [{ name, offset, size, shape }] of the model's flat parameter layout.
inline Napi::Value tensors_value(Napi::Env env, const dense::DenseModel& m) {
  const auto& ts = m.tensors();
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

// Base of the model's workers: releases the model when the call settles (either way).
template <class Wrap>
class ModelWorker : public PromiseWorker {
 public:
  ModelWorker(Napi::Env env, Wrap* w) : PromiseWorker(env), w_(w) { w->Ref(); }
  ~ModelWorker() override {
    w_->owned.settled();
    w_->Unref();
  }

 protected:
  Wrap* w_;
};

template <class Wrap>
class ForwardBottomWorker : public ModelWorker<Wrap> {
 public:
  ForwardBottomWorker(Napi::Env env, Wrap* w, const float* dense, int64_t B) : ModelWorker<Wrap>(env, w), dense_(dense), B_(B) {}
  void Run() override { this->w_->owned.claimed().forward_bottom(dense_, B_, &times_); }
  Napi::Value Result(Napi::Env env) override {
    Napi::Object o = Napi::Object::New(env);
    o.Set("forwardMs", times_.forwardMs);
    return o;
  }

 private:
  const float* dense_;
  int64_t B_;
  dense::StepTimes times_;
};

// Keeps a call's sparse argument alive until it settles: the JS array or object, and a device buffer's memory.
template <class Worker>
void keep_sparse(Worker* w, const dense_model_args::SparseArg& a) {
  if (!a.host.IsEmpty()) w->Keep(a.host);
  if (a.onDevice) w->Keep(a.array);
}

template <class Wrap>
class ForwardWorker : public ModelWorker<Wrap> {
 public:
  ForwardWorker(Napi::Env env, Wrap* w, const float* dense, const dense_model_args::SparseArg& sparse, int64_t B)
      : ModelWorker<Wrap>(env, w), dense_(dense), sparse_(sparse.ptr()), sparseDev_(sparse.onDevice), hold_(sparse.dev.hold), B_(B),
        logits_(static_cast<size_t>(B)) {}
  void Run() override {
    if constexpr (Wrap::kDeviceInputs) this->w_->owned.claimed().forward(dense_, sparse_, B_, logits_.data(), &times_, false, {sparseDev_, false});
    else this->w_->owned.claimed().forward(dense_, sparse_, B_, logits_.data(), &times_);
  }
  Napi::Value Result(Napi::Env env) override {
    auto out = Napi::Float32Array::New(env, logits_.size());
    std::copy(logits_.begin(), logits_.end(), out.Data());
    return out;
  }

 private:
  const float* dense_;
  const float* sparse_;
  bool sparseDev_;
  std::shared_ptr<void> hold_;  // a DeviceArray's memory, held for the call
  int64_t B_;
  std::vector<float> logits_;
  dense::StepTimes times_;
};

template <class Wrap>
class ForwardBackwardWorker : public ModelWorker<Wrap> {
 public:
  ForwardBackwardWorker(Napi::Env env, Wrap* w, const float* dense, const dense_model_args::SparseArg& sparse, const float* labels,
                        int64_t B, float scale, const dense_model_args::SparseArg& sparseGrad, float* logits, bool bottomReady)
      : ModelWorker<Wrap>(env, w), dense_(dense), sparse_(sparse.ptr()), labels_(labels), B_(B), scale_(scale), sg_(sparseGrad.ptr()),
        logits_(logits), bottomReady_(bottomReady), sparseDev_(sparse.onDevice), gradDev_(sparseGrad.onDevice),
        holds_{sparse.dev.hold, sparseGrad.dev.hold} {}
  void Run() override {
    if constexpr (Wrap::kDeviceInputs)
      loss_ = this->w_->owned.claimed().forward_backward(dense_, sparse_, labels_, B_, scale_, sg_, logits_, &times_, bottomReady_, {sparseDev_, gradDev_});
    else loss_ = this->w_->owned.claimed().forward_backward(dense_, sparse_, labels_, B_, scale_, sg_, logits_, &times_, bottomReady_);
  }
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
  bool bottomReady_;
  bool sparseDev_, gradDev_;
  std::shared_ptr<void> holds_[2];  // DeviceArrays' memory, held for the call
  double loss_ = 0;
  dense::StepTimes times_;
};

template <class Wrap>
class UpdateWorker : public ModelWorker<Wrap> {
 public:
  UpdateWorker(Napi::Env env, Wrap* w, float lr, int64_t t) : ModelWorker<Wrap>(env, w), lr_(lr), t_(t) {}
  void Run() override { this->w_->owned.claimed().apply(lr_, t_); }

 private:
  float lr_;
  int64_t t_;
};

// forwardBottom(dense, batchSize) -> Promise<{ forwardMs }>: the bottom MLP alone, kept for the next
// forwardBackward(..., { bottomReady: true }) on the same dense array
template <class Wrap>
Napi::Value start_forward_bottom(Wrap* self, const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  dense_model_args::Inputs in = dense_model_args::read_dense_input(env, self->layout(env), info[0], info[1]);
  self->claim(env);
  auto* w = new ForwardBottomWorker<Wrap>(env, self, in.dense.Data(), in.B);
  w->Keep(in.dense);
  return w->Start();
}

// forward(dense, sparse, batchSize) -> Promise<Float32Array logits>
template <class Wrap>
Napi::Value start_forward(Wrap* self, const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  dense_model_args::Inputs in = dense_model_args::read_inputs(env, self->layout(env), info[0], info[1], info[2], self->input_device(env));
  dense_model_args::check_pooled_values(env, in.sparse, self->layout(env).sparse_width());
  self->claim(env);
  auto* w = new ForwardWorker<Wrap>(env, self, in.dense.Data(), in.sparse, in.B);
  w->Keep(in.dense);
  keep_sparse(w, in.sparse);
  return w->Start();
}

// forwardBackward(dense, sparse, labels, batchSize, { sparseGrad?, logits?, gradScale? })
//   -> Promise<{ loss, forwardMs, backwardMs }>
template <class Wrap>
Napi::Value start_forward_backward(Wrap* self, const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  dense_model_args::FbArgs a = dense_model_args::read_fb_args(env, self->layout(env), info, self->input_device(env));
  self->claim(env);
  auto* w = new ForwardBackwardWorker<Wrap>(env, self, a.in.dense.Data(), a.in.sparse, a.labels.Data(), a.in.B, a.gradScale, a.sparseGrad,
                                            a.logits.IsEmpty() ? nullptr : a.logits.Data(), a.bottomReady);
  w->Keep(a.in.dense);
  w->Keep(a.labels);
  keep_sparse(w, a.in.sparse);
  keep_sparse(w, a.sparseGrad);
  if (!a.logits.IsEmpty()) w->Keep(a.logits);
  return w->Start();
}

// update(lr?) — applies the optimizer to the current gradients and advances `step`.
template <class Wrap>
Napi::Value start_update(Wrap* self, const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  float lr = dense_model_args::read_lr(env, self->layout(env), info[0]);
  self->claim(env);
  self->step += 1;
  auto* w = new UpdateWorker<Wrap>(env, self, lr, self->step);
  return w->Start();
}

}  // namespace embshard::addon::dense_workers
