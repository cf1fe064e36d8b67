// device_ops.cc — the sharded runtime's device exchange kernels (cuda/exchange_kernels.h) on DeviceArrays,
// synchronous (a few kernel launches per phase), every range checked before anything runs. CUDA addon only.
//   copyDeviceBlocks(src, dst, blocks: Float64Array, srcKind?, dstKind?): strided block copies between two
//     device buffers on one device, 7 numbers per block (srcOffset, srcStride, dstOffset, dstStride, rows,
//     cols, add 0/1), run in order; kinds 'fp32' (default; an f32 buffer) or 'fp16' / 'bf16' (wire values
//     in a u16 buffer), converted on the way (adding needs an fp32 dst);
//   indexDeviceRows({ src, srcKind, srcOffset, srcStride, dst, dstKind, dstOffset, dstStride, meta, idxAt, rows, cols, mode }):
//     mode 'gather': dst row j ← src row idx[j]; 'scatter': dst row idx[j] ← src row j; 'scatterAdd': dst
//     row idx[j] += src row j; idx the int32 `meta` from element idxAt, `rows` of them (distinct to scatter);
//   poolDeviceRows({ rows, rowsAt, dim, meta, inverseAt, ids, offsetsAt, bags, weights, weightsAt, dst, stride, col }):
//     the unique rows of `rows` from element rowsAt on pooled into `bags` bags of dst (columns col …), each bag's ids listed by the
//     int32 `meta` (the ids' inverse indices at inverseAt, the bags' id offsets, bags + 1 of them, at
//     offsetsAt), weighted by `weights` (f32, at weightsAt; null: 1);
//   divideDeviceBags({ m, stride, col, dim, meta, lengthsAt, bags }): the mean bags of m (columns col …
//     col + dim − 1 of `bags` rows of `stride`) divided by their lengths (the int32 `meta` from lengthsAt);
//   sumDeviceRows({ src, stride, meta, startAt, orderAt, rowAt, colAt, ids, scales, scalesAt, rows, dim, dst, dstAt }):
//     the gradient sums of `rows` distinct rows into dst (rows of dim from dstAt): cuda::sum_rows over the
//     int32 lists in `meta` (starts, rows + 1 of them; order, row and col, `ids` each) and f32 `scales`;
//     the runtime built the lists from its own routing, so every term reads inside src (as poolDeviceRows);
//   allFiniteDevice(buffer, count, flag): whether the buffer's first `count` f32 values are finite (flag: one
//     i32 of scratch on its device).
#if defined(EMBSHARD_WITH_CUDA)
#include <napi.h>

#include <string>
#include <vector>

#include "addon/device_buffer.h"
#include "addon/errors.h"
#include "addon/js_args.h"
#include "addon/registry.h"
#include "core/types.h"
#include "cuda/exchange_kernels.h"

