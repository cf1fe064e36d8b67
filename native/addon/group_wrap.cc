// group_wrap.cc — the process-group handle: queueing, settling, argument checks and the collectives'
// JS signatures (see group_wrap.h).
#include "addon/group_wrap.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "addon/device_buffer.h"
#include "addon/errors.h"
#include "addon/output_pool.h"
#include "addon/registry.h"
#include "core/errors.h"

#if defined(EMBSHARD_WITH_MPI)
#include "comm/mpi/mpi_group.h"
#endif

namespace embshard::addon {

namespace {
void CallJs(Napi::Env env, Napi::Function, std::nullptr_t*, GroupJob* job);
}

struct GroupWrap::Tsfn {
  Napi::TypedThreadSafeFunction<std::nullptr_t, GroupJob, CallJs> fn;
};

namespace {

void CallJs(Napi::Env env, Napi::Function, std::nullptr_t*, GroupJob* job) {
  if (env == nullptr) return;  // the environment is going away; the job's buffers may still be in flight
  job->owner->FinishJob(env, job);
}

// One class constructor per environment (both addons may be loaded in one process).
std::mutex g_ctor_mu;
std::map<napi_env, Napi::FunctionReference*> g_ctors;

// A receive buffer from the addon's one pool (output_pool.h: a fresh multi-megabyte buffer costs page
// faults that exceed the copy itself), handed to JS as an external ArrayBuffer once the call succeeded;
// it returns to the pool on releaseBuffers() or when collected.
struct Owned {
  float* p = nullptr;
  int64_t n = 0;
  size_t cap = 0;
  bool handed = false;
  ~Owned() {
    if (p && !handed) OutputPool::get().give(p, cap);
  }
  void alloc(int64_t bytes) {
    n = bytes;
    p = OutputPool::get().take_at_least(static_cast<size_t>(bytes), cap);
  }
  // Room for every rank's bytes (a collective's receive counts).
  void alloc_for(const std::vector<int64_t>& counts) {
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    alloc(total);
  }
  Napi::ArrayBuffer hand(Napi::Env env) {
    handed = true;
    OutputPool::Adopted* a = OutputPool::get().adopted(p, cap);
    return Napi::ArrayBuffer::New(env, p, static_cast<size_t>(n), [](Napi::Env, void* d, OutputPool::Adopted* h) {
      OutputPool::get().finalize(static_cast<float*>(d), h);
    }, a);
  }
};

// releaseBuffers(...buffers: ArrayBuffer | TypedArray): gives receive buffers back for reuse now. Each
// is detached (its views read as empty from then on); buffers that did not come from the pool are left
// alone.
Napi::Value ReleaseBuffers(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  for (size_t i = 0; i < info.Length(); ++i) {
    Napi::Value v = info[i];
    if (v.IsArrayBuffer()) release_buffer(v.As<Napi::ArrayBuffer>());
    else if (v.IsTypedArray()) release_buffer(v.As<Napi::TypedArray>().ArrayBuffer());
  }
  return env.Undefined();
}

Napi::Float64Array to_f64(Napi::Env env, const std::vector<int64_t>& v) {
  auto a = Napi::Float64Array::New(env, v.size());
  for (size_t i = 0; i < v.size(); ++i) a[i] = static_cast<double>(v[i]);
  return a;
}

// Per-rank byte counts adding up to `total` (`atMost`: to at most `total`, the bytes of a device buffer).
std::vector<int64_t> byte_counts(Napi::Env env, Napi::Value v, int n, int64_t total, const char* what, bool atMost = false) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_float64_array)
    throw_error(env, "INVALID_ARGUMENT", std::string(what) + ": counts must be a Float64Array of bytes per rank");
  auto a = v.As<Napi::Float64Array>();
  if (static_cast<int>(a.ElementLength()) != n)
    throw_error(env, "LENGTH_MISMATCH",
                format("%s: counts has %zu entries; the group has %d ranks", what, a.ElementLength(), n));
  std::vector<int64_t> out(static_cast<size_t>(n));
  int64_t sum = 0;
  for (int p = 0; p < n; ++p) {
    double c = a[static_cast<size_t>(p)];
    if (!(c >= 0) || c != std::floor(c) || c > 9.0e15)
      throw_error(env, "INVALID_ARGUMENT", format("%s: counts[%d] = %g is not a non-negative integer", what, p, c));
    out[static_cast<size_t>(p)] = static_cast<int64_t>(c);
    sum += out[static_cast<size_t>(p)];
  }
  if (atMost ? sum > total : sum != total)
    throw_error(env, "LENGTH_MISMATCH", format("%s: counts add up to %lld bytes but the buffer holds %lld", what,
                                               static_cast<long long>(sum), static_cast<long long>(total)));
  return out;
}

