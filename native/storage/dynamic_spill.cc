// dynamic_spill.cc — append, read back and verify the records of a dynamic table's spill file
// (format in dynamic_spill.h).
#include "storage/dynamic_spill.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/checkpoint.h"
#include "core/errors.h"

namespace embshard {

SpillFile::SpillFile(const std::string& path, const std::string& field, uint32_t dim, uint32_t stateWidth)
    : path_(path), dim_(dim), stateWidth_(stateWidth) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("IO_ERROR", "%s: cannot create spill file '%s': %s", field.c_str(), path.c_str(), std::strerror(errno));
  // one live table per spill file: another collection's is never truncated under it
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0 || ::ftruncate(fd_, 0) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    fail("IO_ERROR", "%s: spill file '%s' %s (%s)", field.c_str(), path.c_str(),
         err == EWOULDBLOCK ? "is in use by another collection" : "cannot be emptied", std::strerror(err));
  }
}

SpillFile::~SpillFile() {
  if (fd_ >= 0) ::close(fd_);
}

void SpillFile::put(const uint64_t* ids, size_t n, const float* values, const float* state) {
  if (n == 0) return;
  const size_t R = recordBytes(), V = 4 * static_cast<size_t>(dim_), S = 4 * static_cast<size_t>(stateWidth_);
  buf_.resize(n * R);
  for (size_t k = 0; k < n; ++k) {
    uint8_t* r = buf_.data() + k * R;
    std::memcpy(r, &ids[k], 8);
    std::memcpy(r + 8, values + k * dim_, V);
    if (S > 0) std::memcpy(r + 8 + V, state + k * stateWidth_, S);
    const uint32_t crc = crc32c(0, r, R - 4);
    std::memcpy(r + R - 4, &crc, 4);
  }
  size_t done = 0;
  while (done < buf_.size()) {
    const ssize_t w = ::pwrite(fd_, buf_.data() + done, buf_.size() - done, static_cast<off_t>(end_ + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail("IO_ERROR", "writing spill file '%s': %s", path_.c_str(), w < 0 ? std::strerror(errno) : "no space written");
    done += static_cast<size_t>(w);
  }
  for (size_t k = 0; k < n; ++k) index_[ids[k]] = end_ + k * R;
  end_ += buf_.size();
}

void SpillFile::read(uint64_t id, uint64_t offset, float* row) const {
  const size_t R = recordBytes();
  std::vector<uint8_t> r(R);
  size_t done = 0;
  while (done < R) {
    const ssize_t got = ::pread(fd_, r.data() + done, R - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail("IO_ERROR", "reading spill file '%s': %s", path_.c_str(), std::strerror(errno));
    if (got == 0) fail("CHECKPOINT_CORRUPT", "spill file '%s' is truncated: the record of a spilled id is missing", path_.c_str());
    done += static_cast<size_t>(got);
  }
  uint32_t crc;
  std::memcpy(&crc, r.data() + R - 4, 4);
  uint64_t rid;
  std::memcpy(&rid, r.data(), 8);
  if (crc32c(0, r.data(), R - 4) != crc || rid != id)
    fail("CHECKPOINT_CORRUPT", "spill file '%s': the record at offset %llu fails its checksum (altered)", path_.c_str(),
         static_cast<unsigned long long>(offset));
  std::memcpy(row, r.data() + 8, R - 12);
}

void SpillFile::stage(const uint64_t* ids, size_t n) {
  staged_.clear();
  for (size_t k = 0; k < n; ++k) {
    auto it = index_.find(ids[k]);
    if (it == index_.end() || staged_.count(ids[k])) continue;
    std::vector<float> row(static_cast<size_t>(dim_) + stateWidth_);
    read(ids[k], it->second, row.data());
    staged_.emplace(ids[k], std::move(row));
  }
}

bool SpillFile::take(uint64_t id, float* values, float* state) {
  auto it = index_.find(id);
  if (it == index_.end()) return false;
  std::vector<float> row;
  auto st = staged_.find(id);
  if (st != staged_.end()) {
    row = std::move(st->second);
    staged_.erase(st);
  } else {
    row.resize(static_cast<size_t>(dim_) + stateWidth_);
    read(id, it->second, row.data());
  }
  std::memcpy(values, row.data(), 4 * static_cast<size_t>(dim_));
  if (stateWidth_ > 0) std::memcpy(state, row.data() + dim_, 4 * static_cast<size_t>(stateWidth_));
  index_.erase(it);
  return true;
}

}  // namespace embshard
