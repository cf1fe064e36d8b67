// mpi_group.cc — the MPI process group (see mpi_group.h).
#include "comm/mpi/mpi_group.h"

#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "core/errors.h"

namespace embshard::comm {

namespace {

enum Kind : int { kCounts = 1, kGatherCounts = 2, kAllReduce = 3, kBroadcast = 4, kBarrier = 5 };

const char* kind_name(int k) {
  switch (k) {
    case kCounts: return "allToAllV";
    case kGatherCounts: return "allGather";
    case kAllReduce: return "allReduce";
    case kBroadcast: return "broadcast";
    case kBarrier: return "barrier";
  }
  return "?";
}

std::mutex g_init_mu;
bool g_initialized_here = false;
std::atomic<bool> g_abandoned{false};  // a request was left pending at a deadline

// Finalises MPI at exit unless a request was abandoned at a deadline (finalising then could wait for
// ever on a dead peer); mpirun then reports the unfinalised exit, which is the truth.
void finalize_at_exit() {
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin && !g_abandoned.load()) MPI_Finalize();
}

std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return format("MPI error %d", code);
  return std::string(buf, static_cast<size_t>(len));
}

int to_int(int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX) fail("INVALID_SIZE", "%s: %lld bytes exceed what one MPI message carries (2 GiB)", what, static_cast<long long>(v));
  return static_cast<int>(v);
}

// The buffers of a signature or count exchange: this rank's part and everyone's.
struct Exchange {
  std::vector<int64_t> out, in;
};

// An all-to-all-v's per-peer byte counts and offsets as MPI's int counts and displacements (send, recv).
struct IntLayout {
  std::vector<int> sc, sd, rc, rd;
};
IntLayout int_layout(int size, const int64_t* sendBytes, const int64_t* sendOffsets, const int64_t* recvBytes,
                     const int64_t* recvOffsets) {
  const size_t n = static_cast<size_t>(size);
  IntLayout l{std::vector<int>(n), std::vector<int>(n), std::vector<int>(n), std::vector<int>(n)};
  for (size_t p = 0; p < n; ++p) {
    l.sc[p] = to_int(sendBytes[p], "allToAllV");
    l.sd[p] = to_int(sendOffsets[p], "allToAllV");
    l.rc[p] = to_int(recvBytes[p], "allToAllV");
    l.rd[p] = to_int(recvOffsets[p], "allToAllV");
  }
  return l;
}
}  // namespace

bool mpi_initialized() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

