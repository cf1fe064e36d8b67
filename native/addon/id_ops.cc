// id_ops.cc — bindings of hot-row placement's per-id work (native/shard/id_remap.h, id_count.h):
//   placement.IdRemap(rows, from: BigInt64Array, to: BigInt64Array)  a table's sparse id permutation;
//     .apply(ids, out: BigInt64Array, what) / .invert(ids, out, what)  synchronous, one pass per call;
//   placement.countTop(parts: [{ ids, what }], rows, k, minCount) → Promise<{ ids, counts, total, distinct, tailLow }>
//     (off the event loop: a profile counts many batches at once).
// Sizes and types are checked before any memory is touched.
#include <memory>
#include <string>
#include <vector>

#include "addon/errors.h"
#include "addon/js_args.h"
#include "addon/promise_worker.h"
#include "addon/registry.h"
#include "shard/id_count.h"
#include "shard/id_remap.h"

namespace embshard::addon {
namespace {

struct IdsArg {
  const void* data;
  IdType type;
  int64_t n;
};

IdsArg ids_arg(Napi::Env env, const Napi::Value& v, const char* what) {
  if (!v.IsTypedArray()) throw_error(env, "INVALID_ARGUMENT", format("%s must be a typed array of ids", what));
  auto a = v.As<Napi::TypedArray>();
  IdType t;
  switch (a.TypedArrayType()) {
    case napi_bigint64_array: t = IdType::I64; break;
    case napi_int32_array: t = IdType::I32; break;
    case napi_uint32_array: t = IdType::U32; break;
    default: throw_error(env, "UNSUPPORTED_DTYPE", format("%s must be a BigInt64Array, Int32Array or Uint32Array", what));
  }
  return {static_cast<uint8_t*>(a.ArrayBuffer().Data()) + a.ByteOffset(), t, static_cast<int64_t>(a.ElementLength())};
}

class IdRemapWrap : public Napi::ObjectWrap<IdRemapWrap> {
 public:
  static void Init(Napi::Env env, Napi::Object target) {
    target.Set("IdRemap", DefineClass(env, "IdRemap", {InstanceMethod<&IdRemapWrap::Apply>("apply"), InstanceMethod<&IdRemapWrap::Invert>("invert")}));
  }

  explicit IdRemapWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<IdRemapWrap>(info) {
    Napi::Env env = info.Env();
    guard(env, [&]() -> Napi::Value {
      const int64_t rows = int_arg(env, info[0], "IdRemap: rows", 1);
      if (!info[1].IsTypedArray() || !info[2].IsTypedArray()) throw_error(env, "INVALID_ARGUMENT", "IdRemap: from and to must be BigInt64Arrays");
      const int64_t n = static_cast<int64_t>(info[1].As<Napi::TypedArray>().ElementLength());
      const int64_t* from = typed_array<int64_t>(env, info[1], napi_bigint64_array, "IdRemap: from", n);
      if (static_cast<int64_t>(info[2].As<Napi::TypedArray>().ElementLength()) != n) throw_error(env, "LENGTH_MISMATCH", "IdRemap: from and to differ in length");
      const int64_t* to = typed_array<int64_t>(env, info[2], napi_bigint64_array, "IdRemap: to", n);
      perm_ = std::make_unique<shard::SparsePermutation>(rows, from, to, n);
      return env.Undefined();
    });
  }

 private:
  Napi::Value Run(const Napi::CallbackInfo& info, bool inverse) {
    Napi::Env env = info.Env();
    return guard(env, [&]() -> Napi::Value {
      if (!perm_) throw_error(env, "INVALID_ARGUMENT", "IdRemap was not constructed");
      const IdsArg ids = ids_arg(env, info[0], inverse ? "invert: ids" : "apply: ids");
      int64_t* out = typed_array<int64_t>(env, info[1], napi_bigint64_array, inverse ? "invert: out" : "apply: out", ids.n);
      const std::string what = info[2].IsString() ? info[2].As<Napi::String>().Utf8Value() : std::string("ids");
      perm_->apply(ids.data, ids.type, ids.n, out, inverse, what.c_str());
      return env.Undefined();
    });
  }
  Napi::Value Apply(const Napi::CallbackInfo& info) { return Run(info, false); }
  Napi::Value Invert(const Napi::CallbackInfo& info) { return Run(info, true); }

  std::unique_ptr<shard::SparsePermutation> perm_;
};

class CountTopWorker : public PromiseWorker {
 public:
  CountTopWorker(Napi::Env env, std::vector<shard::IdSpan> parts, int64_t rows, int64_t k, int64_t minCount)
      : PromiseWorker(env), parts_(std::move(parts)), rows_(rows), k_(k), minCount_(minCount) {}

 protected:
  void Run() override { shard::count_top(parts_, rows_, k_, minCount_, out_); }
  Napi::Value Result(Napi::Env env) override {
    Napi::Object o = Napi::Object::New(env);
    auto ids = Napi::BigInt64Array::New(env, out_.ids.size());
    auto counts = Napi::Float64Array::New(env, out_.counts.size());
    for (size_t i = 0; i < out_.ids.size(); ++i) {
      ids[i] = out_.ids[i];
      counts[i] = static_cast<double>(out_.counts[i]);
    }
    o.Set("ids", ids);
    o.Set("counts", counts);
    o.Set("total", Napi::Number::New(env, static_cast<double>(out_.total)));
    o.Set("distinct", Napi::Number::New(env, static_cast<double>(out_.distinct)));
    o.Set("tailLow", Napi::Number::New(env, static_cast<double>(out_.tailLow)));
    return o;
  }

 private:
  std::vector<shard::IdSpan> parts_;
  int64_t rows_, k_, minCount_;
  shard::IdCounts out_;
};

Napi::Value CountTop(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    if (!info[0].IsArray()) throw_error(env, "INVALID_ARGUMENT", "countTop: parts must be an array of { ids, what }");
    auto arr = info[0].As<Napi::Array>();
    const int64_t rows = int_arg(env, info[1], "countTop: rows", 1);
    const int64_t k = int_arg(env, info[2], "countTop: k", 0);
    const int64_t minCount = int_arg(env, info[3], "countTop: minCount", 1);
    std::vector<shard::IdSpan> parts;
    std::vector<Napi::Value> keep;
    for (uint32_t i = 0; i < arr.Length(); ++i) {
      Napi::Value e = arr.Get(i);
      if (!e.IsObject()) throw_error(env, "INVALID_ARGUMENT", format("countTop: parts[%u] must be { ids, what }", i));
      auto obj = e.As<Napi::Object>();
      const IdsArg a = ids_arg(env, obj.Get("ids"), "countTop: parts[].ids");
      Napi::Value w = obj.Get("what");
      parts.push_back({a.data, a.type, a.n, w.IsString() ? w.As<Napi::String>().Utf8Value() : format("parts[%u]", i)});
      keep.push_back(obj.Get("ids"));
    }
    auto* worker = new CountTopWorker(env, std::move(parts), rows, k, minCount);
    for (auto& v : keep) worker->Keep(v);
    return worker->Start();
  });
}

void Init(Napi::Env env, Napi::Object exports) {
  Napi::Object o = Napi::Object::New(env);
  IdRemapWrap::Init(env, o);
  o.Set("countTop", Napi::Function::New(env, CountTop, "countTop"));
  exports.Set("placement", o);
}

Part part("id_ops", &Init);

}  // namespace
}  // namespace embshard::addon
