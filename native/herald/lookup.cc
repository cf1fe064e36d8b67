// lookup.cc — a Herald rank's lookup routes and its caches' checked-out rows (lookup.h).
#include "herald/lookup.h"

#include <algorithm>

#include "core/errors.h"
#include "storage/dynamic_index.h"

namespace embshard::herald {

void lookup_routes(const int64_t* rows, int64_t U, const double* held, int64_t H, const int64_t* lo, int32_t W, LookupRoutes& out) {
  for (int64_t j = 0; j < U; ++j)
    if (rows[j] < lo[0] || rows[j] >= lo[W])
      throw Error("ID_OUT_OF_RANGE", format("herald: row %lld is outside [%lld, %lld)", static_cast<long long>(rows[j]), static_cast<long long>(lo[0]), static_cast<long long>(lo[W])));
  IdIndex where;
  where.reset(static_cast<uint64_t>(H));
  for (int64_t h = 0; h < H; ++h) where.put(static_cast<uint64_t>(static_cast<int64_t>(held[h])), static_cast<uint32_t>(h));
  std::vector<std::vector<int64_t>> ask(W);
  std::vector<std::vector<int32_t>> pos(W);
  for (int64_t j = 0; j < U; ++j) {
    const uint32_t h = where.find(static_cast<uint64_t>(rows[j]));
    if (h != IdIndex::kNone) {
      out.heldPos.push_back(static_cast<int32_t>(j));
      out.heldSrc.push_back(static_cast<int32_t>(h));
      continue;
    }
    const int32_t o = static_cast<int32_t>(std::upper_bound(lo, lo + W, rows[j]) - lo) - 1;
    ask[o].push_back(rows[j] - lo[o]);
    pos[o].push_back(static_cast<int32_t>(j));
  }
  out.askCounts.assign(W, 0);
  for (int32_t o = 0; o < W; ++o) {
    out.askCounts[o] = static_cast<double>(ask[o].size());
    out.ask.insert(out.ask.end(), ask[o].begin(), ask[o].end());
    out.askPos.insert(out.askPos.end(), pos[o].begin(), pos[o].end());
  }
}

void held_slots(const double* slotKey, int64_t slots, int64_t owned, double rowBase, std::vector<double>& rows, std::vector<int64_t>& ids) {
  for (int64_t s = 0; s < slots; ++s)
    if (slotKey[s] >= 0) {
      rows.push_back(slotKey[s] - rowBase);
      ids.push_back(owned + s);
    }
}

}  // namespace embshard::herald
