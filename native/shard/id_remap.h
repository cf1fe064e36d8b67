// id_remap.h — a sparse permutation of a table's row ids (the hot-row remap of lib/plan/remap.ts): a few
// ids move (the profiled hot ids to the dense rows [0, K), the ids they displace to the rows they left),
// every other id keeps its row. Applied to every id of a batch before routing, O(1) per id (an
// open-addressing hash of the moved ids), and inverted where rows are addressed by the user's ids.
#pragma once
#include <cstdint>
#include <vector>

#include "core/types.h"

namespace embshard::shard {

class SparsePermutation {
 public:
  // `from[i] → to[i]` for the n moved ids of a table of `rows` rows. The moved ids must be distinct,
  // in [0, rows), and {from} = {to} as sets (so the whole map is a bijection); INVALID_ARGUMENT otherwise.
  SparsePermutation(int64_t rows, const int64_t* from, const int64_t* to, int64_t n);

  int64_t rows() const { return rows_; }
  int64_t moved() const { return n_; }

  // out[i] = π(ids[i]) (inverse: π⁻¹(ids[i])). ID_OUT_OF_RANGE names `what` when an id is outside [0, rows),
  // before anything is written.
  void apply(const void* ids, IdType idType, int64_t n, int64_t* out, bool inverse, const char* what) const;

 private:
  template <typename T>
  void apply_typed(const T* ids, int64_t n, int64_t* out, bool inverse, const char* what) const;
  int64_t lookup(const std::vector<int64_t>& keys, const std::vector<int64_t>& vals, int64_t id) const;

  int64_t rows_;
  int64_t n_;
  uint64_t mask_ = 0;
  // two tables of the same capacity (a power of two ≥ 2n): id → row and row → id; empty slots hold −1
  std::vector<int64_t> fkeys_, fvals_, ikeys_, ivals_;
};

}  // namespace embshard::shard
