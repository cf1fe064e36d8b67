// nccl_group.cc — the NCCL process group (see nccl_group.h).
#include "comm/nccl/nccl_group.h"

#include <cstring>
#include <thread>
#include <vector>

#include "core/errors.h"

namespace embshard::comm {

namespace {

enum Kind : int64_t { kCounts = 1, kGatherCounts = 2, kAllReduce = 3, kBroadcast = 4, kBarrier = 5 };

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("CUDA_ERROR", "%s: %s", what, cudaGetErrorString(e));
}

}  // namespace

void NcclGroup::unique_id(uint8_t out[NCCL_UNIQUE_ID_BYTES]) {
  ncclUniqueId id;
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) fail("COMM_FAILED", "ncclGetUniqueId: %s", ncclGetErrorString(r));
  std::memcpy(out, id.internal, NCCL_UNIQUE_ID_BYTES);
}

NcclGroup::NcclGroup(int rank, int size, int ranksPerNode, int device) : Group(rank, size, ranksPerNode), device_(device) {}

std::shared_ptr<NcclGroup> NcclGroup::create(const uint8_t* uniqueId, int rank, int size, int ranksPerNode, int device,
                                             const Deadline& d) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0)
    fail("BACKEND_UNAVAILABLE", "createNcclGroup: no usable CUDA device here (%s)",
         e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
  if (device < 0 || device >= count)
    fail("BACKEND_UNAVAILABLE", "createNcclGroup: device %d does not exist (this node has %d)", device, count);
  cuda_check(cudaSetDevice(device), "createNcclGroup: cudaSetDevice");
  auto g = std::make_shared<NcclGroup>(rank, size, ranksPerNode, device);
  cuda_check(cudaStreamCreateWithFlags(&g->stream_, cudaStreamNonBlocking), "createNcclGroup: cudaStreamCreate");
  ncclUniqueId id;
  std::memcpy(id.internal, uniqueId, NCCL_UNIQUE_ID_BYTES);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t r = ncclCommInitRankConfig(&g->comm_, size, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) fail("COMM_FAILED", "ncclCommInitRankConfig: %s", ncclGetErrorString(r));
  g->wait(d, "createNcclGroup (communicator set-up)");
  return g;
}

NcclGroup::~NcclGroup() {
  if (comm_) {
    if (broken_.load()) ncclCommAbort(comm_);
    else ncclCommDestroy(comm_);
  }
  if (dsend_) cudaFree(dsend_);
  if (drecv_) cudaFree(drecv_);
  if (stream_) cudaStreamDestroy(stream_);
}

// On the worker thread: break the group and abort the communicator (unblocking peers' kernels).
void NcclGroup::fail_with(const char* code, const std::string& msg) {
  abort(msg);
  abort_comm();
  throw Error(code, msg);
}

void NcclGroup::abort_comm() {
  if (comm_) ncclCommAbort(comm_);
  comm_ = nullptr;
}

// From any thread: only flags the group; the worker (or the destructor) aborts the communicator, so it
// is never freed under a call in flight.
void NcclGroup::abort(const std::string& why) {
  std::lock_guard<std::mutex> lk(abortMu_);
  if (broken_.exchange(true)) return;
  why_ = why;
}

void NcclGroup::check_usable() {
  if (broken_.load()) {
    abort_comm();
    fail("COMM_FAILED", "rank %d: the NCCL group is broken (%s)", rank_, why_.c_str());
  }
  cuda_check(cudaSetDevice(device_), "NCCL group: cudaSetDevice");
}

void NcclGroup::wait(const Deadline& d, const char* what) {
  auto start = Clock::now();
  for (;;) {
    if (broken_.load()) {
      abort_comm();
      fail("COMM_FAILED", "rank %d: %s abandoned: the NCCL group is broken (%s)", rank_, what, why_.c_str());
    }
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm_, &async);
    if (r != ncclSuccess) fail_with("COMM_FAILED", format("rank %d: %s: %s", rank_, what, ncclGetErrorString(r)));
    if (async != ncclSuccess && async != ncclInProgress)
      fail_with("COMM_FAILED", format("rank %d: %s failed: %s", rank_, what, ncclGetErrorString(async)));
    if (async == ncclSuccess) {
      cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) fail_with("CUDA_ERROR", format("rank %d: %s: %s", rank_, what, cudaGetErrorString(q)));
    }
    auto now = Clock::now();
    if (now >= d.at)
      fail_with("COMM_TIMEOUT", format("rank %d: %s timed out after %.0f ms (a peer died, stalled or called another "
                                       "collective)", rank_, what, d.ms));
    if (now - start < std::chrono::milliseconds(5)) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