std::shared_ptr<MpiGroup> MpiGroup::create_world(const Deadline& d) {
  {
    std::lock_guard<std::mutex> lk(g_init_mu);
    int init = 0, fin = 0;
    MPI_Finalized(&fin);
    if (fin) fail("COMM_FAILED", "MPI has already been finalised in this process");
    MPI_Initialized(&init);
    if (!init) {
      // Open MPI's non-blocking all-reduce picks a binomial reduce + broadcast whenever the call is in
      // place or has fewer than 4 ranks: every step of its trees carries the whole buffer. Reduce-scatter
      // + all-gather (libnbc algorithm 3, Rabenseifner) moves 2 (W-1)/W of it, the bandwidth-optimal
      // amount (libnbc runs a ring instead when the buffer has fewer elements than the largest power of two
      // not above the rank count). A user's own setting wins.
      setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", 0);
      int provided = 0;
      if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
        fail("COMM_FAILED", "MPI_Init_thread failed");
      g_initialized_here = true;
      std::atexit(finalize_at_exit);
      if (provided < MPI_THREAD_MULTIPLE)
        fail("COMM_FAILED", "this MPI library provides thread level %d, MPI_THREAD_MULTIPLE (%d) is needed", provided,
             MPI_THREAD_MULTIPLE);
    } else {
      int provided = 0;
      MPI_Query_thread(&provided);
      if (provided < MPI_THREAD_MULTIPLE)
        fail("COMM_FAILED", "MPI was initialised elsewhere without MPI_THREAD_MULTIPLE (level %d)", provided);
    }
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm comm;
  MPI_Request req;
  if (MPI_Comm_idup(MPI_COMM_WORLD, &comm, &req) != MPI_SUCCESS) fail("COMM_FAILED", "MPI_Comm_idup failed");
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  auto g = std::make_shared<MpiGroup>(MPI_COMM_NULL, rank, size, 1);
  g->wait(req, d, "createMpiGroup (communicator duplication)");
  g->comm_ = comm;
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  // Ranks per node: the size of this rank's shared-memory communicator, unless overridden (to model
  // several nodes on one machine).
  int rpn = 1;
  if (const char* env = std::getenv("EMBSHARD_RANKS_PER_NODE")) {
    rpn = std::atoi(env);
    if (rpn < 1 || rpn > size || size % rpn != 0)
      fail("INVALID_ARGUMENT", "EMBSHARD_RANKS_PER_NODE=%s must divide the world size %d", env, size);
  } else {
    MPI_Comm local;
    MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
    MPI_Comm_size(local, &rpn);
    MPI_Comm_free(&local);
  }
  g->ranksPerNode_ = rpn;
  return g;
}

MpiGroup::MpiGroup(MPI_Comm comm, int rank, int size, int ranksPerNode) : Group(rank, size, ranksPerNode), comm_(comm) {}

MpiGroup::~MpiGroup() {
  if (comm_ != MPI_COMM_NULL && !broken_.load() && mpi_initialized()) MPI_Comm_free(&comm_);
}

void MpiGroup::check_usable() const {
  if (broken_.load()) fail("COMM_FAILED", "rank %d: the MPI group is broken (%s)", rank_, why_.c_str());
  if (!mpi_initialized()) fail("COMM_FAILED", "rank %d: MPI is finalised", rank_);
}

void MpiGroup::abort(const std::string& why) {
  if (!broken_.exchange(true)) why_ = why;
}

void MpiGroup::abandon() {
  g_abandoned.store(true);
  abandoned_.fetch_add(1);
}

template <class T>
void MpiGroup::wait_holding(MPI_Request& req, const Deadline& d, const char* what, std::unique_ptr<T>& bufs) {
  const uint64_t before = abandoned_.load();
  try {
    wait(req, d, what);
  } catch (...) {
    if (abandoned_.load() != before) bufs.release();  // deliberately never freed: MPI may still write it
    throw;
  }
}

bool MpiGroup::poll(MPI_Request& req, const char* what) {
  int flag = 0;
  MPI_Status st;
  int rc = MPI_Test(&req, &flag, &st);
  if (rc != MPI_SUCCESS) {
    std::string msg = format("rank %d: %s failed: %s", rank_, what, mpi_error_string(rc).c_str());
    abort(msg);
    throw Error("COMM_FAILED", msg);
  }
  if (flag) return true;
  if (broken_.load()) {
    abandon();
    fail("COMM_FAILED", "rank %d: %s abandoned: the MPI group is broken (%s)", rank_, what, why_.c_str());
  }
  return false;
}

void MpiGroup::wait(MPI_Request& req, const Deadline& d, const char* what) {
  // Spin while data is moving (MPI progresses inside MPI_Test), then back off to sleeps once the wait
  // is clearly on a peer, so ranks sharing cores do not starve each other.
  auto start = Clock::now();
  for (;;) {
    if (poll(req, what)) return;
    auto now = Clock::now();
    if (now >= d.at) {
      std::string msg = format("rank %d: %s timed out after %.0f ms (a peer died, stalled or called another collective)",
                               rank_, what, d.ms);
      abandon();
      abort(msg);
      throw Error("COMM_TIMEOUT", msg);
    }
    if (now - start < std::chrono::milliseconds(5)) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(now - start < std::chrono::milliseconds(100) ? 20 : 200));
  }
}

// A collective started without blocking: its request and the int layout MPI reads while it runs.
class MpiStarted : public Started {
 public:
  MpiStarted(MpiGroup* g, IntLayout l, const char* what) : g_(g), l_(std::move(l)), what_(what) {}
  // A request left in flight keeps its layout: MPI may still read it.
  ~MpiStarted() override {
    if (!done_ && req_ != MPI_REQUEST_NULL) new IntLayout(std::move(l_));  // deliberately never freed
  }
  bool test() override { return done_ || (done_ = g_->poll(req_, what_)); }
  void wait(const Deadline& d) override {
    if (!done_) g_->wait(req_, d, what_);
    done_ = true;
  }

