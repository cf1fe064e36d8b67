// arrow_ops.cc — binding of the Arrow column work (native/data/arrow_columns.h), synchronous, every typed
// array read and written in place (no copies across the boundary; SharedArrayBuffer views too):
//   arrow.bagLengths(offsets: Int32Array, B, lengths: Int32Array, at)            lengths[at …) of a list column
//   arrow.validBagOffsets(offsets, bitmap: Uint8Array | null, bitOffset, B, out)  offsets with null slots empty
//   arrow.copyValidBags(offsets, out, values, ids) -> boolean                     false: a bag lands outside ids
//   arrow.toFloat32(src, n, dst: Float32Array, start, stride)                     dst[start + k·stride] = src[k]
//   arrow.widenIds(src: Int32Array | Uint32Array, dst: BigInt64Array, at)
//   arrow.checkOffsets(name, offsets, B)                                          INVALID_ARGUMENT naming the column
//   arrow.checkDenseFinite(name, dense: Float32Array, D, firstRow)                INVALID_ARGUMENT naming the column
//   arrow.idsToRows(name, ids, rows, dst: Int32Array, at) -> ids.length           ID_OUT_OF_RANGE naming the column
// The worker thread that decodes the server's Arrow bodies loads the addon too: nothing here keeps state.
#include "addon/errors.h"
#include "addon/js_args.h"
#include "addon/registry.h"
#include "data/arrow_columns.h"

namespace embshard::addon {
namespace {

using data::NumArray;
using data::NumType;

constexpr int64_t kMaxIndex = (int64_t(1) << 53) - 1;

[[noreturn]] void bad(Napi::Env env, const std::string& msg) { throw_error(env, "INVALID_ARGUMENT", msg); }

// Any typed array, in place (napi_get_typedarray_info: the data pointer already at its byte offset).
NumArray typed(Napi::Env env, const Napi::Value& v, const char* what) {
  if (!v.IsTypedArray()) bad(env, std::string(what) + " must be a typed array");
  napi_typedarray_type t;
  size_t length = 0, offset = 0;
  void* data = nullptr;
  napi_value buffer;
  if (napi_get_typedarray_info(env, v, &t, &length, &data, &buffer, &offset) != napi_ok)
    bad(env, std::string(what) + ": cannot read the typed array");
  NumArray a;
  a.data = data;
  a.size = static_cast<int64_t>(length);
  a.type = static_cast<NumType>(t);
  return a;
}

// A typed array of one element type holding at least `need` elements.
template <typename T>
T* typed_of(Napi::Env env, const Napi::Value& v, NumType type, const char* what, int64_t need, int64_t* size = nullptr) {
  const NumArray a = typed(env, v, what);
  if (a.type != type) bad(env, std::string(what) + " has the wrong array type");
  if (a.size < need) throw_error(env, "LENGTH_MISMATCH", std::string(what) + " is too short");
  if (size) *size = a.size;
  return static_cast<T*>(const_cast<void*>(a.data));
}

Napi::Value BagLengths(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    int64_t have = 0;
    const int32_t* offsets = typed_of<int32_t>(env, info[0], NumType::I32, "arrow.bagLengths: offsets", 0, &have);
    const int64_t B = int_arg(env, info[1], "arrow.bagLengths: B", 0, kMaxIndex);
    const int64_t at = int_arg(env, info[3], "arrow.bagLengths: at", 0, kMaxIndex);
    int32_t* lengths = typed_of<int32_t>(env, info[2], NumType::I32, "arrow.bagLengths: lengths", at + B);
    data::bag_lengths(offsets, have, B, lengths + at);
    return env.Undefined();
  });
}

Napi::Value ValidBagOffsets(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    int64_t have = 0, bytes = 0;
    const int32_t* offsets = typed_of<int32_t>(env, info[0], NumType::I32, "arrow.validBagOffsets: offsets", 0, &have);
    const uint8_t* bitmap = nullptr;
    if (!info[1].IsNull() && !info[1].IsUndefined())
      bitmap = typed_of<uint8_t>(env, info[1], NumType::U8, "arrow.validBagOffsets: bitmap", 0, &bytes);
    const int64_t bitOffset = int_arg(env, info[2], "arrow.validBagOffsets: bitOffset", 0, kMaxIndex);
    const int64_t B = int_arg(env, info[3], "arrow.validBagOffsets: B", 0, kMaxIndex);
    int32_t* out = typed_of<int32_t>(env, info[4], NumType::I32, "arrow.validBagOffsets: out", B + 1);
    data::valid_bag_offsets(offsets, have, bitmap, bytes, bitOffset, B, out);
    return env.Undefined();
  });
}

Napi::Value CopyValidBags(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    int64_t have = 0, outSize = 0;
    const int32_t* offsets = typed_of<int32_t>(env, info[0], NumType::I32, "arrow.copyValidBags: offsets", 0, &have);
    const int32_t* out = typed_of<int32_t>(env, info[1], NumType::I32, "arrow.copyValidBags: out", 1, &outSize);
    const NumArray values = typed(env, info[2], "arrow.copyValidBags: values");
    const NumArray ids = typed(env, info[3], "arrow.copyValidBags: ids");
    if (ids.type != values.type) bad(env, "arrow.copyValidBags: ids and values must have one element type");
    const bool ok = data::copy_valid_bags(offsets, have, out, outSize - 1, values, const_cast<void*>(ids.data), ids.size);
    return Napi::Boolean::New(env, ok);
  });
}

