// lookup.h — where a Herald rank's lookup outside training (evaluation, predict) reads each row: rows checked
// out into some rank's cache come from that cache's copy (gathered from every rank), the others from their
// owners; and the checked-out rows of one of the rank's own caches.
#pragma once
#include <cstdint>
#include <vector>

namespace embshard::herald {

struct LookupRoutes {
  std::vector<int32_t> heldPos;  // positions (among the rank's distinct rows) read from a held copy …
  std::vector<int32_t> heldSrc;  // … and the index of that copy among the gathered held rows
  std::vector<double> askCounts;  // rows asked of every owner (W)
  std::vector<int64_t> ask;       // the owners' local rows, owner by owner
  std::vector<int32_t> askPos;    // the positions they fill, in the same order
};

// `rows` (U distinct rows of a table), `held` (H rows checked out into caches, each once), `lo` (W + 1 range
// starts of the owners). Rows outside [lo[0], lo[W]) throw ID_OUT_OF_RANGE.
void lookup_routes(const int64_t* rows, int64_t U, const double* held, int64_t H, const int64_t* lo, int32_t W, LookupRoutes& out);

// The slots of one cache holding a row (slotKey[s] ≥ 0, keys as rowBase + row): their rows and engine ids (owned + s).
void held_slots(const double* slotKey, int64_t slots, int64_t owned, double rowBase, std::vector<double>& rows, std::vector<int64_t>& ids);

}  // namespace embshard::herald
