// nccl.h — NCCL for the CUDA emulator: the communicator calls of the NCCL process group
// (comm/nccl/nccl_group.cc) with NCCL's names, types and result codes, for ranks that are host threads of
// one process (the in-process tests). A unique id names a shared clique; every rank that joins it with
// ncclCommInitRank(Config) gets a communicator. Collectives are matched across ranks by call order, as
// NCCL matches them; send / recv by (source, destination) pair in call order. Each operation is a step
// on its stream (runtime.h): when the stream reaches it, it posts a copy of what it sends to the clique,
// then finishes once every contribution it needs has been posted, reducing in rank order (so a sum is
// the naive left-to-right sum, bitwise the same on every rank). Until then the step, and every copy
// enqueued behind it, waits: cudaStreamQuery says cudaErrorNotReady, so a caller's deadline works as
// with a GPU. Non-blocking communicators (config.blocking = 0) report ncclInProgress from
// ncclCommGetAsyncError until every rank has joined. ncclCommAbort breaks the clique: the peers' waiting
// operations finish with ncclRemoteError. Operations that disagree across ranks (another collective, a
// count, a root, a receive of another size than the matching send) are ncclInvalidUsage, reported on
// stderr. Buffers must be emulated device memory (ncclInvalidArgument otherwise).
#pragma once
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "cuda/emu/runtime.h"

#define NCCL_MAJOR 2
#define NCCL_MINOR 30
#define NCCL_PATCH 7
#define NCCL_VERSION_CODE 23007
#define NCCL_UNIQUE_ID_BYTES 128

struct ncclUniqueId {
  char internal[NCCL_UNIQUE_ID_BYTES];
};

enum ncclResult_t {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
};

enum ncclDataType_t {
  ncclInt8 = 0, ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2, ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6, ncclHalf = 6,
  ncclFloat32 = 7, ncclFloat = 7,
  ncclFloat64 = 8, ncclDouble = 8,
};

enum ncclRedOp_t { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 };

struct ncclConfig_t {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
};
#define NCCL_CONFIG_INITIALIZER {sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION_CODE, 1}

