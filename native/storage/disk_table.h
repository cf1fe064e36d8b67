// disk_table.h — one disk-backed table: its record file (table_file.h), its cache bookkeeping
// (row_cache.h) and the cache's data, which is an engine's storage of a table of `slots` rows (weights in
// the table dtype, fp32 state), reached through a SlotStore: host memory of the CPU engine, or any
// engine's row access (the CUDA engine: the cache in device memory). stage() makes a batch's distinct rows resident (dirty
// victims written back first, misses read in parallel) and gives their slots; the rest reads and
// writes rows wherever they are (cache or file) without changing what is cached.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/types.h"
#include "storage/row_cache.h"
#include "storage/table_file.h"

namespace embshard::storage {

// The cache data of one table: rows (storage dtype) and state (fp32) of slots, gathered / scattered.
class SlotStore {
 public:
  virtual ~SlotStore() = default;
  // w: [n × rowBytes], s: [n × statePerRow]
  virtual void get(const int64_t* slots, int64_t n, uint8_t* w, float* s) = 0;
  virtual void put(const int64_t* slots, int64_t n, const uint8_t* w, const float* s) = 0;
};

struct DiskStorageSpec {
  std::string file;        // the table file
  uint64_t cacheBytes = 0;
  Policy policy = Policy::LRU;
};

// Counters since the table was made (rows are distinct rows of a batch).
struct DiskStats {
  uint64_t hits = 0, misses = 0, evictions = 0, writebacks = 0, prefetched = 0;
  uint64_t bytesRead = 0, bytesWritten = 0;
};

// How a never-written row reads: the table's initial values (fresh table) or zeros (before a load).
struct RowInit {
  InitSpec init;
  uint64_t seed = 0;
  uint32_t table = 0;  // index in the collection (the init counter)
  bool initialize = true;
};

class DiskTable {
 public:
  DiskTable(const TableSpec& ts, uint64_t statePerRow, uint32_t optimizer, const DiskStorageSpec& s, RowInit init);

  uint64_t slots() const { return cache_.geometry().slots; }
  const RecordLayout& records() const { return file_.layout(); }
  // Where the cache data lives (set once the engine that holds it exists).
  void attach(std::unique_ptr<SlotStore> store) { store_ = std::move(store); }

  // The first error a batch of these distinct rows would meet before any change: a set of the cache
  // the rows overflow (INVALID_CONFIG naming storage.cacheBytes) or a damaged file (CHECKPOINT_CORRUPT).
  void check(const uint64_t* rows, int64_t n);
  // Makes the distinct rows resident and writes their slots. prefetch: best effort, pinned slots kept,
  // no use counted. On error the cached rows' values are unchanged (some may have left the cache).
  void stage(const uint64_t* rows, int64_t n, bool prefetch, int64_t* slots);
  void pin_last() { cache_.pin(plan_); }
  void unpin() { cache_.unpin(); }
  void mark_dirty(const int64_t* slots, int64_t n) {
    for (int64_t i = 0; i < n; ++i) cache_.mark_dirty(slots[i]);
  }

  // Rows (fp32 values) and state of any rows, wherever they are; writes go to the cache for resident
  // rows (dirty) and to the file for the others. Duplicate rows in a write: the last wins. A write reads
  // and verifies the records of all its rows first: a damaged one (CHECKPOINT_CORRUPT) fails it before
  // any row changes.
  void read_values(const uint64_t* rows, int64_t n, float* out);
  void write_values(const uint64_t* rows, int64_t n, const float* in);
  void read_state(const uint64_t* rows, int64_t n, float* out);
  void write_state(const uint64_t* rows, int64_t n, const float* in);
  // Bytes [off, off + bytes) of the table as the in-memory arenas lay it out (weights: rows × rowBytes
  // in the dtype; state: rows × statePerRow fp32), for checkpoints.
  void read_raw(bool state, uint64_t off, uint64_t bytes, uint8_t* dst);
  void write_raw(bool state, uint64_t off, uint64_t bytes, const uint8_t* src);

  // Writes every dirty row back, then fdatasync.
  void flush();
  DiskStats stats() const;

 private:
  // Row r's weights (storage dtype) and state into wdst / sdst, from a record.
  void unpack(const uint8_t* rec, bool written, uint64_t row, uint8_t* wdst, float* sdst) const;
  void pack(const uint8_t* w, const float* s, uint8_t* rec) const;
  // Rows [first, first + n) into rowW / rowS (cache first, file otherwise).
  void load_span(uint64_t first, uint64_t n);
  // Walks the spans of rows that bytes [off, off + bytes) of the weights / state cover, each loaded:
  // fn(first row, rows, span bytes at the range, bytes taken, bytes of the range already walked).
  template <typename F>
  void walk_spans(bool state, uint64_t off, uint64_t bytes, F&& fn);
  void store_span(uint64_t first, uint64_t n);
  // The records of the rows that are not resident, read and verified in one batch: vslot_[i] is row i's
  // cache slot or -1, ioRows_ / rec_ / written_ hold the others in order.
  void read_uncached(const uint64_t* rows, int64_t n);
  // Row i of that read into spanW_ / spanS_: from its slot, else from record k (and k moves on).
  void load_row(const uint64_t* rows, int64_t i, int64_t& k);
  // A write of whole weights or whole state of rows (see disk_table.cc).
  template <typename F>
  void overwrite_rows(const uint64_t* rows, int64_t n, F&& put);

  TableSpec spec_;
  RowInit init_;
  TableFile file_;
  RowCache cache_;
  std::unique_ptr<SlotStore> store_;
  CachePlan plan_;
  DiskStats stats_;
  // scratch, reused
  std::vector<uint8_t> rec_, out_, written_;
  std::vector<uint64_t> ioRows_, missRows_;
  std::vector<int64_t> vslot_;
  std::vector<uint8_t> spanW_, tmpW_;
  std::vector<float> spanS_, tmpS_;
};

}  // namespace embshard::storage
