// dynamic_map_wrap.cc — `DynamicMap`, the ObjectWrap over one dynamic table's id map
// (storage/dynamic_map.h): translate (async: a batch's raw ids of the table's features → slots, plus the
// rows it admitted and their init values), lookup, held ids, stats, and the checkpoint form; and
// spill (async: evicted rows appended to the table's spill file, storage/dynamic_spill.h), saveSpill /
// loadSpill (async: the spill file's compact copy in a checkpoint), and
// addDefaults / fillDefaults (a hashed default: the init rows of ids without a row put into a forward's
// outputs, or into rows read by id; storage/dynamic_default.h), and `widenIds`, which copies any batch id
// array into the BigInt64Array an engine batch is rebuilt in.
// Calls on one map never interleave (a mutex per map).
#include <napi.h>

#include <cstring>
#include <memory>
#include <mutex>

#include "addon/errors.h"
#include "addon/js_args.h"
#include "addon/promise_worker.h"
#include "addon/registry.h"
#include "storage/dynamic_default.h"
#include "storage/dynamic_map.h"
#include "storage/dynamic_spill.h"

namespace embshard::addon {
namespace {

struct GuardedMap {
  explicit GuardedMap(const DynamicSpec& s) : map(s) {}
  DynamicMap map;
  std::unique_ptr<SpillFile> spill;  // when the table spills evicted rows
  uint32_t stateWidth = 0;
  std::mutex mu;
};

// Raw ids from BigInt64Array, BigUint64Array, Int32Array or Uint32Array (in place).
RawIds raw_ids(Napi::Env env, const Napi::Value& v, const char* what) {
  if (!v.IsTypedArray()) throw_error(env, "UNSUPPORTED_DTYPE", std::string(what) + " must be a BigInt64Array, BigUint64Array, Int32Array or Uint32Array");
  auto ta = v.As<Napi::TypedArray>();
  RawIds r;
  r.data = static_cast<uint8_t*>(ta.ArrayBuffer().Data()) + ta.ByteOffset();
  r.n = static_cast<int64_t>(ta.ElementLength());
  switch (ta.TypedArrayType()) {
    case napi_bigint64_array:
    case napi_biguint64_array: r.type = IdType::I64; break;
    case napi_int32_array: r.type = IdType::I32; break;
    case napi_uint32_array: r.type = IdType::U32; break;
    default: throw_error(env, "UNSUPPORTED_DTYPE", std::string(what) + " must be a BigInt64Array, BigUint64Array, Int32Array or Uint32Array");
  }
  return r;
}

Napi::BigInt64Array i64_out(Napi::Env env, const std::vector<int64_t>& v) {
  auto a = Napi::BigInt64Array::New(env, v.size());
  if (!v.empty()) std::memcpy(a.Data(), v.data(), v.size() * 8);
  return a;
}

class TranslateWorker : public PromiseWorker {
 public:
  TranslateWorker(Napi::Env env, std::shared_ptr<GuardedMap> m, RawIds ids, const int32_t* lengths, int64_t F, int64_t B,
                  const uint8_t* mine, int64_t* out)
      : PromiseWorker(env), m_(std::move(m)), ids_(ids), lengths_(lengths), F_(F), B_(B), mine_(mine), out_(out) {}
  void Run() override {
    std::lock_guard<std::mutex> lock(m_->mu);
    // the spilled rows of this table's features' ids are read and verified first (the batch's lengths
    // checked before): a bad record fails the step before the map changes (other tables' ids are not this
    // spill file's business)
    if (m_->spill) {
      const std::vector<int64_t> count = feature_id_counts(lengths_, F_, B_, ids_.n);
      std::vector<uint64_t> ids;
      for (int64_t f = 0, i = 0; f < F_; i += count[static_cast<size_t>(f)], ++f)
        if (mine_[f])
          for (int64_t k = i; k < i + count[static_cast<size_t>(f)]; ++k) ids.push_back(ids_.at(k));
      m_->spill->stage(ids.data(), ids.size());
    }
    struct Unstage {
      SpillFile* s;
      ~Unstage() {
        if (s) s->unstage();
      }
    } unstage{m_->spill.get()};
    m_->map.translate(ids_, lengths_, F_, B_, mine_, out_, admitted_);
    // admitted ids that were spilled take their row and state back (the others: init, zero state)
    const size_t n = admitted_.ids.size(), D = m_->map.spec().dim, S = m_->stateWidth;
    state_.assign(n * S, 0.0f);
    if (m_->spill)
      for (size_t k = 0; k < n; ++k) m_->spill->take(admitted_.ids[k], admitted_.values.data() + k * D, state_.data() + k * S);
  }
  Napi::Value Result(Napi::Env env) override {
    Napi::Object o = Napi::Object::New(env);
    o.Set("slots", i64_out(env, admitted_.slots));
    auto values = Napi::Float32Array::New(env, admitted_.values.size());
    if (!admitted_.values.empty()) std::memcpy(values.Data(), admitted_.values.data(), admitted_.values.size() * 4);
    o.Set("values", values);
    auto state = Napi::Float32Array::New(env, state_.size());
    if (!state_.empty()) std::memcpy(state.Data(), state_.data(), state_.size() * 4);
    o.Set("state", state);
    o.Set("sinkIds", static_cast<double>(admitted_.sinkIds));
    o.Set("evictedSlots", i64_out(env, admitted_.evictedSlots));
    std::vector<int64_t> ev(admitted_.evictedIds.begin(), admitted_.evictedIds.end());
    o.Set("evictedIds", i64_out(env, ev));
    return o;
  }

