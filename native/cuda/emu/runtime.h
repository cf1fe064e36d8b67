// runtime.h — the CUDA runtime API for the emulator: one emulated device whose memory is host memory
// (cudaMalloc hands out tracked, 256-byte aligned host allocations filled with 0xff bytes — NaN as
// fp32, as real device memory is never zeroed), pinned memory, streams and events as in-order host
// queues that run each operation when it is enqueued, copies and memsets that check their device
// pointers against the tracked allocations, and errors as cudaError_t with the same names, values and
// per-host-thread "last error" as the real runtime. Only what the kernels and engines of this project
// call is here.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "asan.h"

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorInsufficientDriver = 35,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchFailure = 719,
  cudaErrorCompatNotSupportedOnDevice = 804,
};
using cudaError = cudaError_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

enum cudaDeviceAttr {
  cudaDevAttrMaxThreadsPerBlock = 1,
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrMemoryClockRate = 36,
  cudaDevAttrGlobalMemoryBusWidth = 37,
};

constexpr unsigned cudaStreamDefault = 0, cudaStreamNonBlocking = 1;
constexpr unsigned cudaEventDefault = 0, cudaEventBlockingSync = 1, cudaEventDisableTiming = 2;

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;
  int warpSize;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  int major, minor;
  int multiProcessorCount;
};

struct cudaFuncAttributes {
  size_t sharedSizeBytes;
  int maxThreadsPerBlock;
  int numRegs;
};

namespace embshard::emu {

// What the emulated device reports.
constexpr int kRuntimeVersion = 13000;
constexpr uint64_t kDeviceMemory = 64ull << 20;  // small on purpose: "60 % of the device" tests stay quick
constexpr size_t kMaxSharedPerBlock = 48 << 10;
constexpr const char* kDeviceName = "embshard CUDA emulator (CPU)";

// A stream's work runs when it is enqueued, except behind an operation that cannot finish yet (an
// emulated NCCL operation waiting for its peers, nccl.h): such an operation and everything enqueued after
// it wait in `pending`, in order, and run as cudaStreamQuery / cudaStreamSynchronize find it ready.
// A step returns true once it has finished. A stream is driven by one host thread at a time.
struct Stream {
  unsigned flags = 0;
  std::deque<std::function<bool()>> pending;
};

// Runs the stream's waiting steps in order; true when none is left.
inline bool progress(Stream* s) {
  while (!s->pending.empty()) {
    if (!s->pending.front()()) return false;
    s->pending.pop_front();
  }
  return true;
}
// Enqueues a step: it runs now when nothing waits ahead of it (the null stream never waits).
inline void enqueue(Stream* s, std::function<bool()> step) {
  if (!s || progress(s)) {
    if (step() || !s) return;
  }
  s->pending.push_back(std::move(step));
}
// Blocks the host until the stream has nothing waiting (cudaStreamSynchronize).
inline void drain(Stream* s) {
  while (s && !progress(s)) std::this_thread::sleep_for(std::chrono::microseconds(50));
}
struct Event {
  unsigned flags = 0;
  bool recorded = false;
  std::chrono::steady_clock::time_point at{};
};

inline cudaError_t& last_error() {
  static thread_local cudaError_t e = cudaSuccess;
  return e;
}
// Records a failure as the last error (as the runtime does) and returns it.
inline cudaError_t fail(cudaError_t e) {
  if (e != cudaSuccess) last_error() = e;
  return e;
}

// Streams and events are plain host objects.
template <typename H>
cudaError_t create_handle(H** out, unsigned flags) {
  *out = new H;
  (*out)->flags = flags;
  return cudaSuccess;
}
template <typename H>
cudaError_t destroy_handle(H* h) {
  if (!h) return fail(cudaErrorInvalidResourceHandle);
  delete h;
  return cudaSuccess;
}

// Every live device / pinned allocation, by start address, for pointer checks and cudaMemGetInfo.
class Memory {
 public:
  static Memory& get() {
    static Memory m;
    return m;
  }
  void* alloc(size_t bytes, bool pinned) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!pinned && bytes > kDeviceMemory - used_) return nullptr;
    const size_t rounded = (bytes + 255) & ~size_t(255);
    void* p = std::aligned_alloc(256, rounded);
    if (!p) return nullptr;
    std::memset(p, 0xff, bytes);
#if defined(EMBSHARD_EMU_ASAN)
    __asan_poison_memory_region(static_cast<char*>(p) + bytes, rounded - bytes);  // past the array: reported
#endif
    live_[reinterpret_cast<uintptr_t>(p)] = Block{bytes, pinned};
    if (!pinned) used_ += bytes;
    return p;
  }
  bool free(void* p, bool pinned) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(reinterpret_cast<uintptr_t>(p));
    if (it == live_.end() || it->second.pinned != pinned) return false;
    if (!pinned) used_ -= it->second.bytes;
    live_.erase(it);
    std::free(p);
    return true;
  }
  // cudaMalloc / cudaMallocHost: *p = a new allocation, or cudaErrorMemoryAllocation.
  cudaError_t alloc_into(void** p, size_t bytes, bool pinned) {
    *p = alloc(bytes, pinned);
    return *p ? cudaSuccess : fail(cudaErrorMemoryAllocation);
  }
  // cudaFree / cudaFreeHost: null is a no-op; anything but a live allocation of that kind is cudaErrorInvalidValue.
  cudaError_t free_of(void* p, bool pinned) { return !p || free(p, pinned) ? cudaSuccess : fail(cudaErrorInvalidValue); }
  // True when [p, p + bytes) lies inside one live device allocation.
  bool is_device(const void* p, size_t bytes) const {
    std::lock_guard<std::mutex> lock(mu_);
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    auto it = live_.upper_bound(a);
    if (it == live_.begin()) return false;
    --it;
    return !it->second.pinned && a + bytes <= it->first + it->second.bytes;
  }
  uint64_t used() const {
    std::lock_guard<std::mutex> lock(mu_);
    return used_;
  }

 private:
  struct Block {
    size_t bytes;
    bool pinned;
  };
  mutable std::mutex mu_;
  std::map<uintptr_t, Block> live_;
  uint64_t used_ = 0;
};