 private:
  friend class MpiGroup;
  MpiGroup* g_;
  IntLayout l_;
  const char* what_;
  MPI_Request req_ = MPI_REQUEST_NULL;
  bool done_ = false;
};

void MpiGroup::check_signature(int kind, int64_t a, int64_t b, bool sameA, const Deadline& d, const char* what) {
  const uint64_t seq = ++seq_;
  auto bufs = std::make_unique<Exchange>(Exchange{{kind, static_cast<int64_t>(seq), a, b}, std::vector<int64_t>(static_cast<size_t>(size_) * 4)});
  MPI_Request req;
  int rc = MPI_Iallgather(bufs->out.data(), 4, MPI_INT64_T, bufs->in.data(), 4, MPI_INT64_T, comm_, &req);
  if (rc != MPI_SUCCESS) fail("COMM_FAILED", "rank %d: %s: %s", rank_, what, mpi_error_string(rc).c_str());
  wait_holding(req, d, what, bufs);
  for (int p = 0; p < size_; ++p) {
    const int64_t* s = &bufs->in[static_cast<size_t>(p) * 4];
    if (s[0] != kind || s[1] != static_cast<int64_t>(seq) || s[3] != b || (sameA && s[2] != a)) {
      std::string msg = format(
          "mismatched collectives: rank %d called %s #%llu (%lld, %lld), rank %d called %s #%lld (%lld, %lld)", rank_,
          kind_name(kind), static_cast<unsigned long long>(seq), static_cast<long long>(a), static_cast<long long>(b), p,
          kind_name(static_cast<int>(s[0])), static_cast<long long>(s[1]), static_cast<long long>(s[2]),
          static_cast<long long>(s[3]));
      abort(msg);
      throw Error("COMM_FAILED", msg);
    }
  }
}

void MpiGroup::exchange_counts(const int64_t* sendBytes, int64_t* recvBytes, const Deadline& d) {
  check_usable();
  const uint64_t seq = ++seq_;
  const size_t n = static_cast<size_t>(size_);
  auto bufs = std::make_unique<Exchange>(Exchange{std::vector<int64_t>(n * 3), std::vector<int64_t>(n * 3)});
  std::vector<int64_t>& out = bufs->out;
  const std::vector<int64_t>& in = bufs->in;
  for (size_t p = 0; p < n; ++p) {
    out[p * 3] = kCounts;
    out[p * 3 + 1] = static_cast<int64_t>(seq);
    out[p * 3 + 2] = sendBytes[p];
  }
  MPI_Request req;
  int rc = MPI_Ialltoall(out.data(), 3, MPI_INT64_T, bufs->in.data(), 3, MPI_INT64_T, comm_, &req);
  if (rc != MPI_SUCCESS) fail("COMM_FAILED", "rank %d: allToAllV counts: %s", rank_, mpi_error_string(rc).c_str());
  wait_holding(req, d, "allToAllV (count exchange)", bufs);
  for (size_t p = 0; p < n; ++p) {
    if (in[p * 3] != kCounts || in[p * 3 + 1] != static_cast<int64_t>(seq)) {
      std::string msg = format("mismatched collectives: rank %d called allToAllV #%llu, rank %zu called %s #%lld", rank_,
                               static_cast<unsigned long long>(seq), p, kind_name(static_cast<int>(in[p * 3])),
                               static_cast<long long>(in[p * 3 + 1]));
      abort(msg);
      throw Error("COMM_FAILED", msg);
    }
    recvBytes[p] = in[p * 3 + 2];
  }
}

void MpiGroup::all_to_all_v(const uint8_t* send, const int64_t* sendBytes, const int64_t* sendOffsets, uint8_t* recv,
                            const int64_t* recvBytes, const int64_t* recvOffsets, const Deadline& d) {
  start_all_to_all_v(send, sendBytes, sendOffsets, recv, recvBytes, recvOffsets)->wait(d);
}

