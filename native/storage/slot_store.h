// slot_store.h — the two homes of a disk table's cache data (disk_table.h SlotStore): the CPU engine's
// host arenas (memcpy), or any engine through its row and state access (the CUDA engine: the cache in
// device memory, the table on the host's disk). Both move rows exactly (storage dtype values go through
// fp32 and back unchanged).
#pragma once
#include <cstdint>
#include <vector>

#include "core/engine.h"
#include "storage/disk_table.h"

namespace embshard::storage {

class HostSlots : public SlotStore {
 public:
  HostSlots(uint8_t* weights, float* state, uint64_t rowBytes, uint64_t statePerRow)
      : w_(weights), s_(state), rb_(rowBytes), k_(statePerRow) {}
  void get(const int64_t* slots, int64_t n, uint8_t* w, float* s) override;
  void put(const int64_t* slots, int64_t n, const uint8_t* w, const float* s) override;

 private:
  uint8_t* w_;
  float* s_;
  uint64_t rb_, k_;
};

class EngineSlots : public SlotStore {
 public:
  EngineSlots(Engine& e, uint32_t table) : e_(e), t_(table) {}
  void get(const int64_t* slots, int64_t n, uint8_t* w, float* s) override;
  void put(const int64_t* slots, int64_t n, const uint8_t* w, const float* s) override;

 private:
  Engine& e_;
  uint32_t t_;
  std::vector<uint64_t> rows_;
  std::vector<float> vals_;
};

}  // namespace embshard::storage