namespace embshard::addon {
namespace {

// The fields of a call's argument object, every error naming the call and the field.
struct ObjectArgs {
  Napi::Env env;
  Napi::Object o;
  std::string what;
  ObjectArgs(Napi::Env e, const Napi::Value& v, const char* call) : env(e), what(call) {
    if (!v.IsObject()) throw_error(env, "INVALID_ARGUMENT", what + ": expects an object");
    o = v.As<Napi::Object>();
  }
  std::string field(const char* k) const { return what + ": " + k; }
  int64_t num(const char* k) const { return int_arg(env, o.Get(k), field(k).c_str()); }
  DeviceBuffer buffer(const char* k) const { return read_device_buffer(env, o.Get(k), field(k).c_str()); }
};

// offset + (rows − 1) · stride + cols ≤ count for rows ≥ 1, in arithmetic that cannot overflow (the
// arguments reach 2^53, so the product of a row count and a stride does not fit 64 bits).
bool rows_fit(int64_t offset, int64_t stride, int64_t rows, int64_t cols, int64_t count) {
  if (offset < 0 || stride < 0 || cols < 0 || rows < 1 || offset > count || cols > count - offset) return false;
  return rows == 1 || stride <= (count - offset - cols) / (rows - 1);
}

// The value kind of a buffer: 'fp32' (undefined too) for an f32 buffer, 'fp16' / 'bf16' for a u16 one.
DType kind_of(Napi::Env env, const Napi::Value& v, const DeviceBuffer& b, const char* what) {
  const DType k = v.IsUndefined() ? DType::F32 : guard(env, [&] { return parse_dtype(string_arg(env, v, what).c_str(), what); });
  if ((k == DType::F32) != (b.type == comm::ElemType::F32) || (k != DType::F32 && b.type != comm::ElemType::U16))
    throw_error(env, "INVALID_ARGUMENT", format("%s: '%s' values live in %s buffers", what, dtype_name(k), k == DType::F32 ? "f32" : "u16"));
  return k;
}

Napi::Value CopyDeviceBlocks(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    DeviceBuffer src = read_device_buffer(env, info[0], "copyDeviceBlocks: src");
    DeviceBuffer dst = read_device_buffer(env, info[1], "copyDeviceBlocks: dst");
    const DType sk = kind_of(env, info[3], src, "copyDeviceBlocks: srcKind"), dk = kind_of(env, info[4], dst, "copyDeviceBlocks: dstKind");
    if (src.device != dst.device)
      throw_error(env, "INVALID_ARGUMENT", format("copyDeviceBlocks: src is on cuda:%d, dst on cuda:%d", src.device, dst.device));
    if (!info[2].IsTypedArray() || info[2].As<Napi::TypedArray>().TypedArrayType() != napi_float64_array ||
        info[2].As<Napi::Float64Array>().ElementLength() % 7 != 0)
      throw_error(env, "INVALID_ARGUMENT", "copyDeviceBlocks: blocks must be a Float64Array of 7 numbers per block");
    auto a = info[2].As<Napi::Float64Array>();
    const size_t n = a.ElementLength() / 7;
    std::vector<cuda::CopyBlock> blocks(n);
    // the last element a block touches in a buffer of `count` elements
    auto within = [](int64_t offset, int64_t stride, int64_t rows, int64_t cols, int64_t count) {
      return rows == 0 || cols == 0 || rows_fit(offset, stride, rows, cols, count);
    };
    for (size_t k = 0; k < n; ++k) {
      int64_t v[7];
      for (int i = 0; i < 7; ++i) {
        const double x = a[k * 7 + i];
        if (!(x >= 0 && x <= 9.0e15 && x == static_cast<double>(static_cast<int64_t>(x))))
          throw_error(env, "INVALID_ARGUMENT", format("copyDeviceBlocks: block %zu: value %d (%g) is not a non-negative integer", k, i, x));
        v[i] = static_cast<int64_t>(x);
      }
      blocks[k] = cuda::CopyBlock{v[0], v[1], v[2], v[3], v[4], v[5], v[6] != 0};
      if (v[6] != 0 && dk != DType::F32) throw_error(env, "INVALID_ARGUMENT", "copyDeviceBlocks: adding needs an fp32 dst");
      if (!within(v[0], v[1], v[4], v[5], src.count) || !within(v[2], v[3], v[4], v[5], dst.count))
        throw_error(env, "LENGTH_MISMATCH", format("copyDeviceBlocks: block %zu (%lld × %lld) lies outside its buffers (%lld and %lld elements)", k,
                                                   static_cast<long long>(v[4]), static_cast<long long>(v[5]),
                                                   static_cast<long long>(src.count), static_cast<long long>(dst.count)));
    }
    cuda::copy_blocks(src.device, src.ptr, sk, dst.ptr, dk, blocks.data(), n);
    return env.Undefined();
  });
}

Napi::Value PoolDeviceRows(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    const ObjectArgs a(env, info[0], "poolDeviceRows");
    const DeviceBuffer rows = a.buffer("rows"), meta = a.buffer("meta"), dst = a.buffer("dst");
    const bool weighted = !a.o.Get("weights").IsNull() && !a.o.Get("weights").IsUndefined();
    const DeviceBuffer w = weighted ? a.buffer("weights") : DeviceBuffer{};
    const int64_t rowsAt = a.num("rowsAt"), dim = a.num("dim"), inverseAt = a.num("inverseAt"), ids = a.num("ids"), offsetsAt = a.num("offsetsAt");
    const int64_t bags = a.num("bags"), weightsAt = weighted ? a.num("weightsAt") : 0, stride = a.num("stride"), col = a.num("col");
    if (rows.type != comm::ElemType::F32 || dst.type != comm::ElemType::F32 || meta.type != comm::ElemType::I32 ||
        (weighted && w.type != comm::ElemType::F32))
      throw_error(env, "INVALID_ARGUMENT", "poolDeviceRows: rows, dst and weights hold f32, meta i32");
    if (rows.device != dst.device || meta.device != dst.device || (weighted && w.device != dst.device))
      throw_error(env, "INVALID_ARGUMENT", "poolDeviceRows: every buffer must be on one device");
    if (rowsAt > rows.count || inverseAt + ids > meta.count || offsetsAt + bags + 1 > meta.count || (weighted && weightsAt + ids > w.count) ||
        (bags > 0 && (col + dim > stride || !rows_fit(col, stride, bags, dim, dst.count))))
      throw_error(env, "LENGTH_MISMATCH", "poolDeviceRows: a range lies outside its buffer");
    const int32_t* m = static_cast<const int32_t*>(meta.ptr);
    cuda::pool_rows(dst.device, static_cast<const float*>(rows.ptr) + rowsAt, dim, m + inverseAt, m + offsetsAt, bags,
                    weighted ? static_cast<const float*>(w.ptr) + weightsAt : nullptr, static_cast<float*>(dst.ptr), stride, col);
    return env.Undefined();
  });
}

