// arrow_columns.cc — the per-element work of reading Arrow columns (see arrow_columns.h).
#include "data/arrow_columns.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/errors.h"
#include "core/value_scan.h"

namespace embshard::data {

namespace {

constexpr int64_t kChunk = 4096;

int32_t wrap32(int64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(v))); }

// A subarray bound: negative counts from the end, both clamped to [0, size].
int64_t clamp_bound(int64_t x, int64_t size) { return x < 0 ? std::max<int64_t>(size + x, 0) : std::min(x, size); }

template <typename T>
void convert(const T* src, int64_t n, float* dst, int64_t stride) {
  if (stride == 1) {
    for (int64_t k = 0; k < n; ++k) dst[k] = static_cast<float>(src[k]);
  } else {
    for (int64_t k = 0; k < n; ++k) dst[k * stride] = static_cast<float>(src[k]);
  }
}

template <typename T>
void widen(const T* src, int64_t n, int64_t* dst) {
  for (int64_t k = 0; k < n; ++k) dst[k] = static_cast<int64_t>(src[k]);
}

// One chunk at a time: the chunk is converted and its range flags OR-ed (a loop that vectorises), and
// only a chunk that has an id outside [0, rows) is searched again for the first one.
template <typename T>
int64_t to_rows(const T* ids, int64_t n, int64_t rows, int32_t* dst) {
  for (int64_t c = 0; c < n; c += kChunk) {
    const int64_t end = std::min(n, c + kChunk);
    uint32_t bad = 0;
    for (int64_t i = c; i < end; ++i) {
      const int64_t v = static_cast<int64_t>(ids[i]);
      bad |= static_cast<uint32_t>(v < 0) | static_cast<uint32_t>(v >= rows);
      dst[i] = wrap32(v);
    }
    if (!bad) continue;
    for (int64_t i = c; i < end; ++i) {
      const int64_t v = static_cast<int64_t>(ids[i]);
      if (v < 0 || v >= rows) return i;
    }
  }
  return -1;
}

template <typename T>
T id_at(NumArray a, int64_t i) {
  return static_cast<const T*>(a.data)[i];
}

std::string id_text(NumArray ids, int64_t i) {
  switch (ids.type) {
    case NumType::I32: return std::to_string(id_at<int32_t>(ids, i));
    case NumType::U32: return std::to_string(id_at<uint32_t>(ids, i));
    default: return std::to_string(id_at<int64_t>(ids, i));
  }
}

}  // namespace

int element_bytes(NumType t) {
  switch (t) {
    case NumType::I8:
    case NumType::U8:
    case NumType::U8Clamped: return 1;
    case NumType::I16:
    case NumType::U16: return 2;
    case NumType::I32:
    case NumType::U32:
    case NumType::F32: return 4;
    default: return 8;
  }
}

void bag_lengths(const int32_t* offsets, int64_t have, int64_t B, int32_t* lengths) {
  const int64_t whole = std::clamp<int64_t>(have - 1, 0, B);  // rows whose both offsets are present
  for (int64_t b = 0; b < whole; ++b) lengths[b] = wrap32(static_cast<int64_t>(offsets[b + 1]) - offsets[b]);
  std::fill(lengths + whole, lengths + B, 0);
}

void valid_bag_offsets(const int32_t* offsets, int64_t have, const uint8_t* bitmap, int64_t bitmapBytes, int64_t bitOffset,
                       int64_t B, int32_t* out) {
  out[0] = 0;
  for (int64_t b = 0; b < B; ++b) {
    if (!slot_valid(bitmap, bitmapBytes, bitOffset + b))
      out[b + 1] = out[b];
    else
      out[b + 1] = b + 1 < have ? wrap32(static_cast<int64_t>(out[b]) + (static_cast<int64_t>(offsets[b + 1]) - offsets[b])) : 0;
  }
}

bool copy_valid_bags(const int32_t* offsets, int64_t have, const int32_t* out, int64_t B, NumArray values, void* ids,
                     int64_t total) {
  const int64_t eb = element_bytes(values.type);
  const auto* src = static_cast<const uint8_t*>(values.data);
  auto* dst = static_cast<uint8_t*>(ids);
  for (int64_t b = 0; b < B; ++b) {
    if (!(out[b + 1] > out[b])) continue;
    const int64_t begin = b < have ? clamp_bound(offsets[b], values.size) : 0;
    const int64_t end = b + 1 < have ? clamp_bound(offsets[b + 1], values.size) : values.size;
    const int64_t count = std::max<int64_t>(end - begin, 0), at = out[b];
    if (at < 0 || count > total - at) return false;
    if (count > 0) std::memcpy(dst + at * eb, src + begin * eb, static_cast<size_t>(count * eb));
  }
  return true;
}

