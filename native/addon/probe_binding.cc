// probe_binding.cc — `probeMemory()` (async) and the thread-pool size controls.
#include <napi.h>

#include <cmath>
#include <string>
#include <system_error>

#include "addon/errors.h"
#include "addon/promise_worker.h"
#include "addon/registry.h"
#include "core/parallel.h"
#include "cpu/probe.h"

namespace embshard::addon {
namespace {

class ProbeWorker : public PromiseWorker {
 public:
  ProbeWorker(Napi::Env env, uint64_t bytes, uint32_t rowBytes, int64_t gathers, uint64_t seed)
      : PromiseWorker(env), bytes_(bytes), rowBytes_(rowBytes), gathers_(gathers), seed_(seed) {}
  void Run() override { r_ = probe_memory(bytes_, rowBytes_, gathers_, seed_); }
  Napi::Value Result(Napi::Env env) override {
    Napi::Object o = Napi::Object::New(env);
    o.Set("gatherBytesPerSec", r_.gatherBytesPerSec);
    o.Set("seqBytesPerSec", r_.seqBytesPerSec);
    o.Set("updateBytesPerSec", r_.updateBytesPerSec);
    o.Set("updateRows", static_cast<double>(r_.updateRows));
    o.Set("threads", r_.threads);
    return o;
  }

 private:
  uint64_t bytes_;
  uint32_t rowBytes_;
  int64_t gathers_;
  uint64_t seed_;
  MemoryProbe r_;
};

Napi::Value ProbeMemory(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&] {
    for (int i = 0; i < 4; ++i)
      if (!info[i].IsNumber() || info[i].As<Napi::Number>().DoubleValue() <= 0)
        throw_error(env, "INVALID_ARGUMENT", "probeMemory(bufferBytes, rowBytes, gathers, seed) expects positive numbers");
    return (new ProbeWorker(env, static_cast<uint64_t>(info[0].As<Napi::Number>().Int64Value()),
                            info[1].As<Napi::Number>().Uint32Value(), info[2].As<Napi::Number>().Int64Value(),
                            static_cast<uint64_t>(info[3].As<Napi::Number>().Int64Value())))
        ->Start();
  });
}

Napi::Value Threads(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), pool_threads()); }

Napi::Value SetThreads(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const double n = info[0].IsNumber() ? info[0].As<Napi::Number>().DoubleValue() : -1;
  if (!(n >= 0 && n <= kMaxPoolThreads && n == std::floor(n)))
    throw_error(env, "INVALID_ARGUMENT",
                "threads must be an integer in [0, " + std::to_string(kMaxPoolThreads) + "] (0 = all cores; got " +
                    (info[0].IsNumber() ? info[0].ToString().Utf8Value() : std::string("no number")) + ")");
  try {
    set_pool_threads(static_cast<int>(n));
  } catch (const std::system_error& e) {
    throw_error(env, "ALLOC_FAILED",
                "threads: the system could not start " + std::to_string(static_cast<int>(n)) + " threads (" + e.what() +
                    "); " + std::to_string(pool_threads()) + " run");
  }
  return env.Undefined();
}

void Init(Napi::Env env, Napi::Object exports) {
  exports.Set("probeMemory", Napi::Function::New(env, ProbeMemory));
  exports.Set("threads", Napi::Function::New(env, Threads));
  exports.Set("setThreads", Napi::Function::New(env, SetThreads));
}

Part part("probe", &Init);

}  // namespace
}  // namespace embshard::addon
