// engine_wrap.cc — `Engine`, the ObjectWrap over one collection's backend engine: forward / backward
// (async AsyncWorkers and sync twins), row and state access, checkpoint payload I/O, dispose. Calls on
// one engine never interleave (a mutex per engine); dispose() frees memory once in-flight calls finish.
// A forward returns, beside its outputs, the handle of its prepared batch, which the backward of the
// same output reuses. Arguments are read with js_args.h.
#include <napi.h>

#include <cmath>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "addon/device_buffer.h"
#include "addon/errors.h"
#include "addon/js_args.h"
#include "addon/output_pool.h"
#include "addon/promise_worker.h"
#include "addon/registry.h"
#include "addon/storage_args.h"
#include "core/checkpoint.h"
#include "core/engine.h"
#include "core/profile.h"
#include "cpu/cpu_engine.h"
#include "storage/disk_engine.h"
#if defined(EMBSHARD_WITH_CUDA)
#include "cuda/cuda_engine.h"
#endif

namespace embshard::addon {

namespace {

struct Guarded {
  std::unique_ptr<Engine> engine;
  EngineCapabilities caps;
  std::mutex mu;
  // Storage of a prepared batch whose backward is done, reused by the next forward (no fresh vectors
  // per step). Guarded by mu.
  std::unique_ptr<PreparedBatch> spare;
  // The engine as a collection with disk-backed tables, when it is one (prefetch, flush, stats).
  storage::DiskEngine* disk = nullptr;
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

// The prepared batch of one forward, handed to JS as an External next to the outputs: the backward of
// the same output takes it instead of validating (and, for engines that need it, resolving) the batch
// again. It is used only by the engine that made it and only for the very same batch arrays; otherwise
// the backward prepares the batch itself.
struct PreparedHandle {
  std::weak_ptr<Guarded> owner;
  BatchView view;                       // the arrays the batch was prepared from
  std::unique_ptr<PreparedBatch> batch; // null once a backward took it
};

bool same_arrays(const BatchView& a, const BatchView& b) {
  return a.batchSize == b.batchSize && a.lengths == b.lengths && a.numLengths == b.numLengths && a.ids == b.ids &&
         a.idType == b.idType && a.numIds == b.numIds && a.weights == b.weights && a.numWeights == b.numWeights &&
         a.features == b.features;
}

// Prepares `view` for g's engine into recycled storage (call under g.mu).
std::unique_ptr<PreparedBatch> prepare(Guarded& g, const BatchView& view) {
  std::unique_ptr<PreparedBatch> b = g.spare ? std::move(g.spare) : std::make_unique<PreparedBatch>();
  prepare_batch(g.engine->spec(), view, *b, /*resolveIds=*/!g.caps.resolvesIds);
  return b;
}

// The outputs / gradients of a call kept in device memory (DeviceArrays on the engine's device): pooled
// [B × pooledDim] and the sequence features' values back to back in collection-feature order, for engines
// with the outputsOnDevice capability.
struct DeviceIo {
  bool on = false;
  DeviceBuffer pooled, seq;
};

// `pooled` and `seq` as a call's device buffers: f32 device buffers on the engine's own device.
DeviceIo device_io(Napi::Env env, const Guarded& g, const Napi::Value& pooled, const Napi::Value& seq, const char* what) {
  DeviceIo d;
  d.on = true;
  if (!g.caps.outputsOnDevice)
    throw_error(env, "BACKEND_UNAVAILABLE", format("%s: the %s engine keeps its outputs in host memory", what, g.engine->device().c_str()));
  for (auto [v, out, name] : {std::tuple{&pooled, &d.pooled, "pooled"}, std::tuple{&seq, &d.seq, "sequences"}}) {
    const std::string field = std::string(what) + ": the device " + name;
    *out = read_device_buffer(env, *v, field.c_str());
    if (out->type != comm::ElemType::F32) throw_error(env, "INVALID_ARGUMENT", field + " must hold f32 elements");
    if (g.engine->device() != "cuda:" + std::to_string(out->device))
      throw_error(env, "INVALID_ARGUMENT", format("%s is on cuda:%d, the engine on %s", field.c_str(), out->device, g.engine->device().c_str()));
  }
  return d;
}

// LENGTH_MISMATCH unless the device buffers hold the batch's values (checked before the engine runs).
void check_device_room(const DeviceIo& d, const Engine& e, const PreparedBatch& b, const char* what) {
  const int64_t pooled = b.B * e.layout().pooledDim;
  int64_t seq = 0;
  for (uint32_t f = 0; f < e.spec().features.size(); ++f)
    if (e.spec().features[f].pooling == Pooling::None) seq += sequence_values(e.spec(), b, f);
  if (d.pooled.count < pooled || d.seq.count < seq)
    fail("LENGTH_MISMATCH", "%s: the device buffers hold %lld pooled and %lld sequence floats; the batch needs %lld and %lld", what,
         static_cast<long long>(d.pooled.count), static_cast<long long>(d.seq.count), static_cast<long long>(pooled),
         static_cast<long long>(seq));
}

struct ForwardOut {
  DeviceIo dev;  // set: the outputs go there instead of `pooled` and `seq`
  OutBuf pooled;
  std::vector<OutBuf> seq;  // per feature; empty for pooled features
  std::vector<bool> isSeq;
  std::unique_ptr<PreparedBatch> prepared;
};

void run_forward(Guarded& g, const BatchView& view, ForwardOut& out) {
  std::lock_guard<std::mutex> lk(g.mu);
  PhaseTimer timer("forward");
  Engine& e = *g.engine;
  out.prepared = prepare(g, view);
  const PreparedBatch& b = *out.prepared;
  timer.mark("prepare");
  if (out.dev.on) {
    check_device_room(out.dev, e, b, "forward");
    timer.mark("alloc");
    e.forward_device(b, static_cast<float*>(out.dev.pooled.ptr), static_cast<float*>(out.dev.seq.ptr));
    timer.mark("kernel");
    return;
  }
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

Napi::Object forward_result(Napi::Env env, const EnginePtr& owner, const BatchView& view, ForwardOut& out) {
  Napi::Object r = Napi::Object::New(env);
  r.Set("pooled", out.dev.on ? env.Null() : Napi::Value(out.pooled.adopt(env)));
  Napi::Array seq = Napi::Array::New(env, out.seq.size());
  for (uint32_t f = 0; f < out.seq.size(); ++f) seq.Set(f, out.isSeq[f] ? Napi::Value(out.seq[f].adopt(env)) : env.Null());
  r.Set("sequences", seq);
  auto* h = new PreparedHandle{owner, view, std::move(out.prepared)};
  r.Set("prepared", Napi::External<PreparedHandle>::New(env, h, [](Napi::Env, PreparedHandle* p) { delete p; }));
  return r;
}

// The prepared batch of `handle` when it belongs to this engine and to these batch arrays (it is
// taken: one backward per forward reuses it), else null.
std::unique_ptr<PreparedBatch> take_prepared(const Guarded& g, const BatchView& view, const Napi::Value& handle) {
  if (!handle.IsExternal()) return nullptr;
  PreparedHandle* h = handle.As<Napi::External<PreparedHandle>>().Data();
  if (!h || h->owner.lock().get() != &g || !h->batch || !same_arrays(h->view, view)) return nullptr;
  return std::move(h->batch);
}

BackwardResult run_backward(Guarded& g, const BatchView& view, std::unique_ptr<PreparedBatch> prepared, GradientView grads,
                            const DeviceIo& dev = {}) {
  std::lock_guard<std::mutex> lk(g.mu);
  PhaseTimer timer("backward");
  Engine& e = *g.engine;
  if (!prepared) prepared = prepare(g, view);
  timer.mark("prepare");
  struct Recycle {  // the storage goes back for the next forward, whatever the outcome
    Guarded& g;
    std::unique_ptr<PreparedBatch>& b;
    ~Recycle() { g.spare = std::move(b); }
  } recycle{g, prepared};
  if (dev.on) {
    check_device_room(dev, e, *prepared, "backward");
    return e.backward_device(*prepared, static_cast<const float*>(dev.pooled.ptr), static_cast<const float*>(dev.seq.ptr));
  }
  check_gradient_sizes(e.spec(), e.layout(), *prepared, grads);
  return e.backward(*prepared, grads.pooled, grads.seq.data());
}

Napi::Object backward_result(Napi::Env env, const BackwardResult& r) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("skipped", Napi::Boolean::New(env, r.skipped));
  o.Set("uniqueRows", Napi::Number::New(env, static_cast<double>(r.uniqueRows)));
  return o;
}

class ForwardWorker : public PromiseWorker {
 public:
  // devPooled / devSeq: empty (outputs in host buffers) or the device buffers the outputs go to
  ForwardWorker(Napi::Env env, EnginePtr e, const Napi::Value& batch, const Napi::Value& devPooled = Napi::Value(),
                const Napi::Value& devSeq = Napi::Value())
      : PromiseWorker(env), e_(std::move(e)), view_(parse_batch(env, batch)) {
    Keep(batch);
    if (!devPooled.IsEmpty()) {
      out_.dev = device_io(env, *e_, devPooled, devSeq, "forwardDevice");
      Keep(devPooled);
      Keep(devSeq);
    }
  }
  void Run() override { run_forward(*e_, view_, out_); }
  Napi::Value Result(Napi::Env env) override { return forward_result(env, e_, view_, out_); }

