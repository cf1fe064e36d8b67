// inprocess_group.h — N ranks as threads of one process (one process driving several devices; tests).
// The ranks meet in a shared rendezvous: per collective, every rank posts a descriptor of its buffers
// under its next sequence number, each rank copies what it needs straight out of its peers' buffers,
// and a second meeting releases the buffers. A rank that does not arrive before the deadline breaks
// the group (COMM_TIMEOUT for it, COMM_FAILED for everyone after); a mismatched call (different
// collective, sizes or root; an all-reduce of another element type, op, count or mode) fails with
// COMM_FAILED on every rank.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "comm/group.h"

namespace embshard::comm {

class Rendezvous;

class InProcessGroup : public Group {
 public:
  // Creates the n ranks of one group; ranksPerNode only shapes the intra/inter-node accounting.
  static std::vector<std::shared_ptr<InProcessGroup>> create(int n, int ranksPerNode);

  const char* kind() const override { return "inprocess"; }
  void exchange_counts(const int64_t* sendBytes, int64_t* recvBytes, const Deadline& d) override;
  void all_to_all_v(const uint8_t* send, const int64_t* sendBytes, const int64_t* sendOffsets, uint8_t* recv,
                    const int64_t* recvBytes, const int64_t* recvOffsets, const Deadline& d) override;
  void gather_counts(int64_t bytes, int64_t* recvBytes, const Deadline& d) override;
  void all_gather_v(const uint8_t* send, int64_t bytes, uint8_t* recv, const int64_t* recvBytes,
                    const Deadline& d) override;
  void broadcast(uint8_t* data, int64_t bytes, int root, const Deadline& d) override;
  void barrier(const Deadline& d) override;
  void abort(const std::string& why) override;
  // The base all-reduce (reduce-scatter + all-gather, or gather-and-sum) with each of its phases naming
  // the call (element type, op, count, mode), so ranks that disagree on any of them fail with COMM_FAILED.
  void all_reduce(void* data, int64_t count, ElemType t, ReduceOp op, bool deterministic, const Deadline& d) override;

  InProcessGroup(std::shared_ptr<Rendezvous> rv, int rank, int size, int ranksPerNode);

 private:
  std::shared_ptr<Rendezvous> rv_;
  uint64_t seq_ = 0;
  std::string call_;  // the all-reduce whose phase this rank is in ("" outside one)
};

}  // namespace embshard::comm