std::vector<int64_t> prefix(const std::vector<int64_t>& c) {
  std::vector<int64_t> o(c.size(), 0);
  for (size_t i = 1; i < c.size(); ++i) o[i] = o[i - 1] + c[i - 1];
  return o;
}

}  // namespace

namespace {
void InitBuffers(Napi::Env env, Napi::Object exports) {
  exports.Set("releaseBuffers", Napi::Function::New(env, ReleaseBuffers, "releaseBuffers"));
}
Part buffersPart("group_buffers", &InitBuffers);
}  // namespace

Napi::Function GroupWrap::Constructor(Napi::Env env) {
  std::lock_guard<std::mutex> lk(g_ctor_mu);
  auto it = g_ctors.find(env);
  if (it != g_ctors.end()) return it->second->Value();
  Napi::Function cls = DefineClass(env, "NativeGroup",
                                   {
                                       InstanceMethod<&GroupWrap::Ready>("ready"),
                                       InstanceAccessor<&GroupWrap::Rank>("rank"),
                                       InstanceAccessor<&GroupWrap::Size>("size"),
                                       InstanceAccessor<&GroupWrap::RanksPerNode>("ranksPerNode"),
                                       InstanceAccessor<&GroupWrap::Kind>("kind"),
                                       InstanceMethod<&GroupWrap::AllToAllV>("allToAllV"),
                                       InstanceMethod<&GroupWrap::AllGather>("allGather"),
                                       InstanceMethod<&GroupWrap::AllReduce>("allReduce"),
                                       InstanceMethod<&GroupWrap::AllReduceDevice>("allReduceDevice"),
                                       InstanceMethod<&GroupWrap::AllToAllDevice>("allToAllDevice"),
                                       InstanceMethod<&GroupWrap::AllGatherDevice>("allGatherDevice"),
                                       InstanceMethod<&GroupWrap::Broadcast>("broadcast"),
                                       InstanceMethod<&GroupWrap::Barrier>("barrier"),
                                       InstanceMethod<&GroupWrap::RawAllToAllV>("rawAllToAllV"),
                                       InstanceMethod<&GroupWrap::RawAllReduce>("rawAllReduce"),
                                       InstanceMethod<&GroupWrap::Close>("close"),
                                   });
  auto* ref = new Napi::FunctionReference(Napi::Persistent(cls));
  g_ctors[env] = ref;
  env.AddCleanupHook([env, ref]() {
    std::lock_guard<std::mutex> lk2(g_ctor_mu);
    g_ctors.erase(env);
    delete ref;
  });
  return cls;
}

// The handle is constructed empty from C++ only (Create fills it in).
GroupWrap::GroupWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<GroupWrap>(info) {
  workerSlot_ = std::make_shared<Slot>();
  exec_ = std::make_unique<comm::Executor>();
  tsfn_ = std::make_unique<Tsfn>();
}

// Jobs hold the handle alive, so it is collected with jobs pending only when the environment is torn
// down: break the group so the worker finishes at once; Node closes the thread-safe function itself.
GroupWrap::~GroupWrap() {
  if (pending_ > 0 && workerSlot_->group) workerSlot_->group->abort("the JS environment is shutting down");
  exec_->shutdown();
}

namespace {
// Runs a job against `group` and records its failure, if any, in the job (worker thread, or the JS thread
// for a one-rank group).
void run_job(GroupJob* job, comm::Group* group, std::string* initError) {
  const uint64_t abandoned = group ? group->abandoned() : 0;
  try {
    if (!group && !job->init) fail("COMM_FAILED", "the process group could not be created: %s", initError->c_str());
    job->run(group);
  } catch (const embshard::Error& e) {
    job->failed = true;
    job->code = e.code();
    job->message = e.what();
    if (job->init) *initError = e.what();
  } catch (const std::bad_alloc&) {
    job->failed = true;
    job->code = "ALLOC_FAILED";
    job->message = "out of memory";
  } catch (const std::exception& e) {
    job->failed = true;
    job->code = "INTERNAL";
    job->message = e.what();
  }
  // A request left in flight (timed out, or abandoned when the group broke, e.g. closed under it) may still
  // be read or written by the transport: leak what it references.
  if (job->failed && (job->code == "COMM_TIMEOUT" || (group && group->abandoned() != abandoned))) job->leak = true;
}
}  // namespace

Napi::Promise GroupWrap::Begin(Napi::Env env, GroupJob* job) {
  if (closed_) throw_error(env, "COMM_FAILED", format("rank %d: the process group is closed", rank_));
  job->deferred = std::make_unique<Napi::Promise::Deferred>(Napi::Promise::Deferred::New(env));
  job->owner = this;
  job->Keep(Value());
  return job->deferred->Promise();
}

