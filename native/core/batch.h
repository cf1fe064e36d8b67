// batch.h — the one batch format (KeyedJaggedTensor-like) as the native layers see it, and its
// validation. A batch holds F features × B samples; lengths are feature-major [F*B]; ids are the
// concatenation of all bags in that order; optional per-id weights. prepare_batch checks everything
// (feature names, lengths, id ranges) and resolves ids to table rows before any kernel runs, so a bad
// batch is rejected before any state changes. Shared by both backends.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/types.h"

namespace embshard {

struct BatchView {
  int64_t batchSize = 0;
  std::vector<std::string> features;  // batch slot order
  const int32_t* lengths = nullptr;   // [F * B]
  int64_t numLengths = 0;
  const void* ids = nullptr;
  IdType idType = IdType::I64;
  int64_t numIds = 0;
  const float* weights = nullptr;  // null or [numIds]
  int64_t numWeights = 0;
};

struct PreparedBatch {
  int64_t B = 0;
  int32_t F = 0;
  std::vector<uint32_t> feature;   // slot -> collection feature index
  std::vector<int32_t> slotOf;     // collection feature -> slot
  std::vector<int64_t> offsets;    // [F*B + 1] start of each bag in ids
  std::vector<uint64_t> rows;      // [N] resolved row (local to the feature's table); empty when deferred
  const float* weights = nullptr;  // null or [N]
  // Raw ids, for a kernel that resolves (and range-checks) ids itself while it reads them: used by the
  // CPU forward, which changes no state and so may reject a batch after its pass (see resolve_id).
  const void* rawIds = nullptr;
  IdType idType = IdType::I64;
  // Distinct for every prepare_batch call: tells a batch from another one prepared later into the same
  // (recycled) object, which has the same address (DiskEngine's forward → backward staging).
  uint64_t serial = 0;
  int64_t numIds() const { return offsets.empty() ? 0 : offsets.back(); }
  int64_t slotBegin(int32_t slot) const { return offsets[static_cast<size_t>(slot) * B]; }
  int64_t slotEnd(int32_t slot) const { return offsets[static_cast<size_t>(slot + 1) * B]; }
};

// Maps the batch's feature names onto the collection's features: UNKNOWN_FEATURE, MISSING_FEATURE,
// DUPLICATE_FEATURE. Then checks lengths (NEGATIVE_LENGTH, LENGTH_MISMATCH), weights
// (LENGTH_MISMATCH, check_weights) and ids (ID_OUT_OF_RANGE unless the table's policy is modulo).
void prepare_batch(const CollectionSpec& spec, const BatchView& view, PreparedBatch& out, bool resolveIds = true);

// INVALID_ARGUMENT naming the first of n weights that is NaN or ±Inf (its rows' updates would turn NaN; the
// gradient checks see the outputs' gradients only); `what` prefixes the message when given.
void check_weights(const float* weights, int64_t n, const char* what = nullptr);

// The raw id at position i as a signed 64-bit value.
inline int64_t raw_id(const PreparedBatch& b, int64_t i) {
  switch (b.idType) {
    case IdType::I64: return static_cast<const int64_t*>(b.rawIds)[i];
    case IdType::I32: return static_cast<const int32_t*>(b.rawIds)[i];
    case IdType::U32: return static_cast<const uint32_t*>(b.rawIds)[i];
  }
  return -1;
}

// Resolves a raw id against a table of `rows` rows under the table's policy; false when it is out of
// range under idPolicy 'error'.
inline bool resolve_id(int64_t id, uint64_t rows, bool modulo, uint64_t* row) {
  if (id >= 0 && static_cast<uint64_t>(id) < rows) {
    *row = static_cast<uint64_t>(id);
    return true;
  }
  if (!modulo) return false;
  int64_t r = id % static_cast<int64_t>(rows);
  *row = static_cast<uint64_t>(r < 0 ? r + static_cast<int64_t>(rows) : r);
  return true;
}

// The error prepare_batch raises for the first out-of-range id at position `pos` (slot `slot`).
[[noreturn]] void fail_id_out_of_range(const CollectionSpec& spec, const PreparedBatch& b, int32_t slot, int64_t pos);

// Expected gradient sizes for a prepared batch: the pooled gradient and each sequence feature's.
int64_t sequence_values(const CollectionSpec& spec, const PreparedBatch& b, uint32_t feature);

}  // namespace embshard
