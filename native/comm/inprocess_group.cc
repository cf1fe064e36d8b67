// inprocess_group.cc — the in-process rendezvous and its collectives (see inprocess_group.h).
#include "comm/inprocess_group.h"

#include <condition_variable>
#include <cstring>
#include <mutex>

#include "core/errors.h"

namespace embshard::comm {

enum class Op : uint8_t { Counts, AllToAllV, GatherCounts, AllGatherV, Broadcast, Barrier };

static const char* op_name(Op op) {
  switch (op) {
    case Op::Counts: return "allToAllV (counts)";
    case Op::AllToAllV: return "allToAllV";
    case Op::GatherCounts: return "allGather (counts)";
    case Op::AllGatherV: return "allGather";
    case Op::Broadcast: return "broadcast";
    case Op::Barrier: return "barrier";
  }
  return "?";
}

// What one rank posts for one collective: its buffers, valid until the release meeting.
struct Post {
  uint64_t seq = 0;
  Op op = Op::Barrier;
  const uint8_t* data = nullptr;     // send buffer (broadcast: the data)
  const int64_t* bytes = nullptr;    // per-peer byte counts (counts / all-to-all-v)
  const int64_t* offsets = nullptr;  // per-peer offsets (all-to-all-v)
  int64_t a = 0;                     // total bytes (all-gather, broadcast)
  int64_t b = 0;                     // root (broadcast)
  std::string call;                  // the all-reduce this is a phase of ("" for a collective of its own)
};

// What a rank called, for messages: the all-reduce a phase belongs to, else the collective.
static std::string call_name(const Post& p) { return p.call.empty() ? op_name(p.op) : p.call + " (" + op_name(p.op) + ")"; }

class Rendezvous {
 public:
  explicit Rendezvous(int n) : posts(static_cast<size_t>(n)), released(static_cast<size_t>(n), 0) {}
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Post> posts;
  std::vector<uint64_t> released;
  bool broken = false;
  std::string why;