Napi::Promise GroupWrap::Submit(Napi::Env env, std::unique_ptr<GroupJob> job) {
  Napi::Promise p = Begin(env, job.get());
  // A one-rank group has no peer to wait for: with nothing queued before it, an in-process or MPI
  // collective is a local copy, run here and settled at once (no hop to the worker thread and back).
  if (!job->init && size_ == 1 && pending_ == 0 && group_ && kind_ != "nccl") {
    run_job(job.get(), group_.get(), &workerSlot_->initError);
    Settle(env, std::move(job));
    return p;
  }
  Queue(env, std::move(job));
  return p;
}

void GroupWrap::Queue(Napi::Env env, std::unique_ptr<GroupJob> job) {
  // A thread-safe function exists only while jobs are pending, so an idle handle keeps neither the
  // event loop alive nor anything for environment teardown to close.
  if (pending_++ == 0)
    tsfn_->fn = Napi::TypedThreadSafeFunction<std::nullptr_t, GroupJob, CallJs>::New(env, "embshard-group", 0, 1);
  GroupJob* raw = job.release();
  auto slot = workerSlot_;
  auto fn = tsfn_->fn;
  exec_->post([raw, slot, fn] {
    run_job(raw, slot->group.get(), &slot->initError);
    fn.BlockingCall(raw);
  });
}

void GroupWrap::FinishJob(Napi::Env env, GroupJob* job) {
  std::unique_ptr<GroupJob> owned(job);
  if (--pending_ == 0) tsfn_->fn.Release();
  Settle(env, std::move(owned));
}

void GroupWrap::Settle(Napi::Env env, std::unique_ptr<GroupJob> job) {
  if (job->leak) {
    for (auto& r : job->keep) r.SuppressDestruct();
    new std::vector<std::shared_ptr<void>>(std::move(job->owned));  // deliberately never freed
  }
  if (job->failed) {
    job->deferred->Reject(make_error(env, job->code, job->message).Value());
    return;
  }
  try {
    job->deferred->Resolve(job->result ? job->result(env) : env.Undefined());
  } catch (const Napi::Error& e) {
    job->deferred->Reject(e.Value());
  } catch (const embshard::Error& e) {
    job->deferred->Reject(make_error(env, e.code(), e.what()).Value());
  }
}

Napi::Object GroupWrap::Create(Napi::Env env, std::shared_ptr<comm::Group> group,
                               std::function<std::shared_ptr<comm::Group>()> init) {
  Napi::Object obj = Constructor(env).New({});
  GroupWrap* w = Unwrap(obj);
  auto job = std::make_unique<GroupJob>();
  job->init = true;
  auto adopt = [w](const std::shared_ptr<comm::Group>& g) {
    w->group_ = g;
    w->rank_ = g->rank();
    w->size_ = g->size();
    w->ranksPerNode_ = g->ranks_per_node();
    w->kind_ = g->kind();
  };
  if (group) {
    // nothing to set up: ready at once
    w->workerSlot_->group = group;
    adopt(group);
    auto ready = Napi::Promise::Deferred::New(env);
    ready.Resolve(env.Undefined());
    obj.Set("_ready", ready.Promise());
    return obj;
  }
  auto slot = w->workerSlot_;
  job->run = [slot, init](comm::Group*) { slot->group = init(); };
  job->result = [w, adopt](Napi::Env e) {
    adopt(w->workerSlot_->group);
    return e.Undefined();
  };
  obj.Set("_ready", w->Submit(env, std::move(job)));
  return obj;
}

Napi::Value GroupWrap::Ready(const Napi::CallbackInfo& info) { return Value().Get("_ready"); }
Napi::Value GroupWrap::Rank(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), rank_); }
Napi::Value GroupWrap::Size(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), size_); }
Napi::Value GroupWrap::RanksPerNode(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), ranksPerNode_);
}
Napi::Value GroupWrap::Kind(const Napi::CallbackInfo& info) { return Napi::String::New(info.Env(), kind_); }

template <class F>
Napi::Value GroupWrap::OnReady(const Napi::CallbackInfo& info, F&& body) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    if (!group_) throw_error(env, "COMM_FAILED", "the process group is not ready (await ready())");
    return body(env);
  });
}

namespace {
// recvBytes: null, or a Float64Array of the bytes every rank sends here (known to the caller).
std::shared_ptr<std::vector<int64_t>> known_counts(Napi::Env env, Napi::Value v, int n, const char* what) {
  if (v.IsUndefined() || v.IsNull()) return nullptr;
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_float64_array)
    throw_error(env, "INVALID_ARGUMENT", std::string(what) + ": recvCounts must be a Float64Array of bytes per rank");
  auto a = v.As<Napi::Float64Array>();
  int64_t total = 0;
  for (size_t i = 0; i < a.ElementLength(); ++i) total += static_cast<int64_t>(a[i]);
  return std::make_shared<std::vector<int64_t>>(byte_counts(env, v, n, total, what));
}

