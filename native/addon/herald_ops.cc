// herald_ops.cc — binding of Herald's scheduler (native/herald/scheduler.h) and of a rank's step work
// (native/herald/rank_view.h):
//   herald.Scheduler(world, batchSize, tables: [{ name, rows, dim, stateWidth, slots }],
//                    view?: { rank, pooledDim, cols: Int32Array }, undo?: boolean)
//     .scheduleSync(step, feats: [{ table, lengths: Int32Array, ids }], assign: Int32Array | null) → StepOut
//     .schedule(step, feats, assign) → Promise<StepOut>   (off the event loop; one call at a time)
//     .commit() / .rollback()   (with undo: forget the oldest step's record / undo every step not committed)
//   herald.copySegments(dsts: Float32Array[], srcs: Float32Array[], segs: Int32Array)   (rank_view.h copy_segments)
//   herald.applySlots(slotKey: Float64Array, freeSlots, freeKeys, holdSlots, holdKeys)   (rank_view.h apply_slots)
//   herald.heldSlots(slotKey: Float64Array, owned, rowBase) → { rows: Float64Array, ids: BigInt64Array }   (lookup.h)
//   herald.lookupRoutes(rows: BigInt64Array, held: Float64Array, lo: Float64Array) → { heldPos, heldSrc, askCounts, ask, askPos }
// StepOut: { samples, xMove, xKey, xTable, xFrom, xTo, xFromId, xToId, gTable, gFrom, gTo, gToId, gPos,
// readRows, readLoc, readStart, counts, view? } — typed arrays that own the native vectors (no copies); `view`
// (with a view rank) holds RankView's fields under their names.
#include <memory>
#include <string>
#include <vector>

#include "addon/errors.h"
#include "addon/js_args.h"
#include "addon/promise_worker.h"
#include "addon/registry.h"
#include "herald/lookup.h"
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

