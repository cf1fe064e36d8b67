// row_cache.h — the bookkeeping of a disk-backed table's RAM cache: which row each slot holds, which
// slots are dirty, and the eviction policy. Slots form `sets` sets of `ways` ways; row r may live only
// in set set_of(r). Per batch (one call of plan): every row of the batch gets a slot; a miss takes, in
// its set, an empty way if there is one, else the way the policy ranks lowest among those the batch
// does not use (LRU: least recently used batch; LFU: fewest batches used in, then least recent), ties
// to the lowest way. The data (rows and state) lives elsewhere (the CPU engine's arenas); this class
// holds none, so it is tested against a naive model of the same rules.
// Unless the cache covers the whole table, a row's set is its SplitMix64 mix (core/rng.h, salted) scaled
// to [0, sets), not `r % sets`: ids with structure (a stride or an affine scatter sharing a factor with
// `sets`) would crowd a few sets and overflow them at a small fraction of the cache; hashed, they spread
// as random ids do.
#pragma once
#include <cstdint>
#include <vector>

#include "core/rng.h"

namespace embshard::storage {

enum class Policy : uint8_t { LRU = 0, LFU = 1 };

// Bytes of bookkeeping per slot (tag, last use, use count, pin, flags), counted against cacheBytes.
constexpr uint64_t kSlotMetaBytes = 32;
constexpr uint64_t kMaxWays = 16;
constexpr uint64_t kCacheSetSalt = 0x4341434845534554ull;  // "CACHESET"

struct CacheGeometry {
  uint64_t slots = 0, ways = 0, sets = 0;
  bool whole = false;  // the slots cover every row of the table
};

// The set of `row`: ⌊row / ways⌋ when the cache covers the whole table (each set then holds its own
// `ways` rows and nothing is ever evicted), else ⌊mix64(row XOR salt) · sets / 2^64⌋.
inline uint64_t cache_set_of(uint64_t row, const CacheGeometry& g) {
  if (g.whole) return row / g.ways;
  return static_cast<uint64_t>((static_cast<unsigned __int128>(mix64(row ^ kCacheSetSalt)) * g.sets) >> 64);
}

// The most slots of slotDataBytes + kSlotMetaBytes that fit in cacheBytes (never more than a multiple of
// `ways` covering the table's rows); INVALID_CONFIG naming storage.cacheBytes when not even one fits.
CacheGeometry cache_geometry(uint64_t cacheBytes, uint64_t slotDataBytes, uint64_t rows, const char* table);

// A batch's placement: for each of its rows the slot, and for the misses the row each replaced.
struct CachePlan {
  std::vector<int64_t> slot;       // per batch row: its slot (-1: no room, only when best effort)
  std::vector<uint32_t> miss;      // indices of the rows that were not resident
  std::vector<uint64_t> victim;    // per miss: the row its slot held (kEmptySlot when none)
  std::vector<uint8_t> victimDirty;
};

class RowCache {
 public:
  static constexpr uint64_t kEmptySlot = ~uint64_t(0);
  RowCache(CacheGeometry g, Policy p);

  const CacheGeometry& geometry() const { return g_; }
  // Slot holding `row`, or -1.
  int64_t find(uint64_t row) const;
  // The set whose ways the batch's distinct `rows` overflow (more rows than ways), or -1; with *need.
  int64_t overflowing_set(const uint64_t* rows, int64_t n, uint64_t* need);
  // Places the distinct `rows`; nothing takes effect until commit (a plan that is dropped leaves the
  // cache as it was). bestEffort: rows that find no way are left out (slot -1) instead of being
  // impossible (the caller checked overflowing_set). respectPins: pinned slots are never victims.
  void plan(const uint64_t* rows, int64_t n, bool respectPins, CachePlan& out);
  // The plan's data moved: misses now hold their rows (clean); with `use` every placed row counts as
  // used by this batch (a prefetch only places its misses, as most recent, with no use counted).
  void commit(const uint64_t* rows, const CachePlan& p, bool use);
  // Pins the slots of a plan (replacing the previous pins) / releases every pin.
  void pin(const CachePlan& p);
  void unpin() { pinEpoch_ = 0; }
  void mark_dirty(int64_t slot) { meta_[slot].dirty = 1; }
  void mark_clean(int64_t slot) { meta_[slot].dirty = 0; }
  bool dirty(int64_t slot) const { return meta_[slot].dirty != 0; }
  uint64_t tag(int64_t slot) const { return tag_[slot]; }

 private:
  uint64_t set_of(uint64_t row) const { return cache_set_of(row, g_); }
  bool pinned(uint64_t s) const { return pinEpoch_ != 0 && meta_[s].pin == pinEpoch_; }
  // true when slot a ranks below slot b for eviction
  bool colder(uint64_t a, uint64_t b) const;
  // Starts loading the tags of row's set (the way scan of a later find).
  void prefetch_set(uint64_t row) const {
    const uint64_t* t = tag_.data() + set_of(row) * g_.ways;
    __builtin_prefetch(t);
    __builtin_prefetch(t + 8);
  }

  CacheGeometry g_;
  Policy policy_;
  // Tags apart (a find scans a set's ways: two cache lines), everything else a step touches per slot
  // together (one cache line per slot, not one per field).
  std::vector<uint64_t> tag_;
  struct Meta {
    uint64_t tick = 0;   // batch clock of the last use
    uint32_t uses = 0;   // batches used in (LFU)
    uint32_t stamp = 0;  // plan epoch that placed a row here (one row per slot per batch)
    uint32_t pin = 0;
    uint8_t dirty = 0;
  };
  std::vector<Meta> meta_;
  std::vector<uint16_t> demand_;  // per set, scratch of overflowing_set
  uint32_t epoch_ = 0, pinEpoch_ = 0;
  uint64_t clock_ = 0;
};

}  // namespace embshard::storage