// A collective whose receive size varies: the per-rank byte counts (`known`, or `counts` on the worker
// thread), a pooled buffer of their total, then `data` into it; resolves to { data, counts }.
using CountsFn = std::function<void(comm::Group*, int64_t* recvBytes, const comm::Deadline&)>;
// The resolved value of a collective that received `recv`: { data: ArrayBuffer, counts: Float64Array }.
std::function<Napi::Value(Napi::Env)> received(std::shared_ptr<Owned> recv, std::shared_ptr<std::vector<int64_t>> counts) {
  return [recv, counts](Napi::Env e) -> Napi::Value {
    Napi::Object o = Napi::Object::New(e);
    o.Set("data", recv->hand(e));
    o.Set("counts", to_f64(e, *counts));
    return o;
  };
}

std::unique_ptr<GroupJob> varying_receive(int size, std::shared_ptr<std::vector<int64_t>> known, double timeout,
                                          CountsFn counts, DataFn data) {
  auto job = std::make_unique<GroupJob>();
  auto recv = std::make_shared<Owned>();
  auto recvBytes = known ? known : std::make_shared<std::vector<int64_t>>(static_cast<size_t>(size));
  job->owned.push_back(recv);
  const bool exchange = !known;
  job->run = [recv, recvBytes, timeout, exchange, counts, data](comm::Group* g) {
    auto d = comm::Deadline::after(timeout);
    if (exchange) counts(g, recvBytes->data(), d);
    recv->alloc_for(*recvBytes);
    data(g, reinterpret_cast<uint8_t*>(recv->p), *recvBytes, d);
  };
  job->result = received(recv, recvBytes);
  return job;
}
}  // namespace

// allToAllV(send: TypedArray, sendBytes: Float64Array, timeoutMs, recvBytes?: Float64Array)
//   -> { data: ArrayBuffer, counts: Float64Array }
// Two phases on the worker thread: the per-peer byte counts (skipped when the caller knows them), then
// the data into a fresh buffer.
Napi::Value GroupWrap::AllToAllV(const Napi::CallbackInfo& info) {
  return OnReady(info, [&](Napi::Env env) -> Napi::Value {
    Bytes send = typed_bytes(env, info[0], "allToAllV: send");
    auto sendBytes = byte_counts(env, info[1], size_, send.size, "allToAllV");
    double timeout = timeout_arg(env, info[2], "allToAllV");
    auto known = known_counts(env, info[3], size_, "allToAllV");
    DataFn data = [send, sendBytes](comm::Group* g, uint8_t* recv, const std::vector<int64_t>& recvBytes, const comm::Deadline& d) {
      auto so = prefix(sendBytes), ro = prefix(recvBytes);
      g->all_to_all_v(send.data, sendBytes.data(), so.data(), recv, recvBytes.data(), ro.data(), d);
    };
    if (known && size_ > 1 && pending_ == 0)
      return StartKnown(
          env, info[0], known, timeout,
          [send, sendBytes, known](comm::Group* g, uint8_t* recv) {
            auto so = prefix(sendBytes), ro = prefix(*known);
            return g->start_all_to_all_v(send.data, sendBytes.data(), so.data(), recv, known->data(), ro.data());
          },
          data);
    auto job = varying_receive(
        size_, known, timeout,
        [sendBytes](comm::Group* g, int64_t* recvBytes, const comm::Deadline& d) {
          g->exchange_counts(sendBytes.data(), recvBytes, d);
        },
        data);
    job->Keep(info[0]);
    return Submit(env, std::move(job));
  });
}

// Known receive sizes, several ranks, nothing queued: the collective starts here, on the JS thread, where
// the transport can start it without blocking (MPI). If it completes within kInlineSpin of polling (peers
// that are already in the call, small messages) the promise settles at once; otherwise the worker thread
// waits for it. Either way no hand-off delays the start, and calls stay in order (a later call queues
// behind this one). Transports that cannot start without blocking run `data` on the worker thread.
Napi::Value GroupWrap::StartKnown(Napi::Env env, const Napi::Value& sendArg, const std::shared_ptr<std::vector<int64_t>>& known,
                                  double timeout, const StartFn& start, const DataFn& data) {
  constexpr auto kInlineSpin = std::chrono::microseconds(100);
  auto job = std::make_unique<GroupJob>();
  auto recv = std::make_shared<Owned>();
  job->owned.push_back(recv);
  job->result = received(recv, known);
  job->Keep(sendArg);
  Napi::Promise p = Begin(env, job.get());
  const auto d = comm::Deadline::after(timeout);
  std::shared_ptr<comm::Started> started;
  bool done = false;
  job->run = [&](comm::Group* g) {
    recv->alloc_for(*known);
    started = start(g, reinterpret_cast<uint8_t*>(recv->p));
    if (!started) return;
    const auto until = comm::Clock::now() + kInlineSpin;
    do done = started->test();
    while (!done && comm::Clock::now() < until);
  };
  run_job(job.get(), group_.get(), &workerSlot_->initError);
  if (job->failed || done) {
    Settle(env, std::move(job));
    return p;
  }
  if (started) {
    // the request (and the layout MPI reads while it runs) lives as long as the job's buffers
    job->owned.push_back(started);
    job->run = [started, d](comm::Group*) { started->wait(d); };
  } else {
    job->run = [recv, known, data, d](comm::Group* g) { data(g, reinterpret_cast<uint8_t*>(recv->p), *known, d); };
  }
  Queue(env, std::move(job));
  return p;
}

