// shard_ops.cc — bindings of the sharded runtime's per-id kernels (native/shard/exchange_ops.h). They are
// single linear passes over one step's ids, called synchronously on typed arrays in place; every size is
// checked against the arrays before any memory is touched (INVALID_ARGUMENT / LENGTH_MISMATCH).
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "addon/errors.h"
#include "addon/js_args.h"
#include "addon/output_pool.h"
#include "addon/registry.h"
#include "core/value_scan.h"
#include "shard/exchange_ops.h"

namespace embshard::addon {
namespace {

using shard::Wire;

[[noreturn]] void bad(Napi::Env env, const std::string& msg) { throw_error(env, "INVALID_ARGUMENT", msg); }

Wire wire_arg(Napi::Env env, const Napi::Value& v) {
  if (!v.IsString()) bad(env, "wire must be 'fp32' | 'fp16' | 'bf16'");
  return shard::parse_wire(v.As<Napi::String>().Utf8Value().c_str());
}

// A wire buffer: Float32Array for fp32, Uint16Array for fp16 / bf16; returns the element pointer at `off`.
void* wire_buf(Napi::Env env, const Napi::Value& v, Wire w, int64_t off, int64_t need, const char* what) {
  if (w == Wire::F32) return typed_array<float>(env, v, napi_float32_array, what, off + need) + off;
  return typed_array<uint16_t>(env, v, napi_uint16_array, what, off + need) + off;
}

// The id array type of a typed array of ids (UNSUPPORTED_DTYPE for any other array).
IdType id_type(Napi::Env env, const Napi::TypedArray& ids) {
  switch (ids.TypedArrayType()) {
    case napi_bigint64_array: return IdType::I64;
    case napi_int32_array: return IdType::I32;
    case napi_uint32_array: return IdType::U32;
    default: throw_error(env, "UNSUPPORTED_DTYPE", "ids must be a BigInt64Array, Int32Array or Uint32Array");
  }
}

const void* elements(const Napi::TypedArray& a) { return static_cast<uint8_t*>(a.ArrayBuffer().Data()) + a.ByteOffset(); }

// A call's output arrays, carved one after another out of one new ArrayBuffer of `bytes` (one allocation
// for all of them): the 8-byte arrays first, so that every array is aligned.
class Carve {
 public:
  Carve(Napi::Env env, size_t bytes) : env_(env), buf_(Napi::ArrayBuffer::New(env, bytes)) {}
  template <typename T>
  Napi::TypedArrayOf<T> take(int64_t n) {
    auto a = Napi::TypedArrayOf<T>::New(env_, static_cast<size_t>(n), buf_, at_);
    at_ += static_cast<size_t>(n) * sizeof(T);
    return a;
  }
  // n floats when `present` (their data in *data), else null (*data left as it is): an optional array
  Napi::Value take_optional(int64_t n, bool present, float** data) {
    if (!present) return env_.Null();
    auto a = take<float>(n);
    *data = a.Data();
    return a;
  }

 private:
  Napi::Env env_;
  Napi::ArrayBuffer buf_;
  size_t at_ = 0;
};

// segment(ids, lengths[B], weights|null, bounds: Float64Array[S+1], what, hashCapacity = 0) -> { ids, pos, weights, lengths[S*B], counts[S] }
Napi::Value Segment(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    if (!info[0].IsTypedArray()) bad(env, "segment: ids must be a typed array");
    auto ids = info[0].As<Napi::TypedArray>();
    const IdType t = id_type(env, ids);
    const int64_t n = static_cast<int64_t>(ids.ElementLength());
    if (!info[1].IsTypedArray()) bad(env, "segment: lengths must be an Int32Array");
    const int64_t B = static_cast<int64_t>(info[1].As<Napi::TypedArray>().ElementLength());
    const int32_t* lengths = typed_array<int32_t>(env, info[1], napi_int32_array, "segment: lengths", B);
    const float* weights = typed_array<float>(env, info[2], napi_float32_array, "segment: weights", n, true);
    if (!info[3].IsTypedArray()) bad(env, "segment: bounds must be a Float64Array");
    const int64_t nb = static_cast<int64_t>(info[3].As<Napi::TypedArray>().ElementLength());
    if (nb < 2) bad(env, "segment: bounds needs at least 2 entries");
    const double* bounds = typed_array<double>(env, info[3], napi_float64_array, "segment: bounds", nb);
    std::string what = info[4].IsString() ? info[4].As<Napi::String>().Utf8Value() : std::string("ids");
    const int64_t hashCapacity = info.Length() > 5 && !info[5].IsUndefined() ? int_arg(env, info[5], "segment: hashCapacity") : 0;
    if (hashCapacity < 0) bad(env, "segment: hashCapacity must be >= 0");
    const int64_t S = nb - 1;
    Carve out(env, static_cast<size_t>(n * 8 + S * 16 + n * 4 + S * B * 4 + (weights ? n * 4 : 0)));
    auto oIds = out.take<int64_t>(n);
    auto counts = out.take<double>(S), begin = out.take<double>(S);
    auto pos = out.take<int32_t>(n), oLengths = out.take<int32_t>(S * B);
    float* w = nullptr;
    Napi::Value oWeights = out.take_optional(n, weights != nullptr, &w);
    shard::segment(elements(ids), t, n, lengths, B, weights, bounds, static_cast<int>(S), [&] { return what; }, hashCapacity, 0,
                   {oIds.Data(), pos.Data(), w, oLengths.Data(), counts.Data(), begin.Data()});
    Napi::Object o = Napi::Object::New(env);
    o.Set("ids", oIds);
    o.Set("pos", pos);
    o.Set("weights", oWeights);
    o.Set("lengths", oLengths);
    o.Set("counts", counts);
    return o;
  });
}

