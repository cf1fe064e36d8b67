// id_hash.h — the hash that shards a dynamic table (rows: 'dynamic', raw 64-bit ids) by id: every rank,
// the sharded runtime's routing and the planner's traffic count place an id with these two functions.
//   shard_hash(id) = SplitMix64 finaliser (rng.h mix64) of id XOR a fixed salt: a bijection of the 64-bit
//                    ids (distinct ids keep distinct hashes), decorrelated from the id map's own bucket
//                    hash (mix64(id)) and from the init stream;
//   hash_row(id, capacity) = floor(shard_hash(id) · capacity / 2^64): the id's virtual row in
//                    [0, capacity), monotone in the hash. A row shard [a, b) of the table owns the ids whose
//                    virtual row falls in it, so each shard receives its share (b − a) / capacity of the ids.
#pragma once
#include <cstdint>

#include "core/host_device.h"
#include "core/rng.h"

namespace embshard {

constexpr uint64_t kShardHashSalt = 0x53484152445f4944ull;  // "SHARD_ID"

EMB_HD uint64_t shard_hash(uint64_t id) { return mix64(id ^ kShardHashSalt); }

EMB_HD uint64_t hash_row(uint64_t id, uint64_t capacity) {
#ifdef __CUDA_ARCH__
  return __umul64hi(shard_hash(id), capacity);
#else
  return static_cast<uint64_t>((static_cast<unsigned __int128>(shard_hash(id)) * capacity) >> 64);
#endif
}

}  // namespace embshard