// allGather(send: TypedArray, timeoutMs, recvBytes?: Float64Array) -> { data: ArrayBuffer, counts: Float64Array }:
// every rank's contribution in rank order (sizes may differ: counts first unless known, then data).
Napi::Value GroupWrap::AllGather(const Napi::CallbackInfo& info) {
  return OnReady(info, [&](Napi::Env env) -> Napi::Value {
    Bytes send = typed_bytes(env, info[0], "allGather: send");
    double timeout = timeout_arg(env, info[1], "allGather");
    auto known = known_counts(env, info[2], size_, "allGather");
    if (known && (*known)[static_cast<size_t>(rank_)] != send.size)
      throw_error(env, "LENGTH_MISMATCH", "allGather: recvCounts[rank] differs from this rank's contribution");
    DataFn data = [send](comm::Group* g, uint8_t* recv, const std::vector<int64_t>& recvBytes, const comm::Deadline& d) {
      g->all_gather_v(send.data, send.size, recv, recvBytes.data(), d);
    };
    if (known && size_ > 1 && pending_ == 0)
      return StartKnown(
          env, info[0], known, timeout,
          [send, known](comm::Group* g, uint8_t* recv) { return g->start_all_gather_v(send.data, send.size, recv, known->data()); },
          data);
    auto job = varying_receive(
        size_, known, timeout,
        [send](comm::Group* g, int64_t* recvBytes, const comm::Deadline& d) { g->gather_counts(send.size, recvBytes, d); },
        data);
    job->Keep(info[0]);
    return Submit(env, std::move(job));
  });
}

// allReduce(data: TypedArray, elemType: 'f32'|'f64'|'i32'|'i64', op: 'sum'|'max'|'min', timeoutMs,
// deterministic: boolean), in place.
Napi::Value GroupWrap::AllReduce(const Napi::CallbackInfo& info) {
  return OnReady(info, [&](Napi::Env env) -> Napi::Value {
    Bytes data = typed_bytes(env, info[0], "allReduce: data");
    if (!info[1].IsString() || !info[2].IsString())
      throw_error(env, "INVALID_ARGUMENT", "allReduce: elemType and op must be strings");
    comm::ElemType t = comm::parse_elem_type(info[1].As<Napi::String>().Utf8Value());
    if (t == comm::ElemType::U16) throw_error(env, "UNSUPPORTED_DTYPE", "allReduce: u16 values are moved by collectives, never reduced");
    comm::ReduceOp op = comm::parse_reduce_op(info[2].As<Napi::String>().Utf8Value());
    double timeout = timeout_arg(env, info[3], "allReduce");
    if (!info[4].IsBoolean()) throw_error(env, "INVALID_ARGUMENT", "allReduce: deterministic must be a boolean");
    const bool deterministic = info[4].As<Napi::Boolean>().Value();
    if (data.size % static_cast<int64_t>(comm::elem_size(t)) != 0)
      throw_error(env, "LENGTH_MISMATCH", "allReduce: the data's byte length is not a whole number of elements");
    auto job = std::make_unique<GroupJob>();
    job->Keep(info[0]);
    int64_t count = data.size / static_cast<int64_t>(comm::elem_size(t));
    job->run = [data, count, t, op, deterministic, timeout](comm::Group* g) {
      g->all_reduce(data.data, count, t, op, deterministic, comm::Deadline::after(timeout));
    };
    return Submit(env, std::move(job));
  });
}