Napi::Value DivideDeviceBags(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    const ObjectArgs a(env, info[0], "divideDeviceBags");
    const DeviceBuffer m = a.buffer("m"), meta = a.buffer("meta");
    const int64_t stride = a.num("stride"), col = a.num("col"), dim = a.num("dim"), lengthsAt = a.num("lengthsAt"), bags = a.num("bags");
    if (m.type != comm::ElemType::F32 || meta.type != comm::ElemType::I32) throw_error(env, "INVALID_ARGUMENT", "divideDeviceBags: m holds f32, meta i32");
    if (m.device != meta.device) throw_error(env, "INVALID_ARGUMENT", "divideDeviceBags: every buffer must be on one device");
    if (lengthsAt + bags > meta.count || (bags > 0 && (col + dim > stride || !rows_fit(col, stride, bags, dim, m.count))))
      throw_error(env, "LENGTH_MISMATCH", "divideDeviceBags: a range lies outside its buffer");
    cuda::divide_bags(m.device, static_cast<float*>(m.ptr), stride, col, dim, static_cast<const int32_t*>(meta.ptr) + lengthsAt, bags);
    return env.Undefined();
  });
}

Napi::Value SumDeviceRows(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    const ObjectArgs a(env, info[0], "sumDeviceRows");
    const DeviceBuffer src = a.buffer("src"), meta = a.buffer("meta"), scales = a.buffer("scales"), dst = a.buffer("dst");
    const int64_t stride = a.num("stride"), startAt = a.num("startAt"), orderAt = a.num("orderAt"), rowAt = a.num("rowAt"), colAt = a.num("colAt");
    const int64_t ids = a.num("ids"), scalesAt = a.num("scalesAt"), rows = a.num("rows"), dim = a.num("dim"), dstAt = a.num("dstAt");
    if (src.type != comm::ElemType::F32 || dst.type != comm::ElemType::F32 || scales.type != comm::ElemType::F32 || meta.type != comm::ElemType::I32)
      throw_error(env, "INVALID_ARGUMENT", "sumDeviceRows: src, scales and dst hold f32, meta i32");
    if (src.device != dst.device || meta.device != dst.device || scales.device != dst.device)
      throw_error(env, "INVALID_ARGUMENT", "sumDeviceRows: every buffer must be on one device");
    if (startAt + rows + 1 > meta.count || orderAt + ids > meta.count || rowAt + ids > meta.count || colAt + ids > meta.count ||
        scalesAt + ids > scales.count || dstAt > dst.count || (rows > 0 && !rows_fit(dstAt, dim, rows, dim, dst.count)))
      throw_error(env, "LENGTH_MISMATCH", "sumDeviceRows: a range lies outside its buffer");
    const int32_t* m = static_cast<const int32_t*>(meta.ptr);
    cuda::sum_rows(dst.device, static_cast<const float*>(src.ptr), stride, m + startAt, m + orderAt, m + rowAt, m + colAt,
                   static_cast<const float*>(scales.ptr) + scalesAt, rows, dim, static_cast<float*>(dst.ptr) + dstAt);
    return env.Undefined();
  });
}

