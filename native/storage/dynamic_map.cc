// dynamic_map.cc — admission, eviction, translation and the checkpoint form of a dynamic table's id map
// (rules in dynamic_map.h).
#include "storage/dynamic_map.h"
#include "storage/dynamic_default.h"

#include <algorithm>
#include <cstring>

#include "core/checkpoint.h"
#include "core/errors.h"
#include "core/parallel.h"

namespace embshard {

namespace {
constexpr uint64_t kMagic = 0x314e5944424d45ull;  // "EMBDYN1"
constexpr uint64_t kVersion = 1;
}  // namespace

DynamicMap::DynamicMap(const DynamicSpec& spec) : spec_(spec) {
  if (spec.capacity == 0) fail("INVALID_CONFIG", "capacity must be at least 1");
  if (spec.minCount == 0) fail("INVALID_CONFIG", "admission.minCount must be at least 1");
  if (spec.minCount > 1 && spec.candidates == 0) fail("INVALID_CONFIG", "admission.candidates must be at least 1");
  const size_t C = spec.capacity;
  id_.assign(C, 0);
  meta_.assign(C, Meta{});
  index_.reset(C);
  if (spec.eviction == Eviction::Lru) recency_.reset(spec.capacity);
  if (spec.minCount > 1) {
    cid_.assign(spec.candidates, 0);
    ccount_.assign(spec.candidates, 0);
    clast_.assign(spec.candidates, 0);
    cfree_.reserve(spec.candidates);
    for (uint32_t i = spec.candidates; i-- > 0;) cfree_.push_back(i);
    pendingIndex_.reset(spec.candidates);
  }
}

HeapEntry DynamicMap::key_of(uint32_t s) const {
  return HeapEntry{spec_.eviction == Eviction::Lfu ? meta_[s].count : 0, meta_[s].last, s};
}

bool DynamicMap::live(const HeapEntry& e) const {
  const HeapEntry k = key_of(e.index);
  return k.k1 == e.k1 && k.k2 == e.k2;
}

uint32_t DynamicMap::take_slot(Admitted& admitted) {
  if (size_ < spec_.capacity) return size_++;
  if (spec_.eviction == Eviction::Lru) {
    // rows used in this step were all moved behind the others: the oldest is unused unless all are used
    const uint32_t s = recency_.front();
    if (meta_[s].used == step_) return IdIndex::kNone;
    recency_.unlink(s);
    index_.erase(id_[s]);
    ++stats_.evictions;
    admitted.evictedSlots.push_back(s);
    admitted.evictedIds.push_back(id_[s]);
    return s;
  }
  while (!heap_.empty()) {
    HeapEntry e = heap_.pop();
    if (!live(e)) {
      heap_.push(key_of(e.index));  // keys only grow: re-queue with the current one
      continue;
    }
    if (meta_[e.index].used == step_) {
      aside_.push_back(e);  // used in this step: never evicted
      continue;
    }
    index_.erase(id_[e.index]);
    ++stats_.evictions;
    admitted.evictedSlots.push_back(e.index);
    admitted.evictedIds.push_back(id_[e.index]);
    return e.index;
  }
  return IdIndex::kNone;
}

void DynamicMap::occupy(uint32_t s, uint64_t id, uint64_t count, Admitted& admitted) {
  id_[s] = id;
  meta_[s].count = count;
  meta_[s].last = ++tick_;
  meta_[s].used = step_;
  index_.put(id, s);
  if (spec_.eviction == Eviction::Lru) recency_.push_back(s);
  else heap_.push(key_of(s));
  ++stats_.admissions;
  admitted.slots.push_back(s);
  admitted.ids.push_back(id);
}

void DynamicMap::init_rows(Admitted& admitted) const {
  const uint64_t D = spec_.dim;
  admitted.values.resize(admitted.ids.size() * D);
  parallel_for(static_cast<int64_t>(admitted.ids.size()), 64, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) init_row(spec_, admitted.ids[k], admitted.values.data() + k * D);
  });
}

void DynamicMap::sight(uint64_t id) {
  uint32_t c = pendingIndex_.find(id);
  if (c == IdIndex::kNone) {
    while (cfree_.empty()) {  // full: forget the candidate sighted longest ago
      HeapEntry e = pendingHeap_.pop();
      if (ccount_[e.index] != 0 && clast_[e.index] == e.k2) forget_candidate(cid_[e.index]);
    }
    c = cfree_.back();
    cfree_.pop_back();
    cid_[c] = id;
    ccount_[c] = 0;
    pendingIndex_.put(id, c);
  }
  ++ccount_[c];
  clast_[c] = tick_;
  pendingHeap_.push(HeapEntry{0, tick_, c});
  if (pendingHeap_.size() > 4 * static_cast<size_t>(spec_.candidates) + 64)
    pendingHeap_.compact([&](const HeapEntry& e) { return ccount_[e.index] != 0 && clast_[e.index] == e.k2; });
}

