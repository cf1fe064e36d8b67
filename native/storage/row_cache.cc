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
  return g;
}

RowCache::RowCache(CacheGeometry g, Policy p)
    : g_(g), policy_(p), tag_(g.slots, kEmptySlot), tick_(g.slots, 0), uses_(g.slots, 0), stamp_(g.slots, 0),
      pin_(g.slots, 0), dirty_(g.slots, 0), demand_(g.sets, 0) {}

int64_t RowCache::find(uint64_t row) const {
  const uint64_t base = (row % g_.sets) * g_.ways;
  for (uint64_t w = 0; w < g_.ways; ++w)
    if (tag_[base + w] == row) return static_cast<int64_t>(base + w);
  return -1;
}

int64_t RowCache::overflowing_set(const uint64_t* rows, int64_t n, uint64_t* need) {
  int64_t bad = -1;
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t s = rows[i] % g_.sets;
    if (++demand_[s] > g_.ways && bad < 0) bad = static_cast<int64_t>(s);
  }
  if (bad >= 0) *need = demand_[bad];
  for (int64_t i = 0; i < n; ++i) demand_[rows[i] % g_.sets] = 0;
  return bad;
}

bool RowCache::colder(uint64_t a, uint64_t b) const {
  if (policy_ == Policy::LFU && uses_[a] != uses_[b]) return uses_[a] < uses_[b];
  return tick_[a] < tick_[b];
}

void RowCache::plan(const uint64_t* rows, int64_t n, bool respectPins, CachePlan& out) {
  if (++epoch_ == 0) {  // wrapped: clear the stamps so no slot looks taken by this batch
    std::fill(stamp_.begin(), stamp_.end(), 0u);
    epoch_ = 1;
  }
  out.slot.assign(static_cast<size_t>(n), -1);
  out.miss.clear();
  out.victim.clear();
  out.victimDirty.clear();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = find(rows[i]);
    if (s >= 0) {
      out.slot[i] = s;
      stamp_[s] = epoch_;
    } else {
      out.miss.push_back(static_cast<uint32_t>(i));
    }
  }
  size_t kept = 0;
  for (size_t m = 0; m < out.miss.size(); ++m) {
    const uint32_t i = out.miss[m];
    const uint64_t base = (rows[i] % g_.sets) * g_.ways;
    int64_t best = -1;
    for (uint64_t w = 0; w < g_.ways; ++w) {
      const uint64_t s = base + w;
      if (stamp_[s] == epoch_ || (respectPins && pinned(s))) continue;
      if (tag_[s] == kEmptySlot) {
        best = static_cast<int64_t>(s);
        break;
      }
      if (best < 0 || colder(s, static_cast<uint64_t>(best))) best = static_cast<int64_t>(s);
    }
    if (best < 0) continue;  // best effort: no way free for this row
    stamp_[best] = epoch_;
    out.slot[i] = best;
    out.miss[kept++] = i;
    out.victim.push_back(tag_[best]);
    out.victimDirty.push_back(tag_[best] != kEmptySlot && dirty_[best]);
  }
  out.miss.resize(kept);
}

void RowCache::commit(const uint64_t* rows, const CachePlan& p, bool use) {
  ++clock_;
  for (size_t m = 0; m < p.miss.size(); ++m) {
    const int64_t s = p.slot[p.miss[m]];
    tag_[s] = rows[p.miss[m]];
    dirty_[s] = 0;
    uses_[s] = 0;
    tick_[s] = clock_;
  }
  if (!use) return;
  for (int64_t s : p.slot) {
    if (s < 0) continue;
    tick_[s] = clock_;
    ++uses_[s];
  }
}

void RowCache::pin(const CachePlan& p) {
  if (++pinEpoch_ == 0) {
    std::fill(pin_.begin(), pin_.end(), 0u);
    pinEpoch_ = 1;
  }
  for (int64_t s : p.slot)
    if (s >= 0) pin_[s] = pinEpoch_;
}

}  // namespace embshard::storage
