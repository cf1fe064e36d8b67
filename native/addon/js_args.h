// js_args.h — reading N-API arguments: engine configs, batches, gradients, typed arrays (taken zero-copy:
// their memory is used in place; callers Keep() them alive for async calls), numbers, integers, timeouts and
// strings. Every reader throws EmbshardError INVALID_ARGUMENT (or the code named) naming `what`.
#pragma once
#include <napi.h>

#include <string>

#include "core/batch.h"
#include "core/gradients.h"
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

// The pooled gradient (Float32Array or null) and one sequence-gradient slot per feature (an array of
// Float32Array or null).
GradientView parse_gradients(Napi::Env env, const Napi::Value& pooled, const Napi::Value& seq);

// A string argument.
std::string string_arg(Napi::Env env, const Napi::Value& v, const char* what);
// A finite number in [lo, hi].
double number_arg(Napi::Env env, const Napi::Value& v, const char* what, double lo, double hi);
// An integer index in [0, count), else `code`.
uint32_t index_arg(Napi::Env env, const Napi::Value& v, const char* what, size_t count, const char* code);

}  // namespace embshard::addon