  void break_locked(const std::string& reason) {
    if (!broken) {
      broken = true;
      why = reason;
    }
    cv.notify_all();
  }
};

namespace {

[[noreturn]] void fail_broken(const Rendezvous& rv, int rank) {
  fail("COMM_FAILED", "rank %d: the in-process group is broken (%s)", rank, rv.why.c_str());
}

// Runs one collective: post, meet, read peers' buffers with `body`, meet again to release them.
template <typename Body>
void collective(Rendezvous& rv, int rank, int n, uint64_t& seqCounter, Post mine, const Deadline& d, Body&& body) {
  const uint64_t seq = ++seqCounter;
  mine.seq = seq;
  {
    std::unique_lock<std::mutex> lk(rv.mu);
    if (rv.broken) fail_broken(rv, rank);
    rv.posts[static_cast<size_t>(rank)] = mine;
    rv.cv.notify_all();
    auto arrived = [&] {
      for (const Post& p : rv.posts)
        if (p.seq != seq) return false;
      return true;
    };
    while (!rv.broken && !arrived()) {
      if (rv.cv.wait_until(lk, d.at) == std::cv_status::timeout && !arrived() && !rv.broken) {
        std::string missing;
        for (int p = 0; p < n; ++p)
          if (rv.posts[static_cast<size_t>(p)].seq != seq) missing += (missing.empty() ? "" : ", ") + std::to_string(p);
        std::string msg = format("rank %d: %s (collective #%llu) timed out after %.0f ms waiting for rank(s) %s", rank,
                                 call_name(mine).c_str(), static_cast<unsigned long long>(seq), d.ms, missing.c_str());
        rv.posts[static_cast<size_t>(rank)].seq = 0;  // withdraw the buffers
        rv.break_locked(msg);
        throw Error("COMM_TIMEOUT", msg);
      }
    }
    if (!arrived()) {
      rv.posts[static_cast<size_t>(rank)].seq = 0;
      fail_broken(rv, rank);
    }
    // Every rank sees the same posts, so every rank reaches the same verdict on a mismatch.
    for (int p = 0; p < n; ++p) {
      const Post& q = rv.posts[static_cast<size_t>(p)];
      if (q.op != mine.op || q.call != mine.call) {
        std::string msg = format("mismatched collectives at #%llu: rank %d called %s, rank %d called %s",
                                 static_cast<unsigned long long>(seq), rank, call_name(mine).c_str(), p, call_name(q).c_str());
        rv.break_locked(msg);
        throw Error("COMM_FAILED", msg);
      }
    }
  }
  std::string mismatch;
  try {
    body(rv.posts);
  } catch (const Error& e) {
    mismatch = e.what();
  }
  {
    std::unique_lock<std::mutex> lk(rv.mu);
    rv.released[static_cast<size_t>(rank)] = seq;
    rv.cv.notify_all();
    // Peers may be reading our buffers: wait for all of them (bounded by a memcpy, never by a peer's
    // arrival, so no deadline applies here).
    rv.cv.wait(lk, [&] {
      for (uint64_t r : rv.released)
        if (r < seq) return false;
      return true;
    });
    if (!mismatch.empty()) {
      rv.break_locked(mismatch);
      throw Error("COMM_FAILED", mismatch);
    }
  }
}

}  // namespace

std::vector<std::shared_ptr<InProcessGroup>> InProcessGroup::create(int n, int ranksPerNode) {
  if (n < 1 || n > 4096) fail("INVALID_ARGUMENT", "createInProcessGroups: size must be in [1, 4096] (got %d)", n);
  if (ranksPerNode < 1 || ranksPerNode > n)
    fail("INVALID_ARGUMENT", "createInProcessGroups: ranksPerNode must be in [1, %d] (got %d)", n, ranksPerNode);
  auto rv = std::make_shared<Rendezvous>(n);
  std::vector<std::shared_ptr<InProcessGroup>> out;
  for (int r = 0; r < n; ++r) out.push_back(std::make_shared<InProcessGroup>(rv, r, n, ranksPerNode));
  return out;
}

InProcessGroup::InProcessGroup(std::shared_ptr<Rendezvous> rv, int rank, int size, int ranksPerNode)
    : Group(rank, size, ranksPerNode), rv_(std::move(rv)) {}

void InProcessGroup::exchange_counts(const int64_t* sendBytes, int64_t* recvBytes, const Deadline& d) {
  Post mine;
  mine.call = call_;
  mine.op = Op::Counts;
  mine.bytes = sendBytes;
  collective(*rv_, rank_, size_, seq_, mine, d, [&](const std::vector<Post>& posts) {
    for (int p = 0; p < size_; ++p) recvBytes[p] = posts[static_cast<size_t>(p)].bytes[rank_];
  });
}

void InProcessGroup::all_to_all_v(const uint8_t* send, const int64_t* sendBytes, const int64_t* sendOffsets,
                                  uint8_t* recv, const int64_t* recvBytes, const int64_t* recvOffsets,
                                  const Deadline& d) {
  Post mine;
  mine.call = call_;
  mine.op = Op::AllToAllV;
  mine.data = send;
  mine.bytes = sendBytes;
  mine.offsets = sendOffsets;
  collective(*rv_, rank_, size_, seq_, mine, d, [&](const std::vector<Post>& posts) {
    for (int p = 0; p < size_; ++p) {
      const Post& q = posts[static_cast<size_t>(p)];
      int64_t n = q.bytes[rank_];
      if (n != recvBytes[p])
        fail("COMM_FAILED", "allToAllV: rank %d sends %lld bytes to rank %d, which expects %lld", p,
             static_cast<long long>(n), rank_, static_cast<long long>(recvBytes[p]));
      if (n > 0) std::memcpy(recv + recvOffsets[p], q.data + q.offsets[rank_], static_cast<size_t>(n));
    }
  });
}

void InProcessGroup::gather_counts(int64_t bytes, int64_t* recvBytes, const Deadline& d) {
  Post mine;
  mine.call = call_;
  mine.op = Op::GatherCounts;
  mine.a = bytes;
  collective(*rv_, rank_, size_, seq_, mine, d, [&](const std::vector<Post>& posts) {
    for (int p = 0; p < size_; ++p) recvBytes[p] = posts[static_cast<size_t>(p)].a;
  });
}

void InProcessGroup::all_gather_v(const uint8_t* send, int64_t bytes, uint8_t* recv, const int64_t* recvBytes,
                                  const Deadline& d) {
  Post mine;
  mine.call = call_;
  mine.op = Op::AllGatherV;
  mine.data = send;
  mine.a = bytes;
  collective(*rv_, rank_, size_, seq_, mine, d, [&](const std::vector<Post>& posts) {
    int64_t off = 0;
    for (int p = 0; p < size_; ++p) {
      const Post& q = posts[static_cast<size_t>(p)];
      if (q.a != recvBytes[p])
        fail("COMM_FAILED", "allGather: rank %d contributes %lld bytes, rank %d expects %lld", p,
             static_cast<long long>(q.a), rank_, static_cast<long long>(recvBytes[p]));
      if (q.a > 0) std::memcpy(recv + off, q.data, static_cast<size_t>(q.a));
      off += q.a;
    }
  });
}

void InProcessGroup::broadcast(uint8_t* data, int64_t bytes, int root, const Deadline& d) {
  Post mine;
  mine.call = call_;
  mine.op = Op::Broadcast;
  mine.data = data;
  mine.a = bytes;
  mine.b = root;
  collective(*rv_, rank_, size_, seq_, mine, d, [&](const std::vector<Post>& posts) {
    for (int p = 0; p < size_; ++p) {
      const Post& q = posts[static_cast<size_t>(p)];
      if (q.a != bytes || q.b != root)
        fail("COMM_FAILED", "broadcast: rank %d passed %lld bytes from root %lld, rank %d passed %lld bytes from root %d", p,
             static_cast<long long>(q.a), static_cast<long long>(q.b), rank_, static_cast<long long>(bytes), root);
    }
    if (rank_ != root && bytes > 0) std::memcpy(data, posts[static_cast<size_t>(root)].data, static_cast<size_t>(bytes));
  });
}

void InProcessGroup::barrier(const Deadline& d) {
  Post mine;
  mine.call = call_;
  mine.op = Op::Barrier;
  collective(*rv_, rank_, size_, seq_, mine, d, [](const std::vector<Post>&) {});
}

void InProcessGroup::all_reduce(void* data, int64_t count, ElemType t, ReduceOp op, bool deterministic, const Deadline& d) {
  call_ = format("allReduce (%s %s of %lld elements%s)", elem_type_name(t), reduce_op_name(op), static_cast<long long>(count),
                 deterministic ? ", deterministic" : "");
  struct Reset {
    std::string& s;
    ~Reset() { s.clear(); }
  } reset{call_};
  Group::all_reduce(data, count, t, op, deterministic, d);
}

void InProcessGroup::abort(const std::string& why) {
  std::lock_guard<std::mutex> lk(rv_->mu);
  rv_->break_locked(format("rank %d left: %s", rank_, why.c_str()));
}

}  // namespace embshard::comm