namespace embshard::emu::nccl {

// One posted contribution to a collective: what it is (all ranks must agree) and a copy of its data.
struct Post {
  int kind = 0;
  size_t count = 0;
  int type = 0;
  int op = 0;
  int root = 0;
  std::vector<uint8_t> data;
};

// The ranks of one unique id.
struct Clique {
  explicit Clique(int n) : size(n), joined(static_cast<size_t>(n), false), channels(static_cast<size_t>(n) * n) {}
  const int size;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<bool> joined;
  int joinedCount = 0;
  bool aborted = false;
  // collective number -> the ranks' posts (slot erased once every rank has taken its result)
  struct Slot {
    std::vector<Post> posts;
    int postedCount = 0;
    int taken = 0;
  };
  std::map<uint64_t, Slot> slots;
  // channels[src * size + dst]: the messages src sent to dst, not yet received, in order
  std::vector<std::deque<std::vector<uint8_t>>> channels;
};

inline std::mutex& registry_mu() {
  static std::mutex m;
  return m;
}
inline std::map<std::string, std::weak_ptr<Clique>>& registry() {
  static std::map<std::string, std::weak_ptr<Clique>> r;
  return r;
}

struct Comm {
  std::shared_ptr<Clique> clique;
  int rank = 0;
  uint64_t nextCollective = 0;
  std::atomic<int> error{ncclSuccess};
  std::vector<Stream*> streams;  // the streams this communicator's operations were enqueued on
};

inline size_t type_size(int t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}
inline bool valid_type(int t) { return t >= ncclInt8 && t <= ncclFloat64 && t != ncclFloat16; }
inline bool valid_op(int op) { return op >= ncclSum && op <= ncclAvg; }

inline bool on_device(const void* p, size_t bytes) { return bytes == 0 || Memory::get().is_device(p, bytes); }

inline void report(Comm* c, ncclResult_t e, const std::string& why) {
  std::fprintf(stderr, "NCCL emulator: rank %d: %s\n", c->rank, why.c_str());
  int expected = ncclSuccess;
  c->error.compare_exchange_strong(expected, e);
}

template <typename T>
void reduce_typed(const std::vector<Post>& posts, size_t offset, size_t count, int op, void* out) {
  T* dst = static_cast<T*>(out);
  for (size_t i = 0; i < count; ++i) {
    T acc;
    std::memcpy(&acc, posts[0].data.data() + (offset + i) * sizeof(T), sizeof(T));
    for (size_t r = 1; r < posts.size(); ++r) {
      T x;
      std::memcpy(&x, posts[r].data.data() + (offset + i) * sizeof(T), sizeof(T));
      switch (op) {
        case ncclSum: case ncclAvg: acc = static_cast<T>(acc + x); break;
        case ncclProd: acc = static_cast<T>(acc * x); break;
        case ncclMax: acc = x > acc ? x : acc; break;
        default: acc = x < acc ? x : acc; break;
      }
    }
    if (op == ncclAvg) acc = static_cast<T>(acc / static_cast<T>(posts.size()));
    std::memcpy(dst + i, &acc, sizeof(T));
  }
}

// Elements [offset, offset + count) of every post, combined in rank order, into `out`.
inline void reduce(const std::vector<Post>& posts, size_t offset, size_t count, int type, int op, void* out) {
  switch (type) {
    case ncclInt8: reduce_typed<int8_t>(posts, offset, count, op, out); break;
    case ncclUint8: reduce_typed<uint8_t>(posts, offset, count, op, out); break;
    case ncclInt32: reduce_typed<int32_t>(posts, offset, count, op, out); break;
    case ncclUint32: reduce_typed<uint32_t>(posts, offset, count, op, out); break;
    case ncclInt64: reduce_typed<int64_t>(posts, offset, count, op, out); break;
    case ncclUint64: reduce_typed<uint64_t>(posts, offset, count, op, out); break;
    case ncclFloat32: reduce_typed<float>(posts, offset, count, op, out); break;
    default: reduce_typed<double>(posts, offset, count, op, out); break;
  }
}

enum Kind : int { kAllReduce = 1, kAllGather = 2, kBroadcast = 3, kReduceScatter = 4 };
inline const char* kind_name(int k) {
  switch (k) {
    case kAllReduce: return "ncclAllReduce";
    case kAllGather: return "ncclAllGather";
    case kBroadcast: return "ncclBroadcast";
    default: return "ncclReduceScatter";
  }
}

// The message that names both sides of a mismatched collective.
inline std::string format_mismatch(uint64_t seq, int rank, const Post& a, int peer, const Post& b) {
  char buf[320];
  std::snprintf(buf, sizeof(buf), "collective #%llu does not match: rank %d called %s(count %zu, type %d, op %d, root %d), rank %d called "
                "%s(count %zu, type %d, op %d, root %d)", static_cast<unsigned long long>(seq), rank, kind_name(a.kind), a.count, a.type,
                a.op, a.root, peer, kind_name(b.kind), b.count, b.type, b.op, b.root);
  return buf;
}

inline void remember_stream(Comm* c, Stream* s) {
  if (s && std::find(c->streams.begin(), c->streams.end(), s) == c->streams.end()) c->streams.push_back(s);
}

// Enqueues collective number `seq` of `c`: posts `mine` (its data copied from `send` when the stream
// reaches it), then, once every rank has posted, writes this rank's result to `recv`.
inline ncclResult_t collective(Comm* c, Post mine, const void* send, size_t sendBytes, void* recv, size_t recvBytes, Stream* s) {
  if (!c) return ncclInvalidArgument;
  if (!valid_type(mine.type) || !valid_op(mine.op) || mine.root < 0 || mine.root >= c->clique->size) return ncclInvalidArgument;
  if (!on_device(send, sendBytes) || !on_device(recv, recvBytes)) return ncclInvalidArgument;
  if (mine.count == 0) return ncclSuccess;  // NCCL skips empty collectives on every rank
  remember_stream(c, s);
  const uint64_t seq = c->nextCollective++;
  auto clique = c->clique;
  const int rank = c->rank;
  auto state = std::make_shared<Post>(std::move(mine));
  auto posted = std::make_shared<bool>(false);
  embshard::emu::enqueue(s, [=]() -> bool {
    std::lock_guard<std::mutex> lk(clique->mu);
    if (clique->aborted) {
      if (c->error.load() == ncclSuccess) report(c, ncclRemoteError, "a peer aborted the communicator");
      return true;
    }
    auto& slot = clique->slots[seq];
    if (slot.posts.empty()) slot.posts.resize(static_cast<size_t>(clique->size));
    if (!*posted) {
      state->data.assign(static_cast<const uint8_t*>(send), static_cast<const uint8_t*>(send) + sendBytes);
      slot.posts[static_cast<size_t>(rank)] = *state;
      slot.postedCount++;
      *posted = true;
    }
    if (slot.postedCount < clique->size) return false;
    const Post& me = *state;
    for (int r = 0; r < clique->size; ++r) {
      const Post& p = slot.posts[static_cast<size_t>(r)];
      if (p.kind != me.kind || p.count != me.count || p.type != me.type || p.op != me.op || p.root != me.root) {
        report(c, ncclInvalidUsage, format_mismatch(seq, rank, me, r, p));
        if (++slot.taken == clique->size) clique->slots.erase(seq);
        return true;
      }
    }
    const size_t es = type_size(me.type);
    uint8_t* out = static_cast<uint8_t*>(recv);
    switch (me.kind) {
      case kAllReduce: reduce(slot.posts, 0, me.count, me.type, me.op, out); break;
      case kReduceScatter: reduce(slot.posts, static_cast<size_t>(rank) * me.count, me.count, me.type, me.op, out); break;
      case kBroadcast: std::memcpy(out, slot.posts[static_cast<size_t>(me.root)].data.data(), me.count * es); break;
      default:
        for (int r = 0; r < clique->size; ++r)
          std::memcpy(out + static_cast<size_t>(r) * me.count * es, slot.posts[static_cast<size_t>(r)].data.data(), me.count * es);
    }
    if (++slot.taken == clique->size) clique->slots.erase(seq);
    return true;
  });
  return ncclSuccess;
}

// Point-to-point operations between ncclGroupStart and ncclGroupEnd, per host thread (as NCCL's groups are).
struct P2p {
  Comm* comm;
  Stream* stream;
  bool send;
  int peer;
  void* buf;
  size_t bytes;
};
struct GroupState {
  int depth = 0;
  std::vector<P2p> ops;
};
inline GroupState& group_state() {
  static thread_local GroupState g;
  return g;
}

// Enqueues one communicator's sends and receives of a group on one stream: the sends are posted when the
// stream reaches them; the step finishes once every receive has found its message.
inline void enqueue_p2p(Comm* c, Stream* s, std::vector<P2p> ops) {
  remember_stream(c, s);
  auto clique = c->clique;
  const int rank = c->rank;
  auto sent = std::make_shared<bool>(false);
  auto received = std::make_shared<size_t>(0);
  auto recvs = std::make_shared<std::vector<P2p>>();
  for (const P2p& o : ops)
    if (!o.send) recvs->push_back(o);
  embshard::emu::enqueue(s, [=]() -> bool {
    std::lock_guard<std::mutex> lk(clique->mu);
    if (clique->aborted) {
      if (c->error.load() == ncclSuccess) report(c, ncclRemoteError, "a peer aborted the communicator");
      return true;
    }
    const size_t n = static_cast<size_t>(clique->size);
    if (!*sent) {
      for (const P2p& o : ops)
        if (o.send) {
          const uint8_t* b = static_cast<const uint8_t*>(o.buf);
          clique->channels[static_cast<size_t>(rank) * n + static_cast<size_t>(o.peer)].emplace_back(b, b + o.bytes);
        }
      *sent = true;
    }
    while (*received < recvs->size()) {
      const P2p& o = (*recvs)[*received];
      auto& q = clique->channels[static_cast<size_t>(o.peer) * n + static_cast<size_t>(rank)];
      if (q.empty()) return false;
      if (q.front().size() != o.bytes) {
        report(c, ncclInvalidUsage, "a receive of " + std::to_string(o.bytes) + " bytes from rank " + std::to_string(o.peer) +
                                        " matched a send of " + std::to_string(q.front().size()) + " bytes");
        q.pop_front();
        return true;
      }
      std::memcpy(o.buf, q.front().data(), o.bytes);
      q.pop_front();
      ++*received;
    }
    return true;
  });
}

inline ncclResult_t p2p(bool send, void* buf, size_t count, ncclDataType_t t, int peer, Comm* c, Stream* s) {
  if (!c || !valid_type(t) || peer < 0 || peer >= c->clique->size) return ncclInvalidArgument;
  const size_t bytes = count * type_size(t);
  if (!on_device(buf, bytes)) return ncclInvalidArgument;
  P2p op{c, s, send, peer, buf, bytes};
  GroupState& g = group_state();
  if (g.depth > 0) g.ops.push_back(op);
  else enqueue_p2p(c, s, {op});
  return ncclSuccess;
}

}  // namespace embshard::emu::nccl

