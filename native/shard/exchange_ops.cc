// exchange_ops.cc — the per-id work around the sharded runtime's exchanges (see exchange_ops.h).
#include "shard/exchange_ops.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/errors.h"
#include "core/half.h"
#include "core/id_hash.h"
#include "core/batch.h"
#include "core/pooling.h"

namespace embshard::shard {

namespace {
inline int64_t id_at(const void* ids, IdType t, int64_t i) {
  switch (t) {
    case IdType::I64: return static_cast<const int64_t*>(ids)[i];
    case IdType::I32: return static_cast<const int32_t*>(ids)[i];
    case IdType::U32: return static_cast<const uint32_t*>(ids)[i];
  }
  return 0;
}
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

void segment(const void* ids, IdType idType, int64_t n, const int32_t* lengths, int64_t B, const float* weights,
             const double* bounds, int S, const char* what, Segmented& out, int64_t hashCapacity) {
  int64_t total = 0;
  for (int64_t b = 0; b < B; ++b) total += lengths[b];
  if (total != n)
    fail("LENGTH_MISMATCH", "%s: lengths add up to %lld but there are %lld ids", what, static_cast<long long>(total), static_cast<long long>(n));
  if (weights) check_weights(weights, n, what);
  std::vector<int32_t> seg(static_cast<size_t>(n));
  out.lengths.assign(static_cast<size_t>(S) * static_cast<size_t>(B), 0);
  out.counts.assign(static_cast<size_t>(S), 0);
  const double lo = bounds[0], hi = bounds[S];
  int64_t i = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int32_t k = 0; k < lengths[b]; ++k, ++i) {
      const int64_t v = id_at(ids, idType, i);
      const double dv = hashCapacity > 0 ? static_cast<double>(hash_row(static_cast<uint64_t>(v), static_cast<uint64_t>(hashCapacity)))
                                         : static_cast<double>(v);
      if (hashCapacity <= 0 && (dv < lo || dv >= hi))
        fail("ID_OUT_OF_RANGE", "%s: id %lld is outside [%.0f, %.0f)", what, static_cast<long long>(v), lo, hi);
      int s = static_cast<int>(std::upper_bound(bounds + 1, bounds + S, dv) - (bounds + 1));
      seg[static_cast<size_t>(i)] = s;
      ++out.lengths[static_cast<size_t>(s) * static_cast<size_t>(B) + static_cast<size_t>(b)];
      ++out.counts[static_cast<size_t>(s)];
    }
  }
  std::vector<int64_t> at(static_cast<size_t>(S), 0);
  for (int s = 1; s < S; ++s) at[static_cast<size_t>(s)] = at[static_cast<size_t>(s - 1)] + out.counts[static_cast<size_t>(s - 1)];
  out.ids.resize(static_cast<size_t>(n));
  out.pos.resize(static_cast<size_t>(n));
  out.weights.assign(weights ? static_cast<size_t>(n) : 0, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    const int s = seg[static_cast<size_t>(j)];
    const int64_t k = at[static_cast<size_t>(s)]++;
    out.ids[static_cast<size_t>(k)] = id_at(ids, idType, j) - (hashCapacity > 0 ? 0 : static_cast<int64_t>(bounds[s]));
    out.pos[static_cast<size_t>(k)] = static_cast<int32_t>(j);
    if (weights) out.weights[static_cast<size_t>(k)] = weights[j];
  }
}

void unique(const int64_t* ids, int64_t n, int64_t m, Uniq& out) {
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  auto key = [&](int32_t i) { return std::make_pair(ids[i] % m, ids[i]); };
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return key(a) < key(b); });
  out.values.clear();
  out.inverse.assign(static_cast<size_t>(n), 0);
  out.counts.assign(static_cast<size_t>(m), 0);
  for (int64_t k = 0; k < n; ++k) {
    const int32_t i = order[static_cast<size_t>(k)];
    if (out.values.empty() || out.values.back() != ids[i]) {
      out.values.push_back(ids[i]);
      ++out.counts[static_cast<size_t>(ids[i] % m)];
    }
    out.inverse[static_cast<size_t>(i)] = static_cast<int32_t>(out.values.size() - 1);
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
