// herald_ops.cc — binding of Herald's scheduler (native/herald/scheduler.h):
//   herald.Scheduler(world, batchSize, tables: [{ name, rows, dim, stateWidth, slots }])
//     .scheduleSync(step, feats: [{ table, lengths: Int32Array, ids }], assign: Int32Array | null) → StepOut
//     .schedule(step, feats, assign) → Promise<StepOut>   (off the event loop; one call at a time)
// StepOut: { samples, xMove, xKey, xTable, xFrom, xTo, xFromId, xToId, gTable, gFrom, gTo, gToId, gPos,
// readRows, readLoc, readStart, counts } — typed arrays that own the native vectors (no copies).
#include <memory>
#include <string>
#include <vector>

#include "addon/errors.h"
#include "addon/js_args.h"
#include "addon/promise_worker.h"
#include "addon/registry.h"
#include "herald/scheduler.h"

namespace embshard::addon {
namespace {

using herald::FeatureSpan;
using herald::StepOut;

template <typename TA, typename T>
Napi::Value hand_over(Napi::Env env, std::vector<T>&& v) {
  if (v.empty()) return TA::New(env, 0);
  auto* owned = new std::vector<T>(std::move(v));
  auto buf = Napi::ArrayBuffer::New(env, owned->data(), owned->size() * sizeof(T),
                                    [](Napi::Env, void*, std::vector<T>* p) { delete p; }, owned);
  return TA::New(env, owned->size(), buf, 0);
}

Napi::Object result(Napi::Env env, StepOut& s) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("samples", hand_over<Napi::Int32Array>(env, std::move(s.samples)));
  o.Set("xMove", hand_over<Napi::Uint8Array>(env, std::move(s.xMove)));
  o.Set("xKey", hand_over<Napi::Float64Array>(env, std::move(s.xKey)));
  o.Set("xTable", hand_over<Napi::Int32Array>(env, std::move(s.xTable)));
  o.Set("xFrom", hand_over<Napi::Int32Array>(env, std::move(s.xFrom)));
  o.Set("xTo", hand_over<Napi::Int32Array>(env, std::move(s.xTo)));
  o.Set("xFromId", hand_over<Napi::Int32Array>(env, std::move(s.xFromId)));
  o.Set("xToId", hand_over<Napi::Int32Array>(env, std::move(s.xToId)));
  o.Set("gTable", hand_over<Napi::Int32Array>(env, std::move(s.gTable)));
  o.Set("gFrom", hand_over<Napi::Int32Array>(env, std::move(s.gFrom)));
  o.Set("gTo", hand_over<Napi::Int32Array>(env, std::move(s.gTo)));
  o.Set("gToId", hand_over<Napi::Int32Array>(env, std::move(s.gToId)));
  o.Set("gPos", hand_over<Napi::Int32Array>(env, std::move(s.gPos)));
  o.Set("readRows", hand_over<Napi::Float64Array>(env, std::move(s.readRows)));
  o.Set("readLoc", hand_over<Napi::Int32Array>(env, std::move(s.readLoc)));
  o.Set("readStart", hand_over<Napi::Int32Array>(env, std::move(s.readStart)));
  std::vector<double> c(s.counts, s.counts + 9);
  o.Set("counts", hand_over<Napi::Float64Array>(env, std::move(c)));
  return o;
}

class ScheduleWorker : public PromiseWorker {
 public:
  ScheduleWorker(Napi::Env env, herald::Scheduler* s, bool* busy, int64_t step, std::vector<FeatureSpan> feats, const int32_t* assign)
      : PromiseWorker(env), s_(s), busy_(busy), step_(step), feats_(std::move(feats)), assign_(assign) {}

 protected:
  void Run() override { s_->schedule(step_, feats_, assign_, out_); }
  Napi::Value Result(Napi::Env env) override { return result(env, out_); }

 public:
  ~ScheduleWorker() override { *busy_ = false; }  // on the JS thread, after the promise settles

 private:
  herald::Scheduler* s_;
  bool* busy_;
  int64_t step_;
  std::vector<FeatureSpan> feats_;
  const int32_t* assign_;
  StepOut out_;
};

class SchedulerWrap : public Napi::ObjectWrap<SchedulerWrap> {
 public:
  static void Init(Napi::Env env, Napi::Object target) {
    target.Set("Scheduler", DefineClass(env, "Scheduler", {InstanceMethod<&SchedulerWrap::ScheduleSync>("scheduleSync"),
                                                           InstanceMethod<&SchedulerWrap::Schedule>("schedule")}));
  }