uint8_t* NcclGroup::dev_send(int64_t bytes) {
  if (bytes > dsendCap_) {
    if (dsend_) cudaFree(dsend_);
    dsend_ = nullptr;
    dsendCap_ = 0;
    cuda_check(cudaMalloc(&dsend_, static_cast<size_t>(bytes)), "NCCL group: cudaMalloc (send staging)");
    dsendCap_ = bytes;
  }
  return dsend_;
}

uint8_t* NcclGroup::dev_recv(int64_t bytes) {
  if (bytes > drecvCap_) {
    if (drecv_) cudaFree(drecv_);
    drecv_ = nullptr;
    drecvCap_ = 0;
    cuda_check(cudaMalloc(&drecv_, static_cast<size_t>(bytes)), "NCCL group: cudaMalloc (receive staging)");
    drecvCap_ = bytes;
  }
  return drecv_;
}

void NcclGroup::check_signature(int kind, int64_t a, int64_t b, const Deadline& d, const char* what) {
  const int64_t seq = static_cast<int64_t>(++seq_);
  int64_t mine[4] = {kind, seq, a, b};
  const size_t n = static_cast<size_t>(size_);
  uint8_t* ds = dev_send(32);
  uint8_t* dr = dev_recv(static_cast<int64_t>(32 * n));
  cuda_check(cudaMemcpyAsync(ds, mine, 32, cudaMemcpyHostToDevice, stream_), "NCCL group: signature upload");
  ncclResult_t r = ncclAllGather(ds, dr, 4, ncclInt64, comm_, stream_);
  if (r != ncclSuccess && r != ncclInProgress) fail_with("COMM_FAILED", format("rank %d: %s: %s", rank_, what, ncclGetErrorString(r)));
  std::vector<int64_t> all(4 * n);
  cuda_check(cudaMemcpyAsync(all.data(), dr, 32 * n, cudaMemcpyDeviceToHost, stream_), "NCCL group: signature download");
  wait(d, what);
  for (size_t p = 0; p < n; ++p) {
    const int64_t* s = &all[p * 4];
    if (s[0] != kind || s[1] != seq || s[2] != a || s[3] != b)
      fail_with("COMM_FAILED", format("mismatched collectives: rank %d called kind %d #%lld (%lld, %lld), rank %zu called kind "
                                      "%lld #%lld (%lld, %lld)", rank_, kind, static_cast<long long>(seq),
                                      static_cast<long long>(a), static_cast<long long>(b), p, static_cast<long long>(s[0]),
                                      static_cast<long long>(s[1]), static_cast<long long>(s[2]), static_cast<long long>(s[3])));
  }
}

void NcclGroup::exchange_counts(const int64_t* sendBytes, int64_t* recvBytes, const Deadline& d) {
  check_usable();
  const int64_t seq = static_cast<int64_t>(++seq_);
  const size_t n = static_cast<size_t>(size_);
  std::vector<int64_t> out(3 * n), in(3 * n);
  for (size_t p = 0; p < n; ++p) {
    out[3 * p] = kCounts;
    out[3 * p + 1] = seq;
    out[3 * p + 2] = sendBytes[p];
  }
  uint8_t* ds = dev_send(static_cast<int64_t>(24 * n));
  uint8_t* dr = dev_recv(static_cast<int64_t>(24 * n));
  cuda_check(cudaMemcpyAsync(ds, out.data(), 24 * n, cudaMemcpyHostToDevice, stream_), "allToAllV: count upload");
  ncclGroupStart();
  for (int p = 0; p < size_; ++p) {
    ncclSend(ds + 24 * p, 3, ncclInt64, p, comm_, stream_);
    ncclRecv(dr + 24 * p, 3, ncclInt64, p, comm_, stream_);
  }
  ncclResult_t r = ncclGroupEnd();
  if (r != ncclSuccess && r != ncclInProgress) fail_with("COMM_FAILED", format("rank %d: allToAllV counts: %s", rank_, ncclGetErrorString(r)));
  cuda_check(cudaMemcpyAsync(in.data(), dr, 24 * n, cudaMemcpyDeviceToHost, stream_), "allToAllV: count download");
  wait(d, "allToAllV (count exchange)");
  for (size_t p = 0; p < n; ++p) {
    if (in[3 * p] != kCounts || in[3 * p + 1] != seq)
      fail_with("COMM_FAILED", format("mismatched collectives: rank %d called allToAllV #%lld, rank %zu called kind %lld #%lld",
                                      rank_, static_cast<long long>(seq), p, static_cast<long long>(in[3 * p]),
                                      static_cast<long long>(in[3 * p + 1])));
    recvBytes[p] = in[3 * p + 2];
  }
}

