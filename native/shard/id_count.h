// id_count.h — id frequencies of sample batches (hot-row profiling, lib/plan/profile.ts): every id of a
// table's features counted exactly (one sort and a run-length pass), and the K most frequent ids.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/types.h"

namespace embshard::shard {

// One array of ids (a feature of one sample batch); `what` names it in errors.
struct IdSpan {
  const void* ids = nullptr;
  IdType idType = IdType::I64;
  int64_t n = 0;
  std::string what;
};

struct IdCounts {
  std::vector<int64_t> ids;     // the k most frequent ids: count descending, then id ascending
  std::vector<int64_t> counts;  // their counts
  int64_t total = 0;            // ids counted
  int64_t distinct = 0;         // distinct ids among them
  int64_t tailLow = 0;          // lookups of the other ids (the tail) whose id is in [K, K + (rows − K) / 16)
};

// Counts the ids of `parts` (each in [0, rows): ID_OUT_OF_RANGE naming the part otherwise) and keeps the
// K most frequent of those counted at least minCount times (at most k), and how many of the other ids' lookups fall in the lowest 1/16 of the
// rows past K (which tells a frequency-ordered tail from a scattered one). Deterministic: ties go to the lower id.
void count_top(const std::vector<IdSpan>& parts, int64_t rows, int64_t k, int64_t minCount, IdCounts& out);

}  // namespace embshard::shard
