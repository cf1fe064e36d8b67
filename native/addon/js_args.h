// js_args.h — reading engine configs and batches from JS values: typed arrays are taken zero-copy
// (their memory is used in place; callers Keep() them alive for async calls).
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

}  // namespace embshard::addon