Napi::Value IndexDeviceRows(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    const ObjectArgs a(env, info[0], "indexDeviceRows");
    const DeviceBuffer src = a.buffer("src"), dst = a.buffer("dst"), meta = a.buffer("meta");
    const int64_t srcOffset = a.num("srcOffset"), srcStride = a.num("srcStride"), dstOffset = a.num("dstOffset"), dstStride = a.num("dstStride");
    const int64_t idxAt = a.num("idxAt"), rows = a.num("rows"), cols = a.num("cols");
    const std::string m = string_arg(env, a.o.Get("mode"), a.field("mode").c_str());
    if (m != "gather" && m != "scatter" && m != "scatterAdd")
      throw_error(env, "INVALID_ARGUMENT", "indexDeviceRows: mode must be 'gather', 'scatter' or 'scatterAdd' (got '" + m + "')");
    const cuda::IndexMode mode = m == "gather" ? cuda::IndexMode::Gather : m == "scatter" ? cuda::IndexMode::Scatter : cuda::IndexMode::ScatterAdd;
    const bool scatterAdd = mode == cuda::IndexMode::ScatterAdd, gather = mode == cuda::IndexMode::Gather;
    const DType sk = kind_of(env, a.o.Get("srcKind"), src, a.field("srcKind").c_str()), dk = kind_of(env, a.o.Get("dstKind"), dst, a.field("dstKind").c_str());
    if (meta.type != comm::ElemType::I32) throw_error(env, "INVALID_ARGUMENT", "indexDeviceRows: meta holds i32");
    if (scatterAdd && dk != DType::F32) throw_error(env, "INVALID_ARGUMENT", "indexDeviceRows: adding needs an fp32 dst");
    if (src.device != dst.device || meta.device != dst.device) throw_error(env, "INVALID_ARGUMENT", "indexDeviceRows: every buffer must be on one device");
    // the indexed side's extent is the caller's (its rows are those the index names); the other is checked
    const int64_t plainOffset = gather ? dstOffset : srcOffset, plainStride = gather ? dstStride : srcStride;
    const int64_t plainCount = gather ? dst.count : src.count;
    if (idxAt + rows > meta.count || (rows > 0 && !rows_fit(plainOffset, plainStride, rows, cols, plainCount)))
      throw_error(env, "LENGTH_MISMATCH", "indexDeviceRows: a range lies outside its buffer");
    cuda::index_rows(dst.device, src.ptr, sk, srcOffset, srcStride, static_cast<const int32_t*>(meta.ptr) + idxAt, rows, cols, dst.ptr, dk,
                     dstOffset, dstStride, mode);
    return env.Undefined();
  });
}

// allFiniteDevice(buffer, count, flag): whether the first `count` f32 values of a device buffer are finite
// (`flag`: an i32 buffer on the same device, the kernel's scratch)
Napi::Value AllFiniteDevice(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    const DeviceBuffer b = read_device_buffer(env, info[0], "allFiniteDevice: buffer");
    const int64_t n = int_arg(env, info[1], "allFiniteDevice: count");
    const DeviceBuffer flag = read_device_buffer(env, info[2], "allFiniteDevice: flag");
    if (b.type != comm::ElemType::F32 || flag.type != comm::ElemType::I32) throw_error(env, "INVALID_ARGUMENT", "allFiniteDevice: the buffer holds f32, the flag i32");
    if (flag.device != b.device || flag.count < 1) throw_error(env, "INVALID_ARGUMENT", "allFiniteDevice: the flag must be one value on the buffer's device");
    if (n > b.count) throw_error(env, "LENGTH_MISMATCH", "allFiniteDevice: count exceeds the buffer");
    return Napi::Boolean::New(env, cuda::all_finite(b.device, static_cast<const float*>(b.ptr), n, static_cast<uint32_t*>(flag.ptr)));
  });
}

void Init(Napi::Env env, Napi::Object exports) {
  exports.Set("copyDeviceBlocks", Napi::Function::New(env, CopyDeviceBlocks, "copyDeviceBlocks"));
  exports.Set("indexDeviceRows", Napi::Function::New(env, IndexDeviceRows, "indexDeviceRows"));
  exports.Set("poolDeviceRows", Napi::Function::New(env, PoolDeviceRows, "poolDeviceRows"));
  exports.Set("divideDeviceBags", Napi::Function::New(env, DivideDeviceBags, "divideDeviceBags"));
  exports.Set("sumDeviceRows", Napi::Function::New(env, SumDeviceRows, "sumDeviceRows"));
  exports.Set("allFiniteDevice", Napi::Function::New(env, AllFiniteDevice, "allFiniteDevice"));
}

Part part("device_ops", &Init);

}  // namespace
}  // namespace embshard::addon
#endif  // EMBSHARD_WITH_CUDA