using ncclComm_t = embshard::emu::nccl::Comm*;

inline const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
  }
  return "unknown result code";
}

inline ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  static std::atomic<uint64_t> counter{0};
  static thread_local std::mt19937_64 gen{std::random_device{}()};
  std::memset(id->internal, 0, sizeof(id->internal));
  const uint64_t words[2] = {gen(), counter.fetch_add(1) + 1};
  std::memcpy(id->internal, words, sizeof(words));
  return ncclSuccess;
}

inline ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
  using namespace embshard::emu::nccl;
  if (!comm || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  const std::string key(id.internal, sizeof(id.internal));
  std::shared_ptr<Clique> clique;
  {
    std::lock_guard<std::mutex> lk(registry_mu());
    for (auto it = registry().begin(); it != registry().end();) it = it->second.expired() ? registry().erase(it) : std::next(it);
    auto& slot = registry()[key];
    clique = slot.lock();
    if (!clique) {
      clique = std::make_shared<Clique>(nranks);
      slot = clique;
    }
  }
  std::unique_lock<std::mutex> lk(clique->mu);
  if (clique->size != nranks || clique->joined[static_cast<size_t>(rank)]) return ncclInvalidUsage;
  clique->joined[static_cast<size_t>(rank)] = true;
  clique->joinedCount++;
  clique->cv.notify_all();
  auto* c = new Comm;
  c->clique = clique;
  c->rank = rank;
  *comm = c;
  if (config && config->blocking == 0) return clique->joinedCount == nranks ? ncclSuccess : ncclInProgress;
  clique->cv.wait(lk, [&] { return clique->joinedCount == nranks || clique->aborted; });
  return clique->aborted ? ncclRemoteError : ncclSuccess;
}
inline ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return ncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
}

