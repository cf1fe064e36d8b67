// js_args.cc — see js_args.h.
#include "addon/js_args.h"

#include <cmath>
#include <cstdio>

#include "addon/errors.h"

namespace embshard::addon {

namespace {

[[noreturn]] void bad(Napi::Env env, const std::string& code, const std::string& msg) { throw_error(env, code, msg); }

double num(Napi::Env env, const Napi::Object& o, const char* key, const std::string& where) {
  Napi::Value v = o.Get(key);
  if (!v.IsNumber()) bad(env, "INVALID_CONFIG", where + "." + key + " must be a number");
  return v.As<Napi::Number>().DoubleValue();
}

std::string str(Napi::Env env, const Napi::Object& o, const char* key, const std::string& where) {
  Napi::Value v = o.Get(key);
  if (!v.IsString()) bad(env, "INVALID_CONFIG", where + "." + key + " must be a string");
  return v.As<Napi::String>().Utf8Value();
}

bool flag(const Napi::Object& o, const char* key) {
  Napi::Value v = o.Get(key);
  return v.IsBoolean() && v.As<Napi::Boolean>().Value();
}

}  // namespace

CollectionSpec parse_collection(Napi::Env env, const Napi::Object& cfg, bool* initialize) {
  CollectionSpec spec;
  Napi::Value tv = cfg.Get("tables");
  if (!tv.IsArray()) bad(env, "INVALID_CONFIG", "tables must be an array");
  Napi::Array tables = tv.As<Napi::Array>();
  for (uint32_t i = 0; i < tables.Length(); ++i) {
    std::string where = "tables[" + std::to_string(i) + "]";
    if (!tables.Get(i).IsObject()) bad(env, "INVALID_CONFIG", where + " must be an object");
    Napi::Object t = tables.Get(i).As<Napi::Object>();
    TableSpec ts;
    ts.name = str(env, t, "name", where);
    double rows = num(env, t, "rows", where), dim = num(env, t, "dim", where);
    if (!(rows >= 1 && rows <= 1099511627776.0 && std::floor(rows) == rows))
      bad(env, "INVALID_SIZE", "table '" + ts.name + "': rows must be an integer in [1, 2^40]");
    if (!(dim >= 1 && dim <= 65536 && std::floor(dim) == dim))
      bad(env, "INVALID_SIZE", "table '" + ts.name + "': dim must be an integer in [1, 65536]");
    ts.rows = static_cast<uint64_t>(rows);
    ts.dim = static_cast<uint32_t>(dim);
    std::string dt = str(env, t, "dtype", where);
    if (dt == "fp32") ts.dtype = DType::F32;
    else if (dt == "fp16") ts.dtype = DType::F16;
    else if (dt == "bf16") ts.dtype = DType::BF16;
    else bad(env, "UNSUPPORTED_DTYPE", "table '" + ts.name + "': dtype '" + dt + "' is not fp32 | fp16 | bf16");
    std::string pol = str(env, t, "idPolicy", where);
    if (pol == "error") ts.idPolicy = IdPolicy::Error;
    else if (pol == "modulo") ts.idPolicy = IdPolicy::Modulo;
    else bad(env, "INVALID_CONFIG", "table '" + ts.name + "': idPolicy must be 'error' or 'modulo'");
    if (!t.Get("init").IsObject()) bad(env, "INVALID_CONFIG", where + ".init must be an object");
    Napi::Object init = t.Get("init").As<Napi::Object>();
    std::string kind = str(env, init, "kind", where + ".init");
    if (kind == "uniform") ts.init.kind = InitKind::Uniform;
    else if (kind == "normal") ts.init.kind = InitKind::Normal;
    else if (kind == "constant") ts.init.kind = InitKind::Constant;
    else bad(env, "INVALID_CONFIG", "table '" + ts.name + "': init kind must be uniform | normal | constant");
    ts.init.a = static_cast<float>(num(env, init, "a", where + ".init"));
    ts.init.b = static_cast<float>(num(env, init, "b", where + ".init"));
    spec.tables.push_back(ts);
  }
  Napi::Value fv = cfg.Get("features");
  if (!fv.IsArray()) bad(env, "INVALID_CONFIG", "features must be an array");
  Napi::Array features = fv.As<Napi::Array>();
  for (uint32_t i = 0; i < features.Length(); ++i) {
    std::string where = "features[" + std::to_string(i) + "]";
    if (!features.Get(i).IsObject()) bad(env, "INVALID_CONFIG", where + " must be an object");
    Napi::Object f = features.Get(i).As<Napi::Object>();
    FeatureSpec fs;
    fs.name = str(env, f, "name", where);
    double t = num(env, f, "table", where);
    if (!(t >= 0 && t < static_cast<double>(spec.tables.size()) && std::floor(t) == t))
      bad(env, "INVALID_CONFIG", "feature '" + fs.name + "' names no table");
    fs.table = static_cast<uint32_t>(t);
    std::string p = str(env, f, "pooling", where);
    if (p == "sum") fs.pooling = Pooling::Sum;
    else if (p == "mean") fs.pooling = Pooling::Mean;
    else if (p == "none") fs.pooling = Pooling::None;
    else bad(env, "INVALID_CONFIG", "feature '" + fs.name + "': pooling must be sum | mean | none");
    spec.features.push_back(fs);
  }
  if (!cfg.Get("optimizer").IsObject()) bad(env, "INVALID_CONFIG", "optimizer must be an object");
  Napi::Object o = cfg.Get("optimizer").As<Napi::Object>();
  std::string type = str(env, o, "type", "optimizer");
  OptimizerConfig& oc = spec.optimizer;
  if (type == "sgd") oc.type = OptType::SGD;
  else if (type == "adagrad") oc.type = OptType::Adagrad;
  else if (type == "rowwise_adagrad") oc.type = OptType::RowwiseAdagrad;
  else if (type == "adam") oc.type = OptType::Adam;
  else bad(env, "UNSUPPORTED_OPTIMIZER", "optimizer '" + type + "' is not sgd | adagrad | rowwise_adagrad | adam");
  oc.lr = static_cast<float>(num(env, o, "lr", "optimizer"));
  oc.eps = static_cast<float>(num(env, o, "eps", "optimizer"));
  oc.beta1 = static_cast<float>(num(env, o, "beta1", "optimizer"));
  oc.beta2 = static_cast<float>(num(env, o, "beta2", "optimizer"));
  oc.weightDecay = static_cast<float>(num(env, o, "weightDecay", "optimizer"));
  oc.stochasticRounding = flag(o, "stochasticRounding");
  std::string nf = str(env, o, "nonFinite", "optimizer");
  if (nf == "error") oc.nonFinite = NonFinite::Error;
  else if (nf == "skip") oc.nonFinite = NonFinite::Skip;
  else bad(env, "INVALID_CONFIG", "optimizer.nonFinite must be 'error' or 'skip'");
  double seed = num(env, cfg, "seed", "config");
  spec.seed = static_cast<uint64_t>(seed < 0 ? 0 : seed);
  *initialize = flag(cfg, "initialize");
  return spec;
}

BatchView parse_batch(Napi::Env env, const Napi::Value& v) {
  if (!v.IsObject()) bad(env, "INVALID_ARGUMENT", "batch must be an object");
  Napi::Object o = v.As<Napi::Object>();
  BatchView bv;
  Napi::Value bs = o.Get("batchSize");
  if (!bs.IsNumber()) bad(env, "INVALID_ARGUMENT", "batch.batchSize must be a number");
  bv.batchSize = bs.As<Napi::Number>().Int64Value();
  Napi::Value fv = o.Get("features");
  if (!fv.IsArray()) bad(env, "INVALID_ARGUMENT", "batch.features must be an array of strings");
  Napi::Array fa = fv.As<Napi::Array>();
  for (uint32_t i = 0; i < fa.Length(); ++i) {
    if (!fa.Get(i).IsString()) bad(env, "INVALID_ARGUMENT", "batch.features must be an array of strings");
    bv.features.push_back(fa.Get(i).As<Napi::String>().Utf8Value());
  }
  Napi::Value lv = o.Get("lengths");
  if (!lv.IsTypedArray() || lv.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array)
    bad(env, "INVALID_ARGUMENT", "batch.lengths must be an Int32Array");
  Napi::Int32Array la = lv.As<Napi::Int32Array>();
  bv.lengths = la.Data();
  bv.numLengths = static_cast<int64_t>(la.ElementLength());
  Napi::Value iv = o.Get("ids");
  if (!iv.IsTypedArray()) bad(env, "UNSUPPORTED_DTYPE", "batch.ids must be a BigInt64Array, Int32Array or Uint32Array");
  Napi::TypedArray ia = iv.As<Napi::TypedArray>();
  switch (ia.TypedArrayType()) {
    case napi_bigint64_array: bv.idType = IdType::I64; bv.ids = iv.As<Napi::BigInt64Array>().Data(); break;
    case napi_int32_array: bv.idType = IdType::I32; bv.ids = iv.As<Napi::Int32Array>().Data(); break;
    case napi_uint32_array: bv.idType = IdType::U32; bv.ids = iv.As<Napi::Uint32Array>().Data(); break;
    default: bad(env, "UNSUPPORTED_DTYPE", "batch.ids must be a BigInt64Array, Int32Array or Uint32Array");
  }
  bv.numIds = static_cast<int64_t>(ia.ElementLength());
  Napi::Value wv = o.Get("weights");
  if (!wv.IsUndefined() && !wv.IsNull()) {
    size_t n;
    bv.weights = float_array(env, wv, "batch.weights", false, &n);
    bv.numWeights = static_cast<int64_t>(n);
  }
  return bv;
}

const float* float_array(Napi::Env env, const Napi::Value& v, const char* what, bool allowNull, size_t* size) {
  if (allowNull && (v.IsNull() || v.IsUndefined())) {
    *size = 0;
    return nullptr;
  }
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_float32_array)
    bad(env, "INVALID_ARGUMENT", std::string(what) + " must be a Float32Array");
  Napi::Float32Array a = v.As<Napi::Float32Array>();
  *size = a.ElementLength();
  return a.Data();
}