Napi::Object view_object(Napi::Env env, herald::RankView& v) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("sendIds", hand_over<Napi::BigInt64Array>(env, std::move(v.sendIds)));
  o.Set("sendStart", hand_over<Napi::Int32Array>(env, std::move(v.sendStart)));
  o.Set("sendStateIds", hand_over<Napi::BigInt64Array>(env, std::move(v.sendStateIds)));
  o.Set("sendStateStart", hand_over<Napi::Int32Array>(env, std::move(v.sendStateStart)));
  o.Set("sendSegs", hand_over<Napi::Int32Array>(env, std::move(v.sendSegs)));
  o.Set("sendCounts", hand_over<Napi::Float64Array>(env, std::move(v.sendCounts)));
  o.Set("recvCounts", hand_over<Napi::Float64Array>(env, std::move(v.recvCounts)));
  o.Set("moveIds", hand_over<Napi::BigInt64Array>(env, std::move(v.moveIds)));
  o.Set("moveStart", hand_over<Napi::Int32Array>(env, std::move(v.moveStart)));
  o.Set("copyStart", hand_over<Napi::Int32Array>(env, std::move(v.copyStart)));
  o.Set("recvSegs", hand_over<Napi::Int32Array>(env, std::move(v.recvSegs)));
  o.Set("freeSlots", hand_over<Napi::Int32Array>(env, std::move(v.freeSlots)));
  o.Set("freeKeys", hand_over<Napi::Float64Array>(env, std::move(v.freeKeys)));
  o.Set("holdSlots", hand_over<Napi::Int32Array>(env, std::move(v.holdSlots)));
  o.Set("holdKeys", hand_over<Napi::Float64Array>(env, std::move(v.holdKeys)));
  o.Set("engIds", hand_over<Napi::BigInt64Array>(env, std::move(v.engIds)));
  o.Set("engPos", hand_over<Napi::Int32Array>(env, std::move(v.engPos)));
  o.Set("engStart", hand_over<Napi::Int32Array>(env, std::move(v.engStart)));
  o.Set("copyPos", hand_over<Napi::Int32Array>(env, std::move(v.copyPos)));
  o.Set("inverse", hand_over<Napi::Int32Array>(env, std::move(v.inverse)));
  o.Set("inverseStart", hand_over<Napi::Int32Array>(env, std::move(v.inverseStart)));
  o.Set("gradSendSegs", hand_over<Napi::Int32Array>(env, std::move(v.gradSendSegs)));
  o.Set("gradSendCounts", hand_over<Napi::Float64Array>(env, std::move(v.gradSendCounts)));
  o.Set("gradRecvCounts", hand_over<Napi::Float64Array>(env, std::move(v.gradRecvCounts)));
  o.Set("updIds", hand_over<Napi::BigInt64Array>(env, std::move(v.updIds)));
  o.Set("updStart", hand_over<Napi::Int32Array>(env, std::move(v.updStart)));
  o.Set("updSegs", hand_over<Napi::Int32Array>(env, std::move(v.updSegs)));
  o.Set("updDistinct", hand_over<Napi::Int32Array>(env, std::move(v.updDistinct)));
  o.Set("updRows", Napi::Number::New(env, v.updRows));
  return o;
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
  if (s.hasView) o.Set("view", view_object(env, s.view));
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
                                                           InstanceMethod<&SchedulerWrap::Schedule>("schedule"),
                                                           InstanceMethod<&SchedulerWrap::Commit>("commit"),
                                                           InstanceMethod<&SchedulerWrap::Rollback>("rollback")}));
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
      herald::ViewSpec view;
      if (info.Length() > 3 && !info[3].IsUndefined() && !info[3].IsNull()) {
        if (!info[3].IsObject()) throw_error(env, "INVALID_ARGUMENT", "herald: view must be { rank, pooledDim, cols }");
        auto vo = info[3].As<Napi::Object>();
        view.rank = static_cast<int32_t>(int_arg(env, vo.Get("rank"), "herald: view.rank", 0, W - 1));
        view.pooledDim = static_cast<int32_t>(int_arg(env, vo.Get("pooledDim"), "herald: view.pooledDim", 1, (int64_t(1) << 31) - 1));
        const int32_t* cols = typed_array<int32_t>(env, vo.Get("cols"), napi_int32_array, "herald: view.cols", static_cast<int64_t>(tables.size()));
        view.cols.assign(cols, cols + tables.size());
        for (size_t t = 0; t < tables.size(); ++t)
          if (view.cols[t] < 0 || static_cast<int64_t>(view.cols[t]) + tables[t].dim > view.pooledDim)
            throw_error(env, "INVALID_ARGUMENT", "herald: view.cols must place every table inside pooledDim");
      }
      const bool undo = info.Length() > 4 && info[4].ToBoolean().Value();
      sched_ = std::make_unique<herald::Scheduler>(static_cast<int32_t>(W), static_cast<int32_t>(B), std::move(tables), std::move(names), std::move(view), undo);
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
    ready(env);
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

  // what every call but the constructor needs: a scheduler, and no schedule running on a worker thread
  void ready(Napi::Env env) {
    if (!sched_) throw_error(env, "INVALID_ARGUMENT", "herald: Scheduler was not constructed");
    if (busy_) throw_error(env, "INVALID_ARGUMENT", "herald: a schedule is still running (await scheduleAsync first)");
  }

  Napi::Value Commit(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guard(env, [&]() -> Napi::Value {
      ready(env);
      sched_->commit();
      return env.Undefined();
    });
  }

  Napi::Value Rollback(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guard(env, [&]() -> Napi::Value {
      ready(env);
      sched_->rollback();
      return env.Undefined();
    });
  }

  std::unique_ptr<herald::Scheduler> sched_;
  bool busy_ = false;
};

// A JS array of Float32Array → pointers and sizes (in floats).
template <typename P>
void float_arrays(Napi::Env env, const Napi::Value& v, const char* what, std::vector<P>& ptr, std::vector<int64_t>& size) {
  if (!v.IsArray()) throw_error(env, "INVALID_ARGUMENT", std::string(what) + " must be an array of Float32Array");
  auto arr = v.As<Napi::Array>();
  for (uint32_t i = 0; i < arr.Length(); ++i) {
    size_t n = 0;
    ptr.push_back(float_array_mut(env, arr.Get(i), what, &n));
    size.push_back(static_cast<int64_t>(n));
  }
}

Napi::Value CopySegments(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    std::vector<float*> dsts;
    std::vector<const float*> srcs;
    std::vector<int64_t> dstSize, srcSize;
    float_arrays(env, info[0], "herald: copySegments dsts", dsts, dstSize);
    float_arrays(env, info[1], "herald: copySegments srcs", srcs, srcSize);
    const Bytes segs = typed_bytes(env, info[2], "herald: copySegments segs");
    if (!info[2].IsTypedArray() || info[2].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array || segs.size % 20 != 0)
      throw_error(env, "INVALID_ARGUMENT", "herald: copySegments segs must be an Int32Array of 5-tuples");
    herald::copy_segments(reinterpret_cast<const int32_t*>(segs.data), segs.size / 20, dsts.data(), dstSize.data(), static_cast<int32_t>(dsts.size()),
                          srcs.data(), srcSize.data(), static_cast<int32_t>(srcs.size()), "herald: copySegments");
    return env.Undefined();
  });
}