 private:
  EnginePtr e_;
  BatchView view_;
  ForwardOut out_;
};

class BackwardWorker : public PromiseWorker {
 public:
  // onDevice: `pooled` and `seq` are device buffers (the gradients in device memory), else a Float32Array
  // and an array of per-feature Float32Arrays
  BackwardWorker(Napi::Env env, EnginePtr e, const Napi::Value& batch, const Napi::Value& pooled, const Napi::Value& seq,
                 const Napi::Value& prepared, bool onDevice = false)
      : PromiseWorker(env),
        e_(std::move(e)),
        view_(parse_batch(env, batch)),
        dev_(onDevice ? device_io(env, *e_, pooled, seq, "backwardDevice") : DeviceIo{}),
        grads_(onDevice ? GradientView{} : parse_gradients(env, pooled, seq)),
        prepared_(take_prepared(*e_, view_, prepared)) {
    Keep(batch);
    Keep(pooled);
    Keep(seq);
  }
  void Run() override { result_ = run_backward(*e_, view_, std::move(prepared_), grads_, dev_); }
  Napi::Value Result(Napi::Env env) override { return backward_result(env, result_); }

 private:
  EnginePtr e_;
  BatchView view_;
  DeviceIo dev_;
  GradientView grads_;
  std::unique_ptr<PreparedBatch> prepared_;
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

// Disk-backed tables: stage a batch's rows ahead of its step / write dirty rows back.
class StorageWorker : public PromiseWorker {
 public:
  StorageWorker(Napi::Env env, EnginePtr e, const Napi::Value& batch) : PromiseWorker(env), e_(std::move(e)), flush_(batch.IsUndefined()) {
    if (!flush_) view_ = parse_batch(env, batch), Keep(batch);
  }
  void Run() override {
    std::lock_guard<std::mutex> lk(e_->mu);
    if (flush_) return e_->disk->flush();
    PreparedBatch b;
    prepare_batch(e_->engine->spec(), view_, b, /*resolveIds=*/true);
    e_->disk->prefetch(b);
  }

