// exchange_ops.cc — the per-id work around the sharded runtime's exchanges (see exchange_ops.h).
#include "shard/exchange_ops.h"

#include <algorithm>
#include <cfloat>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/errors.h"
#include "core/half.h"
#include "core/id_hash.h"
#include "core/batch.h"
#include "core/pooling.h"
#include "core/value_scan.h"

namespace embshard::shard {

namespace {
inline void put(void* dst, Wire w, int64_t k, float v) {
  if (w == Wire::F32) static_cast<float*>(dst)[k] = v;
  else if (w == Wire::F16) static_cast<uint16_t*>(dst)[k] = f32_to_f16(v);
  else static_cast<uint16_t*>(dst)[k] = f32_to_bf16(v);
}
inline float get(const void* src, Wire w, int64_t k) {
  if (w == Wire::F32) return static_cast<const float*>(src)[k];
  if (w == Wire::F16) return f16_to_f32(static_cast<const uint16_t*>(src)[k]);
  return bf16_to_f32(static_cast<const uint16_t*>(src)[k]);
}
}  // namespace

namespace {
// segment's two passes over ids of one type: each id's range and the counts, then the stable scatter.
template <typename T>
void segment_ids(const T* ids, int64_t n, const int32_t* lengths, int64_t B, const float* weights, const double* bounds, int S,
                 const What& what, int64_t hashCapacity, int64_t at, const SegmentDst& out) {
  thread_local std::vector<int32_t> seg;  // each id's range; kept between calls
  thread_local std::vector<int64_t> count, next;  // per range: its ids, then where its next id goes
  seg.resize(static_cast<size_t>(n));
  count.assign(static_cast<size_t>(S), 0);
  next.resize(static_cast<size_t>(S));
  std::fill(out.lengths, out.lengths + static_cast<int64_t>(S) * B, 0);
  const double lo = bounds[0], hi = bounds[S];
  int64_t i = 0;
  for (int64_t b = 0; b < B; ++b) {
    int32_t* len = out.lengths + b;
    for (int32_t k = 0; k < lengths[b]; ++k, ++i) {
      const auto v = static_cast<int64_t>(ids[i]);
      const double dv = hashCapacity > 0 ? static_cast<double>(hash_row(static_cast<uint64_t>(v), static_cast<uint64_t>(hashCapacity)))
                                         : static_cast<double>(v);
      if (hashCapacity <= 0 && (dv < lo || dv >= hi))
        fail("ID_OUT_OF_RANGE", "%s: id %lld is outside [%.0f, %.0f)", what().c_str(), static_cast<long long>(v), lo, hi);
      const int s = static_cast<int>(std::upper_bound(bounds + 1, bounds + S, dv) - (bounds + 1));
      seg[static_cast<size_t>(i)] = s;
      ++len[static_cast<int64_t>(s) * B];
      ++count[static_cast<size_t>(s)];
    }
  }
  int64_t start = 0;
  for (int s = 0; s < S; ++s) {
    next[static_cast<size_t>(s)] = start;
    out.counts[s] = static_cast<double>(count[static_cast<size_t>(s)]);
    out.begin[s] = static_cast<double>(at + start);
    start += count[static_cast<size_t>(s)];
  }
  for (int64_t j = 0; j < n; ++j) {
    const int s = seg[static_cast<size_t>(j)];
    const int64_t k = next[static_cast<size_t>(s)]++;
    out.ids[k] = static_cast<int64_t>(ids[j]) - (hashCapacity > 0 ? 0 : static_cast<int64_t>(bounds[s]));
    out.pos[k] = static_cast<int32_t>(j);
    if (weights) out.weights[k] = weights[j];
  }
}
}  // namespace

void segment(const void* ids, IdType idType, int64_t n, const int32_t* lengths, int64_t B, const float* weights,
             const double* bounds, int S, const What& what, int64_t hashCapacity, int64_t at, const SegmentDst& out) {
  int64_t total = 0;
  for (int64_t b = 0; b < B; ++b) {
    if (lengths[b] < 0) fail("NEGATIVE_LENGTH", "%s: bag %lld has a negative length", what().c_str(), static_cast<long long>(b));
    total += lengths[b];
  }
  if (total != n)
    fail("LENGTH_MISMATCH", "%s: lengths add up to %lld but there are %lld ids", what().c_str(), static_cast<long long>(total), static_cast<long long>(n));
  // the description is built only for an error: a step routes hundreds of features
  if (weights && first_outside(weights, n, -FLT_MAX, FLT_MAX) >= 0) check_weights(weights, n, what().c_str());
  switch (idType) {
    case IdType::I64: segment_ids(static_cast<const int64_t*>(ids), n, lengths, B, weights, bounds, S, what, hashCapacity, at, out); break;
    case IdType::I32: segment_ids(static_cast<const int32_t*>(ids), n, lengths, B, weights, bounds, S, what, hashCapacity, at, out); break;
    case IdType::U32: segment_ids(static_cast<const uint32_t*>(ids), n, lengths, B, weights, bounds, S, what, hashCapacity, at, out); break;
  }
}

void unique_keys(const int64_t* ids, int64_t n, int64_t m, int32_t i0, IdKey* out) {
  for (int64_t k = 0; k < n; ++k) {
    const int64_t v = ids[k];
    if (m > 1 && v < 0) fail("ID_OUT_OF_RANGE", "unique: id %lld is negative", static_cast<long long>(v));
    out[k] = {m > 1 ? v % m : 0, v, i0 + static_cast<int32_t>(k), 0};
  }
}

namespace {
// An LSD radix sort (11-bit digits) of keys by k = r · (span + 1) + (v − min v), which orders them by
// (r, v), when k fits 32 bits (the ids of a row range); false, and nothing done, otherwise.
bool radix_sort_keys(IdKey* keys, int64_t n) {
  int64_t lo = keys[0].v, hi = keys[0].v, rmax = 0;
  for (int64_t k = 0; k < n; ++k) {
    lo = std::min(lo, keys[k].v);
    hi = std::max(hi, keys[k].v);
    rmax = std::max(rmax, keys[k].r);
  }
  const uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo);
  if (span >= (uint64_t{1} << 32) / (static_cast<uint64_t>(rmax) + 1)) return false;
  uint32_t top = 0;
  for (int64_t k = 0; k < n; ++k) {
    keys[k].k = static_cast<uint32_t>(static_cast<uint64_t>(keys[k].r) * (span + 1) + (static_cast<uint64_t>(keys[k].v) - static_cast<uint64_t>(lo)));
    top = std::max(top, keys[k].k);
  }
  thread_local std::vector<IdKey> tmp;  // kept between calls
  tmp.resize(static_cast<size_t>(n));
  IdKey* src = keys;
  IdKey* dst = tmp.data();
  for (int shift = 0; shift < 32 && (top >> shift) != 0; shift += 11) {
    uint32_t start[2049] = {};
    for (int64_t k = 0; k < n; ++k) ++start[((src[k].k >> shift) & 2047) + 1];
    for (int d = 0; d < 2048; ++d) start[d + 1] += start[d];
    for (int64_t k = 0; k < n; ++k) dst[start[(src[k].k >> shift) & 2047]++] = src[k];
    std::swap(src, dst);
  }
  if (src != keys) std::copy(src, src + n, keys);
  return true;
}
}  // namespace

