// engine_wrap.cc — `Engine`, the ObjectWrap over one collection's backend engine: forward / backward
// (async AsyncWorkers and sync twins), row and state access, checkpoint payload I/O, dispose. Calls on
// one engine never interleave (a mutex per engine); dispose() frees memory once in-flight calls finish.
#include <napi.h>

#include <memory>
#include <mutex>
#include <vector>

#include "addon/errors.h"
#include "addon/js_args.h"
#include "addon/output_pool.h"
#include "addon/promise_worker.h"
#include "addon/registry.h"
#include "core/checkpoint.h"
#include "core/engine.h"
#include "core/profile.h"
#include "cpu/cpu_engine.h"
#if defined(EMBSHARD_WITH_CUDA)
#include "cuda/cuda_engine.h"
#endif

namespace embshard::addon {

namespace {

struct Guarded {
  std::unique_ptr<Engine> engine;
  std::mutex mu;
};
using EnginePtr = std::shared_ptr<Guarded>;

std::unique_ptr<Engine> create_engine(Napi::Env env, const std::string& device, const CollectionSpec& spec,
                                      const Layout& layout, bool initialize) {
  if (device == "cpu") return make_cpu_engine(spec, layout, initialize);
  if (device.rfind("cuda:", 0) == 0) {
#if defined(EMBSHARD_WITH_CUDA)
    const std::string num = device.substr(5);
    if (num.empty() || num.size() > 4 || num.find_first_not_of("0123456789") != std::string::npos)
      throw embshard::Error("BACKEND_UNAVAILABLE", "unknown device '" + device + "' (expected 'cpu' or 'cuda:N')");
    return make_cuda_engine(spec, layout, std::stoi(num), initialize);
#else
    throw embshard::Error("BACKEND_UNAVAILABLE", "device '" + device + "' needs the CUDA addon; this is the CPU addon");
#endif
  }
  throw embshard::Error("BACKEND_UNAVAILABLE", "unknown device '" + device + "' (expected 'cpu' or 'cuda:N')");
}

struct ForwardOut {
  OutBuf pooled;
  std::vector<OutBuf> seq;  // per feature; empty for pooled features
  std::vector<bool> isSeq;
};

void run_forward(Guarded& g, const BatchView& view, ForwardOut& out) {
  std::lock_guard<std::mutex> lk(g.mu);
  PhaseTimer timer("forward");
  Engine& e = *g.engine;
  PreparedBatch b;
  // the CPU kernel resolves and checks ids as it reads them (one pass); other backends get them resolved
  prepare_batch(e.spec(), view, b, /*resolveIds=*/e.device() != "cpu");
  timer.mark("prepare");
  out.pooled = OutBuf(static_cast<size_t>(b.B * e.layout().pooledDim));
  const size_t nf = e.spec().features.size();
  std::vector<float*> seqPtr(nf, nullptr);
  out.seq.resize(nf);
  out.isSeq.assign(nf, false);
  for (uint32_t f = 0; f < nf; ++f) {
    if (e.spec().features[f].pooling != Pooling::None) continue;
    out.seq[f] = OutBuf(static_cast<size_t>(sequence_values(e.spec(), b, f)));
    out.isSeq[f] = true;
    seqPtr[f] = out.seq[f].data();
  }
  timer.mark("alloc");
  e.forward(b, out.pooled.data(), seqPtr.data());
  timer.mark("kernel");
}

Napi::Object forward_result(Napi::Env env, ForwardOut& out) {
  Napi::Object r = Napi::Object::New(env);
  r.Set("pooled", out.pooled.adopt(env));
  Napi::Array seq = Napi::Array::New(env, out.seq.size());
  for (uint32_t f = 0; f < out.seq.size(); ++f) seq.Set(f, out.isSeq[f] ? Napi::Value(out.seq[f].adopt(env)) : env.Null());
  r.Set("sequences", seq);
  return r;
}

struct Grads {
  const float* pooled = nullptr;
  size_t pooledSize = 0;
  std::vector<const float*> seq;
  std::vector<size_t> seqSize;
};

Grads parse_grads(Napi::Env env, const Napi::Value& pooled, const Napi::Value& seq) {
  Grads g;
  g.pooled = float_array(env, pooled, "the pooled gradient", true, &g.pooledSize);
  if (!seq.IsArray()) throw_error(env, "INVALID_ARGUMENT", "sequence gradients must be an array");
  Napi::Array a = seq.As<Napi::Array>();
  for (uint32_t i = 0; i < a.Length(); ++i) {
    size_t n;
    g.seq.push_back(float_array(env, a.Get(i), "a sequence gradient", true, &n));
    g.seqSize.push_back(n);
  }
  return g;
}

BackwardResult run_backward(Guarded& g, const BatchView& view, const Grads& grads) {
  std::lock_guard<std::mutex> lk(g.mu);
  PhaseTimer timer("backward");
  Engine& e = *g.engine;
  PreparedBatch b;
  prepare_batch(e.spec(), view, b);
  timer.mark("prepare");
  const int64_t wantPooled = b.B * e.layout().pooledDim;
  if (wantPooled > 0 && (grads.pooled == nullptr || static_cast<int64_t>(grads.pooledSize) != wantPooled))
    fail("GRAD_SIZE_MISMATCH", "the pooled gradient has %lld values; expected batchSize × pooledDim = %lld × %lld = %lld",
         static_cast<long long>(grads.pooled ? grads.pooledSize : 0), static_cast<long long>(b.B),
         static_cast<long long>(e.layout().pooledDim), static_cast<long long>(wantPooled));
  const auto& feats = e.spec().features;
  if (grads.seq.size() != feats.size())
    fail("GRAD_SIZE_MISMATCH", "expected %zu sequence-gradient slots (one per feature), got %zu", feats.size(), grads.seq.size());
  for (uint32_t f = 0; f < feats.size(); ++f) {
    if (feats[f].pooling != Pooling::None) continue;
    int64_t want = sequence_values(e.spec(), b, f);
    if (want > 0 && (grads.seq[f] == nullptr || static_cast<int64_t>(grads.seqSize[f]) != want))
      fail("GRAD_SIZE_MISMATCH", "the gradient of sequence feature '%s' has %lld values; expected %lld (ids × dim)",
           feats[f].name.c_str(), static_cast<long long>(grads.seq[f] ? grads.seqSize[f] : 0), static_cast<long long>(want));
  }
  return e.backward(b, grads.pooled, grads.seq.data());
}

Napi::Object backward_result(Napi::Env env, const BackwardResult& r) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("skipped", Napi::Boolean::New(env, r.skipped));
  o.Set("uniqueRows", Napi::Number::New(env, static_cast<double>(r.uniqueRows)));
  return o;
}

class ForwardWorker : public PromiseWorker {
 public:
  ForwardWorker(Napi::Env env, EnginePtr e, const Napi::Value& batch)
      : PromiseWorker(env), e_(std::move(e)), view_(parse_batch(env, batch)) {
    Keep(batch);
  }
  void Run() override { run_forward(*e_, view_, out_); }
  Napi::Value Result(Napi::Env env) override { return forward_result(env, out_); }

