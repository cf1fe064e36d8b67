// dynamic_spill.cc — append, read back and verify the records of a dynamic table's spill file
// (format in dynamic_spill.h).
#include "storage/dynamic_spill.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/checkpoint.h"
#include "core/errors.h"
#include "storage/file_io.h"

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
  pwrite_all(fd_, buf_.data(), buf_.size(), end_, "spill file", path_);
  for (size_t k = 0; k < n; ++k) index_[ids[k]] = end_ + k * R;
  end_ += buf_.size();
}

void SpillFile::read(uint64_t id, uint64_t offset, float* row) const {
  const size_t R = recordBytes();
  std::vector<uint8_t> r(R);
  if (!pread_all(fd_, r.data(), R, offset, "spill file", path_))
    fail("CHECKPOINT_CORRUPT", "spill file '%s' is truncated: the record of a spilled id is missing", path_.c_str());
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

// ---- the checkpoint copy (format in dynamic_spill.h) ----

namespace {
constexpr uint64_t kSpillMagic = 0x314c5053424d45ull;  // "EMBSPL1"
constexpr size_t kSpillHeader = 24;
constexpr size_t kChunk = size_t(4) << 20;

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};
}  // namespace

SpillFile::Image SpillFile::save_to(const std::string& path) const {
  std::vector<std::pair<uint64_t, uint64_t>> live;  // (offset, id), in file order
  live.reserve(index_.size());
  for (const auto& kv : index_) live.emplace_back(kv.second, kv.first);
  std::sort(live.begin(), live.end());
  Fd out{::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
  if (out.fd < 0) fail("IO_ERROR", "cannot create '%s': %s", path.c_str(), std::strerror(errno));
  Image img;
  img.records = live.size();
  std::vector<uint8_t> buf(kSpillHeader);
  const uint64_t header[3] = {kSpillMagic, static_cast<uint64_t>(dim_) | (static_cast<uint64_t>(stateWidth_) << 32), img.records};
  std::memcpy(buf.data(), header, kSpillHeader);
  const size_t R = recordBytes();
  std::vector<float> row(static_cast<size_t>(dim_) + stateWidth_);
  auto flush = [&] {
    pwrite_all(out.fd, buf.data(), buf.size(), img.bytes, "spill copy", path);
    img.crc32c = crc32c(img.crc32c, buf.data(), buf.size());
    img.bytes += buf.size();
    buf.clear();
  };
  for (const auto& [offset, id] : live) {
    read(id, offset, row.data());  // verified: a bad record is not carried into a checkpoint
    const size_t at = buf.size();
    buf.resize(at + R);
    std::memcpy(buf.data() + at, &id, 8);
    std::memcpy(buf.data() + at + 8, row.data(), R - 12);
    const uint32_t crc = crc32c(0, buf.data() + at, R - 4);
    std::memcpy(buf.data() + at + R - 4, &crc, 4);
    if (buf.size() >= kChunk) flush();
  }
  flush();
  if (::fsync(out.fd) != 0) fail("IO_ERROR", "fsync '%s': %s", path.c_str(), std::strerror(errno));
  return img;
}

void SpillFile::corrupt_copy(const std::string& path, const char* what) {
  fail("CHECKPOINT_CORRUPT", "spill copy '%s' %s (truncated or altered)", path.c_str(), what);
}

std::unordered_map<uint64_t, uint64_t> SpillFile::verify_copy(const std::string& path, uint64_t bytes, uint32_t crc) const {
  Fd in{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (in.fd < 0) fail("CHECKPOINT_CORRUPT", "spill copy '%s' cannot be read: %s", path.c_str(), std::strerror(errno));
  const off_t size = ::lseek(in.fd, 0, SEEK_END);
  if (size < 0 || static_cast<uint64_t>(size) != bytes || bytes < kSpillHeader) corrupt_copy(path, "does not have the size its manifest says");
  // the whole file's checksum first, then the header and every record
  std::vector<uint8_t> buf(kChunk);
  uint32_t got = 0;
  for (uint64_t at = 0; at < bytes; at += buf.size()) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), bytes - at));
    if (!pread_all(in.fd, buf.data(), n, at, "spill copy", path)) corrupt_copy(path, "cannot be read to its end");
    got = crc32c(got, buf.data(), n);
  }
  if (got != crc) corrupt_copy(path, "fails its checksum");
  uint64_t header[3];
  if (!pread_all(in.fd, reinterpret_cast<uint8_t*>(header), kSpillHeader, 0, "spill copy", path)) corrupt_copy(path, "has no header");
  const size_t R = recordBytes();
  if (header[0] != kSpillMagic || header[1] != (static_cast<uint64_t>(dim_) | (static_cast<uint64_t>(stateWidth_) << 32)))
    corrupt_copy(path, "is not a spill copy of this table's dim and optimizer state");
  if (header[2] > (bytes - kSpillHeader) / R || kSpillHeader + header[2] * R != bytes)
    corrupt_copy(path, "does not hold the records its header counts");
  std::unordered_map<uint64_t, uint64_t> index;
  index.reserve(static_cast<size_t>(header[2]));
  const size_t per = std::max<size_t>(1, kChunk / R);
  for (uint64_t k = 0; k < header[2]; k += per) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(per, header[2] - k));
    if (!pread_all(in.fd, buf.data(), n * R, kSpillHeader + k * R, "spill copy", path)) corrupt_copy(path, "cannot be read to its end");
    for (size_t j = 0; j < n; ++j) {
      const uint8_t* r = buf.data() + j * R;
      uint32_t rc;
      std::memcpy(&rc, r + R - 4, 4);
      if (crc32c(0, r, R - 4) != rc) corrupt_copy(path, "has a record that fails its checksum");
      uint64_t id;
      std::memcpy(&id, r, 8);
      if (!index.emplace(id, (k + j) * R).second) corrupt_copy(path, "lists an id twice");
    }
  }
  return index;
}

void SpillFile::replace_with(const std::string& path, std::unordered_map<uint64_t, uint64_t> index) {
  Fd in{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (in.fd < 0) fail("CHECKPOINT_CORRUPT", "spill copy '%s' cannot be read: %s", path.c_str(), std::strerror(errno));
  const uint64_t body = index.size() * recordBytes();
  if (::ftruncate(fd_, 0) != 0) fail("IO_ERROR", "emptying spill file '%s': %s", path_.c_str(), std::strerror(errno));
  std::vector<uint8_t> buf(kChunk);
  for (uint64_t at = 0; at < body; at += buf.size()) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), body - at));
    if (!pread_all(in.fd, buf.data(), n, kSpillHeader + at, "spill copy", path)) corrupt_copy(path, "cannot be read to its end");
    pwrite_all(fd_, buf.data(), n, at, "spill file", path_);
  }
  end_ = body;
  index_ = std::move(index);
  staged_.clear();
}

}  // namespace embshard
