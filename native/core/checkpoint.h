// checkpoint.h — the binary payload of a checkpoint: both arenas of an engine streamed to one file
// with a CRC-32C, fsynced; and the verified reverse. The manifest (lib/checkpoint.ts) records the
// payload's size and checksum; the directory is swapped in atomically by the TypeScript side.
#pragma once
#include <cstdint>
#include <string>

#include "core/engine.h"

namespace embshard {

struct PayloadInfo {
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
};

PayloadInfo save_payload(Engine& engine, const std::string& path);
// CHECKPOINT_MISSING when absent; CHECKPOINT_CORRUPT when the size, header or checksum is wrong.
void load_payload(Engine& engine, const std::string& path, const PayloadInfo& expected);

uint32_t crc32c(uint32_t crc, const void* data, size_t n);

}  // namespace embshard