 private:
  EnginePtr e_;
  BatchView view_;
  ForwardOut out_;
};

class BackwardWorker : public PromiseWorker {
 public:
  BackwardWorker(Napi::Env env, EnginePtr e, const Napi::Value& batch, const Napi::Value& pooled, const Napi::Value& seq)
      : PromiseWorker(env), e_(std::move(e)), view_(parse_batch(env, batch)), grads_(parse_grads(env, pooled, seq)) {
    Keep(batch);
    Keep(pooled);
    Keep(seq);
  }
  void Run() override { result_ = run_backward(*e_, view_, grads_); }
  Napi::Value Result(Napi::Env env) override { return backward_result(env, result_); }

 private:
  EnginePtr e_;
  BatchView view_;
  Grads grads_;
  BackwardResult result_;
};

class SaveWorker : public PromiseWorker {
 public:
  SaveWorker(Napi::Env env, EnginePtr e, std::string path) : PromiseWorker(env), e_(std::move(e)), path_(std::move(path)) {}
  void Run() override {
    std::lock_guard<std::mutex> lk(e_->mu);
    info_ = save_payload(*e_->engine, path_);
  }
  Napi::Value Result(Napi::Env env) override {
    Napi::Object o = Napi::Object::New(env);
    o.Set("bytes", Napi::Number::New(env, static_cast<double>(info_.bytes)));
    o.Set("crc32c", Napi::Number::New(env, info_.crc32c));
    return o;
  }