std::unique_ptr<Started> MpiGroup::start_all_to_all_v(const uint8_t* send, const int64_t* sendBytes, const int64_t* sendOffsets,
                                                     uint8_t* recv, const int64_t* recvBytes, const int64_t* recvOffsets) {
  check_usable();
  auto s = std::make_unique<MpiStarted>(this, int_layout(size_, sendBytes, sendOffsets, recvBytes, recvOffsets), "allToAllV");
  IntLayout& l = s->l_;
  // This rank's own block is a plain copy, done here while MPI moves the others: MPI's self copy is up
  // to twice as slow when the two buffers' addresses differ in alignment. (Unequal self counts stay
  // with MPI, which reports them.)
  const size_t me = static_cast<size_t>(rank_);
  const int self = l.sc[me] == l.rc[me] ? l.sc[me] : 0;
  if (self > 0) l.sc[me] = l.rc[me] = 0;
  int e = MPI_Ialltoallv(send, l.sc.data(), l.sd.data(), MPI_BYTE, recv, l.rc.data(), l.rd.data(), MPI_BYTE, comm_, &s->req_);
  if (e != MPI_SUCCESS) fail("COMM_FAILED", "rank %d: allToAllV: %s", rank_, mpi_error_string(e).c_str());
  if (self > 0) std::memcpy(recv + l.rd[me], send + l.sd[me], static_cast<size_t>(self));
  return s;
}

void MpiGroup::raw_all_to_all_v(const uint8_t* send, const int64_t* sendBytes, const int64_t* sendOffsets,
                                uint8_t* recv, const int64_t* recvBytes, const int64_t* recvOffsets) {
  check_usable();
  const IntLayout l = int_layout(size_, sendBytes, sendOffsets, recvBytes, recvOffsets);
  int e = MPI_Alltoallv(send, l.sc.data(), l.sd.data(), MPI_BYTE, recv, l.rc.data(), l.rd.data(), MPI_BYTE, comm_);
  if (e != MPI_SUCCESS) fail("COMM_FAILED", "rank %d: MPI_Alltoallv: %s", rank_, mpi_error_string(e).c_str());
}

void MpiGroup::gather_counts(int64_t bytes, int64_t* recvBytes, const Deadline& d) {
  check_usable();
  // The same 4-wide signature as every other collective, carrying this rank's byte count.
  const uint64_t seq = ++seq_;
  auto bufs = std::make_unique<Exchange>(Exchange{{kGatherCounts, static_cast<int64_t>(seq), bytes, 0}, std::vector<int64_t>(static_cast<size_t>(size_) * 4)});
  MPI_Request req;
  int rc = MPI_Iallgather(bufs->out.data(), 4, MPI_INT64_T, bufs->in.data(), 4, MPI_INT64_T, comm_, &req);
  if (rc != MPI_SUCCESS) fail("COMM_FAILED", "rank %d: allGather counts: %s", rank_, mpi_error_string(rc).c_str());
  wait_holding(req, d, "allGather (count exchange)", bufs);
  for (int p = 0; p < size_; ++p) {
    const int64_t* s = &bufs->in[static_cast<size_t>(p) * 4];
    if (s[0] != kGatherCounts || s[1] != static_cast<int64_t>(seq)) {
      std::string msg = format("mismatched collectives: rank %d called allGather #%llu, rank %d called %s #%lld", rank_,
                               static_cast<unsigned long long>(seq), p, kind_name(static_cast<int>(s[0])),
                               static_cast<long long>(s[1]));
      abort(msg);
      throw Error("COMM_FAILED", msg);
    }
    recvBytes[p] = s[2];
  }
}

void MpiGroup::all_gather_v(const uint8_t* send, int64_t bytes, uint8_t* recv, const int64_t* recvBytes,
                            const Deadline& d) {
  start_all_gather_v(send, bytes, recv, recvBytes)->wait(d);
}