// unique(ids: BigInt64Array, m) -> { values, inverse, counts[m] }
Napi::Value Unique(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    size_t len = 0;
    const int64_t* ids = i64_array(env, info[0], "unique: ids", &len);
    const int64_t n = static_cast<int64_t>(len);
    const int64_t m = int_arg(env, info[1], "unique: m");
    if (m < 1) bad(env, "unique: m must be >= 1");
    thread_local std::vector<shard::IdKey> keys;  // kept between calls
    keys.resize(static_cast<size_t>(n));
    shard::unique_keys(ids, n, m, 0, keys.data());
    const int64_t U = shard::sort_keys(keys.data(), n);
    Carve out(env, static_cast<size_t>(U * 8 + m * 8 + n * 4));
    auto values = out.take<int64_t>(U);
    auto counts = out.take<double>(m);
    auto inverse = out.take<int32_t>(n);
    shard::emit_unique(keys.data(), n, m, values.Data(), inverse.Data(), counts.Data());
    Napi::Object o = Napi::Object::New(env);
    o.Set("values", values);
    o.Set("inverse", inverse);
    o.Set("counts", counts);
    return o;
  });
}

// A number of a route plan's table that must be an integer in [lo, hi].
int64_t plan_int(Napi::Env env, double x, const char* what, int64_t lo, int64_t hi) {
  if (x != std::floor(x) || x < static_cast<double>(lo) || x > static_cast<double>(hi)) bad(env, std::string("routeStep: plan ") + what + " is out of range");
  return static_cast<int64_t>(x);
}