 private:
  EnginePtr e_;
  std::string path_;
  PayloadInfo info_;
};

class LoadWorker : public PromiseWorker {
 public:
  LoadWorker(Napi::Env env, EnginePtr e, std::string path, PayloadInfo expect)
      : PromiseWorker(env), e_(std::move(e)), path_(std::move(path)), expect_(expect) {}
  void Run() override {
    std::lock_guard<std::mutex> lk(e_->mu);
    load_payload(*e_->engine, path_, expect_);
  }

 private:
  EnginePtr e_;
  std::string path_;
  PayloadInfo expect_;
};

class EngineWrap : public Napi::ObjectWrap<EngineWrap> {
 public:
  static void Init(Napi::Env env, Napi::Object exports) {
    Napi::Function ctor = DefineClass(
        env, "Engine",
        {InstanceAccessor<&EngineWrap::Device>("device"), InstanceAccessor<&EngineWrap::PooledDim>("pooledDim"),
         InstanceAccessor<&EngineWrap::WeightBytes>("weightBytes"), InstanceAccessor<&EngineWrap::StateBytes>("stateBytes"),
         InstanceAccessor<&EngineWrap::GetStep, &EngineWrap::SetStep>("step"),
         InstanceMethod<&EngineWrap::SetLearningRate>("setLearningRate"),
         InstanceMethod<&EngineWrap::Forward>("forward"), InstanceMethod<&EngineWrap::ForwardSync>("forwardSync"),
         InstanceMethod<&EngineWrap::Backward>("backward"), InstanceMethod<&EngineWrap::BackwardSync>("backwardSync"),
         InstanceMethod<&EngineWrap::ReadRows>("readRows"), InstanceMethod<&EngineWrap::WriteRows>("writeRows"),
         InstanceMethod<&EngineWrap::ReadState>("readState"), InstanceMethod<&EngineWrap::WriteState>("writeState"),
         InstanceMethod<&EngineWrap::SavePayload>("savePayload"), InstanceMethod<&EngineWrap::LoadPayload>("loadPayload"),
         InstanceMethod<&EngineWrap::KernelTimes>("kernelTimes"), InstanceMethod<&EngineWrap::ReleaseOutputs>("releaseOutputs"),
         InstanceMethod<&EngineWrap::Dispose>("dispose")});
    exports.Set("Engine", ctor);
  }

  explicit EngineWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<EngineWrap>(info) {
    Napi::Env env = info.Env();
    guard(env, [&] {
      if (!info[0].IsObject() || !info[1].IsString())
        throw_error(env, "INVALID_ARGUMENT", "new Engine(config, device) expects an object and a device string");
      bool initialize = true;
      CollectionSpec spec = parse_collection(env, info[0].As<Napi::Object>(), &initialize);
      Layout layout = make_layout(spec);
      auto g = std::make_shared<Guarded>();
      g->engine = create_engine(env, info[1].As<Napi::String>().Utf8Value(), spec, layout, initialize);
      engine_ = g;
      return 0;
    });
  }

 private:
  Guarded& live(Napi::Env env) {
    if (!engine_) throw_error(env, "DISPOSED", "this collection has been disposed");
    return *engine_;
  }
  EnginePtr live_ptr(Napi::Env env) {
    live(env);
    return engine_;
  }

