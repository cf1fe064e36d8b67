// synthetic_ops.cc — binding of the synthetic source's batch generator (native/data/synthetic_batch.h):
//   synth.batch(spec: Float64Array, first, batchSize) -> { lengths, ids, dense, labels, planted }
// synchronous (the source runs on a worker thread in the CLI). The spec is packed by lib/data/synthetic.ts
// (SyntheticGenerator's packSpec): a header, 12 values per feature, the dense coefficients, means and log q, and the log1p table.
#include "addon/errors.h"
#include "addon/js_args.h"
#include "addon/registry.h"
#include "data/synthetic_batch.h"

namespace embshard::addon {
namespace {

constexpr int64_t kHeader = 12, kPerFeature = 12;

[[noreturn]] void bad(Napi::Env env, const char* msg) { throw_error(env, "INVALID_ARGUMENT", msg); }

uint32_t key_at(Napi::Env env, double v) {
  if (!(v >= 0 && v <= 4294967295.0) || v != static_cast<double>(static_cast<uint32_t>(v))) bad(env, "synth.batch: a key of the spec is not a 32-bit word");
  return static_cast<uint32_t>(v);
}

int64_t int_at(Napi::Env env, double v, int64_t lo, const char* what) {
  if (!(v >= static_cast<double>(lo) && v <= 9007199254740991.0) || v != static_cast<double>(static_cast<int64_t>(v))) bad(env, what);
  return static_cast<int64_t>(v);
}

data::SynthSpec parse_spec(Napi::Env env, const Napi::Value& v) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_float64_array) bad(env, "synth.batch: spec must be a Float64Array");
  auto arr = v.As<Napi::Float64Array>();
  const double* s = arr.Data();
  const int64_t len = static_cast<int64_t>(arr.ElementLength());
  if (len < kHeader) bad(env, "synth.batch: spec is too short");
  const int64_t F = int_at(env, s[0], 1, "synth.batch: spec feature count"), D = int_at(env, s[1], 0, "synth.batch: spec dense count"),
                L = int_at(env, s[2], 0, "synth.batch: spec log1p table length");
  if (len != kHeader + F * kPerFeature + 3 * D + L) bad(env, "synth.batch: spec length does not match its counts");
  data::SynthSpec o;
  o.fixedLengths = s[3] != 0;
  o.plantedKey = key_at(env, s[4]);
  o.logitOffset = s[5];
  o.denseKey = key_at(env, s[6]);
  o.labelKey = key_at(env, s[7]);
  o.concurrent = int_at(env, s[8], 0, "synth.batch: spec sessions.concurrent");
  o.window = int_at(env, s[9], 0, "synth.batch: spec session window");
  if (o.concurrent > 0 && o.window < 1) bad(env, "synth.batch: spec session window must be positive");
  o.slotKey = key_at(env, s[10]);
  o.offsetKey = key_at(env, s[11]);
  const double* f = s + kHeader;
  for (int64_t k = 0; k < F; ++k, f += kPerFeature) {
    data::SynthFeature p{};
    p.key = key_at(env, f[0]);
    p.hot = static_cast<int32_t>(int_at(env, f[1], 1, "synth.batch: spec hotness"));
    p.alphaOne = f[2] != 0;
    p.span = f[3];
    p.inv = f[4];
    p.n = int_at(env, f[5], 1, "synth.batch: spec cardinality");
    p.a = int_at(env, f[6], 1, "synth.batch: spec scatter factor");
    p.c = int_at(env, f[7], 0, "synth.batch: spec scatter offset");
    p.rows = int_at(env, f[8], 1, "synth.batch: spec table rows");
    if (p.rows > 2147483647 || p.c >= p.n) bad(env, "synth.batch: spec rows or scatter offset out of range");
    p.coef = f[9];
    p.session = f[10] != 0;
    p.sessionKey = key_at(env, f[11]);
    o.features.push_back(p);
  }
  o.denseCoef.assign(f, f + D);
  o.denseMean.assign(f + D, f + 2 * D);
  o.logQ.assign(f + 2 * D, f + 3 * D);
  o.log1pOf.assign(f + 3 * D, f + 3 * D + L);
  return o;
}

Napi::Value Batch(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    const data::SynthSpec spec = parse_spec(env, info[0]);
    const int64_t first = int_arg(env, info[1], "synth.batch: first");
    const int64_t B = int_arg(env, info[2], "synth.batch: batchSize", 1, int64_t(1) << 31);
    if (first + B > (int64_t(1) << 53) - 1) bad(env, "synth.batch: the batch is past the last addressable sample");
    const int64_t F = static_cast<int64_t>(spec.features.size()), D = static_cast<int64_t>(spec.logQ.size());
    Napi::Int32Array lengths = Napi::Int32Array::New(env, static_cast<size_t>(F * B));
    std::vector<uint32_t> keys(static_cast<size_t>(F * B));
    const int64_t total = data::synth_lengths(spec, first, B, lengths.Data(), keys.data());
    Napi::Int32Array ids = Napi::Int32Array::New(env, static_cast<size_t>(total));
    Napi::Float32Array dense = Napi::Float32Array::New(env, static_cast<size_t>(B * D));
    Napi::Float32Array labels = Napi::Float32Array::New(env, static_cast<size_t>(B));
    Napi::Float32Array planted = Napi::Float32Array::New(env, static_cast<size_t>(B));
    data::synth_fill(spec, first, B, lengths.Data(), keys.data(), ids.Data(), dense.Data(), labels.Data(), planted.Data());
    Napi::Object out = Napi::Object::New(env);
    out.Set("lengths", lengths);
    out.Set("ids", ids);
    out.Set("dense", dense);
    out.Set("labels", labels);
    out.Set("planted", planted);
    return out;
  });
}

void Init(Napi::Env env, Napi::Object exports) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("batch", Napi::Function::New(env, Batch, "batch"));
  exports.Set("synth", o);
}

Part part("synthetic_ops", &Init);

}  // namespace
}  // namespace embshard::addon