void DynamicMap::forget_candidate(uint64_t id) {
  const uint32_t c = pendingIndex_.find(id);
  if (c == IdIndex::kNone) return;
  pendingIndex_.erase(id);
  ccount_[c] = 0;
  cfree_.push_back(c);
}

std::vector<int64_t> feature_id_counts(const int32_t* lengths, int64_t F, int64_t B, int64_t n) {
  std::vector<int64_t> counts(static_cast<size_t>(F), 0);
  int64_t total = 0;
  for (int64_t f = 0; f < F; ++f) {
    for (int64_t b = 0; b < B; ++b) {
      const int32_t len = lengths[f * B + b];
      if (len < 0) fail("NEGATIVE_LENGTH", "batch.lengths[%lld] is negative (%d)", static_cast<long long>(f * B + b), len);
      counts[static_cast<size_t>(f)] += len;
    }
    total += counts[static_cast<size_t>(f)];
  }
  if (total != n)
    fail("LENGTH_MISMATCH", "the lengths sum to %lld but the batch has %lld ids", static_cast<long long>(total), static_cast<long long>(n));
  return counts;
}

void DynamicMap::translate(const RawIds& ids, const int32_t* lengths, int64_t F, int64_t B, const uint8_t* mine,
                           int64_t* out, Admitted& admitted) {
  // every check first: nothing changes on a bad batch
  const std::vector<int64_t> count = feature_id_counts(lengths, F, B, ids.n);
  int64_t own = 0;
  for (int64_t f = 0; f < F; ++f)
    if (mine[f]) own += count[static_cast<size_t>(f)];

  ++step_;
  fresh_.reset(static_cast<uint64_t>(own));
  freshIds_.clear();
  freshOcc_.clear();
  // pass 1: hits touch their row, misses are counted (and sighted as candidates)
  int64_t pos = 0;
  for (int64_t f = 0; f < F; ++f) {
    const int64_t len = count[static_cast<size_t>(f)];
    if (!mine[f]) {
      pos += len;
      continue;
    }
    constexpr int64_t kAhead = 16;
    for (int64_t i = pos; i < pos + len; ++i) {
      if (i + kAhead < pos + len) index_.prefetch(ids.at(i + kAhead));
      const uint64_t id = ids.at(i);
      ++tick_;
      const uint32_t s = index_.find(id);
      if (s != IdIndex::kNone) {
        ++stats_.hits;
        Meta& m = meta_[s];
        if (spec_.eviction == Eviction::Lru && m.used != step_) {
          recency_.unlink(s);  // back in, by last use, once the step's hits are known
          touched_.push_back(s);
        }
        ++m.count;
        m.last = tick_;
        m.used = step_;
        out[i] = s;
        continue;
      }
      ++stats_.misses;
      out[i] = -1;
      const uint32_t k = fresh_.find(id);
      if (k == IdIndex::kNone) {
        fresh_.put(id, static_cast<uint32_t>(freshIds_.size()));
        freshIds_.push_back(id);
        freshOcc_.push_back(1);
      } else {
        ++freshOcc_[k];
      }
      if (spec_.minCount > 1) sight(id);
    }
    pos += len;
  }
  // LRU: the rows hit in this step go back behind the others, in order of last use; the front of the
  // list is then the coldest row not used in this step (admissions below get later ticks still)
  if (spec_.eviction == Eviction::Lru) {
    std::sort(touched_.begin(), touched_.end(), [&](uint32_t a, uint32_t b) { return meta_[a].last < meta_[b].last; });
    for (uint32_t s : touched_) recency_.push_back(s);
    touched_.clear();
  }
  // pass 2: admissions in order of first occurrence
  aside_.clear();
  for (size_t k = 0; k < freshIds_.size(); ++k) {
    const uint64_t id = freshIds_[k];
    uint64_t seen = freshOcc_[k];
    if (spec_.minCount > 1) {
      const uint32_t c = pendingIndex_.find(id);
      seen = c == IdIndex::kNone ? 0 : ccount_[c];
    }
    if (seen < spec_.minCount) continue;
    const uint32_t s = take_slot(admitted);
    if (s == IdIndex::kNone) break;  // every row is used by this step
    if (spec_.minCount > 1) forget_candidate(id);
    occupy(s, id, seen, admitted);
  }
  for (const HeapEntry& e : aside_) heap_.push(e);
  aside_.clear();
  init_rows(admitted);
  // pass 3: misses read their new slot, or the sink
  pos = 0;
  for (int64_t f = 0; f < F; ++f) {
    const int64_t len = count[static_cast<size_t>(f)];
    if (mine[f])
      for (int64_t i = pos; i < pos + len; ++i) {
        if (out[i] >= 0) continue;
        const uint32_t s = index_.find(ids.at(i));
        if (s == IdIndex::kNone) {
          out[i] = sink();
          ++admitted.sinkIds;
        } else {
          out[i] = s;
        }
      }
    pos += len;
  }
}

