// file_io.cc — see file_io.h.
#include "storage/file_io.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/errors.h"

namespace embshard {

bool pread_all(int fd, void* dst, uint64_t n, uint64_t off, const char* kind, const std::string& path) {
  auto* p = static_cast<uint8_t*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail("IO_ERROR", "reading %s '%s': %s", kind, path.c_str(), std::strerror(errno));
    if (r == 0) return false;
    p += r, n -= static_cast<uint64_t>(r), off += static_cast<uint64_t>(r);
  }
  return true;
}

void pwrite_all(int fd, const void* src, uint64_t n, uint64_t off, const char* kind, const std::string& path) {
  auto* p = static_cast<const uint8_t*>(src);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(off));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail("IO_ERROR", "writing %s '%s': %s", kind, path.c_str(), w < 0 ? std::strerror(errno) : "no space written");
    p += w, n -= static_cast<uint64_t>(w), off += static_cast<uint64_t>(w);
  }
}

}  // namespace embshard
