// id_remap.cc — SparsePermutation (id_remap.h): building the two hash tables and applying them.
#include "shard/id_remap.h"

#include <algorithm>

#include "core/errors.h"

namespace embshard::shard {
namespace {

inline uint64_t slot_of(int64_t id, uint64_t mask) {
  // Fibonacci hashing: the top bits of id · 2^64/φ, folded to the capacity
  return (static_cast<uint64_t>(id) * 0x9E3779B97F4A7C15ull >> 17) & mask;
}

void insert(std::vector<int64_t>& keys, std::vector<int64_t>& vals, uint64_t mask, int64_t k, int64_t v) {
  uint64_t s = slot_of(k, mask);
  while (keys[s] >= 0) {
    if (keys[s] == k) fail("INVALID_ARGUMENT", "id remap: id %lld is moved twice", static_cast<long long>(k));
    s = (s + 1) & mask;
  }
  keys[s] = k;
  vals[s] = v;
}

}  // namespace

SparsePermutation::SparsePermutation(int64_t rows, const int64_t* from, const int64_t* to, int64_t n) : rows_(rows), n_(n) {
  if (rows <= 0) fail("INVALID_ARGUMENT", "id remap: rows must be positive");
  if (n < 0 || n > rows) fail("INVALID_ARGUMENT", "id remap: %lld moved ids in a table of %lld rows", static_cast<long long>(n), static_cast<long long>(rows));
  for (int64_t i = 0; i < n; ++i)
    if (from[i] < 0 || from[i] >= rows || to[i] < 0 || to[i] >= rows)
      fail("INVALID_ARGUMENT", "id remap: move %lld (%lld → %lld) is outside [0, %lld)", static_cast<long long>(i), static_cast<long long>(from[i]),
           static_cast<long long>(to[i]), static_cast<long long>(rows));
  std::vector<int64_t> a(from, from + n), b(to, to + n);
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  if (a != b) fail("INVALID_ARGUMENT", "id remap: the moved ids and the rows they move to are not the same set (not a bijection)");
  uint64_t cap = 1;
  while (cap < static_cast<uint64_t>(2 * n)) cap <<= 1;
  mask_ = cap - 1;
  fkeys_.assign(cap, -1);
  fvals_.assign(cap, -1);
  ikeys_.assign(cap, -1);
  ivals_.assign(cap, -1);
  for (int64_t i = 0; i < n; ++i) {
    insert(fkeys_, fvals_, mask_, from[i], to[i]);
    insert(ikeys_, ivals_, mask_, to[i], from[i]);
  }
}

int64_t SparsePermutation::lookup(const std::vector<int64_t>& keys, const std::vector<int64_t>& vals, int64_t id) const {
  uint64_t s = slot_of(id, mask_);
  for (;;) {
    const int64_t k = keys[s];
    if (k == id) return vals[s];
    if (k < 0) return id;
    s = (s + 1) & mask_;
  }
}

template <typename T>
void SparsePermutation::apply_typed(const T* ids, int64_t n, int64_t* out, bool inverse, const char* what) const {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = static_cast<int64_t>(ids[i]);
    if (v < 0 || v >= rows_) fail("ID_OUT_OF_RANGE", "%s: id %lld is outside [0, %lld)", what, static_cast<long long>(v), static_cast<long long>(rows_));
  }
  const auto& keys = inverse ? ikeys_ : fkeys_;
  const auto& vals = inverse ? ivals_ : fvals_;
  if (n_ == 0)
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int64_t>(ids[i]);
  else
    for (int64_t i = 0; i < n; ++i) out[i] = lookup(keys, vals, static_cast<int64_t>(ids[i]));
}

void SparsePermutation::apply(const void* ids, IdType idType, int64_t n, int64_t* out, bool inverse, const char* what) const {
  switch (idType) {
    case IdType::I64: apply_typed(static_cast<const int64_t*>(ids), n, out, inverse, what); break;
    case IdType::I32: apply_typed(static_cast<const int32_t*>(ids), n, out, inverse, what); break;
    case IdType::U32: apply_typed(static_cast<const uint32_t*>(ids), n, out, inverse, what); break;
  }
}

}  // namespace embshard::shard