std::unique_ptr<Started> MpiGroup::start_all_gather_v(const uint8_t* send, int64_t bytes, uint8_t* recv, const int64_t* recvBytes) {
  check_usable();
  const size_t n = static_cast<size_t>(size_);
  IntLayout l{{}, {}, std::vector<int>(n), std::vector<int>(n)};
  int64_t off = 0;
  for (size_t p = 0; p < n; ++p) {
    l.rc[p] = to_int(recvBytes[p], "allGather");
    l.rd[p] = to_int(off, "allGather");
    off += recvBytes[p];
  }
  auto s = std::make_unique<MpiStarted>(this, std::move(l), "allGather");
  int e = MPI_Iallgatherv(send, to_int(bytes, "allGather"), MPI_BYTE, recv, s->l_.rc.data(), s->l_.rd.data(), MPI_BYTE, comm_,
                          &s->req_);
  if (e != MPI_SUCCESS) fail("COMM_FAILED", "rank %d: allGather: %s", rank_, mpi_error_string(e).c_str());
  return s;
}

void MpiGroup::all_reduce(void* data, int64_t count, ElemType t, ReduceOp op, bool deterministic, const Deadline& d) {
  check_usable();
  check_signature(kAllReduce, count * static_cast<int64_t>(elem_size(t)),
                  static_cast<int64_t>(t) * 16 + static_cast<int64_t>(op) * 2 + (deterministic ? 1 : 0), true, d,
                  "allReduce (signature)");
  if (deterministic) {
    // Group::all_reduce's gather-and-sum, its receive buffer left to MPI if the gather is abandoned.
    const int64_t bytes = count * static_cast<int64_t>(elem_size(t));
    std::vector<int64_t> each(static_cast<size_t>(size_), bytes);
    auto all = std::make_unique<std::vector<uint8_t>>(static_cast<size_t>(bytes) * static_cast<size_t>(size_));
    auto s = start_all_gather_v(static_cast<const uint8_t*>(data), bytes, all->data(), each.data());
    const uint64_t before = abandoned_.load();
    try {
      s->wait(d);
    } catch (...) {
      if (abandoned_.load() != before) all.release();  // deliberately never freed: MPI may still write it
      throw;
    }
    reduce_in_rank_order(all->data(), size_, count, t, op, data);
    return;
  }
  // MPI's own all-reduce (Open MPI picks ring / Rabenseifner / recursive doubling by size).
  MPI_Datatype type = t == ElemType::F32 ? MPI_FLOAT : t == ElemType::F64 ? MPI_DOUBLE : t == ElemType::I32 ? MPI_INT32_T : MPI_INT64_T;
  MPI_Op mop = op == ReduceOp::Sum ? MPI_SUM : op == ReduceOp::Max ? MPI_MAX : MPI_MIN;
  if (count > INT_MAX) fail("INVALID_SIZE", "allReduce: %lld elements exceed what one MPI call carries", static_cast<long long>(count));
  MPI_Request req;
  int e = MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), type, mop, comm_, &req);
  if (e != MPI_SUCCESS) fail("COMM_FAILED", "rank %d: allReduce: %s", rank_, mpi_error_string(e).c_str());
  wait(req, d, "allReduce");
}

void MpiGroup::raw_all_reduce(float* data, int64_t count) {
  check_usable();
  if (count > INT_MAX) fail("INVALID_SIZE", "allReduce: %lld elements exceed what one MPI call carries", static_cast<long long>(count));
  int e = MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm_);
  if (e != MPI_SUCCESS) fail("COMM_FAILED", "rank %d: MPI_Allreduce: %s", rank_, mpi_error_string(e).c_str());
}

void MpiGroup::broadcast(uint8_t* data, int64_t bytes, int root, const Deadline& d) {
  check_usable();
  check_signature(kBroadcast, bytes, root, true, d, "broadcast (signature)");
  MPI_Request req;
  int e = MPI_Ibcast(data, to_int(bytes, "broadcast"), MPI_BYTE, root, comm_, &req);
  if (e != MPI_SUCCESS) fail("COMM_FAILED", "rank %d: broadcast: %s", rank_, mpi_error_string(e).c_str());
  wait(req, d, "broadcast");
}

void MpiGroup::barrier(const Deadline& d) {
  check_usable();
  // The signature exchange is itself a full synchronisation.
  check_signature(kBarrier, 0, 0, true, d, "barrier");
}

}  // namespace embshard::comm
