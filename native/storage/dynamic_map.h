// dynamic_map.h — the id map of a dynamic table (rows: 'dynamic'): raw 64-bit ids to the slots of an
// in-memory table of `capacity` rows, with admission after `minCount` sightings (a bounded map of
// candidate ids and their counts), LRU or LFU eviction that never takes a row the current step uses, and
// the init values of newly admitted rows (a pure function of the id). The engine then runs unchanged on
// the slot table; slot `capacity` is the sink that ids not (yet) held read (zero; with a hashed default
// their init row is added to the outputs afterwards, storage/dynamic_default.h) and whose gradient is
// dropped. The rules, exactly (docs/storage.md, "Dynamic tables"):
//   every occurrence of an id in the step (features in batch order, bags in order) advances the tick;
//   a held id: hit, its count + 1, its last use = tick; an absent id: miss, and when minCount > 1 it is
//   sighted as a candidate (count + 1, last sighting = tick; when `candidates` are tracked, the one seen
//   longest ago is forgotten first). Then each absent id, in order of first occurrence, whose sightings
//   reach minCount (minCount 1: its occurrences this step) is admitted: a free slot, or the coldest row
//   not used in this step (LRU: oldest last use; LFU: lowest count, then oldest last use) is evicted;
//   when every row is used in this step, it is not admitted. Admission sets count = sightings, last use
//   = a fresh tick. The map is not thread-safe; its owner serialises calls.
#pragma once
#include <cstdint>
#include <vector>

#include "core/types.h"
#include "storage/dynamic_index.h"

namespace embshard {

enum class Eviction : uint8_t { Lru = 0, Lfu = 1 };

struct DynamicSpec {
  uint32_t capacity = 0;
  uint32_t minCount = 1;
  uint32_t candidates = 0;  // candidate ids tracked when minCount > 1
  Eviction eviction = Eviction::Lru;
  uint32_t dim = 0;
  InitSpec init;
  uint64_t seed = 0;
  uint64_t table = 0;  // the table's index: a stream of the init hash
  DType dtype = DType::F32;  // the slot table's dtype (defaults are read as it stores them)
  bool hashedDefault = false;  // ids without a row read their init row (storage/dynamic_default.h), not zero
};

struct DynamicStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t admissions = 0;
  uint64_t evictions = 0;
};

// Raw ids of one batch: any of the batch id types (64-bit ones are taken as their 64 bits).
struct RawIds {
  const void* data = nullptr;
  IdType type = IdType::I64;
  int64_t n = 0;
  uint64_t at(int64_t i) const {
    switch (type) {
      case IdType::I64: return static_cast<uint64_t>(static_cast<const int64_t*>(data)[i]);
      case IdType::I32: return static_cast<uint64_t>(static_cast<int64_t>(static_cast<const int32_t*>(data)[i]));
      case IdType::U32: return static_cast<const uint32_t*>(data)[i];
    }
    return 0;
  }
};

// What one step admitted: the rows the engine must initialise (slots, init values [n × dim]).
struct Admitted {
  std::vector<int64_t> slots;
  std::vector<uint64_t> ids;
  std::vector<float> values;
  uint64_t sinkIds = 0;  // occurrences that read the sink (not held after admission)
  // rows evicted to make room (their slot is one of `slots`; read them before the admitted rows land)
  std::vector<int64_t> evictedSlots;
  std::vector<uint64_t> evictedIds;
};

// The number of ids of each of a batch's F features (lengths [F*B], feature-major): NEGATIVE_LENGTH for a
// negative length, LENGTH_MISMATCH unless they sum to the batch's n ids.
std::vector<int64_t> feature_id_counts(const int32_t* lengths, int64_t F, int64_t B, int64_t n);

class DynamicMap {
 public:
  explicit DynamicMap(const DynamicSpec& spec);

  const DynamicSpec& spec() const { return spec_; }
  const DynamicStats& stats() const { return stats_; }
  uint32_t size() const { return size_; }
  uint64_t candidates() const { return pendingIndex_.size(); }
  int64_t sink() const { return spec_.capacity; }

  // Checks a batch's lengths (feature_id_counts) and then translates the ids
  // of the batch features where `mine[f]` is set into slots in `out` (other positions untouched).
  // Throws NEGATIVE_LENGTH / LENGTH_MISMATCH before changing anything.
  void translate(const RawIds& ids, const int32_t* lengths, int64_t F, int64_t B, const uint8_t* mine, int64_t* out,
                 Admitted& admitted);
  // Slots of ids (the sink for ids not held); changes nothing.
  void lookup(const RawIds& ids, int64_t* slots) const;
  // The held ids by slot [size()].
  const std::vector<uint64_t>& ids() const { return id_; }

  // The whole map (ids, counts, last uses, candidates, tick, stats) with a CRC-32C; the reverse checks
  // it (CHECKPOINT_CORRUPT) and that it was written for the same capacity / admission / eviction.
  std::vector<uint8_t> serialize() const;
  void deserialize(const uint8_t* data, size_t n);

 private:
  HeapEntry key_of(uint32_t s) const;
  bool live(const HeapEntry& e) const;
  // A slot for a new id: a free one, else the coldest row not used in step `step` (listed as evicted);
  // kNone when none.
  uint32_t take_slot(Admitted& admitted);
  void occupy(uint32_t s, uint64_t id, uint64_t count, Admitted& admitted);
  void init_rows(Admitted& admitted) const;  // values of the admitted rows, in parallel
  void sight(uint64_t id);
  void forget_candidate(uint64_t id);
  void rebuild_order();

  DynamicSpec spec_;
  DynamicStats stats_;
  uint64_t tick_ = 0;
  uint64_t step_ = 0;
  uint32_t size_ = 0;
  // per slot
  // per slot: its id, and what a hit updates kept together (one cache line per touch)
  struct Meta {
    uint64_t count = 0;
    uint64_t last = 0;  // tick of the last use
    uint64_t used = 0;  // the step that last used it
  };
  std::vector<uint64_t> id_;
  std::vector<Meta> meta_;
  std::vector<uint32_t> touched_;  // LRU: rows used in this step, out of the recency list until it ends
  IdIndex index_;
  RecencyList recency_;  // LRU: rows not used in this step by last use, oldest first
  LazyHeap heap_;        // LFU: rows by (count, last use)
  std::vector<HeapEntry> aside_;  // rows used in this step, popped while looking for a victim
  // candidates (minCount > 1)
  std::vector<uint64_t> cid_, ccount_, clast_;
  std::vector<uint32_t> cfree_;
  IdIndex pendingIndex_;
  LazyHeap pendingHeap_;
  // per step scratch: absent ids in order of first occurrence and their occurrences
  IdIndex fresh_;
  std::vector<uint64_t> freshIds_;
  std::vector<uint64_t> freshOcc_;
};

}  // namespace embshard