  Napi::Value Device(const Napi::CallbackInfo& info) { return Napi::String::New(info.Env(), live(info.Env()).engine->device()); }
  Napi::Value PooledDim(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(live(info.Env()).engine->layout().pooledDim));
  }
  Napi::Value WeightBytes(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(live(info.Env()).engine->layout().weightBytes));
  }
  Napi::Value StateBytes(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(live(info.Env()).engine->layout().stateFloats * 4));
  }
  Napi::Value GetStep(const Napi::CallbackInfo& info) {
    Guarded& g = live(info.Env());
    std::lock_guard<std::mutex> lk(g.mu);
    return Napi::Number::New(info.Env(), static_cast<double>(g.engine->step()));
  }
  void SetStep(const Napi::CallbackInfo& info, const Napi::Value& v) {
    Guarded& g = live(info.Env());
    if (!v.IsNumber() || v.As<Napi::Number>().DoubleValue() < 0)
      throw_error(info.Env(), "INVALID_ARGUMENT", "step must be a number >= 0");
    std::lock_guard<std::mutex> lk(g.mu);
    g.engine->set_step(v.As<Napi::Number>().Int64Value());
  }
  Napi::Value SetLearningRate(const Napi::CallbackInfo& info) {
    Guarded& g = live(info.Env());
    double lr = info[0].IsNumber() ? info[0].As<Napi::Number>().DoubleValue() : -1;
    if (!(lr >= 0 && lr < 1e30)) throw_error(info.Env(), "INVALID_ARGUMENT", "learning rate must be a finite number >= 0");
    std::lock_guard<std::mutex> lk(g.mu);
    g.engine->set_learning_rate(static_cast<float>(lr));
    return info.Env().Undefined();
  }

  Napi::Value Forward(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guard(env, [&] { return (new ForwardWorker(env, live_ptr(env), info[0]))->Start(); });
  }
  Napi::Value ForwardSync(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guard(env, [&]() -> Napi::Value {
      EnginePtr e = live_ptr(env);
      BatchView view = parse_batch(env, info[0]);
      ForwardOut out;
      run_forward(*e, view, out);
      return forward_result(env, out);
    });
  }
  Napi::Value Backward(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guard(env, [&] { return (new BackwardWorker(env, live_ptr(env), info[0], info[1], info[2]))->Start(); });
  }
  Napi::Value BackwardSync(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guard(env, [&]() -> Napi::Value {
      EnginePtr e = live_ptr(env);
      BatchView view = parse_batch(env, info[0]);
      Grads grads = parse_grads(env, info[1], info[2]);
      return backward_result(env, run_backward(*e, view, grads));
    });
  }

  // Shared argument checks of the row/state accessors: table index, ids in range, value array size.
  template <typename F>
  Napi::Value RowAccess(const Napi::CallbackInfo& info, bool state, F&& body) {
    Napi::Env env = info.Env();
    return guard(env, [&]() -> Napi::Value {
      Guarded& g = live(env);
      const CollectionSpec& spec = g.engine->spec();
      double t = info[0].IsNumber() ? info[0].As<Napi::Number>().DoubleValue() : -1;
      if (!(t >= 0 && t < static_cast<double>(spec.tables.size()))) throw_error(env, "UNKNOWN_TABLE", "no such table index");
      uint32_t table = static_cast<uint32_t>(t);
      size_t n, m;
      const int64_t* ids = i64_array(env, info[1], "ids", &n);
      float* vals = float_array_mut(env, info[2], "values", &m);
      const uint64_t width = state ? g.engine->layout().tables[table].statePerRow : spec.tables[table].dim;
      if (m != n * width)
        fail("DIM_MISMATCH", "table '%s': expected %zu values (%zu ids × %llu), got %zu", spec.tables[table].name.c_str(),
             n * width, n, static_cast<unsigned long long>(width), m);
      std::vector<uint64_t> rows(n);
      for (size_t i = 0; i < n; ++i) {
        if (ids[i] < 0 || static_cast<uint64_t>(ids[i]) >= spec.tables[table].rows)
          fail("ID_OUT_OF_RANGE", "id %lld is out of range for table '%s' (rows %llu)", static_cast<long long>(ids[i]),
               spec.tables[table].name.c_str(), static_cast<unsigned long long>(spec.tables[table].rows));
        rows[i] = static_cast<uint64_t>(ids[i]);
      }
      std::lock_guard<std::mutex> lk(g.mu);
      body(*g.engine, table, rows.data(), static_cast<int64_t>(n), vals);
      return env.Undefined();
    });
  }
  Napi::Value ReadRows(const Napi::CallbackInfo& info) {
    return RowAccess(info, false, [](Engine& e, uint32_t t, const uint64_t* r, int64_t n, float* v) { e.read_rows(t, r, n, v); });
  }
  Napi::Value WriteRows(const Napi::CallbackInfo& info) {
    return RowAccess(info, false, [](Engine& e, uint32_t t, const uint64_t* r, int64_t n, float* v) { e.write_rows(t, r, n, v); });
  }
  Napi::Value ReadState(const Napi::CallbackInfo& info) {
    return RowAccess(info, true, [](Engine& e, uint32_t t, const uint64_t* r, int64_t n, float* v) { e.read_state(t, r, n, v); });
  }
  Napi::Value WriteState(const Napi::CallbackInfo& info) {
    return RowAccess(info, true, [](Engine& e, uint32_t t, const uint64_t* r, int64_t n, float* v) { e.write_state(t, r, n, v); });
  }

  Napi::Value SavePayload(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guard(env, [&] {
      if (!info[0].IsString()) throw_error(env, "INVALID_ARGUMENT", "savePayload(path) expects a string");
      return (new SaveWorker(env, live_ptr(env), info[0].As<Napi::String>().Utf8Value()))->Start();
    });
  }
  Napi::Value LoadPayload(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guard(env, [&] {
      if (!info[0].IsString() || !info[1].IsNumber() || !info[2].IsNumber())
        throw_error(env, "INVALID_ARGUMENT", "loadPayload(path, bytes, crc32c)");
      PayloadInfo expect{static_cast<uint64_t>(info[1].As<Napi::Number>().Int64Value()), info[2].As<Napi::Number>().Uint32Value()};
      return (new LoadWorker(env, live_ptr(env), info[0].As<Napi::String>().Utf8Value(), expect))->Start();
    });
  }
  // Device time of the last forward / backward kernels (CUDA engines; null elsewhere), for benchmarks.
  Napi::Value KernelTimes(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Guarded& g = live(env);
#if defined(EMBSHARD_WITH_CUDA)
    std::lock_guard<std::mutex> lk(g.mu);
    CudaKernelTimes t;
    if (cuda_kernel_times(*g.engine, &t)) {
      Napi::Object o = Napi::Object::New(env);
      o.Set("forwardMs", t.forwardMs);
      o.Set("backwardMs", t.backwardMs);
      return o;
    }
#else
    (void)g;
#endif
    return env.Null();
  }

  // Gives forward outputs back to this addon's output pool now (their ArrayBuffers are detached).
  Napi::Value ReleaseOutputs(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guard(env, [&]() -> Napi::Value {
      if (!info[0].IsArray()) throw_error(env, "INVALID_ARGUMENT", "releaseOutputs(arrays) expects an array of typed arrays");
      return Napi::Number::New(env, release_outputs(env, info[0].As<Napi::Array>()));
    });
  }

  Napi::Value Dispose(const Napi::CallbackInfo& info) {
    engine_.reset();  // in-flight workers hold their own reference; memory goes when they finish
    return info.Env().Undefined();
  }

  EnginePtr engine_;
};

Part part("engine", &EngineWrap::Init);

}  // namespace
}  // namespace embshard::addon