 private:
  std::shared_ptr<GuardedMap> m_;
  RawIds ids_;
  const int32_t* lengths_;
  int64_t F_, B_;
  const uint8_t* mine_;
  int64_t* out_;
  Admitted admitted_;
  std::vector<float> state_;
};

class SpillWorker : public PromiseWorker {
 public:
  SpillWorker(Napi::Env env, std::shared_ptr<GuardedMap> m, const uint64_t* ids, size_t n, const float* values, const float* state)
      : PromiseWorker(env), m_(std::move(m)), ids_(ids), n_(n), values_(values), state_(state) {}
  void Run() override {
    std::lock_guard<std::mutex> lock(m_->mu);
    m_->spill->put(ids_, n_, values_, state_);
  }
  Napi::Value Result(Napi::Env env) override { return env.Undefined(); }

 private:
  std::shared_ptr<GuardedMap> m_;
  const uint64_t* ids_;
  size_t n_;
  const float* values_;
  const float* state_;
};

// saveSpill(path): the spill file's compact copy into a checkpoint folder
class SaveSpillWorker : public PromiseWorker {
 public:
  SaveSpillWorker(Napi::Env env, std::shared_ptr<GuardedMap> m, std::string path) : PromiseWorker(env), m_(std::move(m)), path_(std::move(path)) {}
  void Run() override {
    std::lock_guard<std::mutex> lock(m_->mu);
    img_ = m_->spill->save_to(path_);
  }
  Napi::Value Result(Napi::Env env) override {
    Napi::Object o = Napi::Object::New(env);
    o.Set("bytes", static_cast<double>(img_.bytes));
    o.Set("records", static_cast<double>(img_.records));
    o.Set("crc32c", static_cast<double>(img_.crc32c));
    return o;
  }

 private:
  std::shared_ptr<GuardedMap> m_;
  std::string path_;
  SpillFile::Image img_;
};

// loadSpill(path, bytes, crc32c): the spill file's records replaced by a checkpoint's verified copy
class LoadSpillWorker : public PromiseWorker {
 public:
  LoadSpillWorker(Napi::Env env, std::shared_ptr<GuardedMap> m, std::string path, uint64_t bytes, uint32_t crc)
      : PromiseWorker(env), m_(std::move(m)), path_(std::move(path)), bytes_(bytes), crc_(crc) {}
  void Run() override {
    std::lock_guard<std::mutex> lock(m_->mu);
    const DynamicMap& map = m_->map;
    m_->spill->load_from(path_, bytes_, crc_, [&](uint64_t id) {
      int64_t slot;
      map.lookup(RawIds{&id, IdType::I64, 1}, &slot);
      return slot != map.sink();
    });
  }

