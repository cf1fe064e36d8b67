// exchange_ops.h — the per-id work around the sharded runtime's exchanges (lib/sharded/sharded.ts), so the TypeScript side never
// loops over ids or values: routing ids to row ranges, deduplication, packing rows into wire buffers
// (fp32 / fp16 / bf16, core/half.h rounding) and unpacking them, pooling unique rows into bags and
// reducing bag gradients onto unique rows. Every loop runs in a fixed order (deterministic).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/types.h"

namespace embshard::shard {

using Wire = DType;  // rows travel as fp32 / fp16 / bf16: the storage dtypes of core/types.h
inline Wire parse_wire(const char* s) { return parse_dtype(s, "wire dtype"); }
inline int wire_size(Wire w) { return static_cast<int>(dtype_size(w)); }

// Ids of one feature ([B] bags) split by the row ranges [bounds[s], bounds[s+1]): a stable counting sort
// into the caller's arrays (SegmentDst): ids relative to their range start and the original position of
// each (range-major, stable), their weights (when given), per-range bag lengths [S × B] (range-major), the
// count per range [S] and where each range starts in ids, plus `at` [S] (counts and starts as doubles, the
// numbers JS reads). NEGATIVE_LENGTH, LENGTH_MISMATCH, INVALID_ARGUMENT (a weight not finite) and
// ID_OUT_OF_RANGE (an id outside [bounds[0], bounds[S])) name what(), built only then.
// hashCapacity > 0 (a dynamic table, core/id_hash.h): an id falls in the range of its virtual row
// hash_row(id, hashCapacity) and is output as it is (a raw id, not relative); every id is valid.
struct SegmentDst {
  int64_t* ids;
  int32_t* pos;
  float* weights;  // null when the feature has no weights
  int32_t* lengths;
  double* counts;
  double* begin;
};
using What = std::function<std::string()>;
void segment(const void* ids, IdType idType, int64_t n, const int32_t* lengths, int64_t B, const float* weights,
             const double* bounds, int S, const What& what, int64_t hashCapacity, int64_t at, const SegmentDst& out);

// Keys of a dynamic table's raw ids for counting traffic in row space: key = virtual row v = hash_row(id,
// capacity) plus k / 2^22 for the k-th distinct id (ascending) of the call with that v. Keys are distinct
// exactly when the ids are, and floor(key) = v, so row ranges keep their ids. INVALID_SIZE if a virtual
// row gets 2^22 distinct ids or more.
void hash_keys(const int64_t* ids, int64_t n, int64_t capacity, double* out);

// Distinct values of ids, ordered by (v mod m, v) (m = 1: ascending), with the count per residue and the
// index of every input id in the distinct list; in steps, so the outputs can be sized in between:
// unique_keys makes the keys of n ids (input indices i0, i0 + 1, …; ID_OUT_OF_RANGE for a negative id when
// m > 1: only residues need non-negative ids), sort_keys orders them and returns the number of distinct
// values, emit_unique writes values, inverse [n] (at each key's i; the keys of one call to emit_unique
// hold i = 0 … n − 1) and counts [m]. Ties may sort in any order: every output depends on the values alone.
struct IdKey {
  int64_t r;  // v mod m
  int64_t v;
  int32_t i;
  uint32_t k;  // sort_keys' radix key
};
void unique_keys(const int64_t* ids, int64_t n, int64_t m, int32_t i0, IdKey* out);
int64_t sort_keys(IdKey* keys, int64_t n);
void emit_unique(const IdKey* keys, int64_t n, int64_t m, int64_t* values, int32_t* inverse, double* counts);

// One step's routing (lib/sharded/routing.ts route): the routed features of a batch, table after table
// (tables[t].nFeatures each), each segmented by its table's ranges (segment) into one set of arrays:
// feature k's ids after those of features 0 … k−1, its S ranges at the slots after theirs; what(k)
// describes feature k for errors. Then the distinct ids of requested ranges: request u is range `range`
// of every feature of table `table`, concatenated in feature order, deduplicated as unique() with `m`.
// route_unique_keys makes each request's sorted keys (in `keys`, request after request) and where its
// values and inverse go in the outputs (valuesAt, inverseAt: nu + 1 offsets); route_unique_emit writes
// them (counts: m per request, request after request).
struct RouteTable {
  const double* bounds;  // S + 1
  int S;
  int64_t hashCapacity;
  int64_t nFeatures;
};
struct RouteFeature {
  const void* ids;
  int64_t n;
  const int32_t* lengths;  // [B]
  const float* weights;    // null: no weights
};
struct RouteUniq {
  int64_t table;
  int range;
  int64_t m;
};
void route_segments(const RouteTable* tables, int64_t nt, const RouteFeature* features, IdType idType, int64_t B,
                    const std::function<std::string(int64_t)>& what, const SegmentDst& out);
void route_unique_keys(const RouteTable* tables, int64_t nt, const RouteUniq* uniq, int64_t nu, const SegmentDst& seg,
                       std::vector<IdKey>& keys, double* valuesAt, double* inverseAt);
void route_unique_emit(const RouteUniq* uniq, int64_t nu, const IdKey* keys, const double* valuesAt, const double* inverseAt,
                       int64_t* values, int32_t* inverse, double* counts);

// dst[k] = src[k] / m (local rows of a tier held round-robin).
void divide_ids(const int64_t* src, int64_t n, int64_t m, int64_t* dst);

// Packs rows [r0, r0 + nRows) (or the rows listed in idx) × cols [c0, c1) of an fp32 matrix with
// `stride` columns into a wire buffer (fp32, or fp16 / bf16 rounded to nearest even).
void pack(const float* src, int64_t stride, const int32_t* idx, int64_t r0, int64_t nRows, int64_t c0, int64_t c1,
          Wire w, void* dst);
// The reverse, adding into (or overwriting) dst rows r0.. (or rows idx[]) at column offset `col`.
void unpack(const void* src, Wire w, int64_t nRows, int64_t cols, float* dst, int64_t stride, const int32_t* idx, int64_t r0,
            int64_t col, bool add);

// Pools rows of a unique list into bags: for bag b, its ids i in order: dst[b*stride + col + c] += w_i *
// rows[inverse[i]*dim + c]. With seq (pooling none) rows go to dst row pos[i] instead (no weights).
void pool_unique(const float* rows, int64_t dim, const int32_t* inverse, const int32_t* lengths, int64_t B,
                 const float* weights, float* dst, int64_t stride, int64_t col, const int32_t* seqPos);
// Reduces bag gradients onto the unique list, ids in order: out[inverse[i]] += grad[b*stride + col..] *
// w_i * (mean ? 1/len_b : 1) (full bag lengths in fullLen); with seqPos the gradient of id i is the row
// grad[seqPos[i]] (no weights, no scale).
void grad_unique(const float* grad, int64_t stride, int64_t col, int64_t dim, const int32_t* inverse,
                 const int32_t* lengths, int64_t B, const float* weights, const int32_t* fullLen, bool mean,
                 const int32_t* seqPos, float* out);

// grad_unique's terms, one per id i in order, for the device reduction (cuda/exchange_kernels.h sum_rows):
// row[i] = the gradient row it reads (its bag b, or seqPos[i]) and scale[i] its factor (grad_scale of
// core/pooling.h with w_i and, for mean, fullLen[b]; 1 for seqPos, where x · 1 is exactly the x grad_unique adds).
void grad_terms(const int32_t* lengths, int64_t B, const float* weights, const int32_t* fullLen, bool mean, const int32_t* seqPos,
                int32_t* row, float* scale);

// The ids of each distinct row, in id order: start[u] … start[u + 1] − 1 index `order`, which lists the
// positions i with inverse[i] = u ascending (a stable counting sort; U + 1 starts, n positions).
void group_rows(const int32_t* inverse, int64_t n, int64_t U, int32_t* start, int32_t* order);

// Divides every bag's columns [col, col + dim) by its length (mean pooling; empty bags stay zero).
void divide_bags(float* m, int64_t stride, int64_t col, int64_t dim, const int32_t* lengths, int64_t B);

// The bags' first ids: out[0] = 0, out[b + 1] = out[b] + lengths[b] (B + 1 values; the device pooling's bag lists).
void bag_offsets(const int32_t* lengths, int64_t B, int32_t* out);

}  // namespace embshard::shard

namespace embshard::shard {
// The initial fp32 values of rows r0 + j·rowStride (j < nRows) × cols [c0, c1) of table `table` (of width
// `dim`) of a collection with `seed`: exactly what a single collection initialises there (core/init.h), so
// a shard starts equal to its slice of the whole table. Rows in parallel on the host pool.
void init_slice(InitKind kind, float a, float b, uint64_t seed, uint64_t table, int64_t dim, int64_t r0, int64_t rowStride,
                int64_t nRows, int64_t c0, int64_t c1, float* out);
// out[j] = first + j (n values): the row ids of a run of local rows.
void row_ids(int64_t first, int64_t n, int64_t* out);
}  // namespace embshard::shard