// routeStep(ids, lengths [F × B], weights|null, B, offsets [F × B + 1] (each bag's first id), featureAt: Int32Array
// (each routed feature's index in the batch, table after table), plan: { bounds: Float64Array, tables: Float64Array
// [T × 4: boundsAt, S, hashCapacity, features], uniq: Float64Array [U × 3: table, range, m], what: string[] (each
// routed feature, for errors) }) -> { ids, pos, weights|null, lengths, counts, begin, valuesAt, inverseAt, values,
// inverse, uniqCounts }: one step's routing (shard::route_segments, route_unique_keys, route_unique_emit), two
// allocations in all.
Napi::Value RouteStep(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    if (!info[0].IsTypedArray()) bad(env, "routeStep: ids must be a typed array");
    auto ids = info[0].As<Napi::TypedArray>();
    const IdType t = id_type(env, ids);
    const int64_t nIds = static_cast<int64_t>(ids.ElementLength());
    const int64_t B = int_arg(env, info[3], "routeStep: B", 1);
    if (!info[1].IsTypedArray()) bad(env, "routeStep: lengths must be an Int32Array");
    const int64_t nLengths = static_cast<int64_t>(info[1].As<Napi::TypedArray>().ElementLength());
    if (nLengths % B != 0) bad(env, "routeStep: lengths is not features × B long");
    const int64_t F = nLengths / B;
    const int32_t* lengths = typed_array<int32_t>(env, info[1], napi_int32_array, "routeStep: lengths", nLengths);
    const float* weights = typed_array<float>(env, info[2], napi_float32_array, "routeStep: weights", nIds, true);
    const double* offsets = typed_array<double>(env, info[4], napi_float64_array, "routeStep: offsets", nLengths + 1);
    if (!info[5].IsTypedArray()) bad(env, "routeStep: featureAt must be an Int32Array");
    const int64_t K = static_cast<int64_t>(info[5].As<Napi::TypedArray>().ElementLength());
    const int32_t* featureAt = typed_array<int32_t>(env, info[5], napi_int32_array, "routeStep: featureAt", K);
    if (!info[6].IsObject()) bad(env, "routeStep: plan must be an object");
    Napi::Object plan = info[6].As<Napi::Object>();
    Napi::Value vb = plan.Get("bounds"), vt = plan.Get("tables"), vu = plan.Get("uniq");
    if (!vb.IsTypedArray() || !vt.IsTypedArray() || !vu.IsTypedArray()) bad(env, "routeStep: plan needs bounds, tables and uniq");
    const int64_t nb = static_cast<int64_t>(vb.As<Napi::TypedArray>().ElementLength());
    const int64_t nt = static_cast<int64_t>(vt.As<Napi::TypedArray>().ElementLength()) / 4;
    const int64_t nu = static_cast<int64_t>(vu.As<Napi::TypedArray>().ElementLength()) / 3;
    const double* bounds = typed_array<double>(env, vb, napi_float64_array, "routeStep: plan.bounds", nb);
    const double* tp = typed_array<double>(env, vt, napi_float64_array, "routeStep: plan.tables", nt * 4);
    const double* up = typed_array<double>(env, vu, napi_float64_array, "routeStep: plan.uniq", nu * 3);

    std::vector<shard::RouteTable> tables(static_cast<size_t>(nt));
    int64_t nFeatures = 0, R = 0;
    for (int64_t j = 0; j < nt; ++j) {
      const int64_t at = plan_int(env, tp[j * 4], "boundsAt", 0, nb);
      const int64_t S = plan_int(env, tp[j * 4 + 1], "S", 1, nb - 1 - at);
      tables[j] = {bounds + at, static_cast<int>(S), plan_int(env, tp[j * 4 + 2], "hashCapacity", 0, int64_t{1} << 53),
                   plan_int(env, tp[j * 4 + 3], "features", 0, K)};
      nFeatures += tables[j].nFeatures;
      R += tables[j].nFeatures * S;
    }
    if (nFeatures != K) bad(env, "routeStep: featureAt does not hold one index per feature of the plan's tables");
    std::vector<shard::RouteUniq> uniq(static_cast<size_t>(nu));
    int64_t M = 0;
    for (int64_t u = 0; u < nu; ++u) {
      const int64_t table = plan_int(env, up[u * 3], "uniq table", 0, nt - 1);
      uniq[u] = {table, static_cast<int>(plan_int(env, up[u * 3 + 1], "uniq range", 0, tables[table].S - 1)),
                 plan_int(env, up[u * 3 + 2], "uniq m", 1, int64_t{1} << 31)};
      M += uniq[u].m;
    }
    std::vector<shard::RouteFeature> features(static_cast<size_t>(K));
    const size_t idSize = t == IdType::I64 ? 8 : 4;
    int64_t N = 0;
    for (int64_t k = 0; k < K; ++k) {
      if (featureAt[k] < 0 || featureAt[k] >= F) bad(env, "routeStep: a feature index is outside the batch");
      const int64_t f = featureAt[k];
      const double s = offsets[f * B], e = offsets[(f + 1) * B];
      if (!(s >= 0 && s <= e && e <= static_cast<double>(nIds)) || s != std::floor(s) || e != std::floor(e))
        bad(env, "routeStep: a feature's offsets are outside the ids");
      const int64_t a = static_cast<int64_t>(s), n = static_cast<int64_t>(e) - a;
      features[k] = {static_cast<const uint8_t*>(elements(ids)) + a * idSize, n, lengths + f * B, weights ? weights + a : nullptr};
      N += n;
    }

    Carve seg(env, static_cast<size_t>(N * 8 + R * 16 + (nu + 1) * 16 + N * 4 + R * B * 4 + (weights ? N * 4 : 0)));
    auto oIds = seg.take<int64_t>(N);
    auto counts = seg.take<double>(R), begin = seg.take<double>(R);
    auto valuesAt = seg.take<double>(nu + 1), inverseAt = seg.take<double>(nu + 1);
    auto pos = seg.take<int32_t>(N), oLengths = seg.take<int32_t>(R * B);
    float* w = nullptr;
    Napi::Value oWeights = seg.take_optional(N, weights != nullptr, &w);
    const shard::SegmentDst dst{oIds.Data(), pos.Data(), w, oLengths.Data(), counts.Data(), begin.Data()};
    auto what = [&](int64_t k) -> std::string {
      Napi::Value names = plan.Get("what");
      Napi::Value v = names.IsArray() ? names.As<Napi::Array>().Get(static_cast<uint32_t>(k)) : env.Undefined();
      return v.IsString() ? v.As<Napi::String>().Utf8Value() : format("feature %lld", static_cast<long long>(k));
    };
    shard::route_segments(tables.data(), nt, features.data(), t, B, what, dst);

    thread_local std::vector<shard::IdKey> keys;  // kept between calls
    shard::route_unique_keys(tables.data(), nt, uniq.data(), nu, dst, keys, valuesAt.Data(), inverseAt.Data());
    const auto V = static_cast<int64_t>(valuesAt.Data()[nu]), I = static_cast<int64_t>(inverseAt.Data()[nu]);
    Carve uq(env, static_cast<size_t>(V * 8 + M * 8 + I * 4));
    auto values = uq.take<int64_t>(V);
    auto uniqCounts = uq.take<double>(M);
    auto inverse = uq.take<int32_t>(I);
    shard::route_unique_emit(uniq.data(), nu, keys.data(), valuesAt.Data(), inverseAt.Data(), values.Data(), inverse.Data(), uniqCounts.Data());

    Napi::Object o = Napi::Object::New(env);
    o.Set("ids", oIds);
    o.Set("pos", pos);
    o.Set("weights", oWeights);
    o.Set("lengths", oLengths);
    o.Set("counts", counts);
    o.Set("begin", begin);
    o.Set("valuesAt", valuesAt);
    o.Set("inverseAt", inverseAt);
    o.Set("values", values);
    o.Set("inverse", inverse);
    o.Set("uniqCounts", uniqCounts);
    return o;
  });
}

