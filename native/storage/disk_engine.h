// disk_engine.h — a collection with disk-backed tables. It is an Engine over an inner engine (the
// CpuEngine, or the CUDA engine: the cache then lives in device memory) in which every disk-backed table
// is replaced by its cache (a table of `slots` rows, state included); memory tables stay as they are. Before forward / backward the batch's distinct rows of each
// disk table are staged into the cache (disk_table.h) and the batch's ids are rewritten to cache slots,
// then the CPU kernels run unchanged: every row sees the same values, contributions and update order
// as in memory, so results are bitwise those of the in-memory collection. Row, state and raw access
// reach rows wherever they are (checkpoints read and write the tables through them).
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "core/engine.h"
#include "cpu/cpu_engine.h"
#include "storage/disk_table.h"

namespace embshard::storage {

// Makes the inner engine for the caches' spec (make_cpu_engine, or a CUDA engine on one device).
using InnerEngineFactory = std::function<std::unique_ptr<Engine>(const CollectionSpec&, const Layout&, bool initialize)>;

class DiskEngine : public Engine {
 public:
  // disk[t]: the storage of table t, or null for a memory table (at least one is disk-backed).
  DiskEngine(const CollectionSpec& spec, const Layout& layout, const std::vector<std::unique_ptr<DiskStorageSpec>>& disk,
             bool initialize, const InnerEngineFactory& makeInner);
  std::string device() const override { return inner_->device(); }
  // Ids are resolved by prepare_batch (staging needs the rows); kernel times are the inner engine's.
  EngineCapabilities capabilities() const override {
    return EngineCapabilities{/*resolvesIds=*/false, /*kernelTimes=*/inner_->capabilities().kernelTimes,
                              /*outputsOnDevice=*/inner_->capabilities().outputsOnDevice};
  }
  KernelTimes kernel_times() const override { return inner_->kernel_times(); }
  PhaseTimes backward_phases() const override { return inner_->backward_phases(); }

  void forward(const PreparedBatch& b, float* pooled, float* const* seq) override;
  BackwardResult backward(const PreparedBatch& b, const float* pooledGrad, const float* const* seqGrad) override;
  // The inner engine's device calls on the staged batch (an inner CUDA engine: its caches live in device memory).
  void forward_device(const PreparedBatch& b, float* pooled, float* seq) override;
  BackwardResult backward_device(const PreparedBatch& b, const float* pooledGrad, const float* seqGrad) override;

  void read_rows(uint32_t table, const uint64_t* rows, int64_t n, float* out) override;
  void write_rows(uint32_t table, const uint64_t* rows, int64_t n, const float* values) override;
  void read_state(uint32_t table, const uint64_t* rows, int64_t n, float* out) override;
  void write_state(uint32_t table, const uint64_t* rows, int64_t n, const float* values) override;
  void read_raw(Arena a, uint64_t offset, uint64_t bytes, void* dst) override;
  void write_raw(Arena a, uint64_t offset, uint64_t bytes, const void* src) override;

  // Stages a batch's rows ahead of its step (best effort: never evicts the rows of the last forward
  // awaiting its backward, and leaves out rows that find no free way).
  void prefetch(const PreparedBatch& b);
  // Writes every dirty row back and syncs the files.
  void flush();
  // Per table (null entries for memory tables).
  std::vector<const DiskTable*> disk_tables() const;
  // Bytes of the cache data and bookkeeping held in memory (all disk tables).
  uint64_t cache_bytes() const;

 private:
  // The batch's rows made resident (pinned until the backward), then `inner` runs on the rewritten batch.
  template <typename F>
  void staged_forward(const PreparedBatch& b, F&& inner);
  // The forward's staged rows reused (or the batch staged again), `inner` applied, touched slots marked dirty.
  template <typename F>
  BackwardResult staged_backward(const PreparedBatch& b, F&& inner);

  // Distinct rows per disk table, checked, staged; ids_ rewritten and inner_ batch built. pin: the rows
  // stay until the next backward (prefetch will not evict them).
  void stage_batch(const PreparedBatch& b, bool pin);
  // The distinct rows of each disk table in the batch, sorted (into uniq_), and each id's (posIdx_, rank_).
  void collect(const PreparedBatch& b);
  void sync_inner();
  template <typename F>
  void walk_raw(Arena a, uint64_t offset, uint64_t bytes, F&& fn) const;

  std::unique_ptr<Engine> inner_;
  std::vector<std::unique_ptr<DiskTable>> disk_;  // per table; null for memory tables
  std::vector<uint32_t> featureTable_;            // collection feature -> table
  // per disk table: distinct rows of the batch (sorted) and their slots
  std::vector<std::vector<uint64_t>> uniq_;
  std::vector<std::vector<int64_t>> slots_;
  std::vector<std::vector<uint32_t>> rank_;  // first-seen index -> place in uniq_
  std::vector<int64_t> ids_;  // the batch's ids rewritten to inner rows
  // collect()'s scratch: per id its first-seen index; the hash table; distinct rows in first-seen order
  std::vector<uint32_t> posIdx_, hval_;
  std::vector<uint64_t> hkey_, first_;
  std::vector<uint64_t> sortKeys_, tmpKeys_;  // radix sort of (row, first-seen index) pairs
  std::vector<uint32_t> sortVals_, tmpVals_;
  PreparedBatch inner_batch_;
  uint64_t stagedSerial_ = 0;  // serial of the forward's batch whose slots are staged and pinned (0: none)
};

// The inner CPU engine's spec: disk-backed tables get `slots` rows (the geometry of their cache).
CollectionSpec cache_spec(const CollectionSpec& spec, const std::vector<std::unique_ptr<DiskTable>>& disk);

}  // namespace embshard::storage