int64_t sort_keys(IdKey* keys, int64_t n) {
  if (n < 64 || !radix_sort_keys(keys, n))
    std::sort(keys, keys + n, [](const IdKey& a, const IdKey& b) { return a.r != b.r ? a.r < b.r : a.v < b.v; });
  int64_t distinct = 0;
  for (int64_t k = 0; k < n; ++k) distinct += k == 0 || keys[k].v != keys[k - 1].v;
  return distinct;
}

void emit_unique(const IdKey* keys, int64_t n, int64_t m, int64_t* values, int32_t* inverse, double* counts) {
  std::fill(counts, counts + m, 0.0);
  int64_t u = -1;
  for (int64_t k = 0; k < n; ++k) {
    if (k == 0 || keys[k].v != keys[k - 1].v) {
      values[++u] = keys[k].v;
      counts[keys[k].r] += 1.0;
    }
    inverse[keys[k].i] = static_cast<int32_t>(u);
  }
}

namespace {
// Where each table's range slots (its features' ranges, feature after feature) start among the step's.
std::vector<int64_t> range_slots(const RouteTable* tables, int64_t nt) {
  std::vector<int64_t> slot(static_cast<size_t>(nt + 1), 0);
  for (int64_t t = 0; t < nt; ++t) slot[static_cast<size_t>(t + 1)] = slot[static_cast<size_t>(t)] + tables[t].nFeatures * tables[t].S;
  return slot;
}
}  // namespace

void route_segments(const RouteTable* tables, int64_t nt, const RouteFeature* features, IdType idType, int64_t B,
                    const std::function<std::string(int64_t)>& what, const SegmentDst& out) {
  int64_t k = 0, at = 0, slot = 0;
  for (int64_t t = 0; t < nt; ++t) {
    const RouteTable& rt = tables[t];
    for (int64_t j = 0; j < rt.nFeatures; ++j, ++k) {
      const RouteFeature& f = features[k];
      const SegmentDst dst{out.ids + at, out.pos + at, f.weights ? out.weights + at : nullptr, out.lengths + slot * B, out.counts + slot,
                           out.begin + slot};
      segment(f.ids, idType, f.n, f.lengths, B, f.weights, rt.bounds, rt.S, [&] { return what(k); }, rt.hashCapacity, at, dst);
      at += f.n;
      slot += rt.S;
    }
  }
}