// divideIds(src: BigInt64Array, m) -> BigInt64Array of src[k] / m
Napi::Value DivideIds(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    size_t len = 0;
    const int64_t* src = i64_array(env, info[0], "divideIds: src", &len);
    const int64_t n = static_cast<int64_t>(len);
    const int64_t m = int_arg(env, info[1], "divideIds: m");
    if (m < 1) bad(env, "divideIds: m must be >= 1");
    auto out = Napi::BigInt64Array::New(env, static_cast<size_t>(n));
    shard::divide_ids(src, n, m, out.Data());
    return out;
  });
}

// pack(src: Float32Array, stride, idx: Int32Array|null, r0, nRows, c0, c1, wire, dst, dstOffset)
Napi::Value Pack(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    const int64_t stride = int_arg(env, info[1], "pack: stride");
    const int64_t r0 = int_arg(env, info[3], "pack: r0"), nRows = int_arg(env, info[4], "pack: nRows");
    const int64_t c0 = int_arg(env, info[5], "pack: c0"), c1 = int_arg(env, info[6], "pack: c1");
    if (c1 < c0 || c1 > stride) bad(env, "pack: columns outside the matrix");
    const int32_t* idx = typed_array<int32_t>(env, info[2], napi_int32_array, "pack: idx", nRows, true);
    if (!info[0].IsTypedArray()) bad(env, "pack: src must be a Float32Array");
    const int64_t srcLen = static_cast<int64_t>(info[0].As<Napi::TypedArray>().ElementLength());
    const float* src = typed_array<float>(env, info[0], napi_float32_array, "pack: src", 0);
    const int64_t srcRows = stride > 0 ? srcLen / stride : 0;
    if (idx) {
      for (int64_t r = 0; r < nRows; ++r)
        if (idx[r] < 0 || idx[r] >= srcRows) bad(env, "pack: a row index is outside the source");
    } else if (nRows > 0 && r0 + nRows > srcRows) {
      throw_error(env, "LENGTH_MISMATCH", "pack: rows outside the source");
    }
    Wire w = wire_arg(env, info[7]);
    void* dst = wire_buf(env, info[8], w, int_arg(env, info[9], "pack: dstOffset"), nRows * (c1 - c0), "pack: dst");
    shard::pack(src, stride, idx, r0, nRows, c0, c1, w, dst);
    return env.Undefined();
  });
}