void to_float32(NumArray src, int64_t n, float* dst, int64_t stride) {
  const int64_t have = std::min(n, src.size);
  switch (src.type) {
    case NumType::I8: convert(static_cast<const int8_t*>(src.data), have, dst, stride); break;
    case NumType::U8:
    case NumType::U8Clamped: convert(static_cast<const uint8_t*>(src.data), have, dst, stride); break;
    case NumType::I16: convert(static_cast<const int16_t*>(src.data), have, dst, stride); break;
    case NumType::U16: convert(static_cast<const uint16_t*>(src.data), have, dst, stride); break;
    case NumType::I32: convert(static_cast<const int32_t*>(src.data), have, dst, stride); break;
    case NumType::U32: convert(static_cast<const uint32_t*>(src.data), have, dst, stride); break;
    case NumType::F32: convert(static_cast<const float*>(src.data), have, dst, stride); break;
    case NumType::F64: convert(static_cast<const double*>(src.data), have, dst, stride); break;
    default: fail("UNSUPPORTED_DTYPE", "a 64-bit integer column cannot be read as Float32");
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t k = have; k < n; ++k) dst[k * stride] = nan;
}

void widen_ids(NumArray src, int64_t* dst) {
  if (src.type == NumType::I32)
    widen(static_cast<const int32_t*>(src.data), src.size, dst);
  else if (src.type == NumType::U32)
    widen(static_cast<const uint32_t*>(src.data), src.size, dst);
  else
    fail("UNSUPPORTED_DTYPE", "only Int32 or Uint32 ids are widened to int64");
}

int64_t first_backward(const int32_t* offsets, int64_t B) {
  for (int64_t c = 0; c < B; c += kChunk) {
    const int64_t end = std::min(B, c + kChunk);
    uint32_t bad = 0;
    for (int64_t b = c; b < end; ++b) bad |= static_cast<uint32_t>(offsets[b + 1] < offsets[b]);
    if (!bad) continue;
    for (int64_t b = c; b < end; ++b)
      if (offsets[b + 1] < offsets[b]) return b;
  }
  return -1;
}

int64_t ids_to_rows(NumArray ids, int64_t rows, int32_t* dst) {
  switch (ids.type) {
    case NumType::I32: return to_rows(static_cast<const int32_t*>(ids.data), ids.size, rows, dst);
    case NumType::U32: return to_rows(static_cast<const uint32_t*>(ids.data), ids.size, rows, dst);
    case NumType::I64: return to_rows(static_cast<const int64_t*>(ids.data), ids.size, rows, dst);
    default: fail("UNSUPPORTED_DTYPE", "ids must be Int32, Uint32 or Int64");
  }
}

void check_offsets_monotone(const std::string& name, const int32_t* offsets, int64_t B) {
  const int64_t b = first_backward(offsets, B);
  if (b >= 0)
    fail("INVALID_ARGUMENT", "column '%s': its list offsets run backwards at row %lld (%d \u2192 %d); the Arrow body is corrupt",
         name.c_str(), static_cast<long long>(b), offsets[b], offsets[b + 1]);
}

void check_dense_finite(const std::string& name, const float* dense, int64_t n, int64_t D, int64_t firstRow) {
  const int64_t i = first_outside(dense, n, -FLT_MAX, FLT_MAX);
  if (i < 0) return;
  const float v = dense[i];
  const char* text = std::isnan(v) ? "NaN" : v > 0 ? "Infinity" : "-Infinity";
  fail("INVALID_ARGUMENT", "column '%s': row %lld, value %lld is %s; dense values must be finite", name.c_str(),
       static_cast<long long>(firstRow + i / D), static_cast<long long>(i % D), text);
}

void check_ids_to_rows(const std::string& name, NumArray ids, int64_t rows, int32_t* dst) {
  const int64_t i = ids_to_rows(ids, rows, dst);
  if (i >= 0)
    fail("ID_OUT_OF_RANGE", "column '%s': id %s is not a row of its table (an integer in [0, %lld))", name.c_str(),
         id_text(ids, i).c_str(), static_cast<long long>(rows));
}

}  // namespace embshard::data