Napi::Value ToFloat32(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    const NumArray src = typed(env, info[0], "arrow.toFloat32: src");
    const int64_t n = int_arg(env, info[1], "arrow.toFloat32: n", 0, kMaxIndex);
    const int64_t start = int_arg(env, info[3], "arrow.toFloat32: start", 0, kMaxIndex);
    const int64_t stride = int_arg(env, info[4], "arrow.toFloat32: stride", 1, kMaxIndex);
    int64_t last = 0;  // the last element written: start + (n − 1)·stride, refused when it overflows
    if (n > 0 && (__builtin_mul_overflow(n - 1, stride, &last) || __builtin_add_overflow(last, start, &last)))
      throw_error(env, "LENGTH_MISMATCH", "arrow.toFloat32: dst is too short");
    float* dst = typed_of<float>(env, info[2], NumType::F32, "arrow.toFloat32: dst", n == 0 ? 0 : last + 1);
    data::to_float32(src, n, dst + start, stride);
    return env.Undefined();
  });
}

Napi::Value WidenIds(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    const NumArray src = typed(env, info[0], "arrow.widenIds: src");
    const int64_t at = int_arg(env, info[2], "arrow.widenIds: at", 0, kMaxIndex);
    int64_t* dst = typed_of<int64_t>(env, info[1], NumType::I64, "arrow.widenIds: dst", at + src.size);
    data::widen_ids(src, dst + at);
    return env.Undefined();
  });
}

Napi::Value CheckOffsets(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    const std::string name = string_arg(env, info[0], "arrow.checkOffsets: name");
    const int64_t B = int_arg(env, info[2], "arrow.checkOffsets: B", 0, kMaxIndex);
    const int32_t* offsets = typed_of<int32_t>(env, info[1], NumType::I32, "arrow.checkOffsets: offsets", B + 1);
    data::check_offsets_monotone(name, offsets, B);
    return env.Undefined();
  });
}

Napi::Value CheckDenseFinite(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    const std::string name = string_arg(env, info[0], "arrow.checkDenseFinite: name");
    int64_t n = 0;
    const float* dense = typed_of<float>(env, info[1], NumType::F32, "arrow.checkDenseFinite: dense", 0, &n);
    const int64_t D = int_arg(env, info[2], "arrow.checkDenseFinite: D", 0, kMaxIndex);
    if (D == 0 && n > 0) bad(env, "arrow.checkDenseFinite: D must be positive for a non-empty dense block");
    const int64_t firstRow = int_arg(env, info[3], "arrow.checkDenseFinite: firstRow", 0, kMaxIndex);
    data::check_dense_finite(name, dense, n, D, firstRow);
    return env.Undefined();
  });
}

Napi::Value IdsToRows(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    const std::string name = string_arg(env, info[0], "arrow.idsToRows: name");
    const NumArray ids = typed(env, info[1], "arrow.idsToRows: ids");
    if (ids.type != NumType::I32 && ids.type != NumType::U32 && ids.type != NumType::I64)
      throw_error(env, "UNSUPPORTED_DTYPE", "arrow.idsToRows: ids must be an Int32Array, Uint32Array or BigInt64Array");
    const int64_t rows = int_arg(env, info[2], "arrow.idsToRows: rows", 0, kMaxIndex);
    const int64_t at = int_arg(env, info[4], "arrow.idsToRows: at", 0, kMaxIndex);
    int32_t* dst = typed_of<int32_t>(env, info[3], NumType::I32, "arrow.idsToRows: dst", at + ids.size);
    data::check_ids_to_rows(name, ids, rows, dst + at);
    return Napi::Number::New(env, static_cast<double>(ids.size));
  });
}

void Init(Napi::Env env, Napi::Object exports) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("bagLengths", Napi::Function::New(env, BagLengths, "bagLengths"));
  o.Set("validBagOffsets", Napi::Function::New(env, ValidBagOffsets, "validBagOffsets"));
  o.Set("copyValidBags", Napi::Function::New(env, CopyValidBags, "copyValidBags"));
  o.Set("toFloat32", Napi::Function::New(env, ToFloat32, "toFloat32"));
  o.Set("widenIds", Napi::Function::New(env, WidenIds, "widenIds"));
  o.Set("checkOffsets", Napi::Function::New(env, CheckOffsets, "checkOffsets"));
  o.Set("checkDenseFinite", Napi::Function::New(env, CheckDenseFinite, "checkDenseFinite"));
  o.Set("idsToRows", Napi::Function::New(env, IdsToRows, "idsToRows"));
  exports.Set("arrow", o);
}

Part part("arrow_ops", &Init);

}  // namespace
}  // namespace embshard::addon