// ncclInProgress until every rank has joined (non-blocking set-up), then the first error of this communicator.
inline ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async) {
  if (!comm) return ncclInvalidArgument;
  std::lock_guard<std::mutex> lk(comm->clique->mu);
  const int e = comm->error.load();
  if (e != ncclSuccess) *async = static_cast<ncclResult_t>(e);
  else if (comm->clique->aborted) *async = ncclRemoteError;
  else if (comm->clique->joinedCount < comm->clique->size) *async = ncclInProgress;
  else *async = ncclSuccess;
  return ncclSuccess;
}

inline ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}

// Breaks the clique for every rank and drops this communicator's waiting work from its streams (the
// aborted kernels, and what waited behind them, never run).
inline ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  {
    std::lock_guard<std::mutex> lk(comm->clique->mu);
    comm->clique->aborted = true;
    comm->clique->cv.notify_all();
  }
  for (embshard::emu::Stream* s : comm->streams) s->pending.clear();
  delete comm;
  return ncclSuccess;
}

inline ncclResult_t ncclGroupStart() {
  embshard::emu::nccl::group_state().depth++;
  return ncclSuccess;
}
inline ncclResult_t ncclGroupEnd() {
  using namespace embshard::emu::nccl;
  GroupState& g = group_state();
  if (g.depth == 0) return ncclInvalidUsage;
  if (--g.depth > 0) return ncclSuccess;
  std::vector<P2p> ops;
  ops.swap(g.ops);
  // one step per (communicator, stream), in the order each first appeared
  while (!ops.empty()) {
    Comm* c = ops.front().comm;
    embshard::emu::Stream* s = ops.front().stream;
    std::vector<P2p> mine, rest;
    for (const P2p& o : ops) (o.comm == c && o.stream == s ? mine : rest).push_back(o);
    enqueue_p2p(c, s, std::move(mine));
    ops.swap(rest);
  }
  return ncclSuccess;
}

inline ncclResult_t ncclSend(const void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t s) {
  return embshard::emu::nccl::p2p(true, const_cast<void*>(buf), count, t, peer, comm, s);
}
inline ncclResult_t ncclRecv(void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t s) {
  return embshard::emu::nccl::p2p(false, buf, count, t, peer, comm, s);
}

inline ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t comm,
                                  cudaStream_t s) {
  using namespace embshard::emu::nccl;
  const size_t bytes = count * type_size(t);
  return collective(comm, Post{kAllReduce, count, t, op, 0, {}}, send, bytes, recv, bytes, s);
}
inline ncclResult_t ncclAllGather(const void* send, void* recv, size_t sendcount, ncclDataType_t t, ncclComm_t comm, cudaStream_t s) {
  using namespace embshard::emu::nccl;
  const size_t bytes = sendcount * type_size(t);
  return collective(comm, Post{kAllGather, sendcount, t, ncclSum, 0, {}}, send, bytes, recv, comm ? bytes * comm->clique->size : 0, s);
}
inline ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t t, int root, ncclComm_t comm,
                                  cudaStream_t s) {
  using namespace embshard::emu::nccl;
  const size_t bytes = count * type_size(t);
  // only the root's send buffer is read
  const bool isRoot = comm && comm->rank == root;
  return collective(comm, Post{kBroadcast, count, t, ncclSum, root, {}}, send, isRoot ? bytes : 0, recv, bytes, s);
}
inline ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recvcount, ncclDataType_t t, ncclRedOp_t op, ncclComm_t comm,
                                      cudaStream_t s) {
  using namespace embshard::emu::nccl;
  const size_t bytes = recvcount * type_size(t);
  return collective(comm, Post{kReduceScatter, recvcount, t, op, 0, {}}, send, comm ? bytes * comm->clique->size : 0, recv, bytes, s);
}
