// output_pool.h — the addon's one pool of buffers handed to JS without a copy: engine outputs and the
// receive buffers of collectives. They are left uninitialised (kernels and transports write every
// element) and come back to the pool either when JS releases them explicitly (release(): the
// ArrayBuffer is detached, so JS can no longer reach the memory) or when they are garbage-collected.
// A loop that releases its outputs reuses the same few buffers and never pays page faults; a fresh
// large buffer is mapped with huge pages, so a miss costs a few faults rather than thousands.
#pragma once
#include <napi.h>

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>
#include <unordered_map>
#include <utility>
#include <vector>

namespace embshard::addon {

class OutputPool {
 public:
  // One per buffer adopted by JS; `released` is set when it came back through release(), so the
  // finalizer that runs later (at garbage collection) knows the memory is no longer its to return.
  struct Adopted {
    size_t n;
    bool released = false;
  };

  static OutputPool& get() {
    static OutputPool* p = new OutputPool();  // never destroyed: finalizers may run at teardown
    return *p;
  }
  float* take(size_t n) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (size_t i = free_.size(); i-- > 0;)  // the most recently returned first: its lines may still be cached
        if (free_[i].second == n) {
          float* p = free_[i].first;
          cached_ -= n * 4;
          free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
          return p;
        }
    }
    return allocate(n);
  }
  // A buffer of at least `bytes` (the best fit within 2x of the request, else a fresh one), for sizes
  // that vary from call to call (receive buffers of collectives); its capacity in floats goes to `cap`.
  float* take_at_least(size_t bytes, size_t& cap) {
    const size_t want = (bytes + 3) / 4 > 0 ? (bytes + 3) / 4 : 1;
    {
      std::lock_guard<std::mutex> lk(mu_);
      size_t best = free_.size();
      for (size_t i = 0; i < free_.size(); ++i)
        if (free_[i].second >= want && free_[i].second <= 2 * want && (best == free_.size() || free_[i].second < free_[best].second))
          best = i;
      if (best < free_.size()) {
        float* p = free_[best].first;
        cap = free_[best].second;
        cached_ -= cap * 4;
        free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(best));
        return p;
      }
    }
    cap = want;
    return allocate(want);
  }
  void give(float* p, size_t n) {
    std::lock_guard<std::mutex> lk(mu_);
    give_locked(p, n);
  }

  Adopted* adopted(float* p, size_t n) {
    auto* a = new Adopted{n};
    std::lock_guard<std::mutex> lk(mu_);
    live_[p] = a;
    return a;
  }
  // The garbage collector dropped the buffer's ArrayBuffer.
  void finalize(float* p, Adopted* a) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!a->released) {
        auto it = live_.find(p);
        if (it != live_.end() && it->second == a) live_.erase(it);
        give_locked(p, a->n);
      }
    }
    delete a;
  }
  // JS handed the buffer back; false when `p` is not a live buffer of this pool.
  bool release(float* p) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = live_.find(p);
    if (it == live_.end()) return false;
    it->second->released = true;
    give_locked(p, it->second->n);
    live_.erase(it);
    return true;
  }

 private:
  // Keeps the buffer that just came back, unmapping the least recently returned ones when the pool is
  // over its count or byte limit: the buffers a training loop uses every step stay mapped (and
  // faulted in), whatever else passed through the pool before.
  void give_locked(float* p, size_t n) {
    if (n * 4 > kMaxBytes) {
      release_memory(p, n);
      return;
    }
    size_t drop = 0;
    size_t bytes = cached_ + n * 4;
    while (drop < free_.size() && (free_.size() - drop >= kMaxBuffers || bytes > kMaxBytes)) {
      bytes -= free_[drop].second * 4;
      release_memory(free_[drop].first, free_[drop].second);
      ++drop;
    }
    free_.erase(free_.begin(), free_.begin() + static_cast<std::ptrdiff_t>(drop));
    free_.emplace_back(p, n);
    cached_ = bytes;
  }

  // Large outputs get their own 2 MiB-aligned mapping with transparent huge pages: a fresh buffer then
  // faults in a few huge pages instead of thousands of small ones.
  static constexpr size_t kHuge = size_t(2) << 20;
  static size_t mapped_bytes(size_t n) { return (n * 4 + kHuge - 1) & ~(kHuge - 1); }
  static float* allocate(size_t n) {
    if (n * 4 < kHuge) return static_cast<float*>(::operator new(n * 4));
    const size_t bytes = mapped_bytes(n);
    // over-map by 2 MiB so the buffer can start on a huge-page boundary
    void* raw = ::mmap(nullptr, bytes + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) throw std::bad_alloc();
    const uintptr_t base = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t aligned = (base + kHuge - 1) & ~(kHuge - 1);
    if (aligned > base) ::munmap(raw, aligned - base);
    const uintptr_t end = base + bytes + kHuge;
    if (end > aligned + bytes) ::munmap(reinterpret_cast<void*>(aligned + bytes), end - aligned - bytes);
#ifdef MADV_HUGEPAGE
    ::madvise(reinterpret_cast<void*>(aligned), bytes, MADV_HUGEPAGE);
#endif
    return reinterpret_cast<float*>(aligned);
  }
  static void release_memory(float* p, size_t n) {
    if (n * 4 < kHuge) ::operator delete(p);
    else ::munmap(p, mapped_bytes(n));
  }

  static constexpr size_t kMaxBuffers = 16;
  static constexpr size_t kMaxBytes = size_t(512) << 20;
  std::mutex mu_;
  std::vector<std::pair<float*, size_t>> free_;
  std::unordered_map<float*, Adopted*> live_;  // buffers JS holds now
  size_t cached_ = 0;
};

