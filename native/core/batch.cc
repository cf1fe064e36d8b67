// batch.cc — validation and id resolution of a jagged batch (see batch.h).
#include "core/batch.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <mutex>
#include <string_view>
#include <unordered_map>

#include "core/errors.h"
#include "core/parallel.h"
#include "core/value_scan.h"

namespace embshard {

namespace {

template <typename Id>
void resolve_ids(const CollectionSpec& spec, const Id* ids, PreparedBatch& out) {
  const int64_t B = out.B;
  // First offending position (smallest index) wins, so the error does not depend on threading.
  std::mutex mu;
  int64_t badPos = std::numeric_limits<int64_t>::max();
  for (int32_t s = 0; s < out.F; ++s) {
    const FeatureSpec& f = spec.features[out.feature[s]];
    const TableSpec& t = spec.tables[f.table];
    const uint64_t rows = t.rows;
    const bool modulo = t.idPolicy == IdPolicy::Modulo;
    int64_t begin = out.offsets[static_cast<size_t>(s) * B], end = out.offsets[static_cast<size_t>(s + 1) * B];
    parallel_for(end - begin, 1 << 16, [&](int64_t lo, int64_t hi) {
      int64_t firstBad = -1;
      for (int64_t i = begin + lo; i < begin + hi; ++i)
        if (!resolve_id(static_cast<int64_t>(ids[i]), rows, modulo, &out.rows[i]) && firstBad < 0) firstBad = i;
      if (firstBad >= 0) {
        std::lock_guard<std::mutex> lk(mu);
        badPos = std::min(badPos, firstBad);
      }
    });
    if (badPos != std::numeric_limits<int64_t>::max()) fail_id_out_of_range(spec, out, s, badPos);
  }
}

}  // namespace

void fail_id_out_of_range(const CollectionSpec& spec, const PreparedBatch& b, int32_t slot, int64_t pos) {
  const FeatureSpec& f = spec.features[b.feature[slot]];
  const TableSpec& t = spec.tables[f.table];
  fail("ID_OUT_OF_RANGE", "id %lld at position %lld of feature '%s' is out of range for table '%s' (rows %llu)",
       static_cast<long long>(raw_id(b, pos)), static_cast<long long>(pos), f.name.c_str(), t.name.c_str(),
       static_cast<unsigned long long>(t.rows));
}

void prepare_batch(const CollectionSpec& spec, const BatchView& v, PreparedBatch& out, bool resolveIds) {
  static std::atomic<uint64_t> nextSerial{1};
  out.serial = nextSerial.fetch_add(1, std::memory_order_relaxed);
  const int64_t B = v.batchSize;
  const int32_t F = static_cast<int32_t>(v.features.size());
  if (B <= 0) fail("INVALID_ARGUMENT", "batchSize must be a positive integer (got %lld)", static_cast<long long>(B));
  out.B = B;
  out.F = F;
  out.feature.assign(F, 0);
  out.slotOf.assign(spec.features.size(), -1);
  // each batch feature's index among the collection's (names are unique): the declared order first, as
  // batches built from the collection's features keep it; otherwise by a name index made for this batch
  std::unordered_map<std::string_view, int32_t> byName;
  for (int32_t s = 0; s < F; ++s) {
    int32_t found = -1;
    if (static_cast<size_t>(s) < spec.features.size() && spec.features[s].name == v.features[s]) {
      found = s;
    } else {
      if (byName.empty())
        for (size_t j = 0; j < spec.features.size(); ++j) byName.emplace(spec.features[j].name, static_cast<int32_t>(j));
      const auto it = byName.find(v.features[s]);
      if (it != byName.end()) found = it->second;
    }
    if (found < 0) fail("UNKNOWN_FEATURE", "batch feature '%s' is not a feature of this collection", v.features[s].c_str());
    if (out.slotOf[found] >= 0) fail("DUPLICATE_FEATURE", "feature '%s' appears twice in the batch", v.features[s].c_str());
    out.slotOf[found] = s;
    out.feature[s] = static_cast<uint32_t>(found);
  }
  for (size_t j = 0; j < spec.features.size(); ++j)
    if (out.slotOf[j] < 0) fail("MISSING_FEATURE", "the batch has no feature '%s'", spec.features[j].name.c_str());

  const int64_t nBags = static_cast<int64_t>(F) * B;
  if (v.numLengths != nBags)
    fail("LENGTH_MISMATCH", "lengths has %lld entries; expected features × batchSize = %d × %lld = %lld",
         static_cast<long long>(v.numLengths), F, static_cast<long long>(B), static_cast<long long>(nBags));
  out.offsets.resize(static_cast<size_t>(nBags) + 1);
  out.offsets[0] = 0;
  for (int64_t i = 0; i < nBags; ++i) {
    int32_t len = v.lengths[i];
    if (len < 0)
      fail("NEGATIVE_LENGTH", "lengths[%lld] = %d is negative (feature '%s', sample %lld)", static_cast<long long>(i), len,
           v.features[i / B].c_str(), static_cast<long long>(i % B));
    out.offsets[i + 1] = out.offsets[i] + len;
  }
  if (out.offsets[nBags] != v.numIds)
    fail("LENGTH_MISMATCH", "lengths sum to %lld but the batch has %lld ids", static_cast<long long>(out.offsets[nBags]),
         static_cast<long long>(v.numIds));
  if (v.weights && v.numWeights != v.numIds)
    fail("LENGTH_MISMATCH", "weights has %lld entries but the batch has %lld ids", static_cast<long long>(v.numWeights),
         static_cast<long long>(v.numIds));
  if (v.weights) check_weights(v.weights, v.numWeights);
  out.weights = v.weights;
  out.rawIds = v.ids;
  out.idType = v.idType;
  if (!resolveIds) {
    out.rows.clear();
    return;
  }
  out.rows.resize(static_cast<size_t>(v.numIds));
  switch (v.idType) {
    case IdType::I64: resolve_ids(spec, static_cast<const int64_t*>(v.ids), out); break;
    case IdType::I32: resolve_ids(spec, static_cast<const int32_t*>(v.ids), out); break;
    case IdType::U32: resolve_ids(spec, static_cast<const uint32_t*>(v.ids), out); break;
  }
}

void check_weights(const float* weights, int64_t n, const char* what) {
  const int64_t bad = first_outside(weights, n, -FLT_MAX, FLT_MAX);
  if (bad >= 0)
    fail("INVALID_ARGUMENT", "%s%sweights[%lld] is %g: weights must be finite", what ? what : "", what ? ": " : "",
         static_cast<long long>(bad), static_cast<double>(weights[bad]));
}

int64_t sequence_values(const CollectionSpec& spec, const PreparedBatch& b, uint32_t feature) {
  int32_t s = b.slotOf[feature];
  return (b.slotEnd(s) - b.slotBegin(s)) * static_cast<int64_t>(spec.tables[spec.features[feature].table].dim);
}

}  // namespace embshard
