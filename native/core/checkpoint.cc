// checkpoint.cc — checkpoint payload I/O and CRC-32C (see checkpoint.h).
#include "core/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "core/errors.h"

namespace embshard {

namespace {

constexpr char kMagic[8] = {'E', 'M', 'B', 'S', 'H', 'R', 'D', '1'};
constexpr uint64_t kChunk = 64ull << 20;

uint32_t crc_table[8][256];
bool crc_init = [] {
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1u)));
    crc_table[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i)
    for (int t = 1; t < 8; ++t) crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
  return true;
}();

uint32_t crc32c_sw(uint32_t crc, const uint8_t* p, size_t n) {
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    v ^= crc;
    crc = crc_table[7][v & 0xff] ^ crc_table[6][(v >> 8) & 0xff] ^ crc_table[5][(v >> 16) & 0xff] ^
          crc_table[4][(v >> 24) & 0xff] ^ crc_table[3][(v >> 32) & 0xff] ^ crc_table[2][(v >> 40) & 0xff] ^
          crc_table[1][(v >> 48) & 0xff] ^ crc_table[0][v >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xff];
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc32c_hw(uint32_t crc, const uint8_t* p, size_t n) {
  uint64_t c = crc;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = __builtin_ia32_crc32di(c, v);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return c32;
}
#endif

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      fail("IO_ERROR", "writing '%s': %s", path.c_str(), std::strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

bool read_all(int fd, void* data, size_t n) {
  uint8_t* p = static_cast<uint8_t*>(data);
  while (n > 0) {
    ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

uint32_t crc32c(uint32_t crc, const void* data, size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
#if defined(__x86_64__)
  static const bool hw = __builtin_cpu_supports("sse4.2");
  crc = hw ? crc32c_hw(crc, p, n) : crc32c_sw(crc, p, n);
#else
  crc = crc32c_sw(crc, p, n);
#endif
  return ~crc;
}

PayloadInfo save_payload(Engine& engine, const std::string& path) {
  Fd f{::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
  if (f.fd < 0) fail("IO_ERROR", "cannot create '%s': %s", path.c_str(), std::strerror(errno));
  const Layout& L = engine.layout();
  uint64_t header[3] = {0, L.weightBytes, L.stateFloats * 4};
  std::memcpy(&header[0], kMagic, 8);
  PayloadInfo info;
  info.crc32c = crc32c(0, header, sizeof header);
  write_all(f.fd, header, sizeof header, path);
  info.bytes = sizeof header;
  std::vector<uint8_t> buf(static_cast<size_t>(std::min<uint64_t>(kChunk, std::max(header[1], header[2]) + 1)));
  for (Arena a : {Arena::Weights, Arena::State}) {
    uint64_t total = a == Arena::Weights ? header[1] : header[2];
    for (uint64_t off = 0; off < total; off += kChunk) {
      uint64_t n = std::min(kChunk, total - off);
      engine.read_raw(a, off, n, buf.data());
      info.crc32c = crc32c(info.crc32c, buf.data(), n);
      write_all(f.fd, buf.data(), n, path);
      info.bytes += n;
    }
  }
  if (::fsync(f.fd) != 0) fail("IO_ERROR", "fsync '%s': %s", path.c_str(), std::strerror(errno));
  return info;
}

void load_payload(Engine& engine, const std::string& path, const PayloadInfo& expected) {
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) fail("CHECKPOINT_MISSING", "checkpoint payload '%s' cannot be opened: %s", path.c_str(), std::strerror(errno));
  struct stat st;
  if (::fstat(f.fd, &st) != 0) fail("IO_ERROR", "stat '%s': %s", path.c_str(), std::strerror(errno));
  if (static_cast<uint64_t>(st.st_size) != expected.bytes)
    fail("CHECKPOINT_CORRUPT", "checkpoint payload '%s' has %llu bytes; the manifest says %llu (truncated or replaced)",
         path.c_str(), static_cast<unsigned long long>(st.st_size), static_cast<unsigned long long>(expected.bytes));
  const Layout& L = engine.layout();
  uint64_t header[3];
  if (!read_all(f.fd, header, sizeof header) || std::memcmp(&header[0], kMagic, 8) != 0 || header[1] != L.weightBytes ||
      header[2] != L.stateFloats * 4)
    fail("CHECKPOINT_CORRUPT", "checkpoint payload '%s' has a bad header or does not match the manifest's tables",
         path.c_str());
  uint32_t crc = crc32c(0, header, sizeof header);
  std::vector<uint8_t> buf(static_cast<size_t>(std::min<uint64_t>(kChunk, std::max(header[1], header[2]) + 1)));
  for (Arena a : {Arena::Weights, Arena::State}) {
    uint64_t total = a == Arena::Weights ? header[1] : header[2];
    for (uint64_t off = 0; off < total; off += kChunk) {
      uint64_t n = std::min(kChunk, total - off);
      if (!read_all(f.fd, buf.data(), n)) fail("CHECKPOINT_CORRUPT", "checkpoint payload '%s' is truncated", path.c_str());
      crc = crc32c(crc, buf.data(), n);
      engine.write_raw(a, off, n, buf.data());
    }
  }
  if (crc != expected.crc32c)
    fail("CHECKPOINT_CORRUPT", "checkpoint payload '%s' fails its checksum (crc32c %08x, manifest %08x)", path.c_str(), crc,
         expected.crc32c);
}

}  // namespace embshard