 private:
  std::shared_ptr<GuardedMap> m_;
  std::string path_;
  uint64_t bytes_;
  uint32_t crc_;
};

// One forward's defaults: where they go and what they are read from (the JS arrays are kept alive).
struct DefaultsCall {
  DynamicSpec spec;
  int64_t sink = 0;  // the map's sink slot: ids without a row
  RawIds ids;
  const int64_t* slots = nullptr;
  const int32_t* lengths = nullptr;
  int64_t F = 0, B = 0, pooledDim = 0;
  const float* weights = nullptr;
  std::vector<DefaultTarget> targets;
  float* pooled = nullptr;
  void run() const {
    add_defaults(spec, sink, ids, slots, lengths, F, B, weights, targets.data(), pooled, pooledDim);
  }
};

class DefaultsWorker : public PromiseWorker {
 public:
  DefaultsWorker(Napi::Env env, DefaultsCall call) : PromiseWorker(env), call_(std::move(call)) {}
  void Run() override { call_.run(); }

 private:
  DefaultsCall call_;
};

class DynamicMapWrap : public Napi::ObjectWrap<DynamicMapWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "DynamicMap",
                       {InstanceMethod("translate", &DynamicMapWrap::Translate), InstanceMethod("lookup", &DynamicMapWrap::Lookup),
                        InstanceMethod("heldIds", &DynamicMapWrap::HeldIds), InstanceMethod("stats", &DynamicMapWrap::Stats),
                        InstanceMethod("serialize", &DynamicMapWrap::Serialize),
                        InstanceMethod("deserialize", &DynamicMapWrap::Deserialize), InstanceMethod("spill", &DynamicMapWrap::Spill),
                        InstanceMethod("close", &DynamicMapWrap::Close), InstanceMethod("addDefaults", &DynamicMapWrap::AddDefaults),
                        InstanceMethod("addDefaultsSync", &DynamicMapWrap::AddDefaultsSync),
                        InstanceMethod("fillDefaults", &DynamicMapWrap::FillDefaults),
                        InstanceMethod("saveSpill", &DynamicMapWrap::SaveSpill), InstanceMethod("loadSpill", &DynamicMapWrap::LoadSpill)});
  }

  explicit DynamicMapWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<DynamicMapWrap>(info) {
    Napi::Env env = info.Env();
    guard(env, [&] {
      if (!info[0].IsObject()) throw_error(env, "INVALID_CONFIG", "DynamicMap(spec) expects an object");
      Napi::Object o = info[0].As<Napi::Object>();
      DynamicSpec s;
      s.capacity = static_cast<uint32_t>(int_arg(env, o.Get("capacity"), "capacity", 1, 0x7ffffffe));
      s.minCount = static_cast<uint32_t>(int_arg(env, o.Get("minCount"), "admission.minCount", 1, 0x7fffffff));
      s.candidates = static_cast<uint32_t>(int_arg(env, o.Get("candidates"), "admission.candidates", 0, 0x7ffffffe));
      const std::string ev = string_arg(env, o.Get("eviction"), "eviction");
      if (ev != "lru" && ev != "lfu") throw_error(env, "INVALID_CONFIG", "eviction must be 'lru' or 'lfu'");
      s.eviction = ev == "lfu" ? Eviction::Lfu : Eviction::Lru;
      s.dim = static_cast<uint32_t>(int_arg(env, o.Get("dim"), "dim", 1, 65536));
      s.seed = static_cast<uint64_t>(int_arg(env, o.Get("seed"), "seed"));
      s.table = static_cast<uint64_t>(int_arg(env, o.Get("table"), "table"));
      if (!o.Get("init").IsObject()) throw_error(env, "INVALID_CONFIG", "init must be an object");
      Napi::Object init = o.Get("init").As<Napi::Object>();
      const std::string kind = string_arg(env, init.Get("kind"), "init.kind");
      s.init.kind = kind == "normal" ? InitKind::Normal : kind == "constant" ? InitKind::Constant : InitKind::Uniform;
      s.init.a = static_cast<float>(number_arg(env, init.Get("a"), "init.a", -1e30, 1e30));
      s.init.b = static_cast<float>(number_arg(env, init.Get("b"), "init.b", -1e30, 1e30));
      s.dtype = parse_dtype(string_arg(env, o.Get("dtype"), "dtype").c_str(), "dtype");
      const std::string def = string_arg(env, o.Get("default"), "admission.default");
      if (def != "zero" && def != "hashed") throw_error(env, "INVALID_CONFIG", "admission.default must be 'zero' or 'hashed'");
      s.hashedDefault = def == "hashed";
      auto m = std::make_shared<GuardedMap>(s);
      m->stateWidth = static_cast<uint32_t>(int_arg(env, o.Get("stateWidth"), "stateWidth", 0, 1 << 20));
      if (o.Has("spillPath"))
        m->spill = std::make_unique<SpillFile>(string_arg(env, o.Get("spillPath"), "spill.path"), string_arg(env, o.Get("spillField"), "spillField"),
                                               s.dim, m->stateWidth);
      m_ = std::move(m);
    });
  }

 private:
  // translate(ids, lengths, batchSize, mine: Uint8Array [F], out: BigInt64Array [n]) → Promise<{ slots, values, sinkIds }>
  Napi::Value Translate(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guard(env, [&]() -> Napi::Value {
      RawIds ids = raw_ids(env, info[0], "batch.ids");
      const int64_t B = int_arg(env, info[2], "batchSize", 1);
      if (!info[3].IsTypedArray()) throw_error(env, "INVALID_ARGUMENT", "mine must be a Uint8Array");
      const int64_t F = static_cast<int64_t>(info[3].As<Napi::TypedArray>().ElementLength());
      const auto* lengths = typed_array<int32_t>(env, info[1], napi_int32_array, "batch.lengths", F * B);
      if (static_cast<int64_t>(info[1].As<Napi::TypedArray>().ElementLength()) != F * B)
        throw_error(env, "LENGTH_MISMATCH", "batch.lengths must hold features × batchSize entries");
      const auto* mine = typed_array<uint8_t>(env, info[3], napi_uint8_array, "mine", F);
      auto* out = typed_array<int64_t>(env, info[4], napi_bigint64_array, "out", ids.n);
      auto* w = new TranslateWorker(env, m_, ids, lengths, F, B, mine, out);
      for (int i = 0; i < 5; ++i) w->Keep(info[i]);
      return w->Start();
    });
  }

  // spill(ids: BigInt64Array [n], values: Float32Array [n × dim], state: Float32Array [n × stateWidth]) → Promise
  Napi::Value Spill(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guard(env, [&]() -> Napi::Value {
      if (!m_->spill) throw_error(env, "INVALID_ARGUMENT", "this dynamic table has no spill file");
      if (!info[0].IsTypedArray()) throw_error(env, "INVALID_ARGUMENT", "ids must be a BigInt64Array");
      const int64_t n = static_cast<int64_t>(info[0].As<Napi::TypedArray>().ElementLength());
      const auto* ids = typed_array<int64_t>(env, info[0], napi_bigint64_array, "ids", n);
      const auto* values = typed_array<float>(env, info[1], napi_float32_array, "values", n * m_->map.spec().dim);
      const auto* state = m_->stateWidth > 0 ? typed_array<float>(env, info[2], napi_float32_array, "state", n * m_->stateWidth) : nullptr;
      auto* w = new SpillWorker(env, m_, reinterpret_cast<const uint64_t*>(ids), static_cast<size_t>(n), values, state);
      for (int i = 0; i < 3; ++i) w->Keep(info[i]);
      return w->Start();
    });
  }

  // addDefaults(ids, slots, lengths, batchSize, columns: Int32Array [F], mean: Uint8Array [F],
  // sequences: (Float32Array | null)[F], weights: Float32Array | null, pooled: Float32Array, pooledDim)
  // → Promise: the hashed defaults of the positions whose slot is the sink added to the outputs
  Napi::Value AddDefaults(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guard(env, [&]() -> Napi::Value {
      auto* w = new DefaultsWorker(env, defaults_call(info));
      for (size_t i = 0; i < info.Length(); ++i) w->Keep(info[i]);
      return w->Start();
    });
  }

  Napi::Value AddDefaultsSync(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guard(env, [&]() -> Napi::Value {
      defaults_call(info).run();
      return env.Undefined();
    });
  }

  DefaultsCall defaults_call(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!m_->map.spec().hashedDefault) throw_error(env, "INVALID_ARGUMENT", "this dynamic table's default is zero");
    DefaultsCall c;
    c.spec = m_->map.spec();
    c.sink = m_->map.sink();
    c.ids = raw_ids(env, info[0], "batch.ids");
    c.slots = typed_array<int64_t>(env, info[1], napi_bigint64_array, "slots", c.ids.n);
    c.B = int_arg(env, info[3], "batchSize", 1);
    if (!info[4].IsTypedArray() || !info[6].IsArray()) throw_error(env, "INVALID_ARGUMENT", "columns / sequences missing");
    c.F = static_cast<int64_t>(info[4].As<Napi::TypedArray>().ElementLength());
    c.lengths = typed_array<int32_t>(env, info[2], napi_int32_array, "batch.lengths", c.F * c.B);
    const auto* cols = typed_array<int32_t>(env, info[4], napi_int32_array, "columns", c.F);
    const auto* mean = typed_array<uint8_t>(env, info[5], napi_uint8_array, "mean", c.F);
    c.weights = typed_array<float>(env, info[7], napi_float32_array, "batch.weights", c.ids.n, true);
    c.pooledDim = int_arg(env, info[9], "pooledDim");
    c.pooled = typed_array<float>(env, info[8], napi_float32_array, "pooled", c.B * c.pooledDim);
    Napi::Array seqs = info[6].As<Napi::Array>();
    int64_t total = 0;
    for (int64_t k = 0; k < c.F * c.B; ++k) total += c.lengths[k];
    if (total != c.ids.n) throw_error(env, "LENGTH_MISMATCH", "the lengths do not sum to the number of ids");
    c.targets.resize(static_cast<size_t>(c.F));
    for (int64_t f = 0; f < c.F; ++f) {
      DefaultTarget& t = c.targets[f];
      t.column = cols[f];
      t.mean = mean[f] != 0;
      if (t.column >= 0 && t.column + static_cast<int64_t>(c.spec.dim) > c.pooledDim)
        throw_error(env, "INVALID_ARGUMENT", "a pooled column is out of range");
      if (t.column == -1) {
        int64_t len = 0;
        for (int64_t b = 0; b < c.B; ++b) len += c.lengths[f * c.B + b];
        t.sequence = typed_array<float>(env, seqs.Get(static_cast<uint32_t>(f)), napi_float32_array, "sequence values", len * c.spec.dim);
      }
    }
    return c;
  }

  // fillDefaults(ids: BigInt64Array, slots: BigInt64Array, out: Float32Array [n × dim]): rows of ids
  // without a row get their default
  Napi::Value FillDefaults(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guard(env, [&]() -> Napi::Value {
      RawIds ids = raw_ids(env, info[0], "ids");
      const auto* slots = typed_array<int64_t>(env, info[1], napi_bigint64_array, "slots", ids.n);
      auto* out = typed_array<float>(env, info[2], napi_float32_array, "out", ids.n * m_->map.spec().dim);
      if (m_->map.spec().hashedDefault) fill_defaults(m_->map.spec(), m_->map.sink(), ids, slots, out);
      return env.Undefined();
    });
  }

  // saveSpill(path) → Promise<{ bytes, records, crc32c }>
  Napi::Value SaveSpill(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guard(env, [&]() -> Napi::Value {
      if (!m_->spill) throw_error(env, "INVALID_ARGUMENT", "this dynamic table has no spill file");
      return (new SaveSpillWorker(env, m_, string_arg(env, info[0], "path")))->Start();
    });
  }

  // loadSpill(path, bytes, crc32c) → Promise (after deserialize: the copy's ids must not be held)
  Napi::Value LoadSpill(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guard(env, [&]() -> Napi::Value {
      if (!m_->spill) throw_error(env, "INVALID_ARGUMENT", "this dynamic table has no spill file");
      const std::string path = string_arg(env, info[0], "path");
      const auto bytes = static_cast<uint64_t>(int_arg(env, info[1], "bytes"));
      const auto crc = static_cast<uint32_t>(int_arg(env, info[2], "crc32c", 0, 0xffffffffll));
      return (new LoadSpillWorker(env, m_, path, bytes, crc))->Start();
    });
  }

  // close(): the spill file is closed (its lock released); the map keeps working without one
  Napi::Value Close(const Napi::CallbackInfo& info) {
    std::lock_guard<std::mutex> lock(m_->mu);
    m_->spill.reset();
    return info.Env().Undefined();
  }

  // lookup(ids) → BigInt64Array of slots (the sink for ids not held)
  Napi::Value Lookup(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guard(env, [&]() -> Napi::Value {
      RawIds ids = raw_ids(env, info[0], "ids");
      auto out = Napi::BigInt64Array::New(env, static_cast<size_t>(ids.n));
      std::lock_guard<std::mutex> lock(m_->mu);
      m_->map.lookup(ids, out.Data());
      return out;
    });
  }

  // heldIds() → BigInt64Array of the held ids, by slot
  Napi::Value HeldIds(const Napi::CallbackInfo& info) {
    std::lock_guard<std::mutex> lock(m_->mu);
    const auto& ids = m_->map.ids();
    auto out = Napi::BigInt64Array::New(info.Env(), m_->map.size());
    if (m_->map.size() > 0) std::memcpy(out.Data(), ids.data(), m_->map.size() * 8);
    return out;
  }

  Napi::Value Stats(const Napi::CallbackInfo& info) {
    std::lock_guard<std::mutex> lock(m_->mu);
    const DynamicStats& s = m_->map.stats();
    Napi::Object o = Napi::Object::New(info.Env());
    o.Set("hits", static_cast<double>(s.hits));
    o.Set("misses", static_cast<double>(s.misses));
    o.Set("admissions", static_cast<double>(s.admissions));
    o.Set("evictions", static_cast<double>(s.evictions));
    o.Set("rows", static_cast<double>(m_->map.size()));
    o.Set("candidates", static_cast<double>(m_->map.candidates()));
    if (m_->spill) o.Set("spilled", static_cast<double>(m_->spill->size()));
    return o;
  }

  Napi::Value Serialize(const Napi::CallbackInfo& info) {
    std::lock_guard<std::mutex> lock(m_->mu);
    std::vector<uint8_t> bytes = m_->map.serialize();
    auto out = Napi::Uint8Array::New(info.Env(), bytes.size());
    std::memcpy(out.Data(), bytes.data(), bytes.size());
    return out;
  }

  Napi::Value Deserialize(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return guard(env, [&]() -> Napi::Value {
      Bytes b = typed_bytes(env, info[0], "map bytes");
      std::lock_guard<std::mutex> lock(m_->mu);
      m_->map.deserialize(b.data, static_cast<size_t>(b.size));
      return env.Undefined();
    });
  }

  std::shared_ptr<GuardedMap> m_;
};

// widenIds(ids, out: BigInt64Array) — every id as a 64-bit value
Napi::Value WidenIds(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    RawIds ids = raw_ids(env, info[0], "batch.ids");
    auto* out = typed_array<int64_t>(env, info[1], napi_bigint64_array, "out", ids.n);
    for (int64_t i = 0; i < ids.n; ++i) out[i] = static_cast<int64_t>(ids.at(i));
    return env.Undefined();
  });
}

void Init(Napi::Env env, Napi::Object exports) {
  exports.Set("DynamicMap", DynamicMapWrap::Define(env));
  exports.Set("widenIds", Napi::Function::New(env, WidenIds));
}

Part part("dynamic_map", &Init);

}  // namespace
}  // namespace embshard::addon
