// arena.h — large zeroed host allocations for table storage (anonymous mmap, transparent huge pages
// requested: random row gathers are TLB-bound otherwise). Used by the CPU engine and the memory probe.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace embshard {

class HostArena {
 public:
  HostArena() = default;
  // Allocates `bytes` zeroed bytes; throws ALLOC_FAILED naming `what` and the byte count.
  HostArena(uint64_t bytes, const std::string& what);
  ~HostArena();
  HostArena(const HostArena&) = delete;
  HostArena& operator=(const HostArena&) = delete;
  HostArena(HostArena&& o) noexcept;
  HostArena& operator=(HostArena&& o) noexcept;

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

// Physical memory plus swap, in bytes (an upper bound for any allocation that will be touched).
uint64_t host_memory_limit();

}  // namespace embshard
