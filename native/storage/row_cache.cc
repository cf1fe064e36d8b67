// row_cache.cc — set-associative slot bookkeeping with LRU / LFU eviction (see row_cache.h).
#include "storage/row_cache.h"

#include <algorithm>

#include "core/errors.h"

namespace embshard::storage {

CacheGeometry cache_geometry(uint64_t cacheBytes, uint64_t slotDataBytes, uint64_t rows, const char* table) {
  const uint64_t maxSlots = cacheBytes / (slotDataBytes + kSlotMetaBytes);
  if (maxSlots == 0)
    fail("INVALID_CONFIG", "table '%s': storage.cacheBytes (%llu) holds no row (one needs %llu bytes)", table,
         static_cast<unsigned long long>(cacheBytes), static_cast<unsigned long long>(slotDataBytes + kSlotMetaBytes));
  CacheGeometry g;
  g.ways = std::min(kMaxWays, maxSlots);
  g.sets = std::min(maxSlots / g.ways, (rows + g.ways - 1) / g.ways);
  g.slots = g.sets * g.ways;
  g.whole = g.slots >= rows;
  return g;
}

RowCache::RowCache(CacheGeometry g, Policy p)
    : g_(g), policy_(p), tag_(g.slots, kEmptySlot), meta_(g.slots), demand_(g.sets, 0) {}

int64_t RowCache::find(uint64_t row) const {
  const uint64_t base = set_of(row) * g_.ways;
  for (uint64_t w = 0; w < g_.ways; ++w)
    if (tag_[base + w] == row) return static_cast<int64_t>(base + w);
  return -1;
}

int64_t RowCache::overflowing_set(const uint64_t* rows, int64_t n, uint64_t* need) {
  int64_t bad = -1;
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t s = set_of(rows[i]);
    if (++demand_[s] > g_.ways && bad < 0) bad = static_cast<int64_t>(s);
  }
  if (bad >= 0) *need = demand_[bad];
  for (int64_t i = 0; i < n; ++i) demand_[set_of(rows[i])] = 0;
  return bad;
}

bool RowCache::colder(uint64_t a, uint64_t b) const {
  if (policy_ == Policy::LFU && meta_[a].uses != meta_[b].uses) return meta_[a].uses < meta_[b].uses;
  return meta_[a].tick < meta_[b].tick;
}

void RowCache::plan(const uint64_t* rows, int64_t n, bool respectPins, CachePlan& out) {
  if (++epoch_ == 0) {  // wrapped: clear the stamps so no slot looks taken by this batch
    for (Meta& m : meta_) m.stamp = 0;
    epoch_ = 1;
  }
  out.slot.assign(static_cast<size_t>(n), -1);
  out.miss.clear();
  out.victim.clear();
  out.victimDirty.clear();
  // the tags of each row's set are loaded a few rows ahead, the record of each slot found while the
  // later finds run; then the hits are stamped and the misses listed
  constexpr int64_t kAhead = 8;
  for (int64_t i = 0; i < std::min(n, kAhead); ++i) prefetch_set(rows[i]);
  for (int64_t i = 0; i < n; ++i) {
    if (i + kAhead < n) prefetch_set(rows[i + kAhead]);
    const int64_t s = find(rows[i]);
    out.slot[i] = s;
    if (s >= 0) __builtin_prefetch(&meta_[s], 1);
  }
  for (int64_t i = 0; i < n; ++i) {
    if (out.slot[i] >= 0) meta_[out.slot[i]].stamp = epoch_;
    else out.miss.push_back(static_cast<uint32_t>(i));
  }
  size_t kept = 0;
  for (size_t m = 0; m < out.miss.size(); ++m) {
    const uint32_t i = out.miss[m];
    const uint64_t base = set_of(rows[i]) * g_.ways;
    int64_t best = -1;
    for (uint64_t w = 0; w < g_.ways; ++w) {
      const uint64_t s = base + w;
      if (meta_[s].stamp == epoch_ || (respectPins && pinned(s))) continue;
      if (tag_[s] == kEmptySlot) {
        best = static_cast<int64_t>(s);
        break;
      }
      if (best < 0 || colder(s, static_cast<uint64_t>(best))) best = static_cast<int64_t>(s);
    }
    if (best < 0) continue;  // best effort: no way free for this row
    meta_[best].stamp = epoch_;
    out.slot[i] = best;
    out.miss[kept++] = i;
    out.victim.push_back(tag_[best]);
    out.victimDirty.push_back(tag_[best] != kEmptySlot && meta_[best].dirty);
  }
  out.miss.resize(kept);
}

void RowCache::commit(const uint64_t* rows, const CachePlan& p, bool use) {
  ++clock_;
  for (size_t m = 0; m < p.miss.size(); ++m) {
    const int64_t s = p.slot[p.miss[m]];
    tag_[s] = rows[p.miss[m]];
    meta_[s].dirty = 0;
    meta_[s].uses = 0;
    meta_[s].tick = clock_;
  }
  if (!use) return;
  for (int64_t s : p.slot) {
    if (s < 0) continue;
    meta_[s].tick = clock_;
    ++meta_[s].uses;
  }
}

void RowCache::pin(const CachePlan& p) {
  if (++pinEpoch_ == 0) {
    for (Meta& m : meta_) m.pin = 0;
    pinEpoch_ = 1;
  }
  for (int64_t s : p.slot)
    if (s >= 0) meta_[s].pin = pinEpoch_;
}

}  // namespace embshard::storage
