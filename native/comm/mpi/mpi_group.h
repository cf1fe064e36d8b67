// mpi_group.h — the MPI process group: one process per rank (mpirun), working across nodes. MPI is
// initialised lazily with MPI_THREAD_MULTIPLE; each group owns a duplicate of MPI_COMM_WORLD with
// MPI_ERRORS_RETURN. Every collective is non-blocking MPI polled against its deadline, preceded by a
// small signature exchange (collective kind, sequence number, sizes) so a mismatched call fails with
// COMM_FAILED on every rank; an error from MPI (a peer's connection dropped) gives COMM_FAILED and a
// silent peer gives COMM_TIMEOUT. A request abandoned at a deadline is never completed, so the group
// is broken afterwards and the buffers it referenced must stay alive (the binding leaks them; so does a
// request abandoned because the group broke under it, e.g. close() during a call).
#pragma once
// The C API only: Open MPI's (removed-from-the-standard) C++ bindings would need libmpi_cxx.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <atomic>
#include <memory>
#include <string>

#include "comm/group.h"

namespace embshard::comm {

class MpiGroup : public Group {
 public:
  // Initialises MPI on first use (collective over MPI_COMM_WORLD) and duplicates the world communicator.
  static std::shared_ptr<MpiGroup> create_world(const Deadline& d);
  ~MpiGroup() override;

  const char* kind() const override { return "mpi"; }
  void exchange_counts(const int64_t* sendBytes, int64_t* recvBytes, const Deadline& d) override;
  void all_to_all_v(const uint8_t* send, const int64_t* sendBytes, const int64_t* sendOffsets, uint8_t* recv,
                    const int64_t* recvBytes, const int64_t* recvOffsets, const Deadline& d) override;
  std::unique_ptr<Started> start_all_to_all_v(const uint8_t* send, const int64_t* sendBytes, const int64_t* sendOffsets,
                                              uint8_t* recv, const int64_t* recvBytes, const int64_t* recvOffsets) override;
  void gather_counts(int64_t bytes, int64_t* recvBytes, const Deadline& d) override;
  void all_gather_v(const uint8_t* send, int64_t bytes, uint8_t* recv, const int64_t* recvBytes,
                    const Deadline& d) override;
  std::unique_ptr<Started> start_all_gather_v(const uint8_t* send, int64_t bytes, uint8_t* recv, const int64_t* recvBytes) override;
  void all_reduce(void* data, int64_t count, ElemType t, ReduceOp op, bool deterministic, const Deadline& d) override;
  void broadcast(uint8_t* data, int64_t bytes, int root, const Deadline& d) override;
  void barrier(const Deadline& d) override;
  void abort(const std::string& why) override;
  uint64_t abandoned() const override { return abandoned_.load(); }

  // Plain blocking MPI_Alltoallv over the same communicator, no signature, no deadline: the reference
  // the benchmark compares the group's all-to-all bandwidth against.
  void raw_all_to_all_v(const uint8_t* send, const int64_t* sendBytes, const int64_t* sendOffsets, uint8_t* recv,
                        const int64_t* recvBytes, const int64_t* recvOffsets);
  // Plain blocking MPI_Allreduce (sum, f32, in place): the reference for the all-reduce bandwidth.
  void raw_all_reduce(float* data, int64_t count);

  MpiGroup(MPI_Comm comm, int rank, int size, int ranksPerNode);

 private:
  void check_usable() const;
  friend class MpiStarted;
  // One MPI_Test of `req`: true when it is done; COMM_FAILED on an MPI error or a broken group (the
  // request then stays in flight: abandoned).
  bool poll(MPI_Request& req, const char* what);
  void wait(MPI_Request& req, const Deadline& d, const char* what);
  // wait() for a request on buffers of this call (`bufs`): freed when it completes, left to MPI otherwise.
  template <class T>
  void wait_holding(MPI_Request& req, const Deadline& d, const char* what, std::unique_ptr<T>& bufs);
  // Counts a request left in flight at a failure (see Group::abandoned).
  void abandon();
  // All-gathers {kind, seq, a, b} and checks every rank called the same collective with the same a, b.
  void check_signature(int kind, int64_t a, int64_t b, bool sameA, const Deadline& d, const char* what);

  MPI_Comm comm_;
  uint64_t seq_ = 0;
  std::atomic<bool> broken_{false};
  std::atomic<uint64_t> abandoned_{0};
  std::string why_;
};

// True once MPI is initialised by this library and not finalised.
bool mpi_initialized();

}  // namespace embshard::comm