inline int& current_device() {
  static thread_local int d = 0;
  return d;
}

}  // namespace embshard::emu

using cudaStream_t = embshard::emu::Stream*;
using cudaEvent_t = embshard::emu::Event*;

inline const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorCompatNotSupportedOnDevice: return "cudaErrorCompatNotSupportedOnDevice";
  }
  return "cudaErrorUnknown";
}
inline const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    default: return cudaGetErrorName(e);
  }
}
inline cudaError_t cudaGetLastError() {
  const cudaError_t e = embshard::emu::last_error();
  embshard::emu::last_error() = cudaSuccess;
  return e;
}
inline cudaError_t cudaPeekAtLastError() { return embshard::emu::last_error(); }

// ---- device ---------------------------------------------------------------------------------------
inline cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = embshard::emu::kRuntimeVersion;
  return cudaSuccess;
}
inline cudaError_t cudaDriverGetVersion(int* v) {
  *v = embshard::emu::kRuntimeVersion;
  return cudaSuccess;
}
inline cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int d) {
  if (d != 0) return embshard::emu::fail(cudaErrorInvalidDevice);
  embshard::emu::current_device() = d;
  return cudaSuccess;
}
inline cudaError_t cudaGetDevice(int* d) {
  *d = embshard::emu::current_device();
  return cudaSuccess;
}
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
  if (d != 0) return embshard::emu::fail(cudaErrorInvalidDevice);
  std::memset(p, 0, sizeof(*p));
  std::snprintf(p->name, sizeof(p->name), "%s", embshard::emu::kDeviceName);
  p->totalGlobalMem = embshard::emu::kDeviceMemory;
  p->sharedMemPerBlock = embshard::emu::kMaxSharedPerBlock;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647;
  p->maxGridSize[1] = p->maxGridSize[2] = 65535;
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 1;
  return cudaSuccess;
}
// The memory clock and bus width of an H100 SXM5 (only used to report a nominal HBM peak).
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int d) {
  if (d != 0) return embshard::emu::fail(cudaErrorInvalidDevice);
  switch (a) {
    case cudaDevAttrMaxThreadsPerBlock: *v = 1024; break;
    case cudaDevAttrMultiProcessorCount: *v = 1; break;
    case cudaDevAttrMemoryClockRate: *v = 2619000; break;
    case cudaDevAttrGlobalMemoryBusWidth: *v = 5120; break;
    default: return embshard::emu::fail(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}
template <typename F>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, F*) {
  std::memset(a, 0, sizeof(*a));
  a->maxThreadsPerBlock = 1024;
  return cudaSuccess;
}
// Every operation ran when enqueued, except on streams behind a waiting NCCL operation (only the NCCL
// group's own stream, which it synchronizes itself).
inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }

