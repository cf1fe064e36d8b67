// dynamic_spill.h — the spill file of a dynamic table (`spill: { path }`): rows evicted from the in-memory
// slot table are appended here, keyed by raw id, as they were stored (values and optimizer state, fp32),
// and a re-admitted id takes its row back instead of its init. Records are append-only: [id u64]
// [values f32 × dim][state f32 × stateWidth][CRC-32C u32 of the bytes before it]; an in-memory index maps
// each spilled id to its newest record. Taking a row back removes it from the index (the record's bytes
// stay in the file as garbage). A record that fails its checksum or names another id is CHECKPOINT_CORRUPT.
// The file is scratch: created (emptied) when the table is built, valid only while it lives, and locked
// (flock) so that a second live table cannot take the same file.
// Checkpoints hold a compact copy (save_to): a header [magic u64 "EMBSPL1"][dim u32][stateWidth u32]
// [records u64], then the live records in the scratch format, in file order; the whole file's CRC-32C
// goes to the checkpoint's manifest. load_from verifies a copy completely (size, checksum, header, every
// record, no id twice or held by the map) before it replaces this file's contents and index.
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

  struct Image {
    uint64_t bytes = 0;
    uint64_t records = 0;
    uint32_t crc32c = 0;
  };
  // Writes the compact copy of the live records to `path` (fsynced); each record is verified as it is
  // read (CHECKPOINT_CORRUPT), IO_ERROR when the copy cannot be written.
  Image save_to(const std::string& path) const;
  // Replaces this file's records with the copy at `path` (`bytes`, `crc32c` from the manifest);
  // CHECKPOINT_CORRUPT naming the file when it is missing, truncated or altered, or holds an id for which
  // `held(id)` is true; nothing changes then.
  template <typename Held>
  void load_from(const std::string& path, uint64_t bytes, uint32_t crc32c, Held held) {
    std::unordered_map<uint64_t, uint64_t> index = verify_copy(path, bytes, crc32c);
    for (const auto& kv : index)
      if (held(kv.first)) corrupt_copy(path, "holds a spilled id that the map holds too");
    replace_with(path, std::move(index));
  }

 private:
  void read(uint64_t id, uint64_t offset, float* row) const;  // values then state, verified
  // The id → record offset (in this file, once copied) index of a verified copy.
  std::unordered_map<uint64_t, uint64_t> verify_copy(const std::string& path, uint64_t bytes, uint32_t crc32c) const;
  [[noreturn]] static void corrupt_copy(const std::string& path, const char* what);
  void replace_with(const std::string& path, std::unordered_map<uint64_t, uint64_t> index);
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
