// rank_view.h — one rank's share of a Herald step plan (scheduler.h's StepOut), computed once per step next
// to the plan (on the scheduler's thread) so that the step itself runs bulk reads, writes and copies only:
//   - the exchange before the forward: the engine rows whose values (and, for moves, optimizer state) it
//     sends, the layout of its send buffer, what it receives (moved rows by engine id, copies) and where
//     each record lies in the received data, the cache slots the step frees and fills;
//   - the forward: per table, the distinct rows read from the engine and from received copies, and every id's
//     index among them;
//   - the gradients: the layout of its gradient message to the owners, and the owner side: every row's
//     contributions in rank order (its own reads at its place) as the rows of the backward's batch.
// Layouts are copy segments (copy_segments below), five int32 each: destination buffer, offset in it,
// source buffer, offset in it, floats. Buffer numbering is documented per field.
#pragma once
#include <cstdint>
#include <vector>

namespace embshard::herald {

struct StepOut;  // scheduler.h

struct RankView {
  // ---- before the forward. Send: records from this rank, peer by peer, each in record order.
  std::vector<int64_t> sendIds;         // engine ids whose values are read, table by table (sendStart)
  std::vector<int32_t> sendStart;       // T + 1
  std::vector<int64_t> sendStateIds;    // the moves among them, whose optimizer state is read too
  std::vector<int32_t> sendStateStart;  // T + 1
  std::vector<int32_t> sendSegs;        // dst 0: the send buffer; src 2t: values read of table t, 2t + 1: its state
  std::vector<double> sendCounts;       // floats to every peer (W)
  std::vector<double> recvCounts;       // floats from every peer (W)
  std::vector<int64_t> moveIds;         // engine ids receiving moved rows, table by table (moveStart), record order
  std::vector<int32_t> moveStart;       // T + 1
  std::vector<int32_t> copyStart;       // copies received, table by table (T + 1), record order
  std::vector<int32_t> recvSegs;        // src 0: the received data; dst 3t: moved values of t, 3t + 1: their state, 3t + 2: copies of t
  std::vector<int32_t> freeSlots;       // cache slots (numbered over all tables) a move out of this rank frees, when still holding freeKeys
  std::vector<double> freeKeys;
  std::vector<int32_t> holdSlots;       // cache slots a move into this rank fills with holdKeys
  std::vector<double> holdKeys;
  // ---- the forward: per table, its reads from the engine (ids, position among the rank's reads) and the
  // position of every received copy among them
  std::vector<int64_t> engIds;
  std::vector<int32_t> engPos;
  std::vector<int32_t> engStart;  // T + 1
  std::vector<int32_t> copyPos;   // by copyStart
  // every id of the rank's samples (in their order), feature by feature in the scheduler's feature order: its
  // position among the rank's distinct rows of the feature's table (filled by the scheduler, with the plan)
  std::vector<int32_t> inverse;
  std::vector<int32_t> inverseStart;  // features + 1
  // ---- gradients. Send: records from this rank, peer by peer, in record order.
  std::vector<int32_t> gradSendSegs;  // dst 0: the send buffer; src t: the rank's partial sums of table t ([reads × dim])
  std::vector<double> gradSendCounts;
  std::vector<double> gradRecvCounts;
  // the owner side: per table, the engine id of every contribution, source rank by source rank (this rank's own
  // reads at its place), and its row of the backward's pooled gradient [rows × pooledDim], at the column of the
  // table's first feature
  std::vector<int64_t> updIds;
  std::vector<int32_t> updStart;     // T + 1
  std::vector<int32_t> updSegs;      // dst 0: the pooled gradient; src t: partial sums of table t, T: the received gradients
  std::vector<int32_t> updDistinct;  // distinct engine ids per table (T)
  int32_t updRows = 1;               // rows of the backward's batch: max(1, contributions of any table)
};

// Per table, what rank_view needs besides the plan.
struct ViewTable {
  int32_t dim;
  int32_t stateWidth;
  int64_t owned;      // rows this rank owns (its cache slots follow them in its engine)
  int32_t slotBase;   // first of its cache slots in the numbering over all tables
  int32_t col;        // column of the table's first feature in the pooled output
};

// The view of rank `me` of a step's plan. Throws INVALID_SIZE when a buffer would exceed 2^31 floats.
void rank_view(const StepOut& plan, int32_t me, int32_t world, const std::vector<ViewTable>& tables, int32_t pooledDim, RankView& v);

// Runs copy segments (five int32 each: dst, dstOff, src, srcOff, len) between float buffers, every segment
// checked against the buffers' sizes first (INVALID_ARGUMENT naming `what`; nothing is copied then).
void copy_segments(const int32_t* segs, int64_t n, float* const* dsts, const int64_t* dstSize, int32_t nDst, const float* const* srcs,
                   const int64_t* srcSize, int32_t nSrc, const char* what);

// Applies a step's slot changes to a rank's record of what its cache slots hold (slotKey[slot] = key, −1:
// free): first every freed slot still holding its key becomes free, then the held slots take their keys.
// Slots outside slotKey throw INVALID_ARGUMENT before any change.
void apply_slots(double* slotKey, int64_t slots, const int32_t* freeSlots, const double* freeKeys, int64_t nFree, const int32_t* holdSlots,
                 const double* holdKeys, int64_t nHold);

}  // namespace embshard::herald