// An owned output buffer until it is adopted by JS.
class OutBuf {
 public:
  OutBuf() = default;
  explicit OutBuf(size_t n) : p_(n ? OutputPool::get().take(n) : nullptr), n_(n) {}
  ~OutBuf() {
    if (p_) OutputPool::get().give(p_, n_);
  }
  OutBuf(OutBuf&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  OutBuf& operator=(OutBuf&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  float* data() const { return p_; }
  size_t size() const { return n_; }
  explicit operator bool() const { return p_ != nullptr || n_ == 0; }

  // Hands the memory to a JS Float32Array; it returns to the pool on release() or when collected.
  Napi::Float32Array adopt(Napi::Env env) {
    size_t n = n_;
    if (n == 0) return Napi::Float32Array::New(env, 0);
    float* p = std::exchange(p_, nullptr);
    n_ = 0;
    OutputPool::Adopted* a = OutputPool::get().adopted(p, n);
    Napi::ArrayBuffer ab = Napi::ArrayBuffer::New(
        env, p, n * 4,
        [](Napi::Env, void* data, OutputPool::Adopted* hint) { OutputPool::get().finalize(static_cast<float*>(data), hint); }, a);
    return Napi::Float32Array::New(env, n, ab, 0);
  }

 private:
  float* p_ = nullptr;
  size_t n_ = 0;
};

// Returns the memory of an ArrayBuffer that holds a live pool buffer to the pool and detaches it; false
// (and nothing done) for buffers embshard did not make. Marking the buffer released and detaching its
// ArrayBuffer happen together on this (the JS) thread, so no JS code can reach the memory once the pool
// reuses it.
inline bool release_buffer(Napi::ArrayBuffer ab) {
  if (ab.IsDetached() || ab.ByteLength() == 0) return false;
  if (!OutputPool::get().release(static_cast<float*>(ab.Data()))) return false;
  ab.Detach();
  return true;
}

// Releases every typed array of `arrays` that holds a live pool buffer (release_buffer); returns how many.
inline uint32_t release_outputs(Napi::Env env, const Napi::Array& arrays) {
  uint32_t released = 0;
  for (uint32_t i = 0; i < arrays.Length(); ++i) {
    Napi::Value v = arrays.Get(i);
    if (v.IsTypedArray() && release_buffer(v.As<Napi::TypedArray>().ArrayBuffer())) ++released;
  }
  return released;
}

}  // namespace embshard::addon
