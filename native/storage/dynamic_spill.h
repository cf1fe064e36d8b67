// dynamic_spill.h — the spill file of a dynamic table (`spill: { path }`): rows evicted from the in-memory
// slot table are appended here, keyed by raw id, as they were stored (values and optimizer state, fp32),
// and a re-admitted id takes its row back instead of its init. Records are append-only: [id u64]
// [values f32 × dim][state f32 × stateWidth][CRC-32C u32 of the bytes before it]; an in-memory index maps
// each spilled id to its newest record. Taking a row back removes it from the index (the record's bytes
// stay in the file as garbage). A record that fails its checksum or names another id is CHECKPOINT_CORRUPT.
// The file is scratch: created (emptied) when the table is built, valid only while it lives, and locked
// (flock) so that a second live table cannot take the same file.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace embshard {

class SpillFile {
 public:
  // Creates (empties) `path`; IO_ERROR naming `field` when it cannot or another table holds it.
  SpillFile(const std::string& path, const std::string& field, uint32_t dim, uint32_t stateWidth);
  ~SpillFile();
  SpillFile(const SpillFile&) = delete;
  SpillFile& operator=(const SpillFile&) = delete;

  uint64_t size() const { return index_.size(); }
  uint64_t fileBytes() const { return end_; }
  bool holds(uint64_t id) const { return index_.count(id) != 0; }
  // Appends rows `ids[k]` (values [n × dim], state [n × stateWidth]); IO_ERROR when the write fails
  // (the index then is unchanged).
  void put(const uint64_t* ids, size_t n, const float* values, const float* state);
  // Reads and verifies the records of the spilled ones among ids[0, n) (IO_ERROR / CHECKPOINT_CORRUPT
  // before anything else changes); take() then serves them from memory until unstage().
  void stage(const uint64_t* ids, size_t n);
  void unstage() { staged_.clear(); }
  // Gives id's row into values [dim] and state [stateWidth] and forgets it; false when not spilled.
  bool take(uint64_t id, float* values, float* state);

 private:
  void read(uint64_t id, uint64_t offset, float* row) const;  // values then state, verified
  size_t recordBytes() const { return 8 + 4 * (static_cast<size_t>(dim_) + stateWidth_) + 4; }
  std::string path_;
  int fd_ = -1;
  uint32_t dim_, stateWidth_;
  uint64_t end_ = 0;
  std::unordered_map<uint64_t, uint64_t> index_;  // id → offset of its record
  std::vector<uint8_t> buf_;
  std::unordered_map<uint64_t, std::vector<float>> staged_;  // id → values then state
};

}  // namespace embshard