// allReduceDevice(buffer: a device buffer (device_buffer.h), op, timeoutMs): the default all-reduce in place
// on device memory; BACKEND_UNAVAILABLE unless the group's transport reads device memory (NCCL).
Napi::Value GroupWrap::AllReduceDevice(const Napi::CallbackInfo& info) {
  return OnReady(info, [&](Napi::Env env) -> Napi::Value {
    DeviceBuffer b = read_device_buffer(env, info[0], "allReduceDevice: buffer");
    if (b.type == comm::ElemType::U16) throw_error(env, "UNSUPPORTED_DTYPE", "allReduceDevice: u16 values are moved by collectives, never reduced");
    if (!info[1].IsString()) throw_error(env, "INVALID_ARGUMENT", "allReduceDevice: op must be a string");
    comm::ReduceOp op = comm::parse_reduce_op(info[1].As<Napi::String>().Utf8Value());
    double timeout = timeout_arg(env, info[2], "allReduceDevice");
    auto job = std::make_unique<GroupJob>();
    job->Keep(info[0]);  // holds the buffer's owner, so the memory lives until the call settles
    job->run = [b, op, timeout](comm::Group* g) {
      g->all_reduce_device(b.ptr, b.count, b.type, op, b.device, comm::Deadline::after(timeout));
    };
    return Submit(env, std::move(job));
  });
}

namespace {
// The send and receive buffers of a device collective: device buffers on one device, on a group whose
// transport reads device memory (`kind` NCCL; BACKEND_UNAVAILABLE otherwise).
std::pair<DeviceBuffer, DeviceBuffer> device_pair(Napi::Env env, const std::string& kind, const Napi::Value& send, const Napi::Value& recv,
                                                  const char* what) {
  if (kind != "nccl")
    throw_error(env, "BACKEND_UNAVAILABLE", format("%s needs a group whose transport reads device memory (NCCL); this is a %s group", what, kind.c_str()));
  DeviceBuffer s = read_device_buffer(env, send, (std::string(what) + ": send").c_str());
  DeviceBuffer r = read_device_buffer(env, recv, (std::string(what) + ": recv").c_str());
  if (s.device != r.device)
    throw_error(env, "INVALID_ARGUMENT", format("%s: send is on cuda:%d, recv on cuda:%d", what, s.device, r.device));
  return {s, r};
}

int64_t total_of(const std::vector<int64_t>& bytes) {
  int64_t total = 0;
  for (int64_t b : bytes) total += b;
  return total;
}

// Receive counts that arrived from the peers must fit the receive buffer; otherwise this rank cannot take
// the data: LENGTH_MISMATCH here, and the group breaks (peers fail at their deadline).
void check_fits(comm::Group* g, const std::vector<int64_t>& recvBytes, int64_t capacity, const char* what) {
  const int64_t total = total_of(recvBytes);
  if (total <= capacity) return;
  std::string msg = format("rank %d: %s: the peers send %lld bytes, the receive buffer holds %lld", g->rank(), what,
                           static_cast<long long>(total), static_cast<long long>(capacity));
  g->abort(msg);
  throw Error("LENGTH_MISMATCH", msg);
}

// A device collective's data phase into `recv` once the receive counts are known.
using DeviceDataFn = std::function<void(comm::Group*, const std::vector<int64_t>& recvBytes, const comm::Deadline&)>;

// The job of a device collective: both buffers held (their JS objects and their memory) until it settles;
// the receive counts `known` by the caller (checked against `recv` here, before anything moves) or taken by
// `counts` on the worker thread (checked there); then `data`. Resolves to the bytes from each rank.
std::unique_ptr<GroupJob> device_job(Napi::Env env, const Napi::CallbackInfo& info, const DeviceBuffer& send, const DeviceBuffer& recv,
                                     int size, std::shared_ptr<std::vector<int64_t>> known, double timeout, const char* what,
                                     CountsFn counts, DeviceDataFn data) {
  if (known && total_of(*known) > recv.bytes())
    throw_error(env, "LENGTH_MISMATCH", format("%s: recvCounts add up to %lld bytes, the receive buffer holds %lld", what,
                                               static_cast<long long>(total_of(*known)), static_cast<long long>(recv.bytes())));
  auto recvBytes = known ? known : std::make_shared<std::vector<int64_t>>(static_cast<size_t>(size));
  auto job = std::make_unique<GroupJob>();
  job->Keep(info[0]);
  job->Keep(info[2]);
  job->owned.push_back(send.hold);
  job->owned.push_back(recv.hold);
  const bool exchange = !known;
  const int64_t capacity = recv.bytes();
  job->run = [recvBytes, exchange, capacity, timeout, what, counts, data](comm::Group* g) {
    auto d = comm::Deadline::after(timeout);
    if (exchange) {
      counts(g, recvBytes->data(), d);
      check_fits(g, *recvBytes, capacity, what);
    }
    data(g, *recvBytes, d);
  };
  job->result = [recvBytes](Napi::Env e) -> Napi::Value { return to_f64(e, *recvBytes); };
  return job;
}
}  // namespace