void DynamicMap::lookup(const RawIds& ids, int64_t* slots) const {
  for (int64_t i = 0; i < ids.n; ++i) {
    const uint32_t s = index_.find(ids.at(i));
    slots[i] = s == IdIndex::kNone ? sink() : s;
  }
}

void DynamicMap::rebuild_order() {
  heap_.clear();
  if (spec_.eviction == Eviction::Lru) {
    std::vector<uint32_t> order(size_);
    for (uint32_t s = 0; s < size_; ++s) order[s] = s;
    std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return meta_[a].last < meta_[b].last; });
    for (uint32_t s : order) recency_.push_back(s);
  } else {
    for (uint32_t s = 0; s < size_; ++s) heap_.push(key_of(s));
  }
  pendingHeap_.clear();
  for (uint32_t c = 0; c < cid_.size(); ++c)
    if (ccount_[c] != 0) pendingHeap_.push(HeapEntry{0, clast_[c], c});
}

// ---- checkpoint form: header words, then per slot (id, count, last), then per candidate (id, count,
// last), then the CRC-32C of everything before it ----

std::vector<uint8_t> DynamicMap::serialize() const {
  std::vector<uint64_t> w = {kMagic,           kVersion,       spec_.capacity,    spec_.minCount,     spec_.candidates,
                             static_cast<uint64_t>(spec_.eviction), spec_.dim, tick_, step_, size_,
                             stats_.hits,      stats_.misses,  stats_.admissions, stats_.evictions,   pendingIndex_.size()};
  for (uint32_t s = 0; s < size_; ++s) w.insert(w.end(), {id_[s], meta_[s].count, meta_[s].last});
  for (uint32_t c = 0; c < cid_.size(); ++c)
    if (ccount_[c] != 0) w.insert(w.end(), {cid_[c], ccount_[c], clast_[c]});
  std::vector<uint8_t> out(w.size() * 8 + 4);
  std::memcpy(out.data(), w.data(), w.size() * 8);
  const uint32_t crc = crc32c(0, out.data(), w.size() * 8);
  std::memcpy(out.data() + w.size() * 8, &crc, 4);
  return out;
}

void DynamicMap::deserialize(const uint8_t* data, size_t n) {
  constexpr size_t kHeader = 15;
  if (n < kHeader * 8 + 4 || (n - 4) % 8 != 0) fail("CHECKPOINT_CORRUPT", "dynamic table map: %zu bytes is not a map", n);
  uint32_t crc;
  std::memcpy(&crc, data + n - 4, 4);
  if (crc32c(0, data, n - 4) != crc) fail("CHECKPOINT_CORRUPT", "dynamic table map: checksum mismatch (truncated or altered)");
  std::vector<uint64_t> w((n - 4) / 8);
  std::memcpy(w.data(), data, n - 4);
  if (w[0] != kMagic || w[1] != kVersion) fail("CHECKPOINT_CORRUPT", "dynamic table map: not an embshard v1 map");
  if (w[2] != spec_.capacity || w[3] != spec_.minCount || w[4] != spec_.candidates || w[5] != static_cast<uint64_t>(spec_.eviction) ||
      w[6] != spec_.dim)
    fail("CHECKPOINT_CORRUPT", "dynamic table map: written for another capacity / admission / eviction / dim");
  const uint64_t size = w[9], pending = w[14];
  if (size > spec_.capacity || pending > spec_.candidates || w.size() != kHeader + 3 * (size + pending))
    fail("CHECKPOINT_CORRUPT", "dynamic table map: %llu rows and %llu candidates do not fit its size",
         static_cast<unsigned long long>(size), static_cast<unsigned long long>(pending));
  DynamicMap m(spec_);
  m.tick_ = w[7];
  m.step_ = w[8];
  m.size_ = static_cast<uint32_t>(size);
  m.stats_ = DynamicStats{w[10], w[11], w[12], w[13]};
  const uint64_t* p = w.data() + kHeader;
  for (uint32_t s = 0; s < size; ++s, p += 3) {
    if (m.index_.find(p[0]) != IdIndex::kNone) fail("CHECKPOINT_CORRUPT", "dynamic table map: an id is held twice");
    m.id_[s] = p[0];
    m.meta_[s].count = p[1];
    m.meta_[s].last = p[2];
    m.index_.put(p[0], s);
  }
  for (uint64_t k = 0; k < pending; ++k, p += 3) {
    if (p[1] == 0 || m.pendingIndex_.find(p[0]) != IdIndex::kNone)
      fail("CHECKPOINT_CORRUPT", "dynamic table map: a candidate is listed twice or with no sightings");
    const uint32_t c = m.cfree_.back();
    m.cfree_.pop_back();
    m.cid_[c] = p[0];
    m.ccount_[c] = p[1];
    m.clast_[c] = p[2];
    m.pendingIndex_.put(p[0], c);
  }
  m.rebuild_order();
  *this = std::move(m);
}

}  // namespace embshard
