// file_io.h — whole-range positional reads and writes of the storage files (a disk table's record file,
// a dynamic table's spill file and its checkpoint copy): retried on EINTR and on partial transfers.
#pragma once
#include <cstdint>
#include <string>

namespace embshard {

// Reads exactly n bytes at `off`: true when read, false when the file ends first; IO_ERROR
// ("reading <kind> '<path>': …") on an error.
bool pread_all(int fd, void* dst, uint64_t n, uint64_t off, const char* kind, const std::string& path);

// Writes exactly n bytes at `off`; IO_ERROR ("writing <kind> '<path>': …") on an error or when nothing
// could be written.
void pwrite_all(int fd, const void* src, uint64_t n, uint64_t off, const char* kind, const std::string& path);

}  // namespace embshard