// unpack(src, srcOffset, wire, nRows, cols, dst: Float32Array, stride, idx|null, r0, col, add)
Napi::Value Unpack(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    Wire w = wire_arg(env, info[2]);
    const int64_t nRows = int_arg(env, info[3], "unpack: nRows"), cols = int_arg(env, info[4], "unpack: cols");
    const void* src = wire_buf(env, info[0], w, int_arg(env, info[1], "unpack: srcOffset"), nRows * cols, "unpack: src");
    const int64_t stride = int_arg(env, info[6], "unpack: stride");
    const int64_t r0 = int_arg(env, info[8], "unpack: r0"), col = int_arg(env, info[9], "unpack: col");
    if (col + cols > stride) bad(env, "unpack: columns outside the destination");
    const int32_t* idx = typed_array<int32_t>(env, info[7], napi_int32_array, "unpack: idx", nRows, true);
    if (!info[5].IsTypedArray()) bad(env, "unpack: dst must be a Float32Array");
    const int64_t dstLen = static_cast<int64_t>(info[5].As<Napi::TypedArray>().ElementLength());
    float* dst = typed_array<float>(env, info[5], napi_float32_array, "unpack: dst", 0);
    const int64_t dstRows = stride > 0 ? dstLen / stride : 0;
    if (idx) {
      for (int64_t r = 0; r < nRows; ++r)
        if (idx[r] < 0 || idx[r] >= dstRows) bad(env, "unpack: a row index is outside the destination");
    } else if (nRows > 0 && r0 + nRows > dstRows) {
      throw_error(env, "LENGTH_MISMATCH", "unpack: rows outside the destination");
    }
    shard::unpack(src, w, nRows, cols, dst, stride, idx, r0, col, info[10].ToBoolean().Value());
    return env.Undefined();
  });
}

int64_t sum_lengths(Napi::Env env, const int32_t* lengths, int64_t B) {
  int64_t n = 0;
  for (int64_t b = 0; b < B; ++b) {
    if (lengths[b] < 0) throw_error(env, "NEGATIVE_LENGTH", "a bag has a negative length");
    n += lengths[b];
  }
  return n;
}

void check_inverse(Napi::Env env, const int32_t* inverse, int64_t n, int64_t rows) {
  for (int64_t i = 0; i < n; ++i)
    if (inverse[i] < 0 || inverse[i] >= rows) bad(env, "an inverse index is outside the unique rows");
}

void check_rows(Napi::Env env, const int32_t* pos, int64_t n, int64_t rows) {
  for (int64_t i = 0; i < n; ++i)
    if (pos[i] < 0 || pos[i] >= rows) bad(env, "a sequence position is outside the output");
}

// poolUnique(rows: Float32Array, dim, inverse, lengths, weights|null, dst, stride, col, seqPos|null)
Napi::Value PoolUnique(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    const int64_t dim = int_arg(env, info[1], "poolUnique: dim");
    if (!info[3].IsTypedArray() || !info[0].IsTypedArray() || !info[5].IsTypedArray()) bad(env, "poolUnique: arrays expected");
    const int64_t B = static_cast<int64_t>(info[3].As<Napi::TypedArray>().ElementLength());
    const int32_t* lengths = typed_array<int32_t>(env, info[3], napi_int32_array, "poolUnique: lengths", B);
    const int64_t n = sum_lengths(env, lengths, B);
    const int32_t* inverse = typed_array<int32_t>(env, info[2], napi_int32_array, "poolUnique: inverse", n);
    const int64_t rowsLen = static_cast<int64_t>(info[0].As<Napi::TypedArray>().ElementLength());
    const float* rows = typed_array<float>(env, info[0], napi_float32_array, "poolUnique: rows", 0);
    check_inverse(env, inverse, n, dim > 0 ? rowsLen / dim : 0);
    const float* weights = typed_array<float>(env, info[4], napi_float32_array, "poolUnique: weights", n, true);
    const int64_t stride = int_arg(env, info[6], "poolUnique: stride"), col = int_arg(env, info[7], "poolUnique: col");
    if (col + dim > stride) bad(env, "poolUnique: columns outside the destination");
    const int32_t* seqPos = typed_array<int32_t>(env, info[8], napi_int32_array, "poolUnique: seqPos", n, true);
    const int64_t dstLen = static_cast<int64_t>(info[5].As<Napi::TypedArray>().ElementLength());
    float* dst = typed_array<float>(env, info[5], napi_float32_array, "poolUnique: dst", 0);
    if (seqPos) check_rows(env, seqPos, n, dstLen / stride);
    else if (B * stride > dstLen) throw_error(env, "LENGTH_MISMATCH", "poolUnique: dst is smaller than B × stride");
    shard::pool_unique(rows, dim, inverse, lengths, B, weights, dst, stride, col, seqPos);
    return env.Undefined();
  });
}