// ---- memory ---------------------------------------------------------------------------------------
inline cudaError_t cudaMalloc(void** p, size_t bytes) { return embshard::emu::Memory::get().alloc_into(p, bytes, false); }
template <typename T>
cudaError_t cudaMalloc(T** p, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(p), bytes);
}
inline cudaError_t cudaFree(void* p) { return embshard::emu::Memory::get().free_of(p, false); }
inline cudaError_t cudaMallocHost(void** p, size_t bytes) { return embshard::emu::Memory::get().alloc_into(p, bytes, true); }
template <typename T>
cudaError_t cudaMallocHost(T** p, size_t bytes) {
  return cudaMallocHost(reinterpret_cast<void**>(p), bytes);
}
inline cudaError_t cudaFreeHost(void* p) { return embshard::emu::Memory::get().free_of(p, true); }
inline cudaError_t cudaMemGetInfo(size_t* freeBytes, size_t* totalBytes) {
  *totalBytes = embshard::emu::kDeviceMemory;
  *freeBytes = embshard::emu::kDeviceMemory - embshard::emu::Memory::get().used();
  return cudaSuccess;
}
// Copies check that their device side lies inside one device allocation (what would be an illegal
// address on the GPU), then run at once: the stream order is the order of the calls.
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s = nullptr) {
  if (bytes == 0) return cudaSuccess;
  const auto& m = embshard::emu::Memory::get();
  const bool dstDev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool srcDev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (kind > cudaMemcpyDefault) return embshard::emu::fail(cudaErrorInvalidMemcpyDirection);
  if ((dstDev && !m.is_device(dst, bytes)) || (srcDev && !m.is_device(src, bytes))) return embshard::emu::fail(cudaErrorInvalidValue);
  embshard::emu::enqueue(s, [=] {
    std::memmove(dst, src, bytes);
    return true;
  });
  return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  return cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
}
inline cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t s = nullptr) {
  if (bytes == 0) return cudaSuccess;
  if (!embshard::emu::Memory::get().is_device(dst, bytes)) return embshard::emu::fail(cudaErrorInvalidValue);
  embshard::emu::enqueue(s, [=] {
    std::memset(dst, value, bytes);
    return true;
  });
  return cudaSuccess;
}
inline cudaError_t cudaMemset(void* dst, int value, size_t bytes) { return cudaMemsetAsync(dst, value, bytes, nullptr); }

// ---- streams and events -----------------------------------------------------------------------------
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) { return embshard::emu::create_handle(s, flags); }
inline cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }
inline cudaError_t cudaStreamDestroy(cudaStream_t s) { return embshard::emu::destroy_handle(s); }
inline cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  embshard::emu::drain(s);
  return cudaSuccess;
}
inline cudaError_t cudaStreamQuery(cudaStream_t s) { return !s || embshard::emu::progress(s) ? cudaSuccess : cudaErrorNotReady; }
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags) { return embshard::emu::create_handle(e, flags); }
inline cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }
inline cudaError_t cudaEventDestroy(cudaEvent_t e) { return embshard::emu::destroy_handle(e); }
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr) {
  if (!e) return embshard::emu::fail(cudaErrorInvalidResourceHandle);
  embshard::emu::drain(s);  // the event's time is when the stream's earlier work has finished
  e->recorded = true;
  e->at = std::chrono::steady_clock::now();
  return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t e) { return e ? cudaSuccess : embshard::emu::fail(cudaErrorInvalidResourceHandle); }
inline cudaError_t cudaEventQuery(cudaEvent_t e) { return e ? cudaSuccess : embshard::emu::fail(cudaErrorInvalidResourceHandle); }
// Host time between the two records (the emulator's "device time" is the host's).
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  if (!a || !b || (a->flags & cudaEventDisableTiming) || (b->flags & cudaEventDisableTiming))
    return embshard::emu::fail(cudaErrorInvalidResourceHandle);
  if (!a->recorded || !b->recorded) return embshard::emu::fail(cudaErrorInvalidResourceHandle);
  *ms = std::chrono::duration<float, std::milli>(b->at - a->at).count();
  return cudaSuccess;
}