void NcclGroup::launch_all_to_all(const uint8_t* send, const int64_t* sendBytes, const int64_t* sendOffsets, uint8_t* recv,
                                  const int64_t* recvBytes, const int64_t* recvOffsets, const char* what) {
  ncclGroupStart();
  for (int p = 0; p < size_; ++p) {
    if (sendBytes[p] > 0) ncclSend(send + sendOffsets[p], static_cast<size_t>(sendBytes[p]), ncclUint8, p, comm_, stream_);
    if (recvBytes[p] > 0) ncclRecv(recv + recvOffsets[p], static_cast<size_t>(recvBytes[p]), ncclUint8, p, comm_, stream_);
  }
  ncclResult_t r = ncclGroupEnd();
  if (r != ncclSuccess && r != ncclInProgress) fail_with("COMM_FAILED", format("rank %d: %s: %s", rank_, what, ncclGetErrorString(r)));
}

void NcclGroup::launch_all_gather(const uint8_t* send, int64_t bytes, uint8_t* recv, const int64_t* recvBytes, const char* what) {
  ncclGroupStart();
  int64_t off = 0;
  for (int p = 0; p < size_; ++p) {
    if (bytes > 0) ncclSend(send, static_cast<size_t>(bytes), ncclUint8, p, comm_, stream_);
    if (recvBytes[p] > 0) ncclRecv(recv + off, static_cast<size_t>(recvBytes[p]), ncclUint8, p, comm_, stream_);
    off += recvBytes[p];
  }
  ncclResult_t r = ncclGroupEnd();
  if (r != ncclSuccess && r != ncclInProgress) fail_with("COMM_FAILED", format("rank %d: %s: %s", rank_, what, ncclGetErrorString(r)));
}

void NcclGroup::check_device(int device, const char* what) const {
  if (device != device_)
    fail("INVALID_ARGUMENT", "rank %d: %s: the buffer is on device %d, the group's communicator on device %d", rank_, what, device, device_);
}

void NcclGroup::all_to_all_v(const uint8_t* send, const int64_t* sendBytes, const int64_t* sendOffsets, uint8_t* recv,
                             const int64_t* recvBytes, const int64_t* recvOffsets, const Deadline& d) {
  check_usable();
  int64_t st = 0, rt = 0;
  for (int p = 0; p < size_; ++p) {
    st = std::max(st, sendOffsets[p] + sendBytes[p]);
    rt = std::max(rt, recvOffsets[p] + recvBytes[p]);
  }
  uint8_t* ds = dev_send(st);
  uint8_t* dr = dev_recv(rt);
  if (st > 0) cuda_check(cudaMemcpyAsync(ds, send, static_cast<size_t>(st), cudaMemcpyHostToDevice, stream_), "allToAllV: upload");
  launch_all_to_all(ds, sendBytes, sendOffsets, dr, recvBytes, recvOffsets, "allToAllV");
  if (rt > 0) cuda_check(cudaMemcpyAsync(recv, dr, static_cast<size_t>(rt), cudaMemcpyDeviceToHost, stream_), "allToAllV: download");
  wait(d, "allToAllV");
}

void NcclGroup::all_to_all_v_device(const uint8_t* send, const int64_t* sendBytes, const int64_t* sendOffsets, uint8_t* recv,
                                    const int64_t* recvBytes, const int64_t* recvOffsets, int device, const Deadline& d) {
  check_usable();
  check_device(device, "allToAllDevice");
  launch_all_to_all(send, sendBytes, sendOffsets, recv, recvBytes, recvOffsets, "allToAllDevice");
  wait(d, "allToAllDevice");
}

void NcclGroup::gather_counts(int64_t bytes, int64_t* recvBytes, const Deadline& d) {
  check_usable();
  check_signature(kGatherCounts, 0, 0, d, "allGather (signature)");
  const size_t n = static_cast<size_t>(size_);
  uint8_t* ds = dev_send(8);
  uint8_t* dr = dev_recv(static_cast<int64_t>(8 * n));
  cuda_check(cudaMemcpyAsync(ds, &bytes, 8, cudaMemcpyHostToDevice, stream_), "allGather: count upload");
  ncclResult_t r = ncclAllGather(ds, dr, 1, ncclInt64, comm_, stream_);
  if (r != ncclSuccess && r != ncclInProgress) fail_with("COMM_FAILED", format("rank %d: allGather counts: %s", rank_, ncclGetErrorString(r)));
  cuda_check(cudaMemcpyAsync(recvBytes, dr, 8 * n, cudaMemcpyDeviceToHost, stream_), "allGather: count download");
  wait(d, "allGather (count exchange)");
}