void route_unique_keys(const RouteTable* tables, int64_t nt, const RouteUniq* uniq, int64_t nu, const SegmentDst& seg,
                       std::vector<IdKey>& keys, double* valuesAt, double* inverseAt) {
  const std::vector<int64_t> slot = range_slots(tables, nt);
  int64_t total = 0;
  for (int64_t u = 0; u < nu; ++u) {
    const RouteUniq& q = uniq[u];
    const int S = tables[q.table].S;
    for (int64_t j = 0; j < tables[q.table].nFeatures; ++j) total += static_cast<int64_t>(seg.counts[slot[static_cast<size_t>(q.table)] + j * S + q.range]);
  }
  keys.resize(static_cast<size_t>(total));
  int64_t n = 0;
  valuesAt[0] = inverseAt[0] = 0;
  for (int64_t u = 0; u < nu; ++u) {
    const RouteUniq& q = uniq[u];
    const int S = tables[q.table].S;
    const int64_t first = n;
    for (int64_t j = 0; j < tables[q.table].nFeatures; ++j) {
      const int64_t r = slot[static_cast<size_t>(q.table)] + j * S + q.range;
      const int64_t c = static_cast<int64_t>(seg.counts[r]);
      unique_keys(seg.ids + static_cast<int64_t>(seg.begin[r]), c, q.m, static_cast<int32_t>(n - first), keys.data() + n);
      n += c;
    }
    valuesAt[u + 1] = valuesAt[u] + static_cast<double>(sort_keys(keys.data() + first, n - first));
    inverseAt[u + 1] = static_cast<double>(n);
  }
}

void route_unique_emit(const RouteUniq* uniq, int64_t nu, const IdKey* keys, const double* valuesAt, const double* inverseAt,
                       int64_t* values, int32_t* inverse, double* counts) {
  for (int64_t u = 0; u < nu; ++u) {
    const int64_t a = static_cast<int64_t>(inverseAt[u]);
    emit_unique(keys + a, static_cast<int64_t>(inverseAt[u + 1]) - a, uniq[u].m, values + static_cast<int64_t>(valuesAt[u]), inverse + a, counts);
    counts += uniq[u].m;
  }
}

void hash_keys(const int64_t* ids, int64_t n, int64_t capacity, double* out) {
  std::vector<std::pair<uint64_t, int64_t>> vk(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) vk[static_cast<size_t>(i)] = {hash_row(static_cast<uint64_t>(ids[i]), static_cast<uint64_t>(capacity)), ids[i]};
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return vk[static_cast<size_t>(a)] < vk[static_cast<size_t>(b)]; });
  constexpr double kStep = 1.0 / 4194304.0;  // 2^-22
  int64_t k = -1;
  for (int64_t j = 0; j < n; ++j) {
    const auto& cur = vk[static_cast<size_t>(order[static_cast<size_t>(j)])];
    if (j == 0 || cur.first != vk[static_cast<size_t>(order[static_cast<size_t>(j - 1)])].first) k = 0;
    else if (cur.second != vk[static_cast<size_t>(order[static_cast<size_t>(j - 1)])].second) ++k;
    if (k >= 4194304) fail("INVALID_SIZE", "hash_keys: virtual row %llu has 2^22 distinct ids or more", static_cast<unsigned long long>(cur.first));
    out[order[static_cast<size_t>(j)]] = static_cast<double>(cur.first) + static_cast<double>(k) * kStep;
  }
}

void divide_ids(const int64_t* src, int64_t n, int64_t m, int64_t* dst) {
  for (int64_t k = 0; k < n; ++k) dst[k] = src[k] / m;
}

void pack(const float* src, int64_t stride, const int32_t* idx, int64_t r0, int64_t nRows, int64_t c0, int64_t c1,
          Wire w, void* dst) {
  const int64_t cols = c1 - c0;
  for (int64_t r = 0; r < nRows; ++r) {
    const float* row = src + (idx ? idx[r] : r0 + r) * stride + c0;
    if (w == Wire::F32) std::memcpy(static_cast<float*>(dst) + r * cols, row, static_cast<size_t>(cols) * 4);
    else
      for (int64_t c = 0; c < cols; ++c) put(dst, w, r * cols + c, row[c]);
  }
}

