// table_file.cc — the record file of a disk-backed table (see table_file.h).
#include "storage/table_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "core/checkpoint.h"
#include "core/errors.h"
#include "core/parallel.h"
#include "storage/file_io.h"

namespace embshard::storage {

namespace {

constexpr char kMagic[8] = {'E', 'M', 'B', 'T', 'A', 'B', 'L', '1'};
constexpr uint32_t kVersion = 2;  // 2: record checksums cover the row number
constexpr uint32_t kWritten = 0x57524954u;  // "WRIT"

struct Header {
  char magic[8];
  uint32_t version, dtype, dim, optimizer;
  uint64_t rows, statePerRow, recordBytes;
  uint32_t crc;  // CRC-32C of the fields above
};

// Runs fn(i) for i in [0, n) on the pool; the first error is rethrown after every task finished.
template <typename F>
void parallel_io(int64_t n, F&& fn) {
  std::atomic<bool> failed{false};
  std::string code, msg;
  std::mutex mu;
  parallel_for(n, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi && !failed.load(std::memory_order_relaxed); ++i) {
      try {
        fn(i);
      } catch (const Error& e) {
        std::lock_guard<std::mutex> lk(mu);
        if (!failed.exchange(true)) code = e.code(), msg = e.what();
      }
    }
  });
  if (failed) throw Error(code, msg);
}

}  // namespace

RecordLayout record_layout(uint64_t rows, uint32_t dim, DType dtype, uint64_t statePerRow) {
  RecordLayout L;
  L.rows = rows;
  L.dim = dim;
  L.dtype = dtype;
  L.rowBytes = uint64_t(dim) * dtype_size(dtype);
  L.statePerRow = statePerRow;
  L.stateOffset = (L.rowBytes + 3) & ~uint64_t(3);
  L.recordBytes = L.stateOffset + 4 * statePerRow + 8;
  return L;
}

