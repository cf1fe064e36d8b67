// promise_worker.h — the base of every long native call: an AsyncWorker that owns a Promise. Subclasses
// do their work in Run() on a libuv worker thread (throwing embshard::Error on failure) and build the
// resolved value in Result() on the JS thread. JS inputs are kept alive with Keep() for the whole call.
#pragma once
#include <napi.h>

#include <string>
#include <vector>

#include "addon/errors.h"
#include "core/errors.h"

namespace embshard::addon {

class PromiseWorker : public Napi::AsyncWorker {
 public:
  explicit PromiseWorker(Napi::Env env) : Napi::AsyncWorker(env, "embshard"), deferred_(Napi::Promise::Deferred::New(env)) {}

  // Queues the worker and returns its promise.
  Napi::Promise Start() {
    Napi::Promise p = deferred_.Promise();
    Queue();
    return p;
  }

  // Holds a reference to a JS value (typed arrays read or written by Run) until the call settles.
  // (Only objects can be referenced; primitives such as null need no keeping.)
  void Keep(Napi::Value v) {
    if (v.IsObject()) keep_.push_back(Napi::Persistent(v));
  }

 protected:
  virtual void Run() = 0;
  virtual Napi::Value Result(Napi::Env env) { return env.Undefined(); }

 private:
  void Execute() override {
    try {
      Run();
    } catch (const embshard::Error& e) {
      code_ = e.code();
      SetError(e.what());
    } catch (const std::bad_alloc&) {
      code_ = "ALLOC_FAILED";
      SetError("out of memory");
    } catch (const std::exception& e) {
      code_ = "INTERNAL";
      SetError(e.what());
    }
  }
  void OnOK() override {
    Napi::Env env = Env();
    try {
      deferred_.Resolve(Result(env));
    } catch (const Napi::Error& e) {
      deferred_.Reject(e.Value());
    } catch (const embshard::Error& e) {
      deferred_.Reject(make_error(env, e.code(), e.what()).Value());
    }
  }
  void OnError(const Napi::Error& e) override {
    deferred_.Reject(make_error(Env(), code_.empty() ? "INTERNAL" : code_, e.Message()).Value());
  }

  Napi::Promise::Deferred deferred_;
  std::vector<Napi::Reference<Napi::Value>> keep_;
  std::string code_;
};

}  // namespace embshard::addon