// allToAllDevice(send, sendBytes: Float64Array, recv, timeoutMs, recvBytes?: Float64Array) -> Float64Array
// (bytes received from each rank): sendBytes[p] bytes of `send` (consecutive, rank order, from its start)
// to every rank p, what every rank sends here into `recv` from its start, in rank order; both device
// buffers (device_buffer.h) on the group's device. Without recvBytes the counts are exchanged first.
// BACKEND_UNAVAILABLE unless the group's transport reads device memory (NCCL).
Napi::Value GroupWrap::AllToAllDevice(const Napi::CallbackInfo& info) {
  return OnReady(info, [&](Napi::Env env) -> Napi::Value {
    auto [send, recv] = device_pair(env, kind_, info[0], info[2], "allToAllDevice");
    auto sendBytes = std::make_shared<std::vector<int64_t>>(byte_counts(env, info[1], size_, send.bytes(), "allToAllDevice: sendCounts", true));
    double timeout = timeout_arg(env, info[3], "allToAllDevice");
    auto known = known_counts(env, info[4], size_, "allToAllDevice");
    auto job = device_job(
        env, info, send, recv, size_, known, timeout, "allToAllDevice",
        [sendBytes](comm::Group* g, int64_t* recvBytes, const comm::Deadline& d) { g->exchange_counts(sendBytes->data(), recvBytes, d); },
        [send = send, recv = recv, sendBytes](comm::Group* g, const std::vector<int64_t>& recvBytes, const comm::Deadline& d) {
          auto so = prefix(*sendBytes), ro = prefix(recvBytes);
          g->all_to_all_v_device(static_cast<const uint8_t*>(send.ptr), sendBytes->data(), so.data(), static_cast<uint8_t*>(recv.ptr),
                                 recvBytes.data(), ro.data(), send.device, d);
        });
    return Submit(env, std::move(job));
  });
}

// allGatherDevice(send, bytes, recv, timeoutMs, recvBytes?: Float64Array) -> Float64Array (bytes from each
// rank): the first `bytes` of every rank's `send`, concatenated in rank order into `recv` from its start;
// device buffers on the group's device. Without recvBytes the sizes are gathered first.
Napi::Value GroupWrap::AllGatherDevice(const Napi::CallbackInfo& info) {
  return OnReady(info, [&](Napi::Env env) -> Napi::Value {
    auto [send, recv] = device_pair(env, kind_, info[0], info[2], "allGatherDevice");
    const int64_t bytes = int_arg(env, info[1], "allGatherDevice: bytes", 0, send.bytes());
    double timeout = timeout_arg(env, info[3], "allGatherDevice");
    auto known = known_counts(env, info[4], size_, "allGatherDevice");
    if (known && (*known)[static_cast<size_t>(rank_)] != bytes)
      throw_error(env, "LENGTH_MISMATCH", format("allGatherDevice: recvCounts[%d] = %lld bytes, but this rank sends %lld", rank_,
                                                 static_cast<long long>((*known)[static_cast<size_t>(rank_)]), static_cast<long long>(bytes)));
    auto job = device_job(
        env, info, send, recv, size_, known, timeout, "allGatherDevice",
        [bytes](comm::Group* g, int64_t* recvBytes, const comm::Deadline& d) { g->gather_counts(bytes, recvBytes, d); },
        [send = send, recv = recv, bytes](comm::Group* g, const std::vector<int64_t>& recvBytes, const comm::Deadline& d) {
          g->all_gather_v_device(static_cast<const uint8_t*>(send.ptr), bytes, static_cast<uint8_t*>(recv.ptr), recvBytes.data(), send.device, d);
        });
    return Submit(env, std::move(job));
  });
}

// broadcast(data: TypedArray, root, timeoutMs), in place.
Napi::Value GroupWrap::Broadcast(const Napi::CallbackInfo& info) {
  return OnReady(info, [&](Napi::Env env) -> Napi::Value {
    Bytes data = typed_bytes(env, info[0], "broadcast: data");
    if (!info[1].IsNumber()) throw_error(env, "INVALID_ARGUMENT", "broadcast: root must be a rank number");
    double r = info[1].As<Napi::Number>().DoubleValue();
    if (!(r >= 0 && r < size_ && r == std::floor(r)))
      throw_error(env, "INVALID_ARGUMENT", format("broadcast: root must be an integer in [0, %d) (got %g)", size_, r));
    int root = static_cast<int>(r);
    double timeout = timeout_arg(env, info[2], "broadcast");
    auto job = std::make_unique<GroupJob>();
    job->Keep(info[0]);
    job->run = [data, root, timeout](comm::Group* g) {
      g->broadcast(data.data, data.size, root, comm::Deadline::after(timeout));
    };
    return Submit(env, std::move(job));
  });
}

