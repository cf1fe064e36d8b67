// dynamic_default.cc — the default rows of a dynamic table's ids without a row, and their addition to a
// forward's outputs (definitions in dynamic_default.h).
#include "storage/dynamic_default.h"

#include <algorithm>
#include <vector>

#include "core/init.h"
#include "core/parallel.h"

namespace embshard {

void init_row(const DynamicSpec& spec, uint64_t id, float* out) {
  const uint64_t stream = init_stream(spec.seed, spec.table), D = spec.dim;
  for (uint64_t c = 0; c < D; ++c) out[c] = init_value_at(spec.init.kind, spec.init.a, spec.init.b, stream, id * D + c);
}

void default_row(const DynamicSpec& spec, uint64_t id, float* out) {
  init_row(spec, id, out);
  if (spec.dtype == DType::F32) return;
  uint16_t h;
  for (uint32_t c = 0; c < spec.dim; ++c) {
    store_value(spec.dtype, &h, 0, out[c]);
    out[c] = load_value(spec.dtype, &h, 0);
  }
}

void add_defaults(const DynamicSpec& spec, int64_t sink, const RawIds& ids, const int64_t* slots, const int32_t* lengths,
                  int64_t F, int64_t B, const float* weights, const DefaultTarget* targets, float* pooled, int64_t pooledDim) {
  // where each bag starts, and where each feature's ids start (for its sequence rows)
  std::vector<int64_t> start(static_cast<size_t>(F * B) + 1, 0);
  for (int64_t k = 0; k < F * B; ++k) start[k + 1] = start[k] + lengths[k];
  const uint32_t D = spec.dim;
  parallel_for(F * B, 64, [&](int64_t lo, int64_t hi) {
    std::vector<float> row(D), acc(D);
    for (int64_t k = lo; k < hi; ++k) {
      const DefaultTarget& t = targets[k / B];
      if (t.column == -2) continue;
      const int64_t begin = start[k], end = start[k + 1];
      bool any = false;
      for (int64_t i = begin; i < end; ++i) {
        if (slots[i] != sink) continue;
        default_row(spec, ids.at(i), row.data());
        if (t.column == -1) {
          float* dst = t.sequence + (i - start[(k / B) * B]) * D;
          for (uint32_t c = 0; c < D; ++c) dst[c] = row[c];
          continue;
        }
        if (!any) std::fill(acc.begin(), acc.end(), 0.0f);
        any = true;
        const float w = weights ? weights[i] : 1.0f;
        for (uint32_t c = 0; c < D; ++c) acc[c] += w * row[c];
      }
      if (!any) continue;
      float* dst = pooled + (k % B) * pooledDim + t.column;
      const float len = static_cast<float>(end - begin);
      for (uint32_t c = 0; c < D; ++c) dst[c] += t.mean ? acc[c] / len : acc[c];
    }
  });
}

void fill_defaults(const DynamicSpec& spec, int64_t sink, const RawIds& ids, const int64_t* slots, float* out) {
  parallel_for(ids.n, 256, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      if (slots[i] == sink) default_row(spec, ids.at(i), out + i * spec.dim);
  });
}

}  // namespace embshard
