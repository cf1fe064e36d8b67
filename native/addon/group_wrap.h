// group_wrap.h — the JS handle of one rank of a process group (any implementation). Collectives are
// queued on the handle's own worker thread (comm/executor.h) in call order and settle a Promise on the
// JS thread through a thread-safe function (a one-rank in-process or MPI group runs a collective with
// nothing queued before it at once on the JS thread: it is a local copy; on several MPI ranks an
// all-to-all or all-gather with known sizes and nothing queued is started on the JS thread and settles at once if it
// completes within a short poll, the worker thread waiting for it otherwise); typed arrays are read and written in place (no copies)
// and held alive until the call settles. Factories (group_inprocess.cc, group_mpi.cc, group_nccl.cc)
// create handles with GroupWrap::Create.
#pragma once
#include <napi.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "addon/js_args.h"
#include "comm/executor.h"
#include "comm/group.h"

namespace embshard::addon {

struct GroupJob;

// A collective's data phase into `recv` (blocking, on the worker thread), and the same started without
// blocking (null where the transport cannot).
using DataFn = std::function<void(comm::Group*, uint8_t* recv, const std::vector<int64_t>& recvBytes, const comm::Deadline&)>;
using StartFn = std::function<std::unique_ptr<comm::Started>(comm::Group*, uint8_t* recv)>;

class GroupWrap : public Napi::ObjectWrap<GroupWrap> {
 public:
  // A handle whose group is made by `init` on the handle's worker thread (MPI/NCCL set-up is itself a
  // collective); ready() settles when it is done. `init` may be empty when `group` is given.
  static Napi::Object Create(Napi::Env env, std::shared_ptr<comm::Group> group,
                             std::function<std::shared_ptr<comm::Group>()> init);
  // The constructor of the handle class (one per environment).
  static Napi::Function Constructor(Napi::Env env);

  explicit GroupWrap(const Napi::CallbackInfo& info);
  ~GroupWrap() override;

  // Queues the job on the worker thread; its promise settles on the JS thread.
  Napi::Promise Submit(Napi::Env env, std::unique_ptr<GroupJob> job);

 private:
  Napi::Value Ready(const Napi::CallbackInfo& info);
  Napi::Value Rank(const Napi::CallbackInfo& info);
  Napi::Value Size(const Napi::CallbackInfo& info);
  Napi::Value RanksPerNode(const Napi::CallbackInfo& info);
  Napi::Value Kind(const Napi::CallbackInfo& info);
  Napi::Value AllToAllV(const Napi::CallbackInfo& info);
  Napi::Value AllGather(const Napi::CallbackInfo& info);
  Napi::Value AllReduce(const Napi::CallbackInfo& info);
  Napi::Value AllReduceDevice(const Napi::CallbackInfo& info);
  Napi::Value AllToAllDevice(const Napi::CallbackInfo& info);
  Napi::Value AllGatherDevice(const Napi::CallbackInfo& info);
  Napi::Value Broadcast(const Napi::CallbackInfo& info);
  Napi::Value Barrier(const Napi::CallbackInfo& info);
  Napi::Value RawAllToAllV(const Napi::CallbackInfo& info);
  // allToAllV / allGather with known receive sizes on a multi-rank group with nothing queued: started at
  // once on the JS thread where the transport can (start), on the worker thread otherwise (data).
  Napi::Value StartKnown(Napi::Env env, const Napi::Value& sendArg, const std::shared_ptr<std::vector<int64_t>>& known,
                         double timeout, const StartFn& start, const DataFn& data);
  // Creates a job's promise (JS thread); fails when the handle is closed.
  Napi::Promise Begin(Napi::Env env, GroupJob* job);
  // Hands a job to the worker thread; its promise settles through the thread-safe function.
  void Queue(Napi::Env env, std::unique_ptr<GroupJob> job);
  Napi::Value RawAllReduce(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info);
  // Runs body(env) under the addon's error guard once the group is ready (COMM_FAILED before).
  template <class F>
  Napi::Value OnReady(const Napi::CallbackInfo& info, F&& body);

  // Settles a job's promise on the JS thread (called through the thread-safe function).
 public:
  void FinishJob(Napi::Env env, GroupJob* job);
  // Settles a finished job's promise (JS thread).
  void Settle(Napi::Env env, std::unique_ptr<GroupJob> job);

 private:

  std::shared_ptr<comm::Group> group_;                       // JS-thread view, set once ready
  struct Slot {
    std::shared_ptr<comm::Group> group;
    std::string initError;
  };
  std::shared_ptr<Slot> workerSlot_;  // worker-thread view (the init job writes it)
  std::unique_ptr<comm::Executor> exec_;
  struct Tsfn;
  std::unique_ptr<Tsfn> tsfn_;
  int pending_ = 0;
  bool closed_ = false;
  int rank_ = -1, size_ = 0, ranksPerNode_ = 0;
  std::string kind_;
};

// One queued collective: `run` executes on the worker thread (throwing embshard::Error), `result`
// builds the resolved value on the JS thread. Owned buffers are freed with the job unless a timed-out
// request may still touch them (`leak`).
struct GroupJob {
  std::function<void(comm::Group*)> run;  // the group is null only for the init job
  bool init = false;
  std::vector<std::shared_ptr<void>> owned;  // buffers a timed-out request may still touch
  std::function<Napi::Value(Napi::Env)> result;
  std::vector<Napi::Reference<Napi::Value>> keep;
  std::string code, message;
  bool failed = false;
  bool leak = false;
  std::unique_ptr<Napi::Promise::Deferred> deferred;
  GroupWrap* owner = nullptr;
  void Keep(Napi::Value v) { keep.push_back(Napi::Persistent(v)); }
};


}  // namespace embshard::addon
