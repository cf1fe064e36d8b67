// dynamic_index.h — the two containers a dynamic table's id map is built from: an open-addressing hash
// index from a raw 64-bit id to a 32-bit value (linear probing, backward-shift deletion, no tombstones),
// a lazy min-heap of (key, index) entries whose keys only grow, so a stale entry is recognised when it
// surfaces and re-pushed with its current key (one entry per live index, no per-touch heap work), and an
// intrusive recency list (least recently used first; a touch moves an index to the end in O(1)).
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/rng.h"

namespace embshard {

class IdIndex {
 public:
  static constexpr uint32_t kNone = 0xffffffffu;

  // Sized for at most `maxEntries` live keys (load factor <= 1/2); empties it.
  void reset(uint64_t maxEntries) {
    uint64_t cap = 16;
    while (cap < 2 * maxEntries) cap <<= 1;
    keys_.assign(cap, 0);
    vals_.assign(cap, kNone);
    mask_ = cap - 1;
    size_ = 0;
  }
  uint64_t size() const { return size_; }

  // Starts loading the bucket `key` probes first (a lookup of it follows shortly).
  void prefetch(uint64_t key) const {
    const uint64_t p = home(key);
    __builtin_prefetch(&keys_[p]);
    __builtin_prefetch(&vals_[p]);
  }

  uint32_t find(uint64_t key) const {
    for (uint64_t p = home(key);; p = (p + 1) & mask_) {
      if (vals_[p] == kNone) return kNone;
      if (keys_[p] == key) return vals_[p];
    }
  }
  // Inserts an absent key, or overwrites the value of a present one.
  void put(uint64_t key, uint32_t val) {
    uint64_t p = home(key);
    for (; vals_[p] != kNone; p = (p + 1) & mask_)
      if (keys_[p] == key) {
        vals_[p] = val;
        return;
      }
    keys_[p] = key;
    vals_[p] = val;
    ++size_;
  }
  void erase(uint64_t key) {
    uint64_t p = home(key);
    for (; vals_[p] != kNone; p = (p + 1) & mask_)
      if (keys_[p] == key) break;
    if (vals_[p] == kNone) return;
    // backward-shift: move later members of the probe run into the hole when their home allows it
    uint64_t hole = p;
    for (uint64_t q = (p + 1) & mask_; vals_[q] != kNone; q = (q + 1) & mask_) {
      uint64_t h = home(keys_[q]);
      bool movable = hole <= q ? (h <= hole || h > q) : (h <= hole && h > q);
      if (movable) {
        keys_[hole] = keys_[q];
        vals_[hole] = vals_[q];
        hole = q;
      }
    }
    vals_[hole] = kNone;
    --size_;
  }

 private:
  uint64_t home(uint64_t key) const { return mix64(key) & mask_; }
  std::vector<uint64_t> keys_;
  std::vector<uint32_t> vals_;
  uint64_t mask_ = 0;
  uint64_t size_ = 0;
};

// A heap entry: ordered by (k1, k2); `index` names what it stands for (a slot or a candidate).
struct HeapEntry {
  uint64_t k1 = 0;
  uint64_t k2 = 0;
  uint32_t index = 0;
};

class LazyHeap {
 public:
  void clear() { h_.clear(); }
  bool empty() const { return h_.empty(); }
  size_t size() const { return h_.size(); }
  const HeapEntry& top() const { return h_.front(); }
  void push(const HeapEntry& e) {
    h_.push_back(e);
    std::push_heap(h_.begin(), h_.end(), greater);
  }
  HeapEntry pop() {
    std::pop_heap(h_.begin(), h_.end(), greater);
    HeapEntry e = h_.back();
    h_.pop_back();
    return e;
  }
  // Keeps only the entries `live` accepts (drops stale ones), then restores the heap order.
  template <typename Live>
  void compact(Live live) {
    h_.erase(std::remove_if(h_.begin(), h_.end(), [&](const HeapEntry& e) { return !live(e); }), h_.end());
    std::make_heap(h_.begin(), h_.end(), greater);
  }

 private:
  static bool greater(const HeapEntry& a, const HeapEntry& b) { return a.k1 != b.k1 ? a.k1 > b.k1 : a.k2 > b.k2; }
  std::vector<HeapEntry> h_;
};

class RecencyList {
 public:
  static constexpr uint32_t kNone = 0xffffffffu;
  void reset(uint32_t n) {
    prev_.assign(n, kNone);
    next_.assign(n, kNone);
    head_ = tail_ = kNone;
  }
  uint32_t front() const { return head_; }
  void push_back(uint32_t i) {
    prev_[i] = tail_;
    next_[i] = kNone;
    if (tail_ != kNone) next_[tail_] = i;
    else head_ = i;
    tail_ = i;
  }
  void unlink(uint32_t i) {
    const uint32_t p = prev_[i], n = next_[i];
    if (p != kNone) next_[p] = n;
    else head_ = n;
    if (n != kNone) prev_[n] = p;
    else tail_ = p;
  }
  void touch(uint32_t i) {
    if (tail_ == i) return;
    unlink(i);
    push_back(i);
  }

 private:
  std::vector<uint32_t> prev_, next_;
  uint32_t head_ = kNone, tail_ = kNone;
};

}  // namespace embshard
