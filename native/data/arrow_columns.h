// arrow_columns.h — the per-element work of reading Arrow columns (lib/data/arrow.ts): bag lengths from
// list offsets, null list slots turned into empty bags, number columns converted to Float32 (interleaved
// into the row-major dense block), 32-bit id lists widened to int64; and the checks of an untrusted body's
// columns (offsets that run backwards, dense values that are not finite, ids outside their table), whose
// typed errors name the column. Every loop reads the Arrow buffers in place, one linear pass each.
//
// The conversions reproduce, value for value, what the TypeScript reader computed element by element:
// an Int32Array store wraps to 32 bits, an offset read past the end of its buffer is NaN (a bag length of
// 0), a subarray clamps its bounds (a negative one counts from the end), a value read past the end of its
// buffer is NaN.
#pragma once
#include <cstdint>
#include <string>

namespace embshard::data {

// The element type of a typed array (its N-API type, in the order of napi_typedarray_type).
enum class NumType { I8, U8, U8Clamped, I16, U16, I32, U32, F32, F64, I64, U64 };

// A typed array's elements, in place.
struct NumArray {
  const void* data = nullptr;
  int64_t size = 0;  // elements
  NumType type = NumType::I32;
};

int element_bytes(NumType t);

// lengths[b] = offsets[b + 1] − offsets[b] for b < B, wrapped to int32 (offsets that run backwards give
// negative lengths, which the batch's consumer refuses); 0 where offsets[b + 1] lies past the `have` entries.
void bag_lengths(const int32_t* offsets, int64_t have, int64_t B, int32_t* lengths);

// The validity bit of slot `pos` (bit `pos` of the bitmap, little-endian bit order); bits past its
// `bytes` read 0; a null bitmap means every slot is valid.
inline bool slot_valid(const uint8_t* bitmap, int64_t bytes, int64_t pos) {
  if (!bitmap) return true;
  const int64_t byte = pos >> 3;
  return byte < bytes && ((bitmap[byte] >> (pos & 7)) & 1) != 0;
}

// The offsets [B + 1] of a list column whose null slots are empty bags: out[0] = 0, out[b + 1] =
// out[b] + (slot valid ? offsets[b + 1] − offsets[b] : 0), wrapped to int32 (a valid slot whose end lies
// past the `have` offsets sets 0). Slot b's validity is bit bitOffset + b.
void valid_bag_offsets(const int32_t* offsets, int64_t have, const uint8_t* bitmap, int64_t bitmapBytes, int64_t bitOffset,
                       int64_t B, int32_t* out);

// Copies each bag b with out[b + 1] > out[b] — values[offsets[b], offsets[b + 1]) clamped as a subarray —
// to ids[out[b] …) of `total` elements. false when a bag would land outside ids (the copy stops there).
bool copy_valid_bags(const int32_t* offsets, int64_t have, const int32_t* out, int64_t B, NumArray values, void* ids,
                     int64_t total);

// dst[k · stride] = src[k] as float for k < n (round to nearest); NaN for k ≥ src.size. Not for 64-bit
// integer sources.
void to_float32(NumArray src, int64_t n, float* dst, int64_t stride);

// dst[k] = src[k] for Int32 (sign-extended) or Uint32 (zero-extended) ids.
void widen_ids(NumArray src, int64_t* dst);

// The first row b < B whose offsets run backwards (offsets[b + 1] < offsets[b]), or −1.
int64_t first_backward(const int32_t* offsets, int64_t B);

// The index of the first id outside [0, rows), or −1; dst[k] = the id as int32 for the ids before it.
int64_t ids_to_rows(NumArray ids, int64_t rows, int32_t* dst);

// The checks of an untrusted Arrow body's columns; each throws embshard::Error naming the column.
//   INVALID_ARGUMENT "column '<name>': its list offsets run backwards at row b (x → y); …"
void check_offsets_monotone(const std::string& name, const int32_t* offsets, int64_t B);
//   INVALID_ARGUMENT "column '<name>': row r, value j is NaN; dense values must be finite" (r = firstRow + i / D)
void check_dense_finite(const std::string& name, const float* dense, int64_t n, int64_t D, int64_t firstRow);
//   ID_OUT_OF_RANGE "column '<name>': id v is not a row of its table (an integer in [0, rows))"; else the ids
//   written to dst as int32
void check_ids_to_rows(const std::string& name, NumArray ids, int64_t rows, int32_t* dst);

}  // namespace embshard::data
