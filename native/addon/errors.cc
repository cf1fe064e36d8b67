// errors.cc — construction of EmbshardError from native code (see errors.h).
#include "addon/errors.h"

#include "addon/registry.h"

namespace embshard::addon {

namespace {
struct ErrorClass {
  Napi::FunctionReference ctor;
};

Napi::Value SetErrorClass(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsFunction()) throw Napi::TypeError::New(env, "setErrorClass expects a constructor");
  auto* holder = env.GetInstanceData<ErrorClass>();
  if (!holder) {
    holder = new ErrorClass();
    env.SetInstanceData(holder);
  }
  holder->ctor = Napi::Persistent(info[0].As<Napi::Function>());
  return env.Undefined();
}

void Init(Napi::Env env, Napi::Object exports) { exports.Set("setErrorClass", Napi::Function::New(env, SetErrorClass)); }

Part part("errors", &Init);
}  // namespace

Napi::Error make_error(Napi::Env env, const std::string& code, const std::string& message) {
  auto* holder = env.GetInstanceData<ErrorClass>();
  if (holder && !holder->ctor.IsEmpty()) {
    Napi::Value v = holder->ctor.New({Napi::String::New(env, code), Napi::String::New(env, message)});
    return Napi::Error(env, v);
  }
  Napi::Error e = Napi::Error::New(env, message);
  e.Set("code", Napi::String::New(env, code));
  return e;
}

void throw_error(Napi::Env env, const std::string& code, const std::string& message) {
  throw make_error(env, code, message);
}

}  // namespace embshard::addon
