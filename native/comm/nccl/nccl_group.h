// nccl_group.h — the NCCL process group: one GPU per rank, its unique id bootstrapped by another group
// (lib/sharded/group.ts createNcclGroup). Host buffers are staged through device memory on the group's own
// stream; device buffers (all_reduce_device: the GPU dense model's gradients; all_to_all_v_device and
// all_gather_v_device: device arrays) are used as they are, with no staging; every collective is launched non-blocking and polled against its deadline (cudaStreamQuery +
// ncclCommGetAsyncError); a deadline or an asynchronous NCCL error aborts the communicator
// (ncclCommAbort) and fails with COMM_TIMEOUT / COMM_FAILED. A signature exchange before each collective
// turns a mismatched call into COMM_FAILED on every rank. Compiled only into the CUDA addon.
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "comm/group.h"

namespace embshard::comm {

class NcclGroup : public Group {
 public:
  static void unique_id(uint8_t out[NCCL_UNIQUE_ID_BYTES]);
  // Joins the communicator (a collective over all ranks) on `device`.
  static std::shared_ptr<NcclGroup> create(const uint8_t* uniqueId, int rank, int size, int ranksPerNode, int device,
                                           const Deadline& d);
  ~NcclGroup() override;

  const char* kind() const override { return "nccl"; }
  void exchange_counts(const int64_t* sendBytes, int64_t* recvBytes, const Deadline& d) override;
  void all_to_all_v(const uint8_t* send, const int64_t* sendBytes, const int64_t* sendOffsets, uint8_t* recv,
                    const int64_t* recvBytes, const int64_t* recvOffsets, const Deadline& d) override;
  void gather_counts(int64_t bytes, int64_t* recvBytes, const Deadline& d) override;
  void all_gather_v(const uint8_t* send, int64_t bytes, uint8_t* recv, const int64_t* recvBytes,
                    const Deadline& d) override;
  void all_reduce(void* data, int64_t count, ElemType t, ReduceOp op, bool deterministic, const Deadline& d) override;
  // In place on this rank's device memory: ncclAllReduce straight on the buffer, no staging.
  void all_reduce_device(void* deviceData, int64_t count, ElemType t, ReduceOp op, int device, const Deadline& d) override;
  // Straight between this rank's device buffers: the same NCCL calls as the host versions, no staging.
  void all_to_all_v_device(const uint8_t* send, const int64_t* sendBytes, const int64_t* sendOffsets, uint8_t* recv,
                           const int64_t* recvBytes, const int64_t* recvOffsets, int device, const Deadline& d) override;
  void all_gather_v_device(const uint8_t* send, int64_t bytes, uint8_t* recv, const int64_t* recvBytes, int device,
                           const Deadline& d) override;
  void broadcast(uint8_t* data, int64_t bytes, int root, const Deadline& d) override;
  void barrier(const Deadline& d) override;
  void abort(const std::string& why) override;

  NcclGroup(int rank, int size, int ranksPerNode, int device);

 private:
  void check_usable();
  // Waits for the communicator's pending work (non-blocking mode) and the stream, against the deadline.
  void wait(const Deadline& d, const char* what);
  void check_signature(int kind, int64_t a, int64_t b, const Deadline& d, const char* what);
  // ncclAllReduce in place on device memory, on the group's stream (not waited for).
  void launch_all_reduce(void* deviceData, int64_t count, ElemType t, ReduceOp op, const char* what);
  // The grouped ncclSend / ncclRecv of an all-to-all-v and of an all-gather-v between device buffers,
  // on the group's stream (not waited for).
  void launch_all_to_all(const uint8_t* send, const int64_t* sendBytes, const int64_t* sendOffsets, uint8_t* recv,
                         const int64_t* recvBytes, const int64_t* recvOffsets, const char* what);
  void launch_all_gather(const uint8_t* send, int64_t bytes, uint8_t* recv, const int64_t* recvBytes, const char* what);
  // INVALID_ARGUMENT unless `device` is the communicator's.
  void check_device(int device, const char* what) const;
  // Device staging buffers, grown on demand.
  uint8_t* dev_send(int64_t bytes);
  uint8_t* dev_recv(int64_t bytes);
  [[noreturn]] void fail_with(const char* code, const std::string& msg);
  void abort_comm();

  int device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  uint8_t* dsend_ = nullptr;
  int64_t dsendCap_ = 0;
  uint8_t* drecv_ = nullptr;
  int64_t drecvCap_ = 0;
  uint64_t seq_ = 0;
  std::atomic<bool> broken_{false};
  std::mutex abortMu_;
  std::string why_;
};

}  // namespace embshard::comm
