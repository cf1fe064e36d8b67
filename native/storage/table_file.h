// table_file.h — the file that holds a disk-backed table: a 4 KiB header (format, geometry, CRC-32C)
// then one fixed-size record per row: the row in the table's storage dtype, padded to 4 bytes, its
// optimizer state (fp32), a CRC-32C of both and a written flag. The file is created at full size
// with fallocate, so a full disk fails when the table is made, never mid-step; a record never written
// reads as zeros and stands for the row's initial value. The checksum covers the row number too (a
// record copied to another row's place fails it). Records are read and written with pread /
// pwrite from the host thread pool. Errors: IO_ERROR (the file cannot be made, read or written),
// CHECKPOINT_CORRUPT (the file is shorter than its header says, or a record's checksum is wrong).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/types.h"

namespace embshard::storage {

// Geometry of one table's records.
struct RecordLayout {
  uint64_t rows = 0;
  uint32_t dim = 0;
  DType dtype = DType::F32;
  uint64_t rowBytes = 0;     // dim * dtype size
  uint64_t statePerRow = 0;  // fp32 values
  uint64_t stateOffset = 0;  // bytes into the record (rowBytes rounded up to 4)
  uint64_t recordBytes = 0;  // stateOffset + 4 * statePerRow + 8 (checksum, written flag)
};
RecordLayout record_layout(uint64_t rows, uint32_t dim, DType dtype, uint64_t statePerRow);

constexpr uint64_t kHeaderBytes = 4096;

class TableFile {
 public:
  // Creates (or replaces) the file at `path` at its full size; IO_ERROR naming the path on failure.
  TableFile(std::string path, const RecordLayout& layout, uint32_t optimizer);
  ~TableFile();
  TableFile(const TableFile&) = delete;
  TableFile& operator=(const TableFile&) = delete;

  const RecordLayout& layout() const { return layout_; }
  const std::string& path() const { return path_; }
  uint64_t file_bytes() const { return kHeaderBytes + layout_.rows * layout_.recordBytes; }

  // CHECKPOINT_CORRUPT when the file is no longer its full size (truncated) or its header changed.
  void check_intact() const;
  // Reads the records of `rows` (n, any order, distinct) into dst[i * recordBytes], in parallel, and
  // verifies each. `written[i]` says whether the record had been written (else it is all zero).
  void read(const uint64_t* rows, int64_t n, uint8_t* dst, uint8_t* written) const;
  // Writes records (their checksum and flag are filled in here, in src) in parallel.
  void write(const uint64_t* rows, int64_t n, uint8_t* src);
  // Reads / writes the records of rows [first, first + n) with one call each (checkpoints).
  void read_span(uint64_t first, uint64_t n, uint8_t* dst, uint8_t* written) const;
  void write_span(uint64_t first, uint64_t n, uint8_t* src);
  // fdatasync.
  void sync();

  uint64_t bytes_read() const { return bytesRead_; }
  uint64_t bytes_written() const { return bytesWritten_; }

 private:
  // A record's checksum covers its row number too: a record found at another row's place fails it.
  uint32_t record_crc(uint64_t row, const uint8_t* rec) const;
  void verify(uint64_t row, const uint8_t* rec, uint8_t* written) const;
  void seal(uint64_t row, uint8_t* rec) const;
  std::string path_;
  RecordLayout layout_;
  int fd_ = -1;
  std::vector<uint8_t> header_;
  mutable uint64_t bytesRead_ = 0;
  uint64_t bytesWritten_ = 0;
};

}  // namespace embshard::storage
