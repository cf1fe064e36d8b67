// radix_sort.h — parallel, stable LSD radix sort of (key, value) pairs on the host thread pool: the CPU
// twin of cub::DeviceRadixSort::SortPairs used by the backward pass to group gradient contributions by
// row while keeping each row's contributions in their original (id) order.
#pragma once
#include <cstdint>

namespace embshard {

// Sorts the first n pairs by the low `bits` bits of the keys (Key = uint32_t or uint64_t; 32-bit keys
// halve the bytes each pass moves). Digits of up to 11 bits. Uses
// tmpKeys/tmpVals (n entries each) as ping-pong buffers; returns true when the sorted result ended in
// the tmp buffers.
template <typename Key>
bool radix_sort_pairs(Key* keys, uint32_t* vals, Key* tmpKeys, uint32_t* tmpVals, int64_t n, int bits);

}  // namespace embshard