float* float_array_mut(Napi::Env env, const Napi::Value& v, const char* what, size_t* size) {
  return const_cast<float*>(float_array(env, v, what, false, size));
}

GradientView parse_gradients(Napi::Env env, const Napi::Value& pooled, const Napi::Value& seq) {
  GradientView g;
  g.pooled = float_array(env, pooled, "the pooled gradient", true, &g.pooledSize);
  if (!seq.IsArray()) bad(env, "INVALID_ARGUMENT", "sequence gradients must be an array");
  Napi::Array a = seq.As<Napi::Array>();
  for (uint32_t i = 0; i < a.Length(); ++i) {
    size_t n;
    g.seq.push_back(float_array(env, a.Get(i), "a sequence gradient", true, &n));
    g.seqSize.push_back(n);
  }
  return g;
}

std::string string_arg(Napi::Env env, const Napi::Value& v, const char* what) {
  if (!v.IsString()) bad(env, "INVALID_ARGUMENT", std::string(what) + " must be a string");
  return v.As<Napi::String>().Utf8Value();
}

double number_arg(Napi::Env env, const Napi::Value& v, const char* what, double lo, double hi) {
  const double x = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : std::nan("");
  if (!(x >= lo && x <= hi)) {
    char msg[160];
    std::snprintf(msg, sizeof msg, "%s must be a number in [%g, %g]", what, lo, hi);
    bad(env, "INVALID_ARGUMENT", msg);
  }
  return x;
}

