// scheduler.h — Herald's embedding scheduler, host code: per global batch the location-aware sample
// allocation (or the score of a given placement) and the step's communication plan over every rank's
// simulated LRU caches (the rules are documented in lib/herald/scheduler.ts, which drives this class).
// State: which rows are checked out into which rank's cache (and its slot), each (rank, table) cache's
// recency order and its free slots. A call validates every id before any state changes. With `undo`, each
// step's changes are recorded until commit() drops the oldest step's record, or rollback() restores the
// state before every step not committed (a step the ranks refused).
#pragma once
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "core/types.h"
#include "herald/rank_view.h"
#include "storage/dynamic_index.h"

namespace embshard::herald {

struct TableInfo {
  int64_t rows;
  int32_t dim;
  int32_t stateWidth;
  int32_t slots;  // cache slots per rank
  const char* name;
};

// One feature of the global batch: its table, its G lengths and its ids.
struct FeatureSpan {
  int32_t table;
  const int32_t* lengths;
  const void* ids;
  IdType idType;
  int64_t n;
};

struct StepOut {
  std::vector<int32_t> samples;  // W × B
  std::vector<uint8_t> xMove;
  std::vector<double> xKey;
  std::vector<int32_t> xTable, xFrom, xTo, xFromId, xToId;
  std::vector<int32_t> gTable, gFrom, gTo, gToId, gPos;
  std::vector<double> readRows;  // rows per (rank, table), concatenated
  std::vector<int32_t> readLoc;
  std::vector<int32_t> readStart;  // W × T + 1
  // moves, evictions, copies, grads, rows, bytes, reads, hits, score
  double counts[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
  // the view of the scheduler's rank (rank_view.h), when it was given one
  bool hasView = false;
  RankView view;
};

// The rank whose view (rank_view.h) every schedule computes too, and what that view needs of the layout of
// the pooled output: its width and the column of each table's first feature. rank −1: none (counting only).
struct ViewSpec {
  int32_t rank = -1;
  int32_t pooledDim = 0;
  std::vector<int32_t> cols;
};

class Scheduler {
 public:
  Scheduler(int32_t world, int32_t batchSize, std::vector<TableInfo> tables, std::vector<std::string> names, ViewSpec view = {}, bool undo = false);

  // Schedules one global batch of world × batchSize samples. `assign` (G ranks, or null) is a given placement
  // (random allocation); null runs the greedy allocator, ties counted from rank step % world.
  void schedule(int64_t step, const std::vector<FeatureSpan>& feats, const int32_t* assign, StepOut& out);

  // With `undo`: forgets the record of the oldest step not committed (its plan was carried out).
  void commit();
  // With `undo`: the state before every step not committed, newest step undone first.
  void rollback();
  // Steps scheduled and not committed (0 without `undo`).
  int32_t pending() const { return static_cast<int32_t>(journals_.size()); }

  int32_t world() const { return W_; }
  int32_t batchSize() const { return B_; }

 private:
  struct Cache;
  // What one step changed, each value as it was before a write: recency links and heads / tails, slot keys,
  // free-stack operations (slot ≥ 0 pushed, −1 − slot popped) and checked-out rows (kNone: absent).
  struct Journal {
    std::vector<std::pair<int32_t*, int32_t>> links;
    std::vector<std::pair<int64_t*, int64_t>> keys;
    std::vector<std::pair<Cache*, int32_t>> frees;
    std::vector<std::pair<uint64_t, uint32_t>> homes;
  };
  struct Cache {  // one (rank, table) cache: slots linked least → most recently used
    std::vector<int64_t> key;
    std::vector<int32_t> prev, next;
    int32_t head = -1, tail = -1;
    std::vector<int32_t> free;
    void unlink(int32_t s, Journal* j);
    void append(int32_t s, int64_t k, Journal* j);
  };

  int64_t lo(int32_t t, int32_t p) const { return lo_[static_cast<size_t>(t) * (W_ + 1) + p]; }
  int32_t ownerOf(int32_t t, int64_t row) const;
  int32_t tableOf(int64_t key) const;
  int32_t slotId(int32_t w, int32_t t, int32_t s) const { return static_cast<int32_t>(lo(t, w + 1) - lo(t, w)) + s; }
  Cache& cache(int32_t w, int32_t t) { return caches_[static_cast<size_t>(w) * T_ + t]; }
  // every cache slot of every rank numbered in one space: the value `home_` maps a checked-out row to
  uint32_t slotKey(int32_t w, int32_t t, int32_t s) const { return cacheBase_[static_cast<size_t>(w) * T_ + t] + static_cast<uint32_t>(s); }

  void plan(int64_t step, const std::vector<FeatureSpan>& feats, const int32_t* assign, StepOut& out);
  // the view rank's view of the step plan() wrote (rank_view.h), when there is a view rank
  void view(StepOut& out) const;
  // the state changes of plan(), recorded in j_ when there is one
  void pushFree(Cache& c, int32_t s);
  int32_t popFree(Cache& c);
  void homePut(uint64_t key, uint32_t slot);
  void homeErase(uint64_t key);
  void undo(const Journal& j);

  int32_t W_, B_, T_;
  ViewSpec viewSpec_;
  std::vector<TableInfo> tables_;
  std::vector<std::string> names_;
  std::vector<int64_t> rowBase_;
  std::vector<int64_t> lo_;
  std::vector<Cache> caches_;
  std::vector<uint32_t> cacheBase_;
  std::vector<int32_t> slotRank_, slotNo_;  // per numbered slot: its rank and its slot in that cache
  IdIndex home_;                            // checked-out row → numbered slot holding it
  IdIndex batchRows_;                       // a step's scratch: key → its distinct row in the batch
  bool undo_;
  std::deque<Journal> journals_;  // the steps not committed, oldest first (references stay valid as it grows)
  Journal* j_ = nullptr;          // the running step's record
};

}  // namespace embshard::herald
