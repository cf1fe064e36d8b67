// js_args.h — reading N-API arguments: engine configs and batches, typed arrays (taken zero-copy: their
// memory is used in place; callers Keep() them alive for async calls), integers and timeouts. Every
// reader throws EmbshardError naming the argument.
#pragma once
#include <napi.h>

#include <string>

#include "core/batch.h"
#include "core/types.h"

namespace embshard::addon {

// {tables, features, optimizer, seed, initialize} → spec (+ initialize flag). Throws EmbshardError.
CollectionSpec parse_collection(Napi::Env env, const Napi::Object& cfg, bool* initialize);

// {batchSize, features, lengths, ids, weights?} → a view over the JS memory.
BatchView parse_batch(Napi::Env env, const Napi::Value& v);

// A Float32Array argument (or null/undefined → nullptr when allowNull); size in elements.
const float* float_array(Napi::Env env, const Napi::Value& v, const char* what, bool allowNull, size_t* size);
float* float_array_mut(Napi::Env env, const Napi::Value& v, const char* what, size_t* size);
// A BigInt64Array argument.
const int64_t* i64_array(Napi::Env env, const Napi::Value& v, const char* what, size_t* size);

// A typed array's bytes, in place (any element type).
struct Bytes {
  uint8_t* data = nullptr;
  int64_t size = 0;
};
Bytes typed_bytes(Napi::Env env, const Napi::Value& v, const char* what);
// The elements of a typed array of `type` holding at least `need` of them (LENGTH_MISMATCH otherwise);
// null / undefined give nullptr when `nullable`.
void* typed_elems(Napi::Env env, const Napi::Value& v, napi_typedarray_type type, const char* what, int64_t need,
                  bool nullable = false);
template <typename T>
T* typed_array(Napi::Env env, const Napi::Value& v, napi_typedarray_type type, const char* what, int64_t need,
               bool nullable = false) {
  return static_cast<T*>(typed_elems(env, v, type, what, need, nullable));
}
// An integer in [lo, hi].
int64_t int_arg(Napi::Env env, const Napi::Value& v, const char* what, int64_t lo = 0, int64_t hi = int64_t(1) << 53);
// A positive finite number of milliseconds.
double timeout_arg(Napi::Env env, const Napi::Value& v, const char* what);

}  // namespace embshard::addon