TableFile::TableFile(std::string path, const RecordLayout& layout, uint32_t optimizer)
    : path_(std::move(path)), layout_(layout), header_(kHeaderBytes, 0) {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("IO_ERROR", "storage.path: cannot create table file '%s': %s", path_.c_str(), std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    fail("IO_ERROR", "storage.path: table file '%s' is in use by another collection (%s)", path_.c_str(), std::strerror(err));
  }
  const auto bail = [&](const char* what) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    fail("IO_ERROR", "storage.path: %s table file '%s' (%llu bytes): %s", what, path_.c_str(),
         static_cast<unsigned long long>(file_bytes()), std::strerror(err));
  };
  // A fresh, all-zero file of the full size: every record reads as "never written".
  if (::ftruncate(fd_, 0) != 0) bail("cannot truncate");
  if (int e = ::posix_fallocate(fd_, 0, static_cast<off_t>(file_bytes())); e != 0) {
    errno = e;
    bail("cannot allocate");
  }
  Header h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = kVersion;
  h.dtype = static_cast<uint32_t>(layout.dtype);
  h.dim = layout.dim;
  h.optimizer = optimizer;
  h.rows = layout.rows;
  h.statePerRow = layout.statePerRow;
  h.recordBytes = layout.recordBytes;
  h.crc = crc32c(0, &h, offsetof(Header, crc));
  std::memcpy(header_.data(), &h, sizeof h);
  try {
    pwrite_all(fd_, header_.data(), kHeaderBytes, 0, "table file", path_);
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

TableFile::~TableFile() {
  if (fd_ >= 0) ::close(fd_);
}

void TableFile::check_intact() const {
  struct stat st;
  if (::fstat(fd_, &st) != 0) fail("IO_ERROR", "table file '%s': %s", path_.c_str(), std::strerror(errno));
  if (static_cast<uint64_t>(st.st_size) < file_bytes())
    fail("CHECKPOINT_CORRUPT", "table file '%s' is truncated: %llu bytes, expected %llu", path_.c_str(),
         static_cast<unsigned long long>(st.st_size), static_cast<unsigned long long>(file_bytes()));
  uint8_t h[sizeof(Header)];
  if (!pread_all(fd_, h, sizeof h, 0, "table file", path_) || std::memcmp(h, header_.data(), sizeof h) != 0)
    fail("CHECKPOINT_CORRUPT", "table file '%s': its header was altered", path_.c_str());
}

uint32_t TableFile::record_crc(uint64_t row, const uint8_t* rec) const {
  return crc32c(crc32c(0, &row, sizeof row), rec, layout_.recordBytes - 8);
}

void TableFile::verify(uint64_t row, const uint8_t* rec, uint8_t* written) const {
  const uint64_t body = layout_.recordBytes - 8;
  uint32_t crc, flag;
  std::memcpy(&crc, rec + body, 4);
  std::memcpy(&flag, rec + body + 4, 4);
  if (flag == kWritten) {
    if (record_crc(row, rec) != crc)
      fail("CHECKPOINT_CORRUPT", "table file '%s': row %llu fails its checksum (the file was altered)", path_.c_str(),
           static_cast<unsigned long long>(row));
    *written = 1;
    return;
  }
  for (uint64_t i = 0; i < layout_.recordBytes; ++i)
    if (rec[i] != 0)
      fail("CHECKPOINT_CORRUPT", "table file '%s': row %llu is neither written nor empty (the file was altered)",
           path_.c_str(), static_cast<unsigned long long>(row));
  *written = 0;
}

void TableFile::seal(uint64_t row, uint8_t* rec) const {
  const uint64_t body = layout_.recordBytes - 8;
  const uint32_t crc = record_crc(row, rec);
  std::memcpy(rec + body, &crc, 4);
  std::memcpy(rec + body + 4, &kWritten, 4);
}

void TableFile::read(const uint64_t* rows, int64_t n, uint8_t* dst, uint8_t* written) const {
  const uint64_t rb = layout_.recordBytes;
  parallel_io(n, [&](int64_t i) {
    uint8_t* rec = dst + uint64_t(i) * rb;
    if (!pread_all(fd_, rec, rb, kHeaderBytes + rows[i] * rb, "table file", path_))
      fail("CHECKPOINT_CORRUPT", "table file '%s' is truncated (row %llu is past its end)", path_.c_str(),
           static_cast<unsigned long long>(rows[i]));
    verify(rows[i], rec, written + i);
  });
  bytesRead_ += uint64_t(n) * rb;
}

void TableFile::write(const uint64_t* rows, int64_t n, uint8_t* src) {
  const uint64_t rb = layout_.recordBytes;
  parallel_io(n, [&](int64_t i) {
    uint8_t* rec = src + uint64_t(i) * rb;
    seal(rows[i], rec);
    pwrite_all(fd_, rec, rb, kHeaderBytes + rows[i] * rb, "table file", path_);
  });
  bytesWritten_ += uint64_t(n) * rb;
}

void TableFile::read_span(uint64_t first, uint64_t n, uint8_t* dst, uint8_t* written) const {
  const uint64_t rb = layout_.recordBytes;
  if (!pread_all(fd_, dst, n * rb, kHeaderBytes + first * rb, "table file", path_))
    fail("CHECKPOINT_CORRUPT", "table file '%s' is truncated", path_.c_str());
  for (uint64_t i = 0; i < n; ++i) verify(first + i, dst + i * rb, written + i);
  bytesRead_ += n * rb;
}

void TableFile::write_span(uint64_t first, uint64_t n, uint8_t* src) {
  const uint64_t rb = layout_.recordBytes;
  for (uint64_t i = 0; i < n; ++i) seal(first + i, src + i * rb);
  pwrite_all(fd_, src, n * rb, kHeaderBytes + first * rb, "table file", path_);
  bytesWritten_ += n * rb;
}

void TableFile::sync() {
  if (::fdatasync(fd_) != 0) fail("IO_ERROR", "syncing table file '%s': %s", path_.c_str(), std::strerror(errno));
}

}  // namespace embshard::storage
