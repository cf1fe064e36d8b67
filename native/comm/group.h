// group.h — the process-group interface every communicator implements (in-process threads, MPI, NCCL):
// all-to-all-v, all-reduce, all-gather(-v), broadcast and barrier over host buffers, byte-addressed.
// Calls block the calling thread (a group's own worker thread, see executor.h) and either complete or
// throw embshard::Error COMM_TIMEOUT (the deadline passed) / COMM_FAILED (a peer left, a mismatched
// call, a broken group). After any failure a group is broken: every later call fails fast.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace embshard::comm {

// U16: 16-bit wire values (fp16 / bf16 device arrays), moved by collectives, never reduced.
enum class ElemType : uint8_t { F32 = 0, F64 = 1, I32 = 2, I64 = 3, U16 = 4 };
enum class ReduceOp : uint8_t { Sum = 0, Max = 1, Min = 2 };

size_t elem_size(ElemType t);
ElemType parse_elem_type(const std::string& s);  // "f32" | "f64" | "i32" | "i64" | "u16"
ReduceOp parse_reduce_op(const std::string& s);  // "sum" | "max" | "min"
const char* elem_type_name(ElemType t);          // the name parse_elem_type reads
const char* reduce_op_name(ReduceOp op);         // the name parse_reduce_op reads

using Clock = std::chrono::steady_clock;

// The absolute time by which a call must complete (a timeout beyond the clock's range waits as long as
// the clock reaches).
struct Deadline {
  Clock::time_point at;
  double ms;
  static Deadline after(double timeoutMs);
  bool passed() const { return Clock::now() >= at; }
};

// Reduces `n` contributions (each `count` elements, contiguous in `src` in rank order) into `dst`,
// in rank order, so every rank computes bitwise the same result.
void reduce_in_rank_order(const void* src, int n, int64_t count, ElemType t, ReduceOp op, void* dst);

// Chunk p of a reduce-scatter over n ranks of `count` elements: elements [begin, end).
struct Chunk {
  int64_t begin, end;
};
inline Chunk chunk_of(int64_t count, int n, int p) {
  return Chunk{count * p / n, count * (p + 1) / n};
}

// A collective started without blocking (Group::start_all_to_all_v): test() polls it once and returns
// true when it is done; wait() blocks until it is done. Both fail like the blocking calls (COMM_FAILED;
// wait also COMM_TIMEOUT at the deadline). The buffers it was started on must outlive it.
class Started {
 public:
  virtual ~Started() = default;
  virtual bool test() = 0;
  virtual void wait(const Deadline& d) = 0;
};

class Group {
 public:
  virtual ~Group() = default;
  int rank() const { return rank_; }
  int size() const { return size_; }
  int ranks_per_node() const { return ranksPerNode_; }
  virtual const char* kind() const = 0;

  // Exchanges per-peer byte counts (an all-to-all of one int64 per peer): recvBytes[p] = what p sends us.
  virtual void exchange_counts(const int64_t* sendBytes, int64_t* recvBytes, const Deadline& d) = 0;
  // Sends sendBytes[p] bytes at sendOffsets[p] of `send` to every peer p and receives recvBytes[p] at
  // recvOffsets[p] of `recv`. Counts must agree pairwise (exchange_counts gives them).
  virtual void all_to_all_v(const uint8_t* send, const int64_t* sendBytes, const int64_t* sendOffsets, uint8_t* recv,
                            const int64_t* recvBytes, const int64_t* recvOffsets, const Deadline& d) = 0;
  // all_to_all_v started without blocking, for transports that can (MPI); null where the transport
  // cannot. The caller finishes it with test() / wait().
  virtual std::unique_ptr<Started> start_all_to_all_v(const uint8_t* send, const int64_t* sendBytes, const int64_t* sendOffsets,
                                                      uint8_t* recv, const int64_t* recvBytes, const int64_t* recvOffsets);
  // Every rank contributes `bytes`; recv receives the contributions in rank order, recvBytes[p] each
  // (all-gather-v; recvBytes from gather_counts).
  virtual void gather_counts(int64_t bytes, int64_t* recvBytes, const Deadline& d) = 0;
  virtual void all_gather_v(const uint8_t* send, int64_t bytes, uint8_t* recv, const int64_t* recvBytes,
                            const Deadline& d) = 0;
  // all_gather_v started without blocking, as start_all_to_all_v.
  virtual std::unique_ptr<Started> start_all_gather_v(const uint8_t* send, int64_t bytes, uint8_t* recv, const int64_t* recvBytes);
  // In place. The default (`deterministic` false) is the transport's bandwidth-optimal collective; this
  // base implementation is reduce-scatter + all-gather over all_to_all_v / all_gather_v (each rank sends
  // and receives 2(W-1)/W of the buffer; chunk p, see chunk_of, is reduced on rank p in rank order).
  // `deterministic` gathers every rank's whole buffer and combines the contributions in rank order on
  // every rank: bitwise the same result on every transport, at (W-1)x the buffer received per rank.
  virtual void all_reduce(void* data, int64_t count, ElemType t, ReduceOp op, bool deterministic, const Deadline& d);
  // The default all-reduce in place on `device` memory (no host staging). Only groups whose transport
  // reads device memory (NCCL) implement it; the others fail with BACKEND_UNAVAILABLE.
  virtual void all_reduce_device(void* deviceData, int64_t count, ElemType t, ReduceOp op, int device, const Deadline& d);
  // all_to_all_v and all_gather_v with `send` and `recv` in `device` memory (no host staging), counts
  // and offsets on the host. Only groups whose transport reads device memory (NCCL) implement them;
  // the others fail with BACKEND_UNAVAILABLE.
  virtual void all_to_all_v_device(const uint8_t* send, const int64_t* sendBytes, const int64_t* sendOffsets, uint8_t* recv,
                                   const int64_t* recvBytes, const int64_t* recvOffsets, int device, const Deadline& d);
  virtual void all_gather_v_device(const uint8_t* send, int64_t bytes, uint8_t* recv, const int64_t* recvBytes, int device,
                                   const Deadline& d);
  virtual void broadcast(uint8_t* data, int64_t bytes, int root, const Deadline& d) = 0;
  virtual void barrier(const Deadline& d) = 0;
  // Breaks the group (every pending and later call on every rank fails with COMM_FAILED where the
  // implementation can tell its peers, otherwise they time out).
  virtual void abort(const std::string& why) = 0;
  // How many requests this group has left in flight so far, abandoned at a deadline or by a broken group:
  // a call that fails while this grows leaves its buffers to the transport, which may still read or write
  // them, so they must stay alive.
  virtual uint64_t abandoned() const { return 0; }

 protected:
  Group(int rank, int size, int ranksPerNode) : rank_(rank), size_(size), ranksPerNode_(ranksPerNode) {}
  int rank_;
  int size_;
  int ranksPerNode_;
};

}  // namespace embshard::comm
