// storage_args.h — reads the per-table storage argument of `new Engine(config, device, storage)` and
// writes a disk-backed table's counters as a JS object.
#pragma once
#include <napi.h>

#include <memory>
#include <vector>

#include "storage/disk_table.h"

namespace embshard::addon {

// storage: undefined, or an array with one entry per table: null (memory) or
// { file: string, cacheBytes: number, policy: 'lru' | 'lfu' }. Empty result when no table is on disk.
std::vector<std::unique_ptr<storage::DiskStorageSpec>> parse_storage(Napi::Env env, const Napi::Value& v, size_t tables);

Napi::Object disk_stats_object(Napi::Env env, const storage::DiskTable& t);

}  // namespace embshard::addon