 private:
  EnginePtr e_;
  bool flush_;
  BatchView view_;
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
         InstanceMethod<&EngineWrap::ForwardDevice>("forwardDevice"), InstanceMethod<&EngineWrap::BackwardDevice>("backwardDevice"),
         InstanceMethod<&EngineWrap::Backward>("backward"), InstanceMethod<&EngineWrap::BackwardSync>("backwardSync"),
         InstanceMethod<&EngineWrap::ReadRows>("readRows"), InstanceMethod<&EngineWrap::WriteRows>("writeRows"),
         InstanceMethod<&EngineWrap::ReadState>("readState"), InstanceMethod<&EngineWrap::WriteState>("writeState"),
         InstanceMethod<&EngineWrap::SavePayload>("savePayload"), InstanceMethod<&EngineWrap::LoadPayload>("loadPayload"),
         InstanceMethod<&EngineWrap::KernelTimes>("kernelTimes"), InstanceMethod<&EngineWrap::BackwardPhases>("backwardPhases"), InstanceMethod<&EngineWrap::ReleaseOutputs>("releaseOutputs"),
         InstanceMethod<&EngineWrap::Prefetch>("prefetch"), InstanceMethod<&EngineWrap::Flush>("flush"),
         InstanceMethod<&EngineWrap::StorageStats>("storageStats"),
         InstanceMethod<&EngineWrap::Dispose>("dispose")});
    exports.Set("Engine", ctor);
  }

