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

class CpuEngine : public Engine {
 public:
  CpuEngine(const CollectionSpec& spec, const Layout& layout, bool initialize);
  std::string device() const override { return "cpu"; }

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
  // backward.cc: sort, then one update per unique row
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
};

std::unique_ptr<Engine> make_cpu_engine(const CollectionSpec& spec, const Layout& layout, bool initialize);

}  // namespace embshard
