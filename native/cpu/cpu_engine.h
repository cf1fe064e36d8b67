// cpu_engine.h — the CPU backend: fused multi-table storage in host memory and the multi-threaded
// forward / backward+optimizer kernels (forward.cc, backward.cc). The default backend, and the oracle
// the CUDA backend is tested against.
#pragma once
#include <memory>
#include <vector>

#include "core/engine.h"
#include "core/profile.h"
#include "cpu/arena.h"

namespace embshard {

namespace cpu {
// One id's share of the gradient, as the owner-partitioned backward groups them.
struct Contribution {
  uint32_t key;    // global row
  float scale;     // pooling scale
  const float* g;  // gradient row
};

struct GradSource;  // where one batch slot's gradient rows are (backward.cc)

// One id as the owner-partitioned backward scatters it into its row's partition.
struct PartitionEntry {
  uint32_t key;  // global row
  uint32_t pos;  // id position in the batch
  uint32_t bag;
};

// The one contribution to a row no other id of the batch touches, with the row's table (such rows are
// updated in id order, so their tables are not found from sorted keys).
struct SingleContribution {
  uint32_t key;    // global row
  uint32_t table;
  float scale;     // pooling scale
  const float* g;  // gradient row
};

// One thread's scratch for the owner-partitioned backward (backward.cc), kept between calls.
struct PartitionScratch {
  std::vector<uint64_t> seen;          // bitmap of the partition's rows touched (clear between partitions)
  std::vector<uint32_t> pos;           // per row of the partition: its count, then its next sorted slot
  std::vector<Contribution> sorted;    // a work chunk's contributions sorted by row (id order kept)
  std::vector<uint32_t> rows;          // the chunk's touched rows, ascending
  std::vector<uint32_t> runStart;      // each one's first contribution in `sorted` (one past the last at the end)
  std::vector<float> acc;              // one row's summed gradient (widest row)
  std::vector<SingleContribution> single;  // a run of bags' single contributions, in id order
};
}  // namespace cpu

class CpuEngine : public Engine {
 public:
  CpuEngine(const CollectionSpec& spec, const Layout& layout, bool initialize);
  std::string device() const override { return "cpu"; }
  // Forward and backward resolve raw ids themselves, in their own pass over the ids.
  EngineCapabilities capabilities() const override { return EngineCapabilities{/*resolvesIds=*/true, /*kernelTimes=*/false}; }
  PhaseTimes backward_phases() const override { return backwardPhases_; }

  void forward(const PreparedBatch& b, float* pooled, float* const* seq) override;
  BackwardResult backward(const PreparedBatch& b, const float* pooledGrad, const float* const* seqGrad) override;

  void read_rows(uint32_t table, const uint64_t* rows, int64_t n, float* out) override;
  void write_rows(uint32_t table, const uint64_t* rows, int64_t n, const float* values) override;
  void read_state(uint32_t table, const uint64_t* rows, int64_t n, float* out) override;
  void write_state(uint32_t table, const uint64_t* rows, int64_t n, const float* values) override;
  void read_raw(Arena a, uint64_t offset, uint64_t bytes, void* dst) override;
  void write_raw(Arena a, uint64_t offset, uint64_t bytes, const void* src) override;

  uint8_t* table_weights(uint32_t t) const { return weights_.data() + layout_.tables[t].weightOffset; }
  float* table_state(uint32_t t) const {
    return reinterpret_cast<float*>(state_.data()) + layout_.tables[t].stateOffset;
  }

 private:
  void initialize_tables();
  // backward.cc: one update per unique row, contributions grouped by owner partition (collections of
  // at most 2^28 rows) or by a radix sort
  int64_t partitioned_update(const PreparedBatch& b, const cpu::GradSource* grad, const uint32_t* slotTable, int shift, int64_t parts,
                             PhaseTimer& timer);
  template <typename Key>
  int64_t sorted_update(Key* keys, Key* tmpKeys, int64_t N, int bits, PhaseTimer& timer);

  HostArena weights_;
  HostArena state_;
  // backward scratch, reused between calls
  std::vector<uint64_t> keys_, tmpKeys_;     // global row keys (collections over 2^32 rows)
  std::vector<uint32_t> keys32_, tmpKeys32_; // the same, 32-bit
  std::vector<uint32_t> vals_, tmpVals_;     // id positions
  std::vector<const float*> gptr_;           // gradient row of each id
  std::vector<float> gscale_;                // its scale (weight, 1/len for mean)
  std::vector<uint32_t> counts_;             // per (bag chunk, partition): ids, then write cursors
  std::vector<uint32_t> partStart_;          // first contribution of each partition
  std::vector<uint8_t> single_;              // per id: 1 when no other id of the batch touches its row
  std::vector<cpu::PartitionEntry> entries_; // ids grouped by partition, in id order
  std::vector<cpu::PartitionScratch> partScratch_;  // per pool thread
  HostArena gradCopy_;                       // the batch's gradient rows, slot by slot, on huge pages
  PhaseTimes backwardPhases_;                // the last backward's phases (backward_phases)
};

std::unique_ptr<Engine> make_cpu_engine(const CollectionSpec& spec, const Layout& layout, bool initialize);

}  // namespace embshard
