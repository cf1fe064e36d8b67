// dense_js_readers.h — readers of single JS values for the dense bindings (dense_*model.cc, dense_*ops.cc): each
// one checks the JS value and throws EmbshardError naming the field before anything is touched.
#pragma once
#include <napi.h>

#include <cfloat>
#include <cmath>
#include <string>
#include <vector>

#include "addon/errors.h"
#include "addon/js_args.h"
#include "dense/optimizer.h"
#include "dense/precision.h"

namespace embshard::addon::dense_js_readers {

inline int64_t integer(Napi::Env env, Napi::Value v, const std::string& field, int64_t lo, int64_t hi) {
  if (!v.IsNumber()) throw_error(env, "INVALID_ARGUMENT", field + " must be a number");
  double d = v.As<Napi::Number>().DoubleValue();
  if (!std::isfinite(d) || d != std::floor(d) || d < static_cast<double>(lo) || d > static_cast<double>(hi))
    throw_error(env, "INVALID_SIZE", field + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "] (got " + v.ToString().Utf8Value() + ")");
  return static_cast<int64_t>(d);
}

// A number the dense code uses as a float: finite in float32 too (beyond ±FLT_MAX the cast gives ±Inf).
inline double number(Napi::Env env, Napi::Value v, const std::string& field) {
  if (!v.IsNumber()) throw_error(env, "INVALID_ARGUMENT", field + " must be a number");
  double d = v.As<Napi::Number>().DoubleValue();
  if (!std::isfinite(d) || std::fabs(d) > static_cast<double>(FLT_MAX))
    throw_error(env, "INVALID_ARGUMENT", field + " must be finite in float32 (|x| <= 3.4028235e38; got " + v.ToString().Utf8Value() + ")");
  return d;
}

inline double number_or(Napi::Env env, Napi::Object o, const char* key, double dflt, const std::string& field) {
  Napi::Value v = o.Get(key);
  return v.IsUndefined() ? dflt : number(env, v, field);
}

inline std::vector<int64_t> widths(Napi::Env env, Napi::Value v, const std::string& field) {
  if (!v.IsArray()) throw_error(env, "INVALID_CONFIG", field + " must be an array of layer widths");
  Napi::Array a = v.As<Napi::Array>();
  std::vector<int64_t> out;
  for (uint32_t i = 0; i < a.Length(); ++i)
    out.push_back(integer(env, a.Get(i), field + "[" + std::to_string(i) + "]", 1, 1 << 20));
  return out;
}

// A Float32Array of exactly `n` elements (n < 0: any length), as the JS object (bindings keep it alive or return it).
inline Napi::Float32Array f32(Napi::Env env, Napi::Value v, const std::string& field, int64_t n) {
  size_t len = 0;
  float_array(env, v, field.c_str(), false, &len);  // the type check every binding shares (js_args.h)
  if (n >= 0 && static_cast<int64_t>(len) != n)
    throw_error(env, "LENGTH_MISMATCH", field + " has " + std::to_string(len) + " elements; expected " + std::to_string(n));
  return v.As<Napi::Float32Array>();
}

// 'fp32' | 'bf16'; undefined → fp32.
inline dense::Precision precision(Napi::Env env, Napi::Value v, const std::string& field) {
  if (v.IsUndefined()) return dense::Precision::FP32;
  if (!v.IsString()) throw_error(env, "INVALID_CONFIG", field + " must be 'fp32' | 'bf16'");
  std::string s = v.As<Napi::String>().Utf8Value();
  if (s == "fp32") return dense::Precision::FP32;
  if (s == "bf16") return dense::Precision::BF16;
  throw_error(env, "INVALID_CONFIG", field + " must be 'fp32' | 'bf16' (got '" + s + "')");
}

// The optimizer fields { type, lr, eps?, beta1?, beta2?, weightDecay? } of `o` (defaults 1e-8, 0.9, 0.999,
// 0); errors name the field as prefix + key.
inline dense::DenseOptConfig opt_config(Napi::Env env, Napi::Object o, const std::string& prefix) {
  dense::DenseOptConfig c;
  std::string type = o.Get("type").IsString() ? o.Get("type").As<Napi::String>().Utf8Value() : "";
  guard(env, [&] { c.type = dense::parse_dense_opt(type); });
  c.lr = static_cast<float>(number(env, o.Get("lr"), prefix + "lr"));
  c.eps = static_cast<float>(number_or(env, o, "eps", 1e-8, prefix + "eps"));
  c.beta1 = static_cast<float>(number_or(env, o, "beta1", 0.9, prefix + "beta1"));
  c.beta2 = static_cast<float>(number_or(env, o, "beta2", 0.999, prefix + "beta2"));
  c.weightDecay = static_cast<float>(number_or(env, o, "weightDecay", 0.0, prefix + "weightDecay"));
  return c;
}

}  // namespace embshard::addon::dense_js_readers