// gradUnique(grad, stride, col, dim, inverse, lengths, weights|null, fullLen|null, mean, seqPos|null, out)
Napi::Value GradUnique(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    const int64_t stride = int_arg(env, info[1], "gradUnique: stride"), col = int_arg(env, info[2], "gradUnique: col");
    const int64_t dim = int_arg(env, info[3], "gradUnique: dim");
    if (col + dim > stride) bad(env, "gradUnique: columns outside the gradient");
    if (!info[5].IsTypedArray() || !info[0].IsTypedArray() || !info[10].IsTypedArray()) bad(env, "gradUnique: arrays expected");
    const int64_t B = static_cast<int64_t>(info[5].As<Napi::TypedArray>().ElementLength());
    const int32_t* lengths = typed_array<int32_t>(env, info[5], napi_int32_array, "gradUnique: lengths", B);
    const int64_t n = sum_lengths(env, lengths, B);
    const int32_t* inverse = typed_array<int32_t>(env, info[4], napi_int32_array, "gradUnique: inverse", n);
    const int64_t outLen = static_cast<int64_t>(info[10].As<Napi::TypedArray>().ElementLength());
    float* out = typed_array<float>(env, info[10], napi_float32_array, "gradUnique: out", 0);
    check_inverse(env, inverse, n, dim > 0 ? outLen / dim : 0);
    const float* weights = typed_array<float>(env, info[6], napi_float32_array, "gradUnique: weights", n, true);
    const int32_t* fullLen = typed_array<int32_t>(env, info[7], napi_int32_array, "gradUnique: fullLen", B, true);
    const bool mean = info[8].ToBoolean().Value();
    if (mean && !fullLen) bad(env, "gradUnique: mean pooling needs the full bag lengths");
    const int32_t* seqPos = typed_array<int32_t>(env, info[9], napi_int32_array, "gradUnique: seqPos", n, true);
    const int64_t gradLen = static_cast<int64_t>(info[0].As<Napi::TypedArray>().ElementLength());
    const float* grad = typed_array<float>(env, info[0], napi_float32_array, "gradUnique: grad", 0);
    if (seqPos) check_rows(env, seqPos, n, gradLen / stride);
    else if (B * stride > gradLen) throw_error(env, "GRAD_SIZE_MISMATCH", "gradUnique: the gradient is smaller than B × stride");
    shard::grad_unique(grad, stride, col, dim, inverse, lengths, B, weights, fullLen, mean, seqPos, out);
    return env.Undefined();
  });
}

// The `need` elements of the typed array `arr` from element `at` on (the index argument atArg);
// INVALID_ARGUMENT when it holds fewer, typed_array's check of its type.
template <typename T>
T* array_from(Napi::Env env, const Napi::Value& arr, napi_typedarray_type type, const char* what, const Napi::Value& atArg,
              const char* atWhat, int64_t need) {
  const int64_t at = int_arg(env, atArg, atWhat);
  if (at + need > static_cast<int64_t>(arr.As<Napi::TypedArray>().ElementLength())) bad(env, std::string(what) + " too short");
  return typed_array<T>(env, arr, type, what, 0) + at;
}

// gradTerms(lengths, weights|null, fullLen|null, mean, seqPos|null, row: Int32Array, rowAt, scale: Float32Array, scaleAt) -> ids:
// each id's gradient row and scale written from row[rowAt] and scale[scaleAt] (shard::grad_terms); returns
// how many ids the bags hold
Napi::Value GradTerms(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    if (!info[0].IsTypedArray() || !info[5].IsTypedArray() || !info[7].IsTypedArray()) bad(env, "gradTerms: arrays expected");
    const int64_t B = static_cast<int64_t>(info[0].As<Napi::TypedArray>().ElementLength());
    const int32_t* lengths = typed_array<int32_t>(env, info[0], napi_int32_array, "gradTerms: lengths", B);
    const int64_t n = sum_lengths(env, lengths, B);
    const float* weights = typed_array<float>(env, info[1], napi_float32_array, "gradTerms: weights", n, true);
    const int32_t* fullLen = typed_array<int32_t>(env, info[2], napi_int32_array, "gradTerms: fullLen", B, true);
    const bool mean = info[3].ToBoolean().Value();
    if (mean && !fullLen) bad(env, "gradTerms: mean pooling needs the full bag lengths");
    const int32_t* seqPos = typed_array<int32_t>(env, info[4], napi_int32_array, "gradTerms: seqPos", n, true);
    int32_t* row = array_from<int32_t>(env, info[5], napi_int32_array, "gradTerms: row", info[6], "gradTerms: rowAt", n);
    float* scale = array_from<float>(env, info[7], napi_float32_array, "gradTerms: scale", info[8], "gradTerms: scaleAt", n);
    shard::grad_terms(lengths, B, weights, fullLen, mean, seqPos, row, scale);
    return Napi::Number::New(env, static_cast<double>(n));
  });
}

