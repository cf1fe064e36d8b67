// arena.cc — see arena.h.
#include "cpu/arena.h"

#include <sys/mman.h>
#include <sys/sysinfo.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/errors.h"

namespace embshard {

uint64_t host_memory_limit() {
  struct sysinfo si;
  if (sysinfo(&si) != 0) return ~0ull;
  return (static_cast<uint64_t>(si.totalram) + si.totalswap) * si.mem_unit;
}

HostArena::HostArena(uint64_t bytes, const std::string& what) {
  if (bytes == 0) return;
  uint64_t limit = host_memory_limit();
  if (bytes > limit)
    fail("ALLOC_FAILED", "cannot allocate %llu bytes for %s: the machine has %llu bytes of memory and swap",
         static_cast<unsigned long long>(bytes), what.c_str(), static_cast<unsigned long long>(limit));
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    fail("ALLOC_FAILED", "cannot allocate %llu bytes for %s: %s", static_cast<unsigned long long>(bytes), what.c_str(),
         std::strerror(errno));
#ifdef MADV_HUGEPAGE
  ::madvise(p, bytes, MADV_HUGEPAGE);
#endif
  data_ = static_cast<uint8_t*>(p);
  size_ = bytes;
}

HostArena::~HostArena() {
  if (data_) ::munmap(data_, size_);
}

HostArena::HostArena(HostArena&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

HostArena& HostArena::operator=(HostArena&& o) noexcept {
  if (this != &o) {
    if (data_) ::munmap(data_, size_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

}  // namespace embshard