void NcclGroup::all_gather_v(const uint8_t* send, int64_t bytes, uint8_t* recv, const int64_t* recvBytes,
                             const Deadline& d) {
  check_usable();
  int64_t total = 0;
  for (int p = 0; p < size_; ++p) total += recvBytes[p];
  uint8_t* ds = dev_send(bytes);
  uint8_t* dr = dev_recv(total);
  if (bytes > 0) cuda_check(cudaMemcpyAsync(ds, send, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream_), "allGather: upload");
  launch_all_gather(ds, bytes, dr, recvBytes, "allGather");
  if (total > 0) cuda_check(cudaMemcpyAsync(recv, dr, static_cast<size_t>(total), cudaMemcpyDeviceToHost, stream_), "allGather: download");
  wait(d, "allGather");
}

void NcclGroup::all_gather_v_device(const uint8_t* send, int64_t bytes, uint8_t* recv, const int64_t* recvBytes, int device,
                                    const Deadline& d) {
  check_usable();
  check_device(device, "allGatherDevice");
  launch_all_gather(send, bytes, recv, recvBytes, "allGatherDevice");
  wait(d, "allGatherDevice");
}

void NcclGroup::all_reduce(void* data, int64_t count, ElemType t, ReduceOp op, bool deterministic, const Deadline& d) {
  check_usable();
  check_signature(kAllReduce, count * static_cast<int64_t>(elem_size(t)),
                  static_cast<int64_t>(t) * 16 + static_cast<int64_t>(op) * 2 + (deterministic ? 1 : 0), d,
                  "allReduce (signature)");
  if (deterministic) {
    Group::all_reduce(data, count, t, op, true, d);
    return;
  }
  const int64_t bytes = count * static_cast<int64_t>(elem_size(t));
  uint8_t* ds = dev_send(bytes);
  if (bytes > 0) cuda_check(cudaMemcpyAsync(ds, data, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream_), "allReduce: upload");
  launch_all_reduce(ds, count, t, op, "allReduce");
  if (bytes > 0) cuda_check(cudaMemcpyAsync(data, ds, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, stream_), "allReduce: download");
  wait(d, "allReduce");
}

void NcclGroup::launch_all_reduce(void* deviceData, int64_t count, ElemType t, ReduceOp op, const char* what) {
  if (t == ElemType::U16) fail("UNSUPPORTED_DTYPE", "rank %d: %s: u16 values are moved by collectives, never reduced", rank_, what);
  ncclDataType_t type = t == ElemType::F32 ? ncclFloat32 : t == ElemType::F64 ? ncclFloat64 : t == ElemType::I32 ? ncclInt32 : ncclInt64;
  ncclRedOp_t rop = op == ReduceOp::Sum ? ncclSum : op == ReduceOp::Max ? ncclMax : ncclMin;
  ncclResult_t r = ncclAllReduce(deviceData, deviceData, static_cast<size_t>(count), type, rop, comm_, stream_);
  if (r != ncclSuccess && r != ncclInProgress) fail_with("COMM_FAILED", format("rank %d: %s: %s", rank_, what, ncclGetErrorString(r)));
}

void NcclGroup::all_reduce_device(void* deviceData, int64_t count, ElemType t, ReduceOp op, int device, const Deadline& d) {
  check_usable();
  check_device(device, "allReduceDevice");
  // the same signature as a host all-reduce of the same size: ranks may mix the two
  check_signature(kAllReduce, count * static_cast<int64_t>(elem_size(t)), static_cast<int64_t>(t) * 16 + static_cast<int64_t>(op) * 2, d,
                  "allReduceDevice (signature)");
  launch_all_reduce(deviceData, count, t, op, "allReduceDevice");
  wait(d, "allReduceDevice");
}

void NcclGroup::broadcast(uint8_t* data, int64_t bytes, int root, const Deadline& d) {
  check_usable();
  check_signature(kBroadcast, bytes, root, d, "broadcast (signature)");
  uint8_t* ds = dev_send(bytes);
  if (bytes > 0 && rank_ == root)
    cuda_check(cudaMemcpyAsync(ds, data, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream_), "broadcast: upload");
  ncclResult_t r = ncclBroadcast(ds, ds, static_cast<size_t>(bytes), ncclUint8, root, comm_, stream_);
  if (r != ncclSuccess && r != ncclInProgress) fail_with("COMM_FAILED", format("rank %d: broadcast: %s", rank_, ncclGetErrorString(r)));
  if (bytes > 0) cuda_check(cudaMemcpyAsync(data, ds, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, stream_), "broadcast: download");
  wait(d, "broadcast");
}

void NcclGroup::barrier(const Deadline& d) {
  check_usable();
  check_signature(kBarrier, 0, 0, d, "barrier");
}

}  // namespace embshard::comm