// groupRows(inverse, U, start: Int32Array, startAt, order: Int32Array, orderAt): shard::group_rows into
// start[startAt …] (U + 1 values) and order[orderAt …] (inverse.length values)
Napi::Value GroupRows(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    if (!info[0].IsTypedArray() || !info[2].IsTypedArray() || !info[4].IsTypedArray()) bad(env, "groupRows: arrays expected");
    const int64_t n = static_cast<int64_t>(info[0].As<Napi::TypedArray>().ElementLength());
    const int32_t* inverse = typed_array<int32_t>(env, info[0], napi_int32_array, "groupRows: inverse", n);
    const int64_t U = int_arg(env, info[1], "groupRows: U");
    check_inverse(env, inverse, n, U);
    int32_t* start = array_from<int32_t>(env, info[2], napi_int32_array, "groupRows: start", info[3], "groupRows: startAt", U + 1);
    int32_t* order = array_from<int32_t>(env, info[4], napi_int32_array, "groupRows: order", info[5], "groupRows: orderAt", n);
    shard::group_rows(inverse, n, U, start, order);
    return env.Undefined();
  });
}

// divideBags(m: Float32Array, stride, col, dim, lengths)
Napi::Value DivideBags(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    const int64_t stride = int_arg(env, info[1], "divideBags: stride"), col = int_arg(env, info[2], "divideBags: col");
    const int64_t dim = int_arg(env, info[3], "divideBags: dim");
    if (col + dim > stride) bad(env, "divideBags: columns outside the matrix");
    if (!info[4].IsTypedArray()) bad(env, "divideBags: lengths must be an Int32Array");
    const int64_t B = static_cast<int64_t>(info[4].As<Napi::TypedArray>().ElementLength());
    const int32_t* lengths = typed_array<int32_t>(env, info[4], napi_int32_array, "divideBags: lengths", B);
    float* m = typed_array<float>(env, info[0], napi_float32_array, "divideBags: m", B * stride);
    shard::divide_bags(m, stride, col, dim, lengths, B);
    return env.Undefined();
  });
}

// bagOffsets(lengths: Int32Array, out: Int32Array, at): out[at …] = 0, then each bag's end (lengths' prefix sums)
Napi::Value BagOffsets(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    if (!info[0].IsTypedArray()) bad(env, "bagOffsets: lengths must be an Int32Array");
    const int64_t B = static_cast<int64_t>(info[0].As<Napi::TypedArray>().ElementLength());
    const int32_t* lengths = typed_array<int32_t>(env, info[0], napi_int32_array, "bagOffsets: lengths", B);
    const int64_t at = int_arg(env, info[2], "bagOffsets: at");
    int32_t* out = typed_array<int32_t>(env, info[1], napi_int32_array, "bagOffsets: out", at + B + 1);
    shard::bag_offsets(lengths, B, out + at);
    return env.Undefined();
  });
}

// allFinite(a: Float32Array): whether every value is finite
Napi::Value AllFinite(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    if (!info[0].IsTypedArray()) bad(env, "allFinite: a must be a Float32Array");
    const int64_t n = static_cast<int64_t>(info[0].As<Napi::TypedArray>().ElementLength());
    const float* a = typed_array<float>(env, info[0], napi_float32_array, "allFinite: a", n);
    return Napi::Boolean::New(env, all_finite(a, n));
  });
}

// initSlice(kind: 'uniform'|'normal'|'constant', a, b, seed, table, dim, r0, nRows, c0, c1, out: Float32Array,
//           rowStride = 1): rows r0 + j·rowStride
Napi::Value InitSlice(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    if (!info[0].IsString() || !info[1].IsNumber() || !info[2].IsNumber()) bad(env, "initSlice: kind, a, b expected");
    std::string k = info[0].As<Napi::String>().Utf8Value();
    InitKind kind = k == "uniform" ? InitKind::Uniform : k == "normal" ? InitKind::Normal : k == "constant" ? InitKind::Constant
                                                                                                          : (bad(env, "initSlice: unknown init kind"), InitKind::Constant);
    const float a = info[1].As<Napi::Number>().FloatValue(), b = info[2].As<Napi::Number>().FloatValue();
    const int64_t seed = int_arg(env, info[3], "initSlice: seed"), table = int_arg(env, info[4], "initSlice: table");
    const int64_t dim = int_arg(env, info[5], "initSlice: dim"), r0 = int_arg(env, info[6], "initSlice: r0");
    const int64_t nRows = int_arg(env, info[7], "initSlice: nRows");
    const int64_t c0 = int_arg(env, info[8], "initSlice: c0"), c1 = int_arg(env, info[9], "initSlice: c1");
    if (c1 < c0 || c1 > dim) bad(env, "initSlice: columns outside the table");
    float* out = typed_array<float>(env, info[10], napi_float32_array, "initSlice: out", nRows * (c1 - c0));
    const int64_t stride = info[11].IsUndefined() ? 1 : int_arg(env, info[11], "initSlice: rowStride");
    shard::init_slice(kind, a, b, static_cast<uint64_t>(seed), static_cast<uint64_t>(table), dim, r0, stride, nRows, c0, c1, out);
    return env.Undefined();
  });
}