uint32_t index_arg(Napi::Env env, const Napi::Value& v, const char* what, size_t count, const char* code) {
  const double x = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : -1;
  if (!(x >= 0 && x < static_cast<double>(count) && std::floor(x) == x))
    bad(env, code, std::string(what) + " must be an index in [0, " + std::to_string(count) + ")");
  return static_cast<uint32_t>(x);
}

const int64_t* i64_array(Napi::Env env, const Napi::Value& v, const char* what, size_t* size) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_bigint64_array)
    bad(env, "INVALID_ARGUMENT", std::string(what) + " must be a BigInt64Array");
  Napi::BigInt64Array a = v.As<Napi::BigInt64Array>();
  *size = a.ElementLength();
  return a.Data();
}

Bytes typed_bytes(Napi::Env env, const Napi::Value& v, const char* what) {
  if (!v.IsTypedArray()) bad(env, "INVALID_ARGUMENT", std::string(what) + " must be a typed array");
  auto ta = v.As<Napi::TypedArray>();
  Bytes b;
  b.data = static_cast<uint8_t*>(ta.ArrayBuffer().Data()) + ta.ByteOffset();
  b.size = static_cast<int64_t>(ta.ByteLength());
  return b;
}

void* typed_elems(Napi::Env env, const Napi::Value& v, napi_typedarray_type type, const char* what, int64_t need,
                  bool nullable) {
  if (nullable && (v.IsNull() || v.IsUndefined())) return nullptr;
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != type)
    bad(env, "INVALID_ARGUMENT", std::string(what) + " has the wrong array type");
  auto ta = v.As<Napi::TypedArray>();
  if (static_cast<int64_t>(ta.ElementLength()) < need)
    bad(env, "LENGTH_MISMATCH",
        format("%s holds %zu elements; %lld are needed", what, ta.ElementLength(), static_cast<long long>(need)));
  // an empty array may have no memory at all: it is still given, so it must not read as null (absent)
  alignas(64) static uint8_t noElements[64];
  uint8_t* data = static_cast<uint8_t*>(ta.ArrayBuffer().Data());
  return data ? data + ta.ByteOffset() : noElements;
}

int64_t int_arg(Napi::Env env, const Napi::Value& v, const char* what, int64_t lo, int64_t hi) {
  if (!v.IsNumber()) bad(env, "INVALID_ARGUMENT", std::string(what) + " must be a number");
  double x = v.As<Napi::Number>().DoubleValue();
  if (x != std::floor(x) || x < static_cast<double>(lo) || x > static_cast<double>(hi))
    bad(env, "INVALID_ARGUMENT",
        format("%s must be an integer in [%lld, %lld] (got %g)", what, static_cast<long long>(lo), static_cast<long long>(hi), x));
  return static_cast<int64_t>(x);
}

double timeout_arg(Napi::Env env, const Napi::Value& v, const char* what) {
  if (!v.IsNumber()) bad(env, "INVALID_ARGUMENT", std::string(what) + ": timeoutMs must be a number");
  double t = v.As<Napi::Number>().DoubleValue();
  if (!(t > 0) || !std::isfinite(t))
    bad(env, "INVALID_ARGUMENT", format("%s: timeoutMs must be a positive finite number (got %g)", what, t));
  return t;
}

}  // namespace embshard::addon
