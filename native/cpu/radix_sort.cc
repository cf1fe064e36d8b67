// radix_sort.cc — see radix_sort.h.
#include "cpu/radix_sort.h"

#include <algorithm>
#include <functional>
#include <utility>
#include <vector>

#include "core/parallel.h"

namespace embshard {

template <typename Key>
bool radix_sort_pairs(Key* keys, uint32_t* vals, Key* tmpKeys, uint32_t* tmpVals, int64_t n, int bits) {
  if (n <= 1 || bits <= 0) return false;
  const int passes = (bits + 10) / 11;
  const int digit = (bits + passes - 1) / passes;
  const int64_t buckets = int64_t(1) << digit;
  const int T = n < (1 << 15) ? 1 : pool_threads();
  std::vector<int64_t> hist(static_cast<size_t>(T * buckets));
  Key *srcK = keys, *dstK = tmpKeys;
  uint32_t *srcV = vals, *dstV = tmpVals;
  auto range = [&](int t) { return std::make_pair(n * t / T, n * (t + 1) / T); };
  auto each_thread = [&](const std::function<void(int)>& fn) {
    if (T == 1) fn(0);
    else parallel_threads([&](int t) { if (t < T) fn(t); });
  };
  for (int p = 0; p < passes; ++p) {
    const int shift = p * digit;
    const uint64_t mask = static_cast<uint64_t>(buckets - 1);
    each_thread([&](int t) {
      int64_t* h = &hist[static_cast<size_t>(t * buckets)];
      std::fill(h, h + buckets, 0);
      auto [b, e] = range(t);
      for (int64_t i = b; i < e; ++i) ++h[(srcK[i] >> shift) & mask];
    });
    // exclusive prefix over (bucket, thread) so equal keys keep thread order → stable
    int64_t sum = 0;
    for (int64_t d = 0; d < buckets; ++d)
      for (int t = 0; t < T; ++t) {
        int64_t c = hist[static_cast<size_t>(t * buckets + d)];
        hist[static_cast<size_t>(t * buckets + d)] = sum;
        sum += c;
      }
    each_thread([&](int t) {
      int64_t* h = &hist[static_cast<size_t>(t * buckets)];
      auto [b, e] = range(t);
      for (int64_t i = b; i < e; ++i) {
        int64_t d = static_cast<int64_t>((srcK[i] >> shift) & mask);
        int64_t o = h[d]++;
        dstK[o] = srcK[i];
        dstV[o] = srcV[i];
      }
    });
    std::swap(srcK, dstK);
    std::swap(srcV, dstV);
  }
  return srcK == tmpKeys;
}

template bool radix_sort_pairs<uint32_t>(uint32_t*, uint32_t*, uint32_t*, uint32_t*, int64_t, int);
template bool radix_sort_pairs<uint64_t>(uint64_t*, uint32_t*, uint64_t*, uint32_t*, int64_t, int);

}  // namespace embshard