  explicit EngineWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<EngineWrap>(info) {
    Napi::Env env = info.Env();
    guard(env, [&] {
      if (!info[0].IsObject()) throw_error(env, "INVALID_ARGUMENT", "new Engine(config, device) expects a config object");
      const std::string device = string_arg(env, info[1], "the device");
      bool initialize = true;
      CollectionSpec spec = parse_collection(env, info[0].As<Napi::Object>(), &initialize);
      Layout layout = make_layout(spec);
      auto g = std::make_shared<Guarded>();
      auto disk = parse_storage(env, info[2], spec.tables.size());
      if (!disk.empty()) {
        // the caches live on the collection's device (the CUDA engine: device memory), the tables on disk
        auto inner = [&](const CollectionSpec& s, const Layout& l, bool init) { return create_engine(env, device, s, l, init); };
        auto de = std::make_unique<storage::DiskEngine>(spec, layout, disk, initialize, inner);
        g->disk = de.get();
        g->engine = std::move(de);
      } else {
        g->engine = create_engine(env, device, spec, layout, initialize);
      }
      g->caps = g->engine->capabilities();
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
    const double t = number_arg(info.Env(), v, "step", 0, 9007199254740991.0);
    if (std::floor(t) != t) throw_error(info.Env(), "INVALID_ARGUMENT", format("step must be an integer (got %g)", t));
    std::lock_guard<std::mutex> lk(g.mu);
    g.engine->set_step(static_cast<int64_t>(t));
  }
  Napi::Value SetLearningRate(const Napi::CallbackInfo& info) {
    Guarded& g = live(info.Env());
    const double lr = number_arg(info.Env(), info[0], "the learning rate", 0, 1e30);
    std::lock_guard<std::mutex> lk(g.mu);
    g.engine->set_learning_rate(static_cast<float>(lr));
    return info.Env().Undefined();
  }

  Napi::Value Forward(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guard(env, [&] { return (new ForwardWorker(env, live_ptr(env), info[0]))->Start(); });
  }
  // forwardDevice(batch, devicePooled, deviceSeq) / backwardDevice(batch, devicePooledGrad, deviceSeqGrad,
  // prepared?): the same with the outputs / gradients in device buffers on the engine's device (engines
  // with the outputsOnDevice capability): pooled [B × pooledDim], and the sequence features' values back to
  // back in collection-feature order; forwardDevice's result has pooled: null and no sequences.
  Napi::Value ForwardDevice(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guard(env, [&] { return (new ForwardWorker(env, live_ptr(env), info[0], info[1], info[2]))->Start(); });
  }
  Napi::Value BackwardDevice(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guard(env, [&] { return (new BackwardWorker(env, live_ptr(env), info[0], info[1], info[2], info[3], true))->Start(); });
  }
  Napi::Value ForwardSync(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guard(env, [&]() -> Napi::Value {
      EnginePtr e = live_ptr(env);
      BatchView view = parse_batch(env, info[0]);
      ForwardOut out;
      run_forward(*e, view, out);
      return forward_result(env, e, view, out);
    });
  }
  Napi::Value Backward(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guard(env, [&] { return (new BackwardWorker(env, live_ptr(env), info[0], info[1], info[2], info[3]))->Start(); });
  }
  Napi::Value BackwardSync(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guard(env, [&]() -> Napi::Value {
      EnginePtr e = live_ptr(env);
      BatchView view = parse_batch(env, info[0]);
      GradientView grads = parse_gradients(env, info[1], info[2]);
      return backward_result(env, run_backward(*e, view, take_prepared(*e, view, info[3]), grads));
    });
  }

  // Shared argument checks of the row/state accessors: table index, ids in range, value array size.
  template <typename F>
  Napi::Value RowAccess(const Napi::CallbackInfo& info, bool state, F&& body) {
    Napi::Env env = info.Env();
    return guard(env, [&]() -> Napi::Value {
      Guarded& g = live(env);
      const CollectionSpec& spec = g.engine->spec();
      const uint32_t table = index_arg(env, info[0], "the table index", spec.tables.size(), "UNKNOWN_TABLE");
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
      return (new SaveWorker(env, live_ptr(env), string_arg(env, info[0], "savePayload: the path")))->Start();
    });
  }
  Napi::Value LoadPayload(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guard(env, [&] {
      std::string path = string_arg(env, info[0], "loadPayload: the path");
      PayloadInfo expect{static_cast<uint64_t>(number_arg(env, info[1], "loadPayload: bytes", 0, 9007199254740991.0)),
                         static_cast<uint32_t>(number_arg(env, info[2], "loadPayload: crc32c", 0, 4294967295.0))};
      return (new LoadWorker(env, live_ptr(env), std::move(path), expect))->Start();
    });
  }
  // Device time of the last forward / backward kernels (engines with the kernelTimes capability that
  // have run one; null elsewhere), for benchmarks.
  Napi::Value KernelTimes(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Guarded& g = live(env);
    if (!g.caps.kernelTimes) return env.Null();
    std::lock_guard<std::mutex> lk(g.mu);
    const embshard::KernelTimes t = g.engine->kernel_times();
    if (t.forwardMs < 0 && t.backwardMs < 0) return env.Null();
    Napi::Object o = Napi::Object::New(env);
    o.Set("forwardMs", t.forwardMs);
    o.Set("backwardMs", t.backwardMs);
    return o;
  }

  // The host phases of the last backward in ms, in order ({ phase: ms }; null when the engine times none
  // or has not run one), for benchmarks.
  Napi::Value BackwardPhases(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Guarded& g = live(env);
    std::lock_guard<std::mutex> lk(g.mu);
    const PhaseTimes p = g.engine->backward_phases();
    if (p.n == 0) return env.Null();
    Napi::Object o = Napi::Object::New(env);
    for (int k = 0; k < p.n; ++k) o.Set(p.name[k], p.ms[k]);
    return o;
  }

  // Gives forward outputs back to this addon's output pool now (their ArrayBuffers are detached).
  Napi::Value ReleaseOutputs(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guard(env, [&]() -> Napi::Value {
      if (!info[0].IsArray()) throw_error(env, "INVALID_ARGUMENT", "releaseOutputs(arrays) expects an array of typed arrays");
      return Napi::Number::New(env, release_outputs(env, info[0].As<Napi::Array>()));
    });
  }

  // prefetch(batch) / flush(): promises; storageStats(): per table, counters or null (memory tables).
  Napi::Value Prefetch(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guard(env, [&] {
      if (info[0].IsUndefined()) throw_error(env, "INVALID_ARGUMENT", "prefetch(batch) needs a batch");
      return (new StorageWorker(env, disk_ptr(env), info[0]))->Start();
    });
  }
  Napi::Value Flush(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guard(env, [&] { return (new StorageWorker(env, disk_ptr(env), env.Undefined()))->Start(); });
  }
  Napi::Value StorageStats(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guard(env, [&]() -> Napi::Value {
      Guarded& g = live(env);
      if (!g.disk) return env.Null();
      std::lock_guard<std::mutex> lk(g.mu);
      const auto tables = g.disk->disk_tables();
      Napi::Array a = Napi::Array::New(env, tables.size());
      for (uint32_t t = 0; t < tables.size(); ++t) a.Set(t, tables[t] ? Napi::Value(disk_stats_object(env, *tables[t])) : env.Null());
      return a;
    });
  }
  EnginePtr disk_ptr(Napi::Env env) {
    EnginePtr e = live_ptr(env);
    if (!e->disk) throw_error(env, "INVALID_ARGUMENT", "this collection has no disk-backed table");
    return e;
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