  explicit SchedulerWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<SchedulerWrap>(info) {
    Napi::Env env = info.Env();
    guard(env, [&]() -> Napi::Value {
      const int64_t W = int_arg(env, info[0], "herald: world", 1, 1 << 20);
      const int64_t B = int_arg(env, info[1], "herald: batchSize", 1, 1 << 30);
      if (W * B > (int64_t(1) << 31) - 1) throw_error(env, "INVALID_SIZE", "herald: world × batchSize is too large");
      if (!info[2].IsArray()) throw_error(env, "INVALID_ARGUMENT", "herald: tables must be an array");
      auto arr = info[2].As<Napi::Array>();
      std::vector<herald::TableInfo> tables;
      std::vector<std::string> names;
      for (uint32_t i = 0; i < arr.Length(); ++i) {
        Napi::Value e = arr.Get(i);
        if (!e.IsObject()) throw_error(env, "INVALID_ARGUMENT", "herald: tables[] must be objects");
        auto t = e.As<Napi::Object>();
        names.push_back(string_arg(env, t.Get("name"), "herald: tables[].name"));
        herald::TableInfo ti{};
        ti.rows = int_arg(env, t.Get("rows"), "herald: tables[].rows", 1);
        ti.dim = static_cast<int32_t>(int_arg(env, t.Get("dim"), "herald: tables[].dim", 1, 1 << 20));
        ti.stateWidth = static_cast<int32_t>(int_arg(env, t.Get("stateWidth"), "herald: tables[].stateWidth", 0, 1 << 20));
        ti.slots = static_cast<int32_t>(int_arg(env, t.Get("slots"), "herald: tables[].slots", 0, (int64_t(1) << 31) - 1));
        tables.push_back(ti);
      }
      sched_ = std::make_unique<herald::Scheduler>(static_cast<int32_t>(W), static_cast<int32_t>(B), std::move(tables), std::move(names));
      return env.Undefined();
    });
  }

 private:
  struct Args {
    int64_t step;
    std::vector<FeatureSpan> feats;
    const int32_t* assign;
    std::vector<Napi::Value> keep;
  };

  Args parse(Napi::Env env, const Napi::CallbackInfo& info) {
    if (!sched_) throw_error(env, "INVALID_ARGUMENT", "herald: Scheduler was not constructed");
    if (busy_) throw_error(env, "BUSY", "herald: a schedule is still running");
    const int64_t G = static_cast<int64_t>(sched_->world()) * sched_->batchSize();
    Args a;
    a.step = int_arg(env, info[0], "herald: step", 0);
    if (!info[1].IsArray()) throw_error(env, "INVALID_ARGUMENT", "herald: feats must be an array");
    auto arr = info[1].As<Napi::Array>();
    for (uint32_t i = 0; i < arr.Length(); ++i) {
      Napi::Value e = arr.Get(i);
      if (!e.IsObject()) throw_error(env, "INVALID_ARGUMENT", "herald: feats[] must be { table, lengths, ids }");
      auto f = e.As<Napi::Object>();
      FeatureSpan s{};
      s.table = static_cast<int32_t>(int_arg(env, f.Get("table"), "herald: feats[].table", 0, 1 << 30));
      s.lengths = typed_array<int32_t>(env, f.Get("lengths"), napi_int32_array, "herald: feats[].lengths", G);
      Napi::Value ids = f.Get("ids");
      if (!ids.IsTypedArray()) throw_error(env, "INVALID_ARGUMENT", "herald: feats[].ids must be a typed array");
      auto ta = ids.As<Napi::TypedArray>();
      switch (ta.TypedArrayType()) {
        case napi_bigint64_array: s.idType = IdType::I64; break;
        case napi_int32_array: s.idType = IdType::I32; break;
        case napi_uint32_array: s.idType = IdType::U32; break;
        default: throw_error(env, "UNSUPPORTED_DTYPE", "herald: ids must be a BigInt64Array, Int32Array or Uint32Array");
      }
      s.ids = static_cast<uint8_t*>(ta.ArrayBuffer().Data()) + ta.ByteOffset();
      s.n = static_cast<int64_t>(ta.ElementLength());
      a.feats.push_back(s);
      a.keep.push_back(f.Get("lengths"));
      a.keep.push_back(ids);
    }
    a.assign = typed_array<int32_t>(env, info[2], napi_int32_array, "herald: assign", G, true);
    if (a.assign) {
      for (int64_t i = 0; i < G; ++i)
        if (a.assign[i] < 0 || a.assign[i] >= sched_->world()) throw_error(env, "INVALID_ARGUMENT", "herald: assign holds a rank outside the world");
      a.keep.push_back(info[2]);
    }
    return a;
  }

  Napi::Value ScheduleSync(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guard(env, [&]() -> Napi::Value {
      Args a = parse(env, info);
      StepOut out;
      sched_->schedule(a.step, a.feats, a.assign, out);
      return result(env, out);
    });
  }

  Napi::Value Schedule(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guard(env, [&]() -> Napi::Value {
      Args a = parse(env, info);
      auto* worker = new ScheduleWorker(env, sched_.get(), &busy_, a.step, std::move(a.feats), a.assign);
      for (auto& v : a.keep) worker->Keep(v);
      worker->Keep(info.This());
      busy_ = true;
      return worker->Start();
    });
  }

  std::unique_ptr<herald::Scheduler> sched_;
  bool busy_ = false;
};

void Init(Napi::Env env, Napi::Object exports) {
  Napi::Object o = Napi::Object::New(env);
  SchedulerWrap::Init(env, o);
  exports.Set("herald", o);
}

Part part("herald_ops", &Init);

}  // namespace
}  // namespace embshard::addon