Napi::Value ApplySlots(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    const Bytes key = typed_bytes(env, info[0], "herald: applySlots slotKey");
    const Bytes fs = typed_bytes(env, info[1], "herald: applySlots freeSlots"), hs = typed_bytes(env, info[3], "herald: applySlots holdSlots");
    const int64_t nf = fs.size / 4, nh = hs.size / 4;
    const double* fk = typed_array<double>(env, info[2], napi_float64_array, "herald: applySlots freeKeys", nf);
    const double* hk = typed_array<double>(env, info[4], napi_float64_array, "herald: applySlots holdKeys", nh);
    double* slotKey = typed_array<double>(env, info[0], napi_float64_array, "herald: applySlots slotKey", key.size / 8);
    herald::apply_slots(slotKey, key.size / 8, typed_array<int32_t>(env, info[1], napi_int32_array, "herald: applySlots freeSlots", nf), fk, nf,
                        typed_array<int32_t>(env, info[3], napi_int32_array, "herald: applySlots holdSlots", nh), hk, nh);
    return env.Undefined();
  });
}

Napi::Value HeldSlots(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    const Bytes key = typed_bytes(env, info[0], "herald: heldSlots slotKey");
    const double* slotKey = typed_array<double>(env, info[0], napi_float64_array, "herald: heldSlots slotKey", key.size / 8);
    const int64_t owned = int_arg(env, info[1], "herald: heldSlots owned", 0);
    const double rowBase = number_arg(env, info[2], "herald: heldSlots rowBase", 0, 9007199254740992.0);
    std::vector<double> rows;
    std::vector<int64_t> ids;
    herald::held_slots(slotKey, key.size / 8, owned, rowBase, rows, ids);
    Napi::Object o = Napi::Object::New(env);
    o.Set("rows", hand_over<Napi::Float64Array>(env, std::move(rows)));
    o.Set("ids", hand_over<Napi::BigInt64Array>(env, std::move(ids)));
    return o;
  });
}

Napi::Value LookupRoutes(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    size_t U = 0;
    const int64_t* rows = i64_array(env, info[0], "herald: lookupRoutes rows", &U);
    const Bytes held = typed_bytes(env, info[1], "herald: lookupRoutes held");
    const double* h = typed_array<double>(env, info[1], napi_float64_array, "herald: lookupRoutes held", held.size / 8);
    const Bytes lob = typed_bytes(env, info[2], "herald: lookupRoutes lo");
    const double* lod = typed_array<double>(env, info[2], napi_float64_array, "herald: lookupRoutes lo", lob.size / 8);
    const int64_t n = lob.size / 8;
    if (n < 2) throw_error(env, "INVALID_ARGUMENT", "herald: lookupRoutes lo needs world + 1 range starts");
    std::vector<int64_t> lo(lod, lod + n);
    herald::LookupRoutes r;
    herald::lookup_routes(rows, static_cast<int64_t>(U), h, held.size / 8, lo.data(), static_cast<int32_t>(n - 1), r);
    Napi::Object o = Napi::Object::New(env);
    o.Set("heldPos", hand_over<Napi::Int32Array>(env, std::move(r.heldPos)));
    o.Set("heldSrc", hand_over<Napi::Int32Array>(env, std::move(r.heldSrc)));
    o.Set("askCounts", hand_over<Napi::Float64Array>(env, std::move(r.askCounts)));
    o.Set("ask", hand_over<Napi::BigInt64Array>(env, std::move(r.ask)));
    o.Set("askPos", hand_over<Napi::Int32Array>(env, std::move(r.askPos)));
    return o;
  });
}

void Init(Napi::Env env, Napi::Object exports) {
  Napi::Object o = Napi::Object::New(env);
  SchedulerWrap::Init(env, o);
  o.Set("copySegments", Napi::Function::New(env, CopySegments, "copySegments"));
  o.Set("applySlots", Napi::Function::New(env, ApplySlots, "applySlots"));
  o.Set("heldSlots", Napi::Function::New(env, HeldSlots, "heldSlots"));
  o.Set("lookupRoutes", Napi::Function::New(env, LookupRoutes, "lookupRoutes"));
  exports.Set("herald", o);
}

Part part("herald_ops", &Init);

}  // namespace
}  // namespace embshard::addon