Napi::Value GroupWrap::Barrier(const Napi::CallbackInfo& info) {
  return OnReady(info, [&](Napi::Env env) -> Napi::Value {
    double timeout = timeout_arg(env, info[0], "barrier");
    auto job = std::make_unique<GroupJob>();
    job->run = [timeout](comm::Group* g) { g->barrier(comm::Deadline::after(timeout)); };
    return Submit(env, std::move(job));
  });
}

#if defined(EMBSHARD_WITH_MPI)
namespace {
// The MPI group behind a handle, for the benchmark references; other groups reject with BACKEND_UNAVAILABLE.
std::shared_ptr<comm::MpiGroup> mpi_reference(Napi::Env env, const std::shared_ptr<comm::Group>& g, const std::string& kind,
                                              const char* what) {
  auto mpi = std::dynamic_pointer_cast<comm::MpiGroup>(g);
  if (!mpi) throw_error(env, "BACKEND_UNAVAILABLE", std::string(what) + " is the MPI group's reference; this group is " + kind);
  return mpi;
}
// A job that runs `call` on the worker thread, timed around it, and resolves to its seconds.
std::unique_ptr<GroupJob> timed_job(std::function<void()> call) {
  auto job = std::make_unique<GroupJob>();
  auto secs = std::make_shared<double>(0);
  job->run = [call, secs](comm::Group*) {
    auto t0 = comm::Clock::now();
    call();
    *secs = std::chrono::duration<double>(comm::Clock::now() - t0).count();
  };
  job->result = [secs](Napi::Env e) -> Napi::Value { return Napi::Number::New(e, *secs); };
  return job;
}
}  // namespace
#endif

// rawAllToAllV(send, sendBytes: Float64Array, recv, recvBytes: Float64Array) -> Promise<seconds>: the
// MPI group's plain blocking MPI_Alltoallv of the same layout, timed around the MPI call only (the
// benchmark's reference). Other groups reject with BACKEND_UNAVAILABLE.
Napi::Value GroupWrap::RawAllToAllV(const Napi::CallbackInfo& info) {
  return OnReady(info, [&](Napi::Env env) -> Napi::Value {
#if defined(EMBSHARD_WITH_MPI)
    auto mpi = mpi_reference(env, group_, kind_, "rawAllToAllV");
    Bytes send = typed_bytes(env, info[0], "rawAllToAllV: send");
    auto sendBytes = byte_counts(env, info[1], size_, send.size, "rawAllToAllV");
    Bytes recv = typed_bytes(env, info[2], "rawAllToAllV: recv");
    auto recvBytes = byte_counts(env, info[3], size_, recv.size, "rawAllToAllV");
    auto so = prefix(sendBytes), ro = prefix(recvBytes);
    auto job = timed_job([mpi, send, sendBytes, so, recv, recvBytes, ro] {
      mpi->raw_all_to_all_v(send.data, sendBytes.data(), so.data(), recv.data, recvBytes.data(), ro.data());
    });
    job->Keep(info[0]);
    job->Keep(info[2]);
    return Submit(env, std::move(job));
#else
    throw_error(env, "BACKEND_UNAVAILABLE", "rawAllToAllV needs the MPI group, which this build does not have");
#endif
  });
}

// rawAllReduce(data: Float32Array) -> Promise<seconds>: the MPI group's plain blocking MPI_Allreduce (sum,
// in place), timed around the MPI call only (the benchmark's reference). Other groups reject with
// BACKEND_UNAVAILABLE.
Napi::Value GroupWrap::RawAllReduce(const Napi::CallbackInfo& info) {
  return OnReady(info, [&](Napi::Env env) -> Napi::Value {
#if defined(EMBSHARD_WITH_MPI)
    auto mpi = mpi_reference(env, group_, kind_, "rawAllReduce");
    float* data = typed_array<float>(env, info[0], napi_float32_array, "rawAllReduce: data", 0);
    const int64_t n = static_cast<int64_t>(info[0].As<Napi::TypedArray>().ElementLength());
    auto job = timed_job([mpi, data, n] { mpi->raw_all_reduce(data, n); });
    job->Keep(info[0]);
    return Submit(env, std::move(job));
#else
    throw_error(env, "BACKEND_UNAVAILABLE", "rawAllReduce needs the MPI group, which this build does not have");
#endif
  });
}

// close(reason?): no further calls; pending and peers' collectives fail instead of waiting (where the
// transport can tell them: the in-process group can, MPI peers time out).
Napi::Value GroupWrap::Close(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (closed_) return env.Undefined();
  closed_ = true;
  std::string why = info[0].IsString() ? info[0].As<Napi::String>().Utf8Value() : std::string("closed");
  if (group_ && (pending_ > 0 || std::string(group_->kind()) == "inprocess")) group_->abort(why);
  return env.Undefined();
}

}  // namespace embshard::addon