void unpack(const void* src, Wire w, int64_t nRows, int64_t cols, float* dst, int64_t stride, const int32_t* idx, int64_t r0,
            int64_t col, bool add) {
  for (int64_t r = 0; r < nRows; ++r) {
    float* row = dst + (idx ? idx[r] : r0 + r) * stride + col;
    if (add)
      for (int64_t c = 0; c < cols; ++c) row[c] += get(src, w, r * cols + c);
    else
      for (int64_t c = 0; c < cols; ++c) row[c] = get(src, w, r * cols + c);
  }
}

void pool_unique(const float* rows, int64_t dim, const int32_t* inverse, const int32_t* lengths, int64_t B,
                 const float* weights, float* dst, int64_t stride, int64_t col, const int32_t* seqPos) {
  int64_t i = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int32_t k = 0; k < lengths[b]; ++k, ++i) {
      const float* src = rows + static_cast<int64_t>(inverse[i]) * dim;
      if (seqPos) {
        float* out = dst + static_cast<int64_t>(seqPos[i]) * stride + col;
        for (int64_t c = 0; c < dim; ++c) out[c] = src[c];
      } else {
        float* out = dst + b * stride + col;
        const float wi = weights ? weights[i] : 1.0f;
        for (int64_t c = 0; c < dim; ++c) out[c] += wi * src[c];
      }
    }
  }
}

void grad_unique(const float* grad, int64_t stride, int64_t col, int64_t dim, const int32_t* inverse,
                 const int32_t* lengths, int64_t B, const float* weights, const int32_t* fullLen, bool mean,
                 const int32_t* seqPos, float* out) {
  int64_t i = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int32_t k = 0; k < lengths[b]; ++k, ++i) {
      float* dst = out + static_cast<int64_t>(inverse[i]) * dim;
      if (seqPos) {
        const float* g = grad + static_cast<int64_t>(seqPos[i]) * stride + col;
        for (int64_t c = 0; c < dim; ++c) dst[c] += g[c];
      } else {
        const float scale = grad_scale(mean ? Pooling::Mean : Pooling::Sum, weights, i, mean ? fullLen[b] : 1);
        const float* g = grad + b * stride + col;
        for (int64_t c = 0; c < dim; ++c) dst[c] += g[c] * scale;
      }
    }
  }
}

void grad_terms(const int32_t* lengths, int64_t B, const float* weights, const int32_t* fullLen, bool mean, const int32_t* seqPos,
                int32_t* row, float* scale) {
  int64_t i = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int32_t k = 0; k < lengths[b]; ++k, ++i) {
      row[i] = seqPos ? seqPos[i] : static_cast<int32_t>(b);
      scale[i] = seqPos ? 1.0f : grad_scale(mean ? Pooling::Mean : Pooling::Sum, weights, i, mean ? fullLen[b] : 1);
    }
}

void group_rows(const int32_t* inverse, int64_t n, int64_t U, int32_t* start, int32_t* order) {
  std::fill(start, start + U + 1, 0);
  for (int64_t i = 0; i < n; ++i) ++start[inverse[i] + 1];
  for (int64_t u = 0; u < U; ++u) start[u + 1] += start[u];
  std::vector<int32_t> next(start, start + U);
  for (int64_t i = 0; i < n; ++i) order[next[inverse[i]]++] = static_cast<int32_t>(i);
}

void bag_offsets(const int32_t* lengths, int64_t B, int32_t* out) {
  out[0] = 0;
  for (int64_t b = 0; b < B; ++b) out[b + 1] = out[b] + lengths[b];
}

void divide_bags(float* m, int64_t stride, int64_t col, int64_t dim, const int32_t* lengths, int64_t B) {
  for (int64_t b = 0; b < B; ++b) {
    if (lengths[b] <= 0) continue;
    float* row = m + b * stride + col;
    for (int64_t c = 0; c < dim; ++c) row[c] = bag_mean(row[c], lengths[b]);
  }
}

}  // namespace embshard::shard

#include "core/init.h"
#include "core/parallel.h"

namespace embshard::shard {
void init_slice(InitKind kind, float a, float b, uint64_t seed, uint64_t table, int64_t dim, int64_t r0, int64_t rowStride,
                int64_t nRows, int64_t c0, int64_t c1, float* out) {
  const int64_t cols = c1 - c0;
  const uint64_t stream = init_stream(seed, table);
  parallel_for(nRows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, cols)), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const uint64_t base = static_cast<uint64_t>((r0 + r * rowStride) * dim + c0);
      for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = init_value_at(kind, a, b, stream, base + c);
    }
  });
}

void row_ids(int64_t first, int64_t n, int64_t* out) {
  for (int64_t j = 0; j < n; ++j) out[j] = first + j;
}
}  // namespace embshard::shard
