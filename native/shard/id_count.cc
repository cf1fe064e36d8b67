// id_count.cc — count_top (id_count.h): concatenate with range checks, sort, run-length, partial sort.
#include "shard/id_count.h"

#include <algorithm>
#include <utility>

#include "core/errors.h"

namespace embshard::shard {
namespace {

template <typename T>
void append(const T* ids, int64_t n, int64_t rows, const std::string& what, std::vector<int64_t>& all) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = static_cast<int64_t>(ids[i]);
    if (v < 0 || v >= rows) fail("ID_OUT_OF_RANGE", "%s: id %lld is outside [0, %lld)", what.c_str(), static_cast<long long>(v), static_cast<long long>(rows));
    all.push_back(v);
  }
}

}  // namespace

void count_top(const std::vector<IdSpan>& parts, int64_t rows, int64_t k, int64_t minCount, IdCounts& out) {
  if (rows <= 0) fail("INVALID_ARGUMENT", "countTop: rows must be positive");
  if (k < 0) fail("INVALID_ARGUMENT", "countTop: k must be ≥ 0");
  int64_t total = 0;
  for (const auto& p : parts) total += p.n;
  std::vector<int64_t> all;
  all.reserve(static_cast<size_t>(total));
  for (const auto& p : parts) {
    switch (p.idType) {
      case IdType::I64: append(static_cast<const int64_t*>(p.ids), p.n, rows, p.what, all); break;
      case IdType::I32: append(static_cast<const int32_t*>(p.ids), p.n, rows, p.what, all); break;
      case IdType::U32: append(static_cast<const uint32_t*>(p.ids), p.n, rows, p.what, all); break;
    }
  }
  std::sort(all.begin(), all.end());
  std::vector<std::pair<int64_t, int64_t>> runs;  // (count, id)
  for (size_t i = 0; i < all.size();) {
    size_t j = i;
    while (j < all.size() && all[j] == all[i]) ++j;
    runs.emplace_back(static_cast<int64_t>(j - i), all[i]);
    i = j;
  }
  size_t kk = std::min(runs.size(), static_cast<size_t>(k));
  auto hotter = [](const std::pair<int64_t, int64_t>& a, const std::pair<int64_t, int64_t>& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  };
  std::partial_sort(runs.begin(), runs.begin() + static_cast<std::ptrdiff_t>(kk), runs.end(), hotter);
  while (kk > 0 && runs[kk - 1].first < minCount) --kk;
  out.ids.resize(kk);
  out.counts.resize(kk);
  for (size_t i = 0; i < kk; ++i) {
    out.ids[i] = runs[i].second;
    out.counts[i] = runs[i].first;
  }
  const int64_t lo = static_cast<int64_t>(kk), hi = lo + (rows - lo) / 16;
  out.tailLow = 0;
  for (size_t i = kk; i < runs.size(); ++i)
    if (runs[i].second >= lo && runs[i].second < hi) out.tailLow += runs[i].first;
  out.total = total;
  out.distinct = static_cast<int64_t>(runs.size());
}

}  // namespace embshard::shard