// rowIds(first, out: BigInt64Array): out[j] = first + j
Napi::Value RowIds(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    const int64_t first = int_arg(env, info[0], "rowIds: first");
    if (!info[1].IsTypedArray() || info[1].As<Napi::TypedArray>().TypedArrayType() != napi_bigint64_array) bad(env, "rowIds: out must be a BigInt64Array");
    Napi::BigInt64Array out = info[1].As<Napi::BigInt64Array>();
    shard::row_ids(first, static_cast<int64_t>(out.ElementLength()), out.Data());
    return env.Undefined();
  });
}

// hashKeys(ids: BigInt64Array, capacity) -> Float64Array: a dynamic table's ids as distinct row-space keys (shard::hash_keys)
Napi::Value HashKeys(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    size_t len = 0;
    const int64_t* ids = i64_array(env, info[0], "hashKeys: ids", &len);
    const int64_t n = static_cast<int64_t>(len);
    const int64_t capacity = int_arg(env, info[1], "hashKeys: capacity");
    if (capacity < 1 || capacity > (int64_t{1} << 31)) bad(env, "hashKeys: capacity must be in [1, 2^31]");
    Napi::Float64Array out = Napi::Float64Array::New(env, static_cast<size_t>(n));
    shard::hash_keys(ids, n, capacity, out.Data());
    return out;
  });
}

// outputArray(n) -> a zeroed Float32Array of n values in a buffer of the addon's output pool: a sharded
// forward's outputs, given back by releaseBuffers (group_wrap.cc; its backward, or release()) for the
// next forward.
Napi::Value OutputArray(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    const int64_t n = int_arg(env, info[0], "outputArray: n");
    if (n < 0 || n > (int64_t{1} << 40)) bad(env, "outputArray: n must be in [0, 2^40]");
    OutBuf b(static_cast<size_t>(n));
    if (n > 0) std::memset(b.data(), 0, static_cast<size_t>(n) * 4);
    return b.adopt(env);
  });
}

void Init(Napi::Env env, Napi::Object exports) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("segment", Napi::Function::New(env, Segment, "segment"));
  o.Set("unique", Napi::Function::New(env, Unique, "unique"));
  o.Set("routeStep", Napi::Function::New(env, RouteStep, "routeStep"));
  o.Set("divideIds", Napi::Function::New(env, DivideIds, "divideIds"));
  o.Set("pack", Napi::Function::New(env, Pack, "pack"));
  o.Set("unpack", Napi::Function::New(env, Unpack, "unpack"));
  o.Set("poolUnique", Napi::Function::New(env, PoolUnique, "poolUnique"));
  o.Set("gradUnique", Napi::Function::New(env, GradUnique, "gradUnique"));
  o.Set("divideBags", Napi::Function::New(env, DivideBags, "divideBags"));
  o.Set("allFinite", Napi::Function::New(env, AllFinite, "allFinite"));
  o.Set("gradTerms", Napi::Function::New(env, GradTerms, "gradTerms"));
  o.Set("groupRows", Napi::Function::New(env, GroupRows, "groupRows"));
  o.Set("bagOffsets", Napi::Function::New(env, BagOffsets, "bagOffsets"));
  o.Set("initSlice", Napi::Function::New(env, InitSlice, "initSlice"));
  o.Set("rowIds", Napi::Function::New(env, RowIds, "rowIds"));
  o.Set("hashKeys", Napi::Function::New(env, HashKeys, "hashKeys"));
  o.Set("outputArray", Napi::Function::New(env, OutputArray, "outputArray"));
  exports.Set("shard", o);
}

Part part("shard_ops", &Init);

}  // namespace
}  // namespace embshard::addon
